"""Timelines, reasons, complete/abandon, STATUS.md, the index, GANTT.md and the risk scan on
the real app (in-process, real SQLite, real migrations)."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from room.cli import main as cli_main
from room.rules.lifecycle import ProjectState, dispatch_open
from tests.support.inproc import App, Team, owner_user, running_app

TODAY = datetime.now(UTC).date()


def day(offset: int) -> str:
    return (TODAY + timedelta(days=offset)).isoformat()


@pytest.fixture
def app(tmp_path: Path) -> Any:
    with running_app(tmp_path / "data", demo=False) as handle:
        yield handle


class World(Team):
    def __init__(self, app: App) -> None:
        super().__init__(app, "甲项目")

    def new_project(self, name: str) -> int:
        pid, _, _ = self.app.project_with(name, owner_user(self.app))
        return pid

    def notices(self, pid: int, rule: str) -> int:
        with self.app.db() as conn:
            rows = conn.execute(
                "SELECT frame FROM messages WHERE project_id = ? AND kind = 'system'", (pid,)
            ).fetchall()
        return sum(
            1 for (frame,) in rows if f'"risk": "{rule}"' in frame or f'"risk":"{rule}"' in frame
        )


@pytest.fixture
def world(app: App) -> World:
    return World(app)


def err(result: tuple[int, Any]) -> tuple[int, str, Any]:
    status, body = result
    e = body["error"]
    return status, e["code"], (e.get("details") or {}).get("field")


TIMELINE = {
    "start": day(-10),
    "end": day(20),
    "hours_estimated": 40,
    "milestones": [
        {"name": "设计", "date": day(-5), "status": "done"},
        {"name": "实现", "date": day(5), "status": "in_progress"},
    ],
}


def test_owner_edits_the_timeline_and_bad_input_changes_nothing(world: World) -> None:
    base = f"/api/projects/{world.id}/timeline"
    status, tl = world.owner("PUT", base, TIMELINE)
    assert status == 200 and tl["progress"] == 50 and tl["bar"] == "█" * 10 + "░" * 10
    assert [m["status"] for m in tl["milestones"]] == ["done", "in_progress"]

    bad = {**TIMELINE, "milestones": [{"name": "远未来", "date": "10000-01-01"}]}
    assert err(world.owner("PUT", base, bad)) == (400, "bad_date", "milestones[0].date")
    assert err(world.owner("PUT", base, {"start": day(3), "end": day(1)})) == (
        400,
        "end_before_start",
        "end",
    )
    assert err(world.member("PUT", base, TIMELINE))[:2] == (403, "not_owner")
    assert err(world.agent("PUT", base, TIMELINE))[:2] == (403, "not_owner")
    status, after = world.member("GET", base)
    assert status == 200 and after["end"] == day(20) and len(after["milestones"]) == 2

    status, summary = world.owner("PUT", f"/api/projects/{world.id}/summary",
                                  {"summary": "搭建 待办接口 以便 前端联调"})  # fmt: skip
    assert status == 200 and summary["summary"] == "搭建 待办接口 以便 前端联调"
    assert err(world.member("PUT", f"/api/projects/{world.id}/summary", {"summary": "x"}))[1] == (
        "not_owner"
    )


def test_pause_reason_is_stored_shown_and_cleared_on_resume(world: World) -> None:
    path = f"/api/projects/{world.id}/lifecycle"
    status, result = world.owner("POST", path, {"op": "pause", "reason": "等设计稿 定稿"})
    assert status == 200 and result["project"]["state_reason"] == "等设计稿 定稿"
    status, text = world.owner("GET", f"/projects/{world.id}/status.md")
    assert "## 🛑" in text and "原因 (reason)：等设计稿 定稿" in text
    status, index = world.owner("GET", "/api/index.md")
    assert "原因：等设计稿 定稿" in index
    assert err(world.owner("POST", path, {"op": "resume", "reason": "x"}))[1] == (
        "reason_not_accepted"
    )
    status, result = world.owner("POST", path, {"op": "resume"})
    assert result["project"]["state"] == "active" and result["project"]["state_reason"] is None


def test_complete_records_actual_hours_is_owner_only_audited_and_closes_dispatch(
    world: World,
) -> None:
    world.owner("PUT", f"/api/projects/{world.id}/timeline", TIMELINE)
    path = f"/api/projects/{world.id}/lifecycle"
    assert err(world.member("POST", path, {"op": "complete"}))[:2] == (403, "not_owner")
    assert err(world.agent("POST", path, {"op": "complete"}))[:2] == (403, "agent_forbidden")
    assert err(world.owner("POST", path, {"op": "pause", "actual_hours": 3}))[1] == (
        "hours_not_accepted"
    )
    assert err(world.owner("POST", path, {"op": "complete", "actual_hours": -2}))[1] == "bad_hours"
    status, result = world.owner(
        "POST", path, {"op": "complete", "reason": "上线了", "actual_hours": 61.5}
    )
    assert status == 200 and result["project"]["state"] == "complete"
    assert not dispatch_open(ProjectState.COMPLETE) and not dispatch_open(ProjectState.ABANDONED)
    status, tl = world.owner("GET", f"/api/projects/{world.id}/timeline")
    assert tl["hours_actual"] == 61.5
    # read-only: no more timeline edits, no posting
    assert err(world.owner("PUT", f"/api/projects/{world.id}/timeline", TIMELINE))[:2] == (
        409,
        "project_closed",
    )
    with world.app.db() as conn:
        audit = conn.execute(
            "SELECT action, outcome, detail_json FROM audit_events WHERE project_id = ?"
            " AND action = 'project.complete' ORDER BY id",
            (world.id,),
        ).fetchall()
    outcomes = [(a, o) for a, o, _ in audit]
    assert ("project.complete", "refused") in outcomes and ("project.complete", "ok") in outcomes
    assert json.loads(audit[-1][2])["actual_hours"] == 61.5
    # what leaves complete: restore (to paused) and trash
    status, result = world.owner("POST", path, {"op": "restore"})
    assert result["project"]["state"] == "paused" and result["project"]["state_reason"] is None
    status, result = world.owner("POST", path, {"op": "abandon", "reason": "需求取消"})
    assert result["project"]["state"] == "abandoned"
    status, result = world.owner("POST", path, {"op": "trash"})
    assert result["project"]["state"] == "trashed"


def test_status_md_has_every_section(world: World) -> None:
    world.owner("PUT", f"/api/projects/{world.id}/timeline", TIMELINE)
    status, text = world.member("GET", f"/projects/{world.id}/status.md")
    assert status == 200
    for heading in ("最后更新", "提交 (git commit)", "负责人 (PM)：@owner", "## 🎯", "## 📍",
                    "## 📋", "## 🔑", "## 🛑", "## 📅", "## ⚠️"):  # fmt: skip
        assert heading in text, heading
    assert "✅ " + day(-5) + " 设计" in text and "🔄 " + day(5) + " 实现" in text
    assert "`██████████░░░░░░░░░░` 50%" in text


def test_risk_scan_logs_findings_and_posts_one_notice_per_new_red(world: World) -> None:
    late = {"start": day(-20), "end": day(-1),
            "milestones": [{"name": "交付", "date": day(-2), "status": "pending"}]}  # fmt: skip
    world.owner("PUT", f"/api/projects/{world.id}/timeline", late)
    status, scan = world.owner("POST", "/api/risk-scan")
    assert status == 200
    assert [(f["project_id"], f["rule"]) for f in scan["red"]] == [(world.id, "overdue")]
    assert scan["red"][0]["suggestion"] and "## 🔴 1" in scan["text"]
    world.owner("POST", "/api/risk-scan")
    assert world.notices(world.id, "overdue") == 1  # one notice, not one per scan
    status, risks = world.member("GET", f"/api/projects/{world.id}/risks")
    assert [(r["rule"], r["scans"], r["resolved_at"]) for r in risks["risks"]] == [
        ("overdue", 2, None)
    ]
    status, index = world.owner("GET", "/api/index.md")
    assert "| 🔴 甲项目 |" in index and "🔴 逾期" in index
    status, text = world.owner("GET", f"/projects/{world.id}/status.md")
    assert "🔴 overdue：预计结束" in text
    # fixed: the finding is resolved, no new notice
    world.owner("PUT", f"/api/projects/{world.id}/timeline", {**late, "end": day(10)})
    status, scan = world.owner("POST", "/api/risk-scan")
    assert scan["red"] == [] and world.notices(world.id, "overdue") == 1
    status, risks = world.member("GET", f"/api/projects/{world.id}/risks")
    assert risks["risks"][0]["resolved_at"] is not None
    assert err(world.agent("POST", "/api/risk-scan"))[:2] == (403, "human_only")


def test_dependency_cycle_over_three_projects_and_the_cli(world: World, app: App) -> None:
    b, c = world.new_project("乙项目"), world.new_project("丙项目")
    ms = {"milestones": [{"name": "m", "date": day(30)}]}
    for pid, target in ((world.id, b), (b, c), (c, world.id)):
        world.owner("PUT", f"/api/projects/{pid}/timeline", ms)
        status, deps = world.owner("PUT", f"/api/projects/{pid}/dependencies",
                                   {"dependencies": [{"kind": "project", "project_id": target},
                                                     {"kind": "skill", "name": " Rust "}]})  # fmt: skip
        assert status == 200, deps
    assert err(world.owner("PUT", f"/api/projects/{b}/dependencies",
                           {"dependencies": [{"kind": "project", "project_id": 999}]}))[:2] == (
        404, "no_project",
    )  # fmt: skip
    assert err(world.owner("PUT", f"/api/projects/{b}/dependencies",
                           {"dependencies": [{"kind": "friend", "name": "x"}]}))[1] == (
        "bad_dependency"
    )  # fmt: skip
    code = cli_main(["risk", "--data", str(app.settings.data), "--json"])
    assert code == 4
    status, risks = world.owner("GET", f"/api/projects/{b}/risks")
    assert [r["rule"] for r in risks["risks"]] == ["dependency_cycle"]
    assert all(world.notices(p, "dependency_cycle") == 1 for p in (world.id, b, c))
    status, gantt = world.owner("GET", f"/projects/{b}/gantt.md")
    assert status == 200 and gantt.startswith("# GANTT — 乙项目") and "⏳ " + day(30) in gantt
    # three projects with an open milestone on the same day: a resource conflict
    assert "⚠️ 资源冲突：3 个项目同日" in gantt
    status, data = world.owner("GET", "/api/portfolio")
    assert data["conflicts"] == [{"date": day(30), "project_ids": sorted([world.id, b, c])}]


def test_task_dates(world: World) -> None:
    plan = {"goal": "g", "items": [{"key": "api", "title": "接口", "owner": "lead",
                                     "acceptance": ["能用"]}]}  # fmt: skip
    status, _ = world.owner("POST", f"/api/projects/{world.id}/plan", plan)
    assert status == 201
    path = f"/api/projects/{world.id}/tasks/api/dates"
    status, dates = world.owner("PUT", path, {"est_start": day(1), "est_end": day(4)})
    assert status == 200 and dates["est_end"] == day(4)
    assert err(world.owner("PUT", path, {"est_start": day(4), "est_end": day(1)}))[1] == (
        "end_before_start"
    )
    assert err(world.owner("PUT", f"/api/projects/{world.id}/tasks/nope/dates", {}))[1] == (
        "no_task"
    )
    status, tl = world.member("GET", f"/api/projects/{world.id}/timeline")
    assert [(t["key"], t["est_start"], t["est_end"]) for t in tl["tasks"]] == [
        ("api", day(1), day(4))
    ]


def test_purge_deletes_the_portfolio_rows(world: World) -> None:
    other = world.new_project("依赖方")
    world.owner("PUT", f"/api/projects/{world.id}/timeline", TIMELINE)
    world.owner("PUT", f"/api/projects/{world.id}/summary", {"summary": "要清除的"})
    world.owner("PUT", f"/api/projects/{other}/dependencies",
                {"dependencies": [{"kind": "project", "project_id": world.id}]})  # fmt: skip
    world.owner("POST", "/api/risk-scan")
    path = f"/api/projects/{world.id}/lifecycle"
    assert world.owner("POST", path, {"op": "trash"})[0] == 200
    status, result = world.owner(
        "POST", f"/api/projects/{world.id}/purge", {"confirm_name": "甲项目", "confirmed": True}
    )
    assert status == 200, result
    with world.app.db() as conn:
        left = {
            table: conn.execute(
                f"SELECT count(*) FROM {table} WHERE project_id = ?", (world.id,)
            ).fetchone()[0]
            for table in ("project_timelines", "milestones", "milestone_counts", "risk_log")
        }
        refs = conn.execute(
            "SELECT count(*) FROM project_dependencies WHERE target_project_id = ?", (world.id,)
        ).fetchone()[0]
    assert left == dict.fromkeys(left, 0) and refs == 0


def risk_rules(app: App) -> list[str]:
    with app.db() as conn:
        return [r[0] for r in conn.execute("SELECT rule FROM risk_log")]


def test_the_daily_scan_runs_at_start_only_when_set(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with running_app(data, demo=False) as app:
        pid, _, _ = app.project_with("每日扫描", owner_user(app))
        app.request("PUT", f"/api/projects/{pid}/timeline",
                    {"end": day(-1), "milestones": [{"name": "m", "date": day(-3)}]},
                    cookie=app.owner_cookie)  # fmt: skip
    with running_app(data, demo=False) as app:  # the setting is off by default
        app.call(asyncio.sleep, 0.3)
        assert risk_rules(app) == []
    with running_app(data, demo=False, risk_scan_daily=True) as app:
        for _ in range(200):
            if risk_rules(app):
                break
            app.call(asyncio.sleep, 0.05)
        assert risk_rules(app) == ["overdue"]


def test_the_portfolio_is_per_person_and_says_who_may_edit(world: World) -> None:
    world.new_project("只有所有者的项目")
    status, mine = world.owner("GET", "/api/portfolio")
    assert status == 200 and {p["name"]: p["owner"] for p in mine["projects"]} == {
        "甲项目": True,
        "只有所有者的项目": True,
    }
    status, theirs = world.member("GET", "/api/portfolio")
    assert {p["name"]: p["owner"] for p in theirs["projects"]} == {"甲项目": False}
    status, text = world.member("GET", "/api/index.md")
    assert "甲项目" in text and "只有所有者的项目" not in text
    assert err(world.agent("GET", "/api/index.md"))[:2] == (403, "human_only")
    assert err(world.agent("GET", "/api/portfolio"))[:2] == (403, "human_only")


def test_a_timeline_field_left_out_keeps_its_value(world: World) -> None:
    base = f"/api/projects/{world.id}/timeline"
    world.owner("PUT", base, {**TIMELINE, "hours_actual": 12})
    status, tl = world.owner("PUT", base, {"end": day(30)})
    assert status == 200 and tl["end"] == day(30) and tl["start"] == day(-10)
    assert tl["hours_actual"] == 12 and len(tl["milestones"]) == 2
    # merged values are checked together: an end before the kept start is refused
    assert err(world.owner("PUT", base, {"end": day(-20)}))[:2] == (400, "end_before_start")
    status, tl = world.owner("PUT", base, {"hours_actual": None, "milestones": []})
    assert tl["hours_actual"] is None and tl["milestones"] == [] and tl["end"] == day(30)


def test_completing_takes_the_actual_hours_or_an_explicit_unknown(world: World) -> None:
    """The estimates rule reads a complete project's actual hours, and its timeline is read-only
    from then on: completing without them is refused, unless they are said to be unknown."""
    path = f"/api/projects/{world.id}/lifecycle"
    assert err(world.owner("POST", path, {"op": "complete", "reason": "上线了"})) == (
        400,
        "actual_hours_required",
        "actual_hours",
    )
    status, project = world.owner("GET", f"/api/projects/{world.id}")
    assert status == 200 and project["project"]["state"] == "active"
    assert err(world.owner("POST", path, {"op": "complete", "actual_hours": "不知道"}))[:2] == (
        400,
        "bad_body",
    )
    status, result = world.owner("POST", path, {"op": "complete", "actual_hours": "unknown"})
    assert status == 200 and result["project"]["state"] == "complete"
    status, tl = world.owner("GET", f"/api/projects/{world.id}/timeline")
    assert tl["hours_actual"] is None
    with world.app.db() as conn:
        [(detail,)] = conn.execute(
            "SELECT detail_json FROM audit_events WHERE project_id = ?"
            " AND action = 'project.complete' AND outcome = 'ok'",
            (world.id,),
        ).fetchall()
    assert json.loads(detail)["actual_hours"] == "unknown"
