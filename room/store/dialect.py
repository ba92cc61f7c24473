"""The two SQL dialects of the store: SQLite (the default) and PostgreSQL (docs/storage.md).

SQL is written once, in the form the store has always used (SQLite's: ``?`` or ``:name``
parameters, ``INSERT OR IGNORE``, ``ON CONFLICT … DO UPDATE``, ``RETURNING``) and adapted per
dialect by :meth:`Dialect.adapt`:

* Parameters: ``?`` becomes ``%s`` and ``:name`` becomes ``%(name)s`` for psycopg. No ``?``
  or ``:name`` inside a string literal, a quoted identifier or a comment is touched (``'?'``
  stays a question mark), and ``::`` (a PostgreSQL cast) is not a parameter. Every ``%``,
  quoted or not, becomes ``%%``: psycopg reads the whole text for placeholders, so an adapted
  statement is always run *with* parameters (an empty tuple when it has none).
* ``INSERT OR IGNORE INTO …`` becomes ``INSERT INTO … ON CONFLICT DO NOTHING`` (before a
  ``RETURNING``). SQLite's form also ignores NOT NULL and CHECK failures; the store relies on
  it only for duplicate keys, which is all ``ON CONFLICT DO NOTHING`` ignores.
* What has no faithful rewrite is *refused* with :class:`UnsupportedSQLError` rather than run
  with another meaning: ``INSERT OR REPLACE`` (deletes the old row; write an upsert),
  ``COLLATE NOCASE`` (use :meth:`Dialect.nocase_equals`), ``PRAGMA``, ``GLOB``.

Forms that differ in more than spelling are methods that return the statement *as written*
(``?``/``:name`` parameters; the connection adapts it when it runs): :meth:`~Dialect.upsert`,
:meth:`~Dialect.insert_ignore`, :meth:`~Dialect.nocase_equals`, :meth:`~Dialect.byte_length`,
:meth:`~Dialect.json_text`, and the column types; :func:`dialect_for` says which dialect a
connection speaks. :class:`Connection` is the DB-API surface the store uses, which
``sqlite3.Connection`` already has and :class:`room.store.pg.PgConnection` provides over psycopg.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal, Protocol

Params = Sequence[Any] | Mapping[str, Any]


class UnsupportedSQLError(ValueError):
    """A statement uses a SQLite-only form that has no faithful PostgreSQL rewrite."""


class Cursor(Protocol):
    """What the store reads from a statement's result."""

    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def fetchmany(self, size: int = ...) -> list[Any]: ...

    @property
    def description(self) -> Any: ...

    def __iter__(self) -> Iterator[Any]: ...


class Connection(Protocol):
    """The DB-API connection the store uses, in autocommit mode with explicit transactions
    (``BEGIN`` … ``COMMIT``). ``sqlite3.Connection`` satisfies it as it is."""

    @property
    def in_transaction(self) -> bool: ...

    def execute(self, sql: str, parameters: Params = ..., /) -> Cursor: ...

    def executemany(self, sql: str, parameters: Iterable[Params], /) -> Cursor: ...

    def close(self) -> None: ...


# One token of SQL the scanner must step over whole, or a place where a parameter may stand.
_TOKEN = re.compile(
    r"""
      (?P<string>'(?:[^']|'')*')            # 'it''s'
    | (?P<ident>"(?:[^"]|"")*"|`[^`]*`)     # "quoted" or `quoted` identifiers
    | (?P<line>--[^\n]*)                    # -- comment
    | (?P<block>/\*.*?\*/)                  # /* comment */
    | (?P<cast>::)                          # a PostgreSQL cast, never a parameter
    | (?P<named>:[A-Za-z_][A-Za-z0-9_]*)    # :name
    | (?P<qmark>\?(?P<number>[0-9]*))       # ? (?NNN is refused)
    | (?P<percent>%)
    | (?P<word>[A-Za-z_][A-Za-z0-9_]*)
    """,
    re.VERBOSE | re.DOTALL,
)
_REFUSED = {
    ("OR", "REPLACE"): "INSERT OR REPLACE deletes the old row: write an upsert (Dialect.upsert)",
    ("COLLATE", "NOCASE"): "COLLATE NOCASE: compare with Dialect.nocase_equals",
    ("PRAGMA",): "PRAGMA is SQLite's",
    ("GLOB",): "GLOB is SQLite's: use LIKE or a regular expression per dialect",
}


_INSERT_IGNORE = re.compile(r"^(\s*)INSERT\s+OR\s+IGNORE\b", re.IGNORECASE)


