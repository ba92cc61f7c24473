"""The room as an MCP server for external agent members: Streamable HTTP at ``/mcp``, with the
official ``mcp`` SDK (docs/agents.md, "Coding agents over MCP").

* **Who.** Every HTTP request carries ``Authorization: Bearer <token>``: the member's agent
  token, the same one ``room agent`` uses (rotation and revocation included). It is checked on
  each request, so a revoked token is refused at once (401 ``bad_token``, the HTTP API's error
  body); a session (``Mcp-Session-Id``) is bound to the token that opened it (the SDK answers 404
  to any other) and is attached to the hub's presence like a socket (:class:`SessionCloser`):
  an owner's revoke, a rotation or a departure ends it at once, and ``room.auth``'s periodic
  re-check (``credential_recheck_secs``) a revocation the server did not hear (the CLI's).
  Cookies are not read here: people use the page.
* **Tools** are the member's own: its role's toolbox as an in-process turn gets it
  (:func:`room.agents.turn.toolbox_for`: the preset, less the write tools for a read-only role),
  with the same names, descriptions and JSON input schemas, less the server-side workspace tools
  (:data:`WITHHELD`: a coding agent works in its own checkout with its own file tools, and a
  command the server did not run is never evidence). A tool not granted is refused
  (``tool_refused``) if called anyway. Every call is authored by the token's member, rate
  limited (``rate_limited`` with ``retry_after_ms``, per member, at the send rate), audited, and
  shown in the timeline as tool activity (:mod:`room.actions.mcp_calls`).
* **Resources**: ``room://project`` (the project, you, its members), ``room://task`` (your open
  tasks and where you work), ``room://inbox`` (your unread deliveries: reading it takes them,
  delivered → consumed, as ``room agent`` does). A session subscribed to ``room://inbox`` gets
  ``notifications/resources/updated`` when a delivery waits for it (``resources/subscribe``, or
  a ``subscriptions/listen`` stream on protocol 2026-07-28).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import mcp_types as types
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.server.session import ServerSession
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ResourceUpdated
from mcp.shared.exceptions import MCPError
from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.types import Message, Receive, Scope, Send

from room import __version__
from room.actions import mcp_calls, presence
from room.actions import turns as turn_actions
from room.actions import workspaces as workspace_actions
from room.agents.presets import WORK_TOOLS
from room.agents.tools import Tool, Toolbox, ToolContext
from room.agents.turn import toolbox_for
from room.auth import identity_from_headers
from room.errors import AuthError, ForbiddenError, RateLimitedError, RoomError
from room.rules.entities import Member
from room.services import Services
from room.store import projects as projects_store

log = logging.getLogger(__name__)

MCP_PATH = "/mcp"
SERVER_NAME = "project-room"
#: Tools a role grants that an MCP client is not given: the server-side workspace tools. A coding
#: agent edits and runs its own checkout; ``shell``'s results are the server's own evidence.
WITHHELD = frozenset(WORK_TOOLS)
PROJECT_URI = "room://project"
TASK_URI = "room://task"
INBOX_URI = "room://inbox"
INSTRUCTIONS = (
    "You are a member of a Project Room project (a group chat of people and AI agents). Read "
    "room://inbox for the messages addressed to you (reading takes them), answer with room_send "
    "(@handle to ask someone to act), and report task progress with room_task_update."
)
_RESOURCES = (
    (PROJECT_URI, "project", "The project, you, and its members"),
    (TASK_URI, "task", "Your open tasks and the folder you work in"),
    (INBOX_URI, "inbox", "Your unread messages; reading takes them (delivered → consumed)"),
)


@dataclass(slots=True)
class McpSession:
    """One MCP session the room knows: whose it is, and its inbox subscription."""

    id: str
    member_id: int
    project_id: int
    credential: str
    notifier: ServerSession | None = None
    push: Any = None  # the inbox push registered on core.inboxes while subscribed
    notified: set[str] = field(default_factory=set)
    closer: SessionCloser | None = None


class SessionCloser:
    """Ends one MCP session when the credential it rests on ends, as a socket's outbox is cut
    (:class:`room.infra.presence.Presence`): attached under the member's and the token's keys,
    so an owner's revoke or rotate and a departure end it at once, and a revocation the server
    only reads later (the CLI's) at the next credential re-check."""

    def __init__(self, room: McpRoom, sid: str) -> None:
        self.room, self.sid = room, sid

    def cut(self, reason: str, code: int = 0) -> None:
        core = self.room._core()
        task = asyncio.get_running_loop().create_task(self.room.terminate(self.sid, reason))
        core.background.add(task)
        task.add_done_callback(core.background.discard)


def _error_body(exc: RoomError) -> JSONResponse:
    return JSONResponse({"error": exc.to_dict()}, status_code=exc.http_status)


def _result_json(text: str) -> dict[str, Any] | None:
    try:
        data = json.loads(text)
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


class McpRoom:
    """The ``/mcp`` endpoint (an ASGI app) and its sessions. ``tools`` are the agents' room tools
    (the scheduler's), so an MCP client and an in-process turn read one set of specs."""

    def __init__(self, tools: Mapping[str, Tool]) -> None:
        self.tools = tools
        self.core: Services | None = None
        self.sessions: dict[str, McpSession] = {}
        self.server: Server[Any] = Server(
            SERVER_NAME,
            version=__version__,
            instructions=INSTRUCTIONS,
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            on_list_resources=self._list_resources,
            on_read_resource=self._read_resource,
            on_subscribe_resource=self._subscribe,
            on_unsubscribe_resource=self._unsubscribe,
            on_subscriptions_listen=self._listen,
        )
        # Protocol 2026-07-28's subscriptions/listen: one bus per member, since room://inbox
        # names each member's own inbox.
        self.listens: dict[int, tuple[InMemorySubscriptionBus, ListenHandler]] = {}
        self.manager = StreamableHTTPSessionManager(self.server)

    # -- lifetime -------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def run(self, core: Services) -> AsyncIterator[None]:
        self.core = core
        async with self.manager.run():
            # Sessions the SDK ended (a client's DELETE, its idle timeout) are forgotten here;
            # a credential that ended is found by room.auth's re-check (SessionCloser).
            sweeps = asyncio.create_task(
                self._sweeps(core.settings.credential_recheck_secs), name="mcp-sweeps"
            )
            try:
                yield
            finally:
                sweeps.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await sweeps
                for sid in list(self.sessions):
                    self._forget(sid)
                for _, handler in self.listens.values():
                    handler.close()  # each listen stream ends with its result, not a drop

    def session_count(self) -> int:
        return len(self.sessions)

    async def _sweeps(self, period: float) -> None:
        while True:
            await asyncio.sleep(period)
            self._sweep()

    async def terminate(self, sid: str, reason: str) -> None:
        """End a session from the server's side. The SDK has no public way to: its transport's
        terminate() closes the session's streams, and its server task then forgets it."""
        transport = self.manager._server_instances.get(sid)
        if transport is not None:
            log.info("ending MCP session %s: %s", sid[:8], reason)
            await transport.terminate()
        self._forget(sid)

    def _sweep(self) -> None:
        """Forget sessions the SDK has ended (a client's DELETE, the idle timeout)."""
        for sid in list(self.sessions):
            if sid not in self.manager._server_instances:
                self._forget(sid)

    def _forget(self, sid: str) -> None:
        session = self.sessions.pop(sid, None)
        if session is None or self.core is None:
            return
        if session.closer is not None:
            hub_presence = self.core.hub.presence
            hub_presence.detach_session(
                hub_presence.agent_session(session.member_id), session.closer
            )
            hub_presence.detach_session(
                hub_presence.token_session(session.credential), session.closer
            )
        if session.push is not None:
            self.core.inboxes.close(session.member_id, session.push)
            presence.schedule(self.core, session.project_id)

    def _open(self, sid: str, member: Member, credential: str) -> None:
        session = McpSession(sid, member.id, member.project_id, credential)
        session.closer = SessionCloser(self, sid)
        self.sessions[sid] = session
        hub_presence = self._core().hub.presence
        hub_presence.attach_session(hub_presence.agent_session(member.id), session.closer)
        hub_presence.attach_session(hub_presence.token_session(credential), session.closer)

    def _core(self) -> Services:
        if self.core is None:
            raise RuntimeError("the MCP endpoint is not running")
        return self.core

    # -- the endpoint ---------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        core = self._core()
        headers = Headers(scope=scope)
        try:
            who = await identity_from_headers(core, headers, {})
            if who is None:
                raise AuthError(
                    "the MCP endpoint takes an agent member's token: 'Authorization: Bearer <token>'",
                    code="bearer_required",
                )
            if who.agent is None or who.credential is None:
                raise ForbiddenError("the MCP endpoint is for agent members", code="agents_only")
        except RoomError as exc:
            await _error_body(exc)(scope, receive, send)
            return
        member, credential = who.agent, who.credential
        # The SDK binds a session to the principal that opened it and answers 404 to any other:
        # the member and the very token (a rotated token opens a session of its own).
        scope["user"] = AuthenticatedUser(
            AccessToken(
                token=credential, client_id=f"member-{member.id}", scopes=[], subject=credential
            )
        )
        scope["room.member"] = member
        opening = MCP_SESSION_ID_HEADER not in headers

        async def watch(message: Message) -> None:
            if opening and message["type"] == "http.response.start" and message["status"] < 400:
                for key, value in message.get("headers", ()):
                    if key.decode("latin-1").lower() == MCP_SESSION_ID_HEADER:
                        self._open(value.decode("latin-1"), member, credential)
            await send(message)

        await self.manager.handle_request(scope, receive, watch)
        if scope.get("method") == "DELETE":
            self._sweep()

    # -- handlers ---------------------------------------------------------------------------------

    async def _member(self, ctx: ServerRequestContext[Any, Any]) -> Member:
        request = ctx.request
        member = request.scope.get("room.member") if request is not None else None
        if not isinstance(member, Member):
            raise MCPError(types.INVALID_REQUEST, "no member: the request carried no agent token")
        return member

    def _session_of(self, ctx: ServerRequestContext[Any, Any]) -> McpSession | None:
        request = ctx.request
        sid = request.headers.get(MCP_SESSION_ID_HEADER) if request is not None else None
        return self.sessions.get(sid) if sid else None

    def _take_call(self, member: Member) -> None:
        """Tool calls and resource reads share one bucket per member, at the send rate."""
        wait_ms = self._core().limiter.take(("mcp", member.id))
        if wait_ms:
            raise RateLimitedError("calling the room too fast; slow down", retry_after_ms=wait_ms)

    async def toolbox(self, member: Member) -> Toolbox:
        """What ``member``'s MCP client may call: its in-process toolbox less :data:`WITHHELD`."""
        box = await toolbox_for(self._core(), self.tools, member)
        return Toolbox.exactly({n: t for n, t in box.tools.items() if n not in WITHHELD})

    async def _list_tools(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        box = await self.toolbox(await self._member(ctx))
        return types.ListToolsResult(
            tools=[
                types.Tool(name=s.name, description=s.description, input_schema=dict(s.parameters))
                for s in box.specs()
            ]
        )

    async def _call_tool(
        self, ctx: ServerRequestContext[Any, Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        core = self._core()
        member = await self._member(ctx)
        name, args = params.name, dict(params.arguments or {})
        try:
            self._take_call(member)
        except RateLimitedError as exc:
            # Not recorded: writing a refusal per call would be the load the limit prevents.
            return _tool_error(exc)
        box = await self.toolbox(member)
        context = ToolContext(core, member, None, uuid.uuid4().hex, {})
        outcome = await box.run(context, name, args)
        data = _result_json(outcome.text)
        error = str(data.get("error")) if data and data.get("ok") is False else None
        session = self._session_of(ctx)
        await mcp_calls.record_call(
            core,
            member,
            name,
            args,
            ok=outcome.ok,
            outcome="refused" if name not in box.tools else "ok" if outcome.ok else "failed",
            error=error,
            detail=outcome.detail,
            session=session.id if session else None,
        )
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=outcome.text)],
            structured_content=data,
            is_error=not outcome.ok,
        )

    async def _list_resources(
        self, ctx: ServerRequestContext[Any, Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourcesResult:
        await self._member(ctx)
        return types.ListResourcesResult(
            resources=[
                types.Resource(uri=uri, name=name, description=text, mime_type="application/json")
                for uri, name, text in _RESOURCES
            ]
        )

    async def _read_resource(
        self, ctx: ServerRequestContext[Any, Any], params: types.ReadResourceRequestParams
    ) -> types.ReadResourceResult:
        member = await self._member(ctx)
        uri = str(params.uri)
        try:
            self._take_call(member)
            if uri == PROJECT_URI:
                data = await self._project(member)
            elif uri == TASK_URI:
                data = await self._task(member)
            elif uri == INBOX_URI:
                data = await self._inbox(_external(member), self._session_of(ctx))
            else:
                raise MCPError(types.INVALID_PARAMS, f"no resource {uri}; see resources/list")
        except RoomError as exc:
            raise _refusal(exc) from exc
        return types.ReadResourceResult(
            contents=[
                types.TextResourceContents(
                    uri=uri, mime_type="application/json", text=json.dumps(data, ensure_ascii=False)
                )
            ]
        )

    async def _own_tool(self, member: Member, name: str, args: dict[str, Any]) -> Any:
        tool = self.tools.get(name)
        if tool is None:
            return None
        context = ToolContext(self._core(), member, None, uuid.uuid4().hex, {})
        reply = await tool.run(context, args)
        return json.loads(reply if isinstance(reply, str) else reply.text)

    async def _project(self, member: Member) -> dict[str, Any]:
        project = await self._core().db.read(
            lambda conn: projects_store.get(conn, member.project_id)
        )
        assert project is not None
        members = await self._own_tool(member, "room_members", {})
        return {
            "project": {
                "id": project.id,
                "name": project.name,
                "goal": project.goal,
                "state": project.state,
            },
            "you": {"id": member.id, "handle": member.handle, "role": member.role},
            "members": (members or {}).get("members", []),
        }

    async def _task(self, member: Member) -> dict[str, Any]:
        listed = await self._own_tool(member, "room_task_list", {"mine": True})
        tasks = [
            t
            for t in (listed or {}).get("tasks", [])
            if t["state"] not in ("accepted", "cancelled")
        ]
        where = await workspace_actions.work_dir(self._core(), member)
        return {
            "tasks": tasks,
            "workdir": {
                "path": str(where.path),
                "mode": where.mode,
                "task": where.task_key,
                "branch": where.branch,
                "reason": where.reason,
            },
        }

    async def _inbox(self, member: Member, session: McpSession | None) -> dict[str, Any]:
        core = self._core()
        cap = (await turn_actions.limits(core, member.project_id)).agent_turn_cap
        handoff = f"mcp-{session.id if session else uuid.uuid4().hex}"
        items = await mcp_calls.take_inbox(core, member, handoff, cap)
        if session is not None:
            session.notified.discard(INBOX_URI)
        return {"deliveries": [i.to_wire() for i in items]}

    async def _subscribe(
        self, ctx: ServerRequestContext[Any, Any], params: types.SubscribeRequestParams
    ) -> types.EmptyResult:
        member = await self._member(ctx)
        if str(params.uri) != INBOX_URI:
            raise MCPError(types.INVALID_PARAMS, f"only {INBOX_URI} sends updates")
        try:
            _external(member)
        except RoomError as exc:
            raise _refusal(exc) from exc
        session = self._session_of(ctx)
        if session is None:
            raise MCPError(types.INVALID_REQUEST, "subscribing needs a session (Mcp-Session-Id)")
        core = self._core()
        session.notifier = ctx.session
        if session.push is None:

            async def push(member_id: int) -> None:
                await self._notify(session)

            session.push = push
            core.inboxes.open(member.id, push)
            presence.schedule(core, member.project_id)
        await self._notify(session)  # something may wait already
        return types.EmptyResult()

    async def _unsubscribe(
        self, ctx: ServerRequestContext[Any, Any], params: types.UnsubscribeRequestParams
    ) -> types.EmptyResult:
        await self._member(ctx)
        session = self._session_of(ctx)
        if session is not None and session.push is not None and str(params.uri) == INBOX_URI:
            self._core().inboxes.close(session.member_id, session.push)
            session.push = None
            presence.schedule(self._core(), session.project_id)
        return types.EmptyResult()

    async def _listen(
        self, ctx: ServerRequestContext[Any, Any], params: types.SubscriptionsListenRequestParams
    ) -> types.SubscriptionsListenResult:
        """A ``subscriptions/listen`` stream (protocol 2026-07-28): ``room://inbox`` updates while
        it is open, as a handshake-era session's ``resources/subscribe`` gets them."""
        member = await self._member(ctx)
        if member.id not in self.listens:
            bus = InMemorySubscriptionBus()
            self.listens[member.id] = (bus, ListenHandler(bus))
        bus, handler = self.listens[member.id]
        if INBOX_URI not in (params.notifications.resource_subscriptions or ()):
            return await handler(ctx, params)
        try:
            _external(member)
        except RoomError as exc:
            raise _refusal(exc) from exc
        core = self._core()

        async def push(member_id: int) -> None:
            if await mcp_calls.has_unread(core, member_id):
                await bus.publish(ResourceUpdated(uri=INBOX_URI))

        core.inboxes.open(member.id, push)
        presence.schedule(core, member.project_id)
        # Something may wait already; it runs once the handler has subscribed to the bus.
        first = asyncio.ensure_future(push(member.id))
        try:
            return await handler(ctx, params)
        finally:
            first.cancel()
            core.inboxes.close(member.id, push)
            presence.schedule(core, member.project_id)

    async def _notify(self, session: McpSession) -> None:
        """Tell a subscribed session its inbox has something, once until it reads it."""
        if session.notifier is None or INBOX_URI in session.notified:
            return
        if not await mcp_calls.has_unread(self._core(), session.member_id):
            return
        session.notified.add(INBOX_URI)
        try:
            await session.notifier.send_resource_updated(INBOX_URI)
        except Exception:  # the session's stream is gone: it is forgotten
            log.info("MCP session %s no longer takes notifications", session.id[:8])
            self._forget(session.id)


def _external(member: Member) -> Member:
    """Only an external agent takes its deliveries itself: an in-process agent's are its
    session's (the same rule as ``/ws``'s ``not_external``)."""
    if member.driver != "external":
        raise ForbiddenError("only an external agent takes its own deliveries", code="not_external")
    return member


def _refusal(exc: RoomError) -> MCPError:
    """A refusal of a request other than a tool call: a JSON-RPC error whose ``data`` is the
    HTTP API's structured error."""
    return MCPError(types.INVALID_REQUEST, exc.message, data={"error": exc.to_dict()})


def _tool_error(exc: RoomError) -> types.CallToolResult:
    data: dict[str, Any] = {"ok": False, "error": exc.code, "message": exc.message}
    if exc.details:
        data["details"] = dict(exc.details)
    return types.CallToolResult(
        content=[types.TextContent(type="text", text=json.dumps(data, ensure_ascii=False))],
        structured_content=data,
        is_error=True,
    )
