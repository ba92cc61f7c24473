"""PostgreSQL through psycopg 3: a :class:`~room.store.dialect.Connection` over a psycopg
connection (docs/storage.md). The migrations are :mod:`room.store.pg_migrate`.

:class:`PgConnection` runs the store's SQL as written (``?``/``:name`` parameters, ``BEGIN
IMMEDIATE``, ``INSERT OR IGNORE``) through :meth:`room.store.dialect.Dialect.adapt`;
it is in autocommit mode with explicit transactions, as the SQLite connections are.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import psycopg
from psycopg import pq

from room.errors import StorageError
from room.store.dialect import POSTGRESQL, Cursor, Params

CONNECT_TIMEOUT_SECS = 10
_BEGIN = re.compile(r"^\s*BEGIN\s+(IMMEDIATE|DEFERRED|EXCLUSIVE)\s*;?\s*$", re.IGNORECASE)


class PgConnection:
    """The store's connection protocol over one psycopg connection (autocommit, tuples)."""

    dialect = POSTGRESQL

    def __init__(self, raw: psycopg.Connection[Any], *, readonly: bool = False) -> None:
        self.raw = raw
        self.readonly = readonly  # every transaction read-only (default_transaction_read_only)

    @property
    def in_transaction(self) -> bool:
        return self.raw.info.transaction_status != pq.TransactionStatus.IDLE

    def execute(self, sql: str, parameters: Params = (), /) -> Cursor:
        if _BEGIN.match(sql):
            # Every PostgreSQL transaction may write; the row locks taken inside it do what
            # IMMEDIATE does for SQLite's whole file.
            sql = "BEGIN"
        # Always with parameters, even none: an adapted statement spells % as %%.
        return self.raw.execute(POSTGRESQL.adapt(sql), parameters)

    def executemany(self, sql: str, parameters: Iterable[Params], /) -> Cursor:
        cursor = self.raw.cursor()
        cursor.executemany(POSTGRESQL.adapt(sql), parameters)
        return cursor

    def close(self) -> None:
        self.raw.close()

    @property
    def broken(self) -> bool:
        """Whether the connection to the server is lost (a restart, a network cut): only a
        new connection can go on."""
        return self.raw.closed or self.raw.broken


def connect(
    url: str,
    *,
    application_name: str = "room",
    statement_timeout_ms: int = 0,
    readonly: bool = False,
    factory: type[PgConnection] = PgConnection,
) -> PgConnection:
    """A connection to the PostgreSQL database at ``url`` (a libpq URL or key=value string).

    ``statement_timeout_ms``: PostgreSQL cancels a statement running longer (0: never).
    ``readonly``: every transaction of the connection is read-only (the readers').
    ``factory``: the connection's class (the writer's guards its batch's waiting rows).
    Raises :class:`~room.errors.StorageError` (``database_unreachable``) naming the server
    when it cannot be reached, never psycopg's own exception."""
    options = [f"-c statement_timeout={int(statement_timeout_ms)}"]
    if readonly:
        options.append("-c default_transaction_read_only=on")
    try:
        raw = psycopg.connect(
            url,
            autocommit=True,
            connect_timeout=CONNECT_TIMEOUT_SECS,
            application_name=application_name,
            options=" ".join(options),
            # No server-side prepared statements: psycopg prepares a statement after its fifth
            # run, and a job rolled back to its savepoint or a batch rerun after a deadlock
            # could leave its cache naming one the server never made ("prepared statement
            # _pg3_205 does not exist", a send failing as `internal` in the three-node soak).
            prepare_threshold=None,
        )
    except psycopg.Error as exc:
        raise StorageError(
            f"cannot reach the PostgreSQL database at {redact(url)}: {_first_line(exc)}",
            code="database_unreachable",
            url=redact(url),
        ) from exc
    return factory(raw, readonly=readonly)


def server_version(conn: PgConnection) -> str:
    """The server's version, as ``SHOW server_version`` says it (``15.18 (Debian …)``)."""
    row = conn.execute("SHOW server_version").fetchone()
    return str(row[0]) if row else ""


def redact(url: str) -> str:
    """``url`` without its password (for messages, logs and reports)."""
    return re.sub(r"(://[^:/@]*):[^@/]*@", r"\1:***@", url)


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
