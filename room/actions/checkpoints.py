"""Task checkpoints of agent sessions (docs/agents.md, "Checkpoints").

A checkpoint is written inside the same write as the turn event it records: the turn's start
(:func:`room.actions.turns.begin_turn`), each tool step and the tools about to run, a steer, its
end (completed or cut off) and, at start-up, a turn a restart cut off. Everything in it is read
from the turn's own record (its transcript, its deliveries, the member's open tasks), so it says
the same thing whoever writes it:

* ``summary`` — the member's open task, if any, and the first message the turn answers;
* ``did`` — the turn's tool calls so far, one digest each; ``last_tool`` the newest of them;
* ``pending_tools`` — calls the model asked for that have not finished;
* ``prompt`` — the messages the turn took in, while they are unanswered (empty once completed);
* ``next`` and ``blocked`` — what is left, and why the turn stopped short.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from room.rules.transcripts import clip, first_line, tool_digest, turn_records
from room.store import Tx
from room.store import checkpoints as checkpoints_store
from room.store import tasks as tasks_store
from room.store import turns as turns_store
from room.store.dialect import Connection, dialect_for

CUT_OFF = {
    "cancelled": "一位成员停止了这一轮",
    "interrupted": "服务器重启打断了这一轮",
    "failed": "这一轮出错",
    "braked": "刹车停止了这一轮",
    "step_limit": "达到步数上限",
}


def _prompt(conn: Connection, turn_id: int) -> list[dict[str, Any]]:
    """The messages the turn took in (through its transcript: deliveries released back to wait
    no longer name the turn), oldest first; deleted ones left out."""
    rows = conn.execute(
        "SELECT m.id, m.seq, m.author_id, m.body,"
        f" COALESCE({dialect_for(conn).json_text('m.frame', 'meta', 'for_agents')}, '')"
        " FROM transcript_entries t"
        " JOIN deliveries d ON d.id = t.delivery_id JOIN messages m ON m.id = d.message_id"
        " WHERE t.turn_id = :t AND t.role = 'user' AND m.deleted_at IS NULL ORDER BY t.id",
        {"t": turn_id},
    ).fetchall()
    return [
        {"message_id": r[0], "seq": r[1], "author_id": r[2], "body": r[3], "for_agents": r[4]}
        for r in rows
    ]


def _blocked(state: str, detail: str) -> str:
    why = CUT_OFF.get(state, "")
    if why and detail:
        return f"{why}（{detail}）"
    return why or detail


def record(
    conn: Connection,
    tx: Tx,
    turn_id: int,
    phase: str,
    *,
    state: str = "running",
    blocked: str = "",
    pending_tools: Sequence[str] = (),
) -> None:
    """Write the checkpoint of ``turn_id`` at ``phase`` (start, step, steer, end, interrupted)."""
    turn = conn.execute(
        "SELECT project_id, member_id, steps FROM turns WHERE id = :t", {"t": turn_id}
    ).fetchone()
    if turn is None:
        return
    project_id, member_id, steps = int(turn[0]), int(turn[1]), int(turn[2])
    prompt = _prompt(conn, turn_id)
    done = turn_records(turns_store.transcript_of_turn(conn, turn_id))
    did = [tool_digest(step) for step in done[0].tools] if done else []
    tasks = tasks_store.open_tasks_of(conn, project_id, member_id)
    parts = [f"任务 {t.key}「{clip(t.title, 80)}」（{t.state}）" for t in tasks[:3]]
    if prompt:
        parts.append(f"回答 #{prompt[-1]['seq']}：{first_line(str(prompt[-1]['body']), 80)}")
    completed = state == "completed"
    if completed:
        next_step = ""
    elif state == "running":
        next_step = "完成这一轮，回答标出的消息"
    else:
        next_step = "接着处理被打断的消息"
    checkpoints_store.insert(
        conn,
        project_id=project_id,
        member_id=member_id,
        turn_id=turn_id,
        phase=phase,
        state=state,
        step=steps,
        summary="；".join(parts),
        did=did,
        next=next_step,
        blocked=clip(_blocked(state, blocked), 300),
        last_tool=did[-1] if did else "",
        pending_tools=list(pending_tools),
        prompt=[] if completed else prompt,
        now=tx.now,
    )
