"""The writer thread (``room.store.db.Database``) on both stores: a batch of jobs in one
transaction, a failing job rolled back alone (PostgreSQL aborts the whole transaction at a
failed statement: the optimistic attempt is rolled back and the batch runs again with a
savepoint per job), ids from the identity sequences on PostgreSQL, read-only readers. Each test
runs once per backend (``[sqlite]``, ``[postgresql]``)."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from room.store import Database, Tx
from room.store import auth as auth_store
from room.store.db import BulkInsert
from room.store.migrate import connect as sqlite_connect
from room.store.migrate import migrate as sqlite_migrate
from room.store.pg import connect as pg_connect
from room.store.pg_migrate import migrate as pg_migrate

pytestmark = pytest.mark.anyio
NOW = 1_800_000_000.0
DUPLICATE = (sqlite3.IntegrityError, psycopg.errors.UniqueViolation)
READ_ONLY = (sqlite3.OperationalError, psycopg.errors.ReadOnlySqlTransaction)


@pytest.fixture(params=["sqlite", "postgresql"])
async def db(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Database]:
    path = tmp_path / "room.sqlite"
    url = None
    if request.param == "sqlite":
        conn = sqlite_connect(path)
        sqlite_migrate(conn, path, now=NOW)
        conn.close()
    else:
        url = request.getfixturevalue("pg_dsn")
        pg = pg_connect(url)
        pg_migrate(pg, now=NOW)
        pg.close()
    database = Database(path, url=url, readers=1, clock=lambda: NOW)
    database.start(asyncio.get_running_loop())
    try:
        yield database
    finally:
        await database.close()


def add_user(handle: str) -> Any:
    def job(conn: sqlite3.Connection, tx: Tx) -> int:
        return auth_store.insert_user(
            conn, handle=handle, display_name=handle, is_admin=False, now=tx.now
        )

    return job


async def test_a_failing_job_rolls_back_alone_in_its_batch(db: Database) -> None:
    handles = [f"u{i}" for i in range(12)]
    handles[5] = handles[2]  # a duplicate handle: that job fails, the others commit
    futures = [db.submit(add_user(h)) for h in handles]
    results = await asyncio.gather(*futures, return_exceptions=True)
    failed = [i for i, r in enumerate(results) if isinstance(r, BaseException)]
    assert failed == [5] and isinstance(results[5], DUPLICATE)
    ids = [r for r in results if isinstance(r, int)]
    assert len(set(ids)) == 11
    stored = await db.read(
        lambda conn: [h for (h,) in conn.execute("SELECT handle FROM users ORDER BY id")]
    )
    assert sorted(stored) == sorted(set(handles))
    assert db.stats.jobs == 12


async def test_ids_known_before_the_insert_come_from_the_sequence_on_postgresql(
    db: Database,
) -> None:
    def job(conn: sqlite3.Connection, tx: Tx) -> tuple[int, int, int]:
        first, second = tx.next_id(conn, "users"), tx.next_id(conn, "users")
        # A row written with one of them, then one numbered by the table itself: no collision.
        conn.execute(
            "INSERT INTO users (id, handle, display_name, is_admin, created_at)"
            " VALUES (?, 'x', 'x', 0, ?)",
            (second, tx.now),
        )
        third = auth_store.insert_user(
            conn, handle="y", display_name="y", is_admin=False, now=tx.now
        )
        return first, second, third

    first, second, third = await db.write(job)
    assert first < second < third


async def test_the_readers_cannot_write(db: Database) -> None:
    with pytest.raises(READ_ONLY):
        await db.read(
            lambda conn: conn.execute(
                "INSERT INTO users (handle, display_name, is_admin, created_at)"
                " VALUES ('r', 'r', 0, 0)"
            )
        )
    assert db.info["backend"] == ("sqlite" if db.url is None else "postgresql")


USERS = BulkInsert("users", ("handle", "display_name", "is_admin", "created_at"))


def append_user(handle: str) -> Any:
    def job(conn: sqlite3.Connection, tx: Tx) -> str:
        USERS.write(conn, [(handle, handle, 0, tx.now)], tx.appends)
        return handle

    return job


async def test_rows_refused_at_the_batch_flush_fail_only_their_job(db: Database) -> None:
    """The batch's rows go out together at the flush (one pipeline on PostgreSQL); a duplicate
    among them fails the flush, and the batch runs again job by job: only that job fails."""
    handles = ["p", "q", "p", "r"]
    futures = [db.submit(append_user(h), appends=True) for h in handles]
    results = await asyncio.gather(*futures, return_exceptions=True)
    assert [isinstance(r, DUPLICATE) for r in results] == [False, False, True, False]
    stored = await db.read(
        lambda conn: [h for (h,) in conn.execute("SELECT handle FROM users ORDER BY handle")]
    )
    assert stored == ["p", "q", "r"]
    assert db.stats.retries >= 1


async def test_a_statement_past_the_timeout_fails_its_job_and_the_writer_goes_on(
    tmp_path: Path, pg_dsn: str
) -> None:
    pg = pg_connect(pg_dsn)
    pg_migrate(pg, now=NOW)
    pg.close()
    database = Database(tmp_path / "unused.sqlite", url=pg_dsn, readers=1, statement_timeout_ms=300)
    database.start(asyncio.get_running_loop())
    try:
        slow = database.submit(lambda conn, tx: conn.execute("SELECT pg_sleep(5)").fetchone())
        with pytest.raises(psycopg.errors.QueryCanceled):
            await slow
        assert isinstance(await database.write(add_user("after")), int)
        with pytest.raises(psycopg.errors.QueryCanceled):
            await database.read(lambda conn: conn.execute("SELECT pg_sleep(5)").fetchone())
        assert await database.read(lambda conn: conn.execute("SELECT 1").fetchone()[0]) == 1
    finally:
        await database.close()


async def test_many_ids_in_one_transaction_are_distinct_ascending_and_taken_in_blocks(
    db: Database,
) -> None:
    def job(name: str) -> Any:
        def run(conn: sqlite3.Connection, tx: Tx) -> tuple[list[int], int]:
            ids = [tx.next_id(conn, "users") for _ in range(40)]
            conn.execute(
                "INSERT INTO users (id, handle, display_name, is_admin, created_at)"
                " VALUES (?, ?, 'x', 0, ?)",
                (ids[-1], f"{name}x", tx.now),
            )
            after = auth_store.insert_user(
                conn, handle=f"{name}y", display_name="y", is_admin=False, now=tx.now
            )
            return ids, after

        return run

    ids, after = await db.write(job("a"))
    assert ids == sorted(set(ids)) and len(ids) == 40
    assert after > ids[-1]
    if db.url:
        # PostgreSQL: blocks of 8, 8, 16 and 32 ids (one round trip each) for 40 calls; the
        # 24 left over are holes, so the table's own next id comes after the whole block.
        assert after - ids[0] >= 64
    else:
        assert ids == list(range(ids[0], ids[0] + 40)) and after == ids[-1] + 1
    # The next transaction's ids come after all of these (none handed out twice).
    later, _ = await db.write(job("b"))
    assert later[0] > after
