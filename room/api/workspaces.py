"""A project's workspace and its task worktrees over HTTP: setting the workspace (owners), the
kept worktrees (members), a task attempt's diff (members) and merging it (owners)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from room.actions import attempt_merge
from room.actions import attempts as attempt_actions
from room.actions import workspaces as workspace_actions
from room.api.requests import body_of, core_of, identity, member_in, path_id
from room.rules.entities import Member

MAX_MERGE_PATHS = 10_000


class WorkspaceIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str | None = Field(default=None, max_length=workspace_actions.MAX_PATH_CHARS)


class MergeIn(BaseModel):
    """``paths``: the changed files to merge, as the review lists them (absent: the ones the
    task's evidence cites); ``digest``: the review's, to refuse a merge of changes not seen."""

    model_config = ConfigDict(extra="forbid")
    mode: Literal["ff", "merge"] = "ff"
    paths: list[Annotated[str, StringConstraints(min_length=1, max_length=4096)]] | None = Field(
        default=None, max_length=MAX_MERGE_PATHS
    )
    digest: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")


async def _member(request: Request, *, mutation: bool = False) -> Member:
    who = await identity(request, mutation=mutation)
    return await member_in(core_of(request), who, path_id(request, "project_id"))


async def put_workspace(request: Request) -> Response:
    member = await _member(request, mutation=True)
    data: WorkspaceIn = await body_of(request, WorkspaceIn)
    return JSONResponse(await workspace_actions.set_workspace(core_of(request), member, data.path))


async def get_worktrees(request: Request) -> Response:
    member = await _member(request)
    return JSONResponse(await attempt_actions.list_worktrees(core_of(request), member))


async def get_diff(request: Request) -> Response:
    member = await _member(request)
    task = request.path_params["task"]
    return JSONResponse(await attempt_merge.task_diff(core_of(request), member, task))


async def post_merge(request: Request) -> Response:
    member = await _member(request, mutation=True)
    data: MergeIn = await body_of(request, MergeIn)
    task = request.path_params["task"]
    answer = await attempt_merge.merge_task(
        core_of(request), member, task, data.mode, data.paths, data.digest
    )
    return JSONResponse(answer)


# Before the tasks' generic ``/tasks/{task}/{event}`` route.
endpoints = [
    Route("/api/projects/{project_id:int}/workspace", put_workspace, methods=["PUT"]),
    Route("/api/projects/{project_id:int}/worktrees", get_worktrees, methods=["GET"]),
    Route("/api/projects/{project_id:int}/tasks/{task}/diff", get_diff, methods=["GET"]),
    Route("/api/projects/{project_id:int}/tasks/{task}/merge", post_merge, methods=["POST"]),
]
