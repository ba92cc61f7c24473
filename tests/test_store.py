"""Storage: migrations and backups, version refusal, the single-writer lock, group commit, and
the delivery ledger refusing moves out of final states."""

from __future__ import annotations

import asyncio
import hashlib
import json
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from room.errors import LockHeldError, SchemaTooNewError, StorageError
from room.rules.effects import Broadcast, Effect
from room.store import Database, DataLock, Tx
from room.store import deliveries as deliveries_store
from room.store import schema as schema_mod
from room.store.migrate import connect, migrate, user_version
from room.store.schema import SCHEMA_VERSION, Migration


def fresh_db(path: Path) -> sqlite3.Connection:
    conn = connect(path)
    migrate(conn, path, now=time.time())
    return conn


def file_digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_fresh_database_is_migrated_without_a_backup(tmp_path: Path) -> None:
    db = tmp_path / "room.sqlite"
    conn = fresh_db(db)
    assert user_version(conn) == SCHEMA_VERSION
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
    assert conn.execute("PRAGMA foreign_keys").fetchone()[0] == 1
    assert not (tmp_path / "backups").exists()


def test_migration_makes_a_checked_backup_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "room.sqlite"
    conn = fresh_db(db)
    conn.execute("INSERT INTO users (handle, display_name, created_at) VALUES ('ann', 'Ann', 0)")
    extra = Migration("9999_test_column", "ALTER TABLE users ADD COLUMN nickname TEXT;")
    monkeypatch.setattr(schema_mod, "MIGRATIONS", (*schema_mod.MIGRATIONS, extra))
    monkeypatch.setattr("room.store.migrate.MIGRATIONS", (*schema_mod.MIGRATIONS,))
    monkeypatch.setattr("room.store.migrate.SCHEMA_VERSION", SCHEMA_VERSION + 1)
    applied = migrate(conn, db, now=1_800_000_000)
    assert applied == ["9999_test_column"]
    assert user_version(conn) == SCHEMA_VERSION + 1
    backups = list((tmp_path / "backups").glob(f"room-v{SCHEMA_VERSION}-*.sqlite"))
    assert len(backups) == 1
    copy = sqlite3.connect(backups[0])
    assert copy.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert copy.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    assert copy.execute("SELECT handle FROM users").fetchall() == [("ann",)]
    copy.close()


def test_failed_migration_rolls_back_and_keeps_the_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "room.sqlite"
    conn = fresh_db(db)
    bad = Migration("9999_broken", "ALTER TABLE users ADD COLUMN x TEXT; SELECT * FROM nowhere;")
    monkeypatch.setattr("room.store.migrate.MIGRATIONS", (*schema_mod.MIGRATIONS, bad))
    monkeypatch.setattr("room.store.migrate.SCHEMA_VERSION", SCHEMA_VERSION + 1)
    with pytest.raises(sqlite3.OperationalError):
        migrate(conn, db, now=time.time())
    assert user_version(conn) == SCHEMA_VERSION
    columns = [r[1] for r in conn.execute("PRAGMA table_info(users)")]
    assert "x" not in columns


def test_a_newer_database_is_refused_and_untouched(tmp_path: Path) -> None:
    db = tmp_path / "room.sqlite"
    conn = fresh_db(db)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 5}")
    conn.close()
    before = file_digest(db)
    conn = connect(db)
    with pytest.raises(SchemaTooNewError) as info:
        migrate(conn, db, now=time.time())
    conn.close()
    assert "upgrade Project Room" in info.value.message
    assert info.value.details == {"found": SCHEMA_VERSION + 5, "supported": SCHEMA_VERSION}
    assert file_digest(db) == before


def test_lock_names_the_holder_and_a_second_holder_is_refused(tmp_path: Path) -> None:
    lock = DataLock(tmp_path / "room.lock")
    lock.acquire()
    other = DataLock(tmp_path / "room.lock")
    started = time.monotonic()
    with pytest.raises(LockHeldError) as info:
        other.acquire(wait_secs=0.2)
    assert time.monotonic() - started < 2
    assert info.value.pid == __import__("os").getpid()
    lock.release()
    other.acquire()
    other.release()


@pytest.mark.slow
def test_second_server_exits_nonzero_within_two_seconds_and_changes_nothing(
    tmp_path: Path,
) -> None:
    from tests.support.server import ServerProcess

    first = ServerProcess(tmp_path / "data").start()
    try:
        db = tmp_path / "data" / "room.sqlite"
        before = snapshot(db)
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "room",
                "serve",
                "--data",
                str(tmp_path / "data"),
                "--port",
                "0",
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert result.returncode == 3
        # From the refused server's own trace: it gave up on the lock within 2 s of starting
        # (interpreter start-up before that is the machine's, not ours).
        from room.infra.boot import last_start, read_trace

        phases = last_start(read_trace(tmp_path / "data"))
        assert [p["phase"] for p in phases] == ["start", "lock"]
        assert phases[1]["ok"] is False
        assert phases[1]["ts"] - phases[0]["ts"] < 2.0
        assert first.proc is not None
        assert f"pid {first.proc.pid}" in result.stderr
        assert snapshot(db) == before
    finally:
        first.stop()


