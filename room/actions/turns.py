"""Agents' turns as the database records them: opening one (the dispatch rule checked once, in
the same write that claims its deliveries), steering, model requests and usage, tool steps, and
ending it (docs/architecture.md, "Agents").

The agents' scheduler never writes SQL itself; it calls these.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from room.actions import brakes as brake_actions
from room.actions import checkpoints
from room.actions.deliveries import claim, confirm, dispatch_blocker, release, set_deliveries
from room.actions.messages import append_message
from room.actions.notices import post_notice
from room.rules import ledger, notices
from room.rules.ledger import DeliveryState, Reason
from room.rules.notices import Notice
from room.rules.render import render
from room.services import Services
from room.settings import Settings
from room.store import Tx
from room.store import brakes as brakes_store
from room.store import deliveries as deliveries_store
from room.store import members as members_store
from room.store import projects as projects_store
from room.store import turns as turns_store
from room.store import usage as usage_store
from room.store.deliveries import Inbound
from room.store.dialect import Connection

_D = DeliveryState
FINAL_TXN = "turn-{turn_id}-final"


@dataclass(frozen=True, slots=True)
class Limits:
    max_steps: int
    agent_turn_cap: int
    token_budget: int | None
    tool_calls_per_turn: int = 40
    command_timeout_secs: float = 120.0
    command_output_bytes: int = 16 * 1024
    command_secs_per_turn: float = 600.0
    workspace_disk_mib: int = 10 * 1024


#: The keys of a project's ``limits`` setting (``PATCH /api/projects/{id}/settings``).
WORK_LIMITS = (
    "tool_calls_per_turn",
    "command_timeout_secs",
    "command_output_bytes",
    "command_secs_per_turn",
    "workspace_disk_mib",
)


async def limits(core: Services, project_id: int) -> Limits:
    """The project's limits; a missing or unusable value falls back to the server's."""
    values = await core.db.read(lambda conn: projects_store.settings(conn, project_id))
    return limits_of(core.settings, values)


def limits_of(defaults: Settings, values: Mapping[str, Any]) -> Limits:
    """:class:`Limits` from a project's stored settings over the server's ``defaults``."""

    def number(key: str, default: int | None) -> int | None:
        value = values.get(key)
        return value if isinstance(value, int) and value > 0 else default

    work = values.get("limits")
    work = work if isinstance(work, dict) else {}

    def work_limit(key: str) -> Any:
        value = work.get(key)
        ok = isinstance(value, int | float) and not isinstance(value, bool) and value > 0
        return value if ok else getattr(defaults, key)

    return Limits(
        max_steps=number("max_steps", defaults.max_steps) or defaults.max_steps,
        agent_turn_cap=number("agent_turn_cap", defaults.agent_turn_cap) or defaults.agent_turn_cap,
        token_budget=number("token_budget", defaults.token_budget),
        tool_calls_per_turn=int(work_limit("tool_calls_per_turn")),
        command_timeout_secs=float(work_limit("command_timeout_secs")),
        command_output_bytes=int(work_limit("command_output_bytes")),
        command_secs_per_turn=float(work_limit("command_secs_per_turn")),
        workspace_disk_mib=int(work_limit("workspace_disk_mib")),
    )


@dataclass(frozen=True, slots=True)
class TurnStart:
    """A turn opened with its inputs, or why none was: ``blocked`` by the dispatch rule (or the
    brake this very turn tripped); neither when there was nothing to take."""

    turn_id: int | None
    inbound: list[Inbound] = field(default_factory=list)
    blocked: Reason | None = None


async def begin_turn(core: Services, member_id: int, cap: int, *, project_id: int) -> TurnStart:
    """Claim a member's pending deliveries and open a turn taking them in, in ONE write: the
    dispatch rule (:func:`room.rules.ledger.dispatch_blocker`) is checked once, here, so a pause or
    a tripped brake committed a moment before is seen and nothing is claimed. The turn counts toward
    the loop brake; the first one past ``cap`` trips it and takes nothing (the deliveries stay
    ``pending``, dispatched once a person clears it).

    ``project_id`` (the member's project) is declared to the writer, whose batch then locks the
    project's row before the job runs (PostgreSQL), in a send's order: the project, then the
    brake's row. Undeclared, a turn tripping the brake took the brake's row, then the project's
    (the notice's seq), and deadlocked with a send resetting the brake on another node."""

    def job(conn: Connection, tx: Tx) -> TurnStart:
        # One running turn per member, across processes: under the member's row lock a turn
        # another process opened is seen, and the unique index turns_one_running refuses any
        # second one regardless.
        turns_store.lock_member(conn, member_id)
        if turns_store.running_of(conn, member_id) is not None:
            return TurnStart(None)
        facts = deliveries_store.dispatch_facts(conn, member_id)
        if facts is None:
            return TurnStart(None, blocked=Reason.RECIPIENT_LEFT)
        project_state, status, project_id, tripped = facts
        blocked = ledger.dispatch_blocker(project_state, status, tripped)
        if blocked is not None:
            return TurnStart(None, blocked=blocked)
        ids = deliveries_store.pending_of(conn, member_id, 1, unoffered=False)
        if not ids:
            return TurnStart(None)
        if not brake_actions.count_turn(conn, tx, project_id, member_id, cap):
            return TurnStart(None, blocked=Reason.LOOP_BRAKE)
        inbound = claim(conn, tx, member_id)
        turn_id = turns_store.insert_turn(
            conn,
            project_id=project_id,
            member_id=member_id,
            trigger=inbound[-1].message_id,
            now=tx.now,
            owner=tx.node,
        )
        _take(conn, tx, member_id, turn_id, inbound)
        checkpoints.record(conn, tx, turn_id, "start")
        return TurnStart(turn_id, inbound)

    return await core.db.submit(job, locks=(project_id,))


async def steer(core: Services, member_id: int, turn_id: int) -> list[Inbound]:
    """Messages that arrived mid-turn, claimed and taken in at a step boundary in one write
    (nothing while dispatch is closed)."""

    def job(conn: Connection, tx: Tx) -> list[Inbound]:
        if dispatch_blocker(conn, member_id) is not None:
            return []
        fresh = claim(conn, tx, member_id)
        _take(conn, tx, member_id, turn_id, fresh)
        if fresh:
            checkpoints.record(conn, tx, turn_id, "steer")
        return fresh

    return await core.db.write(job)


def _take(
    conn: Connection, tx: Tx, member_id: int, turn_id: int, inbound: Sequence[Inbound]
) -> None:
    """Bind deliveries to a turn and write them into the session's transcript (its record)."""
    deliveries_store.take_into_turn(conn, [i.delivery_id for i in inbound], turn_id)
    for item in inbound:
        turns_store.append_transcript(
            conn,
            member_id=member_id,
            turn_id=turn_id,
            role="user",
            content=item.body,
            now=tx.now,
            delivery_id=item.delivery_id,
        )


async def confirm_external(
    core: Services,
    member_id: int,
    delivery_ids: Sequence[int],
    state: DeliveryState,
    mode: str | None = None,
    *,
    turn_cap: int | None = None,
    project_id: int | None = None,
) -> list[int]:
    """An external agent's report (see :func:`room.actions.deliveries.confirm`). A ``queue``
    consume is the start of one of its own turns, so it counts toward the loop brake's
    ``turn_cap`` like an in-process turn (:func:`room.actions.brakes.count_external_turn`).
    ``project_id`` (the agent's project) is declared to the writer, as :func:`begin_turn`
    does: a count tripping the brake takes the project's row after the brake's otherwise."""

    def job(conn: Connection, tx: Tx) -> list[int]:
        own = confirm(conn, tx, member_id, delivery_ids, state, mode)
        if own and state is _D.CONSUMED and mode != "steer" and turn_cap is not None:
            member = members_store.get(conn, member_id)
            if member is not None:
                brake_actions.count_external_turn(conn, tx, member.project_id, member_id, turn_cap)
        return own

    return await core.db.submit(job, locks=() if project_id is None else (project_id,))


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
    error_code: str | None = None  # a ProviderError's code, or "stopped" (abandoned by a stop)
    attempts: int = 1  # HTTP requests sent for this call (0: none, e.g. a missing key)
    consumed: list[tuple[int, str]] = field(default_factory=list)  # (delivery, mode)


async def record_model_call(core: Services, call: ModelCall, budget: int | None) -> str | None:
    """Record one model call as it went (route observed, attempts, the usage the provider
    reported — also for a failed or stopped call, whose tokens count toward the budget too) and
    mark the deliveries it carried as consumed. Returns the brake reason if the token budget is
    now spent."""

    def job(conn: Connection, tx: Tx) -> str | None:
        usage_store.record_request(
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
            attempts=call.attempts,
            now=tx.now,
        )
        # Only what is still this turn's: a delivery a settling unbound from it (the turn was
        # taken for a leftover) waits for another turn, and no consumed row names no turn.
        taken = deliveries_store.still_taken(conn, call.turn_id, [d for d, _ in call.consumed])
        for mode in ("queue", "steer"):
            ids = [d for d, m in call.consumed if m == mode and d in taken]
            set_deliveries(conn, tx, ids, _D.CONSUMED, mode=mode)
        if budget is not None:
            used = brakes_store.brake(conn, call.project_id)["tokens_used"]
            if used >= budget:
                detail = {"tokens_used": used, "budget": budget}
                brake_actions.trip(conn, tx, call.project_id, "token_budget", detail)
                return "token_budget"
        return None

    return await core.db.write(job, locks=(call.project_id,))


TOOL_ARG_CHARS = 80


@dataclass(frozen=True, slots=True)
class ToolResult:
    """One tool call's result as the step records it: the text the model read, and whether the
    call succeeded (the agents' toolbox decides; the timeline shows ✓ or ✗)."""

    call_id: str
    text: str
    ok: bool
    detail: Mapping[str, Any] | None = None  # for the timeline: ``command`` or ``file``


def tool_activity(
    calls: list[dict[str, Any]], results: list[ToolResult]
) -> tuple[str, dict[str, Any]]:
    """The timeline's record of one step's tool calls: a short line each, and the details."""
    outcome = {r.call_id: r for r in results}
    entries = []
    for call in calls:
        args = json.dumps(call["arguments"], ensure_ascii=False)
        if len(args) > TOOL_ARG_CHARS:
            args = args[: TOOL_ARG_CHARS - 1] + "…"
        result = outcome.get(call["id"])
        entry = {"name": call["name"], "arguments": args, "ok": result.ok if result else None}
        if result is not None and result.detail:
            entry.update(result.detail)  # ``command: {...}`` for shell, ``file: {...}`` for writes
        entries.append(entry)
    lines = [_activity_line(e) for e in entries]
    return "\n".join(lines), {"tool": {"calls": entries}}


def _activity_line(entry: Mapping[str, Any]) -> str:
    line = f"🔧 `{entry['name']}` {'✓' if entry['ok'] else '✗'}"
    command = entry.get("command")
    if isinstance(command, Mapping):
        code = command.get("exit_code")
        said = f"exit {code}" if code is not None else f"killed: {command.get('killed')}"
        text = str(command.get("command", ""))[:TOOL_ARG_CHARS].replace("`", "'")
        line += f" `{text}` → {said}"
    file = entry.get("file")
    if isinstance(file, Mapping):
        path = str(file.get("path", "")).replace("`", "'")
        line += f" `{path}` ({file.get('bytes')} B)"
    return line


async def mark_acting(core: Services, turn_id: int) -> None:
    """The turn is about to run a tool that acts (a command, a write, a message): recorded
    before it runs, so a crash while it runs never lets a restart run the turn again."""

    def job(conn: Connection, tx: Tx) -> None:
        conn.execute(
            "UPDATE turns SET side_effects = 1 WHERE id = :t AND side_effects = 0", {"t": turn_id}
        )

    await core.db.write(job)


async def record_tool_step(
    core: Services,
    project_id: int,
    member_id: int,
    turn_id: int,
    step: int,
    assistant_text: str,
    calls: list[dict[str, Any]],
    results: list[ToolResult],
    side_effects: int,
) -> None:
    """The step's transcript entries, and a ``tool`` message in the timeline (shown apart from
    speech; it mentions and wakes nobody, and agents' contexts leave it out)."""
    body, meta = tool_activity(calls, results)
    meta["tool"].update(turn_id=turn_id, step=step)

    def job(conn: Connection, tx: Tx) -> None:
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
        turns_store.append_transcript(
            conn,
            member_id=member_id,
            turn_id=turn_id,
            role="assistant",
            content=assistant_text,
            now=tx.now,
            tool_calls=calls,
        )
        for r in results:
            turns_store.append_transcript(
                conn,
                member_id=member_id,
                turn_id=turn_id,
                role="tool",
                content=r.text,
                now=tx.now,
                tool_call_id=r.call_id,
            )
        conn.execute(
            "UPDATE turns SET steps = :s, side_effects = side_effects + :e WHERE id = :t",
            {"s": step, "e": side_effects, "t": turn_id},
        )
        checkpoints.record(conn, tx, turn_id, "step")

    await core.db.write(job, locks=(project_id,))


async def checkpoint_tools(core: Services, turn_id: int, pending: Sequence[str]) -> None:
    """The step's tool calls are about to run: a checkpoint names them, so a turn a restart cuts
    off mid-command says which call never finished."""
    await core.db.write(
        lambda conn, tx: checkpoints.record(conn, tx, turn_id, "step", pending_tools=pending)
    )


async def complete_turn(
    core: Services,
    member_id: int,
    turn_id: int,
    steps: int,
    reply_message_id: int | None,
    text: str,
) -> None:
    def job(conn: Connection, tx: Tx) -> None:
        turns_store.append_transcript(
            conn, member_id=member_id, turn_id=turn_id, role="assistant", content=text, now=tx.now
        )
        turns_store.update_turn(
            conn,
            turn_id,
            state="completed",
            steps=steps,
            reply_message_id=reply_message_id,
            ended_at=tx.now,
        )
        checkpoints.record(conn, tx, turn_id, "end", state="completed")

    await core.db.write(job)


async def end_turn(
    core: Services,
    project_id: int,
    member_id: int,
    turn_id: int,
    *,
    state: str,
    steps: int,
    code: Reason,
    detail: str | None = None,
    notice: Notice | None,
    brake: tuple[str, dict[str, Any]] | None = None,
    unanswered: str = "fail",
    interrupted: bool = False,
) -> None:
    """End a turn that did not complete. Deliveries it took but no model answered: with
    ``unanswered="fail"`` they become ``failed`` with ``code`` (the work itself failed: the
    provider refused, a person stopped it); with ``"release"`` they go back to wait
    (``held``/``pending``, see :func:`room.actions.deliveries.release`), as when a project pause
    or a brake stopped the turn before they were seen; ``"release_if_closed"`` releases when the
    project is no longer active and fails otherwise. A notice, if any, says so in the room.
    ``brake`` trips the brake for this member's own turn (it holds the member); ``interrupted``
    records a turn the brake stopped to resume it when a person clears the brake
    (:func:`room.actions.brakes.interrupted`)."""

    def job(conn: Connection, tx: Tx) -> None:
        open_ids = [d for d, s in deliveries_store.of_turn(conn, turn_id) if s == _D.DELIVERED]
        mode = unanswered
        if mode == "release_if_closed":
            mode = "release" if projects_store.state_of(conn, project_id) != "active" else "fail"
        if mode == "release":
            release(conn, tx, member_id, open_ids, code, detail)
        else:
            set_deliveries(conn, tx, open_ids, _D.FAILED, code=code, detail=detail)
        failed = [] if mode == "release" else open_ids
        error = detail if detail is not None else ledger.text_of(code)
        turns_store.update_turn(
            conn, turn_id, state=state, steps=steps, error=error, ended_at=tx.now
        )
        checkpoints.record(conn, tx, turn_id, "end", state=state, blocked=detail or "")
        if brake is not None:
            brake_actions.trip(conn, tx, project_id, brake[0], brake[1], held=(member_id,))
        if interrupted:
            brake_actions.interrupted(conn, tx, project_id, member_id, turn_id, steps)
        if notice:
            meta: dict[str, Any] = {"turn_id": turn_id, "state": state, "member_id": member_id}
            if failed:
                meta["retry"] = failed  # the failed deliveries a person may ask for again
            post_notice(conn, tx, project_id, notice, meta)

    await core.db.write(job, locks=(project_id,))


def failure_notice(handle: str, code: str, model: str | None = None) -> Notice:
    """The room's notice of a turn that failed: the member, the cause in words (and its code),
    and the next step (:func:`room.rules.notices.turn_failed`). A failed delivery can be asked
    for again: ``POST /api/deliveries/{id}/retry``."""
    return notices.turn_failed(handle, code, model)


def final_txn(turn_id: int) -> str:
    return FINAL_TXN.format(turn_id=turn_id)


def tool_txn(turn_id: int | None, call_id: str) -> str:
    # Stable per tool call: a retried call in the same turn cannot post twice. A call from
    # outside a turn (an MCP client's) is named by its own call id alone.
    digest = uuid.uuid5(uuid.NAMESPACE_URL, call_id).hex[:16]
    return f"turn-{turn_id}-{digest}" if turn_id is not None else f"call-{digest}"
