"""Request bodies read with a limit, and text that cannot be stored.

A body is refused (413 ``too_large``) as soon as its declared ``Content-Length`` or the bytes
streamed so far pass the route's limit: nothing past the limit is ever held in memory, before or
after sign-in. JSON may spell a lone surrogate (``"\\ud800"``), which no UTF-8 text can hold;
such a string is refused (400 ``bad_text``, naming where it was) instead of failing deep inside
the database driver.
"""

from __future__ import annotations

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
