"""The database: one writer thread with group commit, and a few reader threads.

Writes are functions ``job(conn, tx)`` submitted from the event loop. The writer thread takes
every job waiting in its queue (up to ``max_batch``), runs them inside one ``BEGIN IMMEDIATE``
transaction, each inside its own SAVEPOINT so that one failing job rolls back alone, and commits
once: one fsync for the whole batch. The batch is one hop into the thread, not an ``await`` per
statement.

Jobs submitted with ``appends=True`` (sends: the hot path) may leave their INSERTs to the batch
(:class:`Appends`): the rows of every such job are written with one multi-row statement per
table just before the commit, or earlier, as soon as a job that may read those tables comes next.

After the commit, back on the event loop, the effects each job recorded with ``tx.emit``
(:mod:`room.rules.effects`: frames to publish, members to wake, a roster changed …) go to the one
sink the server installed (``Database(effects=…)``, :func:`room.actions.effects.apply`), job
by job in commit order, and only then are the callers' futures resolved. Nothing is pushed
before it is durable, and the hub sees a project's events in seq order.
"""

from __future__ import annotations

import asyncio
import bisect
import logging
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Generic, TypeVar

from room.errors import StorageError
from room.rules.effects import Effect
from room.store.dialect import Connection
from room.store.migrate import attach, connect

log = logging.getLogger(__name__)

R = TypeVar("R")
T = TypeVar("T")


@dataclass(frozen=True, slots=True, eq=False)  # compared and hashed by identity: cheap
class BulkInsert:
    """An INSERT whose rows :class:`Appends` can gather from many jobs and write at once.

    ``fts``: the table is an FTS5 index, whose rows :class:`Appends` writes after every other
    table's, one row per statement. FTS5 buffers a transaction's rows in memory and writes
    them out as a new index segment whenever a statement opens a savepoint, which a multi-row
    INSERT or one checking foreign keys does: interleaved with those, the index would get a
    segment per statement (and the merging that follows) instead of one per flush."""

    table: str
    columns: tuple[str, ...]
    verb: str = "INSERT"
    fts: bool = False

    @property
    def sql(self) -> str:
        """The single-row statement (the direct path)."""
        return _insert_sql(self, 1)

    def write(self, conn: Connection, rows: list[tuple[Any, ...]], appends: Appends | None) -> None:
        """Insert ``rows`` now, or leave them to the batch's ``appends`` when there is one."""
        if appends is not None:
            appends.extend(self, rows)
        elif len(rows) == 1:  # the common case; executemany costs more for one row
            conn.execute(self.sql, rows[0])
        elif rows:
            conn.executemany(self.sql, rows)


# Multi-row statements come in these sizes only (n rows are written as n's binary digits), so a
# handful of SQL strings per table stays in the connection's statement cache.
_CHUNKS = (64, 32, 16, 8, 4, 2, 1)


def chunks(items: list[T]) -> Iterator[list[T]]:
    """``items`` in slices of the ``_CHUNKS`` sizes, largest first."""
    at = 0
    for size in _CHUNKS:
        while len(items) - at >= size:
            yield items[at : at + size]
            at += size


@cache
def _insert_sql(spec: BulkInsert, rows: int) -> str:
    one = "(" + ", ".join("?" * len(spec.columns)) + ")"
    return f"{spec.verb} INTO {spec.table} ({', '.join(spec.columns)}) VALUES " + ", ".join(
        [one] * rows
    )


