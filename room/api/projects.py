"""Projects over HTTP: who you are and your projects (``/api/me``), a new project, one project
with its members, an invite link, the audit log."""

from __future__ import annotations

import sqlite3
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from room.actions import auth as auth_actions
from room.actions import projects as project_actions
from room.actions import workspaces as workspace_actions
from room.actions.project_settings import settings_wire
from room.agents import Scheduler
from room.api.requests import body_of, core_of, identity, member_in, path_id
from room.errors import ForbiddenError
from room.rules.entities import Project
from room.rules.lifecycle import ActorKind
from room.rules.ops import members_for, project_for, viewer_kind
from room.store import audit as audit_store
from room.store import members as members_store
from room.store import messages as messages_store
from room.store import notifications as notifications_store
from room.store import projects as projects_store


async def me(request: Request) -> Response:
    who = await identity(request)
    core = core_of(request)
    unread: dict[int, tuple[int, int]] = {}
    levels: dict[int, str] = {}
    if who.user is not None:
        user_id = who.user.id

        def read(
            conn: sqlite3.Connection,
        ) -> tuple[list[Project], dict[int, tuple[int, int]], set[int], dict[int, str]]:
            return (
                projects_store.list_for_user(conn, user_id),
                messages_store.unread_for_user(conn, user_id),
                members_store.owned_projects(conn, user_id),
                notifications_store.levels_for_user(conn, user_id),
            )

        projects, unread, owned, levels = await core.db.read(read)
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
                # ``notify``: your notification level here (docs/protocol.md, "Notifications").
                | {"notify": levels.get(p.id, notifications_store.DEFAULT_LEVEL)}
                for p in projects
            ],
            # The trash shows how long a project is kept restorable; nothing is purged by itself.
            "trash_retention_days": core.settings.trash_retention_days,
            # Setting project_creators: whether POST /api/projects would be allowed.
            "may_create_projects": who.user is not None
            and project_actions.may_create_projects(core.settings, who.user),
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
    Route("/api/me", me),
    Route("/api/projects", create_project, methods=["POST"]),
    Route("/api/projects/{project_id:int}", get_project),
    Route("/api/projects/{project_id:int}/invites", create_invite, methods=["POST"]),
    Route("/api/projects/{project_id:int}/audit", audit_log),
]
