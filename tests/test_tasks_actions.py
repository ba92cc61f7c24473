"""Plans, tasks, evidence and hand-off through the real actions on a real (migrated) database.

No HTTP and no model here (tests.support.task_world): the runtime is a recorder of wake-ups, so
each test sees exactly who was asked to act. The end-to-end flow with a scripted model is in ``test_tasks_live.py``.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from room.actions import decisions as decision_actions
from room.actions import plans as plan_actions
from room.actions import task_updates as updates
from room.actions import tasks as task_actions
from room.actions.task_updates import EvidenceInput
from room.agents.presets import PRESETS
from room.agents.task_tools import TASK_TOOLS
from room.agents.tools import ToolContext
from room.errors import ForbiddenError, RoomError
from room.rules.plans import PlanInvalidError
from room.rules.tasks import AcceptanceIncompleteError, TaskForbiddenError, TaskTransitionError
from room.store import Tx
from room.store import members as members_store
from room.store import tasks as tasks_store
from room.store.migrate import connect, migrate
from room.store.portfolio import PRIVATE_TABLES as PORTFOLIO_TABLES
from room.store.schema import MIGRATIONS
from room.store.schema_memory import MEMORY_TABLES
from room.store.schema_tasks import TASK_TABLES
from tests.support.task_world import World, item, make_world, plan, review, submit, write_file

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["sqlite", "postgresql"])
async def world(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[World]:
    """conftest's world, on each store (``[sqlite]``, ``[postgresql]``: a fresh database)."""
    url = None if request.param == "sqlite" else str(request.getfixturevalue("pg_dsn"))
    async for found in make_world(tmp_path, url):
        yield found


# -- schema -------------------------------------------------------------------------------------


