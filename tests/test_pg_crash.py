"""Bad days on PostgreSQL (docs/storage.md, "Several writers" and "Bad days"): ``kill -9`` of one
of two servers in the middle of a burst loses no acknowledged message and leaves the seq
gap-free; PostgreSQL restarted in the middle of a burst is survived by the server (it
reconnects), the clients are told clearly (``database_unavailable``) and retry with the same
``client_txn_id``, and every acknowledged message is there exactly once."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import psycopg
import pytest

from tests.support.postgres import PostgresCluster, find_bin_dir
from tests.support.server import ServerProcess, Session
from tests.support.wsclient import Client

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("clients")]


def pg_server(data: Path, dsn: str) -> ServerProcess:
    return ServerProcess(data, env={"ROOM_DATABASE_URL": dsn}).start()


def sign_in(server: ServerProcess) -> Session:
    return server.login(server.login_url.rsplit("/", 1)[-1])


def stored(dsn: str, project: int) -> dict[str, int]:
    """txn → seq of the project's messages, after checking the seqs are gap-free and each txn
    is stored once."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT seq, client_txn_id FROM messages WHERE project_id = %s ORDER BY seq",
            (project,),
        ).fetchall()
    assert [seq for seq, _ in rows] == list(range(1, len(rows) + 1))
    txns = [t for _, t in rows if t is not None]
    assert len(txns) == len(set(txns))
    return {t: seq for seq, t in rows if t is not None}


def pause_lead(server: ServerProcess, owner: Session, project: int) -> None:
    members = server.get_json(f"/api/projects/{project}", cookie=owner.cookie)["members"]
    lead = next(m["id"] for m in members if m["handle"] == "lead")
    status, _ = server.request(
        "POST", f"/api/projects/{project}/members/{lead}/pause", {}, headers=owner.headers
    )
    assert status == 200


async def test_kill_9_of_one_of_two_servers_loses_no_acknowledged_message(
    tmp_path: Path, pg_dsn: str
) -> None:
    a = pg_server(tmp_path / "a", pg_dsn)
    b = pg_server(tmp_path / "b", pg_dsn)
    try:
        on_a, on_b = sign_in(a), sign_in(b)
        project = int(a.get_json("/api/me", cookie=on_a.cookie)["projects"][0]["id"])
        pause_lead(a, on_a, project)
        acked: dict[str, int] = {}
        after_kill = 0
        enough, killed = anyio.Event(), anyio.Event()

        async def sender(server: ServerProcess, session: Session, name: str) -> None:
            nonlocal after_kill
            client = await Client.open(server.ws_url, cookie=session.cookie, origin=server.origin)
            await client.wait_for("hello")
            try:
                for n in range(2_000):
                    txn = f"{name}-{n}-{uuid.uuid4().hex[:6]}"
                    await client.send(
                        {"type": "send", "project_id": project, "client_txn_id": txn, "body": txn}
                    )
                    ack = await client.wait_for("ack", timeout=10)
                    acked[ack["client_txn_id"]] = ack["seq"]
                    if len(acked) >= 200:
                        enough.set()
                    if killed.is_set():
                        after_kill += 1
                        if after_kill >= 60:
                            return
            except Exception:  # the server under this sender was killed: that is the point
                return
            finally:
                client.drop()

        async with anyio.create_task_group() as tg:
            for i in range(2):
                tg.start_soon(sender, a, on_a, f"a{i}")
                tg.start_soon(sender, b, on_b, f"b{i}")
            with anyio.fail_after(60):
                await enough.wait()
            a.kill9()
            killed.set()
        assert after_kill >= 60  # the other server went on writing the same project
        found = stored(pg_dsn, project)
        assert {txn: found.get(txn) for txn in acked} == acked  # 0 acknowledged lost

        # The killed server starts again on its folder and the same database, and goes on.
        a = pg_server(tmp_path / "a", pg_dsn)
        again = sign_in(a)
        client = await Client.open(a.ws_url, cookie=again.cookie, origin=a.origin)
        await client.wait_for("hello")
        await client.send(
            {"type": "send", "project_id": project, "client_txn_id": "after", "body": "回来了"}
        )
        ack = await client.wait_for("ack", timeout=10)
        assert ack["seq"] == max(stored(pg_dsn, project).values())
        client.drop()
    finally:
        a.stop()
        b.stop()


@pytest.fixture
def own_cluster() -> Iterator[PostgresCluster]:
    """A cluster of this test's own: it is restarted under the server's feet."""
    with PostgresCluster(find_bin_dir()) as cluster:
        with psycopg.connect(cluster.dsn("postgres"), autocommit=True) as conn:
            conn.execute("CREATE DATABASE room")
        yield cluster


async def test_postgresql_restarted_mid_burst(tmp_path: Path, own_cluster: PostgresCluster) -> None:
    dsn = own_cluster.dsn("room")
    server = pg_server(tmp_path / "data", dsn)
    try:
        owner = sign_in(server)
        project = int(server.get_json("/api/me", cookie=owner.cookie)["projects"][0]["id"])
        pause_lead(server, owner, project)
        acked: dict[str, int] = {}
        refusals: list[dict[str, Any]] = []
        enough = anyio.Event()
        per_sender = 150

        async def sender(name: str) -> None:
            client = await Client.open(server.ws_url, cookie=owner.cookie, origin=server.origin)
            await client.wait_for("hello")
            for n in range(per_sender):
                txn = f"{name}-{n}"
                frame = {"type": "send", "project_id": project, "client_txn_id": txn, "body": txn}
                with anyio.fail_after(60):
                    while True:  # a client's loop: retry the same txn until it is acknowledged
                        await client.send(frame)
                        answer = await client.wait_for(
                            lambda f: f["type"] in ("ack", "error"), timeout=30
                        )
                        if answer["type"] == "ack":
                            acked[txn] = answer["seq"]
                            break
                        refusals.append(answer)
                        await anyio.sleep(0.1)
                if len(acked) >= 100:
                    enough.set()
            client.drop()

        async with anyio.create_task_group() as tg:
            for i in range(2):
                tg.start_soon(sender, f"s{i}")
            with anyio.fail_after(60):
                await enough.wait()
            await anyio.to_thread.run_sync(own_cluster.restart)

        assert len(acked) == 2 * per_sender
        # Told clearly, never a stack trace or an internal error.
        assert refusals, "the restart went unnoticed: no send was refused while it ran"
        codes = {r["code"] for r in refusals}
        assert codes <= {"database_unavailable"}, refusals[:3]
        assert all(r["details"]["client_txn_id"] for r in refusals)
        assert stored(dsn, project) == {**stored(dsn, project), **acked}
        found = stored(dsn, project)
        assert {txn: found.get(txn) for txn in acked} == acked
        assert server.get_json("/healthz")["ok"] is True  # reconnected readers too
    finally:
        server.stop()