def _pg(sql: str) -> str:
    insert_ignore = _INSERT_IGNORE.match(sql)
    if insert_ignore:
        sql = insert_ignore.group(1) + "INSERT" + sql[insert_ignore.end() :]
    out: list[str] = []
    words: list[str] = []  # the upper-cased words outside literals and comments, in order
    style: str | None = None
    returning_at: int | None = None  # the first RETURNING: ON CONFLICT goes before it
    at = 0
    for match in _TOKEN.finditer(sql):
        out.append(sql[at : match.start()])
        at = match.end()
        kind, text = match.lastgroup, match.group()
        if kind in ("named", "qmark"):
            if match.group("number"):
                raise UnsupportedSQLError(f"numbered parameter {text} in: {sql}")
            if style not in (None, kind):
                raise UnsupportedSQLError(f"both ? and :name parameters in: {sql}")
            style = kind
            text = f"%({text[1:]})s" if kind == "named" else "%s"
        elif kind == "percent" or "%" in text:  # psycopg reads every %, quoted or not
            text = text.replace("%", "%%")
        elif kind == "word":
            words.append(text.upper())
            for refused, why in _REFUSED.items():
                if tuple(words[-len(refused) :]) == refused:
                    raise UnsupportedSQLError(f"{why}: {sql}")
            if words[-1] == "RETURNING" and returning_at is None:
                returning_at = len(out)
        out.append(text)
    out.append(sql[at:])
    if insert_ignore:
        if returning_at is not None:
            out.insert(returning_at, "ON CONFLICT DO NOTHING ")
        else:
            body = "".join(out).rstrip()
            end = ";" if body.endswith(";") else ""
            return body.removesuffix(";").rstrip() + " ON CONFLICT DO NOTHING" + end
    return "".join(out)


# ``{}`` lower-cased in A–Z only, on PostgreSQL in any locale (``lower`` follows the
# database's ``LC_CTYPE``: all of Unicode under ``C.UTF-8``), as SQLite's ``NOCASE`` does;
# ``translate`` is immutable, so an index may use it (migration ``0027_pg_parity``).
_UPPER = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
ASCII_LOWER = f"translate({{}}, '{_UPPER}', '{_UPPER.lower()}')"


