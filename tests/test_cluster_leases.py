"""Agents across nodes (docs/cluster.md, "Agents across nodes"): two room servers on one
private PostgreSQL database and one private nats-server, a scripted model server, and the
operator's ``room cluster move``.

A project's turns run on its home node (the node that made it) under a lease with a fencing
token (``ROOM_LEASE_SECS`` = 2 here). A home paused (SIGSTOP) past its lease while a turn runs
loses it once the project is moved: the new home adopts it, settles the paused node's turn and
runs the member's next one; after SIGCONT the paused node's writes for its turn are refused.
A home killed leaves the project's agent deliveries ``pending`` with ``home_node_offline``
while chat goes on; moving the home resumes the agents."""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import uuid
from pathlib import Path
from typing import Any

import anyio
import psycopg
import pytest

from room.cli import main as room_main
from tests.support.llm_servers import TEST_API_KEY, OpenAIServer, openai_text
from tests.support.nats import NatsServer
from tests.support.server import ServerProcess, Session
from tests.support.wsclient import subscribed

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.usefixtures("clients"),
    pytest.mark.timeout(300),  # two nodes, a pause past the lease, on 2 shared cores
]

WAIT = 90.0  # generous: the whole suite runs 4 workers on 2 cores beside these nodes
LEASE_SECS = 2


def node(data: Path, dsn: str, bus: NatsServer, llm: OpenAIServer) -> ServerProcess:
    env = {
        "ROOM_DATABASE_URL": dsn,
        "ROOM_BUS_URL": bus.url,
        "ROOM_BUS_POLL_SECS": "60",
        "ROOM_LEASE_SECS": str(LEASE_SECS),
        "OPENAI_BASE_URL": llm.base_url,
        "OPENAI_API_KEY": TEST_API_KEY,
    }
    return ServerProcess(data, env=env)


def sign_in(server: ServerProcess) -> Session:
    return server.login(server.login_url.rsplit("/", 1)[-1])


def node_id(server: ServerProcess) -> str:
    return (server.data / "node-id").read_text().strip()


