"""Messages over HTTP: a page of the timeline, a send, one message's deliveries and edits, a
reaction."""

from __future__ import annotations

import uuid
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from room.actions import deliveries as delivery_actions
from room.actions import messages as message_actions
from room.actions import reactions as reaction_actions
from room.actions import threads as thread_actions
from room.api.requests import RowId, body_of, core_of, identity, member_in, message_of, path_id
from room.errors import BadRequestError, NotFoundError
from room.rules.protocol import MAX_ATTACHMENTS, MAX_CHIPS, MAX_HISTORY_LIMIT
from room.store import deliveries as deliveries_store
from room.store import messages as messages_store


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
    core, member, message_id, row = await message_of(request)
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


async def retry_delivery(request: Request) -> Response:
    """Ask for a failed delivery again (docs/protocol.md, "Retrying a failed delivery"): a
    person of its project, or the message's sender; it is dispatched once more."""
    who = await identity(request, mutation=True)
    core = core_of(request)
    delivery_id = path_id(request, "delivery_id")
    facts = await core.db.read(lambda conn: deliveries_store.retry_facts(conn, delivery_id))
    if facts is None:
        raise NotFoundError("no such delivery", code="no_delivery")
    try:
        member = await member_in(core, who, int(facts["project_id"]))
    except NotFoundError:
        raise NotFoundError("no such delivery", code="no_delivery") from None
    return JSONResponse(await delivery_actions.retry_failed(core, member, delivery_id))


class ReactionIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    emoji: str = Field(min_length=1, max_length=64)
    remove: bool = False


async def post_reaction(request: Request) -> Response:
    """Add (or remove) your emoji reaction on a message (docs/protocol.md, "Reactions")."""
    core, member, message_id, _row = await message_of(request, mutation=True)
    data: ReactionIn = await body_of(request, ReactionIn)
    result = await reaction_actions.react(core, member, message_id, data.emoji, remove=data.remove)
    return JSONResponse(result)


async def get_thread(request: Request) -> Response:
    """A page of the thread of a message (its root or a reply in it): the root, the replies
    before ``before`` (a message id; none: the newest), oldest first (docs/protocol.md,
    "Threads")."""
    core, member, message_id, _row = await message_of(request)
    params = request.query_params
    try:
        before = int(params["before"]) if "before" in params else None
        limit = int(params.get("limit", "50"))
    except ValueError:
        raise BadRequestError("before and limit are integers", code="bad_query") from None
    return JSONResponse(await thread_actions.thread_page(core, member, message_id, before, limit))


class FollowIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    following: bool


async def put_follow(request: Request) -> Response:
    """Follow or stop following the thread of a message (a person only)."""
    core, member, message_id, _row = await message_of(request, mutation=True)
    data: FollowIn = await body_of(request, FollowIn)
    return JSONResponse(
        await thread_actions.set_following(core, member, message_id, data.following)
    )


endpoints = [
    Route("/api/projects/{project_id:int}/messages", list_messages, methods=["GET"]),
    Route("/api/projects/{project_id:int}/messages", post_message, methods=["POST"]),
    Route("/api/messages/{message_id:int}", message_detail),
    Route("/api/messages/{message_id:int}/reactions", post_reaction, methods=["POST"]),
    Route("/api/messages/{message_id:int}/thread", get_thread, methods=["GET"]),
    Route("/api/messages/{message_id:int}/thread/follow", put_follow, methods=["PUT"]),
    Route("/api/deliveries/{delivery_id:int}/retry", retry_delivery, methods=["POST"]),
]
