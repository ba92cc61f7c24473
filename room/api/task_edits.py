"""Tasks by hand (``docs/tasks.md`` "Tasks by hand"): create, edit, reorder, move a card.

Bodies are read as JSON objects and their task fields handed whole to the rules, which report
every problem at once with the ``field`` it concerns (a plan item's own validator for a new task,
:mod:`room.rules.taskedits` for an edit). Must be routed before the generic task event endpoint
(``…/tasks/{task}/{event}``), which would otherwise take ``…/move``.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from room.actions import task_edits
from room.api.requests import core_of, identity, json_body, member_in, path_id
from room.errors import BadRequestError
from room.rules.entities import Member

_DATES = ("est_start", "est_end")


async def _member(request: Request) -> Member:
    who = await identity(request, mutation=True)
    return await member_in(core_of(request), who, path_id(request, "project_id"))


async def _object(request: Request) -> dict[str, Any]:
    data = await json_body(request)
    if not isinstance(data, dict):
        raise BadRequestError("需要一个 JSON 对象 (A JSON object is needed.)", code="bad_body")
    return data


def _split_dates(data: dict[str, Any]) -> dict[str, Any]:
    return {name: data.pop(name) for name in _DATES if name in data}


def _text(data: dict[str, Any], name: str, limit: int) -> str | None:
    value = data.get(name)
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > limit:
        raise BadRequestError(
            f"{name} 应是最多 {limit} 字的文本 ({name} is text of at most {limit} characters.)",
            code="bad_body",
            field=name,
        )
    return value


async def post_task(request: Request) -> Response:
    member = await _member(request)
    data = await _object(request)
    dates = _split_dates(data)
    start = data.pop("start", None)
    if start is not None and not isinstance(start, bool):
        raise BadRequestError("start 应是 true/false (start is a boolean.)", code="bad_body",
                              field="start")  # fmt: skip
    result = await task_edits.create_task(core_of(request), member, data, start=start, **dates)
    return JSONResponse(result, status_code=201)


async def patch_task(request: Request) -> Response:
    member = await _member(request)
    data = await _object(request)
    dates = _split_dates(data)
    result = await task_edits.edit_task(
        core_of(request), member, request.path_params["task"], data, **dates
    )
    return JSONResponse({"task": result})


async def put_order(request: Request) -> Response:
    member = await _member(request)
    data = await _object(request)
    return JSONResponse(await task_edits.reorder_tasks(core_of(request), member, data.get("keys")))


async def post_move(request: Request) -> Response:
    member = await _member(request)
    data = await _object(request)
    to = _text(data, "to", 40)
    if to is None:
        raise BadRequestError("缺少 to (to is missing.)", code="bad_body", field="to")
    result = await task_edits.move_task(
        core_of(request), member, request.path_params["task"], to,
        reason=_text(data, "reason", 4000), owner=_text(data, "owner", 64),
    )  # fmt: skip
    return JSONResponse({"task": result})


endpoints = [
    Route("/api/projects/{project_id:int}/tasks", post_task, methods=["POST"]),
    Route("/api/projects/{project_id:int}/tasks/order", put_order, methods=["PUT"]),
    Route("/api/projects/{project_id:int}/tasks/{task}", patch_task, methods=["PATCH"]),
    Route("/api/projects/{project_id:int}/tasks/{task}/move", post_move, methods=["POST"]),
]
