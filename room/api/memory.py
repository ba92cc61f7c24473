"""Project memory over HTTP (docs/memory.md): the 记忆 tab's reads and people's edits.

People (owners and members) read and write; an agent's token may read its own project's memory
but writes only through its tools (``agents_use_tools``, 403). Nobody reaches another project's
records: an entry id of another project is ``not_found``. Errors are structured
(``unknown_kind``, ``record_too_large``, ``empty_field`` with the ``field``, ``stale_revision``,
``not_found`` …); a refused write changes nothing.
"""

from __future__ import annotations

import sqlite3
import time
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from room.actions import memory as memory_actions
from room.api.requests import MAX_JSON_BYTES, core_of, identity, json_object, member_in, path_id
from room.auth import Identity
from room.errors import (
    BadRequestError,
    ForbiddenError,
    NotFoundError,
    PayloadTooLargeError,
)
from room.rules import records
from room.rules.entities import Member
from room.rules.records import RecordError
from room.services import Services
from room.store import memory as memory_store

DEFAULT_PAGE = 50


def _refuse_agents(who: Identity) -> None:
    if who.agent is not None:
        raise ForbiddenError(
            "AI 成员用 memory_checkpoint 工具写记忆 (Agents write memory through their tools.)",
            code="agents_use_tools",
        )


async def _reader(request: Request) -> Member:
    who = await identity(request)
    return await member_in(core_of(request), who, path_id(request, "project_id"))


async def _writer(request: Request, project_id: int) -> Member:
    who = await identity(request, mutation=True)
    _refuse_agents(who)
    return await member_in(core_of(request), who, project_id)


async def _member_of_entry(request: Request, *, mutation: bool) -> tuple[Member, int]:
    """The caller as a member of the entry's project (an entry of a project the caller is not
    in is ``not_found``, the same as one that does not exist)."""
    core = core_of(request)
    who = await identity(request, mutation=mutation)
    if mutation:
        _refuse_agents(who)
    entry_id = path_id(request, "entry_id")
    found = await core.db.read(lambda conn: memory_store.entry(conn, entry_id))
    if found is None:
        raise NotFoundError(f"没有记录 {entry_id} (No record {entry_id}.)", code="not_found")
    try:
        return await member_in(core, who, found["project_id"]), entry_id
    except (NotFoundError, ForbiddenError):
        raise NotFoundError(
            f"没有记录 {entry_id} (No record {entry_id}.)", code="not_found"
        ) from None


async def _json(request: Request) -> dict[str, Any]:
    """The body as an object (:func:`room.api.requests.json_object`); a body past the request limit
    is a record too large (nothing is stored)."""
    try:
        return await json_object(request)
    except PayloadTooLargeError:
        raise RecordError(
            f"请求超过 {MAX_JSON_BYTES} 字节 (The request is larger than {MAX_JSON_BYTES} bytes;"
            " nothing was saved.)",
            code="record_too_large",
            limit=MAX_JSON_BYTES,
        ) from None


def _rev(data: dict[str, Any], *, required: bool = True) -> int | None:
    rev = data.pop("rev", None)
    if rev is None and not required:
        return None
    if not isinstance(rev, int) or isinstance(rev, bool) or rev < 0:
        raise BadRequestError(
            "rev 是你编辑时看到的版本号 (rev is the revision you edited, an integer.)",
            code="bad_body",
            field="rev",
        )
    return rev


def _stale_days(core: Services) -> int:
    # The setting belongs to the injection (memory_stale_days); 14 until it is there.
    return int(getattr(core.settings, "memory_stale_days", 14))


async def get_memory(request: Request) -> Response:
    member = await _reader(request)
    core = core_of(request)
    now = time.time()
    body = await core.db.read(
        lambda conn: memory_actions.overview(
            conn, member.project_id, now=now, stale_days=_stale_days(core)
        )
    )
    return JSONResponse(body)


def _query_int(request: Request, name: str, default: int | None) -> int | None:
    value = request.query_params.get(name)
    if value is None or value == "":
        return default
    if not value.isascii() or not value.isdigit() or len(value) > 18:
        raise BadRequestError(f"{name} 是正整数 ({name} is a positive integer.)",
                              code="bad_query", field=name)  # fmt: skip
    return int(value)


def _query_flag(request: Request, name: str) -> bool:
    """A yes/no query parameter: ``1``/``true`` or ``0``/``false`` (absent: no)."""
    value = request.query_params.get(name, "0").lower()
    if value not in ("0", "1", "true", "false", ""):
        raise BadRequestError(f"{name} 是 1 或 0 ({name} is 1 or 0.)", code="bad_query",
                              field=name)  # fmt: skip
    return value in ("1", "true")