@dataclass(frozen=True, slots=True)
class Dialect:
    """One SQL dialect: how a statement written once is spelled for it."""

    name: Literal["sqlite", "postgresql"]

    def adapt(self, sql: str) -> str:
        """``sql`` (written for SQLite) as this dialect runs it; cached per statement text."""
        if self.name == "sqlite":
            return sql
        return _adapt_pg(sql)

    # -- types (for DDL written in code; the baselines spell their own) --------------------

    @property
    def id_column(self) -> str:
        """An integer primary key that numbers itself when no id is given."""
        if self.name == "sqlite":
            return "INTEGER PRIMARY KEY"
        return "bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY"

    @property
    def integer_type(self) -> str:
        return "INTEGER" if self.name == "sqlite" else "bigint"

    @property
    def real_type(self) -> str:
        return "REAL" if self.name == "sqlite" else "double precision"

    @property
    def blob_type(self) -> str:
        return "BLOB" if self.name == "sqlite" else "bytea"

    @property
    def bool_type(self) -> str:
        """SQLite stores 0/1 integers. The PostgreSQL baseline keeps 0/1 integers too for the
        existing columns (every query compares them with 0 and 1); a new column may be
        ``boolean`` there only if its queries use ``TRUE``/``FALSE``, which both accept."""
        return "INTEGER" if self.name == "sqlite" else "boolean"

    # -- forms that differ in more than spelling -------------------------------------------

    def insert_ignore(
        self, table: str, columns: Sequence[str], conflict: Sequence[str] = ()
    ) -> str:
        """An INSERT of one row that does nothing when it would duplicate a unique key."""
        placeholders = ", ".join("?" * len(columns))
        names = ", ".join(columns)
        target = f" ({', '.join(conflict)})" if conflict else ""
        return (
            f"INSERT INTO {table} ({names}) VALUES ({placeholders}) ON CONFLICT{target} DO NOTHING"
        )

    def upsert(
        self,
        table: str,
        columns: Sequence[str],
        key: Sequence[str],
        update: Sequence[str] | None = None,
    ) -> str:
        """INSERT one row, or on a duplicate ``key`` set the ``update`` columns (default: every
        non-key column) to the new row's values. One spelling serves both dialects
        (``ON CONFLICT … DO UPDATE SET c = excluded.c``)."""
        names = ", ".join(columns)
        placeholders = ", ".join("?" * len(columns))
        targets = [c for c in columns if c not in key] if update is None else list(update)
        if not targets:
            return self.insert_ignore(table, columns, key)
        sets = ", ".join(f"{c} = excluded.{c}" for c in targets)
        return (
            f"INSERT INTO {table} ({names}) VALUES ({placeholders})"
            f" ON CONFLICT ({', '.join(key)}) DO UPDATE SET {sets}"
        )

    def nocase_equals(self, column: str, parameter: str) -> str:
        """``column`` equals ``parameter`` ignoring ASCII case (A–Z only, on both: "É" and "é"
        differ, as SQLite's ``NOCASE`` has it), as the case-insensitive unique index of each
        dialect sees it (SQLite: ``COLLATE NOCASE``; PostgreSQL: an index on ``translate`` of
        the column, :data:`ASCII_LOWER`, since ``lower`` follows the
        database's locale). ``parameter`` is written as in any statement (``?`` or ``:name``)."""
        if self.name == "sqlite":
            return f"{column} = {parameter} COLLATE NOCASE"
        return f"{ASCII_LOWER.format(column)} = {ASCII_LOWER.format(parameter)}"

    def byte_length(self, expression: str) -> str:
        """The length in bytes of a text's UTF-8 encoding."""
        if self.name == "sqlite":
            return f"length(CAST({expression} AS BLOB))"
        return f"octet_length({expression})"

    def json_text(self, expression: str, *path: str) -> str:
        """The value at ``path`` (object keys) in the JSON text ``expression``, NULL when there is
        none. For a string value both dialects give its text; a number or a boolean comes back
        as SQLite's number and PostgreSQL's text, so compare only strings with it. The JSON
        is stored as text on both: PostgreSQL parses it (``::jsonb``) each time."""
        if not path or not all(_JSON_KEY.fullmatch(key) for key in path):
            raise ValueError(f"JSON path keys must be plain names: {path!r}")
        if self.name == "sqlite":
            return f"json_extract({expression}, '$.{'.'.join(path)}')"
        return f"({expression}::jsonb #>> '{{{','.join(path)}}}')"

    def json_int_array_has(self, array: str, value: str) -> str:
        """Whether the JSON text ``array`` (a list of integers) holds the integer ``value`` (a
        column or a parameter, as written in the statement)."""
        if self.name == "sqlite":
            return f"EXISTS (SELECT 1 FROM json_each({array}) WHERE value = {value})"
        return f"({array}::jsonb @> jsonb_build_array(CAST({value} AS bigint)))"

    def json_count_up(self, column: str, key: str) -> str:
        """The JSON text ``column`` (an object of counters, NULL as ``{}``) with the counter
        under ``key`` (an integer parameter, its decimal text the key) one higher."""
        if self.name == "sqlite":
            at = f"'$.\"' || {key} || '\"'"
            return f"json_set({column}, {at}, COALESCE(json_extract({column}, {at}), 0) + 1)"
        name = f"CAST({key} AS text)"
        current = f"coalesce({column}, '{{}}')::jsonb"
        return (
            f"jsonb_set({current}, ARRAY[{name}],"
            f" to_jsonb(coalesce(({current} ->> {name})::bigint, 0) + 1))::text"
        )


SQLITE = Dialect("sqlite")
POSTGRESQL = Dialect("postgresql")

_JSON_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def dialect_for(conn: Connection) -> Dialect:
    """The dialect ``conn`` speaks: a connection that names one (``PgConnection.dialect``) speaks
    it; anything else (``sqlite3.Connection``) is SQLite. For the few statements spelled per
    dialect; the rest are written once and adapted by the connection."""
    named = getattr(conn, "dialect", None)
    return named if isinstance(named, Dialect) else SQLITE


def locks_rows(conn: Connection) -> bool:
    """Whether a statement on ``conn`` should lock the rows it reads (``FOR UPDATE``) to keep
    other processes' transactions out until this one ends: on PostgreSQL, outside a read-only
    connection (a reader: the lock is for writers, and a read-only transaction refuses it).
    SQLite's write transaction already holds the whole file."""
    return dialect_for(conn).name == "postgresql" and not getattr(conn, "readonly", False)


@lru_cache(maxsize=4096)
def _adapt_pg(sql: str) -> str:
    return _pg(sql)


def dialect_of(url_or_path: str) -> Dialect:
    """The dialect of a database named by a ``postgresql://`` URL, else SQLite (a path)."""
    scheme = url_or_path.split("://", 1)[0].lower() if "://" in url_or_path else ""
    return POSTGRESQL if scheme in ("postgresql", "postgres") else SQLITE
