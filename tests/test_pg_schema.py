"""The PostgreSQL schema equals the SQLite one (room/store/schema_pg.py, docs/storage.md).

A fresh SQLite database (and its search index file) and a fresh PostgreSQL database are migrated
by the real migrations; their catalogs are read back (tables, columns with normalised types,
nullability and defaults, primary keys, unique constraints, indexes with their columns,
uniqueness and partial predicates, foreign keys, checks) and compared. Every difference that is
meant is listed below with its reason; any other fails, so a migration written for one store
only fails the suite.
"""

from __future__ import annotations

import re
import sqlite3
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest

from room.errors import SchemaTooNewError
from room.store import pg_migrate
from room.store.dialect import ASCII_LOWER
from room.store.migrate import connect as sqlite_connect
from room.store.migrate import migrate as sqlite_migrate
from room.store.pg import PgConnection, connect
from room.store.schema import MIGRATIONS
from room.store.schema_pg import BASELINE_OF, PG_MIGRATIONS
from room.store.search import create_index

ALL_PG = [m.name for m in PG_MIGRATIONS]  # what a fresh database applies, in order

# -- the differences that are meant ----------------------------------------------------------

# Tables only PostgreSQL has.
PG_ONLY_TABLES = {
    "schema_migrations": "the applied migrations' names; SQLite counts them in PRAGMA user_version",
}
# FTS5 virtual tables (SQLite) are tables on PostgreSQL: the FTS5 rowid is a ``rowid bigint``
# primary key and the columns are NOT NULL text; a generated ``tsv`` column under a GIN index
# (``<table>_tsv``) does what the FTS5 index does. Only those two are left out of the comparison.
FTS_EXTRA_COLUMN = "tsv"
# Columns only PostgreSQL has.
PG_ONLY_COLUMNS = {
    ("message_fts", "project_id"): "the message's project: a search ranks its window from the"
    " index alone (0030; on SQLite the index is FTS5 and the join an in-process lookup)",
}
# Indexes only PostgreSQL has.
PG_ONLY_INDEXES = {
    ("message_fts", "message_fts_rowid_brin"): "a BRIN of the ids: a common word's newest"
    " matches without a heap page per match (0032; FTS5 reads its doclist newest first)",
}
# A UNIQUE COLLATE NOCASE column (SQLite) is a unique index on lower(column) on PostgreSQL (a
# constraint cannot hold an expression): compared as the unique constraint it stands for.
UNIQUE_AS_INDEX = {"users_handle_key"}
# Keys SQLite would number itself (a rowid table's INTEGER PRIMARY KEY) that the store always
# writes: another table's id, or the single row's 1. PostgreSQL numbers none of them.
KEYS_THE_STORE_WRITES = {
    ("read_cursors", "member_id"),
    ("project_brakes", "project_id"),
    ("project_tombstones", "project_id"),
    ("memory_versions", "project_id"),
    ("project_timelines", "project_id"),
    ("index_state", "id"),
}
# Spelled differently, compared as equal by the normalisation below:
# * ``x COLLATE NOCASE`` in an index (or a unique column declared NOCASE) is ``ASCII_LOWER`` of x
#   on PostgreSQL (users.handle, projects_name: A–Z folded in any locale), both compared as
#   ``lower(x)``; IFNULL is coalesce; != is <>.
# * A primary key column is NOT NULL on both (SQLite's table_info reports 0 for a rowid alias,
#   which cannot hold NULL; the store writes no NULL key anywhere).
# * The search index file's tables (message_fts, index_state; search.sqlite beside the SQLite
#   database) are in the one PostgreSQL database: they are compared as if in one catalog.

TYPES = {
    "INTEGER": "integer",
    "bigint": "integer",
    "REAL": "real",
    "double precision": "real",
    "TEXT": "text",
    "text": "text",
    "BLOB": "blob",
    "bytea": "blob",
    "": "text",  # an FTS5 column has no declared type: text
}
FK_ACTIONS = {
    "a": "NO ACTION",
    "r": "RESTRICT",
    "c": "CASCADE",
    "n": "SET NULL",
    "d": "SET DEFAULT",
}
_CAST = re.compile(r"::(?:text|bigint|integer|double precision|numeric|regconfig)\b")
_ANY = re.compile(r"(\w+) = ANY \(ARRAY\[(.*?)\]\)")


