"""A stop asked on one node for a turn running on another (docs/cluster.md, "Agents across
nodes"): two room servers on one private PostgreSQL database and one private nats-server, a
scripted model server.

The project's turns run on node A, its home; a person asks node B. B's answer confirms the stop
only once the turn's row is settled in the database — A ended it — and, while A cannot answer
(SIGSTOP), says so honestly: the member's stop ``stop_confirmed: false`` naming A (its notice
posted later, once A has ended the turn), the project's pause ``stop_unconfirmed`` naming A
(``retry_stop`` confirms it once A is back). The notice owed is recorded with the answer
(``member_stops``): B killed and restarted before A ended the turn, it is still posted, once.
The stop itself is owed too: a hint A never heard (its bus link cut when B asked) is carried
out by A's own sweep once it runs, and the turn stops long before its model would answer."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.support.llm_servers import OpenAIServer, openai_text
from tests.support.nats import NatsServer
from tests.support.proxy import LinkProxy
from tests.support.server import ServerProcess
from tests.test_cluster_leases import lead_on_openai, node, node_id, rows, say, sign_in, until

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.usefixtures("clients"),
    pytest.mark.timeout(420),  # two nodes and a paused one, on 2 shared cores
]


def stop_node(dsn: str, bus: NatsServer, llm: OpenAIServer, data: Path) -> ServerProcess:
    server = node(data, dsn, bus, llm)
    # Nobody adopts A's lease while it is paused (two unconfirmed stops wait 2 × 15 s), and a
    # node at a whole suite's load settles a turn well inside the window (3 s was missed once).
    server.env["ROOM_LEASE_SECS"] = "120"
    server.env["ROOM_STOP_CONFIRM_SECS"] = "15"
    return server


def owed(dsn: str) -> list[tuple[Any, ...]]:
    return rows(dsn, "SELECT member_id, turn_id FROM member_stops ORDER BY id")


def turns_of(dsn: str, member: int) -> list[tuple[Any, ...]]:
    return rows(dsn, "SELECT id, state, owner FROM turns WHERE member_id = %s ORDER BY id", member)


def stop_notices(dsn: str, project: int) -> list[tuple[Any, ...]]:
    return rows(
        dsn,
        "SELECT body FROM messages WHERE project_id = %s AND body LIKE %s ORDER BY id",
        project,
        "%停止了当前工作%",
    )


async def test_a_stop_asked_on_one_node_is_confirmed_only_once_the_other_settled_the_turn(
    tmp_path: Path, pg_dsn: str, nats_server: NatsServer, llm: OpenAIServer
) -> None:
    a = stop_node(pg_dsn, nats_server, llm, tmp_path / "a")
    b = stop_node(pg_dsn, nats_server, llm, tmp_path / "b")
    a.start()  # first: the demo project's home
    paused = False
    try:
        b.start()
        on_a, on_b = sign_in(a), sign_in(b)
        project, lead = lead_on_openai(a, on_a)
        node_a = node_id(a)

        def stop_lead() -> tuple[int, Any]:
            path = f"/api/projects/{project}/members/{lead}/stop"
            return b.request("POST", path, {}, headers=on_b.headers, timeout=60)

        def lifecycle(op: str) -> tuple[int, Any]:
            path = f"/api/projects/{project}/lifecycle"
            return b.request("POST", path, {"op": op}, headers=on_b.headers, timeout=60)

        # 1. A is up: B's answer comes once A ended the turn (its row settled), not before.
        llm.push(openai_text("太慢了", delay_secs=120))
        say(b, on_b, project, "@lead 慢慢来")
        await until(lambda: [t for t in turns_of(pg_dsn, lead) if t[1] == "running"], "A's turn")
        status, answer = await anyio.to_thread.run_sync(stop_lead)
        assert status == 200, answer
        assert answer["stop_requested"] is True and answer["stop_confirmed"] is True, answer
        assert [t[1:] for t in turns_of(pg_dsn, lead)] == [("cancelled", node_a)]
        assert len(stop_notices(pg_dsn, project)) == 1

        # 2. A paused (SIGSTOP) mid-turn: B says it is waiting for A, and posts no notice yet.
        llm.push(openai_text("还是太慢", delay_secs=120))
        say(b, on_b, project, "@lead 再来一次")
        second = await until(
            lambda: [t for t in turns_of(pg_dsn, lead) if t[1] == "running"], "A's second turn"
        )
        assert a.proc is not None
        os.kill(a.proc.pid, signal.SIGSTOP)
        paused = True
        status, answer = await anyio.to_thread.run_sync(stop_lead)
        assert status == 200, answer
        assert answer["stop_requested"] is True and answer["stop_confirmed"] is False, answer
        assert answer["running_on"] == [
            {"turn_id": second[0][0], "member_id": lead, "node": node_a}
        ]
        assert len(stop_notices(pg_dsn, project)) == 1  # not claimed before it is true

        # The project's pause, asked on B meanwhile, cannot confirm either: stop_unconfirmed.
        status, answer = await anyio.to_thread.run_sync(lifecycle, "pause")
        assert status == 200, answer
        assert answer["project"]["state"] == "stop_unconfirmed", answer
        assert answer["still_running"] == [lead]
        assert answer["running_on"] == [
            {"turn_id": second[0][0], "member_id": lead, "node": node_a}
        ]

        # 3. A is back: it hears the stops, ends its turn; B's notice follows, and the retried
        # check confirms the pause.
        os.kill(a.proc.pid, signal.SIGCONT)
        paused = False
        await until(
            lambda: [
                t for t in turns_of(pg_dsn, lead) if t[0] == second[0][0] and t[1] != "running"
            ],
            "A ends its turn",
        )
        await until(lambda: len(stop_notices(pg_dsn, project)) == 2, "the later notice")
        status, answer = await anyio.to_thread.run_sync(lifecycle, "retry_stop")
        assert status == 200, answer
        assert answer["project"]["state"] == "paused", answer
        assert answer["still_running"] == [] and "running_on" not in answer
        assert rows(pg_dsn, "SELECT state FROM projects WHERE id = %s", project) == [("paused",)]
        # Posted once (B's own reading and every node's sweep race for it): nothing is owed
        # any more, so no node can post it again.
        assert owed(pg_dsn) == []
        assert len(stop_notices(pg_dsn, project)) == 2
    finally:
        if paused and a.proc is not None:
            os.kill(a.proc.pid, signal.SIGCONT)
        a.stop()
        b.stop()


async def test_a_stop_notice_owed_survives_a_restart_of_the_node_asked(
    tmp_path: Path, pg_dsn: str, nats_server: NatsServer, llm: OpenAIServer
) -> None:
    """B answers a member's stop unconfirmed (A, running the turn, is paused) and is killed
    before A ends the turn; B comes back. The notice is posted once A ended the turn, by a
    node's sweep (before, it lived only in B's memory: never posted)."""
    a = stop_node(pg_dsn, nats_server, llm, tmp_path / "a")
    b = stop_node(pg_dsn, nats_server, llm, tmp_path / "b")
    for server in (a, b):
        # The sweep that finishes owed notices runs every third of the lease; B is not the
        # home, so it adopts nothing of A's while A is paused.
        server.env["ROOM_LEASE_SECS"] = "6"
        server.env["ROOM_STOP_CONFIRM_SECS"] = "2"
    a.start()  # first: the demo project's home
    paused = False
    try:
        b.start()
        on_a, on_b = sign_in(a), sign_in(b)
        project, lead = lead_on_openai(a, on_a)
        node_a = node_id(a)

        llm.push(openai_text("太慢了", delay_secs=120))
        say(b, on_b, project, "@lead 慢慢来")
        turn = await until(
            lambda: [t for t in turns_of(pg_dsn, lead) if t[1] == "running"], "A's turn"
        )
        assert a.proc is not None
        os.kill(a.proc.pid, signal.SIGSTOP)
        paused = True
        path = f"/api/projects/{project}/members/{lead}/stop"
        status, answer = await anyio.to_thread.run_sync(
            lambda: b.request("POST", path, {}, headers=on_b.headers, timeout=60)
        )
        assert status == 200, answer
        assert answer["stop_confirmed"] is False, answer
        assert answer["running_on"] == [{"turn_id": turn[0][0], "member_id": lead, "node": node_a}]
        assert owed(pg_dsn) == [(lead, turn[0][0])]  # recorded with the answer
        assert stop_notices(pg_dsn, project) == []

        # B dies before A has ended the turn, and comes back: it remembers nothing of it.
        await anyio.to_thread.run_sync(b.kill9)
        await anyio.to_thread.run_sync(b.start)
        os.kill(a.proc.pid, signal.SIGCONT)
        paused = False
        await until(
            lambda: [t for t in turns_of(pg_dsn, lead) if t[1] != "running"], "A ends its turn"
        )
        await until(lambda: stop_notices(pg_dsn, project), "the owed notice")
        assert owed(pg_dsn) == []  # claimed by the node that posted it: none can post it again
        [(body,)] = stop_notices(pg_dsn, project)
        assert "@lead" in body
        [(frame,)] = rows(
            pg_dsn, "SELECT frame FROM messages WHERE project_id = %s AND body = %s", project, body
        )
        meta = json.loads(frame)["meta"]
        assert meta["confirmed_later"] is True and meta["turn_id"] == turn[0][0], meta
    finally:
        if paused and a.proc is not None:
            os.kill(a.proc.pid, signal.SIGCONT)
        a.stop()
        b.stop()


async def test_a_stop_whose_hint_was_lost_is_carried_out_by_the_node_running_the_turn(
    tmp_path: Path, pg_dsn: str, nats_server: NatsServer, llm: OpenAIServer
) -> None:
    """B answers a member's stop unconfirmed while A, running the turn, has its bus link cut:
    the hint is lost, and nobody asks again. A's leases sweep finds the stop owed
    (``member_stops``) and stops the turn it runs; the notice is posted once."""
    a = stop_node(pg_dsn, nats_server, llm, tmp_path / "a")
    b = stop_node(pg_dsn, nats_server, llm, tmp_path / "b")
    link = LinkProxy("127.0.0.1", nats_server.port).start()
    a.env["ROOM_BUS_URL"] = link.url(nats_server.url)
    for server in (a, b):
        server.env["ROOM_LEASE_SECS"] = "6"  # a sweep every 2 s
        server.env["ROOM_STOP_CONFIRM_SECS"] = "2"
    a.start()  # first: the demo project's home
    try:
        b.start()
        on_a, on_b = sign_in(a), sign_in(b)
        project, lead = lead_on_openai(a, on_a)
        llm.push(openai_text("太慢了", delay_secs=120))
        say(b, on_b, project, "@lead 慢慢来")
        turn = await until(
            lambda: [t for t in turns_of(pg_dsn, lead) if t[1] == "running"], "A's turn"
        )
        link.cut()  # B's hint goes out on the bus; A is not on it
        path = f"/api/projects/{project}/members/{lead}/stop"
        status, answer = await anyio.to_thread.run_sync(
            lambda: b.request("POST", path, {}, headers=on_b.headers, timeout=60)
        )
        assert status == 200, answer
        assert answer["stop_confirmed"] is False, answer
        assert owed(pg_dsn) == [(lead, turn[0][0])]
        assert turns_of(pg_dsn, lead)[-1][1] == "running"  # the hint was lost
        link.restore()
        # Carried out by A (its sweep), long before the model's 120 s answer.
        ended = await until(
            lambda: [t for t in turns_of(pg_dsn, lead) if t[1] != "running"], "A stops the turn"
        )
        assert [(t[0], t[1]) for t in ended] == [(turn[0][0], "cancelled")]
        await until(lambda: stop_notices(pg_dsn, project), "the owed notice")
        assert len(stop_notices(pg_dsn, project)) == 1
        assert owed(pg_dsn) == []
    finally:
        a.stop()
        b.stop()
        link.stop()
