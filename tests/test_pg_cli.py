"""Choosing PostgreSQL from the command line (docs/storage.md): ``--database`` and
``ROOM_DATABASE_URL`` (serving on it: tests/test_pg_serve.py); a database that cannot be reached
is exit 5; ``room doctor`` names the backend and its version on both stores; ``login-link`` runs
on it once a server migrated it."""

from __future__ import annotations

import contextlib
import io
import json
import time
from pathlib import Path
from typing import Any

import psycopg
import pydantic
import pytest

from room.cli import EXIT_UNHEALTHY, EXIT_UNREACHABLE, main
from room.settings import load_settings
from room.store import pg_migrate
from room.store.migrate import connect as sqlite_connect
from room.store.migrate import migrate as sqlite_migrate
from room.store.pg import connect
from room.store.schema_pg import PG_MIGRATIONS

UNREACHABLE = "postgresql://room:s3cret@127.0.0.1:1/room"


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(argv))
    return code, out.getvalue(), err.getvalue()


def refusal(stderr: str) -> dict[str, Any]:
    found: dict[str, Any] = json.loads(stderr.strip().splitlines()[-1])
    return found


def test_login_link_and_member_token_work_on_postgresql(tmp_path: Path, pg_dsn: str) -> None:
    """The short commands beside a server reach the same store (``--database``); before a
    server migrated it they refuse, naming what is pending, and change nothing."""
    data = str(tmp_path / "data")
    code, _, err = run("login-link", "--data", data, "--database", pg_dsn)
    assert code == 1 and "pending" in err and "room serve --database" in err
    conn = connect(pg_dsn)
    try:
        pg_migrate.migrate(conn)
    finally:
        conn.close()
    code, out, _ = run("login-link", "--data", data, "--database", pg_dsn)
    assert code == 0 and "/login/" in out
    with psycopg.connect(pg_dsn) as raw:
        assert raw.execute("SELECT count(*) FROM login_links").fetchone() == (1,)


def test_an_unreachable_database_is_exit_5_without_its_password(tmp_path: Path) -> None:
    started = time.monotonic()
    code, _, err = run("serve", "--data", str(tmp_path / "data"), "--database", UNREACHABLE)
    assert code == EXIT_UNREACHABLE == 5
    assert time.monotonic() - started < 15
    assert "cannot reach the PostgreSQL database at postgresql://room:***@127.0.0.1:1/room" in err
    assert "s3cret" not in err and "Traceback" not in err
    said = refusal(err)
    assert (said["error"], said["exit"]) == ("database_unreachable", 5)
    code, _, err = run("doctor", "--data", str(tmp_path / "data"), "--database", UNREACHABLE)
    assert code == EXIT_UNREACHABLE
    assert "s3cret" not in err


def test_doctor_names_postgresql_its_version_and_migrations(tmp_path: Path, pg_dsn: str) -> None:
    conn = connect(pg_dsn)
    try:
        pg_migrate.migrate(conn)
    finally:
        conn.close()
    code, out, _ = run("doctor", "--data", str(tmp_path), "--database", pg_dsn, "--json")
    summary = json.loads(out)
    database = summary["database"]
    assert database["backend"] == "postgresql"
    assert database["version"].split(".")[0].isdigit()
    assert database["migrations"]["applied"] == [m.name for m in PG_MIGRATIONS]
    assert not any("PostgreSQL" in problem for problem in summary["problems"])
    assert code == EXIT_UNHEALTHY  # no server has started in this data folder: that one
    code, out, _ = run("doctor", "--data", str(tmp_path), "--database", pg_dsn)
    assert (
        "database: postgresql " in out
        and f"migrations applied {len(PG_MIGRATIONS)}, pending 0" in out
    )


