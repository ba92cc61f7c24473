"""Wire frames of ``/ws``: one discriminated union for client frames, validated once at the edge.

Every frame type (both directions) is documented in ``docs/protocol.md``; a test fails when one
is missing there. No client frame can name an author: the author is the authenticated
connection, and a frame carrying an author-like field is refused as ``forged_author``.
"""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, model_validator

from room.errors import ForgedAuthorError, FrameError

MAX_HISTORY_LIMIT = 200
MAX_CHIPS = 50
# A search frame's query may be long enough to be refused as too long (``bad_query``) rather
# than as a bad frame; room.rules.searchtext.MAX_QUERY_CHARS is the real limit.
MAX_SEARCH_QUERY_CHARS = 4000
MAX_SEARCH_LIMIT = 100
MAX_ATTACHMENTS = 10  # room.rules.attachments.MAX_PER_MESSAGE

# Field names that would let a client claim to be someone; refused wherever they appear.
AUTHOR_FIELDS = frozenset(
    {
        "author",
        "author_id",
        "sender",
        "sender_id",
        "from",
        "from_id",
        "user",
        "user_id",
        "as_member",
    }
)

MAX_REQ_ID_CHARS = 64
ReqId = Annotated[str | None, Field(default=None, max_length=MAX_REQ_ID_CHARS)]
Id = Annotated[int, Field(ge=1, le=2**62)]