def rows(dsn: str, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return [tuple(r) for r in conn.execute(sql, params).fetchall()]


def lead_on_openai(server: ServerProcess, owner: Session) -> tuple[int, int]:
    """The demo project and its lead, routed to the scripted model server."""
    project = int(server.get_json("/api/me", cookie=owner.cookie)["projects"][0]["id"])
    members = server.get_json(f"/api/projects/{project}", cookie=owner.cookie)["members"]
    lead = next(m["id"] for m in members if m["handle"] == "lead")
    route = {"scope": "member", "target": str(lead), "value": "openai/gpt-test", "reason": "测试"}
    status, body = server.request(
        "POST", f"/api/projects/{project}/routes", route, headers=owner.headers
    )
    assert status in (200, 201), body
    return project, lead


def say(server: ServerProcess, owner: Session, project: int, body: str) -> int:
    status, sent = server.request(
        "POST", f"/api/projects/{project}/messages",
        {"body": body, "client_txn_id": uuid.uuid4().hex}, headers=owner.headers,
    )  # fmt: skip
    assert status == 201, sent
    return int(sent["message_id"]) if "message_id" in sent else int(sent["message"]["id"])


def move(dsn: str, project: int, to: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = room_main(["cluster", "move", str(project), to, "--database", dsn])
    assert code == 0, out.getvalue()
    return out.getvalue()


def counters(server: ServerProcess, owner: Session) -> dict[str, float]:
    """The node's /metrics, name → value (the unlabelled samples)."""
    status, text = server.request("GET", "/metrics", cookie=owner.cookie)
    assert status == 200
    found = {}
    for line in str(text).splitlines():
        name, _, value = line.partition(" ")
        if line and not line.startswith("#") and "{" not in name:
            found[name] = float(value)
    return found


async def until(check: Any, what: str) -> Any:
    """Poll ``check`` (run in a thread) until it returns something true."""
    with anyio.fail_after(WAIT):
        while True:
            found = await anyio.to_thread.run_sync(check)
            if found:
                return found
            await anyio.sleep(0.1)
    raise AssertionError(what)  # pragma: no cover (fail_after raises first)


async def test_a_home_paused_past_its_lease_is_fenced_off_once_the_project_moves(
    tmp_path: Path, pg_dsn: str, nats_server: NatsServer, llm: OpenAIServer
) -> None:
    a = node(tmp_path / "a", pg_dsn, nats_server, llm)
    b = node(tmp_path / "b", pg_dsn, nats_server, llm)
    a.start()  # first: it makes the demo project, whose home it is
    stopped = False
    try:
        b.start()
        on_a, on_b = sign_in(a), sign_in(b)
        project, lead = lead_on_openai(a, on_a)
        node_a, node_b = node_id(a), node_id(b)
        home = rows(pg_dsn, "SELECT home_node FROM projects WHERE id = %s", project)
        assert home == [(node_a,)]

        def turns() -> list[tuple[Any, ...]]:
            found = rows(
                pg_dsn,
                "SELECT id, state, owner, coalesce(error, '') FROM turns WHERE member_id = %s"
                " ORDER BY id",
                lead,
            )
            # One running turn per member, whatever the nodes do.
            assert sum(1 for t in found if t[1] == "running") <= 1, found
            return found

        llm.push(openai_text("太慢了", delay_secs=120))  # A's model call hangs
        llm.push(openai_text("我接手了"))  # B's answers at once
        say(b, on_b, project, "@lead 第一件事")  # sent on B: the turn runs on A, its home
        first = await until(lambda: [t for t in turns() if t[1] == "running"], "A's turn")
        assert first[0][2] == node_a
        first_turn = first[0][0]
        lease = rows(pg_dsn, "SELECT holder, token FROM leases WHERE project_id = %s", project)
        assert lease == [(node_a, 1)]

        # A renews the lease its turn runs under (once a tick found the turn only being opened
        # and let the lease lapse under it: A then never noticed losing it).
        def expiry() -> float:
            found = rows(pg_dsn, "SELECT expires_at FROM leases WHERE project_id = %s", project)
            return float(found[0][0])

        taken = expiry()
        await until(lambda: expiry() > taken, "A renewing the lease of its running turn")

        assert a.proc is not None
        os.kill(a.proc.pid, signal.SIGSTOP)  # paused mid-turn, past its lease
        stopped = True
        out = await anyio.to_thread.run_sync(lambda: move(pg_dsn, project, node_b))
        assert f"home node {node_b} (was {node_a})" in out

        # B adopts the lapsed lease (token 2), settles A's turn and runs the member's next.
        def done_on_b() -> bool:
            return any(t[1] == "completed" and t[2] == node_b for t in turns())

        await until(done_on_b, "B's turn")
        lease = rows(pg_dsn, "SELECT holder, token FROM leases WHERE project_id = %s", project)
        assert lease == [(node_b, 2)]
        status, metrics = b.request("GET", "/metrics", cookie=on_b.cookie)
        assert status == 200
        assert "room_projects_home 1.0" in str(metrics) and "room_leases_held 1.0" in str(metrics)
        settled = [t for t in turns() if t[0] == first_turn]
        assert settled == [
            (first_turn, "interrupted", node_a, "the node running it lost the project's lease")
        ]
        answers = rows(
            pg_dsn,
            "SELECT m.body FROM messages m JOIN turns t ON t.reply_message_id = m.id"
            " WHERE t.member_id = %s",
            lead,
        )
        assert answers == [("我接手了",)]

        # A wakes: its renewal finds the lease gone and stops its turn, whose writes (the
        # abandoned model call's record, the turn's end) are refused by the fence.
        os.kill(a.proc.pid, signal.SIGCONT)
        stopped = False
        # Its lease loop's next tick (due at once: its clock ran on while it was stopped)
        # finds the lease adopted and stops the turn; the turn's end is refused.
        await until(lambda: f"project {project}: the lease was lost" in a.log, "A's renewal")
        await until(lambda: "lost the project's lease" in a.log, "A's turn refused")
        assert [t for t in turns() if t[0] == first_turn] == settled  # never overwritten
        # A's /metrics count the lease it lost and the writes its fence refused; B's none.
        lost = await until(
            lambda: (m := counters(a, on_a)) and m["room_leases_lost_total"] >= 1 and m,
            "A counts its lost lease",
        )
        assert lost["room_fence_refusals_total"] >= 1
        on_b_counts = counters(b, on_b)
        assert on_b_counts["room_leases_lost_total"] == 0
        assert on_b_counts["room_fence_refusals_total"] == 0
        recorded = rows(
            pg_dsn, "SELECT count(*) FROM model_requests WHERE turn_id = %s", first_turn
        )
        assert recorded == [(0,)]  # A's model call, abandoned after the lease was lost
        # Chat still works on A, and its agents' work stays on B.
        llm.push(openai_text("还是我"))
        say(a, on_a, project, "@lead 第二件事")
        await until(
            lambda: sum(1 for t in turns() if t[1] == "completed" and t[2] == node_b) == 2,
            "the next turn on B",
        )
        assert all(t[2] == node_b for t in turns() if t[0] != first_turn)
    finally:
        if stopped and a.proc is not None:
            os.kill(a.proc.pid, signal.SIGCONT)
        a.stop()
        b.stop()


async def test_a_dead_home_leaves_deliveries_pending_until_the_project_moves(
    tmp_path: Path, pg_dsn: str, nats_server: NatsServer, llm: OpenAIServer
) -> None:
    a = node(tmp_path / "a", pg_dsn, nats_server, llm)
    b = node(tmp_path / "b", pg_dsn, nats_server, llm)
    a.start()
    try:
        b.start()
        on_a, on_b = sign_in(a), sign_in(b)
        project, lead = lead_on_openai(a, on_a)
        node_b = node_id(b)
        reader = await subscribed(b, on_b.cookie, project)
        a.kill9()  # the home is gone; B stops hearing it within 6 s

        def peers_on_b() -> bool:
            status, text = b.request("GET", "/metrics", cookie=on_b.cookie)
            return status == 200 and "room_bus_peers 0.0" in str(text)

        await until(peers_on_b, "B no longer hears A")

        # Chat goes on on B; the agent's delivery waits, and says why.
        message = say(b, on_b, project, "@lead 在吗")
        waiting = await until(
            lambda: rows(
                pg_dsn,
                "SELECT state, reason_code FROM deliveries WHERE message_id = %s"
                " AND recipient_id = %s AND reason_code = 'home_node_offline'",
                message,
                lead,
            ),
            "home_node_offline",
        )
        assert waiting == [("pending", "home_node_offline")]
        label = await reader.wait_for(
            lambda f: f.get("type") == "delivery" and f.get("reason_code") == "home_node_offline",
            timeout=WAIT,
        )
        assert label["state"] == "pending"
        assert rows(pg_dsn, "SELECT count(*) FROM turns WHERE member_id = %s", lead) == [(0,)]

        # A server admin moves the project to B (over HTTP): its agents run there.
        llm.push(openai_text("我在"))
        status, moved = b.request(
            "PUT", f"/api/projects/{project}/home", {"node": node_b}, headers=on_b.headers
        )
        assert status == 200, moved
        assert moved == {"project_id": project, "home_node": node_b, "was": node_id(a)}
        done = await until(
            lambda: rows(
                pg_dsn,
                "SELECT state, owner FROM turns WHERE member_id = %s AND state = 'completed'",
                lead,
            ),
            "the turn on B",
        )
        assert done == [("completed", node_b)]
        state = rows(
            pg_dsn,
            "SELECT state FROM deliveries WHERE message_id = %s AND recipient_id = %s",
            message,
            lead,
        )
        assert state == [("consumed",)]
        # `room cluster status` says where the projects live, and that A is not heard.
        out = io.StringIO()
        args = ["cluster", "status", "--json", "--data", str(b.data), "--database", pg_dsn]
        args += ["--bus", nats_server.url]

        def cluster_status() -> int:
            with contextlib.redirect_stdout(out):
                return room_main(args)

        assert await anyio.to_thread.run_sync(cluster_status) == 0
        found = json.loads(out.getvalue())
        assert found["homes"] == {node_b: 1} and found["bus"]["nodes"] == [node_b]
        reader.drop()
    finally:
        a.stop()
        b.stop()
