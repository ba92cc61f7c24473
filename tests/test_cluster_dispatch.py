"""Agent deliveries across nodes whose links fail at the wrong moment (docs/cluster.md, "Agents
across nodes"): two room servers on one private PostgreSQL and one private nats-server, the
demo project's home on node A, its lead answering on the offline ``builtin/echo`` route.

* A's PostgreSQL link cut right after the commit that took the project's lease (the proxy
  drops the ``COMMIT``'s answer): the delivery stays ``pending``, and A's sweep runs it once
  the link is back.
* A's PostgreSQL link cut right after the commit that opened the lead's turn: the turn is in
  the database, ``running`` on A, but A never heard it was opened. Once the link is back A
  settles it (as a restart would) and the lead answers, once, instead of the member staying
  blocked behind a turn nobody runs.
* B's bus link cut, so B cannot tell whether A is up: a mention sent on B is not run on B and
  not marked ``home_node_offline``; A, which never heard B's wake, runs it from the database
  (its sweep), once. With A killed as well, the mention waits ``pending`` without a reason
  while B cannot tell, is marked ``home_node_offline`` once B's bus is back and A is not heard,
  and runs once on A when A is back.
* A killed, and started again on a slow database link while B goes on waking the lead: A opens
  no turn before its start-up reconciliation (which would settle it as a leftover while it ran
  on); every delivery is consumed by a completed turn that took it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path

import anyio
import psycopg
import pytest

from tests.support.cluster import WAIT, Node, first_project, make_node, metrics_show
from tests.support.nats import NatsServer

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.slow,
    pytest.mark.timeout(180),  # two nodes started one after the other on 2 shared cores
    pytest.mark.usefixtures("clients"),
]

LEASE_SECS = "3"  # the sweep that settles and dispatches runs every second
SLOW_LEASE_SECS = "300"  # a sweep every 100 s: none comes within a test's waits


async def two_nodes(
    tmp_path: Path, dsn: str, nats: NatsServer, lease_secs: str = LEASE_SECS
) -> tuple[Node, Node]:
    a, b = (make_node(tmp_path / n, dsn, nats) for n in "ab")
    for node in (a, b):
        node.server.env["ROOM_LEASE_SECS"] = lease_secs
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


def mention(node: Node, project: int, body: str, timeout: float = 10) -> int:
    status, sent = node.server.request(
        "POST", f"/api/projects/{project}/messages",
        {"body": body, "client_txn_id": uuid.uuid4().hex}, headers=node.owner.headers,
        timeout=timeout,
    )  # fmt: skip
    assert status == 201, sent
    return int(sent["message"]["id"])


def node_id(node: Node) -> str:
    return (node.server.data / "node-id").read_text().strip()


def reasons(dsn: str, member: int) -> list[tuple[str, str | None]]:
    """The member's deliveries: (state, reason code)."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT state, reason_code FROM deliveries WHERE recipient_id = %s ORDER BY id",
            (member,),
        ).fetchall()
    return [(str(state), None if code is None else str(code)) for state, code in rows]


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

        def answered() -> bool:
            deliveries, turns = ledger(pg_dsn, lead)
            return [t[1] for t in turns][-1:] == ["completed"] and all(
                s == "consumed" for _, s in deliveries
            )

        # Before the turn: the lease taken on the server, A's link gone before A hears of it.
        # The delivery stays pending, and A's sweep dispatches it once the link is back.
        a.pg.cut_after(b"INSERT INTO leases", b"COMMIT\x00")
        first = mention(b, project, "@lead 第一个")
        await until(a.pg.is_cut, lambda: "the lease was never taken through A")
        deliveries, turns = ledger(pg_dsn, lead)
        assert (deliveries, turns) == ([(first, "pending")], [])
        await anyio.sleep(1.0)
        a.pg.restore()
        await until(answered, lambda: ledger(pg_dsn, lead))
        assert [t[1] for t in ledger(pg_dsn, lead)[1]] == ["completed"]

        # The turn's opening commits on the server; A's link goes before A hears of it.
        a.pg.cut_after(b"INSERT INTO turns", b"COMMIT\x00")
        second = mention(b, project, "@lead 第二个")
        await until(a.pg.is_cut, lambda: "the turn's opening never committed through A")
        deliveries, turns = ledger(pg_dsn, lead)
        assert [t[1] for t in turns] == ["completed", "running"], turns  # nobody runs it
        await anyio.sleep(1.0)
        a.pg.restore()
        await until(answered, lambda: ledger(pg_dsn, lead))
        deliveries, turns = ledger(pg_dsn, lead)
        assert [t[1] for t in turns] == ["completed", "interrupted", "completed"], turns
        assert deliveries == [(first, "consumed"), (second, "consumed")]
        assert len(answers(pg_dsn, lead)) == 2  # each answered once

        # And the member is not blocked: the next mention is answered too.
        third = mention(b, project, "@lead 第三个")
        await until(lambda: len(answers(pg_dsn, lead)) == 3, lambda: ledger(pg_dsn, lead))
        deliveries, turns = ledger(pg_dsn, lead)
        assert deliveries == [(first, "consumed"), (second, "consumed"), (third, "consumed")]
        assert [t[1] for t in turns] == ["completed", "interrupted", "completed", "completed"]
    finally:
        a.stop()
        b.stop()


