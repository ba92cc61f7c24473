"""Agent endpoints: providers, members and their routes, member operations, usage, the loop
brake and the recovery report."""

from __future__ import annotations

import sqlite3
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    field_validator,
)
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from room.actions import auth as auth_actions
from room.actions import brakes as brake_actions
from room.actions import members as member_actions
from room.actions import project_settings as settings_actions
from room.actions import routes as route_actions
from room.actions import turns as turn_actions
from room.actions.projects import AgentSpec
from room.agents import Scheduler
from room.agents.presets import PRESETS
from room.agents.turn import resolve_config
from room.api.requests import body_of, core_of, identity, member_in, path_id
from room.errors import BadRequestError, ForbiddenError, NotFoundError
from room.rules.entities import iso
from room.rules.ops import member_for
from room.rules.routing import SOURCE_LABELS
from room.store import Tx
from room.store import brakes as brakes_store
from room.store import checkpoints as checkpoints_store
from room.store import members as members_store
from room.store import projects as projects_store
from room.store import routes as routes_store
from room.store import turns as turns_store
from room.store import usage as usage_store


def _runtime(request: Request) -> Scheduler:
    runtime = core_of(request).agents
    assert isinstance(runtime, Scheduler)
    return runtime


async def providers(request: Request) -> Response:
    await identity(request)
    refresh = request.query_params.get("refresh") == "1"
    statuses = await _runtime(request).registry.status(refresh=refresh)
    return JSONResponse({"providers": [s.to_dict() for s in statuses]})


def checkpoint_for(row: dict[str, Any] | None) -> dict[str, Any] | None:
    """The member's last task checkpoint as the card shows it (the prompt by message id)."""
    if row is None:
        return None
    keys = ("turn_id", "phase", "state", "step", "summary", "did", "next", "blocked")
    return {k: row[k] for k in keys} | {
        "last_tool": row["last_tool"],
        "pending_tools": row["pending_tools"],
        "pending_prompt": [{"message_id": p["message_id"], "seq": p["seq"]} for p in row["prompt"]],
        "at": iso(row["created_at"]),
    }


async def member_detail(request: Request) -> Response:
    """A member as the UI's member card shows it: route (and where it comes from), the route
    actually observed on its last real request, its tools, its current turn."""
    who = await identity(request)
    core = core_of(request)
    project_id = path_id(request, "project_id")
    viewer = await member_in(core, who, project_id)
    roster = await core.rosters.get(project_id)
    member = roster.member(path_id(request, "member_id"))
    if member is None:
        raise NotFoundError("no such member in this project", code="no_member")
    state = await core.db.read(lambda conn: projects_store.state_of(conn, project_id))
    data: dict[str, Any] = {"member": member_for(member, state or "purged", viewer)}
    if member.kind == "agent":
        runtime = _runtime(request)

        def read(conn: Any) -> Any:
            return (
                routes_store.settings(conn, project_id),
                usage_store.observed_route(conn, member.id),
                turns_store.last_turn(conn, member.id),
                checkpoints_store.latest(conn, member.id),
            )

        config, observed, last_turn, checkpoint = await core.db.read(read)
        route = resolve_config(config, member)
        data["route"] = {
            "model_id": route.model_id,
            "source": route.source.value,
            "label": SOURCE_LABELS[route.source].zh,
            "label_en": SOURCE_LABELS[route.source].en,
            "reason": route.reason,
            "pick_refused": route.pick_refused,
        }
        data["observed"] = observed
        data["last_turn"] = last_turn
        data["checkpoint"] = checkpoint_for(checkpoint)
        data["running"] = member.id in runtime.running_members(project_id)
        stored = await core.db.read(lambda conn: projects_store.settings(conn, project_id))
        work = runtime.member_tools(member, stored)
        data["member"] |= work
        data["tools"] = work["tools"]
    return JSONResponse(data)


class MemberIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: str
    handle: str
    display_name: str
    aliases: list[str] = Field(default_factory=list, max_length=8)
    driver: Literal["builtin", "external"] = "builtin"


async def add_member(request: Request) -> Response:
    who = await identity(request, mutation=True)
    core = core_of(request)
    actor = await member_in(core, who, path_id(request, "project_id"))
    data: MemberIn = await body_of(request, MemberIn)
    member = await member_actions.add_agent(
        core,
        actor,
        AgentSpec(data.role, data.handle, data.display_name, tuple(data.aliases)),
        data.driver,
    )
    state = await core.db.read(lambda conn: projects_store.state_of(conn, actor.project_id))
    return JSONResponse({"member": member_for(member, state or "purged", actor)}, status_code=201)


async def member_op(request: Request) -> Response:
    who = await identity(request, mutation=True)
    core = core_of(request)
    actor = await member_in(core, who, path_id(request, "project_id"))
    result = await member_actions.member_op(
        core, actor, path_id(request, "member_id"), request.path_params["op"]
    )
    return JSONResponse(result)


