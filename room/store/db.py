"""The database: one writer thread with group commit, and a few reader threads.

Writes are functions ``job(conn, tx)`` submitted from the event loop. The writer thread takes
every job waiting in its queue (up to ``max_batch``), runs them inside one ``BEGIN IMMEDIATE``
transaction, each inside its own SAVEPOINT so that one failing job rolls back alone, and commits
once: one fsync for the whole batch. The batch is one hop into the thread, not an ``await`` per
statement.

After the commit, back on the event loop, the callbacks each job registered with
``tx.on_commit`` run in commit order, and only then are the callers' futures resolved. That is
where events are published to the hub: nothing is pushed before it is durable, and the hub sees
a project's events in seq order.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

from room.errors import StorageError
from room.store.migrate import connect

log = logging.getLogger(__name__)

R = TypeVar("R")


@dataclass(slots=True)
class Tx:
    """What a write job sees besides the connection: the time, its post-commit callbacks, and
    the writer's id counters."""

    now: float
    callbacks: list[Callable[[], None]] = field(default_factory=list)
    counters: dict[str, int] = field(default_factory=dict)

    def on_commit(self, callback: Callable[[], None]) -> None:
        self.callbacks.append(callback)

    def next_id(self, conn: sqlite3.Connection, table: str) -> int:
        """The id the next row of ``table`` will take, known before the INSERT (so a row can
        carry its own id without a second write). Sound because one writer inserts them all;
        the counters are dropped whenever a transaction or savepoint rolls back."""
        current = self.counters.get(table)
        if current is None:
            current = int(conn.execute(f"SELECT coalesce(max(id), 0) FROM {table}").fetchone()[0])
        self.counters[table] = current + 1
        return current + 1


WriteJob = Callable[[sqlite3.Connection, Tx], R]
ReadJob = Callable[[sqlite3.Connection], R]


@dataclass(slots=True)
class _Pending(Generic[R]):
    job: Callable[[sqlite3.Connection, Tx], R]
    future: asyncio.Future[R]
    tx: Tx | None = None
    result: Any = None
    error: BaseException | None = None


_STOP = object()


@dataclass(slots=True)
class WriterStats:
    batches: int = 0
    jobs: int = 0
    largest_batch: int = 0