# ASCII_LOWER (room.store.dialect) of a column, PostgreSQL's spelling of NOCASE.
_ASCII_LOWER = re.escape(ASCII_LOWER).replace(re.escape("{}"), r"(\w+)").replace(r"\ ", r"\s*")


def norm(expression: str | None) -> str | None:
    """An expression as both catalogs can agree on it: no casts, IN lists, no parentheses,
    no spaces, lower case."""
    if expression is None:
        return None
    text = _CAST.sub("", expression)
    text = _ANY.sub(r"\1 IN (\2)", text)
    text = re.sub(r"(\w+) COLLATE NOCASE", r"lower(\1)", text, flags=re.IGNORECASE)
    text = re.sub(_ASCII_LOWER, r"lower(\1)", text)
    text = re.sub(r"\bIFNULL\(", "coalesce(", text, flags=re.IGNORECASE)
    text = text.replace("!=", "<>").replace('"', "")  # "position": a quoted keyword
    text = re.sub(r"'(-?\d+(?:\.\d+)?)'", r"\1", text)  # '0' (a cast number) is 0
    return re.sub(r"[\s()]", "", text).lower()


@dataclass
class Table:
    columns: list[tuple[str, str, bool, str | None]] = field(default_factory=list)
    auto: set[str] = field(default_factory=set)  # numbered by the database when not given
    primary_key: tuple[str, ...] = ()
    uniques: set[tuple[str, ...]] = field(default_factory=set)  # UNIQUE constraints
    indexes: dict[str, tuple[bool, tuple[str, ...], str | None]] = field(default_factory=dict)
    foreign_keys: set[tuple[tuple[str, ...], str, tuple[str, ...], str, str]] = field(
        default_factory=set
    )
    checks: list[str] = field(default_factory=list)


Catalog = dict[str, Table]


# -- SQLite ----------------------------------------------------------------------------------


def _balanced(text: str, start: int) -> str:
    """The text inside the parenthesis opening at ``start`` (quotes respected)."""
    depth, at, quote = 0, start, None
    while at < len(text):
        char = text[at]
        if quote:
            if char == quote:
                quote = None
        elif char in "'\"":
            quote = char
        elif char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth == 0:
                return text[start + 1 : at]
        at += 1
    raise ValueError(f"unbalanced: {text[start:]}")


def _split_top(text: str) -> list[str]:
    parts, depth, buf = [], 0, ""
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append(buf.strip())
            buf = ""
        else:
            buf += char
    return [*parts, buf.strip()]


def sqlite_catalog(conn: sqlite3.Connection) -> Catalog:
    catalog: Catalog = {}
    masters = conn.execute(
        "SELECT name, sql FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
    ).fetchall()
    virtual = {name for name, sql in masters if sql.upper().startswith("CREATE VIRTUAL TABLE")}
    shadows = {name for name, _ in masters if any(name.startswith(v + "_") for v in virtual)}
    for name, sql in masters:
        if name in shadows:
            continue
        table = catalog[name] = Table()
        if name in virtual:  # FTS5: (rowid, its columns) - see FTS_EXTRA_COLUMN
            table.columns.append(("rowid", "integer", True, None))
            columns = _split_top(_balanced(sql, sql.index("(")))
            for column in columns:
                if "=" not in column:
                    table.columns.append((column, "text", True, None))
            table.primary_key = ("rowid",)
            continue
        info = conn.execute(f"PRAGMA table_info({name})").fetchall()
        pk = sorted((row[5], row[1]) for row in info if row[5])
        table.primary_key = tuple(col for _, col in pk)
        for _cid, col, decl, notnull, default, in_pk in info:
            table.columns.append((col, TYPES[decl], bool(notnull or in_pk), norm(default)))
        rowid_table = "WITHOUT ROWID" not in sql.upper()
        if (
            rowid_table
            and len(pk) == 1
            and info[[r[1] for r in info].index(pk[0][1])][2] == "INTEGER"
        ):
            table.auto.add(pk[0][1])
        for _seq, index, unique, origin, _partial in conn.execute(f"PRAGMA index_list({name})"):
            if origin == "pk":
                continue
            if origin == "u":
                cols = tuple(
                    f"lower({row[2]})" if row[4] == "NOCASE" else row[2]
                    for row in conn.execute(f"PRAGMA index_xinfo({index})")
                    if row[5]  # key columns only
                )
                table.uniques.add(tuple(norm(c) or "" for c in cols))
                continue
            (index_sql,) = conn.execute(
                "SELECT sql FROM sqlite_master WHERE type = 'index' AND name = ?", (index,)
            ).fetchone()
            on = index_sql.index("(", index_sql.upper().index(" ON "))
            inside = _balanced(index_sql, on)
            rest = index_sql[on + len(inside) + 2 :]
            where = re.search(r"\bWHERE\b(.*)$", rest, re.IGNORECASE | re.DOTALL)
            table.indexes[index] = (
                bool(unique),
                tuple(norm(part) or "" for part in _split_top(inside)),
                norm(where.group(1)) if where else None,
            )
        fks: dict[int, list[Any]] = {}
        for fid, _seq, target, src, dst, on_update, on_delete, _match in conn.execute(
            f"PRAGMA foreign_key_list({name})"
        ):
            fks.setdefault(fid, [target, [], [], on_update, on_delete])
            fks[fid][1].append(src)
            fks[fid][2].append(dst)
        for target, src, dst, on_update, on_delete in fks.values():
            table.foreign_keys.add((tuple(src), target, tuple(dst), on_update, on_delete))
        for match in re.finditer(r"\bCHECK\s*\(", sql, re.IGNORECASE):
            table.checks.append(norm(_balanced(sql, match.end() - 1)) or "")
        table.checks.sort()
    return catalog