async def member_token(request: Request) -> Response:
    """An owner rotates (POST: older tokens revoked, one new token returned once) or revokes
    (DELETE) an agent member's bearer tokens; the handle, session and tasks stay. Sockets opened
    with a revoked token close at once."""
    who = await identity(request, mutation=True)
    core = core_of(request)
    project_id = path_id(request, "project_id")
    actor = await member_in(core, who, project_id)
    if not actor.is_owner:
        raise ForbiddenError("only a project owner manages agent tokens", code="not_owner")
    target_id = path_id(request, "member_id")

    def job(conn: sqlite3.Connection, tx: Tx) -> dict[str, Any]:
        projects_store.require_open(conn, project_id)
        member = members_store.get(conn, target_id)
        if member is None or member.project_id != project_id:
            raise NotFoundError("no such member in this project", code="no_member")
        kind, actor_id = actor.kind, actor.id
        if request.method == "DELETE":
            revoked = auth_actions.revoke_agent_tokens(
                conn, tx, member, actor_kind=kind, actor_id=actor_id
            )
            return {"revoked": revoked}
        token = auth_actions.rotate_agent_token(
            conn, tx, member, actor_kind=kind, actor_id=actor_id
        )
        return {"token": token}

    return JSONResponse(await core.db.write(job, locks=(project_id,)))


async def get_routes(request: Request) -> Response:
    who = await identity(request)
    core = core_of(request)
    project_id = path_id(request, "project_id")
    await member_in(core, who, project_id)

    def read(conn: Any) -> Any:
        return (
            routes_store.settings(conn, project_id),
            routes_store.config_version(conn, project_id),
            routes_store.history(conn, project_id),
        )

    settings, version, history = await core.db.read(read)
    return JSONResponse(
        {
            "config_version": version,
            "settings": [
                {"scope": scope, "target": target, **value}
                for (scope, target), value in sorted(settings.items())
            ],
            "history": history,
        }
    )


class RouteIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    scope: Literal["project", "role", "member", "pool", "pool_pick"]
    target: str = ""
    value: str | None
    reason: str


async def change_route(request: Request) -> Response:
    who = await identity(request, mutation=True)
    core = core_of(request)
    actor = await member_in(core, who, path_id(request, "project_id"))
    data: RouteIn = await body_of(request, RouteIn)
    result = await route_actions.change_route(
        core, actor, scope=data.scope, target=data.target, value=data.value, reason=data.reason
    )
    return JSONResponse(result)


async def usage(request: Request) -> Response:
    who = await identity(request)
    core = core_of(request)
    project_id = path_id(request, "project_id")
    await member_in(core, who, project_id)
    data = await core.db.read(lambda conn: usage_store.usage(conn, project_id))
    return JSONResponse(data)


async def get_brake(request: Request) -> Response:
    who = await identity(request)
    core = core_of(request)
    project_id = path_id(request, "project_id")
    await member_in(core, who, project_id)
    brake = await core.db.read(lambda conn: brakes_store.brake(conn, project_id))
    limits = await turn_actions.limits(core, project_id)
    roster = await core.rosters.get(project_id)
    held = brake["held"]
    return JSONResponse(
        {
            "brake": {
                **brake,
                # Whom the brake holds: null while it is clear or when it holds the whole project.
                "held_members": None
                if held is None
                else [
                    {"id": m.id, "handle": m.handle}
                    for m in (roster.member(i) for i in held)
                    if m is not None
                ],
                "limits": {
                    "agent_turn_cap": limits.agent_turn_cap,
                    "token_budget": limits.token_budget,
                    "max_steps": limits.max_steps,
                },
            }
        }
    )


async def clear_brake(request: Request) -> Response:
    who = await identity(request, mutation=True)
    core = core_of(request)
    project_id = path_id(request, "project_id")
    actor = await member_in(core, who, project_id)
    if actor.kind != "human":
        raise ForbiddenError("only a person clears the loop brake", code="human_only")
    brake = await brake_actions.clear_brake(core, project_id, actor.id)
    return JSONResponse({"brake": brake})


class LimitsIn(BaseModel):
    """Each field given sets that limit; ``null`` removes it (back to the server's default).
    Strict integers: ``"5"``, ``5.0`` and ``true`` are refused, not coerced."""

    model_config = ConfigDict(extra="forbid")
    agent_turn_cap: StrictInt | None = Field(default=None, ge=1, le=10_000)
    token_budget: StrictInt | None = Field(default=None, ge=1)
    max_steps: StrictInt | None = Field(default=None, ge=1, le=100)


