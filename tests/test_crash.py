"""``kill -9`` during a burst of sends: every acknowledged message survives, seq stays gap-free."""

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path

import anyio
import pytest

from tests.support.server import ServerProcess
from tests.support.wsclient import Client

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("clients")]


async def test_kill_9_during_burst_loses_no_acknowledged_message(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data").start()
    session = server.login()
    project = server.get_json("/api/me", cookie=session.cookie)["projects"][0]["id"]
    acked: dict[str, int] = {}
    senders = 4
    enough = anyio.Event()

    async def burst(index: int) -> None:
        client = await Client.open(server.ws_url, cookie=session.cookie, origin=server.origin)
        await client.wait_for("hello")
        try:
            for n in range(10_000):
                txn = f"{index}-{n}-{uuid.uuid4().hex[:6]}"
                await client.send(
                    {"type": "send", "project_id": project, "client_txn_id": txn, "body": txn}
                )
                while True:
                    frame = await client.recv()
                    if frame["type"] == "ack":
                        acked[frame["client_txn_id"]] = frame["seq"]
                        if len(acked) >= 300:
                            enough.set()
                        break
        except Exception:  # the server died under us: that is the point
            return

    async with anyio.create_task_group() as tg:
        for i in range(senders):
            tg.start_soon(burst, i)
        await enough.wait()
        server.kill9()

    db = tmp_path / "data" / "room.sqlite"
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        rows = dict(
            conn.execute("SELECT client_txn_id, seq FROM messages WHERE project_id = ?", (project,))
        )
        # Every event's seq, gap-free: a message's, and a thread summary's update on its root
        # (message_updated) when the echo lead answers one of them.
        seqs = [s for (s,) in conn.execute(
            "SELECT seq FROM events WHERE project_id = ? ORDER BY seq", (project,)
        )]  # fmt: skip
        assert seqs == list(range(1, len(seqs) + 1))
        assert set(rows.values()) <= set(seqs)
        missing = [txn for txn in acked if txn not in rows]
        assert missing == []
        assert all(rows[txn] == seq for txn, seq in acked.items())
        head = conn.execute("SELECT last_seq FROM projects WHERE id = ?", (project,)).fetchone()[0]
        assert head == len(seqs)
        message_seqs = [s for (s,) in conn.execute(
            "SELECT seq FROM messages WHERE project_id = ? ORDER BY seq", (project,)
        )]  # fmt: skip
    finally:
        conn.close()

    # And the server starts again on the same folder, with everything there.
    again = ServerProcess(tmp_path / "data").start()
    try:
        s = again.login()
        page = again.get_json(
            f"/api/projects/{project}/messages?limit=200&before={head + 1}", cookie=s.cookie
        )
        assert [m["seq"] for m in page["messages"]] == message_seqs[-200:]
    finally:
        again.stop()
