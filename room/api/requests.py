"""What every endpoint reads from its request: who is asking (:func:`identity`, with the CSRF check
for a mutation; :func:`member_in` a project), the ids in its path, and its JSON body, read within
the request limit and validated.

Cookie-authenticated mutations need the session's CSRF token (``X-CSRF-Token``); bearer tokens
don't. Errors are ``{"error": {"code", "message", "details"?}}`` with the error's HTTP status.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from pydantic import BaseModel, Field, ValidationError
from starlette.requests import Request

from room.auth import Identity, check_csrf, identity_from_headers
from room.errors import AuthError, BadRequestError, ForbiddenError, ForgedAuthorError, NotFoundError
from room.infra.bodies import check_text, read_body
from room.rules.entities import Member
from room.rules.protocol import AUTHOR_FIELDS
from room.services import Services
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


async def message_of(
    request: Request, *, mutation: bool = False
) -> tuple[Services, Member, int, dict[str, Any]]:
    """The message named by the path's ``message_id`` and the caller's membership of its
    project: ``(core, member, message_id, row)``; ``no_message`` when there is none, and
    ``not_member`` as :func:`member_in` says."""
    who = await identity(request, mutation=mutation)
    core = core_of(request)
    message_id = path_id(request, "message_id")
    row = await core.db.read(lambda conn: messages_store.get_row(conn, message_id))
    if row is None:
        raise NotFoundError("没有这条消息 (No such message.)", code="no_message")
    member = await member_in(core, who, int(row["project_id"]))
    return core, member, message_id, row
