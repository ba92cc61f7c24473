"""Ids that commit out of order on PostgreSQL (docs/storage.md, "Several writers"): ids come
from sequences, so with several writers a lower id can commit after a higher one. Whatever is
read by a watermark of ids must not pass over it: the search indexer reads a queue instead
(migration ``0027_pg_parity``, room.store.search_pg), and the people's change log
(``user_changes``) hands out an id only when no other change is in flight."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterator

import pytest

from room.store import indexer
from room.store import search as search_store
from room.store import users as users_store
from room.store.pg import PgConnection
from room.store.pg import connect as pg_connect
from room.store.pg_migrate import migrate as pg_migrate
from tests.test_search_pg import NOW, _fill

INSERT = (
    "INSERT INTO messages (id, project_id, seq, author_id, body, frame, created_at)"
    " VALUES (?, 1, ?, 1, ?, '{}', ?)"
)


@pytest.fixture
def db(pg_dsn: str) -> Iterator[str]:
    conn = pg_connect(pg_dsn)
    try:
        pg_migrate(conn, now=NOW)
        _fill(conn)
    finally:
        conn.close()
    yield pg_dsn


def hits(conn: PgConnection, q: str) -> set[int]:
    body = search_store.search(conn, 1, q, limit=100)
    return {r["id"] for r in body["results"] if r["kind"] == "message"}


def test_a_message_committed_after_a_higher_id_is_indexed(db: str) -> None:
    slow, fast, reader = pg_connect(db), pg_connect(db), pg_connect(db)
    try:
        indexer.catch_up(db)
        # Two writers (as two servers): the lower id is taken first and committed last.
        slow.execute("BEGIN")
        slow.execute(INSERT, (30, 30, "slow tortoise 乌龟慢慢爬", NOW + 30))
        fast.execute("BEGIN")
        fast.execute(INSERT, (31, 31, "fast hare 兔子跑得快", NOW + 31))
        fast.execute("COMMIT")
        indexer.catch_up(db)  # indexes 31 while 30 is still in flight
        assert hits(reader, "hare") == {31}
        assert hits(reader, "tortoise") == set()
        slow.execute("COMMIT")
        assert indexer.lag(db) == {"messages": 1, "changes": 0}
        indexer.catch_up(db)
        assert hits(reader, "tortoise") == {30}
        assert hits(reader, "乌龟") == {30}
        assert hits(reader, "兔子") == {31}
        assert indexer.lag(db) == {"messages": 0, "changes": 0}
    finally:
        for conn in (slow, fast, reader):
            conn.close()


def test_an_edit_queued_by_a_slow_writer_is_applied_when_it_commits(db: str) -> None:
    slow, fast, reader = pg_connect(db), pg_connect(db), pg_connect(db)
    try:
        indexer.catch_up(db)
        slow.execute("BEGIN")
        slow.execute("UPDATE messages SET body = 'renamed giraffe' WHERE id = 3")
        search_store.message_changed(slow, 3)  # the lower queue seq, committed last
        fast.execute("BEGIN")
        fast.execute("UPDATE messages SET body = 'renamed penguin' WHERE id = 4")
        search_store.message_changed(fast, 4)
        fast.execute("COMMIT")
        indexer.catch_up(db)
        assert (hits(reader, "penguin"), hits(reader, "giraffe")) == ({4}, set())
        slow.execute("COMMIT")
        indexer.catch_up(db)
        assert (hits(reader, "penguin"), hits(reader, "giraffe")) == ({4}, {3})
        assert hits(reader, "deployment") == set()  # 3's and 4's old words are gone
    finally:
        for conn in (slow, fast, reader):
            conn.close()


def test_messages_the_old_watermark_passed_over_are_queued_by_the_migration(
    pg_dsn: str,
) -> None:
    conn = pg_connect(pg_dsn)
    try:
        pg_migrate(conn, now=NOW)
        _fill(conn)
        indexer.catch_up(pg_dsn)
        # An index as the watermark left it: message 5's row never written.
        conn.execute("DELETE FROM message_fts WHERE rowid = 5")
        conn.execute("DELETE FROM schema_migrations WHERE name = '0027_pg_parity'")
        conn.execute("DROP TRIGGER messages_search_queue ON messages")
        conn.execute("DROP FUNCTION room_queue_new_messages()")
        assert hits(conn, "index_step") == set()
        assert pg_migrate(conn, now=NOW) == ["0027_pg_parity"]
        indexer.catch_up(pg_dsn)
        assert hits(conn, "index_step") == {5}
    finally:
        conn.close()


def _waiting_on_a_lock(conn: PgConnection, pid: int) -> bool:
    row = conn.execute(
        "SELECT wait_event_type FROM pg_stat_activity WHERE pid = ?", (pid,)
    ).fetchone()
    return row is not None and row[0] == "Lock"


def test_user_changes_commit_in_id_order(db: str) -> None:
    """A poll by id (the server's ``user_watch``) sees every change: the second writer gets
    its id only after the first committed, so a poll between them cannot pass over one."""
    first, second, poll = pg_connect(db), pg_connect(db), pg_connect(db)
    conn = pg_connect(db)
    try:
        conn.execute("BEGIN")
        conn.execute(
            "INSERT INTO users (id, handle, display_name, created_at) VALUES"
            " (1, 'ann', 'Ann', ?), (2, 'bo', 'Bo', ?)",
            (NOW, NOW),
        )
        conn.execute("COMMIT")
        second_pid = int(second.execute("SELECT pg_backend_pid()").fetchone()[0])
        first.execute("BEGIN")
        users_store.record_change(first, 1, "disable", NOW)
        done = threading.Event()

        def write_second() -> None:
            second.execute("BEGIN")
            users_store.record_change(second, 2, "disable", NOW)
            second.execute("COMMIT")
            done.set()

        thread = threading.Thread(target=write_second, daemon=True)
        thread.start()
        for _ in range(1000):  # bounded: the second writer reaches the lock and waits there
            if _waiting_on_a_lock(poll, second_pid) or done.wait(0.01):
                break
        assert not done.is_set()
        assert _waiting_on_a_lock(poll, second_pid)
        assert users_store.changes_since(poll, 0) == []
        first.execute("COMMIT")
        thread.join(10)
        assert done.is_set()
        changes = users_store.changes_since(poll, 0)
        assert [(user, action) for _, user, action in changes] == [(1, "disable"), (2, "disable")]
        assert changes[0][0] < changes[1][0]
    finally:
        for c in (first, second, poll, conn):
            c.close()


def test_two_indexers_take_turns_and_index_everything_once(
    db: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Two servers' indexer threads on one database, two writers committing out of id order,
    edits among them: every live message has its one row, as it is now; no step failed."""
    writers = [pg_connect(db), pg_connect(db)]
    reader = pg_connect(db)

    async def scenario() -> tuple[bool, bool]:
        loop = asyncio.get_running_loop()
        threads = [indexer.SearchIndexer(db), indexer.SearchIndexer(db)]
        for thread in threads:
            thread.start(loop)
        try:
            for round_ in range(20):
                low, high = 100 + 2 * round_, 101 + 2 * round_
                first, second = writers[round_ % 2], writers[(round_ + 1) % 2]
                first.execute("BEGIN")
                first.execute(INSERT, (low, low, f"round{round_} low 第{round_}轮", NOW))
                second.execute("BEGIN")
                second.execute(INSERT, (high, high, f"round{round_} high", NOW))
                second.execute("COMMIT")
                await threads[round_ % 2].settle(10)
                if round_ % 3 == 0:  # an edit of an indexed message, with the lower id
                    first.execute("UPDATE messages SET body = 'edited words' WHERE id = ?", (low,))
                    search_store.message_changed(first, low)
                first.execute("COMMIT")
            return await threads[0].settle(15), await threads[1].settle(15)
        finally:
            for thread in threads:
                await thread.close()

    try:
        with caplog.at_level(logging.WARNING, logger="room.store.indexer"):
            assert asyncio.run(scenario()) == (True, True)
        assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
        rows = dict(reader.execute("SELECT rowid, body FROM message_fts WHERE rowid >= 100"))
        assert sorted(rows) == list(range(100, 140))
        edited = {100 + 2 * r for r in range(20) if r % 3 == 0}
        assert {i for i, body in rows.items() if body == "edited words"} == edited
        assert hits(reader, "high") == set(range(101, 140, 2))
        assert hits(reader, "low") == {100 + 2 * r for r in range(20)} - edited
        assert reader.execute("SELECT count(*) FROM search_changes").fetchone()[0] == 0
    finally:
        for conn in (*writers, reader):
            conn.close()
