"""Lifecycle defects found in review: purge racing restore or itself, a purge that could not be
retried, writes landing in archived and trashed projects, the last owner leaving, and a member who
left still receiving the project live."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from room.actions import lifecycle as lifecycle_actions
from room.actions import messages as message_actions
from room.actions import purge as purge_actions
from room.errors import ConflictError
from room.models import Member, Project
from tests.support.inproc import App, owner_user, running_app
from tests.support.server import ServerProcess
from tests.support.wsclient import Client, Frame


@pytest.fixture
def app(tmp_path: Path) -> Iterator[App]:
    with running_app(tmp_path / "data", stop_confirm_secs=0.5) as handle:
        yield handle


def project(app: App, name: str) -> tuple[int, dict[str, Member]]:
    project_id, members, _ = app.project_with(name, owner_user(app))
    return project_id, members


def post(app: App, path: str, body: Any = None) -> tuple[int, Any]:
    return app.request("POST", path, {} if body is None else body, cookie=app.owner_cookie)


def trash(app: App, project_id: int) -> None:
    status, body = post(app, f"/api/projects/{project_id}/lifecycle", {"op": "trash"})
    assert (status, body["outcome"]) == (200, "ok"), body


def state_of(app: App, project_id: int) -> str:
    with app.db() as conn:
        row = conn.execute("SELECT state FROM projects WHERE id = ?", (project_id,)).fetchone()
    return str(row[0])


def count(app: App, sql: str, *args: Any) -> int:
    with app.db() as conn:
        return int(conn.execute(sql, args).fetchone()[0])


def audit(app: App, project_id: int, action: str) -> list[tuple[str, str | None]]:
    with app.db() as conn:
        rows = conn.execute(
            "SELECT outcome, json_extract(detail_json, '$.reason') FROM audit_events"
            " WHERE project_id = ? AND action = ? ORDER BY id",
            (project_id, action),
        ).fetchall()
    return [(str(r[0]), r[1]) for r in rows]


# -- purge races ---------------------------------------------------------------------------------


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

    def probe(conn: sqlite3.Connection, pid: int, data: Path) -> dict[str, Any]:
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


# -- archived and trashed projects are read-only -------------------------------------------------


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


# -- owners and leaving --------------------------------------------------------------------------


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


def _has(ws: Client, check: Callable[[Frame], bool]) -> bool:
    return any(check(f) for f in ws.frames)


async def _until(ws: Client, check: Callable[[Frame], bool]) -> None:
    with anyio.fail_after(10):
        while not _has(ws, check):
            await ws.recv(10)


@pytest.mark.anyio
async def test_a_member_who_leaves_stops_receiving_the_project(
    server: ServerProcess, clients: list[Client]
) -> None:
    owner = server.login()
    project_id = server.get_json("/api/me", cookie=owner.cookie)["projects"][0]["id"]
    bob = server.invite(owner, project_id, "bob", "Bob")
    ws = await Client.open(server.ws_url, cookie=bob.cookie, origin=server.origin)
    await ws.wait_for("hello")
    await ws.send({"type": "subscribe", "project_id": project_id})
    bob_id = (await ws.wait_for("subscribed"))["you"]

    status, _ = server.request(
        "POST", f"/api/projects/{project_id}/members/{bob_id}/leave", {}, headers=owner.headers
    )
    assert status == 200
    await _until(ws, lambda f: f.get("type") == "unsubscribed")
    # The notice and the roster reach whoever left before the cut, so their page can say so.
    types = [f.get("type") for f in ws.frames]
    cut = types.index("unsubscribed")
    assert "members" in types[:cut]
    assert any(
        f.get("type") == "message" and "移出了 @bob" in f["message"]["body"]
        for f in ws.frames[:cut]
    )
    status, _ = server.request(
        "POST",
        f"/api/projects/{project_id}/messages",
        {"body": "bob 走后的秘密"},
        headers=owner.headers,
    )
    assert status == 201  # published before the response: frames pushed to bob would precede
    await ws.send({"type": "ping"})
    await _until(ws, lambda f: f.get("type") == "pong")
    assert not _has(ws, lambda f: f.get("type") == "message" and "秘密" in f["message"]["body"])


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


def test_a_read_cursor_written_late_never_blocks_a_purge(app: App) -> None:
    project_id, members = project(app, "竞读")
    owner = members["owner"]
    trash(app, project_id)

    async def scenario() -> dict[str, Any]:
        for _ in range(25):  # past the burst: the next cursor waits, to be written later
            await message_actions.mark_read(app.core, owner, 0)
        assert app.core.deferred_reads
        slow: list[purge_actions.PurgeStep] = []
        for step in purge_actions.PURGE_STEPS:
            if step.name == "settings":  # long enough for the deferred write to land

                def held(
                    conn: sqlite3.Connection, pid: int, data: Path, run: Any = step.run
                ) -> Any:
                    time.sleep(0.5)
                    return run(conn, pid, data)

                step = purge_actions.PurgeStep(step.name, step.label, held)
            slow.append(step)
        return await purge_actions.purge(
            app.core, owner, project_id, confirm_name="竞读", confirmed=True, steps=slow
        )

    result = app.call(scenario)
    assert (result["state"], result["failed"]) == ("purged", None)
    assert count(app, "SELECT count(*) FROM read_cursors WHERE project_id = ?", project_id) == 0
