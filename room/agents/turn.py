"""One turn of an agent session.

take the delivered messages → build the context → call the member's route → run the tool calls
→ repeat until a final answer or the step limit → post the final answer as the member's
message, replying to what triggered it. Deliveries become ``consumed`` when a model answer to a
request that carried them comes back (mode ``queue`` for the turn's inputs, ``steer`` for
messages inserted at a step boundary). Stops are cooperative: checked at every step boundary, and
an in-flight model call is abandoned.

Every model call is recorded as it really went (``model_requests``): answered, failed or
abandoned by a stop, with the HTTP attempts it made and whatever usage the provider reported
(a :class:`~room.providers.CallMeter` follows the call, so a cancelled one still knows). An
answer the provider cut at its token limit (``max_tokens``) is posted marked as truncated, never
as if it were complete.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from room.actions import attachments as attachment_actions
from room.actions import brakes as brake_actions
from room.actions import messages as message_actions
from room.actions import turns as turn_actions
from room.actions.turns import Limits, TurnStart
from room.actions.workspaces import work_dir
from room.agents import context as ctx_mod
from room.agents import memory as memory_mod
from room.agents.drafts import DraftStream
from room.agents.presets import MEMORY_WRITE_TOOLS, ROOM_RULES, preset_for
from room.agents.tools import (
    Tool,
    Toolbox,
    ToolContext,
    TurnWork,
    WorkEnv,
    bad_arguments,
    not_run_after_stop,
)
from room.errors import DatabaseUnavailableError, LeaseLostError, ProviderError, RoomError
from room.providers import (
    STOP_MAX_TOKENS,
    CallMeter,
    ChatMessage,
    ChatRequest,
    ChatResult,
    ProviderRegistry,
)
from room.rules import brakes as brake_rules
from room.rules.attachments import with_attachments
from room.rules.entities import Member
from room.rules.ledger import Reason
from room.rules.notices import Notice
from room.rules.routing import Pool, PoolPick, ResolvedRoute, resolve_route
from room.rules.transcripts import ToolStep, arguments_text, tool_digest, turn_records
from room.services import Services
from room.store import brakes as brakes_store
from room.store import checkpoints as checkpoints_store
from room.store import messages as messages_store
from room.store import projects as projects_store
from room.store import routes as routes_store
from room.store import threads as threads_store
from room.store import turns as turns_store
from room.store import usage as usage_store

log = logging.getLogger(__name__)

REPEAT_LIMIT = 3  # the same tool call this many times in one turn trips the brake
# How often the end of a turn is written again while the database cannot be reached.
END_RETRY_SECS = 0.5
TIMELINE_MESSAGES = 60
THREAD_MESSAGES = 40  # replies of the thread read for a request (the budget keeps the newest)
TRANSCRIPT_ENTRIES = 200  # the member's own newest transcript rows read for its next turn
TRUNCATED_NOTE = "⚠️ 回答达到模型的长度上限（max_tokens），在此处被截断，并不完整。"
CUT_ARGUMENTS = (
    "arguments were not valid JSON: your answer was cut at the token limit (max_tokens) before "
    "they were complete; nothing was run. Make the call smaller (less content per call)."
)
STOPPED_CALL = usage_store.STOPPED  # the error code of a call abandoned by a person's stop


@dataclass(frozen=True, slots=True)
class TurnEnv:
    """What a turn runs with: the server's parts, its providers and tools, and whether the
    server is shutting down (a turn cancelled then is left ``running`` for the next start)."""

    core: Services
    registry: ProviderRegistry
    tools: Mapping[str, Tool]
    context_tokens: int
    closing: Callable[[], bool]
    work: WorkEnv | None = None  # the command runner and writer locks of the work tools


@dataclass(frozen=True, slots=True)
class TurnOutcome:
    """How a turn ended, as a value: its state and steps, the reply it posted (id and text),
    and whether the session should look for more work now."""

    state: str
    steps: int
    reply_id: int | None = None
    text: str | None = None
    look_again: bool = True


class Turn:
    """One turn over deliveries already claimed and taken in
    (:func:`room.actions.turns.begin_turn`). It touches no session: a session asks it to
    :meth:`stop` and reads :meth:`run`'s outcome."""

    def __init__(
        self,
        env: TurnEnv,
        member: Member,
        start: TurnStart,
        limits: Limits,
        memory: memory_mod.MemorySession | None = None,
    ):
        assert start.turn_id is not None
        self.env = env
        self.core = env.core
        self.member = member
        self.inbound = list(start.inbound)
        self.limits = limits
        self.turn_id = start.turn_id
        self.steps = 0
        self.unconsumed: list[tuple[int, str]] = [(i.delivery_id, "queue") for i in self.inbound]
        self.seen_calls: dict[str, int] = {}
        self.stop_requested = False
        self.acting_recorded = False  # the turn's row says it acted (see mark_acting)
        self._in_flight: asyncio.Future[Any] | None = None
        self.work = TurnWork(limits)
        self.tool_calls = 0
        # The session's records section and reminders (a turn on its own gets a fresh one).
        self.memory = memory if memory is not None else memory_mod.MemorySession()
        self.tools_ok: list[str] = []  # the tools this turn called successfully, by name
        self.can_record = False  # its member may write to memory (so a reminder makes sense)
        # What the member is writing, shown while each answer streams (room.agents.drafts).
        self.draft = DraftStream(env.core, member, start.turn_id)

    def stopped(self) -> bool:
        """Whether a person asked this turn to stop (read anew: it changes across awaits)."""
        return self.stop_requested

    def stop(self) -> None:
        """Ask the turn to stop at its next step boundary; an in-flight model call is
        abandoned and a running command killed (its whole process group, within a second)."""
        self.stop_requested = True
        self.work.cancel.set()
        if self._in_flight is not None and not self._in_flight.done():
            self._in_flight.cancel()

    async def run(self) -> TurnOutcome:
        try:
            return await self._run()
        except LeaseLostError:
            # Another node adopted the project's lease (this one was paused or cut off past
            # it) and settled this turn: nothing more may be written for it, not even its end
            # (the fence refuses it, room.store.leases).
            log.warning("turn %s ends: this node lost the project's lease", self.turn_id)
            self.draft.end()
            return TurnOutcome("lease_lost", self.steps, look_again=False)

    async def _run(self) -> TurnOutcome:
        try:
            return await self._loop(self.limits)
        except asyncio.CancelledError:
            self.draft.end()
            if self.env.closing():
                # Server shutdown: leave the turn 'running'; the next start reconciles it from
                # the session's record (re-run if it had no effect), as after a crash.
                raise
            if self.stop_requested:
                await self._end_surely(
                    "cancelled", Reason.TURN_STOPPED, unanswered="release_if_closed"
                )
                return TurnOutcome("cancelled", self.steps)
            raise
        except LeaseLostError:
            raise
        except Exception as exc:  # a bug must not leave deliveries stuck
            if isinstance(exc, DatabaseUnavailableError):  # its link went: no trace needed
                log.warning("turn %s failed: %s", self.turn_id, exc.message)
            else:
                log.exception("turn %s failed", self.turn_id)
            self.draft.end()
            await self._end_surely(
                "failed",
                Reason.TURN_FAILED,
                f"internal error: {type(exc).__name__}",
                notice=turn_actions.failure_notice(self.member.handle, "internal"),
            )
            return TurnOutcome("failed", self.steps)

    async def _end_surely(self, state: str, code: Reason, detail: str | None = None,
                          **kwargs: Any) -> None:  # fmt: skip
        """:meth:`_end`, written again every :data:`END_RETRY_SECS` while the database cannot
        be reached (this node's link to PostgreSQL is cut): a turn left 'running' would keep
        its member from every later turn, on every node, until this node restarted. On
        shutdown it is left to the next start's reconciliation, as after a crash."""
        while True:
            try:
                await self._end(state, code, detail, **kwargs)
                return
            except DatabaseUnavailableError:
                if self.env.closing():
                    raise
                await asyncio.sleep(END_RETRY_SECS)

    async def _loop(self, limits: Limits) -> TurnOutcome:
        toolbox = await toolbox_for(self.core, self.env.tools, self.member)
        self.can_record = bool(MEMORY_WRITE_TOOLS & toolbox.tools.keys())
        messages = await self._context()
        for step in range(1, limits.max_steps + 1):
            self.steps = step
            if self.stop_requested:
                await self._end("cancelled", Reason.TURN_STOPPED, unanswered="release_if_closed")
                return TurnOutcome("cancelled", step - 1)
            if step > 1 and await brake_holds(self.core, self.member):
                # A brake that holds this member (a token budget, a loop it is in) is a hard
                # stop: no further model request from this turn. It resumes from its
                # checkpoint when a person clears the brake.
                await self._end(
                    "braked",
                    Reason.LOOP_BRAKE,
                    "loop brake tripped",
                    unanswered="release",
                    interrupted=True,
                )
                return TurnOutcome("braked", step - 1, look_again=False)
            result = await self._call(messages, toolbox, limits)
            if result is None:
                return TurnOutcome("failed", step)
            if not result.tool_calls:
                return await self._finish(
                    result.text, truncated=result.stop_reason == STOP_MAX_TOKENS
                )
            self.draft.end()  # text before tool calls: its preview gives way to the tools
            self.tool_calls += len(result.tool_calls)
            if self.tool_calls > limits.tool_calls_per_turn:
                return await self._brake_work(
                    step,
                    "tool_calls",
                    {"calls": self.tool_calls, "cap": limits.tool_calls_per_turn},
                )
            messages.append(
                ChatMessage(role="assistant", content=result.text, tool_calls=result.tool_calls)
            )
            await turn_actions.checkpoint_tools(
                self.core,
                self.turn_id,
                [
                    tool_digest(ToolStep(c.name, arguments_text(c.arguments), "（未完成）"))
                    for c in result.tool_calls
                ],
            )
            results, effects = [], 0
            for call in result.tool_calls:
                key = hashlib.sha256(
                    f"{call.name}{json.dumps(call.arguments, sort_keys=True)}".encode()
                ).hexdigest()
                self.seen_calls[key] = self.seen_calls.get(key, 0) + 1
                if self.seen_calls[key] >= REPEAT_LIMIT:
                    await self._end(
                        "braked",
                        Reason.LOOP_BRAKE,
                        "repeating the same action",
                        unanswered="release",
                        brake=(
                            "repetition",
                            {
                                "handle": self.member.handle,
                                "what": f"{call.name} ×{self.seen_calls[key]}",
                            },
                        ),
                    )
                    return TurnOutcome("braked", step, look_again=False)
                tool_ctx = ToolContext(
                    self.core, self.member, self.turn_id, call.id, {}, self.env.work, self.work
                )
                if self.stopped():
                    # A person stopped the work: the rest of the model's calls are not run (each
                    # still gets its result, as the protocol wants one per call).
                    outcome = not_run_after_stop()
                elif call.raw_arguments and not call.arguments:
                    outcome = bad_arguments(
                        CUT_ARGUMENTS
                        if result.stop_reason == STOP_MAX_TOKENS
                        else "arguments were not valid JSON"
                    )
                else:
                    tool = toolbox.tools.get(call.name)
                    if tool is not None and tool.side_effect and not self.acting_recorded:
                        await turn_actions.mark_acting(self.core, self.turn_id)
                        self.acting_recorded = True
                    outcome = await toolbox.run(tool_ctx, call.name, call.arguments)
                results.append(
                    turn_actions.ToolResult(call.id, outcome.text, outcome.ok, outcome.detail)
                )
                effects += int(outcome.acted)
                if outcome.ok:  # ran, and did not report a failure
                    self.tools_ok.append(call.name)
                messages.append(
                    ChatMessage(
                        role="tool", content=outcome.text, tool_call_id=call.id, name=call.name
                    )
                )
            await turn_actions.record_tool_step(
                self.core,
                self.member.project_id,
                self.member.id,
                self.turn_id,
                step,
                result.text,
                [{"id": c.id, "name": c.name, "arguments": c.arguments} for c in result.tool_calls],
                results,
                effects,
            )
            if self.work.command_secs >= limits.command_secs_per_turn and not self.stop_requested:
                return await self._brake_work(
                    step,
                    "command_time",
                    {"secs": round(self.work.command_secs), "cap": limits.command_secs_per_turn},
                )
            # Nothing new is taken in that no request would carry (or after a stop: what arrives
            # then waits for the next turn instead of being failed with this one).
            if step < limits.max_steps and not self.stopped():
                steer = await self._steer()
                if steer is not None:
                    messages.append(steer)
        await self._end(
            "step_limit",
            Reason.LOOP_BRAKE,
            "step limit reached without a final answer",
            unanswered="release",
            brake=("step_limit", {"handle": self.member.handle, "max_steps": limits.max_steps}),
        )
        return TurnOutcome("step_limit", self.steps, look_again=False)

    async def _brake_work(self, step: int, reason: str, detail: dict[str, Any]) -> TurnOutcome:
        """A work limit of the turn (tool calls, command seconds) stops it like the step limit."""
        await self._end(
            "braked",
            Reason.LOOP_BRAKE,
            f"work limit reached: {reason}",
            unanswered="release",
            brake=(reason, {"handle": self.member.handle, **detail}),
        )
        return TurnOutcome("braked", step, look_again=False)

    async def _context(self) -> list[ChatMessage]:
        project_id = self.member.project_id
        first_seq = self.inbound[0].seq if self.inbound else None
        member_id, turn_id = self.member.id, self.turn_id

        def read(conn: Any) -> Any:
            project = projects_store.get(conn, project_id)
            frames, more = messages_store.history(conn, project_id, first_seq, TIMELINE_MESSAGES)
            history = [json.loads(f) for f in frames]
            earlier = (
                messages_store.count_before(conn, project_id, history[0]["seq"])
                if more and history
                else 0
            )
            own = turns_store.transcript(conn, member_id, TRANSCRIPT_ENTRIES)
            checkpoint = checkpoints_store.latest(conn, member_id)
            if checkpoint is not None and checkpoint["turn_id"] == turn_id:
                checkpoint = checkpoints_store.latest_before_turn(conn, member_id, turn_id)
            return project, history, earlier, own, checkpoint, thread_of(conn)

        def thread_of(conn: Any) -> tuple[list[dict[str, Any]], int]:
            """The thread the message to answer is a reply in: its root and the replies before
            the new messages (oldest first), and whether older replies were not read."""
            if last_id is None:
                return [], 0
            root_id = threads_store.thread_of(conn, last_id)
            root = messages_store.get_row(conn, root_id) if root_id is not None else None
            if root_id is None or root is None or (first_id is not None and root_id >= first_id):
                return [], 0  # (a root among the new messages is read there)
            frames, more = threads_store.page(conn, root_id, first_id, THREAD_MESSAGES)
            lines = [json.loads(root["frame"]), *(json.loads(f) for f in frames)]
            older = threads_store.count_before(conn, root_id, first_id) - len(frames) if more else 0
            return lines, older

        first_id = self.inbound[0].message_id if self.inbound else None
        last_id = self.inbound[-1].message_id if self.inbound else None
        project, history, earlier, own, checkpoint, (thread, thread_more) = await self.core.db.read(
            read
        )
        paths = await self._attachment_paths(
            [_files_of(m) for m in history + thread] + [list(i.attachments) for i in self.inbound]
        )
        roster = await self.core.rosters.get(project_id)
        people = [ctx_mod.person_of(m) for m in roster.members.values()]
        me = ctx_mod.person_of(self.member)
        ci = ctx_mod.ContextInput(
            project_name=project.name if project else "",
            goal=project.goal if project else "",
            me=me,
            charter=preset_for(self.member.role).charter,
            rules=ROOM_RULES,
            people=people,
            timeline=[
                ctx_mod.Line(
                    m["seq"],
                    m["author_id"],
                    with_attachments(m["body"], _files_of(m), paths),
                    m["kind"],
                    (m.get("meta") or {}).get("for_agents", ""),
                )
                for m in history
                if not m["deleted"] and m["kind"] != "tool"
            ],
            inputs=[
                ctx_mod.Line(
                    i.seq,
                    i.author_id,
                    with_attachments(i.body, i.attachments, paths),
                    for_agents=i.for_agents,
                )
                for i in self.inbound
            ],
            budget_tokens=self.env.context_tokens,
            records=await self._records(),
            transcript=turn_records(own, skip_turn=self.turn_id),
            checkpoint=ctx_mod.checkpoint_from_row(checkpoint) if checkpoint else None,
            earlier_omitted=earlier,
            thread=[
                ctx_mod.Line(
                    m["seq"],
                    m["author_id"],
                    with_attachments(m["body"], _files_of(m), paths),
                    m["kind"],
                    (m.get("meta") or {}).get("for_agents", ""),
                )
                for m in thread
                if not m["deleted"]
            ],
            thread_omitted=thread_more,
        )
        return ctx_mod.build_messages(ci)

    async def _attachment_paths(self, lists: list[list[dict[str, Any]]]) -> dict[int, str]:
        """Copy the files of the messages this turn reads into the member's working folder
        (``.room/attachments/``); attachment id → the path its file tools open."""
        items = {int(a["id"]): a for files in lists for a in files}
        if not items:
            return {}
        try:
            where = await work_dir(self.core, self.member)
        except RoomError:
            return {}
        return await attachment_actions.copy_for_agent(self.core, where.path, list(items.values()))

    async def _records(self) -> str:
        """The project records of this turn's context: the session's section, kept as built,
        and the notices it earned since (room.agents.memory)."""
        try:
            return await memory_mod.records_text(
                self.core, self.member, self.memory, time.time(), can_record=self.can_record
            )
        except Exception:  # a fault in reading memory must not silence the agent; it is said
            log.exception("turn %s: project records could not be read", self.turn_id)
            return memory_mod.UNREADABLE

    async def _call(
        self, messages: list[ChatMessage], toolbox: Toolbox, limits: Limits
    ) -> ChatResult | None:
        route = await route_for(self.core, self.member)
        carried = list(self.unconsumed)
        call = turn_actions.ModelCall(
            project_id=self.member.project_id,
            member_id=self.member.id,
            turn_id=self.turn_id,
            model_id=route.model_id,
            route_source=route.source.value,
            provider=route.provider,
            model_reported=None,
            latency_ms=None,
        )
        meter = self.draft.watch(CallMeter())
        try:
            provider = self.env.registry.get(route.provider)
            request = ChatRequest(
                model=route.model, messages=tuple(messages), tools=toolbox.specs()
            )
            call_task: asyncio.Future[ChatResult] = asyncio.ensure_future(
                provider.chat(request, meter)
            )
            self._in_flight = call_task
            result = await call_task
        except asyncio.CancelledError:
            if self.stop_requested and not self.env.closing() and meter.attempts:
                # A person stopped the turn while the model answered: the request was sent
                # and may have cost tokens; it is recorded with what the provider reported.
                call.ok, call.error_code = False, STOPPED_CALL
                _metered(call, meter)
                await turn_actions.record_model_call(self.core, call, limits.token_budget)
            raise
        except (ProviderError, RoomError) as exc:
            self.draft.end()
            call.ok, call.error_code = False, exc.code
            _metered(call, meter)
            await turn_actions.record_model_call(self.core, call, limits.token_budget)
            await self._end(
                "failed",
                Reason.PROVIDER_ERROR,
                f"{exc.code}: {exc.message}"[:300],
                notice=turn_actions.failure_notice(self.member.handle, exc.code, route.model_id),
            )
            return None
        finally:
            self._in_flight = None
        call.model_reported = result.model
        call.latency_ms = result.latency_ms
        call.input_tokens = result.usage.input_tokens
        call.output_tokens = result.usage.output_tokens
        call.usage_reported = result.usage.reported
        call.attempts = result.attempts
        call.consumed = carried
        self.unconsumed = [u for u in self.unconsumed if u not in carried]
        # A budget spent by this request trips the brake; the answer already came back and is
        # used, and the next step boundary sees the brake and stops.
        await turn_actions.record_model_call(self.core, call, limits.token_budget)
        return result

    async def _steer(self) -> ChatMessage | None:
        fresh = await turn_actions.steer(self.core, self.member.id, self.turn_id)
        if not fresh:
            return None
        self.unconsumed += [(i.delivery_id, "steer") for i in fresh]
        roster = await self.core.rosters.get(self.member.project_id)
        people = [ctx_mod.person_of(m) for m in roster.members.values()]
        paths = await self._attachment_paths([list(i.attachments) for i in fresh])
        lines = [
            ctx_mod.Line(
                i.seq,
                i.author_id,
                with_attachments(i.body, i.attachments, paths),
                for_agents=i.for_agents,
            )
            for i in fresh
        ]
        self.inbound += fresh
        return ctx_mod.steer_message(lines, people, ctx_mod.person_of(self.member))

    async def _finish(self, text: str, *, truncated: bool = False) -> TurnOutcome:
        text = text.strip() or "（无内容）"
        trigger = self.inbound[-1].message_id if self.inbound else None
        reply_id = None
        meta: dict[str, Any] = {"turn_id": self.turn_id}
        body = text
        if truncated:
            # Cut by the provider's token limit: said in the message itself and in its meta,
            # so neither people nor the agents reading it later take it for a whole answer.
            body = f"{text}\n\n{TRUNCATED_NOTE}"
            meta["truncated"] = STOP_MAX_TOKENS
        # Forgotten before it is posted: a client subscribing from here on replays the answer
        # and is not handed its draft as well.
        self.draft.forget()
        try:
            ack = await message_actions.send_message(
                self.core,
                self.member,
                client_txn_id=turn_actions.final_txn(self.turn_id),
                body=body,
                reply_to=trigger,
                as_plain_text=True,  # a model cannot be asked again here; unresolved @ wake nobody
                rate_limited=False,
                meta=meta,
            )
            reply_id = ack.message_id
        except RoomError as exc:
            # The project stopped (or the member left) while the model was answering: the
            # answer cannot be posted, so the turn did not complete.
            log.info("turn %s could not post its answer: %s", self.turn_id, exc.message)
            self.draft.end()
            await self._end("cancelled", Reason.ANSWER_NOT_POSTED, f"answer not posted: {exc.code}")
            return TurnOutcome("cancelled", self.steps)
        self.draft.end(reply_id)
        await turn_actions.complete_turn(
            self.core, self.member.id, self.turn_id, self.steps, reply_id, text
        )
        repeated = await repeats_itself(self.core, self.member, text, reply_id)
        if repeated and reply_id is not None:
            await brake_actions.trip_repetition(
                self.core,
                self.member.project_id,
                self.member.id,
                {"handle": self.member.handle, "what": "相同的回复", "same_reply": True},
                [reply_id, *repeated],
            )
        return TurnOutcome("completed", self.steps, reply_id, body)

    async def _end(
        self,
        state: str,
        code: Reason,
        detail: str | None = None,
        *,
        notice: Notice | None = None,
        brake: tuple[str, dict[str, Any]] | None = None,
        unanswered: str = "fail",
        interrupted: bool = False,
    ) -> None:
        await turn_actions.end_turn(
            self.core,
            self.member.project_id,
            self.member.id,
            self.turn_id,
            state=state,
            steps=self.steps,
            code=code,
            detail=detail,
            notice=notice,
            brake=brake,
            unanswered=unanswered,
            interrupted=interrupted,
        )


