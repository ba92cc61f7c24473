"""room.store.dialect: SQL written once (SQLite's spelling) and adapted for PostgreSQL; and
room.store.pg's connection, which runs the adapted statements on the tests' private cluster."""

from __future__ import annotations

import sqlite3

import psycopg
import pytest

from room.errors import StorageError
from room.store.dialect import (
    POSTGRESQL,
    SQLITE,
    Connection,
    UnsupportedSQLError,
    dialect_for,
    dialect_of,
)
from room.store.pg import connect, redact

pg = POSTGRESQL.adapt


def test_sqlite_runs_the_text_as_written() -> None:
    sql = "INSERT OR IGNORE INTO t (a) VALUES (?) -- 100%"
    assert SQLITE.adapt(sql) is sql


@pytest.mark.parametrize(
    ("written", "adapted"),
    [
        ("SELECT * FROM t WHERE a = ? AND b = ?", "SELECT * FROM t WHERE a = %s AND b = %s"),
        ("SELECT * FROM t WHERE a = :a OR b = :a", "SELECT * FROM t WHERE a = %(a)s OR b = %(a)s"),
        # a ? or :name inside a literal, a quoted identifier or a comment is text
        ("SELECT '?', ? FROM t", "SELECT '?', %s FROM t"),
        ("SELECT 'it''s :x?' FROM t WHERE a = :a", "SELECT 'it''s :x?' FROM t WHERE a = %(a)s"),
        ('SELECT "odd?col" FROM t WHERE a = ?', 'SELECT "odd?col" FROM t WHERE a = %s'),
        ("SELECT a -- why? :x\nFROM t WHERE b = ?", "SELECT a -- why? :x\nFROM t WHERE b = %s"),
        ("SELECT /* ? :x */ a FROM t WHERE b = ?", "SELECT /* ? :x */ a FROM t WHERE b = %s"),
        # a PostgreSQL cast is not a parameter
        ("SELECT a::text FROM t WHERE b = :b", "SELECT a::text FROM t WHERE b = %(b)s"),
        # psycopg reads every %, quoted or not
        ("SELECT 1 WHERE a LIKE 'x%' AND b = ?", "SELECT 1 WHERE a LIKE 'x%%' AND b = %s"),
        ("SELECT 10 % 3", "SELECT 10 %% 3"),
        # INSERT OR IGNORE, with and without RETURNING
        (
            "INSERT OR IGNORE INTO t (a, b) VALUES (:a, :b)",
            "INSERT INTO t (a, b) VALUES (%(a)s, %(b)s) ON CONFLICT DO NOTHING",
        ),
        (
            "  insert   or ignore into t (a) values (?), (?);",
            "  INSERT into t (a) values (%s), (%s) ON CONFLICT DO NOTHING;",
        ),
        (
            "INSERT OR IGNORE INTO t (a) VALUES (?) RETURNING id",
            "INSERT INTO t (a) VALUES (%s) ON CONFLICT DO NOTHING RETURNING id",
        ),
        # upserts are spelled alike
        (
            "INSERT INTO t (k, v) VALUES (?, ?) ON CONFLICT (k) DO UPDATE SET v = excluded.v",
            "INSERT INTO t (k, v) VALUES (%s, %s) ON CONFLICT (k) DO UPDATE SET v = excluded.v",
        ),
    ],
)
def test_postgresql_adaptation(written: str, adapted: str) -> None:
    assert pg(written) == adapted


@pytest.mark.parametrize(
    ("written", "why"),
    [
        ("INSERT OR REPLACE INTO t (a) VALUES (?)", "upsert"),
        ("SELECT 1 FROM t WHERE name = :n COLLATE NOCASE", "nocase_equals"),
        ("PRAGMA user_version", "PRAGMA"),
        ("SELECT 1 FROM t WHERE a GLOB 'x*'", "GLOB"),
        ("SELECT 1 FROM t WHERE a = ? AND b = :b", "both"),
        ("SELECT ?1", "numbered"),
    ],
)
def test_sqlite_only_forms_are_refused_not_mistranslated(written: str, why: str) -> None:
    with pytest.raises(UnsupportedSQLError, match=why):
        pg(written)


def test_refused_words_inside_literals_are_text() -> None:
    sql = "SELECT 'PRAGMA or replace, GLOB' FROM t WHERE a = ?"
    assert pg(sql) == "SELECT 'PRAGMA or replace, GLOB' FROM t WHERE a = %s"


