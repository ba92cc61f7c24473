"""Importing a pack as a new project, and forking (docs/packs.md).

The format and its table list are :mod:`room.rules.packs`, the export
:mod:`room.actions.pack_export`. An import is one write job: every row in one transaction, so a pack
refused anywhere (a bad row, a missing part, a cut file) leaves nothing.

Fresh ids without a map: each table's rows come in id order, and an import moves them all by
one offset (past the table's largest id), so a reference is remapped by adding its table's
offset after a range check (a reference outside the pack's ids is refused; a dangling one
inside it fails its foreign key). Only the members' ids are also kept as a set (the audit
trail's actors have no foreign key).

The attachments' files come in the pack after their rows, in SHA-256 order: each is checked
against the next name the imported rows give (nothing missing, nothing extra, no list held),
hashed as it streams in, and written to a staged temporary file unless the store has that
content already; the staged files move to their addresses only once every check has passed,
and are dropped when the import is refused.
"""

from __future__ import annotations

import binascii
import hashlib
import json
import secrets
import sqlite3
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import orjson
import regex

from room.actions import memory as memory_actions
from room.actions.pack_export import FILES_SQL, encode_json, export_lines, table_columns
from room.errors import PackError
from room.infra import blobs
from room.rules.entities import User
from room.rules.packs import (
    FILE_COLUMNS,
    FILES_PART,
    FORK_TABLES,
    MEMBER_ACTOR_KINDS,
    TABLES_BY_NAME,
    PackTable,
    check_header,
    remap_message,
)
from room.store import Tx
from room.store import attachments as attachments_store
from room.store import audit as audit_store
from room.store import projects as projects_store
from room.store.db import declare_created
from room.store.dialect import Connection, Cursor, dialect_for

INSERT_CHUNK = 500
# The longest line an import reads: far past any row (a message's body, its rendered HTML and
# its stored object), so that a pack of one endless line cannot fill the memory.
MAX_LINE_BYTES = 16 * 1024 * 1024
# orjson reads a line (bytes or text, no decode first) faster than the standard library, and
# refuses a lone surrogate (which SQLite could not store anyway) as bad JSON.
_decode = orjson.loads
_SHA256 = regex.compile(r"[0-9a-f]{64}")
# The files part as a _Part (it is no table: its rows go to the content store).
_FILES = PackTable(FILES_PART, where="", order="", key=None)


# -- import ---------------------------------------------------------------------------------------


@dataclass(slots=True)
class _Ids:
    """One table's old ids in the pack: their range and the offset that makes them fresh."""

    offset: int = 0
    first: int | None = None
    last: int | None = None


@dataclass(slots=True)
class _Part:
    """A part being read, with its columns' roles worked out once (rows are plain lists)."""

    table: PackTable
    columns: list[str]
    start_line: int
    index: dict[str, int] = field(default_factory=dict)
    key: int | None = None
    project: int | None = None
    refs: list[tuple[int, str]] = field(default_factory=list)
    late: list[tuple[int, str, str]] = field(default_factory=list)
    rows: int = 0
    buffer: list[list[Any]] = field(default_factory=list)
    buffer_line: int = 0

    def __post_init__(self) -> None:
        table = self.table
        self.index = {c: i for i, c in enumerate(self.columns)}
        self.key = self.index.get(table.key) if table.key is not None else None
        self.project = self.index.get("project_id")
        for column, target in table.refs.items():
            if column in self.index and column not in table.deferred:
                if column in table.late:
                    self.late.append((self.index[column], column, target))
                else:
                    self.refs.append((self.index[column], target))


@dataclass(frozen=True, slots=True)
class ImportOptions:
    """``importer``: the person on this server who becomes the owner; None keeps the pack's
    user ids (a fork on the same server). ``state``: the new project's state (None: ``paused``,
    or ``archived`` for an archived project). The new project's workspace is always its own
    default: a pack from elsewhere names a folder of another machine, and a fork's source keeps
    its folder (a folder belongs to one project, :mod:`room.actions.tenancy`)."""

    importer: User | None
    name: str | None = None
    state: str | None = None
    forked_from: int | None = None
    parts: tuple[str, ...] | None = None
    action: str = "project.import"
    attachments: Path | None = None  # the attachments folder (Settings.attachments_root)
    # The new project's attachment bytes may not pass this (attachment_project_bytes; None: any).
    attachment_quota: int | None = None


