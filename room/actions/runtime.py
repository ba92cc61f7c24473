"""The runtime's writes: hand-offs, turns, consumption, usage, the loop brake, notices, and the
start-up reconciliation of deliveries caught mid-hand-off.

The runtime never writes SQL itself; it calls these. Each ledger change is published to the
project's subscribers as an ephemeral ``delivery`` frame after its commit.
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from room.actions.messages import append_message, publish_deliveries
from room.core import Core
from room.render import render
from room.store import Tx
from room.store import audit as audit_store
from room.store import members as members_store
from room.store import messages as messages_store
from room.store import projects as projects_store
from room.store import runtime as rt_store
from room.store.runtime import Inbound

FINAL_TXN = "turn-{turn_id}-final"


def set_deliveries(
    conn: sqlite3.Connection,
    tx: Tx,
    ids: Sequence[int],
    state: str,
    *,
    mode: str | None = None,
    reason: str | None = None,
    allowed_from: Sequence[str] | None = None,
) -> None:
    rows = rt_store.set_state(
        conn, ids, state, tx.now, mode=mode, reason=reason, allowed_from=allowed_from
    )
    publish_deliveries(tx, rows, state, mode, reason)


# -- notices ------------------------------------------------------------------------------------


def insert_notice(
    conn: sqlite3.Connection, tx: Tx, project_id: int, body: str, meta: dict[str, Any]
) -> int:
    """A system message in the timeline (no author, wakes nobody)."""
    message_id, _, _ = append_message(
        conn,
        tx,
        project_id=project_id,
        author_id=None,
        kind="system",
        body=body,
        html=render(body),
        meta=meta,
    )
    return message_id


# -- hand-off -----------------------------------------------------------------------------------


def dispatch_blocker(conn: sqlite3.Connection, member_id: int) -> str | None:
    """Why a member's deliveries may not be dispatched now (inside the writer's transaction,
    so a pause committed a moment ago is seen): ``held`` when the project or the member is
    paused or closed, ``pending`` when the loop brake is tripped, None when dispatch is open."""
    row = conn.execute(
        "SELECT p.state, m.status, p.id FROM members m JOIN projects p ON p.id = m.project_id"
        " WHERE m.id = :m",
        {"m": member_id},
    ).fetchone()
    if row is None or row[0] != "active" or row[1] != "active":
        return "held"
    if rt_store.brake(conn, int(row[2]))["tripped"] is not None:
        return "pending"
    return None


def release(
    conn: sqlite3.Connection, tx: Tx, member_id: int, ids: Sequence[int], reason: str
) -> None:
    """Deliveries a session took but no model ever answered go back, never failed: ``held``
    while the project or member is paused or closed, else ``pending`` for the next dispatch."""
    if not ids:
        return
    to = "held" if dispatch_blocker(conn, member_id) == "held" else "pending"
    conn.executemany(
        "UPDATE deliveries SET turn_id = NULL, handoff = NULL WHERE id = ?", [(i,) for i in ids]
    )
    set_deliveries(conn, tx, ids, to, reason=reason)


async def claim(core: Core, member_id: int, limit: int = 50) -> list[Inbound]:
    """pending → delivered: the deliveries now sit in the in-process session's inbox. Nothing
    is claimed unless dispatch is open at this very commit."""

    def job(conn: sqlite3.Connection, tx: Tx) -> list[Inbound]:
        if dispatch_blocker(conn, member_id) is not None:
            return []
        taken = rt_store.claim_pending(conn, member_id, tx.now, limit)
        rows = [(i.delivery_id, i.project_id, i.message_id, member_id) for i in taken]
        publish_deliveries(tx, rows, "delivered")
        return taken

    return await core.db.write(job)


async def release_claimed(core: Core, member_id: int, ids: Sequence[int], reason: str) -> None:
    await core.db.write(lambda conn, tx: release(conn, tx, member_id, ids, reason))


async def offer(core: Core, member_id: int, handoff: str) -> list[Inbound]:
    """Pending deliveries handed to an external agent's socket (still pending until receipt);
    only while dispatch is open, each to one socket."""

    def job(conn: sqlite3.Connection, tx: Tx) -> list[Inbound]:
        if dispatch_blocker(conn, member_id) is not None:
            return []
        return rt_store.offer_pending(conn, member_id, handoff)

    return await core.db.write(job)


async def confirm(
    core: Core,
    member_id: int,
    delivery_ids: Sequence[int],
    state: str,
    mode: str | None = None,
    *,
    turn_cap: int | None = None,
) -> list[int]:
    """An external agent reports ``received`` (→ delivered) or ``consumed`` (with its mode).

    A ``queue`` consume is the start of one of its own turns, so it counts toward the loop
    brake's ``turn_cap`` like an in-process turn. The first one past the cap trips the brake (it
    already began: a consume is a report, so an external agent may run one turn more than an
    in-process one, which is refused before it starts); nothing more is offered until a person
    clears it."""

    def job(conn: sqlite3.Connection, tx: Tx) -> list[int]:
        allowed = {
            "delivered": ("pending", "unknown"),
            "consumed": ("pending", "delivered", "unknown"),
            "pending": ("unknown", "delivered"),
        }[state]
        own = _own_open(conn, member_id, delivery_ids, allowed)
        for delivery_id in own:
            if _state_of(conn, delivery_id) == "unknown":
                rt_store.reconcile_record(
                    conn, delivery_id, "unknown", state, "confirmed by the external agent", tx.now
                )
        if state == "pending":  # asked for again: waits while paused, like any delivery
            release(conn, tx, member_id, own, "the external agent asked for it again")
        else:
            set_deliveries(conn, tx, own, state, mode=mode)
        if own and state == "consumed" and mode != "steer" and turn_cap is not None:
            _count_external_turn(conn, tx, member_id, turn_cap)
        return own

    return await core.db.write(job)


def _count_external_turn(conn: sqlite3.Connection, tx: Tx, member_id: int, cap: int) -> None:
    member = members_store.get(conn, member_id)
    if member is None:
        return
    project_id = member.project_id
    if rt_store.brake(conn, project_id)["tripped"] is not None:
        return
    count = rt_store.count_agent_turn(conn, project_id, tx.counters)
    if count > cap:  # as for in-process turns: tripped by the first turn past the cap
        _trip(conn, tx, project_id, "agent_turn_cap", {"agent_turns": count, "cap": cap})


def _own_open(
    conn: sqlite3.Connection, member_id: int, ids: Sequence[int], states: Sequence[str]
) -> list[int]:
    if not ids:
        return []
    marks = ",".join("?" * len(ids))
    state_marks = ",".join("?" * len(states))
    return [
        int(r[0])
        for r in conn.execute(
            f"SELECT id FROM deliveries WHERE id IN ({marks}) AND recipient_id = ?"
            f" AND state IN ({state_marks}) ORDER BY id",
            [*ids, member_id, *states],
        )
    ]


def _state_of(conn: sqlite3.Connection, delivery_id: int) -> str:
    row = conn.execute("SELECT state FROM deliveries WHERE id = ?", (delivery_id,)).fetchone()
    return str(row[0]) if row else ""


async def socket_lost(core: Core, member_id: int, handoff: str) -> int:
    """An external agent's socket closed: hand-offs it never confirmed become ``unknown``."""

    def job(conn: sqlite3.Connection, tx: Tx) -> int:
        ids = [
            int(r[0])
            for r in conn.execute(
                "SELECT id FROM deliveries WHERE recipient_id = :m AND handoff = :h"
                " AND state = 'pending'",
                {"m": member_id, "h": handoff},
            )
        ]
        for delivery_id in ids:
            rt_store.reconcile_record(
                conn, delivery_id, "pending", "unknown", "socket lost before receipt", tx.now
            )
        set_deliveries(conn, tx, ids, "unknown", reason="socket lost before receipt")
        return len(ids)

    return await core.db.write(job)