async def toolbox_for(core: Services, tools: Mapping[str, Tool], member: Member) -> Toolbox:
    """The member's tools now: its preset's, less the write tools when the project's owner
    marked its role read-only."""
    project_id = member.project_id
    stored = await core.db.read(lambda conn: projects_store.settings(conn, project_id))
    return Toolbox(tools, member.role, read_only=member.role in read_only_roles(stored))


def read_only_roles(stored: Mapping[str, Any]) -> frozenset[str]:
    roles = stored.get("read_only_roles")
    return (
        frozenset(r for r in roles if isinstance(r, str))
        if isinstance(roles, list)
        else frozenset()
    )


def _metered(call: turn_actions.ModelCall, meter: CallMeter) -> None:
    """What a call that gave no answer had done: its attempts and the usage reported so far."""
    call.attempts = meter.attempts
    if meter.usage is not None:
        call.input_tokens = meter.usage.input_tokens
        call.output_tokens = meter.usage.output_tokens
    call.usage_reported = meter.usage is not None


async def brake_holds(core: Services, member: Member) -> bool:
    """Whether the project's brake holds ``member`` (the whole project, or a loop it is in)."""
    return bool(
        await core.db.read(
            lambda conn: brakes_store.holds_member(conn, member.project_id, member.id)
        )
    )