@dataclass(slots=True)
class _File:
    """The file whose chunks are being read: hashed as they come, written to its staged
    temporary file (``upload``) unless the store holds this content already."""

    sha: str
    size: int
    upload: blobs.Upload | None
    received: int = 0
    hasher: Any = field(default_factory=hashlib.sha256)


class Importer:
    """Reads a pack line by line and writes it as a new project inside the caller's
    transaction. Any problem raises :class:`PackError` (or the database's error) and the
    caller's rollback leaves nothing."""

    def __init__(self, conn: Connection, tx: Tx, options: ImportOptions) -> None:
        self.conn, self.tx, self.options = conn, tx, options
        self.ids: dict[str, _Ids] = {}
        self.parts: list[str] = []
        self.project_id = 0
        self.member_ids: set[int] = set()
        self.owner_member: int | None = None
        self.late: list[tuple[str, str, int, int]] = []  # table, column, new key, old ref
        self.counts: dict[str, int] = {}
        self.pack_project: dict[str, Any] = {}
        self.token = secrets.token_hex(8)  # names this import's staged files
        self.file: _File | None = None
        self.expected_files: Cursor | None = None

    # -- id mapping

    def ref(self, table: str, value: Any, *, late: bool = False) -> Any:
        if value is None or table not in self.ids:
            return None
        if not isinstance(value, int) or isinstance(value, bool):
            raise PackError("bad_ref", f"a reference to {table} is not an id: {value!r}")
        ids = self.ids[table]
        if table == "projects":
            return self.project_id
        if ids.first is None or value < ids.first or (not late and value > (ids.last or 0)):
            raise PackError("bad_ref", f"a reference to {table} {value} is not in the pack")
        return value + ids.offset

    def _map(self, table: str, value: Any) -> Any:
        """For message objects: an id that is not carried (a turn) becomes null. Attachments
        are all in before the messages: only their ids are mapped."""
        try:
            return self.ref(table, value, late=table != "attachments")
        except PackError:
            return None

    # -- reading

    def run(self, lines: Iterable[bytes | str]) -> dict[str, Any]:
        part: _Part | None = None
        expected: list[str] = []
        lineno = 0
        ended = False
        for lineno, raw in enumerate(lines, 1):
            if ended:
                if raw.strip():
                    raise PackError("bad_line", "text after the end of the pack", line=lineno)
                continue
            try:
                item = _decode(raw)
            except (ValueError, RecursionError):  # orjson.JSONDecodeError is a ValueError
                raise PackError("bad_json", "a line is not JSON", line=lineno) from None
            if lineno == 1:
                expected = check_header(item, self.options.parts)
                self.parts = list(expected)
                self.ids = {name: _Ids() for name in expected}
                self.ids.setdefault("projects", _Ids())
                continue
            if isinstance(item, list):
                if part is None:
                    raise PackError("bad_line", "a row outside any part", line=lineno)
                self._row(part, item, lineno)
                continue
            if not isinstance(item, dict):
                raise PackError("bad_line", "a line is neither a row nor a marker", line=lineno)
            if "part" in item:
                if part is not None:
                    raise PackError("bad_line", f"part {part.table.name} has no end", line=lineno)
                if not expected or item["part"] != expected[0]:
                    want = expected[0] if expected else "the end of the pack"
                    raise PackError(
                        "missing_part", f"expected part {want}, found {item['part']!r}",
                        part=want, line=lineno,
                    )  # fmt: skip
                name = expected.pop(0)
                if name == FILES_PART:
                    part = self._open_files(item.get("columns"), lineno)
                else:
                    part = self._open(TABLES_BY_NAME[name], item.get("columns"), lineno)
            elif "end" in item:
                if part is None or item["end"] != part.table.name:
                    raise PackError("bad_line", "an end marker out of place", line=lineno)
                if part.table is _FILES:
                    self._end_files(lineno)
                self._flush(part)
                if item.get("rows") != part.rows:
                    raise PackError(
                        "bad_count", f"part {part.table.name} says {item.get('rows')!r} rows, "
                        f"has {part.rows}", part=part.table.name, line=lineno,
                    )  # fmt: skip
                self.counts[part.table.name] = part.rows
                part = None
            elif item.get("end_pack") is True:
                if part is not None or expected:
                    missing = part.table.name if part is not None else expected[0]
                    raise PackError(
                        "missing_part", f"the pack ends before part {missing}", part=missing,
                        line=lineno,
                    )  # fmt: skip
                ended = True
            else:
                raise PackError("bad_line", "an unknown marker", line=lineno)
        if lineno == 0:
            raise PackError("empty", "the pack is empty")
        if not ended:
            missing = part.table.name if part is not None else (expected or ["end_pack"])[0]
            raise PackError(
                "truncated", f"the pack stops before its end (in or before {missing})",
                part=missing,
            )  # fmt: skip
        _advance_sequences(self.conn, self.ids)  # before _finish writes rows numbered by them
        return self._finish()

    def _open(self, table: PackTable, columns: Any, lineno: int) -> _Part:
        known = table_columns(self.conn, table.name)
        if not isinstance(columns, list) or not all(isinstance(c, str) for c in columns):
            raise PackError("bad_columns", "a part without columns", part=table.name, line=lineno)
        unknown = [c for c in columns if c not in known or c in table.drop]
        if unknown or len(set(columns)) != len(columns):
            raise PackError(
                "bad_columns", f"part {table.name} has columns this server does not know: "
                f"{', '.join(unknown) or 'repeated'}", part=table.name, line=lineno,
            )  # fmt: skip
        if table.key is not None and table.key not in columns:
            raise PackError("bad_columns", f"part {table.name} has no {table.key}",
                            part=table.name, line=lineno)  # fmt: skip
        return _Part(table, columns, lineno)

    def _row(self, part: _Part, values: list[Any], lineno: int) -> None:
        table = part.table
        if len(values) != len(part.columns):
            raise PackError(
                "bad_row", f"a row of {table.name} has {len(values)} values, not "
                f"{len(part.columns)}", part=table.name, line=lineno,
            )  # fmt: skip
        try:
            if table is _FILES:
                self._file_row(values)
                part.rows += 1
                return
            if table.name == "projects":
                self._project(dict(zip(part.columns, values, strict=True)), lineno)
                part.rows += 1
                return
            self._remap(part, values)
        except PackError as exc:
            exc.details.setdefault("part", table.name)
            exc.details.setdefault("line", lineno)
            raise
        if not part.buffer:
            part.buffer_line = lineno
        part.buffer.append(values)
        part.rows += 1
        if len(part.buffer) >= INSERT_CHUNK:
            self._flush(part)

    def _remap(self, part: _Part, values: list[Any]) -> None:
        table = part.table
        if part.key is not None:
            old = values[part.key]
            ids = self.ids[table.name]
            if type(old) is not int or old < 1:
                raise PackError("bad_row", f"{table.name}.{table.key} is not an id: {old!r}")
            if ids.first is None:
                ids.first = old
                ids.offset = _largest_id(self.conn, table.name) + 1 - old
            elif old <= (ids.last or 0):
                raise PackError("bad_row", f"{table.name} ids are not increasing at {old}")
            ids.last = old
            values[part.key] = old + ids.offset
        if part.project is not None:
            values[part.project] = self.project_id
        for at, target in part.refs:
            if values[at] is not None:
                values[at] = self.ref(target, values[at])
        for at, column, target in part.late:
            value = values[at]
            values[at] = None
            if value is not None and target in self.ids and part.key is not None:
                self.late.append((table.name, column, values[part.key], value))
        special = _SPECIAL.get(table.name)
        if special is not None:
            special(self, part, values)

    def _flush(self, part: _Part) -> None:
        if not part.buffer:
            return
        sql = (
            f"INSERT INTO {part.table.name} ({', '.join(part.columns)})"
            f" VALUES ({', '.join('?' * len(part.columns))})"
        )
        try:
            self.conn.executemany(sql, part.buffer)
        except sqlite3.Error as exc:
            raise PackError(
                "bad_row", f"rows of {part.table.name} were refused: {exc}",
                part=part.table.name, line=part.buffer_line,
            ) from None  # fmt: skip
        finally:
            part.buffer.clear()

    # -- the attachments' files

    def _open_files(self, columns: Any, lineno: int) -> _Part:
        if columns != list(FILE_COLUMNS):
            raise PackError("bad_columns", f"the files part has columns {columns!r}",
                            part=FILES_PART, line=lineno)  # fmt: skip
        if self.options.attachments is None:
            raise PackError("bad_pack", "this import takes no files", part=FILES_PART)
        # Every attachment row is in: what they hold counts against the quota an upload would.
        quota = self.options.attachment_quota
        if quota is not None:
            used = attachments_store.project_bytes(self.conn, self.project_id)
            if used > quota:
                raise PackError(
                    "over_quota", f"the pack's attachments hold {used} bytes; a project here may "
                    f"hold {quota} (attachment_project_bytes)", used=used, limit=quota,
                    part=FILES_PART, line=lineno,
                )  # fmt: skip
        # The names the imported rows give, in order: each file must be the next one.
        self.expected_files = self.conn.execute(
            FILES_SQL.format(where="t.project_id = :p"), {"p": self.project_id}
        )
        return _Part(_FILES, list(FILE_COLUMNS), lineno)

    def _next_expected(self) -> str | None:
        assert self.expected_files is not None
        row = self.expected_files.fetchone()
        return None if row is None else str(row[0])

    def _file_row(self, values: list[Any]) -> None:
        sha, size, offset, encoded = values
        if not isinstance(sha, str) or not _SHA256.fullmatch(sha):
            raise PackError("bad_file", f"a file is named {str(sha)[:80]!r}, not a SHA-256")
        if type(size) is not int or type(offset) is not int or size < 0 or offset < 0:
            raise PackError("bad_file", f"file {sha}: its size or offset is not a count")
        try:
            chunk = binascii.a2b_base64(encoded, strict_mode=True)
        except (binascii.Error, TypeError, ValueError):
            raise PackError("bad_file", f"file {sha}: a chunk is not base64", sha256=sha) from None
        current = self.file
        if current is None or current.sha != sha:
            if current is not None:
                raise PackError(
                    "bad_file", f"file {current.sha} stops at {current.received} of "
                    f"{current.size} bytes", sha256=current.sha,
                )  # fmt: skip
            if offset != 0:
                raise PackError("bad_file", f"file {sha} does not start at 0", sha256=sha)
            self._begin_file(sha, size)
            current = self.file
            assert current is not None
        elif size != current.size or offset != current.received:
            raise PackError("bad_file", f"file {sha}: its chunks are out of order", sha256=sha)
        if current.received + len(chunk) > size:
            raise PackError("bad_file", f"file {sha} is longer than {size} bytes", sha256=sha)
        if current.upload is not None:
            current.upload.write(chunk)
        else:
            current.hasher.update(chunk)
        current.received += len(chunk)
        if current.received == size:
            self._end_file(current)

    def _begin_file(self, sha: str, size: int) -> None:
        expected = self._next_expected()
        if expected is not None and expected < sha:
            raise PackError(
                "missing_file", f"the pack lacks the file {expected} of an attachment",
                sha256=expected,
            )  # fmt: skip
        if expected != sha:
            raise PackError(
                "bad_file", f"file {sha}: no attachment names it (or the files are out of order)",
                sha256=sha,
            )  # fmt: skip
        root = self.options.attachments
        assert root is not None
        # Content the store has already is only checked, not written again.
        staged = None if blobs.holds(root, sha, size) else blobs.stage(root, self.token, sha)
        self.file = _File(sha, size, staged)

    def _end_file(self, current: _File) -> None:
        self.file = None
        if current.upload is not None:
            digest = current.upload.finish()
        else:
            digest = current.hasher.hexdigest()
        if digest != current.sha:
            raise PackError(
                "bad_file", f"file {current.sha}: its content does not have that SHA-256",
                sha256=current.sha,
            )  # fmt: skip
        wrong = self.conn.execute(
            "SELECT id FROM attachments WHERE project_id = :p AND sha256 = :sha AND size != :n"
            " LIMIT 1", {"p": self.project_id, "sha": current.sha, "n": current.size},
        ).fetchone()  # fmt: skip
        if wrong is not None:
            raise PackError(
                "bad_file", f"file {current.sha} is {current.size} bytes, not its row's size",
                sha256=current.sha,
            )  # fmt: skip

    def _end_files(self, lineno: int) -> None:
        if self.file is not None:
            raise PackError(
                "bad_file", f"file {self.file.sha} stops at {self.file.received} of "
                f"{self.file.size} bytes", sha256=self.file.sha, line=lineno,
            )  # fmt: skip
        missing = self._next_expected()
        if missing is not None:
            raise PackError(
                "missing_file", f"the pack lacks the file {missing} of an attachment",
                sha256=missing, part=FILES_PART, line=lineno,
            )  # fmt: skip
        self.expected_files = None

    def discard_files(self) -> None:
        """A refused import: its staged files go (the rows go with the rollback)."""
        if self.file is not None and self.file.upload is not None:
            self.file.upload.discard()
        if self.options.attachments is not None:
            blobs.discard_staged(self.options.attachments, self.token)

    def commit_files(self) -> None:
        if self.options.attachments is not None:
            blobs.commit_staged(self.options.attachments, self.token)

    # -- the special rows

    def _project(self, row: dict[str, Any], lineno: int) -> None:
        if self.project_id:
            raise PackError("bad_row", "a pack holds one project", part="projects", line=lineno)
        self.pack_project = dict(row)
        name = _free_name(self.conn, self.options.name or str(row.get("name") or "imported"))
        state = self.options.state or ("archived" if row.get("state") == "archived" else "paused")
        importer = self.options.importer
        epoch = row.get("epoch")
        overrides = {
            "name": name,
            "state": state,
            "state_from": None,
            "stop_target": None,
            "state_at": self.tx.now,
            # DESIGN §2: an import changes the epoch, so a client holding a cursor resyncs.
            "epoch": (epoch if isinstance(epoch, int) and epoch >= 1 else 1) + 1,
            "lead_member_id": None,
            "created_by": importer.id if importer is not None else row.get("created_by"),
            "updated_at": self.tx.now,
            "workspace": None,  # its own default (ImportOptions)
            "home_node": self.tx.node,  # its workspace is made here (docs/cluster.md)
        }
        if self.options.forked_from is not None:
            overrides["forked_from"] = self.options.forked_from
        values = {k: v for k, v in row.items() if k != "id"} | overrides
        try:
            cur = self.conn.execute(
                f"INSERT INTO projects ({', '.join(values)}) VALUES"
                f" ({', '.join('?' * len(values))}) RETURNING id",
                list(values.values()),
            )
            project_id = int(cur.fetchone()[0])
        except sqlite3.Error as exc:
            raise PackError("bad_row", f"the project row was refused: {exc}") from None
        declare_created(self.conn, project_id)  # a new row: the job's own
        self.project_id = project_id
        old = row.get("id")
        lead = row.get("lead_member_id")
        if isinstance(lead, int) and "members" in self.ids:
            self.late.append(("projects", "lead_member_id", self.project_id, lead))
        if not isinstance(old, int):
            raise PackError("bad_row", "the project has no id", part="projects", line=lineno)

    def _finish(self) -> dict[str, Any]:
        if not self.project_id:
            raise PackError("missing_part", "the pack has no project row", part="projects")
        if self.options.importer is not None and self.owner_member is None:
            raise PackError("no_owner", "the pack has no owner to hand to you", part="members")
        self._deferred()
        for table, column, key, old in self.late:
            new = self.ref(TABLES_BY_NAME[table].refs[column], old, late=True)
            try:
                self.conn.execute(
                    f"UPDATE {table} SET {column} = :v WHERE id = :k", {"v": new, "k": key}
                )
            except sqlite3.Error as exc:
                raise PackError("bad_ref", f"{table}.{column}: {exc}", part=table) from None
        self._index()
        self.tx.counters.clear()  # ids were taken past what the writer's counters know
        actor = self.owner_member if self.options.importer is not None else None
        audit_store.record(
            self.conn, now=self.tx.now, actor_kind="human" if actor else "system",
            actor_id=actor, project_id=self.project_id, action=self.options.action,
            outcome="ok",
            detail={"from": self.pack_project.get("id"), "name": self.pack_project.get("name"),
                    "rows": self.counts},
        )  # fmt: skip
        project = projects_store.get(self.conn, self.project_id)
        assert project is not None
        return {"project_id": project.id, "name": project.name, "epoch": project.epoch,
                "state": project.state, "rows": self.counts}  # fmt: skip

    def _deferred(self) -> None:
        """Deferred refs (``PackTable.deferred``): checked against the range of the part they
        point to, moved by its offset, then checked to name a row — three statements a column,
        whatever the number of rows."""
        for name in self.parts:
            table = TABLES_BY_NAME.get(name)
            own = self.ids.get(name)
            if table is None or not table.deferred or own is None or own.first is None:
                continue
            rows = {"lo": own.first + own.offset, "hi": (own.last or 0) + own.offset}
            where = "t.id BETWEEN :lo AND :hi AND t.{c} IS NOT NULL"
            for column in table.deferred:
                target = table.refs[column]
                ids = self.ids.get(target)
                span = (
                    (ids.first, ids.last) if ids is not None and ids.first is not None else (0, -1)
                )
                bad = self.conn.execute(
                    f"SELECT t.{column} FROM {name} t WHERE {where.format(c=column)}"
                    f" AND (t.{column} < :first OR t.{column} > :last) LIMIT 1",
                    rows | {"first": span[0], "last": span[1]},
                ).fetchone()
                if bad is None and ids is not None and ids.first is not None:
                    self.conn.execute(
                        f"UPDATE {name} AS t SET {column} = {column} + :offset"
                        f" WHERE {where.format(c=column)}", rows | {"offset": ids.offset},
                    )  # fmt: skip
                    bad = self.conn.execute(
                        f"SELECT t.{column} - :offset FROM {name} t WHERE {where.format(c=column)}"
                        f" AND NOT EXISTS (SELECT 1 FROM {target} r WHERE r.id = t.{column})"
                        " LIMIT 1", rows | {"offset": ids.offset},
                    ).fetchone()  # fmt: skip
                if bad is not None:
                    raise PackError(
                        "bad_ref", f"a reference to {target} {bad[0]!r} is not in the pack",
                        part=name,
                    )  # fmt: skip

    def _index(self) -> None:
        """The search index (docs/search.md): the new records, like any write (the indexer
        reads the new messages as it reads any others)."""
        p = {"p": self.project_id}
        for (entry_id,) in self.conn.execute(
            "SELECT id FROM memory_entries WHERE project_id = :p", p
        ).fetchall():
            memory_actions.index_entry(self.conn, int(entry_id))
        decisions = self.conn.execute("SELECT id FROM decisions WHERE project_id = :p", p)
        memory_actions.index_decisions(self.conn, {int(r[0]) for r in decisions.fetchall()})