# -- PostgreSQL ------------------------------------------------------------------------------


def pg_catalog(conn: psycopg.Connection[Any]) -> Catalog:
    catalog: Catalog = {}
    tables = conn.execute(
        "SELECT c.oid, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = 'public' AND c.relkind = 'r'"
    ).fetchall()
    names = {oid: name for oid, name in tables}
    for oid, name in tables:
        table = catalog[name] = Table()
        columns = conn.execute(
            "SELECT a.attnum, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,"
            " pg_get_expr(d.adbin, d.adrelid), a.attidentity, a.attgenerated"
            " FROM pg_attribute a LEFT JOIN pg_attrdef d"
            " ON d.adrelid = a.attrelid AND d.adnum = a.attnum"
            " WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
            (oid,),
        ).fetchall()
        attnames = {num: col for num, col, *_ in columns}
        for _num, col, typ, notnull, default, identity, generated in columns:
            if (generated and col == FTS_EXTRA_COLUMN) or (name, col) in PG_ONLY_COLUMNS:
                continue
            table.columns.append((col, TYPES.get(typ, typ), notnull, norm(default)))
            if identity:
                table.auto.add(col)
        constraint_indexes = set()
        for (
            contype,
            keys,
            target,
            target_keys,
            on_update,
            on_delete,
            definition,
            index,
        ) in conn.execute(
            "SELECT contype, conkey, confrelid, confkey, confupdtype, confdeltype,"
            " pg_get_constraintdef(oid), conindid FROM pg_constraint WHERE conrelid = %s",
            (oid,),
        ):
            constraint_indexes.add(index)
            cols = tuple(attnames[k] for k in keys or ())
            if contype == "p":
                table.primary_key = cols
            elif contype == "u":
                table.uniques.add(cols)
            elif contype == "f":
                target_cols = tuple(
                    conn.execute(
                        "SELECT attname FROM pg_attribute WHERE attrelid = %s AND attnum = %s",
                        (target, k),
                    ).fetchone()[0]  # type: ignore[index]
                    for k in target_keys
                )
                table.foreign_keys.add(
                    (cols, names[target], target_cols, FK_ACTIONS[on_update], FK_ACTIONS[on_delete])
                )
            elif contype == "c":
                table.checks.append(norm(definition.removeprefix("CHECK ")) or "")
        table.checks.sort()
        for index_oid, index, unique, nkeys, predicate, method in conn.execute(
            "SELECT i.indexrelid, c.relname, i.indisunique, i.indnkeyatts,"
            " pg_get_expr(i.indpred, i.indrelid), am.amname"
            " FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid"
            " JOIN pg_am am ON am.oid = c.relam WHERE i.indrelid = %s",
            (oid,),
        ):
            if index_oid in constraint_indexes:
                continue
            if index in UNIQUE_AS_INDEX:
                table.uniques.add(_index_columns(conn, index_oid, nkeys))
                continue
            if method == "gin" and index == f"{name}_{FTS_EXTRA_COLUMN}":
                continue  # the FTS table's index: see FTS_EXTRA_COLUMN
            if (name, index) in PG_ONLY_INDEXES:
                continue
            cols = tuple(
                norm(
                    conn.execute("SELECT pg_get_indexdef(%s, %s, true)", (index_oid, k)).fetchone()[
                        0
                    ]  # type: ignore[index]
                )
                or ""
                for k in range(1, nkeys + 1)
            )
            table.indexes[index] = (unique, cols, norm(predicate))
    return catalog


