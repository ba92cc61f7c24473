"""Task checkpoints as stored: what a checkpoint derives from the turn's own record, the newest
50 per member kept, and a purge taking them with the project."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from room.actions import checkpoints
from room.actions import turns as turn_actions
from room.store import Tx
from room.store import checkpoints as checkpoints_store
from room.store import turns as turns_store
from tests.support.inproc import App, owner_user


def open_turn(app: App, project_id: int, member_id: int) -> int:
    def job(conn: sqlite3.Connection, tx: Tx) -> int:
        return turns_store.insert_turn(
            conn, project_id=project_id, member_id=member_id, trigger=None, now=tx.now
        )

    return app.write(job)


def test_a_checkpoint_reads_the_turn_s_record(app: App) -> None:
    project_id, members, _ = app.project_with("检查点", owner_user(app))
    lead = members["lead"].id
    turn_id = open_turn(app, project_id, lead)
    app.call(
        turn_actions.record_tool_step,
        app.core,
        project_id,
        lead,
        turn_id,
        1,
        "",
        [{"id": "c1", "name": "fs_read", "arguments": {"path": "说明.md"}}],
        [turn_actions.ToolResult("c1", "第一行\n第二行", True)],
        0,
    )
    with app.db() as conn:
        [row] = conn.execute(
            "SELECT phase, state, step, did_json, last_tool, prompt_json FROM checkpoints"
            " WHERE turn_id = ?",
            (turn_id,),
        ).fetchall()
    digest = 'fs_read {"path": "说明.md"} ⇒ 第一行…'
    assert row[:3] == ("step", "running", 1)
    assert (json.loads(row[3]), row[4], json.loads(row[5])) == ([digest], digest, [])


def test_only_the_newest_checkpoints_of_a_member_are_kept(app: App) -> None:
    project_id, members, _ = app.project_with("检查点", owner_user(app))
    lead = members["lead"].id
    turn_id = open_turn(app, project_id, lead)

    def job(conn: sqlite3.Connection, tx: Tx) -> list[dict[str, Any]]:
        for _ in range(checkpoints_store.KEEP_PER_MEMBER + 7):
            checkpoints.record(conn, tx, turn_id, "step")
        checkpoints.record(conn, tx, turn_id, "end", state="cancelled")
        return checkpoints_store.of_member(conn, lead, limit=1_000)

    kept = app.write(job)
    assert len(kept) == checkpoints_store.KEEP_PER_MEMBER
    assert (kept[0]["phase"], kept[0]["state"]) == ("end", "cancelled")
    assert kept[0]["blocked"] == "一位成员停止了这一轮"
    assert kept[0]["next"] == "接着处理被打断的消息"


def test_a_purge_deletes_the_project_s_checkpoints(app: App) -> None:
    project_id, members, _ = app.project_with("要清除的项目", owner_user(app))
    other_id, other_members, _ = app.project_with("留下的项目", owner_user(app))
    for pid, mid in ((project_id, members["lead"].id), (other_id, other_members["lead"].id)):
        turn_id = open_turn(app, pid, mid)

        def job(conn: sqlite3.Connection, tx: Tx, turn_id: int = turn_id) -> None:
            checkpoints.record(conn, tx, turn_id, "start")

        app.write(job)
    cookie = app.owner_cookie
    status, _ = app.request(
        "POST", f"/api/projects/{project_id}/lifecycle", {"op": "trash"}, cookie=cookie
    )
    assert status == 200
    status, body = app.request(
        "POST",
        f"/api/projects/{project_id}/purge",
        {"confirm_name": "要清除的项目", "confirmed": True},
        cookie=cookie,
    )
    assert status == 200, body
    with app.db() as conn:
        left = conn.execute("SELECT project_id FROM checkpoints").fetchall()
    assert left == [(other_id,)]
