"""A cluster's project homes over HTTP (docs/cluster.md, "Agents across nodes"): a server admin
moves a project's home node, as ``room cluster move`` does."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from room.actions import leases as lease_actions
from room.api.requests import body_of, core_of, identity, path_id
from room.errors import ConflictError, ForbiddenError


class HomeIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    node: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")


async def move_home(request: Request) -> Response:
    """``PUT /api/projects/{id}/home`` ``{"node": …}``: the project's agents run on ``node``
    from its next sweep on (the old home's running turn finishes first)."""
    who = await identity(request, mutation=True)
    if who.user is None or not who.user.is_admin:
        raise ForbiddenError("only a server admin moves a project's home node", code="admin_only")
    core = core_of(request)
    project_id = path_id(request, "project_id")
    data: HomeIn = await body_of(request, HomeIn)
    if core.relay is None:
        raise ConflictError(
            "home nodes are a cluster's: this server's database is its own (SQLite)",
            code="not_a_cluster",
        )
    moved, before = await core.db.write(
        lambda conn, tx: lease_actions.move_home(
            conn, tx, str(project_id), data.node, by=who.user.id if who.user else None
        ),
        locks=(project_id,),
    )
    return JSONResponse({"project_id": moved, "home_node": data.node, "was": before})


endpoints = [
    Route("/api/projects/{project_id:int}/home", move_home, methods=["PUT"]),
]
