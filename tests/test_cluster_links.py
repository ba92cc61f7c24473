"""One node's links cut or delayed (docs/cluster.md, "Tests"): two room servers on one private
PostgreSQL and one private nats-server, node A's links to both through a TCP proxy
(tests/support/proxy.py) that cuts, delays and restores them while node B's stay up.

* A's PostgreSQL link cut: A's sends are refused with a structured ``database_unavailable``
  error naming their ``client_txn_id``, nothing of them is stored (no message without its event,
  no seq taken), B goes on, and once the link is back A writes and relays again on its own.
* A's NATS link cut: A serves on the database poll (its clients see B's events in order), and
  once the link is back the bus carries A's events to B again; A's events of the cut reach B
  when A's bus comes back, not a minute later at B's long poll.
* A's NATS link delayed: hints arrive late, and the sequencer still gives every client every
  event once, in order.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from pathlib import Path

import anyio
import psycopg
import pytest
from websockets.exceptions import InvalidStatus

from tests.support.cluster import (
    WAIT,
    first_project,
    make_node,
    metrics_show,
    pause_lead,
    send_one,
    send_some,
    start_nodes,
    stored_log,
    stream_seqs,
    until_seq,
)
from tests.support.llm_servers import TEST_API_KEY, OpenAIServer, openai_text
from tests.support.nats import NatsServer
from tests.support.wsclient import Client, subscribed

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.slow,
    pytest.mark.timeout(180),  # two nodes started one after the other on 2 shared cores
    pytest.mark.usefixtures("clients"),
]


async def test_a_nodes_database_link_cut_fails_its_sends_cleanly_and_it_recovers_alone(
    tmp_path: Path, pg_dsn: str, nats_server: NatsServer
) -> None:
    a, b = await start_nodes(tmp_path, pg_dsn, nats_server, 2)
    try:
        project = first_project(a)
        pause_lead(a, project)
        reader_a = await subscribed(a.server, a.owner.cookie, project)
        reader_b = await subscribed(b.server, b.owner.cookie, project)
        start = stream_seqs(reader_b)[0] if stream_seqs(reader_b) else None
        sender_a = await subscribed(a.server, a.owner.cookie, project)
        sender_b = await subscribed(b.server, b.owner.cookie, project)
        acked = await send_some(sender_a, project, "a-before", 5)
        acked += await send_some(sender_b, project, "b-before", 5)
        await until_seq(reader_a, acked[-1])

        a.pg.cut()
        refused: list[str] = []
        for n in range(5):
            txn = f"a-cut-{n}-{uuid.uuid4().hex[:6]}"
            answer = await send_one(sender_a, project, txn)
            assert answer["type"] == "error", answer
            assert answer["code"] == "database_unavailable", answer
            assert answer["details"]["client_txn_id"] == txn
            refused.append(txn)

        # Over HTTP too: a structured refusal, never a stack trace.
        def post() -> tuple[int, object]:
            body = {"body": "http", "client_txn_id": "a-http"}
            path = f"/api/projects/{project}/messages"
            return a.server.request("POST", path, body, headers=a.owner.headers)

        status, body = await anyio.to_thread.run_sync(post)
        assert isinstance(body, dict) and body["error"]["code"] == "database_unavailable", body
        assert status == 503  # a load balancer may try another node
        # A new socket on A is refused at its handshake the same way (its session cannot be
        # checked): its client goes to another node or tries again.
        with pytest.raises(InvalidStatus) as refused_socket:
            await Client.open(a.server.ws_url, cookie=a.owner.cookie, origin=a.server.origin)
        assert refused_socket.value.response.status_code == 503
        # B is not affected: it writes, and its subscribers get everything in order.
        acked += await send_some(sender_b, project, "b-during", 10)
        seqs = await until_seq(reader_b, acked[-1])
        assert seqs == list(range(seqs[0], acked[-1] + 1)), seqs
        # Nothing of A's refused sends is stored, and no seq was taken for them.
        found = stored_log(pg_dsn, project)
        assert not set(refused) & set(found)
        assert "a-http" not in found

        a.pg.restore()
        # A recovers by itself: the same txns are taken now (the writer reconnects).
        with anyio.fail_after(WAIT):
            for txn in refused:
                while (answer := await send_one(sender_a, project, txn))["type"] != "ack":
                    assert answer["code"] == "database_unavailable", answer
                    await anyio.sleep(0.2)
                acked.append(int(answer["seq"]))
        acked += await send_some(sender_b, project, "b-after", 3)
        acked += await send_some(sender_a, project, "a-after", 3)
        # A's reader, which stayed subscribed through the cut, and B's have everything, once
        # each and in order.
        for reader in (reader_a, reader_b):
            seqs = await until_seq(reader, acked[-1])
            assert seqs == list(range(seqs[0], acked[-1] + 1)), seqs
        assert start is None or stream_seqs(reader_b)[0] == start
        found = stored_log(pg_dsn, project)
        assert {found[t] for t in refused} <= set(acked)
        assert sorted(acked) == list(range(acked[0], acked[-1] + 1))
        assert a.server.get_json("/healthz")["ok"] is True
        late = await subscribed(a.server, a.owner.cookie, project, since=acked[-1])
        late.drop()
        for client in (reader_a, reader_b, sender_a, sender_b):
            client.drop()
    finally:
        a.stop()
        b.stop()


async def test_a_nodes_bus_link_cut_falls_back_to_the_poll_and_rejoins_the_bus(
    tmp_path: Path, pg_dsn: str, nats_server: NatsServer
) -> None:
    a, b = await start_nodes(tmp_path, pg_dsn, nats_server, 2)
    try:
        project = first_project(a)
        pause_lead(a, project)
        reader_a = await subscribed(a.server, a.owner.cookie, project)
        reader_b = await subscribed(b.server, b.owner.cookie, project)
        sender_a = await subscribed(a.server, a.owner.cookie, project)
        sender_b = await subscribed(b.server, b.owner.cookie, project)
        await metrics_show(a, "room_bus_peers 1.0")
        acked = await send_some(sender_b, project, "b-before", 5)
        await until_seq(reader_a, acked[-1])

        a.bus.cut()
        await metrics_show(a, "room_bus_up 0.0")
        # A's clients still get B's events, in order: A polls the database while its bus is
        # down (B's hints do not reach it).
        acked += await send_some(sender_b, project, "b-during", 10)
        seqs = await until_seq(reader_a, acked[-1])
        assert seqs == list(range(seqs[0], acked[-1] + 1)), seqs
        # A's own events of the cut: B's bus is up (its poll is a minute away) and A's hints
        # are not sent; B has them once A's bus is back.
        acked += await send_some(sender_a, project, "a-during", 5)

        a.bus.restore()
        await metrics_show(a, "room_bus_up 1.0")
        seqs = await until_seq(reader_b, acked[-1])
        assert seqs == list(range(seqs[0], acked[-1] + 1)), seqs
        # The bus carries A's events again (B's long poll is a minute away).
        acked += await send_some(sender_a, project, "a-after", 5)
        for reader in (reader_a, reader_b):
            seqs = await until_seq(reader, acked[-1])
            assert seqs == list(range(seqs[0], acked[-1] + 1)), seqs
        await metrics_show(b, "room_bus_peers 1.0")
        stored_log(pg_dsn, project)
        for client in (reader_a, reader_b, sender_a, sender_b):
            client.drop()
    finally:
        a.stop()
        b.stop()


async def test_a_delayed_bus_link_keeps_every_clients_stream_whole_and_in_order(
    tmp_path: Path, pg_dsn: str, nats_server: NatsServer
) -> None:
    a, b = await start_nodes(tmp_path, pg_dsn, nats_server, 2)
    try:
        project = first_project(a)
        pause_lead(a, project)
        readers = [
            await subscribed(node.server, node.owner.cookie, project) for node in (a, b, a, b)
        ]
        sender_a = await subscribed(a.server, a.owner.cookie, project)
        sender_b = await subscribed(b.server, b.owner.cookie, project)
        await metrics_show(a, "room_bus_peers 1.0")

        a.bus.delay(0.3)  # A's hints reach B late, B's reach A late
        acked: list[int] = []

        async def burst(sender: object, prefix: str) -> None:
            acked.extend(await send_some(sender, project, prefix, 15))  # type: ignore[arg-type]

        async with anyio.create_task_group() as tg:  # both nodes write at once
            tg.start_soon(burst, sender_a, "a-slow")
            tg.start_soon(burst, sender_b, "b-slow")
        top = max(acked)
        for reader in readers:
            seqs = await until_seq(reader, top)
            assert seqs == list(range(seqs[0], top + 1)), seqs

        a.bus.restore()
        await metrics_show(a, "room_bus_up 1.0")
        acked += await send_some(sender_a, project, "a-fast", 5)
        for reader in readers:
            seqs = await until_seq(reader, acked[-1])
            assert seqs == list(range(seqs[0], acked[-1] + 1)), seqs
        stored_log(pg_dsn, project)
        for client in (*readers, sender_a, sender_b):
            client.drop()
    finally:
        a.stop()
        b.stop()


async def test_a_partitioned_node_catches_up_when_its_database_comes_back_after_its_bus(
    tmp_path: Path, pg_dsn: str, nats_server: NatsServer
) -> None:
    """A cut from both; its bus link comes back first, so the sweep on the bus's return fails
    (its database is still out of reach); once the database is back A's clients get what B
    wrote meanwhile, without waiting for the long poll."""
    a, b = await start_nodes(tmp_path, pg_dsn, nats_server, 2)
    try:
        project = first_project(a)
        pause_lead(a, project)
        reader_a = await subscribed(a.server, a.owner.cookie, project)
        sender_b = await subscribed(b.server, b.owner.cookie, project)
        await metrics_show(a, "room_bus_peers 1.0")
        acked = await send_some(sender_b, project, "b-before", 3)
        await until_seq(reader_a, acked[-1])

        a.bus.cut()
        await metrics_show(a, "room_bus_up 0.0")
        a.pg.cut()  # (A's /metrics reads the database: B's tell from here on)
        acked += await send_some(sender_b, project, "b-apart", 10)
        a.bus.restore()
        # A's bus is back: it swept its projects (and failed to read them), then asked B to
        # check its own, which B counts.
        await metrics_show(b, "room_bus_peer_checks_total 1.0")
        a.pg.restore()
        seqs = await until_seq(reader_a, acked[-1])
        assert seqs == list(range(seqs[0], acked[-1] + 1)), seqs
        for client in (reader_a, sender_b):
            client.drop()
    finally:
        a.stop()
        b.stop()


async def test_a_turn_whose_node_lost_its_database_ends_once_the_database_is_back(
    tmp_path: Path, pg_dsn: str, nats_server: NatsServer, llm: OpenAIServer
) -> None:
    """The lead's turn runs on A; A's database link is cut while the model answers, so the
    turn can neither post its answer nor record its end. Once the link is back the turn is
    ended (not left 'running', which would keep the member from every later turn on every
    node) and the lead answers the next message."""
    provider = {"OPENAI_BASE_URL": llm.base_url, "OPENAI_API_KEY": TEST_API_KEY}
    a, b = (make_node(tmp_path / n, pg_dsn, nats_server) for n in "ab")
    for node in (a, b):
        node.server.env.update(provider)
    try:
        await anyio.to_thread.run_sync(a.start)
        await anyio.to_thread.run_sync(b.start)
        project = first_project(a)
        members = a.server.get_json(f"/api/projects/{project}", cookie=a.owner.cookie)["members"]
        lead = next(m["id"] for m in members if m["handle"] == "lead")
        route = {"scope": "member", "target": str(lead), "value": "openai/gpt-test"}
        status, body = a.server.request(
            "POST", f"/api/projects/{project}/routes", {**route, "reason": "测试"},
            headers=a.owner.headers,
        )  # fmt: skip
        assert status in (200, 201), body
        llm.push(openai_text("慢一点的回答", delay_secs=1.0))
        status, sent = a.server.request(
            "POST", f"/api/projects/{project}/messages",
            {"body": "@lead 第一个", "client_txn_id": uuid.uuid4().hex}, headers=a.owner.headers,
        )  # fmt: skip
        assert status == 201, sent

        def turns() -> list[str]:
            with psycopg.connect(pg_dsn) as conn:
                rows = conn.execute(
                    "SELECT state FROM turns WHERE member_id = %s ORDER BY id", (lead,)
                ).fetchall()
            return [str(r[0]) for r in rows]

        await until(lambda: turns() == ["running"])
        a.pg.cut()  # while the model takes its second
        # The model answered and the turn's writes failed (not merely any line with "failed":
        # the lease's renewal fails too when the link goes).
        await until(lambda: re.search(r"turn \d+ failed", a.server.log) is not None)
        a.pg.restore()
        await until(lambda: turns()[0] != "running")
        assert turns() == ["failed"]

        llm.push(openai_text("第二个回答"))
        status, sent = b.server.request(
            "POST", f"/api/projects/{project}/messages",
            {"body": "@lead 第二个", "client_txn_id": uuid.uuid4().hex}, headers=b.owner.headers,
        )  # fmt: skip
        assert status == 201, sent
        await until(lambda: turns() == ["failed", "completed"])
    finally:
        a.stop()
        b.stop()


async def until(condition: Callable[[], bool]) -> None:
    with anyio.fail_after(WAIT):
        while True:
            if condition():
                return
            await anyio.sleep(0.1)