def _free_name(conn: Connection, name: str) -> str:
    name = name.strip()[:70] or "imported"
    if not projects_store.name_taken(conn, name):
        return name
    n = 2
    while projects_store.name_taken(conn, f"{name} ({n})"):
        n += 1
    return f"{name} ({n})"


# -- per-table rules ------------------------------------------------------------------------------


def _members(imp: Importer, part: _Part, values: list[Any]) -> None:
    ix = part.index
    new_id = int(values[ix["id"]])
    imp.member_ids.add(new_id - imp.ids["members"].offset)
    if "user_id" not in ix:
        raise PackError("bad_columns", "members without user_id")
    if values[ix["kind"]] != "human":
        values[ix["user_id"]] = None
        return
    importer = imp.options.importer
    if importer is None:  # the same server: the same people
        return
    role, status = values[ix["role"]], values[ix["status"]] if "status" in ix else "active"
    if imp.owner_member is None and role == "owner" and status != "left":
        imp.owner_member = new_id
        values[ix["user_id"]] = importer.id
        return
    # Another person: a placeholder account nobody can sign in to (no session, no link).
    handle = f"imported-{secrets.token_hex(6)}"
    cur = imp.conn.execute(
        "INSERT INTO users (handle, display_name, is_admin, created_at) VALUES (?, ?, 0, ?)"
        " RETURNING id",
        (handle, str(values[ix["display_name"]] or handle)[:64], imp.tx.now),
    )
    values[ix["user_id"]] = int(cur.fetchone()[0])