async def set_limits(request: Request) -> Response:
    who = await identity(request, mutation=True)
    core = core_of(request)
    project_id = path_id(request, "project_id")
    actor = await member_in(core, who, project_id)
    if not actor.is_owner:
        raise ForbiddenError("only a project owner sets limits", code="not_owner")
    data: LimitsIn = await body_of(request, LimitsIn)
    given = {k: v for k, v in data.model_dump().items() if k in data.model_fields_set}
    values = {k: v for k, v in given.items() if v is not None}
    removed = [k for k, v in given.items() if v is None]

    def job(conn: sqlite3.Connection, tx: Tx) -> dict[str, Any]:
        projects_store.require_open(conn, project_id)
        return projects_store.update_settings(conn, project_id, values, tx.now, remove=removed)

    result = await core.db.write(job, locks=(project_id,))
    return JSONResponse({"limits": result})


class WorkLimitsIn(BaseModel):
    """Per-project overrides of the work limits; ``null`` goes back to the server's default."""

    model_config = ConfigDict(extra="forbid")
    tool_calls_per_turn: StrictInt | None = Field(default=None, ge=1, le=1000)
    command_timeout_secs: StrictInt | StrictFloat | None = Field(default=None, gt=0, le=3600)
    command_output_bytes: StrictInt | None = Field(default=None, ge=256, le=1024 * 1024)
    command_secs_per_turn: StrictInt | StrictFloat | None = Field(default=None, gt=0, le=86_400)
    workspace_disk_mib: StrictInt | None = Field(default=None, ge=1, le=16 * 1024 * 1024)


class ProjectSettingsIn(BaseModel):
    """``PATCH /api/projects/{id}/settings``: each field given is changed, the rest kept."""

    model_config = ConfigDict(extra="forbid")
    network: StrictBool | None = None
    unsandboxed: StrictBool | None = None
    read_only_roles: list[str] | None = Field(default=None, max_length=len(PRESETS))
    limits: WorkLimitsIn | None = None
    # checked by room.rules.merging (structured ``bad_merge_ignore``); null: the default list
    merge_ignore: list[Any] | None = Field(default=None, max_length=1000)

    @field_validator("read_only_roles")
    @classmethod
    def _known_roles(cls, roles: list[str] | None) -> list[str] | None:
        unknown = sorted(set(roles or ()) - PRESETS.keys())
        if unknown:
            raise ValueError(f"unknown roles {unknown}; roles are {sorted(PRESETS)}")
        return roles


async def patch_settings(request: Request) -> Response:
    who = await identity(request, mutation=True)
    core = core_of(request)
    actor = await member_in(core, who, path_id(request, "project_id"))
    data: ProjectSettingsIn = await body_of(request, ProjectSettingsIn)
    changes: dict[str, Any] = {}
    for key in data.model_fields_set:
        value = getattr(data, key)
        if key == "limits":
            if value is None:
                raise BadRequestError("limits: give an object of limits", code="bad_body")
            changes["limits"] = {k: getattr(value, k) for k in value.model_fields_set}
        elif key == "merge_ignore":
            changes[key] = value
        elif value is None:
            raise BadRequestError(f"{key}: null is not a value here", code="bad_body")
        else:
            changes[key] = value
    if not changes:
        raise BadRequestError("nothing to change", code="bad_body")
    settings = await settings_actions.change_settings(core, actor, changes)
    return JSONResponse({"settings": settings})


async def recovery(request: Request) -> Response:
    """What the last start-up reconciled, across every project: for server admins only."""
    who = await identity(request)
    if who.user is None or not who.user.is_admin:
        raise ForbiddenError("only a server admin reads the recovery report", code="admin_only")
    return JSONResponse(_runtime(request).recovery)


endpoints = [
    Route("/api/providers", providers),
    Route("/api/recovery", recovery),
    Route("/api/projects/{project_id:int}/members", add_member, methods=["POST"]),
    Route("/api/projects/{project_id:int}/members/{member_id:int}", member_detail),
    Route(
        "/api/projects/{project_id:int}/members/{member_id:int}/token",
        member_token,
        methods=["POST", "DELETE"],
    ),
    Route(
        "/api/projects/{project_id:int}/members/{member_id:int}/{op:str}",
        member_op,
        methods=["POST"],
    ),
    Route("/api/projects/{project_id:int}/routes", get_routes, methods=["GET"]),
    Route("/api/projects/{project_id:int}/routes", change_route, methods=["POST"]),
    Route("/api/projects/{project_id:int}/usage", usage),
    Route("/api/projects/{project_id:int}/brake", get_brake, methods=["GET"]),
    Route("/api/projects/{project_id:int}/brake/clear", clear_brake, methods=["POST"]),
    Route("/api/projects/{project_id:int}/limits", set_limits, methods=["POST"]),
    Route("/api/projects/{project_id:int}/settings", patch_settings, methods=["PATCH"]),
]