# -- turns --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TurnStart:
    turn_id: int | None
    tripped: str | None = None


async def start_turn(
    core: Core, project_id: int, member_id: int, inbound: Sequence[Inbound], cap: int
) -> TurnStart:
    """Open a turn taking ``inbound`` in, unless the loop brake is (or now becomes) tripped —
    then the deliveries go back to ``pending`` untouched, to be dispatched once it is cleared."""
    ids = [i.delivery_id for i in inbound]

    def job(conn: sqlite3.Connection, tx: Tx) -> TurnStart:
        blocked = dispatch_blocker(conn, member_id)
        if blocked == "held":  # paused or closed between the claim and now
            release(conn, tx, member_id, ids, "dispatch stopped before the turn started")
            return TurnStart(None, None)
        brake = rt_store.brake(conn, project_id)
        tripped = brake["tripped"]
        if tripped is None:
            count = rt_store.count_agent_turn(conn, project_id, tx.counters)
            if count > cap:
                detail = {"agent_turns": count - 1, "cap": cap}
                _trip(conn, tx, project_id, "agent_turn_cap", detail)
                tripped = "agent_turn_cap"
        if tripped is not None:
            release(conn, tx, member_id, ids, "loop brake: waiting for a human")
            return TurnStart(None, tripped)
        trigger = inbound[-1].message_id if inbound else None
        turn_id = rt_store.insert_turn(
            conn, project_id=project_id, member_id=member_id, trigger=trigger, now=tx.now
        )
        _take(conn, tx, member_id, turn_id, inbound)
        return TurnStart(turn_id)

    return await core.db.write(job)


