"""Research runs across nodes (docs/cluster.md, "Agents across nodes"; docs/research.md): two
room servers on one private PostgreSQL database and one private nats-server, a scripted model
server, ``ROOM_LEASE_SECS`` = 2.

A run started on node B for a project whose home is node A runs on A, under the project's
lease. A paused (SIGSTOP) mid-step and the project moved to B: B adopts the lease and settles
the run (``paused_reconcile``, as a restart would); after SIGCONT every write A still makes for
the run is refused by the fence (its model call is never recorded, the run stays as B settled
it). Resumed by a person on A, the run goes on on B, its new home.

A run started on B while A, its home, is not heard (paused) waits: its card says why
(``home_node_offline``) and its wall-clock budget is not spent; once A is back (continued, or
killed and started again) it goes on with the budget it had left and reports — unless A was
running it when it died: that one is settled ``paused_reconcile``, as any restart."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import pytest

from room.agents.research_run import ResearchRunner, _Run
from room.rules.leases import Home
from tests.support.llm_servers import OpenAIServer, openai_text, openai_tool_call
from tests.support.nats import NatsServer
from tests.support.server import ServerProcess, Session
from tests.test_cluster_leases import (
    counters,
    lead_on_openai,
    move,
    node,
    node_id,
    rows,
    sign_in,
    until,
)

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.usefixtures("clients"),
    pytest.mark.timeout(300),  # two nodes, a pause past the lease, on 2 shared cores
]

BUDGET = {"tokens": 100_000, "requests": 20, "seconds": 600, "steps": 20}


def research(server: ServerProcess, owner: Session, path: str, body: dict[str, Any]) -> Any:
    status, answer = server.request("POST", path, body, headers=owner.headers)
    assert status in (200, 201), answer
    return answer["research"]


def run_row(dsn: str, rid: int) -> tuple[Any, ...]:
    [row] = rows(dsn, "SELECT state, owner FROM research_runs WHERE id = %s", rid)
    return row


def recorded(dsn: str, rid: int) -> int:
    [(count,)] = rows(dsn, "SELECT count(*) FROM model_requests WHERE research_id = %s", rid)
    return int(count)


async def test_a_research_run_is_fenced_off_a_node_paused_past_the_projects_lease(
    tmp_path: Path, pg_dsn: str, nats_server: NatsServer, llm: OpenAIServer
) -> None:
    a = node(tmp_path / "a", pg_dsn, nats_server, llm)
    b = node(tmp_path / "b", pg_dsn, nats_server, llm)
    a.start()  # first: the demo project's home
    stopped = False
    try:
        b.start()
        on_a, on_b = sign_in(a), sign_in(b)
        project, _lead = lead_on_openai(a, on_a)
        node_a, node_b = node_id(a), node_id(b)

        # Proposed, approved and started on B: it runs on A, the project's home.
        llm.push(openai_text("慢慢想", delay_secs=120))  # A's model step hangs
        proposal = {"question": "启动为什么慢？", "scope": {"paths": ["docs"]},
                    "members": ["lead"], "budget": BUDGET}  # fmt: skip
        run = research(b, on_b, f"/api/projects/{project}/research", proposal)
        rid = int(run["id"])
        approval = {"rev": run["rev"], "scope_digest": run["scope_digest"]}
        research(b, on_b, f"/api/research/{rid}/approve", approval)
        assert research(b, on_b, f"/api/research/{rid}/start", {})["state"] == "running"
        await until(lambda: run_row(pg_dsn, rid) == ("running", node_a), "owner A")
        await until(lambda: len(llm.chat_requests) >= 1, "A's model step")
        lease = rows(pg_dsn, "SELECT holder, token FROM leases WHERE project_id = %s", project)
        assert lease == [(node_a, 1)]

        # A paused past its lease, the project moved: B adopts the lease and settles the run.
        assert a.proc is not None
        os.kill(a.proc.pid, signal.SIGSTOP)
        stopped = True
        out = await anyio.to_thread.run_sync(lambda: move(pg_dsn, project, node_b))
        assert f"home node {node_b}" in out
        await until(lambda: run_row(pg_dsn, rid)[0] == "paused_reconcile", "B settles the run")
        lease = rows(pg_dsn, "SELECT holder, token FROM leases WHERE project_id = %s", project)
        assert lease == [(node_b, 2)]
        [(detail,)] = rows(
            pg_dsn,
            "SELECT detail_json FROM audit_events WHERE action = 'research_reconcile'"
            " AND project_id = %s",
            project,
        )
        assert json.loads(detail)["lease_adopted_by"] == node_b
        assert json.loads(detail)["ran_on"] == node_a

        # A wakes: its renewal finds the lease gone, stops the run, and its writes are refused.
        os.kill(a.proc.pid, signal.SIGCONT)
        stopped = False
        await until(lambda: "research" in a.log and "lost the project's lease" in a.log, "refused")
        assert recorded(pg_dsn, rid) == 0  # A's abandoned model step: never recorded
        assert run_row(pg_dsn, rid) == ("paused_reconcile", node_a)  # as B settled it
        items = rows(pg_dsn, "SELECT count(*) FROM research_items WHERE research_id = %s", rid)
        assert items == [(0,)]

        # A person resumes it on A: it runs on B, the project's home now, and reports there.
        llm.push(openai_tool_call("room_research_report", {"text": "读了两次配置", "sources": []}))
        state = research(a, on_a, f"/api/research/{rid}/resume", {})["state"]
        assert state == "running"
        await until(lambda: run_row(pg_dsn, rid) == ("done", node_b), "done on B")
        assert recorded(pg_dsn, rid) == 1
    finally:
        if stopped and a.proc is not None:
            os.kill(a.proc.pid, signal.SIGCONT)
        a.stop()
        b.stop()


def spend_row(dsn: str, rid: int) -> tuple[Any, ...]:
    [row] = rows(
        dsn,
        "SELECT state, wait_reason, run_secs, running_since, stop_reason FROM research_runs"
        " WHERE id = %s",
        rid,
    )
    return row


async def test_a_run_whose_home_is_not_heard_waits_without_spending_its_time(
    tmp_path: Path, pg_dsn: str, nats_server: NatsServer, llm: OpenAIServer
) -> None:
    a = node(tmp_path / "a", pg_dsn, nats_server, llm)
    b = node(tmp_path / "b", pg_dsn, nats_server, llm)
    a.start()  # first: the demo project's home
    stopped = False
    try:
        b.start()
        on_a, on_b = sign_in(a), sign_in(b)
        project, _lead = lead_on_openai(a, on_a)
        assert node_id(a) != node_id(b)
        await until(lambda: counters(b, on_b).get("room_bus_peers") == 1.0, "B hears A")

        # A paused: once B no longer hears it, a run started on B cannot step anywhere.
        assert a.proc is not None
        os.kill(a.proc.pid, signal.SIGSTOP)
        stopped = True
        await until(lambda: counters(b, on_b).get("room_bus_peers") == 0.0, "A not heard")
        budget = {**BUDGET, "seconds": 12}
        proposal = {"question": "启动为什么慢？", "scope": {"paths": ["docs"]},
                    "members": ["lead"], "budget": budget}  # fmt: skip
        run = research(b, on_b, f"/api/projects/{project}/research", proposal)
        rid = int(run["id"])
        approval = {"rev": run["rev"], "scope_digest": run["scope_digest"]}
        research(b, on_b, f"/api/research/{rid}/approve", approval)
        started = time.monotonic()
        assert research(b, on_b, f"/api/research/{rid}/start", {})["state"] == "running"

        # It says why it waits, and its clock is stopped (no running span open).
        await until(lambda: spend_row(pg_dsn, rid)[1] == "home_node_offline", "marked waiting")
        state, _, run_secs, running_since, _ = spend_row(pg_dsn, rid)
        assert (state, running_since) == ("running", None)
        shown = b.get_json(f"/api/research/{rid}", cookie=on_b.cookie)["research"]
        assert shown["waiting"] == "home_node_offline" and shown["state"] == "running"
        assert shown["spend"]["seconds"] == round(float(run_secs), 1) < budget["seconds"]
        # Past its whole wall-clock budget while it waits (before, the home's next pre-step
        # gate then stopped it: budget_seconds).
        await anyio.sleep(max(0.0, budget["seconds"] + 2 - (time.monotonic() - started)))
        assert spend_row(pg_dsn, rid)[:4] == ("running", "home_node_offline", run_secs, None)

        # A is back: it takes the run up with the budget it had left, and the run reports.
        llm.push(openai_tool_call("room_research_report", {"text": "读了两次配置", "sources": []}))
        os.kill(a.proc.pid, signal.SIGCONT)
        stopped = False
        await until(lambda: spend_row(pg_dsn, rid)[0] != "running", "the run ends")
        state, waits, spent, _, stop_reason = spend_row(pg_dsn, rid)
        assert (state, waits, stop_reason) == ("done", None, None)
        assert float(spent) < budget["seconds"]  # the wait was not counted
        assert recorded(pg_dsn, rid) == 1
        actions = rows(
            pg_dsn,
            "SELECT action, outcome FROM audit_events WHERE project_id = %s"
            " AND action LIKE 'research_wait%%' ORDER BY id",
            project,
        )
        assert actions == [("research_wait", "waiting"), ("research_wait_over", "ok")]
        shown = a.get_json(f"/api/research/{rid}", cookie=on_a.cookie)["research"]
        assert shown["waiting"] is None and shown["state"] == "done"
    finally:
        if stopped and a.proc is not None:
            os.kill(a.proc.pid, signal.SIGCONT)
        a.stop()
        b.stop()


def start_run(server: ServerProcess, owner: Session, project: int) -> int:
    proposal = {"question": "启动为什么慢？", "scope": {"paths": ["docs"]},
                "members": ["lead"], "budget": BUDGET}  # fmt: skip
    run = research(server, owner, f"/api/projects/{project}/research", proposal)
    rid = int(run["id"])
    approval = {"rev": run["rev"], "scope_digest": run["scope_digest"]}
    research(server, owner, f"/api/research/{rid}/approve", approval)
    assert research(server, owner, f"/api/research/{rid}/start", {})["state"] == "running"
    return rid


async def test_a_home_killed_and_started_again_takes_up_what_waited_for_it(
    tmp_path: Path, pg_dsn: str, nats_server: NatsServer, llm: OpenAIServer
) -> None:
    """The home killed (``kill -9``) mid-step of one run, and another run started on B while it
    is down; both wait (``home_node_offline``). Started again, the home settles the run it was
    running when it died ``paused_reconcile``, as any restart (cut mid-step: a person looks),
    and takes up the one that never ran (before: that one was ``paused_reconcile`` too)."""
    a = node(tmp_path / "a", pg_dsn, nats_server, llm)
    b = node(tmp_path / "b", pg_dsn, nats_server, llm)
    a.start()  # first: the demo project's home
    try:
        b.start()
        on_a, on_b = sign_in(a), sign_in(b)
        project, _lead = lead_on_openai(a, on_a)
        await until(lambda: counters(b, on_b).get("room_bus_peers") == 1.0, "B hears A")

        llm.push(openai_text("慢慢想", delay_secs=120))  # A's model step hangs
        cut = start_run(a, on_a, project)
        await until(lambda: len(llm.chat_requests) >= 1, "A's model step")
        await anyio.to_thread.run_sync(a.kill9)
        await until(lambda: counters(b, on_b).get("room_bus_peers") == 0.0, "A not heard")
        await until(lambda: spend_row(pg_dsn, cut)[1] == "home_node_offline", "cut run waits")

        waiting = start_run(b, on_b, project)
        await until(lambda: spend_row(pg_dsn, waiting)[1] == "home_node_offline", "run waits")

        llm.push(openai_tool_call("room_research_report", {"text": "读了两次配置", "sources": []}))
        await anyio.to_thread.run_sync(a.start)  # the same folder: the same node, the home
        await until(lambda: spend_row(pg_dsn, waiting)[0] != "running", "the run ends")
        assert spend_row(pg_dsn, waiting)[:2] == ("done", None)
        assert spend_row(pg_dsn, cut)[:2] == ("paused_reconcile", None)

        def audited(rid: int) -> list[str]:
            found = rows(
                pg_dsn,
                "SELECT action, detail_json FROM audit_events WHERE project_id = %s AND action"
                " IN ('research_wait', 'research_wait_over', 'research_reconcile') ORDER BY id",
                project,
            )
            return [action for action, detail in found if json.loads(detail)["research_id"] == rid]

        assert audited(waiting) == ["research_wait", "research_wait_over"]
        assert audited(cut) == ["research_wait", "research_reconcile"]
    finally:
        a.stop()
        b.stop()


class _Relay:
    def __init__(self) -> None:
        self.told: list[int] = []

    def start_research_elsewhere(self, research_id: int) -> None:
        self.told.append(research_id)


class _Leasing:
    research: Any = None

    async def where(self, project_id: int) -> Home:
        return Home.ELSEWHERE


async def test_a_start_heard_from_another_node_is_never_passed_on() -> None:
    """Three nodes: a run started on B (not the home) is told to every node; C, not the home
    either, must not tell everyone again (B and C would tell each other forever)."""
    relay = _Relay()
    core = SimpleNamespace(relay=relay)
    runner = ResearchRunner(core, None, closing=lambda: False, leasing=_Leasing())  # type: ignore[arg-type]
    assert await runner._fence(_Run(7, 3)) is False  # asked here: the home is told
    assert relay.told == [7]
    assert await runner._fence(_Run(7, 3, forward=False)) is False  # heard: not passed on
    assert relay.told == [7]