class _Frame(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    req_id: ReqId = None


class AuthFrame(_Frame):
    type: Literal["auth"]
    token: str = Field(min_length=1, max_length=512)


class SubscribeFrame(_Frame):
    type: Literal["subscribe"]
    project_id: Id
    since: int | None = Field(default=None, ge=0)
    epoch: int | None = Field(default=None, ge=1)


class UnsubscribeFrame(_Frame):
    type: Literal["unsubscribe"]
    project_id: Id


class SendFrame(_Frame):
    type: Literal["send"]
    project_id: Id
    client_txn_id: str = Field(min_length=1, max_length=64)
    body: str = ""
    reply_to: Id | None = None
    chips: list[Id] = Field(default_factory=list, max_length=MAX_CHIPS)
    as_plain_text: bool = False
    # Upload ids (POST /api/projects/{id}/attachments): the sender's own, not yet sent.
    attachments: list[Id] = Field(default_factory=list, max_length=MAX_ATTACHMENTS)

    @model_validator(mode="after")
    def _something(self) -> SendFrame:
        if not self.body and not self.attachments:
            raise ValueError("a message needs some text or an attachment")
        return self


class EditFrame(_Frame):
    type: Literal["edit"]
    project_id: Id
    message_id: Id
    body: str = Field(min_length=1)
    as_plain_text: bool = False


class DeleteFrame(_Frame):
    type: Literal["delete"]
    project_id: Id
    message_id: Id


class ReactFrame(_Frame):
    """Add (or, with ``remove``, take back) one's emoji reaction on a message."""

    type: Literal["react"]
    project_id: Id
    message_id: Id
    emoji: str = Field(min_length=1, max_length=64)
    remove: bool = False


class HistoryFrame(_Frame):
    type: Literal["history"]
    project_id: Id
    before: int | None = Field(default=None, ge=1)
    limit: int = Field(default=50, ge=1, le=MAX_HISTORY_LIMIT)


class TypingFrame(_Frame):
    type: Literal["typing"]
    project_id: Id
    active: bool = True


class ReadFrame(_Frame):
    """Move my read cursor forward to ``seq``; with ``unread``, back to exactly ``seq`` ("mark
    as unread": the messages after it count as unread again)."""

    type: Literal["read"]
    project_id: Id
    seq: int = Field(ge=0)
    unread: bool = False


class PreviewFrame(_Frame):
    type: Literal["preview"]
    project_id: Id
    body: str
    chips: list[Id] = Field(default_factory=list, max_length=MAX_CHIPS)


class ReceiptsFrame(_Frame):
    type: Literal["receipts"]
    project_id: Id
    message_id: Id


class ReceivedFrame(_Frame):
    type: Literal["received"]
    delivery_ids: list[Id] = Field(min_length=1, max_length=500)


class ConsumeFrame(_Frame):
    type: Literal["consume"]
    delivery_ids: list[Id] = Field(min_length=1, max_length=500)
    mode: Literal["queue", "steer"] = "queue"


class RedeliverFrame(_Frame):
    type: Literal["redeliver"]
    delivery_ids: list[Id] = Field(min_length=1, max_length=500)


class SearchFrame(_Frame):
    """Full-text search of a project (docs/search.md). ``by`` filters by author (a member id or
    handle; an ``author`` field would be refused as ``forged_author``)."""

    type: Literal["search"]
    project_id: Id
    q: str = Field(max_length=MAX_SEARCH_QUERY_CHARS)
    kind: (
        list[Annotated[str, Field(max_length=32)]] | Annotated[str, Field(max_length=200)] | None
    ) = Field(default=None, max_length=16)
    by: Id | Annotated[str, Field(max_length=64)] | None = None
    since: Annotated[str, Field(max_length=40)] | float | None = None
    until: Annotated[str, Field(max_length=40)] | float | None = None
    limit: int = Field(default=20, ge=1, le=MAX_SEARCH_LIMIT)


class PingFrame(_Frame):
    type: Literal["ping"]


ClientFrame = Annotated[
    AuthFrame
    | SubscribeFrame
    | UnsubscribeFrame
    | SendFrame
    | EditFrame
    | DeleteFrame
    | ReactFrame
    | HistoryFrame
    | TypingFrame
    | ReadFrame
    | PreviewFrame
    | ReceiptsFrame
    | ReceivedFrame
    | ConsumeFrame
    | RedeliverFrame
    | SearchFrame
    | PingFrame,
    Field(discriminator="type"),
]

_ADAPTER: TypeAdapter[ClientFrame] = TypeAdapter(ClientFrame)

CLIENT_FRAME_TYPES: tuple[str, ...] = (
    "auth",
    "subscribe",
    "unsubscribe",
    "send",
    "edit",
    "delete",
    "react",
    "history",
    "typing",
    "read",
    "preview",
    "receipts",
    "received",
    "consume",
    "redeliver",
    "search",
    "ping",
)

SERVER_FRAME_TYPES: tuple[str, ...] = (
    "hello",
    "subscribed",
    "unsubscribed",
    "message",
    "message_updated",
    "batch",
    "ack",
    "history",
    "typing",
    "read",
    "preview",
    "receipts",
    "delivery",
    "inbox",
    "members",
    "project",
    "presence",
    "unread",
    "tasks",
    "decisions",
    "memory",
    "draft",
    "resync_required",
    "search_results",
    "pong",
    "error",
)


# Cheap pre-check: only a frame whose text contains one of these can name an author field.
_AUTHOR_HINTS = ('"author', '"sender', '"from', '"user', '"as_member')
_AUTHOR_HINT = re.compile("|".join(re.escape(hint) for hint in _AUTHOR_HINTS))  # one C scan


def req_id_of(text: str) -> str | None:
    """The ``req_id`` of a raw frame that failed to parse, when one can be read from it (a JSON
    object whose ``req_id`` is a string of at most 64 characters that is valid Unicode), so its
    error can echo it."""
    if '"req_id"' not in text:
        return None
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return None
    req_id = data.get("req_id") if isinstance(data, dict) else None
    if not isinstance(req_id, str) or len(req_id) > MAX_REQ_ID_CHARS:
        return None
    try:  # json.loads reads "\ud800" as a lone surrogate, which no frame can carry back
        req_id.encode("utf-8")
    except UnicodeEncodeError:
        return None
    return req_id


def parse_client_frame(text: str) -> ClientFrame:
    """Decode and validate one client frame, or raise :class:`FrameError`/:class:`ForgedAuthorError`."""
    if _AUTHOR_HINT.search(text):
        try:
            data = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise FrameError(f"not JSON: {exc}") from None
        forged = AUTHOR_FIELDS.intersection(data) if isinstance(data, dict) else set()
        if forged:
            raise ForgedAuthorError(
                "the author is bound from your connection; frames may not name one",
                fields=sorted(forged),
            )
    try:
        # One pass from text to model (the common case: no second decode).
        return _ADAPTER.validate_json(text)
    except ValidationError as exc:
        first = exc.errors()[0]
        kind = first["type"]
        if kind == "json_invalid":
            raise FrameError(f"not JSON: {first['msg']}") from None
        if kind == "union_tag_invalid":
            raise FrameError(
                "unknown frame type", known=list(CLIENT_FRAME_TYPES), got=first["ctx"].get("tag")
            ) from None
        if kind == "union_tag_not_found" or not first["loc"]:
            raise FrameError("a frame is a JSON object with a 'type'") from None
        raise FrameError(_describe(exc), errors=_errors(exc)) from None


def _describe(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "frame"
    return f"{where}: {first['msg']}"


def _errors(exc: ValidationError) -> list[dict[str, Any]]:
    return [
        {"loc": [str(p) for p in e["loc"]], "msg": e["msg"], "type": e["type"]}
        for e in exc.errors()[:10]
    ]


def encode(frame: Any) -> str:
    return json.dumps(frame, ensure_ascii=False, separators=(",", ":"))


def error_frame(
    code: str, message: str, req_id: str | None = None, **details: Any
) -> dict[str, Any]:
    frame: dict[str, Any] = {"type": "error", "code": code, "message": message}
    if req_id is not None:
        frame["req_id"] = req_id
    if details:
        frame["details"] = details
    return frame
