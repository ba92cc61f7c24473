"""Exporting a project as a pack (docs/packs.md; the format is :mod:`room.rules.packs`).

One project's rows are streamed out of one read transaction (a consistent snapshot), part by
part, ``EXPORT_FETCH`` rows at a time: memory stays flat however large the project. The import
is :mod:`room.actions.pack_import`.

Rows are encoded by ``orjson`` straight to UTF-8 bytes: the same text as the standard library's
compact encoder with ``ensure_ascii=False`` (a float may be spelled ``1e16`` for ``1e+16``, the
same number), at a third of its CPU — the encoding was most of an export's time (docs/packs.md).
"""

from __future__ import annotations

import binascii
import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import IO, Any

import orjson

from room import __version__
from room.errors import NotFoundError, StorageError
from room.infra import blobs
from room.rules.packs import (
    FILE_CHUNK_BYTES,
    FILE_COLUMNS,
    FILES_PART,
    PACK_KIND,
    PACK_TABLES,
    PACK_VERSION,
    PART_ORDER,
    TABLES_BY_NAME,
    PackTable,
)
from room.store import Tx
from room.store import audit as audit_store
from room.store import projects as projects_store
from room.store.dialect import Connection, dialect_for
from room.store.schema import SCHEMA_VERSION

EXPORT_FETCH = 2_000
encode_json = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
"""Compact JSON with text as it is (no \\u escapes): one pack line."""


_dumps = orjson.dumps
_NEWLINE = orjson.OPT_APPEND_NEWLINE


def _line(obj: Any) -> bytes:
    return _dumps(obj, option=_NEWLINE)


def table_columns(conn: Connection, table: str) -> list[str]:
    if dialect_for(conn).name == "postgresql":
        rows = conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_schema ="
            " current_schema() AND table_name = ? ORDER BY ordinal_position",
            (table,),
        )
        return [str(r[0]) for r in rows]
    return [str(r[1]) for r in conn.execute(f"PRAGMA table_info({table})")]


def _select(conn: Connection, table: PackTable, columns: list[str], project_id: int) -> str:
    """The query of one part. A ``dense`` table whose rows of this project fill at least half
    of their id range is read along that range of the table itself (``NOT INDEXED``): in id
    order with no sort, where the project index would hand its rows over in another order and
    leave SQLite to sort them all (a temporary B-tree of the whole part)."""
    select = f"SELECT {', '.join('t.' + c for c in columns)} FROM {table.name} t"
    if table.dense and dialect_for(conn).name == "sqlite":  # NOT INDEXED is SQLite's hint
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


# The content an attachment row of the pack names: its file and its thumbnail, each once.
FILES_SQL = (
    "SELECT t.sha256 AS sha FROM attachments t WHERE {where}"
    " UNION SELECT t.thumb_sha256 FROM attachments t WHERE {where} AND t.thumb_sha256 IS NOT NULL"
    " ORDER BY sha"
)


def _file_names(conn: Connection, project_id: int) -> Iterator[str]:
    where = TABLES_BY_NAME["attachments"].where
    for (sha,) in conn.execute(FILES_SQL.format(where=where), {"p": project_id}):
        yield str(sha)


def _check_files(conn: Connection, project_id: int, root: Path) -> None:
    """Every file the pack will carry is in the store (checked before the first line, so an
    export that could only end cut short is refused instead)."""
    for sha in _file_names(conn, project_id):
        if not blobs.path_of(root, sha).is_file():
            raise StorageError(
                f"附件内容缺失，无法导出 (the file {sha} of an attachment is missing from "
                f"{root}; restore it from a backup first)",
                code="attachment_missing", sha256=sha,
            )  # fmt: skip


def _file_rows(conn: Connection, project_id: int, root: Path) -> Iterator[bytes]:
    """The files part's rows: each file in chunks of base64, one row per chunk."""
    for sha in _file_names(conn, project_id):
        with blobs.path_of(root, sha).open("rb") as f:
            size = os.fstat(f.fileno()).st_size
            offset = 0
            while True:
                chunk = f.read(FILE_CHUNK_BYTES)
                # The JSON array by hand: a hex name, two counts and base64 need no escaping.
                encoded = binascii.b2a_base64(chunk, newline=False)
                yield b'["%s",%d,%d,"%s"]\n' % (sha.encode("ascii"), size, offset, encoded)
                offset += len(chunk)
                if offset >= size or not chunk:
                    break


def export_lines(
    conn: Connection,
    project_id: int,
    now: float,
    parts: Iterable[str] | None = None,
    *,
    attachments: Path | None,
) -> Iterator[bytes]:
    """The pack of ``project_id`` as UTF-8 text, a line or a chunk of whole lines at a time.
    The caller holds a read transaction on ``conn`` for the whole iteration (so the parts
    agree with each other). ``attachments`` is the attachments folder
    (``Settings.attachments_root``), whose files the pack carries (None only when ``parts`` leave the attachments out, as a fork's do)."""
    project = projects_store.get(conn, project_id)
    if project is None or project.state == "purged":
        raise NotFoundError(f"no project {project_id}", code="no_project")
    wanted = set(parts) if parts is not None else None
    tables = [t for t in PACK_TABLES if wanted is None or t.name in wanted]
    names = [name for name in PART_ORDER if wanted is None or name in wanted]
    if FILES_PART in names:
        if attachments is None:
            raise ValueError("an export with attachments needs the attachments folder")
        _check_files(conn, project_id, attachments)
    header = {
        "kind": PACK_KIND,
        "version": PACK_VERSION,
        "schema": SCHEMA_VERSION,
        "room": __version__,
        "exported_at": now,
        "project": {"id": project.id, "name": project.name},
        "parts": names,
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
            # Appended one by one: orjson's bytes keep the room it reserved for the worst case
            # (a row of 700 bytes can hold 7 KB), so a list of them would hold 10 times the batch.
            buffer = bytearray()
            for row in rows:
                buffer += _dumps(row, option=_NEWLINE)
            del rows  # not held while the next batch is fetched
            chunk = bytes(buffer)
            del buffer
            yield chunk
            del chunk
        total += count
        yield _line({"end": table.name, "rows": count})
        if table.name == "attachments" and FILES_PART in names and attachments is not None:
            yield _line({"part": FILES_PART, "columns": list(FILE_COLUMNS)})
            count = 0
            for line in _file_rows(conn, project_id, attachments):
                count += 1
                yield line
            total += count
            yield _line({"end": FILES_PART, "rows": count})
    yield _line({"end_pack": True, "rows": total})


def write_pack(
    conn: Connection, project_id: int, out: IO[bytes], now: float, attachments: Path
) -> int:
    """Write the pack of ``project_id`` to ``out`` from one read transaction; returns bytes.
    ``attachments``: the attachments folder (``Settings.attachments_root``)."""
    written = 0
    own = not conn.in_transaction  # a reader of the server's pool is in one already
    if own:  # one snapshot (SQLite's read transactions are; PostgreSQL's when asked)
        snapshot = dialect_for(conn).name == "postgresql"
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ" if snapshot else "BEGIN")
    try:
        for text in export_lines(conn, project_id, now, attachments=attachments):
            out.write(text)
            written += len(text)
    finally:
        if own:
            conn.execute("ROLLBACK")
    return written


def record_export(conn: Connection, tx: Tx, project_id: int, actor: tuple[str, int | None]) -> None:
    audit_store.record(
        conn, now=tx.now, actor_kind=actor[0], actor_id=actor[1], project_id=project_id,
        action="project.export", outcome="ok",
    )  # fmt: skip
