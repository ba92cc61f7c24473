"""``room serve --database postgresql://…`` for real (docs/storage.md): a server process on the
tests' private PostgreSQL, a person signing in, creating a project and chatting over a real
WebSocket (acks, a second person live, the lead agent's answer, history), then the server
restarted on the same database (the reload: everything there, seq going on)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import quote

import psycopg
import pytest

from tests.support.server import ServerProcess, Session
from tests.support.wsclient import subscribed

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("clients")]


def pg_server(data: Path, dsn: str, **env: str) -> ServerProcess:
    return ServerProcess(data, env={"ROOM_DATABASE_URL": dsn, **env}).start()


def sign_in(server: ServerProcess) -> Session:
    """The owner, through the one-time link the server printed (``room login-link`` would need
    the database URL in this process's environment)."""
    return server.login(server.login_url.rsplit("/", 1)[-1])


def send_frame(project: int, body: str, txn: str | None = None) -> dict[str, Any]:
    txn = txn or uuid.uuid4().hex
    return {"type": "send", "project_id": project, "client_txn_id": txn, "body": body}


async def test_serve_on_postgresql_chats_and_keeps_it_across_a_restart(
    tmp_path: Path, pg_dsn: str
) -> None:
    # The cluster trusts 127.0.0.1: a password is accepted and ignored, and must appear nowhere.
    pg_dsn = pg_dsn.replace("://room@", "://room:s3cret@")
    server = pg_server(tmp_path / "data", pg_dsn, ROOM_READER_THREADS="3")
    try:
        # The connection limit is a setting: a writer, reader_threads readers and the search
        # indexer (the index lives in the same database), no more.
        with psycopg.connect(pg_dsn) as conn:
            names = conn.execute(
                "SELECT application_name, count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND application_name LIKE 'room%%'"
                " GROUP BY application_name ORDER BY 1"
            ).fetchall()
        assert names == [("room-reader", 3), ("room-search-indexer", 1), ("room-writer", 1)]
        health = server.get_json("/healthz")
        assert health["database"]["backend"] == "postgresql"
        assert health["database"]["version"].split(".")[0].isdigit()
        report = json.loads((tmp_path / "data" / "boot-report.json").read_text())
        assert report["database"]["backend"] == "postgresql"
        assert report["settings"]["database_url"].startswith("postgresql://room:***@")
        assert "s3cret" not in (tmp_path / "data" / "boot-report.json").read_text()
        assert "s3cret" not in (tmp_path / "data" / "boot-trace.jsonl").read_text()

        owner = sign_in(server)
        status, created = server.request(
            "POST", "/api/projects", {"name": "库上项目"}, headers=owner.headers
        )
        assert status == 201, created
        project = int(created["project"]["id"])
        guest = server.invite(owner, project, "wang", "小王")

        a = await subscribed(server, owner.cookie, project)
        b = await subscribed(server, guest.cookie, project)
        acks = []
        for i in range(3):
            await a.send(send_frame(project, f"@wang 第{i}条"))
            acks.append(await a.wait_for("ack"))
        seqs = [ack["seq"] for ack in acks]
        assert seqs == list(range(seqs[0], seqs[0] + 3))
        seen = [await b.wait_for("message") for _ in range(3)]
        assert [m["message"]["body"] for m in seen] == [f"@wang 第{i}条" for i in range(3)]
        assert [m["seq"] for m in seen] == seqs

        # A retransmit is acknowledged with the original, not stored twice.
        txn = uuid.uuid4().hex
        await a.send(send_frame(project, "@wang 只一次", txn))
        first = await a.wait_for("ack")
        await a.send(send_frame(project, "@wang 只一次", txn))
        again = await a.wait_for("ack")
        assert again["duplicate"] is True and again["seq"] == first["seq"]

        # A message with no mention goes to the lead, whose offline route answers.
        await b.send(send_frame(project, "在吗"))
        asked = (await b.wait_for("ack"))["seq"]
        answer = await a.wait_for(lambda f: f["type"] == "message" and f["seq"] > asked, timeout=20)
        members = server.get_json(f"/api/projects/{project}", cookie=owner.cookie)["members"]
        lead = next(m for m in members if m["kind"] == "agent")
        assert answer["message"]["author_id"] == lead["id"], answer

        await a.send({"type": "history", "project_id": project, "limit": 50, "req_id": "h"})
        history = await a.wait_for("history")
        bodies = [m["body"] for m in history["messages"]]
        assert bodies.count("@wang 只一次") == 1 and "@wang 第0条" in bodies and "在吗" in bodies
        assert bodies[-1] == answer["message"]["body"] and "在吗" in bodies[-1]
        last_seq = history["messages"][-1]["seq"]
        # Search on the same database: the server's indexer has indexed what was just sent.
        status, found = server.request(
            "GET", f"/api/projects/{project}/search?q={quote('只一次')}", cookie=owner.cookie
        )
        assert status == 200, found
        assert [r["seq"] for r in found["results"]] == [
            m["seq"] for m in history["messages"] if m["body"] == "@wang 只一次"
        ]
        a.drop()
        b.drop()
    finally:
        server.stop()

    with psycopg.connect(pg_dsn) as conn:
        row = conn.execute("SELECT last_seq FROM projects WHERE id = %s", (project,)).fetchone()
    assert row is not None
    head_seq = row[0]
    # The reload: a new process on the same database finds everything and goes on.
    again_server = pg_server(tmp_path / "data", pg_dsn)
    try:
        owner = sign_in(again_server)
        c = await subscribed(again_server, owner.cookie, project, since=0)
        await c.send({"type": "history", "project_id": project, "limit": 50, "req_id": "r"})
        reloaded = await c.wait_for("history")
        assert [m["body"] for m in reloaded["messages"]] == bodies
        await c.send(send_frame(project, "@wang 重启之后"))
        ack = await c.wait_for("ack")
        # The project's seq goes on from its last event (a thread's summary update on a root,
        # message_updated, takes a seq too: the last message's is not always the last).
        assert ack["seq"] == head_seq + 1 and ack["seq"] > last_seq
        c.drop()
    finally:
        again_server.stop()
    with psycopg.connect(pg_dsn) as conn:
        seq_rows = conn.execute(
            "SELECT seq FROM events WHERE project_id = %s ORDER BY seq", (project,)
        ).fetchall()
    assert [s for (s,) in seq_rows] == list(range(1, len(seq_rows) + 1))