async def take_steer(core: Core, member_id: int, turn_id: int, inbound: Sequence[Inbound]) -> None:
    """Messages that arrived mid-turn, taken in at a step boundary."""
    await core.db.write(lambda conn, tx: _take(conn, tx, member_id, turn_id, inbound))


def _take(
    conn: sqlite3.Connection, tx: Tx, member_id: int, turn_id: int, inbound: Sequence[Inbound]
) -> None:
    """Bind deliveries to a turn and write them into the session's transcript (its record)."""
    rt_store.take_into_turn(conn, [i.delivery_id for i in inbound], turn_id)
    for item in inbound:
        rt_store.append_transcript(
            conn,
            member_id=member_id,
            turn_id=turn_id,
            role="user",
            content=item.body,
            now=tx.now,
            delivery_id=item.delivery_id,
        )


@dataclass(slots=True)
class ModelCall:
    project_id: int
    member_id: int
    turn_id: int
    model_id: str
    route_source: str
    provider: str
    model_reported: str | None
    latency_ms: float | None
    input_tokens: int = 0
    output_tokens: int = 0
    usage_reported: bool = True
    ok: bool = True
    error_code: str | None = None
    consumed: list[tuple[int, str]] = field(default_factory=list)  # (delivery, mode)


async def record_model_call(core: Core, call: ModelCall, budget: int | None) -> str | None:
    """Record one real request (route observed, usage) and mark the deliveries it carried as
    consumed. Returns the brake reason if the token budget is now spent."""

    def job(conn: sqlite3.Connection, tx: Tx) -> str | None:
        rt_store.record_request(
            conn,
            project_id=call.project_id,
            member_id=call.member_id,
            turn_id=call.turn_id,
            model_id=call.model_id,
            route_source=call.route_source,
            provider=call.provider,
            model_reported=call.model_reported,
            latency_ms=call.latency_ms,
            input_tokens=call.input_tokens,
            output_tokens=call.output_tokens,
            usage_reported=int(call.usage_reported),
            ok=int(call.ok),
            error_code=call.error_code,
            now=tx.now,
        )
        for mode in ("queue", "steer"):
            ids = [d for d, m in call.consumed if m == mode]
            set_deliveries(conn, tx, ids, "consumed", mode=mode)
        if budget is not None:
            used = rt_store.brake(conn, call.project_id)["tokens_used"]
            if used >= budget:
                detail = {"tokens_used": used, "budget": budget}
                _trip(conn, tx, call.project_id, "token_budget", detail)
                return "token_budget"
        return None

    return await core.db.write(job)


