"""The loop brake's writes: counting agent turns, tripping it (with a notice in the room) and a
person clearing it (docs/architecture.md, "Agents")."""

from __future__ import annotations

import sqlite3
from typing import Any

from room.actions.notices import insert_notice
from room.rules.effects import WakeProject
from room.services import Services
from room.store import Tx
from room.store import audit as audit_store
from room.store import brakes as brakes_store
from room.store import projects as projects_store

BRAKE_NOTICES = {
    "agent_turn_cap": "⛔ 循环制动：自上一条人类消息以来 AI 成员已运行 {agent_turns} 轮（上限 {cap}）。"
    "已暂停派发，请人类查看后在界面上解除。",
    "token_budget": "⛔ 预算制动：本项目已用 {tokens_used} tokens（预算 {budget}）。已暂停派发，"
    "请人类调整预算或解除。",
    "step_limit": "⛔ 步数制动：@{handle} 的一轮达到 {max_steps} 步上限仍未给出答复。已暂停派发，"
    "请人类查看后解除。",
    "repetition": "⛔ 重复制动：@{handle} 在重复同样的动作（{what}）。已暂停派发，请人类查看后解除。",
    "tool_calls": "⛔ 工具制动：@{handle} 的一轮调用了 {calls} 次工具（上限 {cap}）。已暂停派发，"
    "请人类查看后解除。",
    "command_time": "⛔ 命令时间制动：@{handle} 的一轮命令已运行 {secs} 秒（上限 {cap:g} 秒）。"
    "已暂停派发，请人类查看后解除。",
}


def trip(
    conn: sqlite3.Connection,
    tx: Tx,
    project_id: int,
    reason: str,
    detail: dict[str, Any],
) -> None:
    if brakes_store.trip(conn, project_id, reason, detail, tx.now):
        text = BRAKE_NOTICES[reason].format(**detail)
        insert_notice(conn, tx, project_id, text, {"brake": reason, **detail})
        audit_store.record(
            conn,
            now=tx.now,
            actor_kind="system",
            actor_id=None,
            project_id=project_id,
            action="brake.trip",
            outcome="ok",
            detail={"reason": reason, **detail},
        )


def count_turn(conn: sqlite3.Connection, tx: Tx, project_id: int, cap: int) -> bool:
    """Count one more agent turn; the first one past ``cap`` trips the brake (and is refused:
    False). A turn is counted only while the brake is clear."""
    count = brakes_store.count_agent_turn(conn, tx, project_id)
    if count > cap:
        trip(conn, tx, project_id, "agent_turn_cap", {"agent_turns": count - 1, "cap": cap})
        return False
    return True


def count_external_turn(conn: sqlite3.Connection, tx: Tx, project_id: int, cap: int) -> None:
    """An external agent's ``queue`` consume is the start of one of its own turns. It already
    began (a consume is a report), so an external agent may run one turn more than an
    in-process one, which is refused before it starts; nothing more is offered once tripped."""
    if brakes_store.brake(conn, project_id)["tripped"] is not None:
        return
    count = brakes_store.count_agent_turn(conn, tx, project_id)
    if count > cap:
        trip(conn, tx, project_id, "agent_turn_cap", {"agent_turns": count, "cap": cap})


async def trip_brake(core: Services, project_id: int, reason: str, detail: dict[str, Any]) -> None:
    await core.db.write(lambda conn, tx: trip(conn, tx, project_id, reason, detail))


async def clear_brake(core: Services, project_id: int, human_member_id: int) -> dict[str, Any]:
    def job(conn: sqlite3.Connection, tx: Tx) -> dict[str, Any]:
        # Archived and trashed projects are read-only: a clearing notice would change the
        # messages the trash snapshot hashed.
        projects_store.require_open(conn, project_id)
        before = brakes_store.brake(conn, project_id)
        brakes_store.clear_brake(conn, tx, project_id, human_member_id)
        audit_store.record(
            conn,
            now=tx.now,
            actor_kind="human",
            actor_id=human_member_id,
            project_id=project_id,
            action="brake.clear",
            outcome="ok",
            detail={"was": before["tripped"]},
        )
        tx.emit(WakeProject(project_id))  # dispatch may reopen: everything pending is looked at
        if before["tripped"]:
            insert_notice(
                conn, tx, project_id, "✅ 制动已由人类解除，恢复派发。", {"brake": "cleared"}
            )
        return brakes_store.brake(conn, project_id)

    return await core.db.write(job)
