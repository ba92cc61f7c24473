"""Several writers on one PostgreSQL database (docs/storage.md, "Several writers"): two server
processes (each its own data folder) serving the same project, with WebSocket senders and
readers on both. Every reader sees the project's seq rise by exactly one, whichever process
committed the event; a retransmit that reaches the other process is acknowledged as the
original (never stored twice); the table's seqs are gap-free and each txn is stored once."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import anyio
import psycopg
import pytest

from tests.support.server import ServerProcess, Session
from tests.support.wsclient import Client, subscribed

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("clients")]

SENDS_PER_SERVER = 40
NOT_STREAM = {"ack", "history", "subscribed", "batch", "hello", "error"}


def sign_in(server: ServerProcess) -> Session:
    return server.login(server.login_url.rsplit("/", 1)[-1])


def stream_seqs(client: Client) -> list[int]:
    """The seqs of the project events a client received, in the order it received them."""
    return [f["seq"] for f in client.frames if f.get("type") not in NOT_STREAM and "seq" in f]


def send_frame(project: int, body: str, txn: str) -> dict[str, Any]:
    return {"type": "send", "project_id": project, "client_txn_id": txn, "body": body}


async def burst(client: Client, project: int, prefix: str, count: int) -> dict[str, int]:
    """``count`` sends without waiting in between, then their acks: txn → seq."""
    txns = [f"{prefix}-{i}-{uuid.uuid4().hex[:6]}" for i in range(count)]
    for txn in txns:
        await client.send(send_frame(project, f"{prefix} {txn}", txn))
    acks: dict[str, int] = {}
    while len(acks) < count:
        ack = await client.wait_for("ack", timeout=20)
        acks[ack["client_txn_id"]] = ack["seq"]
    return acks


async def test_two_servers_on_one_database_keep_one_gap_free_stream(
    tmp_path: Path, pg_dsn: str
) -> None:
    # Started together on an empty database: one migrates and seeds, the other waits for it
    # (advisory locks) and finds the owner and the one demo project.
    a, b = (ServerProcess(tmp_path / n, env={"ROOM_DATABASE_URL": pg_dsn}) for n in "ab")
    async with anyio.create_task_group() as tg:
        tg.start_soon(anyio.to_thread.run_sync, a.start)
        tg.start_soon(anyio.to_thread.run_sync, b.start)
    try:
        on_a, on_b = sign_in(a), sign_in(b)
        project = int(a.get_json("/api/me", cookie=on_a.cookie)["projects"][0]["id"])
        assert [p["id"] for p in b.get_json("/api/me", cookie=on_b.cookie)["projects"]] == [project]
        # The demo's echo lead would answer on whichever server dispatches it: paused (a
        # roster change made on A, which B's cached roster must not miss).
        members = a.get_json(f"/api/projects/{project}", cookie=on_a.cookie)["members"]
        lead = next(m["id"] for m in members if m["handle"] == "lead")
        status, _ = a.request(
            "POST", f"/api/projects/{project}/members/{lead}/pause", {}, headers=on_a.headers
        )
        assert status == 200

        readers = [
            await subscribed(a, on_a.cookie, project),
            await subscribed(b, on_b.cookie, project),
        ]
        heads = [r.frames[-1].get("head_seq") for r in readers]
        send_a = await subscribed(a, on_a.cookie, project)
        send_b = await subscribed(b, on_b.cookie, project)
        acked: dict[str, int] = {}
        async with anyio.create_task_group() as tg:

            async def run(client: Client, prefix: str) -> None:
                acked.update(await burst(client, project, prefix, SENDS_PER_SERVER))

            tg.start_soon(run, send_a, "A")
            tg.start_soon(run, send_b, "B")

        # A retransmit reaching the other server: the original's ack, nothing stored.
        txn = uuid.uuid4().hex
        await send_a.send(send_frame(project, "一次就好", txn))
        first = await send_a.wait_for("ack")
        assert first["duplicate"] is False
        await send_b.send(send_frame(project, "一次就好", txn))
        again = await send_b.wait_for("ack")
        assert (again["duplicate"], again["seq"], again["message_id"]) == (
            True, first["seq"], first["message_id"],
        )  # fmt: skip

        # The same txn reaching both servers at once: one stores it, the other acknowledges it.
        both = uuid.uuid4().hex
        await send_a.send(send_frame(project, "同时到达", both))
        await send_b.send(send_frame(project, "同时到达", both))
        pair = [await send_a.wait_for("ack"), await send_b.wait_for("ack")]
        assert sorted(ack["duplicate"] for ack in pair) == [False, True]
        assert pair[0]["seq"] == pair[1]["seq"] == first["seq"] + 1

        top = first["seq"] + 1
        assert sorted(acked.values()) == sorted(set(acked.values()))  # no seq acked twice
        for client, head in zip(readers, heads, strict=True):
            with anyio.fail_after(20):
                while not stream_seqs(client) or stream_seqs(client)[-1] < top:
                    await client.recv(timeout=20)
            seqs = stream_seqs(client)
            # Exactly one higher each time, from just after the head it subscribed at.
            assert seqs == list(range(seqs[0], top + 1)), seqs
            assert head is None or seqs[0] == head + 1
            for client in (send_a, send_b):
                client.drop()
        for reader in readers:
            reader.drop()
    finally:
        a.stop()
        b.stop()

    with psycopg.connect(pg_dsn) as conn:
        rows = conn.execute(
            "SELECT seq, client_txn_id FROM messages WHERE project_id = %s ORDER BY seq",
            (project,),
        ).fetchall()
    seqs = [seq for seq, _ in rows]
    assert seqs == list(range(1, len(seqs) + 1))
    stored = [t for _, t in rows if t is not None]
    assert len(stored) == len(set(stored))
    assert set(acked) | {txn, both} <= set(stored)
    assert {t: s for s, t in rows if t in acked} == acked
