"""Foundation endpoints: identity, projects, messages, invites, audit; shared request helpers.

Cookie-authenticated mutations need the session's CSRF token (``X-CSRF-Token``); bearer tokens
don't. Errors are ``{"error": {"code", "message", "details"?}}`` with the error's HTTP status.
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from room import __version__
from room import metrics as room_metrics
from room.actions import auth as auth_actions
from room.actions import messages as message_actions
from room.actions import projects as project_actions
from room.actions import reactions as reaction_actions
from room.actions import workspaces as workspace_actions
from room.actions.project_settings import settings_wire
from room.agents import Scheduler
from room.auth import Identity, check_csrf, identity_from_headers
from room.errors import (
    AuthError,
    BadRequestError,
    ForbiddenError,
    ForgedAuthorError,
    NotFoundError,
)
from room.infra.bodies import check_text, read_body
from room.rules.entities import Member, Project
from room.rules.lifecycle import ActorKind
from room.rules.ops import members_for, project_for, viewer_kind
from room.rules.protocol import AUTHOR_FIELDS, MAX_ATTACHMENTS, MAX_CHIPS, MAX_HISTORY_LIMIT
from room.services import Services
from room.store import audit as audit_store
from room.store import deliveries as deliveries_store
from room.store import members as members_store
from room.store import messages as messages_store
from room.store import projects as projects_store

MAX_JSON_BYTES = 256 * 1024

# An id in a request body: positive and within SQLite's INTEGER, so a wild number is refused as
# bad input (400) instead of overflowing the driver.
RowId = Annotated[int, Field(ge=1, le=projects_store.MAX_ROW_ID)]


def core_of(request: Request) -> Services:
    core: Services = request.app.state.core
    return core


async def identity(request: Request, *, mutation: bool = False) -> Identity:
    found = await identity_from_headers(core_of(request), request.headers, request.cookies)
    if found is None:
        raise AuthError("sign in first (open your login link)")
    if mutation:
        check_csrf(found, request.headers)
    return found


def path_id(request: Request, name: str) -> int:
    """A row id from the path: digits beyond SQLite's 64-bit range name nothing (404), instead of
    overflowing the driver (500)."""
    value = int(request.path_params[name])
    if value > projects_store.MAX_ROW_ID:
        raise NotFoundError(f"没有这个编号 (Nothing has this {name}.)", code="not_found")
    return value


async def json_body(request: Request) -> Any:
    """The body as JSON, read with the request limit (413 ``too_large`` as it passes it); a lone
    surrogate is ``bad_text``; an object naming an author is ``forged_author``."""
    raw = await read_body(request, MAX_JSON_BYTES)
    try:
        data = json.loads(raw or b"{}")
    except ValueError as exc:
        raise BadRequestError(f"body is not JSON: {exc}", code="bad_json") from None
    except RecursionError:  # nesting deeper than the interpreter's stack
        raise BadRequestError("body is nested too deeply", code="bad_json") from None
    check_text(data)
    if isinstance(data, dict):
        forged = AUTHOR_FIELDS.intersection(data)
        if forged:
            raise ForgedAuthorError(
                "the author is bound from your session; requests may not name one",
                fields=sorted(forged),
            )
    return data


async def json_object(request: Request) -> dict[str, Any]:
    """:func:`json_body`, which must be an object."""
    data = await json_body(request)
    if not isinstance(data, dict):
        raise BadRequestError("body is a JSON object", code="bad_body")
    return data


async def body_of(request: Request, model: type[BaseModel]) -> Any:
    data = await json_body(request)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"]) or "body"
        raise BadRequestError(f"{where}: {first['msg']}", code="bad_body", field=where) from None


async def member_in(core: Services, who: Identity, project_id: int) -> Member:
    if who.agent is not None:
        if who.agent.project_id != project_id:
            raise ForbiddenError("this token belongs to another project", code="not_member")
        member_id = who.agent.id
    else:
        assert who.user is not None
        user_id = who.user.id
        found = await core.db.read(lambda conn: members_store.for_user(conn, project_id, user_id))
        if found is None:
            raise NotFoundError("no such project, or you are not in it", code="not_member")
        member_id = found.id
    roster = await core.rosters.get(project_id)
    member = roster.member(member_id)
    if member is None or member.status == "left":
        raise ForbiddenError("you are not a member of this project", code="not_member")
    return member


# -- handlers ------------------------------------------------------------------------------------


async def healthz(request: Request) -> Response:
    core = core_of(request)
    ok = await core.db.read(lambda conn: conn.execute("SELECT 1").fetchone()[0] == 1)
    return JSONResponse(
        {
            "ok": bool(ok),
            "version": __version__,
            "connections": core.hub.connections,
            "subscribers": core.hub.subscriber_count(),
            "writer": {
                "batches": core.db.stats.batches,
                "jobs": core.db.stats.jobs,
                "largest_batch": core.db.stats.largest_batch,
                "retries": core.db.stats.retries,
            },
        }
    )


async def metrics(request: Request) -> Response:
    """Prometheus metrics (room.metrics), for server admins only."""
    who = await identity(request)
    if who.user is None or not who.user.is_admin:
        raise ForbiddenError("only a server admin reads the metrics", code="admin_only")
    return Response(await room_metrics.render(core_of(request)),
                    media_type=room_metrics.CONTENT_TYPE)  # fmt: skip


async def me(request: Request) -> Response:
    who = await identity(request)
    core = core_of(request)
    unread: dict[int, tuple[int, int]] = {}
    if who.user is not None:
        user_id = who.user.id

        def read(
            conn: sqlite3.Connection,
        ) -> tuple[list[Project], dict[int, tuple[int, int]], set[int]]:
            return (
                projects_store.list_for_user(conn, user_id),
                messages_store.unread_for_user(conn, user_id),
                members_store.owned_projects(conn, user_id),
            )

        projects, unread, owned = await core.db.read(read)
        kinds = {p.id: ActorKind.OWNER if p.id in owned else ActorKind.MEMBER for p in projects}
    else:
        assert who.agent is not None
        agent_project = who.agent.project_id
        found = await core.db.read(lambda conn: projects_store.get(conn, agent_project))
        projects = [found] if found else []
        kinds = {p.id: ActorKind.AGENT for p in projects}
    extras = {p.id: await workspace_actions.project_wire(core, p) for p in projects}
    return JSONResponse(
        {
            "identity": who.to_wire(),
            "csrf_token": who.csrf_token,
            # ``unread``: chat messages by others after your read cursor (up to 100);
            # ``mentions``: how many of them mention you. Kept current by ``unread`` frames.
            "projects": [
                project_for(p, kinds[p.id], extras[p.id])
                | dict(zip(("unread", "mentions"), unread.get(p.id, (0, 0)), strict=True))
                for p in projects
            ],
            # The trash shows how long a project is kept restorable; nothing is purged by itself.
            "trash_retention_days": core.settings.trash_retention_days,
        }
    )


class AgentIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: str
    handle: str
    display_name: str
    aliases: list[str] = Field(default_factory=list, max_length=8)


class ProjectIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    goal: str = Field(default="", max_length=8000)
    workspace: str | None = None
    agents: list[AgentIn] | None = Field(default=None, max_length=20)
    plan_first: bool = False


async def create_project(request: Request) -> Response:
    who = await identity(request, mutation=True)
    if who.user is None:
        raise ForbiddenError("only people create projects", code="human_only")
    data: ProjectIn = await body_of(request, ProjectIn)
    agents = None
    if data.agents is not None:
        agents = [
            project_actions.AgentSpec(a.role, a.handle, a.display_name, tuple(a.aliases))
            for a in data.agents
        ]
    core = core_of(request)
    project = await project_actions.create_project(
        core,
        who.user,
        name=data.name,
        goal=data.goal,
        workspace=data.workspace,
        agents=agents,
        plan_first=data.plan_first,
    )
    # The creator is its owner.
    extra = await workspace_actions.project_wire(core, project)
    return JSONResponse({"project": project_for(project, ActorKind.OWNER, extra)}, status_code=201)


async def get_project(request: Request) -> Response:
    who = await identity(request)
    core = core_of(request)
    project_id = path_id(request, "project_id")
    member = await member_in(core, who, project_id)

    def query(conn: Any) -> Any:
        return (
            projects_store.get(conn, project_id),
            members_store.wire_list(conn, project_id),
        )

    project, members = await core.db.read(query)
    assert project is not None
    extra = await workspace_actions.project_wire(core, project)
    stored = await core.db.read(lambda conn: projects_store.settings(conn, project_id))
    wire = members_for(members, project.state, member)
    runtime = core.agents
    if isinstance(runtime, Scheduler):  # what each agent may do: its tools, and isolation
        roster = await core.rosters.get(project_id)
        for m in wire:
            found = roster.member(int(m["id"]))
            if found is not None and found.kind == "agent":
                m |= runtime.member_tools(found, stored)
    return JSONResponse(
        {
            "project": project_for(project, viewer_kind(member), extra)
            | {"settings": settings_wire(core.settings, stored)},
            "you": member.id,
            "members": wire,
        }
    )


async def list_messages(request: Request) -> Response:
    """A page of the timeline, oldest first: before a seq (``before``, or the latest), after one
    (``after``: the page that follows a window), or a window around one (``around``: a
    permalink opening an old message). ``has_newer`` comes with ``after`` and ``around``."""
    who = await identity(request)
    core = core_of(request)
    project_id = path_id(request, "project_id")
    await member_in(core, who, project_id)
    params = request.query_params
    cursors = [name for name in ("before", "after", "around") if name in params]
    if len(cursors) > 1:
        raise BadRequestError("give one of before, after and around", code="bad_query")
    try:
        cursor = int(params[cursors[0]]) if cursors else None
        limit = int(params.get("limit", "50"))
    except ValueError:
        raise BadRequestError("cursors and limit are integers", code="bad_query") from None
    if cursors and cursors[0] == "before" and cursor is not None and cursor < 1:
        # as the ``history`` frame: seqs start at 1
        raise BadRequestError("before is a seq, 1 or more", code="bad_query")
    if not 1 <= limit <= MAX_HISTORY_LIMIT:
        raise BadRequestError(f"limit is 1–{MAX_HISTORY_LIMIT}", code="bad_query")
    newer = ""
    if cursors and cursors[0] == "after":
        assert cursor is not None
        at = cursor
        frames, more_newer = await core.db.read(
            lambda conn: messages_store.newer(conn, project_id, at, limit)
        )
        # Everything before the cursor was already read: "has_more" (older) is not asked here.
        has_more = False
        newer = f',"has_newer":{"true" if more_newer else "false"}'
    elif cursors and cursors[0] == "around":
        assert cursor is not None
        at = cursor
        frames, has_more, more_newer = await core.db.read(
            lambda conn: messages_store.around(conn, project_id, at, limit)
        )
        newer = f',"has_newer":{"true" if more_newer else "false"}'
    else:
        before = cursor
        frames, has_more = await core.db.read(
            lambda conn: messages_store.history(conn, project_id, before, limit)
        )
    body = (
        f'{{"messages":[{",".join(frames)}],"has_more":{"true" if has_more else "false"}{newer}}}'
    )
    return Response(body, media_type="application/json")


class MessageIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    body: str = ""
    attachments: list[RowId] = Field(default_factory=list, max_length=MAX_ATTACHMENTS)
    client_txn_id: str | None = Field(default=None, min_length=1, max_length=64)
    reply_to: RowId | None = None
    chips: list[RowId] = Field(default_factory=list, max_length=MAX_CHIPS)
    as_plain_text: bool = False


async def post_message(request: Request) -> Response:
    who = await identity(request, mutation=True)
    core = core_of(request)
    project_id = path_id(request, "project_id")
    member = await member_in(core, who, project_id)
    data: MessageIn = await body_of(request, MessageIn)
    ack = await message_actions.send_message(
        core,
        member,
        client_txn_id=data.client_txn_id or uuid.uuid4().hex,
        body=data.body,
        reply_to=data.reply_to,
        chips=data.chips,
        as_plain_text=data.as_plain_text,
        attachments=data.attachments,
    )
    return Response(
        f'{{"message_id":{ack.message_id},"seq":{ack.seq},'
        f'"duplicate":{"true" if ack.duplicate else "false"},"message":{ack.frame}}}',
        media_type="application/json",
        status_code=200 if ack.duplicate else 201,
    )


async def message_detail(request: Request) -> Response:
    """Deliveries (the ledger's labels) and edit history of one message (earlier bodies for its
    author and the project's owners only)."""
    who = await identity(request)
    core = core_of(request)
    message_id = path_id(request, "message_id")
    row = await core.db.read(lambda conn: messages_store.get_row(conn, message_id))
    if row is None:
        raise NotFoundError("no such message", code="no_message")
    member = await member_in(core, who, int(row["project_id"]))
    # Earlier versions (and a deleted message's text) are its author's and the owners' only.
    with_bodies = member.id == row["author_id"] or member.is_owner

    def query(conn: Any) -> Any:
        return (
            deliveries_store.for_message(conn, message_id),
            messages_store.edit_history(conn, message_id, with_bodies=with_bodies),
        )

    deliveries, edits = await core.db.read(query)
    return JSONResponse(
        {
            "message_id": message_id,
            "project_id": int(row["project_id"]),
            "seq": int(row["seq"]),
            "deliveries": deliveries,
            "edits": edits,
        }
    )


class ReactionIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    emoji: str = Field(min_length=1, max_length=64)
    remove: bool = False


async def post_reaction(request: Request) -> Response:
    """Add (or remove) your emoji reaction on a message (docs/protocol.md, "Reactions")."""
    who = await identity(request, mutation=True)
    core = core_of(request)
    message_id = path_id(request, "message_id")
    row = await core.db.read(lambda conn: messages_store.get_row(conn, message_id))
    if row is None:
        raise NotFoundError("no such message", code="no_message")
    member = await member_in(core, who, int(row["project_id"]))
    data: ReactionIn = await body_of(request, ReactionIn)
    result = await reaction_actions.react(core, member, message_id, data.emoji, remove=data.remove)
    return JSONResponse(result)


class InviteIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: str = Field(default="member", pattern="^(owner|member)$")


async def create_invite(request: Request) -> Response:
    who = await identity(request, mutation=True)
    core = core_of(request)
    project_id = path_id(request, "project_id")
    member = await member_in(core, who, project_id)
    data: InviteIn = await body_of(request, InviteIn)
    if not member.is_owner:
        raise ForbiddenError("only a project owner can invite", code="not_owner")
    secret = await core.db.write(
        lambda conn, tx: auth_actions.create_invite(
            conn, tx, project_id, member, data.role, core.settings.invite_days
        )
    )
    return JSONResponse({"url": f"{core.settings.origin}/join/{secret}"}, status_code=201)


async def audit_log(request: Request) -> Response:
    who = await identity(request)
    core = core_of(request)
    project_id = path_id(request, "project_id")
    member = await member_in(core, who, project_id)
    if not member.is_owner:
        raise ForbiddenError("only a project owner can read the audit log", code="not_owner")
    events = await core.db.read(lambda conn: audit_store.list_events(conn, project_id))
    return JSONResponse({"events": events})


endpoints = [
    Route("/healthz", healthz),
    Route("/metrics", metrics),
    Route("/api/me", me),
    Route("/api/projects", create_project, methods=["POST"]),
    Route("/api/projects/{project_id:int}", get_project),
    Route("/api/projects/{project_id:int}/messages", list_messages, methods=["GET"]),
    Route("/api/projects/{project_id:int}/messages", post_message, methods=["POST"]),
    Route("/api/projects/{project_id:int}/invites", create_invite, methods=["POST"]),
    Route("/api/projects/{project_id:int}/audit", audit_log),
    Route("/api/messages/{message_id:int}", message_detail),
    Route("/api/messages/{message_id:int}/reactions", post_reaction, methods=["POST"]),
]