def _index_columns(conn: psycopg.Connection[Any], index_oid: int, keys: int) -> tuple[str, ...]:
    columns = []
    for k in range(1, keys + 1):
        row = conn.execute("SELECT pg_get_indexdef(%s, %s, true)", (index_oid, k)).fetchone()
        assert row is not None
        columns.append(norm(row[0]) or "")
    return tuple(columns)


# -- the comparison --------------------------------------------------------------------------


def differences(lite: Catalog, post: Catalog) -> list[str]:
    found = []
    for name in sorted(set(lite) | set(post)):
        if name in PG_ONLY_TABLES and name not in lite:
            continue
        if name not in post:
            found.append(f"{name}: missing on PostgreSQL")
            continue
        if name not in lite:
            found.append(f"{name}: only on PostgreSQL")
            continue
        a, b = lite[name], post[name]
        a_auto = a.auto - {col for table, col in KEYS_THE_STORE_WRITES if table == name}
        for what, x, y in (
            ("columns (name, type, not null, default)", a.columns, b.columns),
            ("numbered by the database", a_auto, b.auto),
            ("primary key", a.primary_key, b.primary_key),
            ("unique constraints", a.uniques, b.uniques),
            ("indexes (unique, columns, predicate)", a.indexes, b.indexes),
            ("foreign keys", a.foreign_keys, b.foreign_keys),
            ("checks", a.checks, b.checks),
        ):
            if x != y:
                found.append(f"{name}: {what} differ:\n  sqlite:     {x}\n  postgresql: {y}")
    return found


def _fresh_sqlite(folder: Path) -> Catalog:
    path = folder / "room.sqlite"
    conn = sqlite_connect(path)
    try:
        sqlite_migrate(conn, path, time.time())
        catalog = sqlite_catalog(conn)
    finally:
        conn.close()
    index = sqlite3.connect(folder / "search.sqlite", isolation_level=None)
    try:
        create_index(index)
        catalog |= sqlite_catalog(index)
    finally:
        index.close()
    return catalog


def test_the_baseline_follows_the_last_sqlite_migration() -> None:
    # A SQLite migration added after the baseline needs its PostgreSQL twin (same name).
    assert [m.name for m in MIGRATIONS].index(BASELINE_OF) == 18
    assert [m.name for m in PG_MIGRATIONS][-1] == MIGRATIONS[-1].name


def test_both_stores_migrate_to_the_same_catalog(tmp_path: Path, pg_dsn: str) -> None:
    lite = _fresh_sqlite(tmp_path)
    conn = connect(pg_dsn)
    try:
        assert pg_migrate.migrate(conn) == ALL_PG
        post = pg_catalog(conn.raw)
    finally:
        conn.close()
    # The comparison saw the real schema, not an empty one.
    assert len(lite) >= 50
    assert sum(len(t.foreign_keys) for t in post.values()) >= 100
    assert sum(len(t.checks) for t in post.values()) >= 30
    assert sum(p is not None for t in post.values() for _, _, p in t.indexes.values()) >= 10
    assert differences(lite, post) == []
    # The intended differences are really there (a stale list would hide nothing).
    assert set(PG_ONLY_TABLES) <= set(post)
    for table in ("search_fts", "message_fts"):
        assert post[table].primary_key == ("rowid",)
    conn = connect(pg_dsn)
    try:
        for table, column in PG_ONLY_COLUMNS:
            assert conn.execute(
                "SELECT 1 FROM information_schema.columns WHERE table_name = ? AND column_name = ?",
                (table, column),
            ).fetchone()
    finally:
        conn.close()


