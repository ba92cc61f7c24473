"""Attachment endpoints: upload (the raw file as the request body), read, thumbnail, remove.

``POST /api/projects/{id}/attachments?name=<file name>`` takes the file itself as the body (any
Content-Type; the server types it from its content), streamed to disk: a declared
``Content-Length`` past the limit is refused (413) before anything is read. Members read a
project's sent attachments, and their own unsent uploads, at ``/attachments/{id}/{name}``
(``/attachments/{id}/thumb/{name}`` for an image's thumbnail or the picture of a PDF's first
page, under the same policy; ``/attachments/{id}/view/{name}`` for a PDF opened in the
browser's own viewer: docs/protocol.md, "PDF previews"); the name in the path is only for the
browser's sake.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any

from starlette.requests import ClientDisconnect, Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Route

from room.actions import attachments as attachment_actions
from room.api.requests import core_of, identity, member_in, path_id
from room.errors import BadRequestError, NotFoundError
from room.infra import blobs
from room.infra.bodies import body_into
from room.rules.attachments import (
    ATTACHMENT_CSP,
    PDF_MAGIC,
    PDF_TYPE,
    PDF_VIEW_CSP,
    disposition,
    served_type,
    shows_inline,
    views_inline,
)
from room.store import attachments as attachments_store

log = logging.getLogger(__name__)

# Immutable content behind a stable id, readable only with a session: private caches only.
CACHE_CONTROL = "private, max-age=86400"


async def upload(request: Request) -> Response:
    who = await identity(request, mutation=True)
    core = core_of(request)
    member = await member_in(core, who, path_id(request, "project_id"))
    declared = request.headers.get("content-length")
    if declared is not None and not declared.isdigit():
        raise BadRequestError("Content-Length is not a number", code="bad_length")
    try:
        found = await attachment_actions.upload(
            core,
            member,
            name=request.query_params.get("name"),
            declared=int(declared) if declared is not None else None,
            body=body_into(request),
        )
    except ClientDisconnect:  # the client gave up (a removed upload in the tray): nothing kept
        log.info("upload abandoned by its client (member %s)", member.id)
        return Response(status_code=499)  # nobody reads it
    return JSONResponse({"attachment": found}, status_code=201)


async def remove(request: Request) -> Response:
    who = await identity(request, mutation=True)
    core = core_of(request)
    member = await member_in(core, who, path_id(request, "project_id"))
    await attachment_actions.discard(core, member, path_id(request, "attachment_id"))
    return Response(status_code=204)


async def _row(request: Request) -> dict[str, Any]:
    who = await identity(request)
    core = core_of(request)
    attachment_id = path_id(request, "attachment_id")
    row = await core.db.read(lambda conn: attachments_store.get(conn, attachment_id))
    if row is None:
        raise NotFoundError("no such attachment", code="no_attachment")
    member = await member_in(core, who, int(row["project_id"]))
    return await attachment_actions.readable(core, member, attachment_id)


def _headers(name: str, inline: bool) -> dict[str, str]:
    return {
        "Content-Disposition": disposition(name, inline),
        "X-Content-Type-Options": "nosniff",
        "Content-Security-Policy": ATTACHMENT_CSP,
        "Cache-Control": CACHE_CONTROL,
        "Cross-Origin-Resource-Policy": "same-origin",
    }


async def serve(request: Request) -> Response:
    row = await _row(request)
    mime, name = str(row["mime"]), str(row["name"])
    path = blobs.path_of(core_of(request).settings.attachments_root, str(row["sha256"]))
    return FileResponse(
        path, media_type=served_type(mime), headers=_headers(name, shows_inline(mime))
    )


async def thumb(request: Request) -> Response:
    row = await _row(request)
    if not row["thumb_sha256"]:
        raise NotFoundError("this attachment has no thumbnail", code="no_thumbnail")
    path = blobs.path_of(core_of(request).settings.attachments_root, str(row["thumb_sha256"]))
    # A PDF's preview is a picture of its first page: saved, it is named as one.
    name = f"thumb-{row['name']}" + (".png" if row["mime"] == "application/pdf" else "")
    return FileResponse(path, media_type=str(row["thumb_mime"]), headers=_headers(name, True))


def _head(path: Path) -> bytes:
    try:
        with path.open("rb") as file:
            return file.read(len(PDF_MAGIC))
    except OSError:
        return b""


async def view(request: Request) -> Response:
    """A PDF for the browser's own viewer, in a tab of its own: inline only when it was typed a
    PDF and its bytes start as one; anything else is the usual download."""
    row = await _row(request)
    mime, name = str(row["mime"]), str(row["name"])
    path = blobs.path_of(core_of(request).settings.attachments_root, str(row["sha256"]))
    if not views_inline(mime, await asyncio.to_thread(_head, path)):
        return FileResponse(
            path, media_type=served_type(mime), headers=_headers(name, shows_inline(mime))
        )
    headers = {
        **_headers(name, True),
        "Content-Security-Policy": PDF_VIEW_CSP,
        "X-Frame-Options": "DENY",
        "Referrer-Policy": "no-referrer",  # a link in the PDF does not learn the file's address
    }
    return FileResponse(path, media_type=PDF_TYPE, headers=headers)


endpoints = [
    Route("/api/projects/{project_id:int}/attachments", upload, methods=["POST"]),
    Route(
        "/api/projects/{project_id:int}/attachments/{attachment_id:int}", remove, methods=["DELETE"]
    ),
    Route("/attachments/{attachment_id:int}/thumb/{name}", thumb),
    Route("/attachments/{attachment_id:int}/view/{name}", view),
    Route("/attachments/{attachment_id:int}/{name}", serve),
]
