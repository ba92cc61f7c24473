"""``room copy``: a whole server's database copied from one store to another — a SQLite data
folder or a PostgreSQL database on either side (docs/storage.md, "Moving a server between
stores").

Why not packs: a pack (room.actions.pack_export / pack_import) moves one project *into* a
running server, giving its rows new ids after the server's own and leaving out what belongs to
the server (users, sign-in, audit). Moving a server needs the opposite: every table, every id
as it was (links, permalinks, agents' cursors, the search index's rows all name ids), into a
store that holds nothing yet.

The copy:

* reads the source in one snapshot (a read transaction; a server may keep running on it) and
  never writes to it; the source must be at this code's schema (``source_not_current``);
* refuses a target that holds any row (``target_not_empty``, exit 7, before it changes
  anything), migrates an empty one, and checks that both have the same tables and columns
  (``schema_mismatch``);
* writes every table in one transaction of the target, parents before children (the foreign
  keys, read from the target's catalog), rows in id order, with ``COPY`` on PostgreSQL (whose
  foreign keys are checked at the end of each table's statement) and 500-row ``executemany``
  on SQLite (``defer_foreign_keys``: checked at the commit; a decision names its successor);
* moves PostgreSQL's identity sequences past the copied ids (``setval``), so the next insert
  without an id does not collide;
* before committing, counts every table of the target and compares its digest (an
  order-free sum of SHA-256 of each row's values) and a SHA-256 of the messages' bodies in id
  order with the source's; any difference rolls everything back (``copy_mismatch``);
* rebuilds what is derived rather than copied: the memory records' search rows (from
  ``search_records``), then the messages' index (the indexer catches up; on SQLite the index
  file ``search.sqlite``), and on PostgreSQL the planner's statistics (``ANALYZE``).

Not copied: the target's cluster id, which its own migration drew (the copy is a new log of
record: its nodes name other bus subjects than the source's, docs/cluster.md "Subjects"); the
files of the data folder (attachments' blobs, workspaces, backups): a server
on the target uses the same data folder, or they are copied with it.
"""

from __future__ import annotations

import hashlib
import sqlite3
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from room.errors import StorageError
from room.rules.searchtext import index_texts
from room.store import indexer, pg, search_pg
from room.store.dialect import POSTGRESQL, Connection, dialect_for, dialect_of
from room.store.migrate import connect as sqlite_connect
from room.store.migrate import migrate as sqlite_migrate
from room.store.pg_migrate import migrate as pg_migrate
from room.store.pg_migrate import migration_status
from room.store.schema import SCHEMA_VERSION

DB_FILE = "room.sqlite"
SQLITE_BATCH = 500
FETCH = 2_000
# Derived (rebuilt by the copy or the indexer) or the store's own bookkeeping: never copied.
# ``search_changes`` is the indexer's queue: the target's index is built afresh from the
# messages as they are (on PostgreSQL the messages' trigger queues each one as it is copied).
# ``cluster_identity`` is the database's own id, drawn by its migration: a copy is a new log of
# record, a cluster of its own on the bus (room.store.schema_cluster).
DERIVED = frozenset(
    {
        "search_fts",
        "message_fts",
        "index_state",
        "search_changes",
        "schema_migrations",
        "cluster_identity",
    }
)
_MOD = 1 << 256


class CopyError(StorageError):
    """A copy refused or undone; ``code``: ``source_missing``, ``source_not_current``,
    ``target_not_empty``, ``schema_mismatch``, ``copy_failed``, ``copy_mismatch``."""

    code = "copy_refused"


@dataclass
class Side:
    """One store of the copy: its connection and how to name it to a person."""

    conn: Connection
    label: str
    path: Path | None = None  # SQLite: the database file
    url: str | None = None  # PostgreSQL

    @property
    def is_pg(self) -> bool:
        return dialect_for(self.conn) is POSTGRESQL

    @property
    def pg(self) -> pg.PgConnection:
        assert isinstance(self.conn, pg.PgConnection)
        return self.conn

    @property
    def sqlite(self) -> sqlite3.Connection:
        assert isinstance(self.conn, sqlite3.Connection)
        return self.conn

    @property
    def index_target(self) -> Path | str:
        return self.url if self.url is not None else Path(str(self.path))


@dataclass
class TableReport:
    rows: int
    target_rows: int
    digest: str
    seconds: float
    sequence: int | None = None