TOOL_ARG_CHARS = 80


def tool_activity(
    calls: list[dict[str, Any]], results: list[tuple[str, str]]
) -> tuple[str, dict[str, Any]]:
    """The timeline's record of one step's tool calls: a short line each, and the details."""
    outcome = {call_id: _tool_ok(text) for call_id, text in results}
    entries = []
    for call in calls:
        args = json.dumps(call["arguments"], ensure_ascii=False)
        if len(args) > TOOL_ARG_CHARS:
            args = args[: TOOL_ARG_CHARS - 1] + "…"
        entries.append({"name": call["name"], "arguments": args, "ok": outcome.get(call["id"])})
    lines = [f"🔧 `{e['name']}` {'✓' if e['ok'] else '✗'}" for e in entries]
    return "\n".join(lines), {"tool": {"calls": entries}}


def _tool_ok(text: str) -> bool:
    try:
        data = json.loads(text)
    except ValueError:
        return True
    return not (isinstance(data, dict) and data.get("ok") is False)


async def record_tool_step(
    core: Core,
    project_id: int,
    member_id: int,
    turn_id: int,
    step: int,
    assistant_text: str,
    calls: list[dict[str, Any]],
    results: list[tuple[str, str]],
    side_effects: int,
) -> None:
    """The step's transcript entries, and a ``tool`` message in the timeline (shown apart from
    speech; it mentions and wakes nobody, and agents' contexts leave it out)."""
    body, meta = tool_activity(calls, results)
    meta["tool"].update(turn_id=turn_id, step=step)

    def job(conn: sqlite3.Connection, tx: Tx) -> None:
        append_message(
            conn,
            tx,
            project_id=project_id,
            author_id=member_id,
            kind="tool",
            body=body,
            html=render(body),
            meta=meta,
        )
        rt_store.append_transcript(
            conn,
            member_id=member_id,
            turn_id=turn_id,
            role="assistant",
            content=assistant_text,
            now=tx.now,
            tool_calls=calls,
        )
        for call_id, content in results:
            rt_store.append_transcript(
                conn,
                member_id=member_id,
                turn_id=turn_id,
                role="tool",
                content=content,
                now=tx.now,
                tool_call_id=call_id,
            )
        conn.execute(
            "UPDATE turns SET steps = :s, side_effects = side_effects + :e WHERE id = :t",
            {"s": step, "e": side_effects, "t": turn_id},
        )

    await core.db.write(job)


async def complete_turn(
    core: Core, member_id: int, turn_id: int, steps: int, reply_message_id: int | None, text: str
) -> None:
    def job(conn: sqlite3.Connection, tx: Tx) -> None:
        rt_store.append_transcript(
            conn, member_id=member_id, turn_id=turn_id, role="assistant", content=text, now=tx.now
        )
        rt_store.update_turn(
            conn,
            turn_id,
            state="completed",
            steps=steps,
            reply_message_id=reply_message_id,
            ended_at=tx.now,
        )

    await core.db.write(job)


async def end_turn(
    core: Core,
    project_id: int,
    member_id: int,
    turn_id: int,
    *,
    state: str,
    steps: int,
    reason: str,
    notice: str | None,
    brake: tuple[str, dict[str, Any]] | None = None,
    unanswered: str = "fail",
) -> None:
    """End a turn that did not complete. Deliveries it took but no model answered: with
    ``unanswered="fail"`` they become ``failed`` with ``reason`` (the work itself failed: the
    provider refused, a person stopped it); with ``"release"`` they go back to wait
    (``held``/``pending``, see :func:`release`), as when a project pause or a brake stopped the
    turn before they were seen; ``"release_if_closed"`` releases when the project is no longer
    active and fails otherwise. A notice, if any, says so in the room."""

    def job(conn: sqlite3.Connection, tx: Tx) -> None:
        open_ids = [d for d, s in rt_store.deliveries_of_turn(conn, turn_id) if s == "delivered"]
        mode = unanswered
        if mode == "release_if_closed":
            mode = "release" if projects_store.state_of(conn, project_id) != "active" else "fail"
        if mode == "release":
            release(conn, tx, member_id, open_ids, reason)
        else:
            set_deliveries(conn, tx, open_ids, "failed", reason=reason)
        rt_store.update_turn(conn, turn_id, state=state, steps=steps, error=reason, ended_at=tx.now)
        if brake is not None:
            _trip(conn, tx, project_id, brake[0], brake[1])
        if notice:
            insert_notice(conn, tx, project_id, notice, {"turn_id": turn_id, "state": state})

    await core.db.write(job)