async def test_a_wake_lost_with_a_nodes_bus_is_found_when_its_bus_is_back(
    tmp_path: Path, pg_dsn: str, nats_server: NatsServer
) -> None:
    # The periodic sweep far away: what runs the delivery is the sweep a bus's return asks for.
    a, b = await two_nodes(tmp_path, pg_dsn, nats_server, SLOW_LEASE_SECS)
    try:
        project = first_project(a)
        lead = lead_of(a, project)
        b.bus.cut()
        await metrics_show(b, "room_bus_up 0.0")
        # A is up, B cannot tell: B runs nothing and says nothing; its wake never reaches A.
        mention(b, project, "@lead 总线断了")
        await until(lambda: len(reasons(pg_dsn, lead)) == 1, lambda: reasons(pg_dsn, lead))
        await anyio.sleep(1.0)
        assert reasons(pg_dsn, lead) == [("pending", None)]
        b.bus.restore()  # its `sw`: A sweeps now and finds the delivery in the database
        await until(lambda: len(answers(pg_dsn, lead)) == 1, lambda: reasons(pg_dsn, lead))
        assert reasons(pg_dsn, lead) == [("consumed", None)]
        _, turns = ledger(pg_dsn, lead)
        assert [(t[1], t[2]) for t in turns] == [("completed", node_id(a))]  # on A, once
    finally:
        a.stop()
        b.stop()


async def test_a_node_that_cannot_hear_the_bus_says_the_home_is_offline_only_once_it_can_tell(
    tmp_path: Path, pg_dsn: str, nats_server: NatsServer
) -> None:
    a, b = await two_nodes(tmp_path, pg_dsn, nats_server)
    try:
        project = first_project(a)
        lead = lead_of(a, project)
        home = node_id(a)
        a.server.kill9()
        b.bus.cut()
        await metrics_show(b, "room_bus_up 0.0")
        mention(b, project, "@lead 主节点没了")
        await until(lambda: len(reasons(pg_dsn, lead)) == 1, lambda: reasons(pg_dsn, lead))
        await anyio.sleep(2.5)  # two of B's sweeps (lease_secs 3)
        assert reasons(pg_dsn, lead) == [("pending", None)]  # B cannot tell: it says nothing
        # B's bus back, A not heard on it for three heartbeats: now B can tell, and says so.
        b.bus.restore()
        await until(
            lambda: reasons(pg_dsn, lead) == [("pending", "home_node_offline")],
            lambda: reasons(pg_dsn, lead),
        )
        # A back: it runs the waiting delivery, once; B never ran one.
        await anyio.to_thread.run_sync(a.restart)
        await until(lambda: len(answers(pg_dsn, lead)) == 1, lambda: reasons(pg_dsn, lead))
        assert [state for state, _ in reasons(pg_dsn, lead)] == ["consumed"]
        _, turns = ledger(pg_dsn, lead)
        assert [(t[1], t[2]) for t in turns] == [("completed", home)]
    finally:
        a.stop()
        b.stop()


async def test_a_node_starting_again_opens_no_turn_before_it_settled_the_old_ones(
    tmp_path: Path, pg_dsn: str, nats_server: NatsServer
) -> None:
    # A dead home's mentions wait; A starts again on a slow database link (each of its start-up
    # steps a few round trips) while B goes on waking the lead over the bus. A turn A opened
    # on such a wake before its start-up reconciliation was settled by it (``interrupted``,
    # its deliveries pending again and unbound) and then ran on, consuming them unbound.
    a, b = await two_nodes(tmp_path, pg_dsn, nats_server)
    try:
        project = first_project(a)
        lead = lead_of(a, project)
        a.server.kill9()
        sent = [mention(b, project, f"@lead 等主节点回来 {n}") for n in range(5)]
        a.pg.delay(0.02)
        starting = True

        async def keep_waking() -> None:
            n = 0
            while starting:
                # B's send waits while A's start-up holds the project's row on its slow link.
                wake = partial(mention, b, project, f"@lead 唤醒 {n}", 60)
                sent.append(await anyio.to_thread.run_sync(wake))
                n += 1
                await anyio.sleep(0.1)

        async with anyio.create_task_group() as tg:
            tg.start_soon(keep_waking)
            try:
                await anyio.to_thread.run_sync(a.restart)
            finally:
                starting = False
        a.pg.restore()

        def settled() -> bool:
            deliveries, _ = ledger(pg_dsn, lead)
            return len(deliveries) == len(sent) and all(s == "consumed" for _, s in deliveries)

        await until(settled, lambda: ledger(pg_dsn, lead))
        with psycopg.connect(pg_dsn) as conn:
            unbound = conn.execute(
                "SELECT d.id, d.turn_id, t.state FROM deliveries d"
                " LEFT JOIN turns t ON t.id = d.turn_id"
                " WHERE d.recipient_id = %s AND (t.id IS NULL OR t.state <> 'completed')",
                (lead,),
            ).fetchall()
            # Each taken in by one turn (the transcript keeps a settled turn's, superseded):
            # the killed A ran none of them, so none was settled as a leftover.
            taken = conn.execute(
                "SELECT e.delivery_id, count(DISTINCT e.turn_id) FROM transcript_entries e"
                " JOIN deliveries d ON d.id = e.delivery_id WHERE d.recipient_id = %s"
                " GROUP BY e.delivery_id HAVING count(DISTINCT e.turn_id) <> 1",
                (lead,),
            ).fetchall()
        assert unbound == [], (unbound, ledger(pg_dsn, lead))
        assert taken == [], (taken, ledger(pg_dsn, lead))
    finally:
        a.stop()
        b.stop()
