"""A project's last activity (docs/portfolio.md, "Activity") on the real app (in-process, real
SQLite, real migrations): every change a person or agent makes counts — session-log entries,
summary edits and resuming included — and 最后更新 is that time everywhere."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from room.actions import message_edits
from tests.support.inproc import App, Team, owner_user, running_app

DAY = 86400.0
# Every time column that could hold a project's activity; the test moves them all into the past.
AGED = {
    "projects": ("id", ("created_at", "updated_at", "state_at")),
    "messages": ("project_id", ("created_at", "edited_at", "deleted_at")),
    "events": ("project_id", ("created_at",)),
    "tasks": ("project_id", ("created_at", "updated_at")),
    "memory_entries": ("project_id", ("created_at", "updated_at")),
    "memory_versions": ("project_id", ("updated_at",)),
    "project_timelines": ("project_id", ("updated_at",)),
    "project_dependencies": ("project_id", ("created_at",)),
    "audit_events": ("project_id", ("at",)),
}


@pytest.fixture
def app(tmp_path: Path) -> Any:
    with running_app(tmp_path / "data", demo=False) as handle:
        yield handle


class Portfolio(Team):
    def __init__(self, app: App) -> None:
        super().__init__(app, "勤快的项目")
        self.idle, _, _ = app.project_with("安静的项目", owner_user(app))

    def age(self, project_id: int, days: float) -> None:
        """Move everything the project has done ``days`` into the past."""
        with self.app.db() as conn:
            for table, (key, columns) in AGED.items():
                sets = ", ".join(f"{c} = {c} - :d" for c in columns)
                conn.execute(
                    f"UPDATE {table} SET {sets} WHERE {key} = :p",
                    {"d": days * DAY, "p": project_id},
                )

    def silent(self) -> set[int]:
        status, scan = self.owner("POST", "/api/risk-scan")
        assert status == 200
        return {f["project_id"] for f in scan["red"] if f["rule"] == "silent"}

    def index_rows(self) -> list[str]:
        status, text = self.owner("GET", "/api/index.md")
        assert status == 200
        lines = text.splitlines()
        # the 🔴 in front (an open 🔴 finding: no milestones, after 40 days) is not looked at here
        rows = lines[lines.index("|---|---|---|---|---|") + 1 :]
        return [line.replace("| 🔴 ", "| ", 1) for line in rows if line]

    def portfolio(self) -> dict[str, str]:
        status, body = self.owner("GET", "/api/portfolio")
        assert status == 200
        return {p["name"]: p["last_activity"] for p in body["projects"]}


@pytest.fixture
def team(app: App) -> Portfolio:
    return Portfolio(app)


def day_of(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).date().isoformat()


def test_a_project_that_only_records_its_sessions_is_not_silent(team: Portfolio) -> None:
    team.age(team.id, 40)
    team.age(team.idle, 40)
    assert team.silent() == {team.id, team.idle}
    status, _ = team.owner(
        "POST", f"/api/projects/{team.id}/memory/session", {"summary": "跑通了登录流程"}
    )
    assert status == 201
    assert team.silent() == {team.idle}
    rows = team.index_rows()
    assert rows[0].startswith("| 勤快的项目 |") and "可能归档" not in rows[0]
    assert rows[1].startswith("| 安静的项目 |") and "可能归档" in rows[1]
    assert f"| {day_of(time.time())} |" in rows[0]
    assert team.portfolio()["勤快的项目"][:10] == day_of(time.time())


@pytest.mark.parametrize(
    "write",
    [
        ("PUT", "summary", {"rev": 0, "sections": {"status": "登录页已上线"}}),
        ("POST", "convention", {"text": "每次提交前先运行 pnpm test"}),
        ("POST", "decisions", None),
    ],
    ids=["summary", "convention", "decision"],
)
def test_every_kind_of_memory_write_counts(team: Portfolio, write: tuple[str, str, Any]) -> None:
    method, kind, body = write
    team.age(team.id, 40)
    if kind == "decisions":
        path = f"/api/projects/{team.id}/decisions"
        body = {
            "title": "用 SQLite",
            "context": "单机部署",
            "decision": "用 SQLite 存储",
            "consequences": "",
            "alternatives": [{"option": "PostgreSQL", "why_rejected": "要多一个服务"}],
        }
    else:
        path = f"/api/projects/{team.id}/memory/{kind}"
    status, answer = team.owner(method, path, body)
    assert status in (200, 201), answer
    assert team.id not in team.silent()


def test_resuming_counts_and_sorts_the_project_to_the_top(team: Portfolio) -> None:
    team.age(team.id, 40)
    team.age(team.idle, 20)
    assert [r.split(" |")[0] for r in team.index_rows()] == ["| 安静的项目", "| 勤快的项目"]
    lifecycle = f"/api/projects/{team.id}/lifecycle"
    assert team.owner("POST", lifecycle, {"op": "pause"})[0] == 200
    assert team.owner("POST", lifecycle, {"op": "resume"})[0] == 200
    assert team.id not in team.silent()
    assert team.index_rows()[0].startswith("| 勤快的项目 |")
    assert team.portfolio()["勤快的项目"][:10] == day_of(time.time())


def test_status_md_says_when_the_project_last_changed_not_when_it_was_generated(
    team: Portfolio,
) -> None:
    team.age(team.id, 40)
    status, text = team.owner("GET", f"/projects/{team.id}/status.md")
    assert status == 200
    updated = next(line for line in text.splitlines() if line.startswith("- 最后更新"))
    generated = next(line for line in text.splitlines() if "由数据库生成" in line)
    assert day_of(time.time() - 40 * DAY) in updated
    assert day_of(time.time()) in generated and day_of(time.time()) not in updated
    # the index and STATUS.md agree
    row = next(r for r in team.index_rows() if "勤快的项目" in r)
    assert f"| {day_of(time.time() - 40 * DAY)} |" in row


def _owner(team: Portfolio) -> Any:
    return next(m for m in team.members.values() if m.is_owner)


def _edit(team: Portfolio, message_id: int) -> None:
    team.app.call(message_edits.edit_message, team.app.core, _owner(team), message_id, "改过的话")


def _delete(team: Portfolio, message_id: int) -> None:
    team.app.call(message_edits.delete_message, team.app.core, _owner(team), message_id)


def _react(team: Portfolio, message_id: int) -> None:
    path = f"/api/messages/{message_id}/reactions"
    status, answer = team.member("POST", path, {"emoji": "👍"})
    assert status == 200 and answer["changed"] is True, answer


def _unreact(team: Portfolio, message_id: int) -> None:
    """A reaction added before the project went quiet, taken back now."""
    path = f"/api/messages/{message_id}/reactions"
    team.member("POST", path, {"emoji": "👍"})
    team.age(team.id, 40)
    status, answer = team.member("POST", path, {"emoji": "👍", "remove": True})
    assert status == 200 and answer["changed"] is True, answer


def _task_dates(team: Portfolio, message_id: int) -> None:
    status, dates = team.owner(
        "PUT", f"/api/projects/{team.id}/tasks/api/dates", {"est_start": None, "est_end": None}
    )
    assert status == 200, dates


@pytest.mark.parametrize(
    "change",
    [_edit, _delete, _react, _unreact, _task_dates],
    ids=["edit", "delete", "reaction", "reaction_removed", "task_dates"],
)
def test_changes_to_what_was_posted_count(team: Portfolio, change: Any) -> None:
    # a task a person owns and a message to a person: no agent is woken to answer meanwhile
    plan = {"goal": "g", "items": [{"key": "api", "title": "接口", "owner": "zhang",
                                     "acceptance": ["能用"]}]}  # fmt: skip
    assert team.owner("POST", f"/api/projects/{team.id}/plan", plan)[0] == 201
    status, sent = team.owner("POST", f"/api/projects/{team.id}/messages", {"body": "@小张 看看"})
    assert status in (200, 201), sent
    message_id = int(sent["message_id"])
    team.age(team.id, 40)
    team.age(team.idle, 40)
    assert team.id in team.silent()
    change(team, message_id)
    assert team.silent() == {team.idle}
    assert team.portfolio()["勤快的项目"][:10] == day_of(time.time())
    assert team.index_rows()[0].startswith("| 勤快的项目 |")


def test_a_member_added_counts_and_an_export_does_not(team: Portfolio) -> None:
    team.age(team.id, 40)
    team.age(team.idle, 40)
    status, export = team.app.request(
        "GET", f"/api/projects/{team.id}/export", cookie=team.app.owner_cookie
    )
    assert status == 200 and export
    assert team.silent() == {team.id, team.idle}  # reading the project changes nothing
    body = {"role": "backend", "handle": "be2", "display_name": "后端二号"}
    status, added = team.owner("POST", f"/api/projects/{team.id}/members", body)
    assert status == 201, added
    assert team.silent() == {team.idle}
    assert team.portfolio()["勤快的项目"][:10] == day_of(time.time())