class Database:
    def __init__(
        self,
        path: Path,
        *,
        synchronous: str = "FULL",
        max_batch: int = 512,
        readers: int = 2,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.path = path
        self.synchronous = synchronous
        self.max_batch = max_batch
        self.n_readers = readers
        self.clock = clock
        self.stats = WriterStats()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._writes: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._reads: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._counters: dict[str, int] = {}  # writer thread only

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        writer = connect(self.path, synchronous=self.synchronous)
        self._threads.append(
            threading.Thread(
                target=self._write_loop, args=(writer,), name="room-writer", daemon=True
            )
        )
        for i in range(self.n_readers):
            conn = connect(self.path, synchronous=self.synchronous)
            conn.execute("PRAGMA query_only = ON")
            self._threads.append(
                threading.Thread(
                    target=self._read_loop, args=(conn,), name=f"room-reader-{i}", daemon=True
                )
            )
        for thread in self._threads:
            thread.start()

    async def close(self) -> None:
        self._writes.put(_STOP)
        for _ in range(self.n_readers):
            self._reads.put(_STOP)
        threads, self._threads = self._threads, []

        def join_all() -> None:
            for thread in threads:
                thread.join(timeout=10)

        await asyncio.to_thread(join_all)

    # -- API -----------------------------------------------------------------------------------

    def submit(self, job: WriteJob[R]) -> asyncio.Future[R]:
        """Queue a write; the future resolves after the commit that holds it (pipelining)."""
        assert self._loop is not None, "Database.start() first"
        future: asyncio.Future[R] = self._loop.create_future()
        self._writes.put(_Pending(job, future))
        return future

    async def write(self, job: WriteJob[R]) -> R:
        return await self.submit(job)

    async def read(self, job: ReadJob[R]) -> R:
        assert self._loop is not None, "Database.start() first"
        future: asyncio.Future[R] = self._loop.create_future()
        self._reads.put((job, future))
        return await future

    # -- threads -------------------------------------------------------------------------------

    def _write_loop(self, conn: sqlite3.Connection) -> None:
        try:
            while True:
                first = self._writes.get()
                if first is _STOP:
                    return
                batch: list[_Pending[Any]] = [first]
                stop = False
                while len(batch) < self.max_batch:
                    try:
                        item = self._writes.get_nowait()
                    except queue.Empty:
                        break
                    if item is _STOP:
                        stop = True
                        break
                    batch.append(item)
                self._run_batch(conn, batch)
                if stop:
                    return
        finally:
            conn.close()

    def _run_batch(self, conn: sqlite3.Connection, batch: list[_Pending[Any]]) -> None:
        try:
            # Optimistic first: no savepoints, which cost two statements per job. Jobs rarely
            # fail; when one does, the whole attempt is rolled back and the batch runs again
            # with a savepoint around each job, so the failure stays that job's alone.
            if not self._attempt(conn, batch, isolate=False) and len(batch) > 1:
                self._attempt(conn, batch, isolate=True)
        except sqlite3.Error as exc:
            log.exception("group commit failed")
            self._counters.clear()
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            error = StorageError(f"the database refused the write: {exc}")
            for pending in batch:
                pending.error, pending.tx = error, None
        self.stats.batches += 1
        self.stats.jobs += len(batch)
        self.stats.largest_batch = max(self.stats.largest_batch, len(batch))
        assert self._loop is not None
        try:
            self._loop.call_soon_threadsafe(_complete, batch)
        except RuntimeError:  # the loop closed under us during shutdown
            pass

    def _attempt(self, conn: sqlite3.Connection, batch: list[_Pending[Any]], isolate: bool) -> bool:
        """Run the batch in one transaction and commit; False if a job failed (not isolated:
        then nothing was committed and the caller retries isolated)."""
        conn.execute("BEGIN IMMEDIATE")
        for pending in batch:
            pending.tx = Tx(now=self.clock(), counters=self._counters)
            pending.result, pending.error = None, None
            if isolate:
                conn.execute("SAVEPOINT job")
            try:
                pending.result = pending.job(conn, pending.tx)
            except BaseException as exc:  # one job's failure must not sink the batch
                pending.error, pending.tx = exc, None
                self._counters.clear()
                if not isolate:
                    conn.execute("ROLLBACK")
                    return False
                conn.execute("ROLLBACK TO job")
            if isolate:
                conn.execute("RELEASE job")
        conn.execute("COMMIT")
        return True

    def _read_loop(self, conn: sqlite3.Connection) -> None:
        try:
            while True:
                item = self._reads.get()
                if item is _STOP:
                    return
                job, future = item
                try:
                    conn.execute("BEGIN")
                    try:
                        result, error = job(conn), None
                    finally:
                        conn.execute("COMMIT")
                except BaseException as exc:
                    result, error = None, exc
                assert self._loop is not None
                try:
                    self._loop.call_soon_threadsafe(_resolve, future, result, error)
                except RuntimeError:
                    pass
        finally:
            conn.close()


def _complete(batch: list[_Pending[Any]]) -> None:
    # Post-commit callbacks first, in commit order, then wake the callers.
    for pending in batch:
        if pending.tx is not None:
            for callback in pending.tx.callbacks:
                try:
                    callback()
                except Exception:
                    log.exception("post-commit callback failed")
    for pending in batch:
        _resolve(pending.future, pending.result, pending.error)


def _resolve(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.done():
        return
    if error is None:
        future.set_result(result)
    else:
        future.set_exception(error)


def run_write(conn: sqlite3.Connection, job: WriteJob[R], now: float | None = None) -> R:
    """Run one write job synchronously in its own transaction (CLI, start-up, tests)."""
    tx = Tx(now=time.time() if now is None else now)
    conn.execute("BEGIN IMMEDIATE")
    try:
        result = job(conn, tx)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    for callback in tx.callbacks:
        callback()
    return result
