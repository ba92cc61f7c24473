"""Lifecycle flows: stops that do not confirm, trash and restore with the snapshot digest, purge
that fails midway and is retried, and purge never touching anything outside the data folder."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from room.actions import purge as purge_actions
from room.actions.purge import PURGE_STEPS, PurgeStep
from room.runtime.tools import BUILTIN_TOOLS, Tool, ToolContext, _spec
from tests.support.inproc import App, running_app
from tests.support.llm_servers import OpenAIServer, openai_text, openai_tool_call

API_KEY = "sk-lifecycle"
SLOW_SECS = 2.0


async def _slow(ctx: ToolContext, args: dict[str, Any]) -> str:
    await asyncio.sleep(SLOW_SECS)  # a tool that takes its time; stops apply at step boundaries
    return '{"ok": true}'


TOOLS = {
    **BUILTIN_TOOLS,
    "room_members": Tool(_spec("room_members", "slow", {}, []), _slow, side_effect=False),
}


@pytest.fixture
def llm() -> Iterator[OpenAIServer]:
    with OpenAIServer(api_key=API_KEY) as server:
        yield server


@pytest.fixture
def app(tmp_path: Path, llm: OpenAIServer) -> Iterator[App]:
    env = {"OPENAI_BASE_URL": llm.base_url, "OPENAI_API_KEY": API_KEY}
    with running_app(tmp_path / "data", env=env, tools=TOOLS, stop_confirm_secs=0.3) as handle:
        yield handle


def owner_post(app: App, path: str, body: Any) -> tuple[int, Any]:
    return app.request("POST", path, body, cookie=app.owner_cookie)


def state_of(app: App, project_id: int = 1) -> str:
    with app.db() as conn:
        return str(
            conn.execute("SELECT state FROM projects WHERE id = ?", (project_id,)).fetchone()[0]
        )


def wait_until(check: Any, timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("condition not met in time")


def start_slow_turn(app: App, llm: OpenAIServer) -> None:
    owner_post(
        app,
        "/api/projects/1/routes",
        {"scope": "member", "target": "2", "value": "openai/gpt-test", "reason": "测试"},
    )
    llm.push(openai_tool_call("room_members", {}), openai_text("完成"))
    status, _ = owner_post(app, "/api/projects/1/messages", {"body": "@lead 慢慢做"})
    assert status == 201
    wait_until(lambda: len(llm.chat_requests) == 1)  # the turn is now inside the slow tool


def test_a_stop_that_does_not_confirm_can_be_retried(app: App, llm: OpenAIServer) -> None:
    start_slow_turn(app, llm)
    status, body = owner_post(app, "/api/projects/1/lifecycle", {"op": "pause"})
    assert status == 200 and body["outcome"] == "stop_unconfirmed"
    assert body["still_running"] == [2]
    assert state_of(app) == "stop_unconfirmed"
    # Admission is blocked while the stop is unconfirmed.
    status, body = owner_post(app, "/api/projects/1/messages", {"body": "还能发吗"})
    assert status == 409 and body["error"]["code"] == "project_not_accepting"
    time.sleep(SLOW_SECS)  # the tool returns; the turn sees the stop at its next boundary
    status, body = owner_post(app, "/api/projects/1/lifecycle", {"op": "retry_stop"})
    assert status == 200 and body["outcome"] == "ok", body
    assert state_of(app) == "paused"
    assert len(llm.chat_requests) == 1  # the stopped turn made no further model call


def test_a_stop_that_does_not_confirm_can_be_cancelled(app: App, llm: OpenAIServer) -> None:
    start_slow_turn(app, llm)
    status, body = owner_post(app, "/api/projects/1/lifecycle", {"op": "archive"})
    assert body["outcome"] == "stop_unconfirmed"
    status, body = owner_post(app, "/api/projects/1/lifecycle", {"op": "cancel_stop"})
    assert status == 200 and body["project"]["state"] == "active"
    with app.db() as conn:
        outcomes = conn.execute(
            "SELECT action, outcome FROM audit_events WHERE action LIKE 'project.%'"
            " AND action != 'project.create' ORDER BY id"
        ).fetchall()
    assert outcomes == [
        ("project.archive", "stopping"),
        ("project.archive", "stop_unconfirmed"),
        ("project.cancel_stop", "ok"),
    ]


def test_trash_and_restore_round_trip_checks_the_digest(app: App) -> None:
    owner_post(app, "/api/projects/1/messages", {"body": "要保留的消息"})
    with app.db() as conn:
        epoch = conn.execute("SELECT epoch FROM projects WHERE id = 1").fetchone()[0]
    status, body = owner_post(app, "/api/projects/1/lifecycle", {"op": "trash"})
    assert status == 200 and body["project"]["state"] == "trashed"
    assert body["snapshot"]["messages"]["count"] >= 1
    status, body = owner_post(app, "/api/projects/1/lifecycle", {"op": "restore"})
    assert status == 200 and body["project"]["state"] == "paused"
    assert body["project"]["epoch"] == epoch + 1  # clients must resync
    # Trash again, then tamper: restore refuses with a report naming what differs.
    owner_post(app, "/api/projects/1/lifecycle", {"op": "trash"})
    with app.db() as conn:
        conn.execute("UPDATE messages SET body = 'tampered' WHERE project_id = 1 AND kind = 'chat'")
    status, body = owner_post(app, "/api/projects/1/lifecycle", {"op": "restore"})
    assert status == 409 and body["error"]["code"] == "snapshot_mismatch"
    assert list(body["error"]["details"]["report"]["differences"]) == ["messages"]
    assert state_of(app) == "trashed"


def test_trash_cancels_open_requests_and_restore_does_not_revive_them(app: App) -> None:
    owner_post(app, "/api/projects/1/members/2/pause", {})
    _, sent = owner_post(app, "/api/projects/1/messages", {"body": "等待中的请求"})
    owner_post(app, "/api/projects/1/lifecycle", {"op": "trash"})
    owner_post(app, "/api/projects/1/lifecycle", {"op": "restore"})
    owner_post(app, "/api/projects/1/members/2/resume", {})
    owner_post(app, "/api/projects/1/lifecycle", {"op": "resume"})
    _, detail = app.request("GET", f"/api/messages/{sent['message_id']}", cookie=app.owner_cookie)
    assert [d["state"] for d in detail["deliveries"]] == ["cancelled"]


def test_purge_failing_midway_is_blocked_and_a_retry_finishes(app: App, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("not ours")
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "main.py").write_text("print('source code')")
    files = app.settings.data / "projects" / "1"
    files.mkdir(parents=True)
    (files / "upload.bin").write_bytes(b"x" * 10)
    os.symlink(outside, files / "link-out")
    with app.db() as conn:
        conn.execute("UPDATE projects SET workspace = ? WHERE id = 1", (str(workspace),))
    owner_post(app, "/api/projects/1/messages", {"body": "会被清除"})
    owner_post(app, "/api/projects/1/lifecycle", {"op": "trash"})

    status, preview = app.request("GET", "/api/projects/1/cleanup-preview", cookie=app.owner_cookie)
    assert status == 200
    counts = {step["step"]: step["counts"] for step in preview["delete"]}
    assert counts["messages"]["messages"] >= 1 and counts["files"]["files"] == 1
    assert {
        "what": "workspace",
        "detail": preview["keep"][2]["detail"],
        "path": str(workspace),
    } in preview["keep"]
    assert state_of(app) == "trashed"  # the preview changed nothing

    status, body = owner_post(
        app, "/api/projects/1/purge", {"confirm_name": "演示项目 ", "confirmed": True}
    )
    assert status == 400 and body["error"]["code"] == "purge_name_mismatch"
    status, body = owner_post(app, "/api/projects/1/purge", {"confirm_name": "演示项目"})
    assert status == 400 and body["error"]["code"] == "purge_not_confirmed"

    def broken(conn: Any, project_id: int, data: Path) -> dict[str, Any]:
        raise OSError("disk went away")

    faulty = [
        s if s.name != "messages" else PurgeStep("messages", s.label, broken) for s in PURGE_STEPS
    ]
    owner = app.call(app.core.rosters.get, 1).member(1)
    result = app.call(
        purge_actions.purge,
        app.core,
        owner,
        1,
        confirm_name="演示项目",
        confirmed=True,
        steps=faulty,
    )
    assert result["state"] == "purge_blocked"
    assert result["failed"]["step"] == "messages"
    assert set(result["steps"]) == {"sessions", "tokens", "deliveries", "tasks"}
    assert state_of(app) == "purge_blocked"

    owner = app.call(app.core.rosters.get, 1).member(1)
    result = app.call(
        purge_actions.purge, app.core, owner, 1, confirm_name="演示项目", confirmed=True
    )
    assert result["state"] == "purged", result
    assert set(result["steps"]) == {"messages", "settings", "members", "files"}
    with app.db() as conn:
        assert conn.execute("SELECT count(*) FROM messages WHERE project_id = 1").fetchone()[0] == 0
        assert conn.execute("SELECT count(*) FROM members WHERE project_id = 1").fetchone()[0] == 0
        tomb = conn.execute("SELECT name, purged_by FROM project_tombstones").fetchall()
        assert tomb == [("演示项目", 1)]
        audit = conn.execute(
            "SELECT outcome FROM audit_events WHERE action = 'project.purge' ORDER BY id"
        ).fetchall()
    assert [a[0] for a in audit] == [
        "refused",
        "refused",
        "started",
        "purge_blocked",
        "started",
        "ok",
    ]
    assert (outside / "keep.txt").read_text() == "not ours"
    assert (workspace / "main.py").exists()
    assert not files.exists()


def test_purge_is_refused_while_a_member_runs(app: App, llm: OpenAIServer) -> None:
    start_slow_turn(app, llm)
    with app.db() as conn:
        conn.execute("UPDATE projects SET state = 'trashed' WHERE id = 1")
    status, body = owner_post(
        app, "/api/projects/1/purge", {"confirm_name": "演示项目", "confirmed": True}
    )
    assert status == 409 and body["error"]["code"] == "members_running"
    assert state_of(app) == "trashed"
