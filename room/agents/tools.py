"""Room tools an agent session may call. The author is bound from the session, never from the
arguments; a tool the member's preset does not grant is refused here even if a model calls it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from room.actions import messages as message_actions
from room.actions import reactions as reaction_actions
from room.actions import routes as route_actions
from room.actions import turns as turn_actions
from room.actions.turns import Limits
from room.agents.context import person_of, sender_label
from room.agents.presets import MEMORY_WRITE_TOOLS, WRITE_TOOLS, preset_for
from room.errors import RoomError
from room.infra.diskuse import DiskMeter
from room.infra.sandbox import Sandbox
from room.providers import ToolSpec
from room.rules.entities import Member
from room.rules.plans import normalize_handle
from room.services import Services
from room.store import messages as messages_store

HISTORY_MAX = 50


class WriterLocks:
    """One writer at a time per project, where members share the workspace itself (``serial``
    mode, :class:`room.actions.workspaces.WorkDir`): taken by the write tools and ``shell``."""

    def __init__(self) -> None:
        self._locks: dict[int, asyncio.Lock] = {}

    def of(self, project_id: int) -> asyncio.Lock:
        return self._locks.setdefault(project_id, asyncio.Lock())


@dataclass(frozen=True, slots=True)
class WorkEnv:
    """What the work tools (:mod:`room.agents.work_tools`) run with, built once per server: the
    command runner as the start-up probe found it, and the serial-mode writer locks."""

    sandbox: Sandbox
    writers: WriterLocks = field(default_factory=WriterLocks)
    disk: DiskMeter = field(default_factory=DiskMeter)


@dataclass(slots=True)
class TurnWork:
    """One turn's share of the work limits, and the event that stops its running command when a
    person stops the member or the project (:meth:`room.agents.turn.Turn.stop`)."""

    limits: Limits
    cancel: asyncio.Event = field(default_factory=asyncio.Event)
    command_secs: float = 0.0  # spent by this turn's commands so far


@dataclass(frozen=True, slots=True)
class ToolContext:
    """What one call runs with. ``turn_id`` is None for a call from outside a turn: an external
    agent's MCP client (:mod:`room.mcp_server`), which the server runs no turn for."""

    core: Services
    member: Member
    turn_id: int | None
    call_id: str
    extra: Mapping[str, Any]
    work: WorkEnv | None = None
    turn: TurnWork | None = None


@dataclass(frozen=True, slots=True)
class ToolReply:
    """A tool's answer when the timeline should show more than ✓/✗: ``detail`` is merged into
    the call's entry in the ``tool`` message's meta (``command: {...}``, ``file: {...}``)."""

    text: str
    detail: Mapping[str, Any]


ToolFn = Callable[[ToolContext, dict[str, Any]], Awaitable[str | ToolReply]]


@dataclass(frozen=True, slots=True)
class Tool:
    spec: ToolSpec
    run: ToolFn
    side_effect: bool


class ToolRefusedError(RoomError):
    """A tool the member's preset does not grant: refused even when a model calls it."""

    code = "tool_refused"
    http_status = 403


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """One tool call's result: the text the model reads, whether the call succeeded, and
    whether it acted on the room (a side effect a re-run would repeat)."""

    text: str
    ok: bool
    acted: bool
    detail: Mapping[str, Any] | None = None


def _reports_failure(text: str) -> bool:
    """Tools report a refusal they handle themselves as ``{"ok": false, …}``."""
    try:
        data = json.loads(text)
    except ValueError:
        return False
    return isinstance(data, dict) and data.get("ok") is False


def _result(data: Any) -> str:
    return json.dumps(data, ensure_ascii=False)


async def _room_send(ctx: ToolContext, args: dict[str, Any]) -> str:
    text = str(args.get("text", "")).strip()
    if not text:
        return _result({"ok": False, "error": "text is required"})
    reply_to = args.get("reply_to")
    try:
        ack = await message_actions.send_message(
            ctx.core,
            ctx.member,
            client_txn_id=turn_actions.tool_txn(ctx.turn_id, ctx.call_id),
            body=text,
            reply_to=int(reply_to) if isinstance(reply_to, int) else None,
            rate_limited=False,
        )
    except RoomError as exc:
        return _result(
            {"ok": False, "error": exc.code, "message": exc.message, "details": exc.details}
        )
    return _result({"ok": True, "message_id": ack.message_id, "seq": ack.seq})


