"""Lifecycle endpoints (people with the owner role only; every attempt audited)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from room.actions import lifecycle as lifecycle_actions
from room.actions import members as member_actions
from room.actions import purge as purge_actions
from room.api.requests import body_of, core_of, identity, member_in, path_id
from room.errors import ForbiddenError


class LifecycleIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    op: str
    reason: str | None = Field(default=None, max_length=2000)
    actual_hours: float | Literal["unknown"] | None = None


async def lifecycle(request: Request) -> Response:
    who = await identity(request, mutation=True)
    core = core_of(request)
    project_id = path_id(request, "project_id")
    actor = await member_in(core, who, project_id)
    data: LifecycleIn = await body_of(request, LifecycleIn)
    result = await lifecycle_actions.run(
        core, actor, project_id, data.op, reason=data.reason, actual_hours=data.actual_hours
    )
    return JSONResponse(result)


async def cleanup_preview(request: Request) -> Response:
    who = await identity(request)
    core = core_of(request)
    project_id = path_id(request, "project_id")
    actor = await member_in(core, who, project_id)
    if not actor.is_owner:
        raise ForbiddenError("only a project owner sees the cleanup preview", code="not_owner")
    result = await purge_actions.cleanup_preview(core, project_id)
    return JSONResponse(result)


class PurgeIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    confirm_name: str
    confirmed: bool = False


async def purge(request: Request) -> Response:
    who = await identity(request, mutation=True)
    core = core_of(request)
    project_id = path_id(request, "project_id")
    actor = await member_in(core, who, project_id)
    data: PurgeIn = await body_of(request, PurgeIn)
    result = await purge_actions.purge(
        core, actor, project_id, confirm_name=data.confirm_name, confirmed=data.confirmed
    )
    return JSONResponse(result, status_code=200 if result["failed"] is None else 500)


class RoleIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: Literal["owner", "member"]


async def set_role(request: Request) -> Response:
    who = await identity(request, mutation=True)
    core = core_of(request)
    project_id = path_id(request, "project_id")
    actor = await member_in(core, who, project_id)
    data: RoleIn = await body_of(request, RoleIn)
    result = await member_actions.set_role(core, actor, path_id(request, "member_id"), data.role)
    return JSONResponse(result)


endpoints = [
    Route("/api/projects/{project_id:int}/lifecycle", lifecycle, methods=["POST"]),
    Route("/api/projects/{project_id:int}/cleanup-preview", cleanup_preview),
    Route("/api/projects/{project_id:int}/purge", purge, methods=["POST"]),
    Route(
        "/api/projects/{project_id:int}/members/{member_id:int}/role", set_role, methods=["POST"]
    ),
]