def test_the_comparison_sees_a_difference(tmp_path: Path, pg_dsn: str) -> None:
    lite = _fresh_sqlite(tmp_path)
    conn = connect(pg_dsn)
    try:
        pg_migrate.migrate(conn)
        conn.execute("ALTER TABLE messages ALTER COLUMN body DROP NOT NULL")
        conn.execute("DROP INDEX deliveries_open")
        conn.execute("CREATE INDEX deliveries_open ON deliveries(state, recipient_id)")
        conn.execute("ALTER TABLE tasks DROP CONSTRAINT tasks_project_id_key_key")
        conn.execute("ALTER TABLE members DROP CONSTRAINT members_kind_check")
        conn.execute("ALTER TABLE turns DROP CONSTRAINT turns_member_id_fkey")
        post = pg_catalog(conn.raw)
    finally:
        conn.close()
    found = [line.split(" differ")[0] for line in differences(lite, post)]
    assert found == [
        "deliveries: indexes (unique, columns, predicate)",
        "members: checks",
        "messages: columns (name, type, not null, default)",
        "tasks: unique constraints",
        "turns: foreign keys",
    ]


def test_migrating_again_does_nothing_and_names_are_recorded(pg_dsn: str) -> None:
    conn = connect(pg_dsn)
    try:
        assert pg_migrate.migrate(conn, now=1.0) == ALL_PG
        assert pg_migrate.migrate(conn) == []
        rows = conn.execute("SELECT name, applied_at FROM schema_migrations").fetchall()
        assert rows == [(name, 1.0) for name in ALL_PG]
    finally:
        conn.close()


def test_one_process_migrates_at_a_time(pg_dsn: str) -> None:
    """Four connections start together: the advisory lock lets one migrate, the rest wait and
    then find nothing to do (without it, they would all CREATE the same tables and fail)."""
    results: list[list[str]] = []
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def run() -> None:
        conn = connect(pg_dsn)
        try:
            start.wait()
            results.append(pg_migrate.migrate(conn))
        except BaseException as exc:
            errors.append(exc)
        finally:
            conn.close()

    threads = [threading.Thread(target=run) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert errors == []
    assert sorted(results) == [[], [], [], ALL_PG]


def test_a_newer_database_is_refused_unchanged(pg_dsn: str) -> None:
    conn: PgConnection = connect(pg_dsn)
    try:
        pg_migrate.migrate(conn)
        conn.execute("INSERT INTO schema_migrations VALUES ('9999_future', 2.0)")
        with pytest.raises(SchemaTooNewError, match="9999_future"):
            pg_migrate.migrate(conn)
        # the lock was released: another session can take it at once
        assert conn.execute(
            "SELECT pg_try_advisory_lock(?)", (pg_migrate.MIGRATION_LOCK_KEY,)
        ).fetchone() == (True,)
    finally:
        conn.close()


def test_the_baseline_behaves_like_sqlite_where_the_store_relies_on_it(pg_dsn: str) -> None:
    """Spot checks of what the catalog cannot show: ids numbered when not given, a handle
    unique whatever its case, a partial unique index, search tokens found by a GIN query."""
    conn = connect(pg_dsn)
    try:
        pg_migrate.migrate(conn)
        conn.execute(
            "INSERT INTO users (handle, display_name, created_at) VALUES (?, ?, ?), (?, ?, ?)",
            ("ada", "Ada", 1.0, "bob", "Bob", 1.0),
        )
        assert conn.execute("SELECT id FROM users ORDER BY id").fetchall() == [(1,), (2,)]
        with pytest.raises(psycopg.errors.UniqueViolation):
            conn.execute(
                "INSERT INTO users (handle, display_name, created_at) VALUES ('ADA', 'x', 1)"
            )
        for state in ("purged", "purged", "active"):
            conn.execute(
                "INSERT INTO projects (name, state, created_at, updated_at) VALUES ('P', ?, 1, 1)",
                (state,),
            )
        with pytest.raises(psycopg.errors.UniqueViolation):
            conn.execute("INSERT INTO projects (name, created_at, updated_at) VALUES ('p', 1, 1)")
        from room.rules.searchtext import index_texts

        body, uni = index_texts("数据库设计 review")
        conn.execute("INSERT INTO search_fts (rowid, body, uni) VALUES (?, ?, ?)", (-1, body, uni))
        hits = conn.execute(
            "SELECT rowid FROM search_fts WHERE tsv @@ to_tsquery('simple', ?)", ("据库 & review",)
        ).fetchall()
        assert hits == [(-1,)]
    finally:
        conn.close()
