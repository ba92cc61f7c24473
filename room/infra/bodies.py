"""Request bodies read with a limit, and text that cannot be stored.

A body is refused (413 ``too_large``) as soon as its declared ``Content-Length`` or the bytes
streamed so far pass the endpoint's limit: nothing past the limit is ever held in memory, before or
after sign-in. :func:`body_into` reads a large body into the caller's own buffers. JSON may spell a lone surrogate (``"\\ud800"``), which no UTF-8 text can hold;
such a string is refused (400 ``bad_text``, naming where it was) instead of failing deep inside
the database driver.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from starlette.requests import Request

from room.errors import BadRequestError, PayloadTooLargeError


async def read_body(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise BadRequestError("Content-Length is not a number", code="bad_length")
        if int(declared) > limit:
            raise PayloadTooLargeError("request body too large", limit=limit)
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            raise PayloadTooLargeError("request body too large", limit=limit)
    return bytes(body)


BodyInto = Callable[[memoryview], Awaitable[int]]
# The server's own transport offers this (room.infra.transport.BODY_INTO): the body straight from
# the socket into the caller's buffer.
BODY_INTO = "room.body_into"


def body_into(request: Request) -> BodyInto:
    """``await fill(view)`` writes the next bytes of the request's body into ``view`` and returns
    how many: ``len(view)`` unless the body ends first, 0 once it has ended. Straight from the
    socket where the transport offers it (a body with a ``Content-Length``), else copied out of
    ``request.stream()``'s chunks (a chunked body, another server)."""
    direct: BodyInto | None = request.scope.get("extensions", {}).get(BODY_INTO)
    return direct if direct is not None else _StreamInto(request.stream())


class _StreamInto:
    def __init__(self, chunks: AsyncIterator[bytes]) -> None:
        self.chunks = chunks
        self.rest = memoryview(b"")  # of the last chunk, not yet handed out
        self.ended = False

    async def __call__(self, view: memoryview) -> int:
        filled = 0
        while filled < len(view):
            if not self.rest:
                if self.ended:
                    break
                try:
                    self.rest = memoryview(await anext(self.chunks))
                except StopAsyncIteration:
                    self.ended = True
                    break
            take = min(len(self.rest), len(view) - filled)
            view[filled : filled + take] = self.rest[:take]
            self.rest = self.rest[take:]
            filled += take
        return filled


def check_text(value: Any, where: str = "body") -> None:
    """Raise ``bad_text`` if any string (key or value) in ``value`` holds a lone surrogate."""
    if isinstance(value, str):
        if not value.isascii():
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise BadRequestError(
                    f"{where}: text holds a lone surrogate (not valid Unicode)",
                    code="bad_text",
                    field=where,
                ) from None
    elif isinstance(value, dict):
        for key, item in value.items():
            check_text(key, where)
            check_text(item, f"{where}.{key}" if where != "body" else str(key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            check_text(item, f"{where}.{index}")