async def route_for(core: Services, member: Member) -> ResolvedRoute:
    """Resolved at every request, so a change applies from the next one."""
    config = await core.db.read(lambda conn: routes_store.settings(conn, member.project_id))
    return resolve_config(config, member)


async def repeats_itself(
    core: Services, member: Member, text: str, reply_id: int | None
) -> list[int]:
    """The member's last three messages its final answer repeats (their ids; empty when none
    does). A short acknowledgement ("收到。", "ok") is not a repetition
    (:func:`room.rules.brakes.is_acknowledgement`): a team says it again and again."""
    if not text.strip() or brake_rules.is_acknowledgement(text):
        return []
    project_id = member.project_id

    def read(conn: Any) -> list[tuple[int, str]]:
        return [
            (int(r[0]), str(r[1]))
            for r in conn.execute(
                "SELECT id, body FROM messages WHERE project_id = :p AND author_id = :m"
                " AND id != :r AND deleted_at IS NULL AND kind = 'chat'"
                " ORDER BY seq DESC LIMIT 3",
                {"p": project_id, "m": member.id, "r": reply_id or 0},
            )
        ]

    recent = await core.db.read(read)
    return [i for i, body in recent if brake_rules.same_answer(body, text)]


def resolve_config(
    config: Mapping[tuple[str, str], Mapping[str, Any]], member: Member
) -> ResolvedRoute:
    def value(scope: str, target: str = "") -> str | None:
        found = config.get((scope, target))
        return str(found["value"]) if found else None

    pool_raw = value("pool")
    pool = None
    if pool_raw:
        data = json.loads(pool_raw)
        pool = Pool(tuple(data.get("models", ())), bool(data.get("enabled", True)))
    pick_raw = config.get(("pool_pick", str(member.id)))
    pick = PoolPick(str(pick_raw["value"]), str(pick_raw.get("reason") or "")) if pick_raw else None
    return resolve_route(
        project_default=value("project"),
        role_default=value("role", member.role),
        member_route=value("member", str(member.id)),
        pool=pool,
        pool_pick=pick,
    )


def _files_of(message: Mapping[str, Any]) -> list[dict[str, Any]]:
    files: list[dict[str, Any]] = (message.get("meta") or {}).get("attachments") or []
    return files