def test_the_migration_creates_exactly_the_task_tables_each_with_project_id(tmp_path: Path) -> None:
    path = tmp_path / "room.sqlite"
    conn = connect(path)
    migrate(conn, path, now=time.time())
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    names = [migration.name for migration in MIGRATIONS]
    before = sqlite3.connect(":memory:")
    for migration in MIGRATIONS[: names.index("0004_tasks")]:
        before.executescript(migration.sql)
    earlier = {r[0] for r in before.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    before.executescript(MIGRATIONS[names.index("0004_tasks")].sql)
    with_tasks = {r[0] for r in before.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert with_tasks - earlier == set(TASK_TABLES)
    # Later migrations: 0006 the worktree of each attempt, 0008 agents' task checkpoints,
    # 0009 memory records, 0010 search, 0014 attachments, 0015 timelines, dependencies and the risk
    # log, 0016 reactions, 0017 research, 0021 the people an operator changed beside the server,
    # 0023 threads, 0024 notification levels, 0028 leases, 0029 upload reservations, 0031 the
    # database's cluster id, 0033 member stops whose notices are owed.
    later = {t for t in tables - with_tasks if not t.startswith("search_")}
    assert later == {
        "task_attempts",
        "checkpoints",
        *MEMORY_TABLES,
        "attachments",
        *PORTFOLIO_TABLES,
        "reactions",
        "research_runs",
        "research_revisions",
        "research_items",
        "user_changes",
        "threads",
        "thread_replies",
        "thread_follows",
        "notification_levels",
        "leases",
        "upload_reservations",
        "cluster_identity",
        "member_stops",
    }
    for table in TASK_TABLES:
        columns = {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}
        assert "project_id" in columns, table


def test_review_roles_are_the_roles_granted_room_task_review() -> None:
    granted = {role for role, p in PRESETS.items() if "room_task_review" in p.tools}
    assert granted == task_actions.REVIEW_ROLES


# -- plans --------------------------------------------------------------------------------------


async def test_a_faulty_plan_is_refused_whole_and_nothing_is_stored(world: World) -> None:
    messages = len(await world.messages())
    with pytest.raises(PlanInvalidError) as caught:
        await plan(
            world,
            item("a", "be", "c"),
            item("b", "fe", "a"),
            item("c", "be", "b"),
            {**item("d", "ghost"), "acceptance": []},
            item("e", "nobody"),
        )
    problems = [(p["code"], p["item"]) for p in caught.value.problems]
    assert problems == [
        ("missing_criteria", "d"),
        ("unknown_owner", "d"),
        ("unknown_owner", "e"),
        ("cycle", "a"),
    ]
    cycle = caught.value.problems[-1]
    assert cycle["keys"] == ["a", "c", "b"] and "→" in cycle["message"]
    for table in ("plans", "tasks", "task_criteria", "decisions", "task_events"):
        assert await world.count(table) == 0, table
    assert len(await world.messages()) == messages
    assert world.runtime.woken == []


async def test_only_people_and_the_lead_submit_plans(world: World) -> None:
    with pytest.raises(ForbiddenError) as caught:
        await plan(world, item("a", "be"), by="be")
    assert caught.value.code == "plan_forbidden"


async def test_a_plan_dispatches_ready_tasks_and_waiting_ones_say_what_they_wait_for(
    world: World,
) -> None:
    result = await plan(world, item("ui", "fe", "api"), item("api", "be"), item("db", "be"))
    assert [t["key"] for t in result["tasks"]] == ["api", "ui", "db"]  # dependency order
    board = await world.board()
    states = {t["key"]: (t["state"], t["waiting_on"]) for t in board["tasks"]}
    assert states == {"api": ("ready", []), "ui": ("waiting", ["api"]), "db": ("ready", [])}
    assert board["counts"]["ready"] == 2 and board["counts"]["waiting"] == 1
    # What a member may ask for, and who: the page offers people these buttons.
    api = next(t for t in board["tasks"] if t["key"] == "api")
    assert api["event_rules"] == {
        "start": {"who": ["owner"], "note": None},
        "cancel": {"who": ["human"], "note": "reason"},
    }
    be = await world.deliveries("be")
    assert [("`api`" in b, "`db`" in b, s) for b, s in be] == [
        (True, False, "pending"),
        (False, True, "pending"),
    ]
    # People read plain words; the tool call is the agent's alone (issue 14).
    assert "api 标准 1" in be[0][0] and "room_task_update" not in be[0][0]
    assert "下一步：开始任务" in be[0][0]
    agent_text = (await world.agent_texts("be"))[0]
    assert agent_text.startswith(be[0][0])
    assert 'room_task_update(task="api", action="start")' in agent_text
    assert await world.deliveries("fe") == []
    assert world.runtime.woken == [world["be"].id]  # once, after the commit
    # the plan notice first, then the dispatches
    bodies = [m["body"] for m in await world.messages()]
    assert bodies[0].startswith("🗺️ @lead 提交了计划 v1（3 项）")
    api_id = result["tasks"][0]["id"]
    history = await world.read(lambda c: tasks_store.task_events(c, api_id))
    assert [(h["event"], h["from"], h["to"], h["actor_kind"]) for h in history] == [
        ("created", None, "waiting", "agent"),
        ("deps_accepted", "waiting", "ready", "system"),
    ]
    frames = await world.frames("tasks")
    assert frames and {t["key"] for t in frames[-1]["tasks"]} == {"api", "ui", "db"}
    decisions = await world.frames("decisions")
    assert decisions[-1]["decisions"][0]["label"] == "ADR-0001"
    assert decisions[-1]["decisions"][0]["tasks"] == ["api", "ui", "db"]


async def test_a_later_plan_may_depend_on_existing_tasks_but_not_reuse_keys(world: World) -> None:
    await plan(world, item("api", "be"))
    with pytest.raises(PlanInvalidError) as caught:
        await plan(world, item("api", "fe"))
    assert [p["code"] for p in caught.value.problems] == ["duplicate_key"]
    result = await plan(world, item("ui", "fe", "api"))
    assert result["plan"]["version"] == 2
    ui = await world.task("ui")
    assert (ui["state"], ui["waiting_on"], ui["depends_on"]) == ("waiting", ["api"], ["api"])


# -- work, evidence, review ---------------------------------------------------------------------


async def test_the_full_cycle_dispatches_dependents_in_order(world: World) -> None:
    await plan(world, item("api", "be", criteria=2), item("ui", "fe", "api"))
    await updates.change_task(world.core, world["be"], "api", "start")
    name = write_file(world, "src/api.py", "def api(): ...\n")
    task = await submit(world, "be", "api", name, summary="接口写好了")
    assert (task["state"], task["revision"]) == ("in_review", 1)
    [artifact] = [e for e in task["evidence"] if e["kind"] == "artifact"]
    assert artifact["path"] == "src/api.py" and artifact["size"] == 15
    review_request = (await world.deliveries("lead"))[-1][0]
    assert "第 1 版已提交评审" in review_request and "src/api.py（15 字节" in review_request
    assert "接口写好了" in review_request

    task = await review(world, "lead", "api", (1, True))
    assert task["state"] == "in_review" and task["missing"] == [2]
    with pytest.raises(AcceptanceIncompleteError):
        await updates.change_task(world.core, world["owner"], "api", "accept")
    assert (await world.deliveries("fe")) == []  # nothing for ui yet

    task = await review(world, "qa", "api", (2, True))
    assert task["state"] == "accepted" and all(c["passed"] for c in task["criteria"])
    [(body, state)] = await world.deliveries("fe")
    assert "`ui` 已就绪" in body and "已验收的依赖：`api`" in body and state == "pending"
    ui = await world.task("ui")
    assert (ui["state"], ui["waiting_on"]) == ("ready", [])
    notices = [m["body"] for m in await world.messages() if m["kind"] == "system"]
    accepted_at = next(i for i, b in enumerate(notices) if "全部标准通过" in b)
    ready_at = next(i for i, b in enumerate(notices) if "`ui` 已就绪" in b)
    assert accepted_at < ready_at
    # Every message people read in this cycle is free of tool syntax; the agents got theirs.
    for message in await world.messages():
        assert "room_task" not in message["body"], message["body"]
    assert "room_task_review(" in (await world.agent_texts("lead"))[-1]
    audit = await world.read(
        lambda c: [r[0] for r in c.execute("SELECT action FROM audit_events ORDER BY id")]
    )
    assert [a for a in audit if a.startswith("task.")][-4:] == [
        "task.start",
        "task.submit",
        "task.accept",
        "task.deps_accepted",
    ]


async def test_a_new_revision_invalidates_earlier_passes(world: World) -> None:
    await plan(world, item("api", "be", criteria=2))
    await updates.change_task(world.core, world["be"], "api", "start")
    await submit(world, "be", "api", write_file(world, "a.txt", "v1"))
    task = await review(world, "lead", "api", (1, True), (2, False))
    assert task["state"] == "changes_requested" and "2. 检查了第 2 条" in task["note"]
    assert [c["passed"] for c in task["criteria"]] == [True, False]  # the review's verdicts
    assert "需要修改" in (await world.deliveries("be"))[-1][0]
    task = await submit(world, "be", "api", write_file(world, "a.txt", "v2"))
    assert task["revision"] == 2
    assert [c["passed"] for c in task["criteria"]] == [None, None]  # not checked on r2
    assert task["criteria"][0]["verdict"] == {**task["criteria"][0]["verdict"], "revision": 1,
                                              "passed": True, "counts": False}  # fmt: skip
    task = await review(world, "lead", "api", (2, True))
    assert task["state"] == "in_review" and task["missing"] == [1]
    task = await review(world, "lead", "api", (1, True))
    assert task["state"] == "accepted"


async def test_agents_cannot_review_their_own_task_but_people_can(world: World) -> None:
    await plan(world, item("own", "lead"), by="owner")
    await updates.change_task(world.core, world["lead"], "own", "start")
    await submit(world, "lead", "own", write_file(world, "own.md", "x"))
    with pytest.raises(TaskForbiddenError) as caught:
        await review(world, "lead", "own", (1, True))
    assert caught.value.code == "self_review"
    with pytest.raises(TaskForbiddenError):
        await review(world, "be", "own", (1, True))  # not a reviewer role, not the reviewer
    assert (await review(world, "owner", "own", (1, True)))["state"] == "accepted"


async def test_only_the_owner_moves_its_work(world: World) -> None:
    await plan(world, item("api", "be"))
    with pytest.raises(TaskForbiddenError):
        await updates.change_task(world.core, world["fe"], "api", "start")
    with pytest.raises(TaskTransitionError) as caught:
        await updates.change_task(world.core, world["be"], "api", "unblock")
    assert caught.value.details["allowed"] == [
        "deps_reopened", "start", "require_sync", "handoff", "cancel",
    ]  # fmt: skip
    with pytest.raises(RoomError) as blocked:
        await updates.change_task(world.core, world["be"], "api", "block", note="卡住了")
    assert blocked.value.code == "invalid_task_transition"  # ready work is started, not blocked
    await updates.change_task(world.core, world["be"], "api", "start")
    with pytest.raises(RoomError) as missing:
        await updates.change_task(world.core, world["be"], "api", "block", note="  ")
    assert missing.value.code == "note_required"
    task = await updates.change_task(world.core, world["be"], "api", "block", note="缺少密钥")
    assert (task["state"], task["note"]) == ("blocked", "缺少密钥")
    assert "受阻" in (await world.deliveries("lead"))[-1][0]  # the reviewer hears of it
    task = await updates.change_task(world.core, world["owner"], "api", "unblock")
    assert (task["state"], task["note"]) == ("in_progress", None)


async def test_submissions_need_evidence_inside_the_workspace(world: World) -> None:
    await plan(world, item("api", "be"))
    await updates.change_task(world.core, world["be"], "api", "start")
    outside = world.workspace.parent / "secret.txt"
    outside.write_text("top secret", encoding="utf-8")
    (world.workspace / "link.txt").symlink_to(outside)
    cases = {
        "evidence_required": EvidenceInput("做完了"),
        "note_required": EvidenceInput("  ", ("a",)),
        "path_escapes": EvidenceInput("x", ("../secret.txt",)),
        "absolute_path": EvidenceInput("x", (str(outside),)),
        "outside_workspace": EvidenceInput("x", ("link.txt",)),
        "artifact_missing": EvidenceInput("x", ("nope.txt",)),
        "bad_evidence_message": EvidenceInput("x", (), (999_999,)),
        "bad_evidence_command": EvidenceInput("x", (), (), (999_999,)),
    }
    for code, evidence in cases.items():
        with pytest.raises(RoomError) as caught:
            await updates.change_task(world.core, world["be"], "api", "submit", evidence=evidence)
        assert caught.value.code == code
    task = await world.task("api")
    assert (task["state"], task["revision"], task["evidence"]) == ("in_progress", 0, [])


async def test_command_evidence_exists_only_as_the_runtime_recorded_it(world: World) -> None:
    await plan(world, item("api", "be"), item("ui", "fe"))
    for who, key in (("be", "api"), ("fe", "ui")):
        await updates.change_task(world.core, world[who], key, "start")
    output = "collected 3 items\n3 passed\n"
    command_id = await updates.record_command_result(
        world.core, world["be"], turn_id=None, command="pytest -q", exit_code=0,
        duration_ms=1234, output=output,
    )  # fmt: skip
    with pytest.raises(ForbiddenError) as caught:
        await updates.change_task(
            world.core,
            world["fe"],
            "ui",
            "submit",
            evidence=EvidenceInput("x", commands=(command_id,)),
        )
    assert caught.value.code == "command_not_yours"
    task = await updates.change_task(
        world.core,
        world["be"],
        "api",
        "submit",
        evidence=EvidenceInput("测试通过", commands=(command_id,)),
    )
    [command] = [e["command"] for e in task["evidence"] if e["kind"] == "command"]
    assert command["exit_code"] == 0 and command["recorded_for"] == world["be"].id
    assert command["output_tail"] == output
    assert command["output_sha256"] == hashlib.sha256(output.encode()).hexdigest()
    # a message of the project may be cited as well
    message_id = (await world.messages())[-1]["id"]
    task = await updates.change_task(
        world.core,
        world["fe"],
        "ui",
        "submit",
        evidence=EvidenceInput("见消息", messages=(message_id,)),
    )
    [cited] = [e for e in task["evidence"] if e["kind"] == "message"]
    assert cited["message_id"] == message_id and cited["seq"] > 0


# -- hand-off -----------------------------------------------------------------------------------


async def test_a_member_leaving_hands_off_open_tasks(world: World) -> None:
    await plan(world, item("api", "be"), item("db", "be"), item("ui", "fe", "api"))
    await updates.change_task(world.core, world["be"], "api", "start")
    be = world["be"].id

    def leave(conn: sqlite3.Connection, tx: Tx) -> int:
        members_store.set_status(conn, be, "left", tx.now)
        return task_actions.handoff_open_tasks(conn, tx, world.project_id, be)

    assert await world.write(leave) == 2
    assert (
        await world.write(
            lambda c, tx: task_actions.handoff_open_tasks(c, tx, world.project_id, be)
        )
        == 0
    )  # idempotent
    await world.refresh()
    board = {t["key"]: t["state"] for t in (await world.board())["tasks"]}
    assert board == {"api": "handoff", "db": "handoff", "ui": "waiting"}
    notice = (await world.messages())[-1]["body"]
    assert notice.startswith("📦 @be 已离开") and "`api`、`db`" in notice
    audit = await world.read(
        lambda c: c.execute(
            "SELECT actor_kind, from_state, detail_json FROM audit_events"
            " WHERE action = 'task.handoff' ORDER BY id"
        ).fetchall()
    )
    assert [(a, f, json.loads(d)["key"]) for a, f, d in audit] == [
        ("system", "in_progress", "api"),
        ("system", "ready", "db"),
    ]
    with pytest.raises(RoomError) as caught:
        await updates.change_task(world.core, world["owner"], "api", "reassign", owner="be")
    assert caught.value.code == "bad_owner"  # the leaver cannot take it back
    task = await updates.change_task(world.core, world["owner"], "api", "reassign", owner="@fe")
    assert (task["state"], task["owner"]["handle"]) == ("ready", "fe")
    assert "`api` 已就绪 — @fe" in (await world.deliveries("fe"))[-1][0]


# -- plan-first ---------------------------------------------------------------------------------


async def test_the_goal_reaches_the_lead_and_plan_first_holds_dispatch(world: World) -> None:
    owner = world["owner"]
    message_id = await world.write(
        lambda c, tx: plan_actions.deliver_goal(
            c, tx, world.project_id, owner.id, "做一个待办应用", True
        )
    )
    again = await world.write(
        lambda c, tx: plan_actions.deliver_goal(
            c, tx, world.project_id, owner.id, "做一个待办应用", True
        )
    )
    assert again == message_id
    [goal] = [m for m in await world.messages() if m["id"] == message_id]
    assert goal["author_id"] == owner.id and goal["kind"] == "chat"
    assert goal["mentions"] == [world["lead"].id] and "做一个待办应用" in goal["body"]
    [(body, state)] = await world.deliveries("lead")
    # The goal is posted in the person's name: no tool syntax in it; the lead gets the tool.
    assert state == "pending" and "room_plan_submit" not in body and "计划优先" in body
    [text] = await world.agent_texts("lead")
    assert text.startswith(body) and "room_plan_submit" in text
    assert world.runtime.woken == [world["lead"].id]

    result = await plan(world, item("api", "be"), item("ui", "fe", "api"))
    assert result["plan"]["started"] is False
    api = await world.task("api")
    assert (api["state"], api["held"]) == ("ready", True)
    assert "start" not in api["event_rules"]  # the page offers no 开始 until the plan starts
    assert await world.deliveries("be") == []
    with pytest.raises(RoomError) as caught:
        await updates.change_task(world.core, world["be"], "api", "start")
    assert caught.value.code == "plan_not_started"
    with pytest.raises(ForbiddenError):
        await plan_actions.start_plan(world.core, world["lead"])
    started = await plan_actions.start_plan(world.core, owner)
    assert started["tasks"] == 2
    [(body, _)] = await world.deliveries("be")
    assert "`api` 已就绪" in body
    assert await world.deliveries("fe") == []
    with pytest.raises(RoomError):
        await plan_actions.start_plan(world.core, owner)  # nothing left to start


# -- snapshots ----------------------------------------------------------------------------------


async def test_digest_is_deterministic_and_purge_order_keeps_foreign_keys(world: World) -> None:
    empty = await world.read(lambda c: task_actions.digest_rows(c, world.project_id))
    assert list(empty) == list(TASK_TABLES) and all(v["count"] == 0 for v in empty.values())
    await plan(world, item("api", "be"), item("ui", "fe", "api"))
    await updates.change_task(world.core, world["be"], "api", "start")
    await submit(world, "be", "api", write_file(world, "a.txt", "x"))
    await review(world, "lead", "api", (1, True))
    first = await world.read(lambda c: task_actions.digest_rows(c, world.project_id))
    second = await world.read(lambda c: task_actions.digest_rows(c, world.project_id))
    assert first == second and first["tasks"]["count"] == 2 and first["evidence"]["count"] == 2
    await updates.change_task(world.core, world["fe"], "ui", "start")
    third = await world.read(lambda c: task_actions.digest_rows(c, world.project_id))
    assert third["tasks"]["sha256"] != first["tasks"]["sha256"]
    assert third["plans"] == first["plans"]

    def purge(conn: sqlite3.Connection, tx: Tx) -> None:
        for table in TASK_TABLES:
            conn.execute(f"DELETE FROM {table} WHERE project_id = ?", (world.project_id,))

    await world.write(purge)  # foreign keys are on: a wrong order would raise
    after = await world.read(lambda c: task_actions.digest_rows(c, world.project_id))
    assert after == empty


async def test_reopening_accepted_work_sends_dependents_back_to_waiting(world: World) -> None:
    await plan(world, item("api", "be"), item("ui", "fe", "api"), item("docs", "qa", "api"))
    await updates.change_task(world.core, world["be"], "api", "start")
    await submit(world, "be", "api", write_file(world, "a.txt", "x"))
    await review(world, "lead", "api", (1, True))
    await updates.change_task(world.core, world["fe"], "ui", "start")
    with pytest.raises(RoomError) as caught:
        await updates.change_task(world.core, world["lead"], "api", "reopen", note="有漏洞")
    assert caught.value.code == "task_actor_forbidden"  # reopening is a person's call
    task = await updates.change_task(world.core, world["owner"], "api", "reopen", note="有漏洞")
    assert (task["state"], task["note"]) == ("changes_requested", "有漏洞")
    states = {t["key"]: (t["state"], t["waiting_on"]) for t in (await world.board())["tasks"]}
    assert states == {
        "api": ("changes_requested", []),
        "ui": ("in_progress", []),  # work already started is not pulled back
        "docs": ("waiting", ["api"]),
    }
    assert "重新打开" in (await world.deliveries("be"))[-1][0]


# -- agent tools --------------------------------------------------------------------------------


async def run_tool(world: World, who: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    context = ToolContext(world.core, world[who], 0, f"call-{name}", {})
    reply = await TASK_TOOLS[name].run(context, args)
    assert isinstance(reply, str)  # task tools answer plain JSON text
    return dict(json.loads(reply))


async def test_tools_answer_json_and_refusals_say_what_to_fix(world: World) -> None:
    refused = await run_tool(world, "lead", "room_plan_submit", {"items": [
        {"key": "a", "title": "A", "owner": "be", "acceptance": []},
    ]})  # fmt: skip
    assert refused["ok"] is False and refused["error"] == "plan_invalid"
    [problem] = refused["details"]["problems"]
    assert problem["code"] == "missing_criteria" and problem["hint"]
    made = await run_tool(world, "lead", "room_plan_submit", {"goal": "g", "items": [
        item("api", "be"), item("ui", "fe", "api"),
    ]})  # fmt: skip
    assert made["ok"] and [(t["key"], t["state"]) for t in made["tasks"]] == [
        ("api", "ready"),
        ("ui", "waiting"),
    ]
    listed = await run_tool(world, "fe", "room_task_list", {"mine": True})
    assert [(t["key"], t["waiting_on"], t["yours"]) for t in listed["tasks"]] == [
        ("ui", ["api"], True)
    ]
    bad = await run_tool(world, "be", "room_task_update", {"task": "api", "action": "accept"})
    assert bad["error"] == "bad_task_event"  # an owner cannot accept through this tool
    started = await run_tool(world, "be", "room_task_update", {"task": "api", "action": "start"})
    assert started["ok"] and started["task"]["state"] == "in_progress"
    escaped = await run_tool(world, "be", "room_task_update", {
        "task": "api", "action": "submit", "summary": "x", "artifacts": ["/etc/passwd"],
    })  # fmt: skip
    assert escaped["error"] == "absolute_path" and "hint" in escaped["details"]
    proposed = await run_tool(world, "lead", "room_decision_propose", {
        "title": "接口风格", "context": "统一", "decision": "REST", "tasks": ["api"],
    })  # fmt: skip
    assert proposed["error"] == "alternatives_required"  # what was rejected, and why
    proposed = await run_tool(world, "lead", "room_decision_propose", {
        "title": "接口风格", "context": "统一", "decision": "REST", "tasks": ["api"],
        "alternatives": [{"option": "GraphQL", "why_rejected": "客户端只有一个"}],
    })  # fmt: skip
    assert proposed == {"ok": True, "decision": "ADR-0002", "status": "proposed"}


# -- the link tables on SQLite 3.40 (issue 14, item 24) -------------------------------------------


def _checks(conn: sqlite3.Connection) -> list[str]:
    return [conn.execute(f"PRAGMA {p}").fetchone()[0] for p in ("quick_check", "integrity_check")]


@pytest.mark.parametrize("world", ["sqlite"], indirect=True)  # SQLite's integrity checks
async def test_a_plan_with_dependencies_and_a_bound_decision_checks_clean(world: World) -> None:
    """SQLite 3.40 misreads a WITHOUT ROWID table whose non-key column stands before a key column
    (``NULL value in task_deps.project_id``); the link tables keep their key columns first."""
    await plan(world, item("api", "be"), item("ui", "fe", "api"), item("docs", "qa", "api", "ui"))
    await decision_actions.propose_decision(
        world.core, world["owner"], title="接口", context="c", decision="d", task_keys=["api", "ui"],
        alternatives=[{"option": "e", "why_rejected": "f"}],
    )  # fmt: skip
    counts = await world.read(
        lambda c: [c.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
                   for t in ("task_deps", "decision_tasks")]
    )  # fmt: skip
    assert counts[0] == 3 and counts[1] >= 2
    assert await world.read(_checks) == ["ok", "ok"]


def test_the_link_tables_move_their_keys_first_and_old_snapshots_still_verify(
    tmp_path: Path,
) -> None:
    path = tmp_path / "room.sqlite"
    conn = connect(path)
    names = [m.name for m in MIGRATIONS]
    before = names.index("0007_link_tables_key_first")
    conn.execute("PRAGMA foreign_keys = OFF")  # rows without their parents: only the copy matters
    for migration in MIGRATIONS[:before]:
        conn.executescript(migration.sql)
    conn.execute(f"PRAGMA user_version = {before}")
    conn.executemany(
        "INSERT INTO task_deps (project_id, task_id, depends_on_id) VALUES (?, ?, ?)",
        [(7, 2, 1), (7, 3, 1), (7, 3, 2)],
    )
    conn.execute("INSERT INTO decision_tasks (project_id, decision_id, task_id) VALUES (7, 1, 3)")
    conn.commit()
    if sqlite3.sqlite_version_info[:2] == (3, 40):  # Debian 12's SQLite, as CI runs it
        assert _checks(conn)[0] == "NULL value in task_deps.project_id"
    old = tasks_store.digest_rows(conn, 7)
    # The snapshot digest as it was computed before: ``SELECT *`` in the old column order.
    legacy = hashlib.sha256()
    for row in [(7, 2, 1), (7, 3, 1), (7, 3, 2)]:
        legacy.update(json.dumps(list(row)).encode() + b"\n")
    assert old["task_deps"] == {"count": 3, "sha256": legacy.hexdigest()}
    migrate(conn, path, now=time.time())
    assert tasks_store.digest_rows(conn, 7) == old
    assert _checks(conn) == ["ok", "ok"]
    conn.close()
