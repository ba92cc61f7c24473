"""Agent deliveries across nodes whose links fail at the wrong moment (docs/cluster.md, "Agents
across nodes"): two room servers on one private PostgreSQL and one private nats-server, the
demo project's home on node A, its lead answering on the offline ``builtin/echo`` route.

* A's PostgreSQL link cut right after the commit that opened the lead's turn (the proxy drops
  the ``COMMIT``'s answer): the turn is in the database, ``running`` on A, but A never heard
  it was opened. Once the link is back A settles it (as a restart would) and the lead answers,
  once, instead of the member staying blocked behind a turn nobody runs.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

import anyio
import psycopg
import pytest

from tests.support.cluster import WAIT, Node, first_project, make_node
from tests.support.nats import NatsServer

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.slow,
    pytest.mark.timeout(180),  # two nodes started one after the other on 2 shared cores
    pytest.mark.usefixtures("clients"),
]

LEASE_SECS = "3"  # the sweep that settles and dispatches runs every second


async def two_nodes(tmp_path: Path, dsn: str, nats: NatsServer) -> tuple[Node, Node]:
    a, b = (make_node(tmp_path / n, dsn, nats) for n in "ab")
    for node in (a, b):
        node.server.env["ROOM_LEASE_SECS"] = LEASE_SECS
    try:
        await anyio.to_thread.run_sync(a.start)  # the demo project's home
        await anyio.to_thread.run_sync(b.start)
    except BaseException:
        a.stop()
        b.stop()
        raise
    return a, b


def lead_of(node: Node, project: int) -> int:
    members = node.server.get_json(f"/api/projects/{project}", cookie=node.owner.cookie)["members"]
    return int(next(m["id"] for m in members if m["handle"] == "lead"))


def mention(node: Node, project: int, body: str) -> int:
    status, sent = node.server.request(
        "POST", f"/api/projects/{project}/messages",
        {"body": body, "client_txn_id": uuid.uuid4().hex}, headers=node.owner.headers,
    )  # fmt: skip
    assert status == 201, sent
    return int(sent["message"]["id"])


def ledger(dsn: str, member: int) -> tuple[list[tuple[int, str]], list[tuple[int, str, str]]]:
    """The member's deliveries (message, state) and turns (id, state, owner)."""
    with psycopg.connect(dsn) as conn:
        deliveries = conn.execute(
            "SELECT message_id, state FROM deliveries WHERE recipient_id = %s ORDER BY id",
            (member,),
        ).fetchall()
        turns = conn.execute(
            "SELECT id, state, coalesce(owner, '') FROM turns WHERE member_id = %s ORDER BY id",
            (member,),
        ).fetchall()
    return [(int(m), str(s)) for m, s in deliveries], [(int(t), str(s), o) for t, s, o in turns]


def answers(dsn: str, member: int) -> list[int]:
    """The reply messages of the member's turns."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT reply_message_id FROM turns WHERE member_id = %s"
            " AND reply_message_id IS NOT NULL ORDER BY id",
            (member,),
        ).fetchall()
    return [int(r[0]) for r in rows]


async def until(condition: Callable[[], bool], what: Callable[[], object]) -> None:
    """Until ``condition`` holds; else fails showing ``what`` (the ledger, say)."""
    with anyio.move_on_after(WAIT):
        while True:
            if condition():
                return
            await anyio.sleep(0.2)
    assert condition(), what()


async def test_a_turn_opened_as_its_node_lost_the_database_is_settled_and_run_again(
    tmp_path: Path, pg_dsn: str, nats_server: NatsServer
) -> None:
    a, b = await two_nodes(tmp_path, pg_dsn, nats_server)
    try:
        project = first_project(a)
        lead = lead_of(a, project)
        # The turn's opening commits on the server; A's link goes before A hears of it.
        a.pg.cut_after(b"INSERT INTO turns", b"COMMIT\x00")
        first = mention(b, project, "@lead 第一个")
        await until(a.pg.is_cut, lambda: "the turn's opening never committed through A")
        deliveries, turns = ledger(pg_dsn, lead)
        assert [t[1] for t in turns] == ["running"], turns  # opened, and nobody runs it
        await anyio.sleep(1.0)
        a.pg.restore()

        def answered() -> bool:
            deliveries, turns = ledger(pg_dsn, lead)
            return [t[1] for t in turns][-1:] == ["completed"] and all(
                s == "consumed" for _, s in deliveries
            )

        await until(answered, lambda: ledger(pg_dsn, lead))
        deliveries, turns = ledger(pg_dsn, lead)
        assert [t[1] for t in turns] == ["interrupted", "completed"], turns
        assert deliveries == [(first, "consumed")]
        assert len(answers(pg_dsn, lead)) == 1  # answered once

        # And the member is not blocked: the next mention is answered too.
        second = mention(b, project, "@lead 第二个")
        await until(lambda: len(answers(pg_dsn, lead)) == 2, lambda: ledger(pg_dsn, lead))
        deliveries, turns = ledger(pg_dsn, lead)
        assert deliveries == [(first, "consumed"), (second, "consumed")]
        assert [t[1] for t in turns] == ["interrupted", "completed", "completed"], turns
    finally:
        a.stop()
        b.stop()