@dataclass
class CopyReport:
    source: str
    target: str
    tables: dict[str, TableReport] = field(default_factory=dict)
    message_bodies_sha256: str = ""
    indexed_seconds: float = 0.0
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "target": self.target,
            "tables": {
                name: {
                    "rows": t.rows,
                    "target_rows": t.target_rows,
                    "digest": t.digest,
                    **({} if t.sequence is None else {"sequence": t.sequence}),
                }
                for name, t in self.tables.items()
            },
            "rows": sum(t.rows for t in self.tables.values()),
            "message_bodies_sha256": self.message_bodies_sha256,
            "indexed_secs": round(self.indexed_seconds, 3),
            "secs": round(self.seconds, 3),
        }


# -- opening -----------------------------------------------------------------------------------


def _db_file(spec: str) -> Path:
    path = Path(spec)
    return path if path.suffix == ".sqlite" else path / DB_FILE


def open_side(spec: str, *, source: bool) -> Side:
    """A store named by a ``postgresql://`` URL or a SQLite data folder (or its ``.sqlite``)."""
    if dialect_of(spec) is POSTGRESQL:
        return Side(pg.connect(spec, application_name="room-copy"), pg.redact(spec), url=spec)
    path = _db_file(spec)
    if source and not path.is_file():
        raise CopyError(f"no database at {path}", code="source_missing", path=str(path))
    if not source:
        path.parent.mkdir(parents=True, exist_ok=True)
    return Side(sqlite_connect(path, readonly=source), str(path), path=path)


# -- the catalog -------------------------------------------------------------------------------


def tables(side: Side) -> list[str]:
    """The copied tables of a store (no derived table, no FTS5 shadow table)."""
    if side.is_pg:
        rows = side.conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
        ).fetchall()
    else:
        rows = side.conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
        ).fetchall()
    names = {str(r[0]) for r in rows}
    return sorted(n for n in names if n not in DERIVED and not n.startswith("search_fts_"))


def columns(side: Side, table: str) -> list[str]:
    """The table's stored columns, in order (generated ones left out)."""
    if side.is_pg:
        rows = side.conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_schema ="
            " current_schema() AND table_name = ? AND is_generated = 'NEVER'"
            " ORDER BY ordinal_position",
            (table,),
        ).fetchall()
        return [str(r[0]) for r in rows]
    return [str(r[1]) for r in side.conn.execute(f'PRAGMA table_info("{table}")')]


def references(side: Side, names: list[str]) -> dict[str, set[str]]:
    """For each table, the other tables its foreign keys point at."""
    out: dict[str, set[str]] = {name: set() for name in names}
    if side.is_pg:
        for child, parent in side.conn.execute(
            "SELECT conrelid::regclass::text, confrelid::regclass::text FROM pg_constraint"
            " WHERE contype = 'f' AND connamespace = current_schema()::regnamespace"
        ):
            if child in out and parent != child:
                out[child].add(parent)
        return out
    for name in names:
        for row in side.conn.execute(f'PRAGMA foreign_key_list("{name}")'):
            if row[2] != name:
                out[name].add(str(row[2]))
    return out


def dependency_order(refs: dict[str, set[str]]) -> list[str]:
    """Parents before children (Kahn's order, by name among the ready ones); a cycle is an
    error naming its tables (the schema has none)."""
    left = {name: set(parents) & refs.keys() for name, parents in refs.items()}
    order: list[str] = []
    while left:
        ready = sorted(name for name, parents in left.items() if not parents)
        if not ready:
            raise CopyError(
                "the foreign keys form a cycle: " + ", ".join(sorted(left)),
                code="schema_mismatch",
                tables=sorted(left),
            )
        for name in ready:
            order.append(name)
            del left[name]
        for parents in left.values():
            parents.difference_update(ready)
    return order


def identity_columns(side: Side) -> dict[str, str]:
    """PostgreSQL: each table's identity column (its sequence is advanced after the copy)."""
    return {
        str(t): str(c)
        for t, c in side.conn.execute(
            "SELECT table_name, column_name FROM information_schema.columns"
            " WHERE table_schema = current_schema() AND is_identity = 'YES'"
        )
    }


# -- digests -----------------------------------------------------------------------------------


def _value(value: Any) -> str:
    """One value, spelled the same whichever store it came from (an integral float is the
    integer: SQLite hands back a REAL column's 2.0 as 2.0, PostgreSQL a bigint as 2)."""
    if value is None:
        return "n"
    if isinstance(value, bool):
        return f"i{int(value)}"
    if isinstance(value, int):
        return f"i{value}"
    if isinstance(value, float):
        return f"i{int(value)}" if value.is_integer() else f"f{value.hex()}"
    if isinstance(value, bytes | bytearray | memoryview):
        return "b" + bytes(value).hex()
    return "s" + str(value)


