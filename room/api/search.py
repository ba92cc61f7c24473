"""``GET /api/projects/{id}/search``: full-text search of one project; ``GET /api/search``:
across all of the person's projects, with operators (docs/search.md)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from room.actions import search as search_actions
from room.actions import search_all
from room.api.requests import core_of, identity, member_in, path_id
from room.errors import BadRequestError, ForbiddenError
from room.store.search import DEFAULT_LIMIT, MAX_LIMIT


async def search(request: Request) -> Response:
    """``?q=&kind=&author=&since=&until=&limit=``: ``kind`` may repeat or be comma-separated,
    ``author`` is a member id or handle, times are epoch seconds or ISO 8601."""
    who = await identity(request)
    core = core_of(request)
    project_id = path_id(request, "project_id")
    member = await member_in(core, who, project_id)
    params = request.query_params
    kinds = [k.strip() for value in params.getlist("kind") for k in value.split(",") if k.strip()]
    try:
        limit = int(params.get("limit", str(DEFAULT_LIMIT)))
    except ValueError:
        raise BadRequestError("limit is an integer", code="bad_limit") from None
    if not 1 <= limit <= MAX_LIMIT:
        raise BadRequestError(f"limit is 1–{MAX_LIMIT}", code="bad_limit", max=MAX_LIMIT)
    body = await search_actions.search(
        core,
        member,
        params.get("q", ""),
        kinds=kinds or None,
        by=params.get("author"),
        since=params.get("since"),
        until=params.get("until"),
        limit=limit,
        markdown=True,
    )
    return JSONResponse(body)


def _limit(request: Request) -> int:
    try:
        limit = int(request.query_params.get("limit", str(DEFAULT_LIMIT)))
    except ValueError:
        raise BadRequestError("limit is an integer", code="bad_limit") from None
    if not 1 <= limit <= MAX_LIMIT:
        raise BadRequestError(f"limit is 1–{MAX_LIMIT}", code="bad_limit", max=MAX_LIMIT)
    return limit


async def search_everywhere(request: Request) -> Response:
    """``?q=&project=&kind=&limit=``: the person's projects (``project`` — repeatable or
    comma-separated ids — narrows them, as ``in:`` does inside ``q``); people only."""
    who = await identity(request)
    if who.user is None:
        raise ForbiddenError("cross-project search is for people", code="human_only")
    params = request.query_params
    kinds = [k.strip() for value in params.getlist("kind") for k in value.split(",") if k.strip()]
    ids: list[int] = []
    for value in params.getlist("project"):
        for part in value.split(","):
            if part.strip():
                if not part.strip().isdigit():
                    raise BadRequestError("project is a project id", code="bad_project")
                ids.append(int(part))
    body = await search_all.search_projects(
        core_of(request),
        who.user.id,
        params.get("q", ""),
        project_ids=ids or None,
        kinds=kinds or None,
        limit=_limit(request),
    )
    return JSONResponse(body)


endpoints = [
    Route("/api/projects/{project_id:int}/search", search, methods=["GET"]),
    Route("/api/search", search_everywhere, methods=["GET"]),
]