async def trip_brake(core: Core, project_id: int, reason: str, detail: dict[str, Any]) -> None:
    await core.db.write(lambda conn, tx: _trip(conn, tx, project_id, reason, detail))


BRAKE_NOTICES = {
    "agent_turn_cap": "⛔ 循环制动：自上一条人类消息以来 AI 成员已运行 {agent_turns} 轮（上限 {cap}）。"
    "已暂停派发，请人类查看后在界面上解除。",
    "token_budget": "⛔ 预算制动：本项目已用 {tokens_used} tokens（预算 {budget}）。已暂停派发，"
    "请人类调整预算或解除。",
    "step_limit": "⛔ 步数制动：@{handle} 的一轮达到 {max_steps} 步上限仍未给出答复。已暂停派发，"
    "请人类查看后解除。",
    "repetition": "⛔ 重复制动：@{handle} 在重复同样的动作（{what}）。已暂停派发，请人类查看后解除。",
}


def _trip(
    conn: sqlite3.Connection,
    tx: Tx,
    project_id: int,
    reason: str,
    detail: dict[str, Any],
) -> None:
    if rt_store.trip(conn, project_id, reason, detail, tx.now):
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


async def clear_brake(core: Core, project_id: int, human_member_id: int) -> dict[str, Any]:
    def job(conn: sqlite3.Connection, tx: Tx) -> dict[str, Any]:
        # Archived and trashed projects are read-only: a clearing notice would change the
        # messages the trash snapshot hashed.
        projects_store.require_open(conn, project_id)
        before = rt_store.brake(conn, project_id)
        rt_store.clear_brake(conn, project_id, human_member_id, tx.now)
        tx.counters[f"agent_turns:{project_id}"] = 0
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
        if before["tripped"]:
            insert_notice(
                conn, tx, project_id, "✅ 制动已由人类解除，恢复派发。", {"brake": "cleared"}
            )
        return rt_store.brake(conn, project_id)

    return await core.db.write(job)


def final_txn(turn_id: int) -> str:
    return FINAL_TXN.format(turn_id=turn_id)


def tool_txn(turn_id: int, call_id: str) -> str:
    # Stable per tool call: a retried call in the same turn cannot post twice.
    digest = uuid.uuid5(uuid.NAMESPACE_URL, call_id).hex[:16]
    return f"turn-{turn_id}-{digest}"


# -- restart ------------------------------------------------------------------------------------


