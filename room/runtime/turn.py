"""One turn of an agent session.

take the delivered messages → build the context → call the member's route → run the tool calls
→ repeat until a final answer or the step limit → post the final answer as the member's
message, replying to what triggered it. Deliveries become ``consumed`` when a model answer to a
request that carried them comes back (mode ``queue`` for the turn's inputs, ``steer`` for
messages inserted at a step boundary). Stops are cooperative: checked at every step boundary, and
an in-flight model call is abandoned.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from room.actions import messages as message_actions
from room.actions import runtime as runtime_actions
from room.errors import ProviderError, RoomError
from room.models import Member
from room.providers import ChatMessage, ChatRequest, ChatResult
from room.runtime import context as ctx_mod
from room.runtime.presets import ROOM_RULES, preset_for
from room.runtime.tools import Toolbox, ToolContext
from room.store import messages as messages_store
from room.store import projects as projects_store
from room.store.runtime import Inbound

if TYPE_CHECKING:
    from room.runtime.runtime import Runtime, Session

log = logging.getLogger(__name__)

STOPPED = "stopped: a person stopped this work, or the project stopped"
REPEAT_LIMIT = 3  # the same tool call this many times in one turn trips the brake
TIMELINE_MESSAGES = 60


@dataclass(slots=True)
class TurnOutcome:
    state: str
    steps: int


class Turn:
    def __init__(self, runtime: Runtime, session: Session, member: Member, inbound: list[Inbound]):
        self.rt = runtime
        self.core = runtime.core
        self.session = session
        self.member = member
        self.inbound = inbound
        self.turn_id = 0
        self.steps = 0
        self.unconsumed: list[tuple[int, str]] = [(i.delivery_id, "queue") for i in inbound]
        self.seen_calls: dict[str, int] = {}

    async def run(self) -> TurnOutcome:
        project_id = self.member.project_id
        ids = [i.delivery_id for i in self.inbound]
        try:
            limits = await self.rt.limits(project_id)
            start = await runtime_actions.start_turn(
                self.core, project_id, self.member.id, self.inbound, limits.agent_turn_cap
            )
        except Exception:
            # Claimed but no turn opened: give them back rather than leave them 'delivered'.
            log.exception("turn of member %s could not start", self.member.id)
            await runtime_actions.release_claimed(
                self.core, self.member.id, ids, "the turn could not start"
            )
            return TurnOutcome("failed", 0)
        if start.turn_id is None:
            return TurnOutcome("braked", 0)
        self.turn_id = start.turn_id
        self.session.turn_id = self.turn_id
        try:
            return await self._loop(limits)
        except asyncio.CancelledError:
            if self.rt.closing:
                # Server shutdown: leave the turn 'running'; the next start reconciles it from
                # the session's record (re-run if it had no effect), as after a crash.
                raise
            if self.session.stop_requested:
                await self._end("cancelled", STOPPED, notice=None, unanswered="release_if_closed")
                return TurnOutcome("cancelled", self.steps)
            raise
        except Exception as exc:  # a bug must not leave deliveries stuck
            log.exception("turn %s failed", self.turn_id)
            await self._end(
                "failed",
                f"internal error: {type(exc).__name__}",
                notice=f"⚠️ @{self.member.handle} 的这一轮出错了，消息未处理。",
            )
            return TurnOutcome("failed", self.steps)
        finally:
            self.session.turn_id = None

    async def _loop(self, limits: Any) -> TurnOutcome:
        toolbox = Toolbox(self.rt.tools, self.member.role)
        messages = await self._context()
        for step in range(1, limits.max_steps + 1):
            self.steps = step
            if self.session.stop_requested:
                await self._end("cancelled", STOPPED, notice=None, unanswered="release_if_closed")
                return TurnOutcome("cancelled", step - 1)
            if step > 1 and await self.rt.brake_tripped(self.member.project_id):
                # The brake (a token budget, another agent's loop) is a hard stop: no further
                # model request from this turn.
                await self._end("braked", "loop brake tripped", notice=None, unanswered="release")
                return TurnOutcome("braked", step - 1)
            result = await self._call(messages, toolbox, limits)
            if result is None:
                return TurnOutcome("failed", step)
            if not result.tool_calls:
                return await self._finish(result.text)
            messages.append(
                ChatMessage(role="assistant", content=result.text, tool_calls=result.tool_calls)
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
                        "repeating the same action",
                        notice=None,
                        unanswered="release",
                        brake=(
                            "repetition",
                            {
                                "handle": self.member.handle,
                                "what": f"{call.name} ×{self.seen_calls[key]}",
                            },
                        ),
                    )
                    return TurnOutcome("braked", step)
                tool_ctx = ToolContext(self.core, self.member, self.turn_id, call.id, {})
                text, acted = await toolbox.run(tool_ctx, call.name, call.arguments)
                if call.raw_arguments and not call.arguments:
                    text = json.dumps({"ok": False, "error": "arguments were not valid JSON"})
                results.append((call.id, text))
                effects += int(acted)
                messages.append(
                    ChatMessage(role="tool", content=text, tool_call_id=call.id, name=call.name)
                )
            await runtime_actions.record_tool_step(
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
            if step < limits.max_steps:  # nothing new is taken in that no request would carry
                steer = await self._steer()
                if steer is not None:
                    messages.append(steer)
        await self._end(
            "step_limit",
            "step limit reached without a final answer",
            notice=None,
            unanswered="release",
            brake=("step_limit", {"handle": self.member.handle, "max_steps": limits.max_steps}),
        )
        return TurnOutcome("step_limit", self.steps)

    async def _context(self) -> list[ChatMessage]:
        project_id = self.member.project_id
        first_seq = self.inbound[0].seq if self.inbound else None

        def read(conn: Any) -> Any:
            project = projects_store.get(conn, project_id)
            frames, _ = messages_store.history(conn, project_id, first_seq, TIMELINE_MESSAGES)
            return project, [json.loads(f) for f in frames]

        project, history = await self.core.db.read(read)
        roster = await self.core.rosters.get(project_id)
        people = [_person(m) for m in roster.members.values()]
        me = _person(self.member)
        ci = ctx_mod.ContextInput(
            project_name=project.name if project else "",
            goal=project.goal if project else "",
            me=me,
            charter=preset_for(self.member.role).charter,
            rules=ROOM_RULES,
            people=people,
            timeline=[
                ctx_mod.Line(m["seq"], m["author_id"], m["body"], m["kind"])
                for m in history
                if not m["deleted"] and m["kind"] != "tool"
            ],
            inputs=[ctx_mod.Line(i.seq, i.author_id, i.body) for i in self.inbound],
            budget_tokens=self.rt.settings.context_tokens,
        )
        return ctx_mod.build_messages(ci)

    async def _call(
        self, messages: list[ChatMessage], toolbox: Toolbox, limits: Any
    ) -> ChatResult | None:
        route = await self.rt.route_for(self.member)
        carried = list(self.unconsumed)
        call = runtime_actions.ModelCall(
            project_id=self.member.project_id,
            member_id=self.member.id,
            turn_id=self.turn_id,
            model_id=route.model_id,
            route_source=route.source.value,
            provider=route.provider,
            model_reported=None,
            latency_ms=None,
        )
        try:
            provider = self.rt.registry.get(route.provider)
            request = ChatRequest(
                model=route.model, messages=tuple(messages), tools=toolbox.specs()
            )
            call_task: asyncio.Future[ChatResult] = asyncio.ensure_future(provider.chat(request))
            self.session.call_task = call_task
            result = await call_task
        except (ProviderError, RoomError) as exc:
            call.ok, call.error_code = False, exc.code
            await runtime_actions.record_model_call(self.core, call, None)
            reason = f"{exc.code}: {exc.message}"[:300]
            await self._end(
                "failed",
                reason,
                notice=f"⚠️ @{self.member.handle} 调用模型 {route.model_id} 失败（{exc.code}），"
                "消息未处理。",
            )
            return None
        finally:
            self.session.call_task = None
        call.model_reported = result.model
        call.latency_ms = result.latency_ms
        call.input_tokens = result.usage.input_tokens
        call.output_tokens = result.usage.output_tokens
        call.usage_reported = getattr(result.usage, "reported", True)
        call.consumed = carried
        self.unconsumed = [u for u in self.unconsumed if u not in carried]
        # A budget spent by this request trips the brake; the answer already came back and is
        # used, and the next step boundary sees the brake and stops.
        await runtime_actions.record_model_call(self.core, call, limits.token_budget)
        return result

    async def _steer(self) -> ChatMessage | None:
        fresh = await runtime_actions.claim(self.core, self.member.id)
        if not fresh:
            return None
        await runtime_actions.take_steer(self.core, self.member.id, self.turn_id, fresh)
        self.unconsumed += [(i.delivery_id, "steer") for i in fresh]
        roster = await self.core.rosters.get(self.member.project_id)
        people = [_person(m) for m in roster.members.values()]
        lines = [ctx_mod.Line(i.seq, i.author_id, i.body) for i in fresh]
        self.inbound += fresh
        return ctx_mod.steer_message(lines, people, _person(self.member))

    async def _finish(self, text: str) -> TurnOutcome:
        text = text.strip() or "（无内容）"
        trigger = self.inbound[-1].message_id if self.inbound else None
        reply_id = None
        try:
            ack = await message_actions.send_message(
                self.core,
                self.member,
                client_txn_id=runtime_actions.final_txn(self.turn_id),
                body=text,
                reply_to=trigger,
                as_plain_text=True,  # a model cannot be asked again here; unresolved @ wake nobody
                rate_limited=False,
                meta={"turn_id": self.turn_id},
            )
            reply_id = ack.message_id
        except RoomError as exc:
            # The project stopped (or the member left) while the model was answering: the
            # answer cannot be posted, so the turn did not complete.
            log.info("turn %s could not post its answer: %s", self.turn_id, exc.message)
            await self._end("cancelled", f"answer not posted: {exc.code}", notice=None)
            return TurnOutcome("cancelled", self.steps)
        await runtime_actions.complete_turn(
            self.core, self.member.id, self.turn_id, self.steps, reply_id, text
        )
        if await self.rt.repeats_itself(self.member, text, reply_id):
            await runtime_actions.trip_brake(
                self.core,
                self.member.project_id,
                "repetition",
                {"handle": self.member.handle, "what": "相同的回复"},
            )
        return TurnOutcome("completed", self.steps)

    async def _end(
        self,
        state: str,
        reason: str,
        *,
        notice: str | None,
        brake: tuple[str, dict[str, Any]] | None = None,
        unanswered: str = "fail",
    ) -> None:
        await runtime_actions.end_turn(
            self.core,
            self.member.project_id,
            self.member.id,
            self.turn_id,
            state=state,
            steps=self.steps,
            reason=reason,
            notice=notice,
            brake=brake,
            unanswered=unanswered,
        )


def _person(member: Member) -> ctx_mod.Person:
    return ctx_mod.Person(
        member.id, member.handle, member.display_name, member.role, member.kind, member.status
    )