def _member_actor(imp: Importer, kind: Any, value: Any) -> Any:
    if kind in MEMBER_ACTOR_KINDS and isinstance(value, int) and value in imp.member_ids:
        return value + imp.ids["members"].offset
    return None


def _actor(imp: Importer, part: _Part, kind_column: str, id_column: str, values: list[Any]) -> None:
    ix = part.index
    if id_column in ix:
        kind = values[ix[kind_column]] if kind_column in ix else None
        values[ix[id_column]] = _member_actor(imp, kind, values[ix[id_column]])


def _audit(imp: Importer, part: _Part, values: list[Any]) -> None:
    _actor(imp, part, "actor_kind", "actor_id", values)


def _route_target(imp: Importer, part: _Part, values: list[Any]) -> None:
    ix = part.index
    if "scope" in ix and "target" in ix and values[ix["scope"]] == "member":
        target = values[ix["target"]]
        old = int(target) if isinstance(target, str) and target.isdigit() else None
        values[ix["target"]] = str(imp.ref("members", old)) if old is not None else target
    _actor(imp, part, "author_kind", "author_id", values)


# The start of a stored message object (room.store.messages.message_object): its own ids.
_HEAD = regex.compile(r'\{"id":(\d+),"project_id":\d+,"seq":(-?\d+),"author_id":(\d+|null),')