async def get_kind(request: Request) -> Response:
    member = await _reader(request)
    kind = records.check_kind(str(request.path_params["kind"]))
    archived = _query_flag(request, "archived")
    before = _query_int(request, "before", None)
    limit = _query_int(request, "limit", DEFAULT_PAGE) or DEFAULT_PAGE
    if limit > memory_actions.MAX_PAGE:
        raise BadRequestError(f"limit 最多 {memory_actions.MAX_PAGE}", code="bad_query",
                              field="limit")  # fmt: skip
    query = request.query_params
    since = query.get("since") or None
    progress = records.ProgressFilter(
        stage=query.get("stage") or None,
        tag=query.get("tag") or None,
        since=records.parse_since(since) if since else None,
        blocked_only=_query_flag(request, "blocked"),
    )

    def read(conn: sqlite3.Connection) -> dict[str, Any]:
        return memory_actions.page(
            conn, member.project_id, kind, archived=archived, before=before, limit=limit,
            progress=progress,
        )  # fmt: skip

    return JSONResponse(await core_of(request).db.read(read))


async def post_entry(request: Request) -> Response:
    project_id = path_id(request, "project_id")
    member = await _writer(request, project_id)
    data = await _json(request)
    kind = str(request.path_params["kind"])
    entry = await memory_actions.add_entry(core_of(request), member, kind, data)
    return JSONResponse({"entry": entry}, status_code=200 if entry.get("duplicate") else 201)


async def put_summary(request: Request) -> Response:
    project_id = path_id(request, "project_id")
    member = await _writer(request, project_id)
    data = await _json(request)
    rev = _rev(data)
    sections = data.pop("sections", None)
    if data:
        raise RecordError(f"概要没有字段 {sorted(data)[0][:40]}", code="unknown_field",
                          field=sorted(data)[0][:40])  # fmt: skip
    if not isinstance(sections, dict):
        raise RecordError("sections 是对象 (sections is an object.)", code="bad_field",
                          field="sections")  # fmt: skip
    entry = await memory_actions.set_summary(core_of(request), member, rev, sections)
    return JSONResponse({"entry": entry})


async def get_entry(request: Request) -> Response:
    member, entry_id = await _member_of_entry(request, mutation=False)
    body = await core_of(request).db.read(
        lambda conn: memory_actions.entry_for(conn, member, entry_id)
    )
    return JSONResponse({"entry": body})


async def patch_entry(request: Request) -> Response:
    member, entry_id = await _member_of_entry(request, mutation=True)
    data = await _json(request)
    rev = _rev(data)
    entry = await memory_actions.edit_entry(core_of(request), member, entry_id, rev, data)
    return JSONResponse({"entry": entry})


async def get_history(request: Request) -> Response:
    member, entry_id = await _member_of_entry(request, mutation=False)
    body = await core_of(request).db.read(
        lambda conn: memory_actions.history(conn, member, entry_id)
    )
    return JSONResponse(body)


async def post_archive(request: Request) -> Response:
    member, entry_id = await _member_of_entry(request, mutation=True)
    await _json(request)
    entry = await memory_actions.archive_entry(core_of(request), member, entry_id)
    return JSONResponse({"entry": entry})


async def post_restore(request: Request) -> Response:
    member, entry_id = await _member_of_entry(request, mutation=True)
    await _json(request)
    entry = await memory_actions.restore_entry(core_of(request), member, entry_id)
    return JSONResponse({"entry": entry})


async def post_clear(request: Request) -> Response:
    project_id = path_id(request, "project_id")
    member = await _writer(request, project_id)
    data = await _json(request)
    return JSONResponse(await memory_actions.clear(core_of(request), member, data.get("confirm")))


endpoints = [
    Route("/api/projects/{project_id:int}/memory", get_memory, methods=["GET"]),
    Route("/api/projects/{project_id:int}/memory/summary", put_summary, methods=["PUT"]),
    Route("/api/projects/{project_id:int}/memory/clear", post_clear, methods=["POST"]),
    Route("/api/projects/{project_id:int}/memory/{kind}", get_kind, methods=["GET"]),
    Route("/api/projects/{project_id:int}/memory/{kind}", post_entry, methods=["POST"]),
    Route("/api/memory/{entry_id:int}", get_entry, methods=["GET"]),
    Route("/api/memory/{entry_id:int}", patch_entry, methods=["PATCH"]),
    Route("/api/memory/{entry_id:int}/history", get_history, methods=["GET"]),
    Route("/api/memory/{entry_id:int}/archive", post_archive, methods=["POST"]),
    Route("/api/memory/{entry_id:int}/restore", post_restore, methods=["POST"]),
]