def snapshot(db: Path) -> list[str]:
    conn = sqlite3.connect(db)
    try:
        return list(conn.iterdump())
    finally:
        conn.close()


def _insert_user(handle: str) -> Callable[[sqlite3.Connection, object], int]:
    def job(conn: sqlite3.Connection, tx: object) -> int:
        cur = conn.execute(
            "INSERT INTO users (handle, display_name, created_at) VALUES (?, ?, 0)",
            (handle, handle),
        )
        return int(cur.lastrowid or 0)

    return job


async def _group_commit(db_path: Path) -> Database:
    db = Database(db_path, readers=1)
    db.start(asyncio.get_running_loop())
    # Block the writer with one slow job so the next 200 queue up behind it.

    def slow(conn: sqlite3.Connection, tx: object) -> None:
        time.sleep(0.2)

    first = db.submit(slow)
    futures = [db.submit(_insert_user(f"user{i}")) for i in range(200)]
    await first
    ids = await asyncio.gather(*futures)
    assert len(set(ids)) == 200
    return db


@pytest.mark.anyio
async def test_group_commit_batches_many_writes_into_few_transactions(tmp_path: Path) -> None:
    path = tmp_path / "room.sqlite"
    fresh_db(path).close()
    db = await _group_commit(path)
    try:
        # 201 jobs: the slow one alone, then the 200 queued behind it in one or two batches.
        assert db.stats.jobs == 201
        assert db.stats.batches <= 3
        assert db.stats.largest_batch >= 100
        count = await db.read(lambda c: c.execute("SELECT count(*) FROM users").fetchone()[0])
        assert count == 200
    finally:
        await db.close()


@pytest.mark.anyio
async def test_one_failing_job_does_not_sink_its_batch(tmp_path: Path) -> None:
    path = tmp_path / "room.sqlite"
    fresh_db(path).close()
    db = Database(path, readers=1)
    db.start(asyncio.get_running_loop())
    try:

        def slow(conn: sqlite3.Connection, tx: object) -> None:
            time.sleep(0.1)

        def broken(conn: sqlite3.Connection, tx: object) -> None:
            conn.execute("INSERT INTO users (handle, display_name, created_at) VALUES ('x','x',0)")
            raise StorageError("boom")

        published: list[Effect] = []
        db.effects = published.extend

        def with_effect(conn: sqlite3.Connection, tx: Tx) -> None:
            conn.execute("INSERT INTO users (handle, display_name, created_at) VALUES ('y','y',0)")
            tx.emit(Broadcast(1, "y"))

        def broken_with_effect(conn: sqlite3.Connection, tx: Tx) -> None:
            tx.emit(Broadcast(1, "never"))
            raise StorageError("boom")

        s = db.submit(slow)
        a = db.submit(_insert_user("a"))
        b = db.submit(broken)
        c = db.submit(with_effect)
        d = db.submit(broken_with_effect)
        await s
        assert await a > 0
        with pytest.raises(StorageError):
            await b
        await c
        with pytest.raises(StorageError):
            await d
        assert published == [Broadcast(1, "y")]  # a rolled-back job's effects are dropped
        handles = await db.read(
            lambda conn: [r[0] for r in conn.execute("SELECT handle FROM users ORDER BY id")]
        )
        assert handles == ["a", "y"]
    finally:
        await db.close()


def test_replay_frames_built_by_sqlite_equal_event_frame(tmp_path: Path) -> None:
    from room.actions.messages import append_message
    from room.store import messages as messages_store
    from room.store import run_write

    path = tmp_path / "room.sqlite"
    conn = fresh_db(path)
    conn.execute("INSERT INTO projects (name, created_at, updated_at) VALUES ('p', 0, 0)")
    bodies = ["普通的一句话", 'quotes " and \\ and \n newlines', "</script> & <b>"]
    for body in bodies:

        def job(c: sqlite3.Connection, tx: Tx, body: str = body) -> object:
            return append_message(
                c,
                tx,
                project_id=1,
                author_id=None,
                kind="system",
                body=body,
                html=f"<p>{body}</p>",
            )

        run_write(conn, job)
    replayed = messages_store.replay(conn, 1, 0, 10)
    stored = conn.execute("SELECT seq, frame FROM messages ORDER BY seq").fetchall()
    assert [(s, messages_store.event_frame(1, s, f)) for s, f in stored] == [
        tuple(r) for r in replayed
    ]
    assert [json.loads(f)["message"]["body"] for _, f in replayed] == bodies


