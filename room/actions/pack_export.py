"""Exporting a project as a pack (docs/packs.md; the format is :mod:`room.packs`).

One project's rows are streamed out of one read transaction (a consistent snapshot), part by
part, ``EXPORT_FETCH`` rows at a time: memory stays flat however large the project. The import
is :mod:`room.actions.packs`.

Rows are encoded by ``orjson`` straight to UTF-8 bytes: the same text as the standard library's
compact encoder with ``ensure_ascii=False`` (a float may be spelled ``1e16`` for ``1e+16``, the
same number), at a third of its CPU — the encoding was most of an export's time (docs/packs.md).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Iterator
from typing import IO, Any

import orjson

from room import __version__
from room.errors import NotFoundError
from room.packs import PACK_KIND, PACK_TABLES, PACK_VERSION, PackTable
from room.store import Tx
from room.store import audit as audit_store
from room.store import projects as projects_store
from room.store.schema import SCHEMA_VERSION

EXPORT_FETCH = 2_000
encode_json = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
"""Compact JSON with text as it is (no \\u escapes): one pack line."""


_dumps = orjson.dumps
_NEWLINE = orjson.OPT_APPEND_NEWLINE


def _line(obj: Any) -> bytes:
    return _dumps(obj, option=_NEWLINE)


def table_columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [str(r[1]) for r in conn.execute(f"PRAGMA table_info({table})")]


def _select(conn: sqlite3.Connection, table: PackTable, columns: list[str], project_id: int) -> str:
    """The query of one part. A ``dense`` table whose rows of this project fill at least half
    of their id range is read along that range of the table itself (``NOT INDEXED``): in id
    order with no sort, where the project index would hand its rows over in another order and
    leave SQLite to sort them all (a temporary B-tree of the whole part)."""
    select = f"SELECT {', '.join('t.' + c for c in columns)} FROM {table.name} t"
    if table.dense:
        count, low, high = conn.execute(
            f"SELECT count(*), min(t.id), max(t.id) FROM {table.name} t WHERE {table.where}",
            {"p": project_id},
        ).fetchone()
        if count and high - low + 1 <= 2 * count:
            return (
                f"{select} NOT INDEXED WHERE t.id BETWEEN {int(low)} AND {int(high)}"
                f" AND {table.where} ORDER BY t.id"
            )
    return f"{select} WHERE {table.where} ORDER BY {table.order}"


def export_lines(
    conn: sqlite3.Connection, project_id: int, now: float, parts: Iterable[str] | None = None
) -> Iterator[bytes]:
    """The pack of ``project_id`` as UTF-8 text, a line or a chunk of whole lines at a time.
    The caller holds a read transaction on ``conn`` for the whole iteration (so the parts
    agree with each other)."""
    project = projects_store.get(conn, project_id)
    if project is None or project.state == "purged":
        raise NotFoundError(f"no project {project_id}", code="no_project")
    wanted = set(parts) if parts is not None else None
    tables = [t for t in PACK_TABLES if wanted is None or t.name in wanted]
    header = {
        "kind": PACK_KIND,
        "version": PACK_VERSION,
        "schema": SCHEMA_VERSION,
        "room": __version__,
        "exported_at": now,
        "project": {"id": project.id, "name": project.name},
        "parts": [t.name for t in tables],
    }
    yield _line(header)
    total = 0
    for table in tables:
        columns = [c for c in table_columns(conn, table.name) if c not in table.drop]
        yield _line({"part": table.name, "columns": columns})
        cursor = conn.execute(_select(conn, table, columns, project_id), {"p": project_id})
        count = 0
        while rows := cursor.fetchmany(EXPORT_FETCH):
            count += len(rows)
            yield b"".join([_dumps(row, option=_NEWLINE) for row in rows])
        total += count
        yield _line({"end": table.name, "rows": count})
    yield _line({"end_pack": True, "rows": total})


def write_pack(conn: sqlite3.Connection, project_id: int, out: IO[bytes], now: float) -> int:
    """Write the pack of ``project_id`` to ``out`` from one read transaction; returns bytes."""
    written = 0
    own = not conn.in_transaction  # a reader of the server's pool is in one already
    if own:
        conn.execute("BEGIN")
    try:
        for data in export_lines(conn, project_id, now):
            out.write(data)
            written += len(data)
    finally:
        if own:
            conn.execute("ROLLBACK")
    return written


def record_export(
    conn: sqlite3.Connection, tx: Tx, project_id: int, actor: tuple[str, int | None]
) -> None:
    audit_store.record(
        conn, now=tx.now, actor_kind=actor[0], actor_id=actor[1], project_id=project_id,
        action="project.export", outcome="ok",
    )  # fmt: skip