def test_doctor_names_sqlite_and_its_version(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "room.sqlite"
    conn = sqlite_connect(path)
    try:
        sqlite_migrate(conn, path, time.time())
    finally:
        conn.close()
    _, out, _ = run("doctor", "--data", str(tmp_path), "--json")
    database = json.loads(out)["database"]
    assert (database["backend"], database["version"]) == ("sqlite", sqlite3.sqlite_version)


def test_only_postgresql_urls_are_accepted() -> None:
    assert load_settings(env={"ROOM_DATABASE_URL": "postgres://u@h/db"}).backend == "postgresql"
    assert load_settings(env={}).backend == "sqlite"
    with pytest.raises(pydantic.ValidationError, match="database_url"):
        load_settings(env={"ROOM_DATABASE_URL": "mysql://u@h/db"})


def test_export_and_import_a_pack_from_the_command_line_on_postgresql(
    tmp_path: Path, pg_dsn: str
) -> None:
    from room.actions import auth as auth_actions
    from room.actions import projects as project_actions
    from room.store import run_write

    conn = connect(pg_dsn)
    try:
        pg_migrate.migrate(conn)

        def job(c: Any, tx: Any) -> int:
            owner = auth_actions.ensure_owner(c, tx)
            project_id, _ = project_actions.insert_project(
                c, tx, owner, name="命令行", goal="g", workspace=None,
                agents=[project_actions.AgentSpec("lead", "lead", "负责人")],
            )  # fmt: skip
            return int(project_id)

        project_id = run_write(conn, job)
    finally:
        conn.close()
    data, pack = str(tmp_path / "data"), tmp_path / "p.jsonl"
    code, out, err = run("export", "--data", data, "--database", pg_dsn, "命令行", str(pack))
    assert code == 0, err
    assert f"exported project {project_id} (命令行)" in out
    assert json.loads(pack.read_text().splitlines()[0])["kind"] == "room.project-pack"
    code, out, err = run(
        "import", "--data", data, "--database", pg_dsn, str(pack), "--name", "副本"
    )
    assert code == 0, err
    assert "(副本), paused" in out
    with psycopg.connect(pg_dsn) as raw:
        names = [n for (n,) in raw.execute("SELECT name FROM projects ORDER BY id")]
    assert names == ["命令行", "副本"]


def value(cursor: Any) -> Any:
    row = cursor.fetchone()
    assert row is not None
    return row[0]


def test_users_commands_work_on_postgresql(tmp_path: Path, pg_dsn: str) -> None:
    """``room users list|disable|enable|login-link --database``: the same people, refusals and
    change log as on SQLite (tests/test_users.py), on the shared store; an unreachable one is
    exit 5."""
    from room.actions import auth as auth_actions
    from room.actions import projects as project_actions
    from room.store import run_write

    conn = connect(pg_dsn)
    try:
        pg_migrate.migrate(conn)

        def job(c: Any, tx: Any) -> int:
            owner = auth_actions.ensure_owner(c, tx)
            project_id, _ = project_actions.insert_project(
                c, tx, owner, name="人员", goal="g", workspace=None,
                agents=[project_actions.AgentSpec("lead", "lead", "负责人")],
            )  # fmt: skip
            return int(project_id)

        project_id = run_write(conn, job)
    finally:
        conn.close()
    now = time.time()
    with psycopg.connect(pg_dsn) as raw:
        bo = value(
            raw.execute(
                "INSERT INTO users (handle, display_name, created_at) VALUES ('Bo', '小博', %s)"
                " RETURNING id",
                (now,),
            )
        )
        raw.execute(
            "INSERT INTO members (project_id, kind, user_id, role, handle, display_name,"
            " created_at) VALUES (%s, 'human', %s, 'member', 'bo', '小博', %s)",
            (project_id, bo, now),
        )
        raw.execute(
            "INSERT INTO sessions (token_hash, user_id, csrf_token, created_at, expires_at)"
            " VALUES ('h', %s, 'c', %s, %s)",
            (bo, now, now + 3600),
        )
        roster = "SELECT roster_version FROM projects WHERE id = %s"
        version_before = value(raw.execute(roster, (project_id,)))
    data = str(tmp_path / "data")
    pg = ("--data", data, "--database", pg_dsn)

    code, out, err = run("users", "list", *pg, "--json")
    assert code == 0, err
    people = {p["handle"]: p for p in json.loads(out)["users"]}
    assert people["Bo"]["projects"] == 1 and people["Bo"]["sessions"] == 1
    assert people["Bo"]["disabled_at"] is None and not people["Bo"]["admin"]
    assert any(p["admin"] for p in people.values())

    code, out, err = run("users", "disable", *pg, "@bo")  # the handle's case ignored
    assert code == 0, err
    assert json.loads(out) == {
        "user": "Bo", "changed": True, "sessions_ended": 1, "links_voided": 0,
    }  # fmt: skip
    code, _, err = run("users", "login-link", *pg, "bo")
    assert (code, refusal(err)["code"], refusal(err)["exit"]) == (1, "user_disabled", 1)
    owner = next(h for h, p in people.items() if p["admin"])
    code, _, err = run("users", "disable", *pg, owner)
    assert (code, refusal(err)["code"]) == (1, "user_is_owner")
    code, _, err = run("users", "enable", *pg, "nobody")
    assert (code, refusal(err)["code"]) == (1, "no_user")
    code, out, err = run("users", "enable", *pg, str(bo))  # by id
    assert code == 0, err
    assert json.loads(out) == {"user": "Bo", "changed": True}
    code, out, err = run("users", "login-link", *pg, "BO")
    assert code == 0, err
    assert "/login/" in out

    with psycopg.connect(pg_dsn) as raw:
        changes = raw.execute("SELECT user_id, action FROM user_changes ORDER BY id").fetchall()
        assert changes == [(bo, "disable"), (bo, "enable")]
        assert raw.execute(
            "SELECT count(*) FROM login_links WHERE user_id = %s AND used_at IS NULL", (bo,)
        ).fetchone() == (1,)
        version_after = value(raw.execute(roster, (project_id,)))
        assert version_after == version_before + 2  # each change sends the roster again
        audited = raw.execute(
            "SELECT action, outcome FROM audit_events WHERE action LIKE 'user.%' ORDER BY id"
        ).fetchall()
    assert audited == [
        ("user.disable", "ok"), ("user.login_link", "refused"), ("user.disable", "refused"),
        ("user.enable", "ok"), ("user.login_link", "ok"),
    ]  # fmt: skip

    code, _, err = run("users", "list", "--data", data, "--database", UNREACHABLE)
    assert code == EXIT_UNREACHABLE
    assert refusal(err)["exit"] == EXIT_UNREACHABLE and "s3cret" not in err


def test_risk_scans_the_projects_of_postgresql(tmp_path: Path, pg_dsn: str) -> None:
    """``room risk --database``: the scan reads the shared store's projects (the data folder's
    SQLite file is never made), and an unreachable database is exit 5."""
    from room.actions import auth as auth_actions
    from room.actions import projects as project_actions
    from room.store import run_write

    conn = connect(pg_dsn)
    try:
        pg_migrate.migrate(conn)

        def job(c: Any, tx: Any) -> None:
            owner = auth_actions.ensure_owner(c, tx)
            project_actions.insert_project(
                c, tx, owner, name="风险项目", goal="g", workspace=None,
                agents=[project_actions.AgentSpec("lead", "lead", "负责人")],
            )  # fmt: skip

        run_write(conn, job)
    finally:
        conn.close()
    data = tmp_path / "data"
    code, out, _ = run("risk", "--data", str(data), "--database", pg_dsn, "--json")
    scan = json.loads(out)
    assert code == 0 and scan["red"] == []
    assert [p["project"] for p in scan["green"]] == ["风险项目"]
    assert not (data / "room.db").exists()
    code, _, err = run("risk", "--data", str(data), "--database", UNREACHABLE)
    assert code == EXIT_UNREACHABLE and "s3cret" not in err