class Digest:
    """An order-free digest of rows: the sum of each row's SHA-256, modulo 2**256."""

    def __init__(self) -> None:
        self.total = 0
        self.rows = 0

    def add(self, row: Iterable[Any]) -> None:
        text = "\x1f".join(_value(v) for v in row)
        self.total = (self.total + int.from_bytes(hashlib.sha256(text.encode()).digest())) % _MOD
        self.rows += 1

    def hexdigest(self) -> str:
        return f"{self.total:064x}"


def _select(table: str, names: list[str]) -> str:
    order = " ORDER BY id" if "id" in names else ""
    return f"SELECT {', '.join(names)} FROM {table}{order}"


def _stream(side: Side, sql: str) -> Iterator[tuple[Any, ...]]:
    """The rows of ``sql``, ``FETCH`` at a time (a server-side cursor on PostgreSQL)."""
    if side.is_pg:
        with side.pg.raw.cursor(name="room_copy") as cursor:
            cursor.itersize = FETCH
            cursor.execute(sql)
            yield from cursor
        return
    yield from side.conn.execute(sql)


def table_digest(side: Side, table: str, names: list[str]) -> Digest:
    digest = Digest()
    for row in _stream(side, _select(table, names)):
        digest.add(row)
    return digest


def bodies_sha256(side: Side) -> str:
    """SHA-256 of every message's id and body, in id order."""
    sha = hashlib.sha256()
    for message_id, body in _stream(side, "SELECT id, body FROM messages ORDER BY id"):
        sha.update(f"{int(message_id)}\x1f{body}\x1e".encode())
    return sha.hexdigest()


# -- the copy ----------------------------------------------------------------------------------


def _target_rows(target: Side) -> dict[str, int]:
    """Rows per existing table of the target (before it is migrated)."""
    counts = {}
    for name in tables(target):
        counts[name] = int(target.conn.execute(f"SELECT count(*) FROM {name}").fetchone()[0])
    return {name: n for name, n in counts.items() if n}


def _check_source_current(source: Side) -> None:
    if source.is_pg:
        status = migration_status(source.pg)
        if status["pending"] or status["unknown"]:
            raise CopyError(
                "the source database is not at this code's schema (migrate it first: start "
                "a server on it once)",
                code="source_not_current",
                migrations=status,
            )
        return
    version = int(source.conn.execute("PRAGMA user_version").fetchone()[0])
    if version != SCHEMA_VERSION:
        raise CopyError(
            f"the source database is at schema version {version}, this code's is "
            f"{SCHEMA_VERSION} (migrate it first: start a server on it once)",
            code="source_not_current",
            version=version,
            supported=SCHEMA_VERSION,
        )


def _migrate_target(target: Side, now: float) -> None:
    if target.is_pg:
        pg_migrate(target.pg, now=now)
    else:
        assert target.path is not None
        sqlite_migrate(target.sqlite, target.path, now=now)


def _write(target: Side, table: str, names: list[str], rows: Iterable[tuple[Any, ...]]) -> None:
    if target.is_pg:
        with (
            target.pg.raw.cursor() as cursor,
            cursor.copy(f"COPY {table} ({', '.join(names)}) FROM STDIN") as copy,
        ):
            for row in rows:
                copy.write_row(row)
        return
    sql = f"INSERT INTO {table} ({', '.join(names)}) VALUES ({', '.join('?' * len(names))})"
    batch: list[tuple[Any, ...]] = []
    for row in rows:
        batch.append(row)
        if len(batch) >= SQLITE_BATCH:
            target.conn.executemany(sql, batch)
            batch.clear()
    if batch:
        target.conn.executemany(sql, batch)


def _rebuild_record_index(target: Side) -> None:
    rows = target.conn.execute("SELECT id, body FROM search_records ORDER BY id").fetchall()
    if target.is_pg:
        for record_id, body in rows:
            search_pg.write_record(target.conn, -int(record_id), str(body))
        return
    target.conn.executemany(
        "INSERT INTO search_fts (rowid, body, uni) VALUES (?, ?, ?)",
        [(-int(r[0]), *index_texts(str(r[1]))) for r in rows],
    )