def _message(imp: Importer, part: _Part, values: list[Any]) -> None:
    at = part.index.get("frame")
    if at is None:
        raise PackError("bad_columns", "messages without their frame")
    frame = values[at]
    if not isinstance(frame, str):
        raise PackError("bad_row", "a message's frame is not text")
    # Most messages name no other message and no member besides their author (no reply, no
    # mention, no meta, no reactions): only the
    # object's head holds ids then (a raw `"key":` never occurs inside a JSON string).
    head = _HEAD.match(frame)
    if (
        head is not None
        and '"reply_to":null,"reply_excerpt":null,"mentions":[]' in frame
        and '"meta":' not in frame
        and '"reactions":' not in frame
    ):
        author = head.group(3)
        new_author = "null" if author == "null" else imp._map("members", int(author))
        new_id = imp._map("messages", int(head.group(1)))
        values[at] = (
            f'{{"id":{new_id},"project_id":{imp.project_id},"seq":{head.group(2)},'
            f'"author_id":{"null" if new_author is None else new_author},'
        ) + frame[head.end() :]
        return
    try:
        obj = json.loads(frame)
    except ValueError:
        raise PackError("bad_row", "a message's frame is not JSON") from None
    if not isinstance(obj, dict):
        raise PackError("bad_row", "a message's frame is not an object")
    values[at] = encode_json(remap_message(obj, imp.project_id, imp._map))


