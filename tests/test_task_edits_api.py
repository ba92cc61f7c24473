"""Tasks by hand over HTTP (docs/tasks.md "Tasks by hand"): create, edit, reorder and move a
card, on the real app (in-process, real SQLite, real migrations). Who may do what, invalid
dependencies and cycles, dates, and every refusal's field."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from room.actions import auth as auth_actions
from room.store import Tx
from room.store import members as members_store
from tests.support.inproc import Team, running_app


@pytest.fixture
def team(tmp_path: Path) -> Any:
    with running_app(tmp_path / "data", demo=False) as app:
        yield Team(app, "手动任务")


def problems(result: tuple[int, Any]) -> list[tuple[str, str | None]]:
    status, body = result
    assert status == 400, body
    return [(p["code"], p.get("field")) for p in body["error"]["details"]["problems"]]


def code(result: tuple[int, Any]) -> tuple[int, str]:
    status, body = result
    return status, body["error"]["code"]


def owner_handle(team: Team) -> str:
    return next(m.handle for m in team.members.values() if m.is_owner)


def create(team: Team, **item: Any) -> dict[str, Any]:
    body = {"title": "写接口", "owner": "zhang", "acceptance": ["有测试"], **item}
    status, data = team.owner("POST", f"/api/projects/{team.id}/tasks", body)
    assert status == 201, data
    return data["task"]


def test_people_create_tasks_through_the_plan_rules(team: Team) -> None:
    base = f"/api/projects/{team.id}/tasks"
    first = create(team, key="api")
    assert (
        first["key"] == "api" and first["state"] == "ready" and first["owner"]["handle"] == "zhang"
    )
    second = create(team, title="页面", depends_on=["api"])  # no key: one is picked
    assert second["key"] == "task-2" and second["state"] == "waiting"
    assert second["waiting_on"] == ["api"]
    # A plain member may create too (as they may submit a plan); dates need an owner.
    status, made = team.member(
        "POST", base, {"title": "文档", "owner": "zhang", "acceptance": ["写完"]}
    )
    assert status == 201 and made["task"]["key"] == "task-3"
    assert code(
        team.member(
            "POST",
            base,
            {"title": "x", "owner": "zhang", "acceptance": ["a"], "est_start": "2030-01-01"},
        )
    ) == (403, "not_owner")
    # Every problem at once, each under its field.
    found = problems(
        team.owner(
            "POST",
            base,
            {
                "key": "api",
                "title": " ",
                "owner": "nobody",
                "acceptance": [],
                "depends_on": ["ghost"],
            },
        )
    )
    assert ("duplicate_key", "key") in found
    assert ("bad_item", "title") in found
    assert ("missing_criteria", "acceptance") in found
    assert ("unknown_owner", "owner") in found
    assert ("unknown_dependency", "depends_on") in found
    assert problems(
        team.owner(
            "POST", base, {"title": "t", "owner": "zhang", "acceptance": ["a"], "colour": "red"}
        )
    ) == [("bad_item", "colour")]
    bad_dates = {
        "title": "t",
        "owner": "zhang",
        "acceptance": ["a"],
        "est_start": "2030-02-01",
        "est_end": "2030-01-01",
    }
    assert problems(team.owner("POST", base, bad_dates)) == [("end_before_start", "est_end")]
    status, board = team.owner("GET", base)
    assert [t["key"] for t in board["tasks"]] == ["api", "task-2", "task-3"]
    # The lead agent may create (it submits plans); edits are people's.
    status, made = team.agent(
        "POST",
        base,
        {"key": "lead-made", "title": "由 lead 建", "owner": "lead", "acceptance": ["a"]},
    )
    assert status == 201
    assert code(team.agent("PATCH", f"{base}/lead-made", {"title": "改"})) == (403, "human_only")


def test_edit_title_acceptance_owner_dates_and_history(team: Team) -> None:
    create(team, key="api")
    url = f"/api/projects/{team.id}/tasks/api"
    status, task = team.member(
        "PATCH",
        url,
        {"title": "  新标题 ", "acceptance": ["一", "二"], "owner": owner_handle(team)},
    )
    assert status == 200, task
    task = task["task"]
    assert task["title"] == "新标题" and [c["text"] for c in task["criteria"]] == ["一", "二"]
    assert task["owner_id"] == next(m.id for m in team.members.values() if m.is_owner)
    status, task = team.owner("PATCH", url, {"est_start": "2030-01-02", "est_end": "2030-01-05"})
    assert status == 200
    status, board = team.owner("GET", f"/api/projects/{team.id}/tasks")
    row = board["tasks"][0]
    assert (row["est_start"], row["est_end"]) == ("2030-01-02", "2030-01-05")
    assert code(team.member("PATCH", url, {"est_end": "2030-02-01"})) == (403, "not_owner")
    # A date not given keeps its value; the pair is checked as it will be stored.
    status, _ = team.owner("PATCH", url, {"est_end": "2030-01-09"})
    status, board = team.owner("GET", f"/api/projects/{team.id}/tasks")
    assert (board["tasks"][0]["est_start"], board["tasks"][0]["est_end"]) == (
        "2030-01-02",
        "2030-01-09",
    )
    assert problems(team.owner("PATCH", url, {"est_end": "2030-01-01"})) == [
        ("end_before_start", "est_end")
    ]
    assert problems(team.owner("PATCH", url, {"est_start": "2030-13-01"}))[0][1] == "est_start"
    status, one = team.owner("GET", url)
    edits = [h for h in one["task"]["history"] if h["event"] == "edited"]
    assert [h["note"] for h in edits] == ["title, acceptance, owner", "dates", "dates"]
    # Nothing, or an unknown field, is refused with nothing changed.
    assert problems(team.owner("PATCH", url, {})) == [("empty_edit", None)]
    assert problems(
        team.owner("PATCH", url, {"title": "", "acceptance": [" "], "owner": "ghost", "colour": 1})
    ) == [
        ("bad_field", None),
        ("bad_title", "title"),
        ("missing_criteria", "acceptance"),
        ("unknown_owner", "owner"),
    ]
    status, one = team.owner("GET", url)
    assert one["task"]["title"] == "新标题"
    assert code(team.owner("PATCH", f"/api/projects/{team.id}/tasks/nope", {"title": "x"})) == (
        404,
        "no_task",
    )


def test_dependencies_unknown_self_cycle_and_settling(team: Team) -> None:
    for key in ("a", "b", "c"):
        create(team, key=key)
    url = f"/api/projects/{team.id}/tasks"
    status, b = team.owner("PATCH", f"{url}/b", {"depends_on": ["a"]})
    assert status == 200 and b["task"]["state"] == "waiting" and b["task"]["depends_on"] == ["a"]
    status, c = team.owner("PATCH", f"{url}/c", {"depends_on": ["b"]})
    assert status == 200 and c["task"]["state"] == "waiting"
    status, body = team.owner("PATCH", f"{url}/a", {"depends_on": ["c"]})
    assert status == 400
    (cycle,) = body["error"]["details"]["problems"]
    assert cycle["code"] == "cycle" and cycle["field"] == "depends_on"
    assert cycle["keys"] == ["a", "c", "b"]
    assert problems(team.owner("PATCH", f"{url}/a", {"depends_on": ["a", "zz"]})) == [
        ("self_dependency", "depends_on"),
        ("unknown_dependency", "depends_on"),
    ]
    assert problems(team.owner("PATCH", f"{url}/a", {"depends_on": "b"})) == [
        ("bad_field", "depends_on")
    ]
    # Dropping the dependency settles the task: ready again (and dispatched).
    status, b = team.owner("PATCH", f"{url}/b", {"depends_on": []})
    assert status == 200 and b["task"]["state"] == "ready" and b["task"]["waiting_on"] == []


def test_owner_and_acceptance_lock_once_work_started(team: Team) -> None:
    create(team, key="api", owner="zhang")
    url = f"/api/projects/{team.id}/tasks/api"
    status, task = team.member("POST", f"{url}/start", {})
    assert status == 200 and task["task"]["state"] == "in_progress"
    assert problems(team.owner("PATCH", url, {"owner": owner_handle(team)})) == [
        ("owner_locked", "owner")
    ]
    status, task = team.member("POST", f"{url}/submit", {"summary": "好了", "messages": []})
    assert status == 400  # a submission needs evidence: nothing moved
    status, _ = team.owner("PATCH", url, {"title": "仍可改标题"})
    assert status == 200


def test_reorder(team: Team) -> None:
    for key in ("a", "b", "c"):
        create(team, key=key)
    url = f"/api/projects/{team.id}/tasks/order"
    status, data = team.member("PUT", url, {"keys": ["c", "a", "b"]})
    assert status == 200 and data["order"] == ["c", "a", "b"]
    status, board = team.owner("GET", f"/api/projects/{team.id}/tasks")
    assert [t["key"] for t in board["tasks"]] == ["c", "a", "b"]
    status, body = team.owner("PUT", url, {"keys": ["c", "a", "a", "x"]})
    assert status == 400 and body["error"]["code"] == "bad_order"
    details = body["error"]["details"]
    assert details == {"missing": ["b"], "unknown": ["x"], "repeated": ["a"]}
    assert code(team.agent("PUT", url, {"keys": ["a", "b", "c"]})) == (403, "human_only")


def test_moving_a_card_asks_for_the_event(team: Team) -> None:
    create(team, key="api", owner="zhang")
    url = f"/api/projects/{team.id}/tasks/api/move"
    # Not the owner: the start is refused in words, nothing moves.
    assert code(team.owner("POST", url, {"to": "in_progress"})) == (403, "task_actor_forbidden")
    status, body = team.owner("POST", url, {"to": "accepted"})
    assert (status, body["error"]["code"]) == (409, "invalid_task_move")
    assert body["error"]["details"]["reachable"] == ["in_progress", "cancelled"]
    assert code(team.owner("POST", url, {"to": "flying"})) == (400, "bad_state")
    status, task = team.member("POST", url, {"to": "in_progress"})
    assert status == 200 and task["task"]["state"] == "in_progress"
    assert code(team.member("POST", url, {"to": "in_review"})) == (400, "note_required")
    assert code(team.owner("POST", url, {"to": "cancelled"})) == (400, "note_required")
    status, task = team.owner("POST", url, {"to": "cancelled", "reason": "不做了"})
    assert (
        status == 200 and task["task"]["state"] == "cancelled" and task["task"]["note"] == "不做了"
    )
    status, task = team.owner("POST", url, {"to": "waiting", "reason": "又要做"})
    assert status == 200 and task["task"]["state"] in ("waiting", "ready")


def test_an_agent_that_is_not_the_lead_creates_nothing(team: Team) -> None:
    def job(conn: sqlite3.Connection, tx: Tx) -> str:
        members_store.insert(
            conn, project_id=team.id, kind="agent", user_id=None, role="backend", handle="be",
            display_name="后端", now=tx.now,
        )  # fmt: skip
        return auth_actions.issue_agent_token(conn, tx, str(team.id), "be")

    token = team.app.write(job)
    team.app.core.rosters.invalidate(team.id)  # the member was written behind its back
    body = {"title": "t", "owner": "be", "acceptance": ["a"]}
    status, answer = team.app.request("POST", f"/api/projects/{team.id}/tasks", body, token=token)
    assert (status, answer["error"]["code"]) == (403, "plan_forbidden")
    status, board = team.owner("GET", f"/api/projects/{team.id}/tasks")
    assert board["tasks"] == []