def copy_store(source_spec: str, target_spec: str, *, now: float | None = None) -> CopyReport:
    """Copy every table of the store at ``source_spec`` into the empty store at
    ``target_spec`` (module docstring); the report says what was copied and checked."""
    started = time.monotonic()
    now = time.time() if now is None else now
    source = open_side(source_spec, source=True)
    try:
        target = open_side(target_spec, source=False)
        try:
            return _copy(source, target, now, started)
        finally:
            target.conn.close()
    finally:
        source.conn.close()


def _copy(source: Side, target: Side, now: float, started: float) -> CopyReport:
    _check_source_current(source)
    found = _target_rows(target)
    if found:
        raise CopyError(
            f"the target {target.label} is not empty ({sum(found.values())} rows in "
            f"{len(found)} tables); nothing was written",
            code="target_not_empty",
            tables=found,
        )
    _migrate_target(target, now)
    names = tables(source)
    target_names = tables(target)
    differing = sorted(set(names) ^ set(target_names))
    differing += [
        n for n in names if n in target_names and columns(source, n) != columns(target, n)
    ]
    if differing:
        raise CopyError(
            "the two stores' schemas differ in: " + ", ".join(differing),
            code="schema_mismatch",
            tables=differing,
        )
    order = dependency_order(references(target, names))
    report = CopyReport(source.label, target.label)
    # One snapshot of the source; one transaction of the target.
    source.conn.execute(
        "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY" if source.is_pg else "BEGIN"
    )
    target.conn.execute("BEGIN IMMEDIATE")
    if not target.is_pg:
        # A row may name a later row of its own table (a decision its successor): checked at
        # COMMIT, as PostgreSQL checks a COPY's rows at the end of the statement.
        target.conn.execute("PRAGMA defer_foreign_keys = ON")
    try:
        for table in order:
            at = time.monotonic()
            names_of = columns(source, table)
            digest = Digest()

            def rows(t: str = table, n: list[str] = names_of, d: Digest = digest) -> Iterator[Any]:
                for row in _stream(source, _select(t, n)):
                    d.add(row)
                    yield tuple(row)

            try:
                _write(target, table, names_of, rows())
            except (psycopg.Error, sqlite3.Error) as exc:
                first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
                raise CopyError(
                    f"copying {table} failed (rolled back): {first}",
                    code="copy_failed",
                    table=table,
                ) from exc
            report.tables[table] = TableReport(
                digest.rows, 0, digest.hexdigest(), time.monotonic() - at
            )
        if target.is_pg:
            for table, column in identity_columns(target).items():
                if table in report.tables:
                    value = target.conn.execute(
                        f"SELECT setval(pg_get_serial_sequence('{table}', '{column}'),"
                        f" (SELECT max({column}) FROM {table})) WHERE EXISTS"
                        f" (SELECT 1 FROM {table})"
                    ).fetchone()
                    report.tables[table].sequence = None if value is None else int(value[0])
        _rebuild_record_index(target)
        _verify(source, target, report)
        target.conn.execute("COMMIT")
    except BaseException:
        if target.conn.in_transaction:
            target.conn.execute("ROLLBACK")
        raise
    finally:
        if source.conn.in_transaction:
            source.conn.execute("ROLLBACK")
    at = time.monotonic()
    indexer.catch_up(target.index_target)
    if target.is_pg:
        # Planner statistics for the loaded tables (autovacuum would take its time): without
        # them a search's GIN index may be passed over for a scan of every row.
        target.conn.execute("ANALYZE")
    report.indexed_seconds = time.monotonic() - at
    report.seconds = time.monotonic() - started
    return report


def _verify(source: Side, target: Side, report: CopyReport) -> None:
    """Every table's rows and digest, and the messages' bodies, the same on both (inside the
    target's transaction: a difference rolls the copy back)."""
    wrong: dict[str, Any] = {}
    for table, entry in report.tables.items():
        got = table_digest(target, table, columns(target, table))
        entry.target_rows = got.rows
        if (got.rows, got.hexdigest()) != (entry.rows, entry.digest):
            wrong[table] = {"rows": entry.rows, "target_rows": got.rows}
    bodies = bodies_sha256(source)
    if bodies_sha256(target) != bodies:
        wrong["messages.body"] = "sha256 differs"
    if wrong:
        raise CopyError(
            "the copy differs from its source (rolled back): " + ", ".join(sorted(wrong)),
            code="copy_mismatch",
            tables=wrong,
        )
    report.message_bodies_sha256 = bodies