def _attachment(imp: Importer, part: _Part, values: list[Any]) -> None:
    """An attachment names its content by SHA-256 (a path in the store): nothing else."""
    for column in ("sha256", "thumb_sha256"):
        at = part.index.get(column)
        value = values[at] if at is not None else None
        if value is None and column == "thumb_sha256":
            continue
        if not isinstance(value, str) or not _SHA256.fullmatch(value):
            raise PackError("bad_row", f"an attachment's {column} is not a SHA-256")


def _event(imp: Importer, part: _Part, values: list[Any]) -> None:
    at = part.index.get("frame")
    if at is None or values[at] is None:
        return
    try:
        frame = json.loads(values[at])
        message = frame["message"]
    except (TypeError, ValueError, KeyError):
        raise PackError("bad_row", "an event's frame is not a message update") from None
    frame["project_id"] = imp.project_id
    frame["message"] = remap_message(message, imp.project_id, imp._map)
    values[at] = encode_json(frame)


_SPECIAL = {
    "members": _members,
    "audit_events": _audit,
    "route_settings": _route_target,
    "route_changes": _route_target,
    "messages": _message,
    "events": _event,
    "attachments": _attachment,
}


def read_lines(pack: IO[bytes]) -> Iterator[bytes]:
    """The lines of a pack file, each at most :data:`MAX_LINE_BYTES`."""
    lineno = 0
    while line := pack.readline(MAX_LINE_BYTES + 1):
        lineno += 1
        if len(line) > MAX_LINE_BYTES:
            raise PackError(
                "line_too_long", f"a line is longer than {MAX_LINE_BYTES} bytes", line=lineno
            )
        yield line


