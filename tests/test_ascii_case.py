"""Case on both stores is ASCII case (docs/storage.md, "Case"): a person's handle and a
project's name are found and kept unique ignoring the case of A–Z only — SQLite's ``NOCASE``
— and PostgreSQL does the same whatever its locale. Its ``lower()`` follows the database's
``LC_CTYPE``: under ``C.UTF-8`` (or ``en_US.UTF-8``, a common default) it folds all of Unicode,
so "CAFÉ" and "Café" were one project name there and two on SQLite, and "@\u212abob" (a
Kelvin sign) or "İVAN" found the people ``kbob`` and ``ivan``. The PostgreSQL database here
is made in ``C.UTF-8`` so that a fold of more than A–Z would show."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from room.store import auth as auth_store
from room.store import members as members_store
from room.store import projects as projects_store
from room.store import users as users_store
from room.store.dialect import Connection
from room.store.migrate import connect as sqlite_connect
from room.store.migrate import migrate as sqlite_migrate
from room.store.pg import connect as pg_connect
from room.store.pg_migrate import migrate as pg_migrate
from tests.support.postgres import PostgresCluster

NOW = 1_800_000_000.0
KELVIN = "\u212a"  # KELVIN SIGN: lower() makes it "k"


@pytest.fixture(params=["sqlite", "postgresql"])
def conn(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Connection]:
    if request.param == "sqlite":
        path = tmp_path / "room.sqlite"
        lite = sqlite_connect(path)
        sqlite_migrate(lite, path, now=time.time())
        yield lite
        lite.close()
        return
    cluster: PostgresCluster = request.getfixturevalue("pg_cluster")
    name = cluster.create_database(locale="C.UTF-8")
    pg = pg_connect(cluster.dsn(name))
    try:
        pg_migrate(pg, now=time.time())
        # The premise: this database's lower() folds more than A–Z.
        assert pg.execute("SELECT lower('CAFÉ'), lower(?)", (KELVIN,)).fetchone() == ("café", "k")
        yield pg
    finally:
        pg.close()
        cluster.drop_database(name)


def write(conn: Connection, sql: str, params: tuple[object, ...]) -> None:
    conn.execute("BEGIN")
    try:
        conn.execute(sql, params)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def add_project(conn: Connection, name: str) -> None:
    write(
        conn,
        "INSERT INTO projects (name, created_at, updated_at) VALUES (?, ?, ?)",
        (name, NOW, NOW),
    )


def test_project_names_differ_by_more_than_ascii_case(conn: Connection) -> None:
    add_project(conn, "Café")
    assert projects_store.name_taken(conn, "CAFé")  # A–Z folded
    assert not projects_store.name_taken(conn, "CAFÉ")  # É is not é
    add_project(conn, "CAFÉ")
    with pytest.raises((sqlite3.IntegrityError, psycopg.errors.UniqueViolation)):
        add_project(conn, "cAFé")
    found = {
        q: getattr(projects_store.find(conn, q), "name", None) for q in ("CAFé", "cafÉ", "café")
    }
    assert found == {"CAFé": "Café", "cafÉ": "CAFÉ", "café": "Café"}


def test_handles_are_found_by_ascii_case_only(conn: Connection) -> None:
    write(
        conn,
        "INSERT INTO users (id, handle, display_name, created_at) VALUES"
        " (1, 'kbob', 'Bob', ?), (2, 'ivan', 'Ivan', ?)",
        (NOW, NOW),
    )
    add_project(conn, "p")
    project = conn.execute("SELECT id FROM projects").fetchone()[0]
    write(
        conn,
        "INSERT INTO members (project_id, kind, user_id, role, handle, display_name,"
        " created_at) VALUES (?, 'human', 1, 'member', 'kbob', 'Bob', ?)",
        (project, NOW),
    )
    assert getattr(users_store.find(conn, "@KBob"), "id", None) == 1
    assert getattr(users_store.find(conn, "IVAN"), "id", None) == 2
    for spoof in (f"{KELVIN}bob", "İVAN", f"@{KELVIN}BOB"):
        assert users_store.find(conn, spoof) is None, spoof
        assert not auth_store.user_handle_taken(conn, spoof), spoof
    assert auth_store.user_handle_taken(conn, "KBOB")
    assert getattr(members_store.by_handle(conn, project, "KBOB"), "user_id", None) == 1
    assert members_store.by_handle(conn, project, f"{KELVIN}BOB") is None
    # The unique key agrees: another person "KBOB" is refused.
    with pytest.raises((sqlite3.IntegrityError, psycopg.errors.UniqueViolation)):
        write(
            conn,
            "INSERT INTO users (handle, display_name, created_at) VALUES ('KBOB', 'B', ?)",
            (NOW,),
        )