def _one_cancelled_delivery(conn: sqlite3.Connection, kind: str) -> None:
    """A project, its lead, one message of ``kind`` and its delivery, cancelled."""
    conn.executescript(
        f"""
        INSERT INTO projects (name, created_at, updated_at) VALUES ('p', 0, 0);
        INSERT INTO members (project_id, kind, role, handle, display_name, created_at)
            VALUES (1, 'agent', 'lead', 'a', 'a', 0);
        INSERT INTO messages (id, project_id, seq, kind, body, frame, created_at)
            VALUES (1, 1, 1, '{kind}', 'x', '{{}}', 0);
        INSERT INTO deliveries (project_id, message_id, recipient_id, state, created_at,
            updated_at) VALUES (1, 1, 1, 'cancelled', 0, 0);
        """
    )


def test_the_ledger_refuses_moves_out_of_final_states(tmp_path: Path) -> None:
    path = tmp_path / "room.sqlite"
    conn = connect(path)
    migrate(conn, path, now=time.time())
    _one_cancelled_delivery(conn, "chat")
    assert deliveries_store.set_state(conn, [1], "consumed", 1.0) == []
    assert deliveries_store.set_state(conn, [1], "pending", 1.0) == []
    assert conn.execute("SELECT state FROM deliveries").fetchone()[0] == "cancelled"


def _plans(conn: sqlite3.Connection, call: Callable[[], object]) -> list[str]:
    """What SQLite's planner says of every statement ``call`` runs."""
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    try:
        call()
    finally:
        conn.set_trace_callback(None)
    return [
        " ".join(str(r[3]) for r in conn.execute(f"EXPLAIN QUERY PLAN {sql}")) for sql in statements
    ]


def test_the_ledgers_reads_of_open_deliveries_search_their_index(tmp_path: Path) -> None:
    # The partial index of open deliveries was once written so that no query could use it.
    conn = connect(tmp_path / "room.sqlite")
    migrate(conn, tmp_path / "room.sqlite", now=time.time())
    reads: list[Callable[[], object]] = [
        lambda: deliveries_store.pending_of(conn, 1, 10, unoffered=True),
        lambda: deliveries_store.offered_to(conn, 1, "socket"),
        lambda: deliveries_store.in_builtin_inboxes(conn),
        lambda: deliveries_store.handed_to_external(conn),
        lambda: deliveries_store.members_with_pending(conn),
    ]
    for read in reads:
        plans = _plans(conn, read)
        assert plans and all("deliveries_open" in plan for plan in plans), plans


def test_the_deliveries_a_turn_took_are_found_by_their_index(tmp_path: Path) -> None:
    # A turn's end, a settling and a brake's resume read what the turn took: once a scan of
    # the whole ledger in the writer's transaction (migration 0034_turn_deliveries).
    conn = connect(tmp_path / "room.sqlite")
    migrate(conn, tmp_path / "room.sqlite", now=time.time())
    reads: list[Callable[[], object]] = [
        lambda: deliveries_store.of_turn(conn, 1),
        lambda: deliveries_store.still_taken(conn, 1, [1, 2, 3]),
    ]
    for read in reads:
        plans = _plans(conn, read)
        assert plans and all("deliveries_turn" in plan for plan in plans), plans


def test_a_sends_rows_build_no_temporary_table_and_bad_values_are_still_refused(
    tmp_path: Path,
) -> None:
    # A CHECK constraint written `x IN (...)` makes SQLite build the list as a temporary table
    # for every row written; migration 0019 writes the same constraints as ORs.
    path = tmp_path / "room.sqlite"
    conn = connect(path)
    before = [m.name for m in schema_mod.MIGRATIONS].index("0019_send_rows")
    for version, migration in enumerate(schema_mod.MIGRATIONS[:before], start=1):
        conn.executescript(migration.sql)
        conn.execute(f"PRAGMA user_version = {version}")
    _one_cancelled_delivery(conn, "tool")
    conn.commit()
    migrate(conn, path, now=time.time())
    conn.close()
    conn = connect(path)  # as every connection after the migration reads the schema
    assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    writes = {
        "messages": "INSERT INTO messages (id, project_id, seq, kind, body, frame, created_at)"
        " VALUES (2, 1, 2, ?, 'x', '{}', 0)",
        "deliveries": "INSERT INTO deliveries (project_id, message_id, recipient_id, state,"
        " created_at, updated_at) VALUES (1, 2, 1, ?, 0, 0)",
    }
    for (table, sql), good in zip(writes.items(), ("system", "held"), strict=True):
        program = [str(r[1]) for r in conn.execute(f"EXPLAIN {sql}", ("x",))]
        assert "OpenEphemeral" not in program, table
        with pytest.raises(sqlite3.IntegrityError, match="CHECK constraint failed"):
            conn.execute(sql, ("bogus",))
        conn.execute(sql, (good,))