def import_pack(
    conn: Connection, tx: Tx, lines: Iterable[bytes | str], options: ImportOptions
) -> dict[str, Any]:
    """Write the pack in ``lines`` (:func:`read_lines` of a file) as a new project inside the
    caller's transaction."""
    tx.write_directly(conn)
    importer = Importer(conn, tx, options)
    try:
        result = importer.run(lines)
        importer.commit_files()  # the last step: every check has passed
    except BaseException:
        importer.discard_files()
        raise
    return result


def _largest_id(conn: Connection, table: str) -> int:
    """The largest id ``table`` holds, or (PostgreSQL) its identity sequence has handed out,
    whichever is larger: the pack's rows are numbered past it."""
    sql = f"SELECT coalesce(max(id), 0) FROM {table}"
    if dialect_for(conn).name == "postgresql":
        sql = (
            f"SELECT greatest(coalesce(max(id), 0), coalesce(pg_sequence_last_value("
            f"pg_get_serial_sequence('{table}', 'id')::regclass), 0)) FROM {table}"
        )
    return int(conn.execute(sql).fetchone()[0])


def _advance_sequences(conn: Connection, ids: dict[str, _Ids]) -> None:
    """PostgreSQL: the rows were written with ids of their own (past each table's largest), which
    a table's identity sequence does not see; it is moved past them, or the next row numbered
    by the sequence would collide. (SQLite numbers from the table's largest id.) Another
    server inserting into the same table meanwhile makes the import fail on a duplicate id,
    whole: docs/storage.md, "Several writers"."""
    if dialect_for(conn).name != "postgresql":
        return
    for table in sorted(name for name, found in ids.items() if found.last is not None):
        conn.execute(
            f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), greatest(1,"
            f" (SELECT max(id) FROM {table}), coalesce(pg_sequence_last_value("
            f"pg_get_serial_sequence('{table}', 'id')::regclass), 0)))"
        ).fetchone()


def fork_project(
    conn: Connection, tx: Tx, project_id: int, actor_member: int, name: str | None
) -> dict[str, Any]:
    """A new project from this one's records (docs/packs.md, "Fork"): its export restricted to
    :data:`room.rules.packs.FORK_TABLES`, imported on the same server (the same people). It starts
    in its own default workspace: the source's folder stays the source's."""
    # Chunks of rows split on "\n" only: JSON text holds no raw newline, but may hold U+2028.
    lines = [
        line
        for chunk in export_lines(conn, project_id, tx.now, FORK_TABLES, attachments=None)
        for line in chunk.split(b"\n")
        if line
    ]
    source = projects_store.get(conn, project_id)
    assert source is not None
    result = import_pack(
        conn, tx, lines,
        ImportOptions(importer=None, name=name or f"{source.name} (fork)", state="active",
                      forked_from=project_id, parts=FORK_TABLES, action="project.forked"),
    )  # fmt: skip
    audit_store.record(
        conn, now=tx.now, actor_kind="human", actor_id=actor_member, project_id=project_id,
        action="project.fork", outcome="ok", detail={"fork": result["project_id"]},
    )  # fmt: skip
    return result