def test_forms_per_dialect() -> None:
    assert SQLITE.nocase_equals("handle", ":h") == "handle = :h COLLATE NOCASE"
    az = "'ABCDEFGHIJKLMNOPQRSTUVWXYZ', 'abcdefghijklmnopqrstuvwxyz'"
    assert POSTGRESQL.nocase_equals("handle", ":h") == (
        f"translate(handle, {az}) = translate(:h, {az})"
    )
    assert SQLITE.insert_ignore("t", ("a", "b")) == (
        "INSERT INTO t (a, b) VALUES (?, ?) ON CONFLICT DO NOTHING"
    )
    assert pg(POSTGRESQL.upsert("t", ("k", "v", "w"), ("k",), ("v",))) == (
        "INSERT INTO t (k, v, w) VALUES (%s, %s, %s) ON CONFLICT (k) DO UPDATE SET v = excluded.v"
    )
    assert SQLITE.byte_length("body") == "length(CAST(body AS BLOB))"
    assert POSTGRESQL.byte_length("body") == "octet_length(body)"
    assert (SQLITE.blob_type, POSTGRESQL.blob_type) == ("BLOB", "bytea")
    assert dialect_of("postgresql://u@h/db") is POSTGRESQL
    assert dialect_of("postgres://u@h/db") is POSTGRESQL
    assert dialect_of("/data/room.sqlite") is SQLITE
    assert SQLITE.json_text("m.frame", "meta", "for_agents") == (
        "json_extract(m.frame, '$.meta.for_agents')"
    )
    assert POSTGRESQL.json_text("m.frame", "meta", "for_agents") == (
        "(m.frame::jsonb #>> '{meta,for_agents}')"
    )
    for bad in ((), ("a'b",), ("a.b",)):
        with pytest.raises(ValueError, match="plain names"):
            SQLITE.json_text("x", *bad)


def test_sqlite3_connection_is_a_store_connection() -> None:
    conn: Connection = sqlite3.connect(":memory:", isolation_level=None)  # checked by mypy
    try:
        conn.execute("CREATE TABLE t (k TEXT PRIMARY KEY, v TEXT)")
        conn.executemany(SQLITE.insert_ignore("t", ("k", "v")), [("a", "1"), ("a", "2")])
        conn.execute(SQLITE.upsert("t", ("k", "v"), ("k",)), ("b", "3"))
        conn.execute(SQLITE.upsert("t", ("k", "v"), ("k",)), ("b", "4"))
        assert conn.execute("SELECT k, v FROM t ORDER BY k").fetchall() == [("a", "1"), ("b", "4")]
        where = SQLITE.nocase_equals("k", "?")
        assert conn.execute(f"SELECT count(*) FROM t WHERE {where}", ("A",)).fetchone() == (1,)
        assert dialect_for(conn) is SQLITE
        doc = '{"meta": {"for_agents": "hi", "n": null}}'
        picked = f"SELECT {SQLITE.json_text('?', 'meta', 'for_agents')}, {SQLITE.json_text('?', 'meta', 'n')}"
        assert conn.execute(picked, (doc, doc)).fetchone() == ("hi", None)
    finally:
        conn.close()


def test_a_password_never_reaches_a_message() -> None:
    assert redact("postgresql://room:s3cret@db:5432/room") == "postgresql://room:***@db:5432/room"
    assert redact("postgresql://room@db/room") == "postgresql://room@db/room"


def test_unreachable_server_is_a_storage_error_naming_it() -> None:
    with pytest.raises(
        StorageError,
        match=r"cannot reach the PostgreSQL database at postgresql://u:\*\*\*@127.0.0.1:1/x",
    ) as caught:
        connect("postgresql://u:pw@127.0.0.1:1/x")
    assert caught.value.code == "database_unreachable"
    assert isinstance(caught.value.__cause__, psycopg.OperationalError)


def test_adapted_statements_run_on_postgresql(pg_dsn: str) -> None:
    conn: Connection = connect(pg_dsn)  # the protocol, checked by mypy
    try:
        conn.execute(
            "CREATE TABLE t (id bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,"
            " k text NOT NULL UNIQUE, v text)"
        )
        conn.execute("BEGIN IMMEDIATE")
        during = conn.in_transaction
        conn.execute("INSERT OR IGNORE INTO t (k, v) VALUES (:k, :v)", {"k": "a?", "v": "50%"})
        conn.execute("INSERT OR IGNORE INTO t (k, v) VALUES (:k, :v)", {"k": "a?", "v": "dup"})
        conn.execute("COMMIT")
        assert (during, conn.in_transaction) == (True, False)
        rows = conn.execute(
            "SELECT k, v, '?' || '%' FROM t WHERE v LIKE '%\\%' ESCAPE '\\'"
        ).fetchall()
        assert rows == [("a?", "50%", "?%")]
        conn.executemany(POSTGRESQL.upsert("t", ("k", "v"), ("k",)), [("a?", "new"), ("b", "x")])
        assert conn.execute("SELECT k, v FROM t ORDER BY id").fetchall() == [
            ("a?", "new"),
            ("b", "x"),
        ]
        found = conn.execute(
            "SELECT count(*) FROM t WHERE " + POSTGRESQL.nocase_equals("k", "?"), ("A?",)
        ).fetchone()
        assert found == (1,)
        cursor = conn.execute("UPDATE t SET v = ? WHERE k = ?", ("y", "b"))
        assert cursor.rowcount == 1
        assert dialect_for(conn) is POSTGRESQL
        doc = '{"meta": {"for_agents": "hi", "n": null}}'
        picked = (
            f"SELECT {POSTGRESQL.json_text('CAST(? AS text)', 'meta', 'for_agents')},"
            f" {POSTGRESQL.json_text('CAST(? AS text)', 'meta', 'n')}"
        )
        assert conn.execute(picked, (doc, doc)).fetchone() == ("hi", None)
    finally:
        conn.close()