async def _room_react(ctx: ToolContext, args: dict[str, Any]) -> str:
    """An emoji on a message (``#seq`` as the timeline shows it): no message, no mention, no
    delivery to anyone (room.actions.reactions)."""
    seq = args.get("seq")
    if not isinstance(seq, int) or isinstance(seq, bool):
        return _result({"ok": False, "error": "bad_arguments", "message": "seq is an integer"})
    project_id = ctx.member.project_id
    message_id = await ctx.core.db.read(
        lambda conn: messages_store.id_at_seq(conn, project_id, seq)
    )
    if message_id is None:
        return _result({"ok": False, "error": "no_message", "message": f"no message #{seq}"})
    emoji = str(args.get("emoji") or "👀")
    try:
        result = await reaction_actions.react(
            ctx.core, ctx.member, message_id, emoji, remove=bool(args.get("remove", False))
        )
    except RoomError as exc:
        return _result({"ok": False, "error": exc.code, "message": exc.message})
    mine = [r["emoji"] for r in result["reactions"] if ctx.member.id in r["members"]]
    return _result({"ok": True, "seq": seq, "changed": result["changed"], "your_reactions": mine})


async def _room_history(ctx: ToolContext, args: dict[str, Any]) -> str:
    before = args.get("before")
    raw_limit = args.get("limit", 20)
    limit = max(1, min(HISTORY_MAX, raw_limit if isinstance(raw_limit, int) else 20))
    project_id = ctx.member.project_id
    frames, has_more = await ctx.core.db.read(
        lambda conn: messages_store.history(
            conn, project_id, int(before) if isinstance(before, int) else None, limit
        )
    )
    roster = await ctx.core.rosters.get(project_id)
    out = []
    for frame in frames:
        message = json.loads(frame)
        if message["kind"] == "tool":
            continue  # tool activity is for people reading the timeline, not for models
        author = roster.member(message["author_id"]) if message["author_id"] else None
        out.append(
            {
                "seq": message["seq"],
                "message_id": message["id"],
                # Named without the at-sign: an answer quoting it must not wake them.
                "author": sender_label(person_of(author) if author else None, message["author_id"]),
                "author_handle": author.handle if author else None,
                "text": message["body"][:2000],
                "deleted": message["deleted"],
            }
        )
    return _result({"messages": out, "has_more": has_more})


async def _room_members(ctx: ToolContext, args: dict[str, Any]) -> str:
    roster = await ctx.core.rosters.get(ctx.member.project_id)
    return _result(
        {
            "members": [
                {
                    "handle": m.handle,
                    "display_name": m.display_name,
                    "kind": m.kind,
                    "role": m.role,
                    "status": m.status,
                    "you": m.id == ctx.member.id,
                }
                for m in roster.members.values()
                if m.status != "left"
            ]
        }
    )


async def _room_pick_model(ctx: ToolContext, args: dict[str, Any]) -> str:
    handle = str(args.get("member", "")).lstrip("@＠")
    roster = await ctx.core.rosters.get(ctx.member.project_id)
    key = normalize_handle(handle)  # ASCII case only, as the mentions
    target = next((m for m in roster.members.values() if normalize_handle(m.handle) == key), None)
    if target is None or target.kind != "agent":
        return _result({"ok": False, "error": "no_member", "message": f"no agent @{handle}"})
    result = await route_actions.change_route(
        ctx.core,
        ctx.member,
        scope="pool_pick",
        target=str(target.id),
        value=str(args.get("model", "")),
        reason=str(args.get("reason", "")),
    )
    return _result({"ok": True, **result})


def _spec(name: str, description: str, properties: dict[str, Any], required: list[str]) -> ToolSpec:
    return ToolSpec(
        name=name,
        description=description,
        parameters={"type": "object", "properties": properties, "required": required},
    )