class Appends:
    """INSERTs that the append-only jobs of one batch leave to the batch, plus what those jobs
    may remember in between (``memo``: a project's next seq, its state, the sends taken).

    A send costs six statements on its own; written per batch, its rows cost a fraction of one,
    and the writer gives up the GIL a few times per batch instead of a few times per send.
    :meth:`flush` writes table by table, in the order each table was first added to (a send
    adds its message row before the rows referring to it), each table's rows in the order they
    came (a full-text index last: see :class:`BulkInsert`), and forgets the memo, whose facts
    are then in the tables. The writer flushes before any job not submitted with
    ``appends=True`` and before the commit; a job that must read what it or an earlier job
    appended flushes first.
    """

    __slots__ = ("_finally", "_rows", "memo")

    def __init__(self) -> None:
        self._rows: dict[BulkInsert, list[tuple[Any, ...]]] = {}
        self._finally: dict[Any, tuple[str, tuple[Any, ...]]] = {}
        self.memo: dict[Any, Any] = {}

    def add(self, spec: BulkInsert, row: tuple[Any, ...]) -> None:
        self.extend(spec, [row])

    def extend(self, spec: BulkInsert, rows: list[tuple[Any, ...]]) -> None:
        waiting = self._rows.get(spec)
        if waiting is None:
            self._rows[spec] = list(rows)
        else:
            waiting += rows

    def at_flush(self, key: Any, sql: str, params: tuple[Any, ...]) -> None:
        """Run ``sql`` once when flushing, after the rows; a later call with the same ``key``
        replaces the earlier (a counter's final value is written once)."""
        self._finally[key] = (sql, params)

    def flush(self, conn: sqlite3.Connection) -> None:
        for spec, rows in self._rows.items():
            if not spec.fts:
                for chunk in chunks(rows):
                    conn.execute(_insert_sql(spec, len(chunk)), [v for row in chunk for v in row])
        for sql, params in self._finally.values():
            conn.execute(sql, params)
        for spec, rows in self._rows.items():
            if spec.fts:
                conn.executemany(spec.sql, rows)
        self._rows.clear()
        self._finally.clear()
        self.memo.clear()

    def __bool__(self) -> bool:
        return bool(self._rows or self._finally or self.memo)


@dataclass(slots=True)
class Tx:
    """What a write job sees besides the connection: the time, the effects it records for after
    its commit, the writer's id counters, and for a job submitted with ``appends=True`` (outside
    a retry) the batch's :class:`Appends`."""

    now: float
    effects: list[Effect] = field(default_factory=list)
    counters: dict[str, int] = field(default_factory=dict)
    appends: Appends | None = None
    # The loop brake's agent-turn count per project as this writer last wrote it (see
    # room/store/brakes.py): a send that finds it zero costs no statement. Dropped with the id
    # counters whenever a transaction or savepoint rolls back.
    agent_turns: dict[int, int] = field(default_factory=dict)

    def emit(self, effect: Effect) -> None:
        """Record what must happen once this job has committed (dropped if it rolls back)."""
        self.effects.append(effect)

    def write_directly(self, conn: sqlite3.Connection) -> None:
        """From here on this job writes and reads the tables directly: what the batch has
        appended so far is written first. For a job that goes on to arbitrary work."""
        if self.appends is not None:
            self.appends.flush(conn)
            self.appends = None

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
# Looks up, for a whole batch at once, what each of its jobs would otherwise look up alone:
# called with every key the batch's jobs gave it, it leaves its findings in ``appends.memo``.
Prefetch = Callable[[sqlite3.Connection, Appends, list[Any]], None]


Done = Callable[[Any, BaseException | None], None]
# Carries out the effects of one committed job (the server installs room.actions.effects.apply).
EffectSink = Callable[[list[Effect]], None]


def _no_effects(effects: list[Effect]) -> None:
    if effects:
        log.debug("no effect sink installed: %d effects dropped", len(effects))


@dataclass(slots=True)
class _Pending(Generic[R]):
    job: Callable[[sqlite3.Connection, Tx], R]
    future: asyncio.Future[R] | None
    appends: bool = False
    prefetch: tuple[Prefetch, Any] | None = None
    tx: Tx | None = None
    result: Any = None
    error: BaseException | None = None
    on_done: Done | None = None


_STOP = object()


BATCH_BOUNDS: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512)
COMMIT_BOUNDS: tuple[float, ...] = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
)  # fmt: skip


