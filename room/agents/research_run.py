"""The research runner: one dedicated session per participating member, run under the research's
own lock (docs/research.md).

It reuses the agents' provider calls (:class:`~room.providers.ProviderRegistry`, the member's
resolved route, a :class:`~room.providers.CallMeter` per call) and tool machinery
(:class:`~room.agents.tools.Toolbox` over exactly :data:`SESSION_TOOLS`). The sessions take
turns, one model step at a time, so a budget is never overshot by more than one request: before
every step the pre-step gate (:func:`room.actions.research.pre_step`) re-reads the run's state,
the project, the approval and the spend; any failure stops the run with a notice saying which.
Every request is recorded with the research id (``model_requests.research_id``) and counted in
the run's spend; every transcript row carries the research id and stays out of the member's
ordinary sessions. A server shutdown leaves the run ``running``; the next start reconciles it
to ``paused_reconcile``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from room.actions import research as research_actions
from room.agents.leasing import Leasing
from room.agents.research_tools import SESSION_TOOLS
from room.agents.tools import Toolbox, ToolContext, bad_arguments
from room.agents.turn import route_for
from room.errors import LeaseLostError, ProviderError, RoomError
from room.providers import (
    CallMeter,
    ChatMessage,
    ChatRequest,
    ChatResult,
    ProviderRegistry,
    ToolCall,
)
from room.rules.entities import Member
from room.rules.leases import Home
from room.rules.research import READABLE_REFS, GateFailure, ResearchState
from room.services import Services
from room.store import members as members_store
from room.store import projects as projects_store
from room.store import research as research_store
from room.store import turns as turns_store
from room.store import usage as usage_store
from room.store.leases import FENCE, Fence

log = logging.getLogger(__name__)

IDENTITY = "你是 @{handle}（{display_name}），项目「{project}」的研究成员（角色 {role}）。\n"
CHARTER = (
    "你在一个受监督的深入研究会话里（研究 #{id}）。问题：{question}\n"
    "你只能读这些工作区路径：{paths}{roots}。你只有研究工具和只读文件工具，没有 shell，也不能在群里"
    "发消息。用 room_research_hypothesis / experiment / finding 记录过程（发现要附来源），"
    "最后用 room_research_report 提交报告（附来源）。预算：{budget}，用完即停。{metadata}"
)


def charter_of(research_id: int, stored: dict[str, Any], member: Member, project: str) -> str:
    """The session's system message: who the agent is (as an ordinary turn's first line says),
    the question, what it may read, the budget."""
    p = research_actions.view_of(stored).proposal
    roots = "".join(f"；参考 #{r.id} 的{'目录' if r.kind == 'dir' else '文件'}（绝对路径）：{r.real}"
                    for r in p.read_roots)  # fmt: skip
    meta = [f"{r.target}" + (f"（{r.note}）" if r.note else "") for r in p.references
            if r.kind not in READABLE_REFS]  # fmt: skip
    metadata = (f"\n这些参考只是元数据，不会被读取或抓取（没有网络搜索）：{'、'.join(meta)}"
                if meta else "")  # fmt: skip
    identity = IDENTITY.format(handle=member.handle, display_name=member.display_name,
                               project=project, role=member.role)  # fmt: skip
    return identity + CHARTER.format(
        id=research_id, question=stored["question"], paths="、".join(p.read_paths) or "（无）",
        roots=roots, budget=json.dumps(stored["budget"], ensure_ascii=False), metadata=metadata,
    )  # fmt: skip


@dataclass(slots=True)
class _Session:
    member: Member
    messages: list[ChatMessage]
    done: bool = False
    last_text: str = ""


@dataclass(slots=True)
class _Run:
    research_id: int
    project_id: int
    task: asyncio.Task[None] | None = None
    stopping: bool = False
    forward: bool = True  # tell the node the project's work runs on, if another
    in_flight: asyncio.Future[Any] | None = field(default=None)

    def stopped(self) -> bool:
        """Whether a person (or the project's stop) asked the run to stop (read anew)."""
        return self.stopping


def replay(entries: list[dict[str, Any]]) -> list[ChatMessage]:
    """A resumed session's messages from its transcript: each assistant step with the results of
    its tool calls; a step a stop cut before all its results were recorded is left out whole."""
    out: list[ChatMessage] = []
    i = 0
    while i < len(entries):
        entry = entries[i]
        i += 1
        if entry["role"] != "assistant":
            continue
        calls = tuple(
            ToolCall(str(c["id"]), str(c["name"]), dict(c.get("arguments") or {}))
            for c in entry["tool_calls"]
        )
        results = []
        while i < len(entries) and entries[i]["role"] == "tool":
            results.append(entries[i])
            i += 1
        if {c.id for c in calls} != {r["tool_call_id"] for r in results}:
            continue
        out.append(ChatMessage("assistant", entry["content"], tool_calls=calls))
        out += [ChatMessage("tool", r["content"], tool_call_id=r["tool_call_id"], name=r["name"])
                for r in results]  # fmt: skip
    return out


def _gate(research_id: int, now: float, conn: Any) -> tuple[GateFailure | None, bool]:
    """The pre-step gate, and whether the run waited (its span closed: wait_over reopens it)."""
    run = research_store.get(conn, research_id)
    waited = run is not None and run.get("wait_reason") is not None
    return research_actions.pre_step(conn, research_id, now), waited


class ResearchRunner:
    """Runs started research (``core.research``). ``start`` is idempotent per run."""

    def __init__(
        self,
        core: Services,
        registry: ProviderRegistry,
        *,
        closing: Callable[[], bool],
        leasing: Leasing | None = None,
    ) -> None:
        self.core = core
        self.registry = registry
        self.closing = closing
        self.runs: dict[int, _Run] = {}
        self.locks: dict[int, asyncio.Lock] = {}
        self.toolbox = Toolbox.exactly(SESSION_TOOLS)
        # A cluster (PostgreSQL): runs go where the project's agent work runs, under its lease
        # (room.agents.leasing), whose loop renews it while a run runs here.
        self.leasing = leasing
        if leasing is not None:
            leasing.research = self

    def start(self, research_id: int, *, forward: bool = True) -> None:
        """Run it (idempotent per run). ``forward``: in a cluster, tell the node the project's
        work runs on when that is another (False when this start came from the bus or the
        leases' sweep: a hint is never passed on, so no two nodes tell each other forever)."""
        if research_id in self.runs:
            return
        run = _Run(research_id, 0, forward=forward)
        self.runs[research_id] = run
        run.task = asyncio.create_task(self._guarded(run))

    async def stop(self, research_id: int) -> None:
        run = self.runs.get(research_id)
        if (run is None or run.task is None) and self.core.relay is not None:
            self.core.relay.stop_research_elsewhere(research_id)  # it may run on another node
        await self.stop_here(research_id)

    async def stop_here(self, research_id: int) -> None:
        """Stop the run if it runs on this node (a person paused or stopped it)."""
        run = self.runs.get(research_id)
        if run is None or run.task is None:
            return
        run.stopping = True
        if run.in_flight is not None and not run.in_flight.done():
            run.in_flight.cancel()
        try:
            await asyncio.wait_for(asyncio.shield(run.task), timeout=5)
        except (TimeoutError, asyncio.CancelledError):
            run.task.cancel()

    async def stop_project(self, project_id: int) -> None:
        for rid in [r.research_id for r in self.runs.values() if r.project_id == project_id]:
            await self.stop(rid)

    def running(self) -> list[int]:
        return sorted(self.runs)

    def projects(self) -> list[int]:
        """The projects with a run running here (their leases are renewed while it runs)."""
        return sorted({r.project_id for r in self.runs.values() if r.project_id})

    def stop_lost(self, project_id: int) -> None:
        """The project's lease was lost: its runs here stop (their writes are refused by the
        fence; the node that adopted the lease settled them)."""
        for run in self.runs.values():
            if run.project_id == project_id:
                run.stopping = True
                if run.in_flight is not None and not run.in_flight.done():
                    run.in_flight.cancel()

    async def close(self) -> None:
        for run in list(self.runs.values()):
            if run.task is not None:
                run.task.cancel()
        for run in list(self.runs.values()):
            if run.task is not None:
                try:
                    await run.task
                except BaseException:
                    pass

    async def _guarded(self, run: _Run) -> None:
        try:
            await self._run(run)
        except asyncio.CancelledError:
            if not self.closing() and not run.stopping:
                raise
        except LeaseLostError:
            self._lost(run)
        except Exception:
            log.exception("research %s failed", run.research_id)
            try:
                await self._halt(run, GateFailure.PROVIDER_ERROR)
            except LeaseLostError:
                self._lost(run)
        finally:
            self.runs.pop(run.research_id, None)

    def _lost(self, run: _Run) -> None:
        # Another node adopted the project's lease (and settled the run): nothing more of it
        # is written from here.
        log.warning("research %s: this node lost the project's lease; its writes were refused",
                    run.research_id)  # fmt: skip
        if self.leasing is not None:
            self.leasing.forget(run.project_id)

    async def _fence(self, run: _Run) -> bool:
        """A cluster: the run's next writes carry the project's lease (room.store.leases.FENCE),
        taken, renewed or adopted as a turn's is. False when this node may not run it now: the
        work runs on another node (told on the bus), or another node holds the lease (the
        leases' sweep starts the run again where it belongs)."""
        leasing = self.leasing
        if leasing is None:
            return True
        FENCE.set(None)  # the lease's own writes are not the run's
        where = await leasing.where(run.project_id)
        if where is not Home.HERE:
            if where is Home.ELSEWHERE and run.forward and self.core.relay is not None:
                self.core.relay.start_research_elsewhere(run.research_id)
            elif where is Home.OFFLINE:
                # It cannot step until its home is back: its card says so, and its wall-clock
                # budget stops counting (the home's runner takes it up again: wait_over).
                rid = run.research_id
                await self.core.db.write(
                    lambda conn, tx: research_actions.wait_for_home(conn, tx, rid),
                    locks=(run.project_id,),
                )
            return False
        fence = await leasing.fence(run.project_id)
        if not isinstance(fence, Fence):
            return False
        FENCE.set(fence)
        return True

    async def _halt(self, run: _Run, failure: GateFailure) -> None:
        await self.core.db.write(
            lambda conn, tx: research_actions.halt(conn, tx, run.research_id, failure),
            locks=(run.project_id,),
        )

    async def _run(self, run: _Run) -> None:
        rid = run.research_id

        def read(conn: Any) -> tuple[dict[str, Any], list[Member], str]:
            stored = research_actions.get_run(conn, rid)
            found = [members_store.get(conn, m) for m in stored["members"]]
            project = projects_store.get(conn, int(stored["project_id"]))
            name = project.name if project is not None else ""
            return stored, [m for m in found if m is not None], name

        stored, members, project_name = await self.core.db.read(read)
        run.project_id = int(stored["project_id"])
        if not await self._fence(run):
            return
        # This node runs it from now on, under the lease (a node that lost it cannot).
        if self.leasing is not None and not await self.core.db.write(
            lambda conn, tx: research_actions.run_here(conn, tx, rid), locks=(run.project_id,)
        ):
            return
        # A shared workspace: read only while this node holds its lock (room.infra.wslock).
        leave = None if self.leasing is None else await self.leasing.enter_workspace(run.project_id)
        if self.leasing is not None and leave is None:
            return  # another node still works in it: the leases' sweep starts the run again
        try:
            await self._sessions(run, stored, members, project_name)
        finally:
            if leave is not None:
                leave()

    async def _sessions(
        self, run: _Run, stored: dict[str, Any], members: list[Member], project_name: str
    ) -> None:
        rid = run.research_id
        sessions = []
        for m in members:
            earlier = await self.core.db.read(
                partial(turns_store.research_transcript, research_id=rid, member_id=m.id)
            )
            charter = charter_of(rid, stored, m, project_name)
            opening = [ChatMessage("system", charter), ChatMessage("user", stored["question"])]
            sessions.append(_Session(m, opening + replay(earlier)))
        lock = self.locks.setdefault(rid, asyncio.Lock())
        while not run.stopped():
            live = [s for s in sessions if not s.done]
            if not live:
                await self._halt(run, GateFailure.NO_REPORT)
                return
            for session in live:
                async with lock:
                    if run.stopped() or not await self._fence(run):
                        return
                    failure, waited = await self.core.db.read(partial(_gate, rid, time.time()))
                    if waited and failure is None:
                        # It waited for this node (home_node_offline): a new running span from
                        # now, under the fence, with the budget it had left.
                        await self.core.db.write(
                            lambda conn, tx: research_actions.wait_over(conn, tx, rid),
                            locks=(run.project_id,),
                        )
                    if failure is not None:
                        if failure is not GateFailure.WRONG_STATE:
                            await self._halt(run, failure)
                        return
                    finished = await self._step(run, session)
                if finished:
                    return

    async def _step(self, run: _Run, session: _Session) -> bool:
        """One model step of one session; True when the run is over (a report was filed)."""
        rid, member = run.research_id, session.member
        route = await route_for(self.core, member)
        meter = CallMeter()
        result: ChatResult | None = None
        error: str | None = None
        try:
            provider = self.registry.get(route.provider)
            request = ChatRequest(model=route.model, messages=tuple(session.messages),
                                  tools=self.toolbox.specs())  # fmt: skip
            call = asyncio.ensure_future(provider.chat(request, meter))
            run.in_flight = call
            result = await call
        except asyncio.CancelledError:
            error = usage_store.STOPPED
            if not run.stopping:
                await self._record(run, member, route, None, meter, error)
                raise
        except (ProviderError, RoomError) as exc:
            error = exc.code
        finally:
            run.in_flight = None
        await self._record(run, member, route, result, meter, error)
        if result is None:
            if error != usage_store.STOPPED:
                await self._halt(run, GateFailure.PROVIDER_ERROR)
            return True
        session.messages.append(ChatMessage("assistant", result.text, tool_calls=result.tool_calls))
        await self._transcript(member, rid, "assistant", result.text,
                               tool_calls=[{"id": c.id, "name": c.name, "arguments": c.arguments}
                                           for c in result.tool_calls])  # fmt: skip
        if not result.tool_calls:
            session.done, session.last_text = True, result.text
            return False
        over = False
        for call_ in result.tool_calls:
            ctx = ToolContext(self.core, member, 0, call_.id, {"research_id": rid})
            if call_.raw_arguments and not call_.arguments:
                outcome = bad_arguments("arguments were not valid JSON")
            else:
                outcome = await self.toolbox.run(ctx, call_.name, call_.arguments)
            session.messages.append(ChatMessage("tool", outcome.text, tool_call_id=call_.id,
                                                name=call_.name))  # fmt: skip
            await self._transcript(member, rid, "tool", outcome.text, name=call_.name,
                                   tool_call_id=call_.id)  # fmt: skip
            state = await self.core.db.read(lambda conn: research_store.get(conn, rid))
            if state is None or state["state"] != ResearchState.RUNNING:
                over = True
                break
        return over

    async def _record(
        self,
        run: _Run,
        member: Member,
        route: Any,
        result: ChatResult | None,
        meter: CallMeter,
        error: str | None,
    ) -> None:
        usage = result.usage if result is not None else meter.usage
        tokens_in = usage.input_tokens if usage is not None else 0
        tokens_out = usage.output_tokens if usage is not None else 0
        attempts = result.attempts if result is not None else meter.attempts

        def job(conn: Any, tx: Any) -> None:
            usage_store.record_request(
                conn, project_id=member.project_id, member_id=member.id, turn_id=None,
                model_id=route.model_id, route_source=route.source.value,
                provider=route.provider,
                model_reported=result.model if result is not None else None,
                latency_ms=result.latency_ms if result is not None else None,
                input_tokens=tokens_in, output_tokens=tokens_out,
                usage_reported=int(usage is not None and (result is None or usage.reported)),
                ok=int(result is not None), error_code=error, attempts=attempts,
                research_id=run.research_id, now=tx.now,
            )  # fmt: skip
            research_actions.record_step(conn, tx, run.research_id,
                                         tokens=tokens_in + tokens_out,
                                         requests=1 if attempts else 0, steps=1)  # fmt: skip

        await self.core.db.write(job, locks=(run.project_id,))

    async def _transcript(self, member: Member, rid: int, role: str, content: str,
                          **extra: Any) -> None:  # fmt: skip
        def job(conn: Any, tx: Any) -> None:
            turns_store.append_transcript(conn, member_id=member.id, turn_id=None, role=role,
                                          content=content, now=tx.now, research_id=rid,
                                          **extra)  # fmt: skip

        await self.core.db.write(job, locks=(member.project_id,))
