"""Export, import, fork and merge over HTTP (docs/packs.md). Owners only; every one audited.

The export is a streamed download read from its own read-only connection (one snapshot); the
import is a streamed upload written to a temporary file in the data folder (never the whole
pack in memory), then imported in one write job.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from room.actions import lifecycle as lifecycle_actions
from room.actions import merge as merge_actions
from room.actions import pack_export, pack_import
from room.api.requests import RowId, body_of, core_of, identity, member_in, path_id
from room.errors import BadRequestError, ForbiddenError, PayloadTooLargeError, RoomError
from room.rules.entities import Member
from room.rules.lifecycle import ActorKind
from room.rules.ops import project_for
from room.services import Services
from room.store import pg
from room.store import projects as projects_store
from room.store.migrate import connect

# The largest pack an upload may be (a 1,000,000-message project is about 1 GiB).
MAX_PACK_BYTES = 4 * 1024**3


def _made(conn: Any, result: dict[str, Any]) -> dict[str, Any]:
    """A new project's answer (an import, a fork): the project as its owner sees it, as
    ``POST /api/projects`` answers it, beside the rows copied of each part."""
    project = projects_store.get(conn, int(result["project_id"]))
    assert project is not None
    return {"project": project_for(project, ActorKind.OWNER), "rows": result["rows"]}


def _snapshot(core: Services) -> sqlite3.Connection:
    """A connection of its own for a whole download, reading one snapshot."""
    if core.db.url is not None:
        pg_conn = pg.connect(core.db.url, application_name="room-export", readonly=True)
        pg_conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        return cast(sqlite3.Connection, pg_conn)  # the store's reads run on both
    conn = connect(core.settings.db_path, readonly=True)
    conn.execute("PRAGMA mmap_size = 0")  # a whole-project read: keep its pages out of RSS
    conn.execute("BEGIN")  # one snapshot for the whole download
    return conn


def _owner(member: Member, what: str) -> None:
    if not member.is_owner:
        raise ForbiddenError(f"only a project owner may {what}", code="not_owner")


async def export_project(request: Request) -> Response:
    who = await identity(request)
    core = core_of(request)
    project_id = path_id(request, "project_id")
    member = await member_in(core, who, project_id)
    _owner(member, "export it")
    await core.db.write(
        lambda conn, tx: pack_export.record_export(conn, tx, project_id, ("human", member.id))
    )
    conn = _snapshot(core)
    try:
        lines = pack_export.export_lines(
            conn, project_id, time.time(), attachments=core.settings.attachments_root
        )
        first = next(lines)  # a missing project fails here, before the response starts
    except BaseException:
        conn.close()
        raise

    def body() -> Iterator[bytes]:
        # Closed when the download ends or is abandoned (the generator is closed then).
        try:
            yield first
            yield from lines
        finally:
            conn.close()

    return StreamingResponse(
        body(),
        media_type="application/x-ndjson",
        headers={"Content-Disposition": f'attachment; filename="project-{project_id}.roompack"'},
    )


async def import_project(request: Request) -> Response:
    who = await identity(request, mutation=True)
    if who.user is None:
        raise ForbiddenError("only people import projects", code="human_only")
    core = core_of(request)
    name = request.query_params.get("name") or None
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_PACK_BYTES:
        raise PayloadTooLargeError("the pack is too large", limit=MAX_PACK_BYTES)
    folder = core.settings.data / "tmp"
    folder.mkdir(exist_ok=True)
    fd, name_of_file = tempfile.mkstemp(prefix="import-", suffix=".roompack", dir=folder)
    path = Path(name_of_file)
    try:
        size = 0
        with os.fdopen(fd, "wb") as out:
            async for chunk in request.stream():
                size += len(chunk)
                if size > MAX_PACK_BYTES:
                    raise PayloadTooLargeError("the pack is too large", limit=MAX_PACK_BYTES)
                out.write(chunk)
        if size == 0:
            raise BadRequestError("send the pack as the request body", code="empty_body")
        importer = who.user
        options = pack_import.ImportOptions(
            importer=importer, name=name, attachments=core.settings.attachments_root,
            attachment_quota=core.settings.attachment_project_bytes,
        )  # fmt: skip

        def job(conn, tx):  # type: ignore[no-untyped-def]
            with path.open("rb") as pack:
                lines = pack_import.read_lines(pack)
                return _made(conn, pack_import.import_pack(conn, tx, lines, options))

        result = await core.db.write(job)
    finally:
        await asyncio.to_thread(path.unlink, missing_ok=True)
    return JSONResponse(result, status_code=201)


class ForkIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str | None = Field(default=None, max_length=70)


async def fork_project(request: Request) -> Response:
    who = await identity(request, mutation=True)
    core = core_of(request)
    project_id = path_id(request, "project_id")
    member = await member_in(core, who, project_id)
    _owner(member, "fork it")
    data: ForkIn = await body_of(request, ForkIn)
    name = data.name.strip() if data.name else None
    if name is not None and (not name or "/" in name or "\n" in name):
        raise BadRequestError("a project name is one line, without '/'", code="bad_project_name")
    result = await core.db.write(
        lambda conn, tx: _made(
            conn, pack_import.fork_project(conn, tx, project_id, member.id, name)
        ),
        locks=(project_id,),
    )
    return JSONResponse(result, status_code=201)


class MergeIn(BaseModel):
    model_config = ConfigDict(extra="forbid")
    source_project_id: RowId
    trash_source: bool = False


async def merge_project(request: Request) -> Response:
    who = await identity(request, mutation=True)
    core = core_of(request)
    project_id = path_id(request, "project_id")
    member = await member_in(core, who, project_id)
    _owner(member, "merge into it")
    data: MergeIn = await body_of(request, MergeIn)
    source_member = await member_in(core, who, data.source_project_id)
    _owner(source_member, "merge it away")
    result = await core.db.write(
        lambda conn, tx: merge_actions.merge_records(
            conn, tx, project_id, data.source_project_id, member.id, source_member.id
        ),
        locks=(project_id, data.source_project_id),
    )
    if data.trash_source:
        # The source goes to the trash like any trash request (stopped first, audited, its
        # snapshot written): restorable, and never purged by a merge. The merge has committed
        # already: a refused trash is reported next to it, not instead of it.
        try:
            result["source_lifecycle"] = await lifecycle_actions.run(
                core, source_member, data.source_project_id, "trash"
            )
        except RoomError as exc:
            result["source_lifecycle"] = {"error": exc.to_dict()}
    return JSONResponse(result)


endpoints = [
    Route("/api/projects/{project_id:int}/export", export_project),
    Route("/api/projects/import", import_project, methods=["POST"]),
    Route("/api/projects/{project_id:int}/fork", fork_project, methods=["POST"]),
    Route("/api/projects/{project_id:int}/merge", merge_project, methods=["POST"]),
]
