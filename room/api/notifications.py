"""Notifications over HTTP: a person's level per project, and their inbox across projects
(docs/protocol.md, "Notifications")."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from room.actions import digest as digest_actions
from room.actions import notifications as notification_actions
from room.api.requests import body_of, core_of, identity, member_in, path_id
from room.errors import BadRequestError, ForbiddenError


class LevelIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    level: str


async def put_level(request: Request) -> Response:
    who = await identity(request, mutation=True)
    core = core_of(request)
    member = await member_in(core, who, path_id(request, "project_id"))
    data: LevelIn = await body_of(request, LevelIn)
    return JSONResponse(await notification_actions.set_level(core, member, data.level))


async def get_inbox(request: Request) -> Response:
    who = await identity(request)
    if who.user is None:
        raise ForbiddenError("the inbox is a person's", code="not_a_person")
    try:
        limit = int(request.query_params.get("limit", "50"))
    except ValueError:
        raise BadRequestError("limit is an integer", code="bad_query") from None
    return JSONResponse(await notification_actions.inbox(core_of(request), who.user.id, limit))


class ContactIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    email: str | None = None
    lang: str | None = None


async def get_contact(request: Request) -> Response:
    """Your email digest's address, its language, and whether this server sends digests."""
    who = await identity(request)
    if who.user is None:
        raise ForbiddenError("the digest is a person's", code="not_a_person")
    return JSONResponse(await digest_actions.contact(core_of(request), who.user.id))


async def put_contact(request: Request) -> Response:
    """Your email digest's address (null: none) and language (zh or en; absent: unchanged)."""
    who = await identity(request, mutation=True)
    if who.user is None:
        raise ForbiddenError("the digest is a person's", code="not_a_person")
    data: ContactIn = await body_of(request, ContactIn)
    return JSONResponse(
        await digest_actions.set_contact(core_of(request), who.user.id, data.email, data.lang)
    )


class LangIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    lang: str


async def put_lang(request: Request) -> Response:
    """The language your page shows (zh or en): your digest is written in it."""
    who = await identity(request, mutation=True)
    if who.user is None:
        raise ForbiddenError("a language is a person's", code="not_a_person")
    data: LangIn = await body_of(request, LangIn)
    return JSONResponse(await digest_actions.set_lang(core_of(request), who.user.id, data.lang))


endpoints = [
    Route("/api/me/digest", get_contact, methods=["GET"]),
    Route("/api/me/digest", put_contact, methods=["PUT"]),
    Route("/api/me/lang", put_lang, methods=["PUT"]),
    Route("/api/projects/{project_id:int}/notifications", put_level, methods=["PUT"]),
    Route("/api/inbox", get_inbox, methods=["GET"]),
]
