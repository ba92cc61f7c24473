"""Open the database file, check its version, back it up and migrate it.

Before any migration of a database that already holds data, a copy is written with the SQLite
backup API to ``<data>/backups/room-v<N>-<timestamp>.sqlite`` and checked with
``PRAGMA integrity_check``; a failed check stops the start before anything changes.
"""

from __future__ import annotations

import logging
import os
import re
import sqlite3
import time
from pathlib import Path

from room.errors import SchemaTooNewError, StorageError
from room.rules.searchtext import index_text, index_unigrams
from room.store.schema import MIGRATIONS, SCHEMA_VERSION

log = logging.getLogger(__name__)

BUSY_TIMEOUT_MS = 5000
MMAP_BYTES = 1 << 30


def connect(
    path: Path,
    *,
    synchronous: str = "FULL",
    readonly: bool = False,
    factory: type[sqlite3.Connection] = sqlite3.Connection,
) -> sqlite3.Connection:
    """A connection with the project's pragmas; transactions are explicit (autocommit mode).
    ``factory``: the connection's class (the writer's guards its batch's waiting rows)."""
    if readonly:
        conn = sqlite3.connect(
            f"file:{path}?mode=ro", uri=True, isolation_level=None, check_same_thread=False
        )
    else:
        # A new database is its owner's alone whatever the umask (SQLite gives its -wal and
        # -shm files the database's mode): room.infra.perms. Only a new one: closing any
        # descriptor of an open database drops this process's POSIX locks on it, which would
        # let another connection's close delete the WAL under the rest.
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600))
        except FileExistsError:
            pass
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, factory=factory)
    # The search index's text (room.store.search), callable from SQL: migrations and rebuilds.
    conn.create_function("room_index_text", 1, index_text, deterministic=True)
    conn.create_function("room_index_unigrams", 1, index_unigrams, deterministic=True)
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    conn.execute("PRAGMA foreign_keys = ON")
    if not readonly:
        conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(f"PRAGMA synchronous = {synchronous}")
    # Reads straight from the OS page cache instead of copying each page through read(): the
    # history page's tail latency on a large project is mostly page reads.
    conn.execute(f"PRAGMA mmap_size = {MMAP_BYTES}")
    return conn


_FALSE_NULL = re.compile(r"NULL value in (\w+)\.(\w+)")


def attach(conn: sqlite3.Connection, name: str, path: Path) -> None:
    """Attach another database file as ``name``, read as the main one is (memory-mapped)."""
    conn.execute(f"ATTACH DATABASE ? AS {name}", (str(path),))
    conn.execute(f"PRAGMA {name}.mmap_size = {MMAP_BYTES}")


def integrity_problems(conn: sqlite3.Connection, pragma: str = "integrity_check") -> list[str]:
    """What ``PRAGMA integrity_check`` (or ``quick_check``) finds, minus claims the data refutes.

    SQLite 3.40 reports ``NULL value in T.C`` for a WITHOUT ROWID table whose NOT NULL non-key
    column stands before a key column, on rows that hold no NULL (migration 0007 moved our link
    tables' keys first; a database not yet migrated still has the old layout). Such a line is
    kept only when ``SELECT ... WHERE C IS NULL`` really finds a row.
    """
    problems = []
    for (line,) in conn.execute(f"PRAGMA {pragma}"):
        if line == "ok":
            continue
        match = _FALSE_NULL.fullmatch(line)
        if match:
            table, column = match.groups()
            if (
                conn.execute(f'SELECT 1 FROM "{table}" WHERE "{column}" IS NULL LIMIT 1').fetchone()
                is None
            ):
                continue
        problems.append(line)
    return problems


def user_version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def check_version(conn: sqlite3.Connection, path: Path) -> int:
    version = user_version(conn)
    if version > SCHEMA_VERSION:
        raise SchemaTooNewError(
            f"{path} has schema version {version}, but this Project Room understands only up to "
            f"{SCHEMA_VERSION}; upgrade Project Room (the database was not changed)",
            found=version,
            supported=SCHEMA_VERSION,
        )
    return version


def backup(conn: sqlite3.Connection, backups_dir: Path, version: int, now: float) -> Path:
    """Copy the live database with the backup API and verify the copy."""
    backups_dir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    target = backups_dir / f"room-v{version}-{stamp}.sqlite"
    n = 1
    while target.exists():
        n += 1
        target = backups_dir / f"room-v{version}-{stamp}-{n}.sqlite"
    dest = sqlite3.connect(target)
    try:
        conn.backup(dest)
        result = "; ".join(integrity_problems(dest)) or "ok"
    finally:
        dest.close()
    if result != "ok":
        raise StorageError(
            f"backup {target} failed its integrity check ({result}); not migrating",
            backup=str(target),
        )
    log.info("backup written and checked: %s", target)
    return target


def migrate(conn: sqlite3.Connection, path: Path, now: float) -> list[str]:
    """Apply pending migrations, each in its own ``BEGIN IMMEDIATE`` transaction.

    Returns the names applied. A fresh (empty) database is not backed up: there is nothing to lose.
    """
    version = check_version(conn, path)
    if version == SCHEMA_VERSION:
        return []
    has_data = conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] > 0
    if has_data:
        backup(conn, path.parent / "backups", version, now)
    applied = []
    for index in range(version, SCHEMA_VERSION):
        migration = MIGRATIONS[index]
        conn.execute("BEGIN IMMEDIATE")
        try:
            # executescript would COMMIT first; run statement by statement inside our transaction.
            for statement in _split_sql(migration.sql):
                conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {index + 1}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        applied.append(migration.name)
        log.debug("applied migration %s", migration.name)
    # One line, not one per migration: a fresh data folder printed twenty before the URL.
    if applied:
        log.info(
            "applied %d migration%s (%s)",
            len(applied),
            "" if len(applied) == 1 else "s",
            applied[0] if len(applied) == 1 else f"{applied[0]} … {applied[-1]}",
        )
    return applied


def _split_sql(script: str) -> list[str]:
    lines = [line for line in script.splitlines() if not line.strip().startswith("--")]
    statements, buf = [], ""
    for piece in "\n".join(lines).split(";"):
        buf += piece + ";"
        if sqlite3.complete_statement(buf):
            if buf.strip(" \n\t;"):
                statements.append(buf.strip())
            buf = ""
    return statements