def reconcile_on_start(conn: sqlite3.Connection, tx: Tx) -> dict[str, Any]:
    """Resolve what a crash left mid-hand-off against each session's own record (DESIGN §5).

    * a turn left ``running``: if its final reply was posted (found by its idempotency key), it
      completed; if it had already acted (``room_send``), its deliveries fail rather than run
      twice; otherwise nothing it did reached anyone and its deliveries go back to ``pending``.
    * deliveries in an in-process session's inbox that no turn took go back to ``pending``.
    * hand-offs to external agents become ``unknown`` until the agent confirms (it reconciles
      on its next connection).
    Every row passes through ``unknown`` with a reconcile record; nothing is re-sent blindly.
    """
    report: dict[str, Any] = {
        "turns_interrupted": 0,
        "redispatched": 0,
        "failed": 0,
        "completed": 0,
        "awaiting_external": 0,
        "notices": [],
    }

    def via_unknown(ids: list[int], to: str, reason: str, mode: str | None = None) -> None:
        for delivery_id in ids:
            before = _state_of(conn, delivery_id)
            rt_store.reconcile_record(conn, delivery_id, before, "unknown", "restart", tx.now)
            rt_store.reconcile_record(conn, delivery_id, "unknown", to, reason, tx.now)
        if to == "pending":
            conn.executemany(
                "UPDATE deliveries SET turn_id = NULL, handoff = NULL WHERE id = ?",
                [(i,) for i in ids],
            )
        # The one path that may leave 'consumed': a turn the crash cut short is settled here.
        set_deliveries(
            conn,
            tx,
            ids,
            to,
            mode=mode,
            reason=reason,
            allowed_from=("pending", "delivered", "consumed", "unknown"),
        )

    for turn_id, project_id, member_id, side_effects in rt_store.running_turns(conn):
        report["turns_interrupted"] += 1
        deliveries = rt_store.deliveries_of_turn(conn, turn_id)
        ids = [d for d, s in deliveries if s in ("delivered", "consumed", "unknown")]
        reply = messages_store.find_txn(conn, member_id, final_txn(turn_id))
        if reply is not None:
            via_unknown(ids, "consumed", "the turn's reply was posted before the restart", "queue")
            rt_store.update_turn(
                conn, turn_id, state="completed", reply_message_id=reply[0], ended_at=tx.now
            )
            report["completed"] += 1
            continue
        rt_store.update_turn(
            conn, turn_id, state="interrupted", error="server restart", ended_at=tx.now
        )
        if side_effects:
            reason = "turn interrupted by a restart after it had acted; not re-run (no duplicates)"
            via_unknown(ids, "failed", reason)
            report["failed"] += len(ids)
            text = (
                f"⚠️ 服务器重启打断了一轮已产生动作的工作（第 {turn_id} 轮），为避免重复不会自动重跑；"
                "如需继续，请重新 @ 该成员。"
            )
            insert_notice(conn, tx, project_id, text, {"turn_id": turn_id})
            report["notices"].append(text)
        else:
            rt_store.supersede_turn_transcript(conn, turn_id)
            reason = "turn interrupted by a restart before any effect; dispatched again"
            via_unknown(ids, "pending", reason)
            report["redispatched"] += len(ids)

    # In-process inboxes are memory: what no turn took is still unseen by the session's record.
    inbox = [
        int(r[0])
        for r in conn.execute(
            "SELECT d.id FROM deliveries d JOIN members m ON m.id = d.recipient_id"
            " WHERE d.state = 'delivered' AND d.turn_id IS NULL AND m.driver = 'builtin'"
        )
    ]
    via_unknown(
        inbox, "pending", "in the session inbox at restart, taken by no turn; dispatched again"
    )
    report["redispatched"] += len(inbox)

    external = [
        int(r[0])
        for r in conn.execute(
            "SELECT d.id FROM deliveries d JOIN members m ON m.id = d.recipient_id"
            " WHERE m.driver = 'external' AND (d.state = 'delivered'"
            " OR (d.state = 'pending' AND d.handoff IS NOT NULL))"
        )
    ]
    for delivery_id in external:
        rt_store.reconcile_record(
            conn,
            delivery_id,
            _state_of(conn, delivery_id),
            "unknown",
            "restart: awaiting the external agent's confirmation",
            tx.now,
        )
    set_deliveries(conn, tx, external, "unknown", reason="awaiting the agent's confirmation")
    report["awaiting_external"] = len(external)
    report["paused_projects_with_work"] = [
        int(r[0])
        for r in conn.execute(
            "SELECT DISTINCT d.project_id FROM deliveries d JOIN projects p ON p.id = d.project_id"
            " WHERE d.state IN ('pending', 'held') AND p.state != 'active'"
        )
    ]
    report["at"] = tx.now
    conn.execute(
        "INSERT INTO audit_events (at, actor_kind, project_id, action, outcome, detail_json)"
        " VALUES (:at, 'system', NULL, 'runtime.reconcile', 'ok', :d)",
        {"at": tx.now, "d": json.dumps({k: v for k, v in report.items() if k != "notices"})},
    )
    return report