@dataclass(slots=True)
class WriterStats:
    batches: int = 0
    jobs: int = 0
    largest_batch: int = 0
    retries: int = 0  # batches run again job by job after a job failed or rows were refused
    # Histograms (``/metrics``): counts per upper bound, the last slot past every bound.
    batch_counts: list[int] = field(default_factory=lambda: [0] * (len(BATCH_BOUNDS) + 1))
    commit_counts: list[int] = field(default_factory=lambda: [0] * (len(COMMIT_BOUNDS) + 1))
    commit_seconds: float = 0.0

    def observe(self, size: int, seconds: float) -> None:
        self.batches += 1
        self.jobs += size
        self.largest_batch = max(self.largest_batch, size)
        self.batch_counts[bisect.bisect_left(BATCH_BOUNDS, size)] += 1
        self.commit_counts[bisect.bisect_left(COMMIT_BOUNDS, seconds)] += 1
        self.commit_seconds += seconds


class Database:
    def __init__(
        self,
        path: Path,
        *,
        synchronous: str = "FULL",
        max_batch: int = 512,
        readers: int = 2,
        clock: Callable[[], float] = time.time,
        effects: EffectSink = _no_effects,
        attach: Mapping[str, Path] | None = None,
    ) -> None:
        self.path = path
        # Other database files the readers see under these schema names (the messages'
        # search index, room.store.search.attach_index); the writer never touches them.
        self.attach = dict(attach or {})
        self.effects = effects
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
        self._agent_turns: dict[int, int] = {}  # writer thread only

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
            for name, path in self.attach.items():
                attach(conn, name, path)
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

    def submit(
        self,
        job: WriteJob[R],
        *,
        appends: bool = False,
        prefetch: tuple[Prefetch, Any] | None = None,
    ) -> asyncio.Future[R]:
        """Queue a write; the future resolves after the commit that holds it (pipelining).

        ``appends=True`` promises that the job reads nothing another such job of the batch may
        have left in ``tx.appends`` unwritten (or flushes it first): see :class:`Appends`.
        ``prefetch=(function, key)`` lets the batch look ``key`` up together with the other
        jobs' keys before they run (one query instead of one per job); the job must still
        look up itself whatever it does not find in the memo (a flush forgets it)."""
        assert self._loop is not None, "Database.start() first"
        future: asyncio.Future[R] = self._loop.create_future()
        self._writes.put(_Pending(job, future, appends, prefetch if appends else None))
        return future

    def submit_then(
        self,
        job: WriteJob[R],
        on_done: Callable[[R | None, BaseException | None], None],
        *,
        appends: bool = False,
        prefetch: tuple[Prefetch, Any] | None = None,
    ) -> None:
        """:meth:`submit` for a caller that only needs to be told: ``on_done(result, error)``
        runs on the event loop right after the commit's effects, with no future and no
        extra turn of the loop (a connection's acks: one per send)."""
        assert self._loop is not None, "Database.start() first"
        pending = _Pending(job, None, appends, prefetch if appends else None, on_done=on_done)
        self._writes.put(pending)

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
        started = time.perf_counter()
        try:
            # Optimistic first: no savepoints, which cost two statements per job. Jobs rarely
            # fail; when one does, the whole attempt is rolled back and the batch runs again
            # with a savepoint around each job, so the failure stays that job's alone.
            # A lone job that failed has its error already; anything else (several jobs, or
            # appended rows refused at the flush) is retried job by job.
            if not self._attempt(conn, batch, isolate=False) and (
                len(batch) > 1 or batch[0].error is None
            ):
                self.stats.retries += 1
                self._attempt(conn, batch, isolate=True)
        except Exception as exc:  # sqlite3's, or anything else: the writer must live on
            log.exception("group commit failed")
            self._forget_counts()
            try:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
            except Exception:
                log.exception("rolling back the failed group commit failed too")
            error = StorageError(f"the database refused the write: {exc}")
            for pending in batch:
                pending.result, pending.error, pending.tx = None, error, None
        self.stats.observe(len(batch), time.perf_counter() - started)
        assert self._loop is not None
        try:
            self._loop.call_soon_threadsafe(_complete, batch, self.effects)
        except RuntimeError:  # the loop closed under us during shutdown
            pass

    def _attempt(self, conn: sqlite3.Connection, batch: list[_Pending[Any]], isolate: bool) -> bool:
        """Run the batch in one transaction and commit; False if a job failed (not isolated:
        then nothing was committed and the caller retries isolated).

        Isolated, each job runs inside its own savepoint and writes its own rows: a failing
        multi-row INSERT could not say whose row it was."""
        appends = None if isolate else Appends()
        conn.execute("BEGIN IMMEDIATE")
        if appends is not None and not self._prefetch(conn, batch, appends):
            return False
        for pending in batch:
            if not pending.appends and appends and not self._flush(conn, appends):
                return False
            pending.tx = Tx(
                now=self.clock(),
                counters=self._counters,
                agent_turns=self._agent_turns,
                appends=appends if pending.appends else None,
            )
            pending.result, pending.error = None, None
            if isolate:
                conn.execute("SAVEPOINT job")
            try:
                pending.result = pending.job(conn, pending.tx)
            except BaseException as exc:  # one job's failure must not sink the batch
                pending.error, pending.tx = exc, None
                self._forget_counts()
                if not isolate:
                    conn.execute("ROLLBACK")
                    return False
                conn.execute("ROLLBACK TO job")
            if isolate:
                conn.execute("RELEASE job")
        if appends and not self._flush(conn, appends):
            return False
        conn.execute("COMMIT")
        return True

    def _forget_counts(self) -> None:
        self._counters.clear()
        self._agent_turns.clear()

    def _prefetch(
        self, conn: sqlite3.Connection, batch: list[_Pending[Any]], appends: Appends
    ) -> bool:
        keys: dict[Prefetch, list[Any]] = {}
        for pending in batch:
            if pending.prefetch is not None:
                function, key = pending.prefetch
                keys.setdefault(function, []).append(key)
        try:
            for function, found in keys.items():
                function(conn, appends, found)
        except Exception:  # not only sqlite3's: whatever it is, the jobs alone will meet it
            log.warning("a batch's prefetch failed; retrying job by job", exc_info=True)
            conn.execute("ROLLBACK")
            return False
        return True

    def _flush(self, conn: sqlite3.Connection, appends: Appends) -> bool:
        try:
            appends.flush(conn)
        except Exception:
            # Whose row broke a constraint (or would not bind) is unknown here: the batch runs
            # again isolated, where each job meets its own error.
            log.warning("a batch's appended rows were refused; retrying job by job", exc_info=True)
            self._forget_counts()
            conn.execute("ROLLBACK")
            return False
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


