"""Lifecycle flows: stops that do not confirm, trash and restore with the snapshot digest, purge
that fails midway and is retried, and purge never touching anything outside the data folder; purge
racing restore or itself, archived and trashed projects read-only, the last owner staying."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from room.actions import chatter
from room.actions import lifecycle as lifecycle_actions
from room.actions import purge as purge_actions
from room.actions.purge import PURGE_STEPS, PurgeStep
from room.agents.tools import BUILTIN_TOOLS, Tool, ToolContext, _spec
from room.errors import ConflictError
from room.rules.entities import Member, Project
from room.settings import Settings
from room.store.dialect import Connection, dialect_for
from tests.support.inproc import App, owner_user, post, running_app
from tests.support.llm_servers import OpenAIServer, openai_text, openai_tool_call

pytestmark = pytest.mark.slow  # stops that wait for confirmation

API_KEY = "sk-lifecycle"
SLOW_SECS = 2.0


SLOW_STARTED = threading.Event()  # set by the slow tool as it starts (the app runs in a thread)


async def _slow(ctx: ToolContext, args: dict[str, Any]) -> str:
    SLOW_STARTED.set()
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


@pytest.fixture(params=["sqlite", "postgresql"])
def app(request: pytest.FixtureRequest, tmp_path: Path, llm: OpenAIServer) -> Iterator[App]:
    """The in-process app on each store (``[sqlite]``, ``[postgresql]``: a fresh database)."""
    env = {"OPENAI_BASE_URL": llm.base_url, "OPENAI_API_KEY": API_KEY}
    url = None if request.param == "sqlite" else str(request.getfixturevalue("pg_dsn"))
    with running_app(
        tmp_path / "data", env=env, tools=TOOLS, stop_confirm_secs=0.3, database_url=url
    ) as handle:
        yield handle


def owner_post(app: App, path: str, body: Any) -> tuple[int, Any]:
    return app.request("POST", path, body, cookie=app.owner_cookie)


def state_of(app: App, project_id: int = 1) -> str:
    with app.db() as conn:
        return str(
            conn.execute("SELECT state FROM projects WHERE id = ?", (project_id,)).fetchone()[0]
        )


def start_slow_turn(app: App, llm: OpenAIServer) -> None:
    owner_post(
        app,
        "/api/projects/1/routes",
        {"scope": "member", "target": "2", "value": "openai/gpt-test", "reason": "测试"},
    )
    llm.push(openai_tool_call("room_members", {}), openai_text("完成"))
    SLOW_STARTED.clear()
    status, _ = owner_post(app, "/api/projects/1/messages", {"body": "@lead 慢慢做"})
    assert status == 201
    # The turn is inside the slow tool (not still reading the model's answer, where a stop
    # would be seen at once on a loaded machine).
    assert SLOW_STARTED.wait(10)
    assert len(llm.chat_requests) == 1


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
    # On a loaded machine the turn may reach that boundary later: a person retries again, as
    # long as it says it is still unconfirmed (each retry waits stop_confirm_secs).
    deadline = time.monotonic() + 30
    while True:
        status, body = owner_post(app, "/api/projects/1/lifecycle", {"op": "retry_stop"})
        if body.get("outcome") != "stop_unconfirmed" or time.monotonic() > deadline:
            break
        time.sleep(0.2)
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

    def broken(conn: Any, project_id: int, settings: Settings) -> dict[str, Any]:
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
    assert set(result["steps"]) == {
        "search",
        "sessions",
        "tokens",
        "deliveries",
        "memory",
        "research",
        "tasks",
        "attachments",
    }
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


def project(app: App, name: str) -> tuple[int, dict[str, Member]]:
    project_id, members, _ = app.project_with(name, owner_user(app))
    return project_id, members


def trash(app: App, project_id: int) -> None:
    status, body = post(app, f"/api/projects/{project_id}/lifecycle", {"op": "trash"})
    assert (status, body["outcome"]) == (200, "ok"), body


def count(app: App, sql: str, *args: Any) -> int:
    with app.db() as conn:
        return int(conn.execute(sql, args).fetchone()[0])


def audit(app: App, project_id: int, action: str) -> list[tuple[str, str | None]]:
    with app.db() as conn:
        reason = dialect_for(conn).json_text("detail_json", "reason")
        rows = conn.execute(
            f"SELECT outcome, {reason} FROM audit_events"
            " WHERE project_id = ? AND action = ? ORDER BY id",
            (project_id, action),
        ).fetchall()
    return [(str(r[0]), r[1]) for r in rows]


def test_a_restore_that_wins_the_race_is_never_purged(
    app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    project_id, members = project(app, "竞态")
    owner = members["owner"]
    trash(app, project_id)

    async def stale_load(core: Any, pid: int) -> Project:
        # The purge reads "trashed"; before its first write, the restore commits.
        found = await lifecycle_actions.load(core, pid)
        await lifecycle_actions.run(core, owner, pid, "restore")
        return found

    monkeypatch.setattr(purge_actions, "load", stale_load)
    with pytest.raises(ConflictError) as refused:
        app.call(
            purge_actions.purge, app.core, owner, project_id, confirm_name="竞态", confirmed=True
        )
    assert refused.value.code == "state_changed"
    assert state_of(app, project_id) == "paused"
    assert count(app, "SELECT count(*) FROM members WHERE project_id = ?", project_id) == 2
    assert count(app, "SELECT count(*) FROM purge_steps WHERE project_id = ?", project_id) == 0
    assert audit(app, project_id, "project.purge") == [("refused", "state_changed")]
    assert app.core.purging == set()


def test_a_purge_after_a_finished_purge_never_reopens_it(
    app: App, monkeypatch: pytest.MonkeyPatch
) -> None:
    project_id, members = project(app, "两次")
    owner = members["owner"]
    trash(app, project_id)
    nested: list[dict[str, Any]] = []

    async def stale_load(core: Any, pid: int) -> Project:
        found = await lifecycle_actions.load(core, pid)
        if not nested:  # the first purge read "trashed"; a second one runs to the end first
            nested.append({})
            nested[0] = await purge_actions.purge(
                core, owner, pid, confirm_name="两次", confirmed=True
            )
        return found

    monkeypatch.setattr(purge_actions, "load", stale_load)
    with pytest.raises(ConflictError) as refused:
        app.call(
            purge_actions.purge, app.core, owner, project_id, confirm_name="两次", confirmed=True
        )
    assert refused.value.code == "state_changed"
    assert nested[0]["state"] == "purged" and nested[0]["failed"] is None
    assert state_of(app, project_id) == "purged"
    assert count(app, "SELECT count(*) FROM project_tombstones WHERE project_id = ?", project_id)
    assert [o for o, _ in audit(app, project_id, "project.purge")] == ["started", "ok", "refused"]


def test_a_second_purge_while_one_runs_is_refused(app: App) -> None:
    project_id, _ = project(app, "并发")
    trash(app, project_id)
    app.core.purging.add(project_id)  # what a purge under way holds
    try:
        status, body = post(
            app, f"/api/projects/{project_id}/purge", {"confirm_name": "并发", "confirmed": True}
        )
    finally:
        app.core.purging.discard(project_id)
    assert (status, body["error"]["code"]) == (409, "purge_in_progress")
    assert state_of(app, project_id) == "trashed"
    assert audit(app, project_id, "project.purge") == [("refused", "purge_in_progress")]


def test_purge_writes_purge_blocked_first_so_restore_is_refused(app: App) -> None:
    project_id, members = project(app, "先锁")
    owner = members["owner"]
    trash(app, project_id)
    seen: list[str] = []

    def probe(conn: Connection, pid: int, settings: Settings) -> dict[str, Any]:
        seen.append(conn.execute("SELECT state FROM projects WHERE id = ?", (pid,)).fetchone()[0])
        raise OSError("stop here")

    steps = [purge_actions.PurgeStep("probe", "look at the state", probe)]
    result = app.call(
        purge_actions.purge,
        app.core,
        owner,
        project_id,
        confirm_name="先锁",
        confirmed=True,
        steps=steps,
    )
    assert seen == ["purge_blocked"]  # already, while the first step runs
    assert result["state"] == "purge_blocked"
    status, body = post(app, f"/api/projects/{project_id}/lifecycle", {"op": "restore"})
    assert (status, body["error"]["code"]) == (409, "purge_blocked")
    assert app.core.purging == set()


def test_a_blocked_purge_can_be_retried_after_its_last_data_step(app: App) -> None:
    project_id, _ = project(app, "重试")
    trash(app, project_id)
    files = app.settings.data / "projects" / str(project_id)
    files.parent.mkdir(parents=True, exist_ok=True)
    files.write_text("a file where the folder should be")  # the files step fails on it
    path = f"/api/projects/{project_id}/purge"

    status, body = post(app, path, {"confirm_name": "重试", "confirmed": True})
    assert status == 500 and body["state"] == "purge_blocked"
    assert body["failed"]["step"] == "files"
    # The owner is still a member, so the project is still theirs to retry.
    status, me = app.request("GET", "/api/me", cookie=app.owner_cookie)
    assert (project_id, "purge_blocked") in [(p["id"], p["state"]) for p in me["projects"]]

    files.unlink()
    status, body = post(app, path, {"confirm_name": "重试", "confirmed": True})
    assert (status, body["state"], body["failed"]) == (200, "purged", None)
    assert list(body["steps"]) == ["files", "members"]
    assert count(app, "SELECT count(*) FROM members WHERE project_id = ?", project_id) == 0
    assert [s.name for s in purge_actions.PURGE_STEPS][-2:] == ["files", "members"]


def test_a_read_cursor_written_late_never_blocks_a_purge(app: App) -> None:
    project_id, members = project(app, "竞读")
    owner = members["owner"]
    trash(app, project_id)

    async def scenario() -> dict[str, Any]:
        for _ in range(25):  # past the burst: the next cursor waits, to be written later
            await chatter.mark_read(app.core, owner, 0)
        assert app.core.deferred_reads
        slow: list[purge_actions.PurgeStep] = []
        for step in purge_actions.PURGE_STEPS:
            if step.name == "settings":  # long enough for the deferred write to land

                def held(
                    conn: Connection, pid: int, settings: Settings, run: Any = step.run
                ) -> Any:
                    time.sleep(0.5)
                    return run(conn, pid, settings)

                step = purge_actions.PurgeStep(step.name, step.label, held)
            slow.append(step)
        return await purge_actions.purge(
            app.core, owner, project_id, confirm_name="竞读", confirmed=True, steps=slow
        )

    result = app.call(scenario)
    assert (result["state"], result["failed"]) == ("purged", None)
    assert count(app, "SELECT count(*) FROM read_cursors WHERE project_id = ?", project_id) == 0


def closed_writes(project_id: int, lead: int, owner: int) -> list[tuple[str, dict[str, Any]]]:
    p = f"/api/projects/{project_id}"
    return [
        (f"{p}/routes", {"scope": "project", "value": "builtin/echo", "reason": "试试"}),
        (f"{p}/members/{lead}/pause", {}),
        (f"{p}/members/{lead}/stop", {}),
        (f"{p}/members/{lead}/leave", {}),
        (f"{p}/members/{owner}/role", {"role": "owner"}),
        (f"{p}/members", {"role": "backend", "handle": "late", "display_name": "迟到"}),
        (f"{p}/limits", {"agent_turn_cap": 3}),
        (f"{p}/brake/clear", {}),
        (f"{p}/invites", {"role": "member"}),
    ]


@pytest.mark.parametrize("op", ["trash", "archive"])
def test_closed_projects_refuse_every_write_and_restore_cleanly(app: App, op: str) -> None:
    project_id, members = project(app, f"只读{op}")
    lead, owner = members["lead"].id, members["owner"].id
    status, body = post(app, f"/api/projects/{project_id}/lifecycle", {"op": op})
    assert status == 200 and body["outcome"] == "ok"
    for path, payload in closed_writes(project_id, lead, owner):
        status, body = post(app, path, payload)
        assert (status, body["error"]["code"]) == (409, "project_closed"), path
    assert count(app, "SELECT count(*) FROM route_changes WHERE project_id = ?", project_id) == 0
    assert count(app, "SELECT count(*) FROM members WHERE project_id = ?", project_id) == 2
    assert (
        count(
            app,
            "SELECT count(*) FROM members WHERE project_id = ? AND status != 'active'",
            project_id,
        )
        == 0
    )
    # Refused member operations are audited like any other refusal.
    assert audit(app, project_id, "member.pause") == [("refused", "project_closed")]
    assert audit(app, project_id, "member.role") == [("refused", "project_closed")]

    status, body = post(app, f"/api/projects/{project_id}/lifecycle", {"op": "restore"})
    assert status == 200, body
    assert body["project"]["state"] == "paused"
    status, body = post(app, f"/api/projects/{project_id}/members/{lead}/pause")
    assert status == 200 and body["op"] == "pause"  # open again


def join(app: App, secret: str, handle: str) -> tuple[int, str]:
    response = app.client.post(
        "/login",
        data={"secret": secret, "handle": handle, "display_name": handle},
        headers={"Origin": app.settings.origin},
        follow_redirects=False,
    )
    app.client.cookies.clear()
    return response.status_code, response.text


def test_trash_revokes_invites_and_archive_holds_them(app: App) -> None:
    project_id, _ = project(app, "邀请")
    invites = []
    for _ in range(2):
        status, body = post(app, f"/api/projects/{project_id}/invites", {"role": "member"})
        assert status == 201
        invites.append(body["url"].rsplit("/", 1)[-1])
    lifecycle = f"/api/projects/{project_id}/lifecycle"

    assert post(app, lifecycle, {"op": "archive"})[0] == 200
    status, page = join(app, invites[0], "early")
    assert status == 409 and "archived" in page
    assert post(app, lifecycle, {"op": "restore"})[0] == 200
    assert join(app, invites[0], "early")[0] == 303  # the refused join did not use it up

    trash(app, project_id)
    assert post(app, lifecycle, {"op": "restore"})[0] == 200
    status, page = join(app, invites[1], "later")
    assert status == 401  # revoked by the trash, not revived by the restore
    with app.db() as conn:
        rows = conn.execute("SELECT handle FROM members WHERE project_id = ?", (project_id,))
        handles = {r[0] for r in rows}
    assert "early" in handles and "later" not in handles


def test_the_last_owner_cannot_leave(app: App) -> None:
    bob, bob_cookie = app.new_user("bob", "Bob")
    project_id, members, _ = app.project_with("留守", owner_user(app), bob)
    owner, bob_member = members["owner"].id, members["bob"].id
    leave = f"/api/projects/{project_id}/members/{owner}/leave"

    status, body = post(app, leave)
    assert (status, body["error"]["code"]) == (409, "last_owner")
    assert audit(app, project_id, "member.leave") == [("refused", "last_owner")]
    assert count(app, "SELECT count(*) FROM members WHERE id = ? AND status = 'active'", owner)

    status, _ = post(
        app, f"/api/projects/{project_id}/members/{bob_member}/role", {"role": "owner"}
    )
    assert status == 200
    status, body = post(app, leave)
    assert status == 200 and body["op"] == "leave"
    # Bob, now the only owner, cannot leave either.
    status, body = app.request(
        "POST", f"/api/projects/{project_id}/members/{bob_member}/leave", {}, cookie=bob_cookie
    )
    assert (status, body["error"]["code"]) == (409, "last_owner")


def test_a_member_can_be_stopped_while_a_project_stop_is_unconfirmed(app: App) -> None:
    project_id, members = project(app, "停止未确认")
    with app.db() as conn:
        conn.execute("UPDATE projects SET state = 'stop_unconfirmed' WHERE id = ?", (project_id,))
    lead = members["lead"].id
    status, body = post(app, f"/api/projects/{project_id}/members/{lead}/stop")
    assert status == 200, body
    assert audit(app, project_id, "member.stop")[-1] == ("ok", None)
    # Archived: read-only, refused before anything is stopped, and the reason says why.
    with app.db() as conn:
        conn.execute("UPDATE projects SET state = 'archived' WHERE id = ?", (project_id,))
    status, body = post(app, f"/api/projects/{project_id}/members/{lead}/stop")
    assert (status, body["error"]["code"]) == (409, "project_closed")
    assert "恢复" in body["error"]["message"]
    assert audit(app, project_id, "member.stop")[-1] == ("refused", "project_closed")