BUILTIN_TOOLS: Mapping[str, Tool] = MappingProxyType(
    {
        "room_send": Tool(
            _spec(
                "room_send",
                "在群里发一条消息（作者就是你）。用 @handle 点名需要行动的成员。",
                {
                    "text": {"type": "string", "description": "消息正文（Markdown）"},
                    "reply_to": {"type": "integer", "description": "回复的消息 id（可选）"},
                },
                ["text"],
            ),
            _room_send,
            side_effect=True,
        ),
        "room_react": Tool(
            _spec(
                "room_react",
                "给一条消息加表情回应（不发消息、不点名、不打扰任何人），"
                "例如接手一条消息时回应 👀、完成时回应 ✅。remove=true 撤回。",
                {
                    "seq": {"type": "integer", "description": "消息的 #seq"},
                    "emoji": {"type": "string", "description": "一个表情，默认 👀"},
                    "remove": {"type": "boolean", "description": "撤回这个表情（可选）"},
                },
                ["seq"],
            ),
            _room_react,
            side_effect=True,
        ),
        "room_history": Tool(
            _spec(
                "room_history",
                "读取项目时间线（最新的在后）。before 为 seq 游标，limit 最多 50。",
                {
                    "before": {"type": "integer", "description": "只看 seq 小于它的消息"},
                    "limit": {"type": "integer", "description": "条数，1–50"},
                },
                [],
            ),
            _room_history,
            side_effect=False,
        ),
        "room_members": Tool(
            _spec("room_members", "列出项目成员（handle、名字、人类或 AI、角色、状态）。", {}, []),
            _room_members,
            side_effect=False,
        ),
        "room_pick_model": Tool(
            _spec(
                "room_pick_model",
                "允许池模式下为某个 AI 成员选择模型（须在允许池内，须给出公开理由；"
                "成员固定的路由不能改）。",
                {
                    "member": {"type": "string", "description": "成员 handle"},
                    "model": {"type": "string", "description": "provider/model"},
                    "reason": {"type": "string", "description": "公开理由"},
                },
                ["member", "model", "reason"],
            ),
            _room_pick_model,
            side_effect=True,
        ),
    }
)


class Toolbox:
    """The tools of one member: exactly its preset's grants that exist on this server, less the
    write tools and the memory-writing tool when its role is read-only in the project
    (``read_only_roles``)."""

    def __init__(self, tools: Mapping[str, Tool], role: str, *, read_only: bool = False) -> None:
        granted = preset_for(role).tools
        withheld = WRITE_TOOLS | MEMORY_WRITE_TOOLS if read_only else frozenset()
        self.tools = {
            name: tools[name] for name in granted if name in tools and name not in withheld
        }

    @classmethod
    def exactly(cls, tools: Mapping[str, Tool]) -> Toolbox:
        """A toolbox of exactly ``tools`` (a research session's), whatever the member's role."""
        box = cls.__new__(cls)
        box.tools = dict(tools)
        return box

    @property
    def read_only(self) -> bool:
        """Nothing here changes the workspace."""
        return not (WRITE_TOOLS & self.tools.keys())

    def specs(self) -> tuple[ToolSpec, ...]:
        return tuple(tool.spec for tool in self.tools.values())

    async def run(self, ctx: ToolContext, name: str, args: dict[str, Any]) -> ToolOutcome:
        tool = self.tools.get(name)
        try:
            if tool is None:
                # Refused server-side even when the model asks: not granted means not run.
                raise ToolRefusedError(f"{name} is not granted to your role")
            reply = await tool.run(ctx, args)
        except RoomError as exc:
            return _failure(exc.code, exc.message, exc.details)
        except (TypeError, ValueError, KeyError, AttributeError, RecursionError) as exc:
            # Arguments of the wrong shape from a model: tell it, do not end its turn.
            return _failure("bad_arguments", str(exc)[:200])
        # A tool that ran may have acted even if it then reported a failure: counted as acting
        # (a turn that acted is never re-run after a restart).
        text, detail = (reply.text, reply.detail) if isinstance(reply, ToolReply) else (reply, None)
        return ToolOutcome(text, not _reports_failure(text), tool.side_effect, detail)


def not_run_after_stop() -> ToolOutcome:
    """The outcome of a call left unrun because a person stopped the member's work."""
    return _failure("stopped", "a person stopped this work; this call was not run")


def bad_arguments(message: str) -> ToolOutcome:
    """The outcome of a call whose arguments could not be read at all."""
    return _failure("bad_arguments", message)


def _failure(code: str, message: str, details: Mapping[str, Any] | None = None) -> ToolOutcome:
    data: dict[str, Any] = {"ok": False, "error": code, "message": message}
    if details:
        data["details"] = dict(details)  # a file tool's ``path`` and ``hint`` the model can act on
    return ToolOutcome(_result(data), False, False)