def _complete(batch: list[_Pending[Any]], sink: EffectSink) -> None:
    # Effects first, in commit order, then wake the callers.
    for pending in batch:
        if pending.tx is not None and pending.tx.effects:
            try:
                sink(pending.tx.effects)
            except Exception:
                log.exception("carrying out a committed job's effects failed")
    for pending in batch:  # each caller is told, whatever another one does
        try:
            if pending.future is not None:
                _resolve(pending.future, pending.result, pending.error)
            elif pending.on_done is not None:
                pending.on_done(pending.result, pending.error)
        except Exception:
            log.exception("a write's completion callback failed")


def _resolve(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.done():
        return
    if error is None:
        future.set_result(result)
    else:
        if isinstance(error, StopIteration):  # a future refuses it (it would end a coroutine)
            error = RuntimeError(f"the job raised StopIteration: {error!r}")
        future.set_exception(error)


def run_write(
    conn: sqlite3.Connection,
    job: WriteJob[R],
    now: float | None = None,
    effects: EffectSink = _no_effects,
) -> R:
    """Run one write job synchronously in its own transaction (CLI, start-up, tests); its
    effects go to ``effects`` after the commit (nobody is listening before the server runs)."""
    tx = Tx(now=time.time() if now is None else now)
    conn.execute("BEGIN IMMEDIATE")
    try:
        result = job(conn, tx)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    effects(tx.effects)
    return result
