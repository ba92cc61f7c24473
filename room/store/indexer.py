"""The messages' search indexer: a background thread that indexes committed messages in
batches, from a watermark, into their own database file (docs/search.md, "Writes and costs").

The send path writes nothing for search: a message is indexed when the indexer next looks,
within ``POLL_SECS`` of its commit on a server with a core to spare (a search first waits for
the indexer to reach what was committed before it: :meth:`SearchIndexer.settle`). The index
is derived data with its own write lock: the indexer never takes the main database's, and the
writer never waits for the index.

One step (:func:`index_step`) is one transaction of the index file, with the main database
attached read-only in practice (a deferred transaction that never writes there takes no lock
on it): from one snapshot it reads the messages past ``messages_done`` and the changes past
``changes_done`` (``search_changes``: the edits, deletes and purges queued with them), and
writes their rows and both watermarks together, in SQL (``INSERT ... SELECT``; only non-ASCII
text calls into Python): a crash loses nothing but work the next start redoes. The
index file is written with ``synchronous=NORMAL`` (WAL: consistent after a power loss, maybe
a few steps behind). Were the index ever ahead of the database (the newest messages gone,
their ids given out again), the step first drops what lies past the newest message; were the
database another one (restored from a backup: the message at the watermark is not the one
indexed, or the queue of changes is behind the index's: a restored backup), the index is
built afresh.

On PostgreSQL (``db`` a ``postgresql://`` URL instead of a path) the index is in the same
database and a step is :func:`room.store.search_pg.index_step` (docs/storage.md).
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
import threading
from pathlib import Path
from typing import Any

from room.store import pg, search_pg
from room.store import search as search_store
from room.store.db import chunks
from room.store.dialect import POSTGRESQL, SQLITE, Connection, dialect_for, dialect_of
from room.store.migrate import attach, connect

log = logging.getLogger(__name__)

BATCH = 2_000  # messages (and changes) per step: one transaction of the index file
POLL_SECS = 0.2  # how often the indexer looks for new messages (a search asks at once)
RETRY_SECS = 1.0  # after a step failed (a locked or unreadable file): try again


# Where the messages are: a SQLite database's path, or a PostgreSQL database's URL.
Store = Path | str


def _is_pg(db: Store) -> bool:
    return isinstance(db, str) and dialect_of(db) is POSTGRESQL


def open_index(db: Store) -> Connection:
    """The index file, with its tables (built afresh when they are of another version), and
    the main database attached as ``src`` to read the messages from (only ever read); on
    PostgreSQL a connection to the database, which holds the index."""
    if _is_pg(db):
        return pg.connect(str(db), application_name="room-search-indexer")
    db_path = Path(db)
    conn = connect(search_store.index_path(db_path), synchronous="NORMAL")
    version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    if version != search_store.INDEX_VERSION:
        conn.execute("DROP TABLE IF EXISTS message_fts")
        conn.execute("DROP TABLE IF EXISTS index_state")
        conn.execute(f"PRAGMA user_version = {search_store.INDEX_VERSION}")
    search_store.create_index(conn)
    attach(conn, "src", db_path)
    return conn


# The two columns of a message's row, in SQL: text that is all ASCII (as many characters as
# bytes) is its own ``body`` and has no ``uni`` (what room.rules.searchtext.index_texts returns for
# it), so most messages are indexed without a call into Python; the rest go through
# room_index_text and room_index_unigrams.
# (The index file is SQLite's: its SQL is SQLite's. PostgreSQL's is in room.store.search_pg.)
_ASCII = f"length(body) = {SQLITE.byte_length('body')}"
_COLUMNS = (
    f"CASE WHEN {_ASCII} THEN body ELSE room_index_text(body) END,"
    f" CASE WHEN {_ASCII} THEN '' ELSE room_index_unigrams(body) END"
)


def index_step(ix: Connection, limit: int = BATCH) -> bool:
    """Index what was committed since the last step (at most ``limit`` messages and changes),
    on a connection from :func:`open_index`; True when nothing is left behind.

    One transaction: the main database is read from one snapshot, the index file written
    (the only file it writes: a deferred transaction takes no lock on the main one)."""
    if dialect_for(ix) is POSTGRESQL:
        return search_pg.index_step(ix, limit)
    ix.execute("BEGIN")
    try:
        done, changes_done, done_at = ix.execute(
            "SELECT messages_done, changes_done, done_at FROM index_state"
        ).fetchone()
        mark = ix.execute("SELECT created_at FROM src.messages WHERE id = ?", (done,)).fetchone()
        last = ix.execute("SELECT coalesce(max(seq), 0) FROM src.search_changes").fetchone()[0]
        if (mark is not None and mark[0] != done_at) or last < changes_done:
            # Another database, or this one from before (a restored backup): afresh.
            ix.execute("DELETE FROM message_fts")
            done, changes_done = 0, last
        newest = int(ix.execute("SELECT coalesce(max(id), 0) FROM src.messages").fetchone()[0])
        if newest < done:  # the newest messages are gone and their ids may come again
            ix.execute("DELETE FROM message_fts WHERE rowid > ?", (newest,))
            done = newest
        changes = ix.execute(
            "SELECT seq, message_id FROM src.search_changes WHERE seq > ? ORDER BY seq LIMIT ?",
            (changes_done, limit),
        ).fetchall()
        # A change to a message not yet indexed needs nothing: it is read as it is now.
        changed = sorted({int(m) for _, m in changes if m <= done})
        for part in chunks(changed):
            marks = ", ".join("?" * len(part))
            ix.execute(f"DELETE FROM message_fts WHERE rowid IN ({marks})", part)
            ix.execute(
                f"INSERT INTO message_fts (rowid, body, uni) SELECT id, {_COLUMNS}"
                f" FROM src.messages WHERE id IN ({marks}) AND deleted_at IS NULL",
                part,
            )
        upto, count = ix.execute(
            "SELECT coalesce(max(id), :done), count(*) FROM (SELECT id FROM src.messages"
            " WHERE id > :done ORDER BY id LIMIT :limit)",
            {"done": done, "limit": limit},
        ).fetchone()
        if count:
            ix.execute(
                f"INSERT INTO message_fts (rowid, body, uni) SELECT id, {_COLUMNS}"
                " FROM src.messages WHERE id > :done AND id <= :upto AND deleted_at IS NULL"
                " ORDER BY id",
                {"done": done, "upto": upto},
            )
        ix.execute(
            "UPDATE index_state SET messages_done = :upto, changes_done = :changes,"
            " done_at = (SELECT created_at FROM src.messages WHERE id = :upto)",
            {"upto": upto, "changes": int(changes[-1][0]) if changes else changes_done},
        )
        ix.execute("COMMIT")
    except BaseException:
        ix.execute("ROLLBACK")
        raise
    return count < limit and len(changes) < limit


def prepare(db_path: Path) -> dict[str, Path]:
    """Make the index file if missing; what a :class:`~room.store.Database` must attach for its
    readers to search (``Database(path, attach=prepare(path))``)."""
    open_index(db_path).close()
    return {"ix": search_store.index_path(db_path)}


def catch_up(db: Store) -> None:
    """Index everything committed so far, in this thread (tests, the bench, the CLI)."""
    ix = open_index(db)
    try:
        while not index_step(ix):
            pass
    finally:
        ix.close()


def forget_applied_changes(conn: Connection, db_path: Path) -> int:
    """Delete the queued changes the index has applied (at start, before the writer runs),
    keeping the newest row so that new changes never reuse a number. Returns how many."""
    if dialect_for(conn) is POSTGRESQL:
        return search_pg.forget_applied_changes(conn)
    probe = connect(db_path)
    try:
        search_store.attach_index(probe, db_path)
        try:
            done = int(probe.execute("SELECT changes_done FROM ix.index_state").fetchone()[0])
        except sqlite3.OperationalError:  # no index yet
            return 0
    finally:
        probe.close()
    return conn.execute(
        "DELETE FROM search_changes WHERE seq <= :done"
        " AND seq < (SELECT max(seq) FROM search_changes)",
        {"done": done},
    ).rowcount


def lag(db: Store) -> dict[str, int]:
    """How far behind the index is: messages past its watermark, changes not yet applied
    (only reads: the server's indexer may be writing)."""
    if _is_pg(db):
        pg_conn = pg.connect(str(db))
        try:
            return search_pg.lag(pg_conn)
        finally:
            pg_conn.close()
    db_path = Path(db)
    conn = connect(db_path)
    try:
        search_store.attach_index(conn, db_path)
        try:
            done, changes_done = conn.execute(
                "SELECT messages_done, changes_done FROM ix.index_state"
            ).fetchone()
        except sqlite3.OperationalError:  # no index yet
            done, changes_done = 0, 0
        row = conn.execute(
            "SELECT (SELECT count(*) FROM messages WHERE id > ?),"
            " (SELECT count(*) FROM search_changes WHERE seq > ?)",
            (done, changes_done),
        ).fetchone()
    finally:
        conn.close()
    return {"messages": int(row[0]), "changes": int(row[1])}


class SearchIndexer:
    """The indexing thread of a running server (started and stopped with its database)."""

    def __init__(self, db_path: Store) -> None:
        self.db_path = db_path
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._wake = threading.Event()
        self._stop = False
        self._lock = threading.Lock()
        self._waiters: list[asyncio.Future[None]] = []
        self.steps = 0

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        ix = open_index(self.db_path)
        self._thread = threading.Thread(
            target=self._run, args=(ix,), name="room-search-indexer", daemon=True
        )
        self._thread.start()

    async def close(self) -> None:
        self._stop = True
        self._wake.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            await asyncio.to_thread(thread.join, 10)

    async def settle(self, wait_secs: float) -> bool:
        """Wait (at most ``wait_secs`` seconds) until every message and change committed before
        this call is indexed; False when the indexer is behind by more than that."""
        if self._thread is None or self._loop is None:
            return False
        waiter: asyncio.Future[None] = self._loop.create_future()
        with self._lock:
            self._waiters.append(waiter)
        self._wake.set()
        try:
            await asyncio.wait_for(asyncio.shield(waiter), wait_secs)
        except TimeoutError:
            return False
        return True

    def _run(self, ix: Connection) -> None:
        try:
            while not self._stop:
                self._wake.clear()
                # Whoever waits now is answered by a step that starts after their call.
                with self._lock:
                    waiting, self._waiters = self._waiters, []
                try:
                    done = index_step(ix)
                    self.steps += 1
                except Exception:
                    log.exception("indexing messages for search failed; trying again")
                    done = False
                    self._wake.wait(RETRY_SECS)
                    ix = self._reconnected(ix)
                if done:
                    self._answer(waiting)
                    self._wake.wait(POLL_SECS)
                else:
                    with self._lock:
                        self._waiters[:0] = waiting
        finally:
            ix.close()

    def _reconnected(self, ix: Connection) -> Connection:
        """On PostgreSQL, a new connection when the old one is lost (the server restarted, the
        backend was ended); the next step starts again from the watermark in the database."""
        if not isinstance(ix, pg.PgConnection) or not (ix.raw.closed or ix.raw.broken):
            return ix
        try:
            fresh = open_index(self.db_path)
        except Exception:
            log.warning("the search indexer cannot reach the database yet; trying again")
            return ix
        ix.close()
        return fresh

    def _answer(self, waiting: list[asyncio.Future[None]]) -> None:
        if not waiting or self._loop is None:
            return
        try:
            self._loop.call_soon_threadsafe(_release, waiting)
        except RuntimeError:  # the loop closed under us during shutdown
            pass


def _release(waiting: list[asyncio.Future[Any]]) -> None:
    for waiter in waiting:
        if not waiter.done():
            waiter.set_result(None)
