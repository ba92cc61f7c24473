"""The database: one writer thread with group commit, and a few reader threads.

Writes are functions ``job(conn, tx)`` submitted from the event loop. The writer thread takes
every job waiting in its queue (up to ``max_batch``), runs them inside one ``BEGIN IMMEDIATE``
transaction, each inside its own SAVEPOINT so that one failing job rolls back alone, and commits
once: one fsync for the whole batch. The batch is one hop into the thread, not an ``await`` per
statement.

Jobs submitted with ``appends=True`` (sends: the hot path) may leave their INSERTs to the batch
(:class:`Appends`): the rows of every such job are written with one multi-row statement per
table just before the commit, or earlier, as soon as a statement names one of those tables or a
job that may read them comes next.

After the commit, back on the event loop, the effects each job recorded with ``tx.emit``
(:mod:`room.rules.effects`: frames to publish, members to wake, a roster changed …) go to the one
sink the server installed (``Database(effects=…)``, :func:`room.actions.effects.apply`), job
by job in commit order, and only then are the callers' futures resolved. Nothing is pushed
before it is durable, and the hub sees a project's events in seq order.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import enum
import logging
import queue
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache, lru_cache
from pathlib import Path
from typing import Any, Generic, TypeVar, cast

import psycopg

from room.errors import DatabaseUnavailableError, LeaseLostError, StorageError
from room.rules.effects import Effect
from room.store import pg
from room.store.dialect import Connection, Cursor, Params, dialect_for
from room.store.leases import FENCE, Fence, LeaseCounts, check_fence
from room.store.migrate import attach, connect

log = logging.getLogger(__name__)

R = TypeVar("R")
C = TypeVar("C", bound=Connection)
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


# What a send stored under a client_txn_id: message id, seq, content digest, wire object.
Sent = tuple[int, int, str | None, str]


class Unknown(enum.Enum):
    """What :class:`Appends` answers for a fact it was not told (``None`` is a fact too: no
    earlier send, no such project)."""

    UNKNOWN = "unknown"


UNKNOWN = Unknown.UNKNOWN


@lru_cache(maxsize=4096)
def _names(sql: str) -> frozenset[str]:
    """Every identifier-like word of a statement, lower-cased (a table it names is one)."""
    return frozenset(re.findall(r"[a-z_][a-z0-9_]*", sql.lower()))


class Appends:
    """INSERTs that the append-only jobs of one batch leave to the batch, plus the facts those
    jobs tell each other in between: a project's last seq taken, its state, the sends stored
    under each ``(author, client_txn_id)`` (or looked up for the whole batch by a prefetch).

    A send costs six statements on its own; written per batch, its rows cost a fraction of one,
    and the writer gives up the GIL a few times per batch instead of a few times per send.
    :meth:`flush` writes table by table, in the order each table was first added to (a send
    adds its message row before the rows referring to it), each table's rows in the order they
    came (a full-text index last: see :class:`BulkInsert`), then each project's last seq.

    No job reads past a waiting row: while rows wait, the writer's connection has them written
    first whenever a statement names one of their tables (:class:`WriterConnection`), whatever
    the job. The facts stay true across such a flush (only the batch's own jobs ran); before a
    job not submitted with ``appends=True``, which may change what they say, the writer flushes
    and drops them (:meth:`forget`), and it flushes before the commit.
    """

    __slots__ = (
        "_last_seqs",
        "_rosters",
        "_rows",
        "_sends",
        "_seq_writes",
        "_states",
        "_tables",
    )

    def __init__(self) -> None:
        self._rows: dict[BulkInsert, list[tuple[Any, ...]]] = {}
        self._tables: set[str] = set()  # the tables of the rows waiting
        self._seq_writes: dict[int, tuple[int, float]] = {}  # project id → (seq, now) to write
        self._last_seqs: dict[int, int] = {}
        self._states: dict[int, str | None] = {}
        self._rosters: dict[int, int] = {}
        self._sends: dict[tuple[int, str], Sent | None] = {}

    # -- rows ------------------------------------------------------------------------------------

    def add(self, spec: BulkInsert, row: tuple[Any, ...]) -> None:
        self.extend(spec, [row])

    def extend(self, spec: BulkInsert, rows: list[tuple[Any, ...]]) -> None:
        waiting = self._rows.get(spec)
        if waiting is None:
            self._rows[spec] = list(rows)
            self._tables.add(spec.table)
        else:
            waiting += rows

    def waits_for(self, sql: str) -> bool:
        """Whether ``sql`` names a table some of whose rows are still waiting here."""
        return bool(self._tables) and not self._tables.isdisjoint(_names(sql))

    def flush(self, conn: Connection) -> None:
        """Write every waiting row and seq (the facts stay: they are still true)."""
        rows, seq_writes = self._rows, self._seq_writes
        # Taken first: the statements below go through the guarded connection.
        self._rows, self._seq_writes, self._tables = {}, {}, set()
        # PostgreSQL: the statements go out in one pipeline (psycopg's pipeline mode), not one
        # round trip each; an error among them is raised when the pipeline ends.
        with conn.raw.pipeline() if isinstance(conn, pg.PgConnection) else contextlib.nullcontext():
            self._write(conn, rows, seq_writes)

    @staticmethod
    def _write(
        conn: Connection,
        rows: dict[BulkInsert, list[tuple[Any, ...]]],
        seq_writes: dict[int, tuple[int, float]],
    ) -> None:
        for spec, waiting in rows.items():
            if not spec.fts:
                for chunk in chunks(waiting):
                    conn.execute(_insert_sql(spec, len(chunk)), [v for row in chunk for v in row])
        for project_id, (seq, now) in seq_writes.items():
            conn.execute(
                "UPDATE projects SET last_seq = ?, updated_at = ? WHERE id = ?",
                (seq, now, project_id),
            )
        for spec, waiting in rows.items():
            if spec.fts:
                conn.executemany(spec.sql, waiting)

    def forget(self) -> None:
        """Drop the facts: a job outside the batch's appends may change them."""
        self._last_seqs.clear()
        self._states.clear()
        self._rosters.clear()
        self._sends.clear()

    def __bool__(self) -> bool:
        return bool(
            self._rows
            or self._seq_writes
            or self._last_seqs
            or self._states
            or self._rosters
            or self._sends
        )

    # -- facts -----------------------------------------------------------------------------------

    def last_seq(self, project_id: int) -> int | None:
        """The last seq a job of this batch took in the project, or None."""
        return self._last_seqs.get(project_id)

    def take_seq(self, project_id: int, seq: int, now: float) -> None:
        """Remember ``seq`` as the project's last; the project's row gets it at the flush."""
        self._last_seqs[project_id] = seq
        self._seq_writes[project_id] = (seq, now)

    def state(self, project_id: int) -> str | Unknown | None:
        return self._states.get(project_id, UNKNOWN)

    def remember_state(self, project_id: int, state: str | None) -> None:
        self._states[project_id] = state

    def roster_version(self, project_id: int) -> int | None:
        return self._rosters.get(project_id)

    def remember_roster_version(self, project_id: int, version: int) -> None:
        self._rosters[project_id] = version

    def sent(self, author_id: int, client_txn_id: str) -> Sent | Unknown | None:
        """What a send stored under this txn (None: nothing), if this batch knows."""
        return self._sends.get((author_id, client_txn_id), UNKNOWN)

    def remember_sent(self, author_id: int, client_txn_id: str, sent: Sent | None) -> None:
        self._sends[(author_id, client_txn_id)] = sent


class UndeclaredProjectError(RuntimeError):
    """A job took a seq (or a per-project number) in a project it did not declare
    (``Database.submit(locks=…)``): on PostgreSQL it locked the project's row only then, maybe
    after other rows, against the lock order every send keeps (docs/storage.md, "Lock order:
    the project first"). A programming error, raised only where ``Database(check_locks=True)``
    (the tests; the setting ``database_check_locks``)."""


@dataclass(frozen=True, slots=True)
class Declared:
    """What the writer's connection knows of the job running on it, for the lock check: the
    projects it declared and its name (for the error)."""

    projects: tuple[int, ...]
    job: str


def job_name(job: Callable[..., Any]) -> str:
    """``module.qualname`` of a job (a lambda says where it was written), for errors."""
    target = getattr(job, "func", job)  # functools.partial
    module = getattr(target, "__module__", None) or "?"
    name = getattr(target, "__qualname__", None) or type(target).__name__
    return f"{module}.{name}"


def check_declared(conn: Connection, project_id: int, what: str = "a seq") -> None:
    """Refuse ``what`` (a seq, a per-project number, an update of the row: each locks the
    project's row) of ``project_id`` to a job that did not declare the project, where the
    writer checks (:attr:`WriterConnection.declared` set: ``Database(check_locks=True)``);
    nothing to do elsewhere (``run_write``, a connection of its own)."""
    declared: Declared | None = getattr(conn, "declared", None)
    if declared is not None and project_id not in declared.projects:
        raise UndeclaredProjectError(
            f"the job {declared.job} took {what} of project {project_id} without declaring it "
            f"(declared: {list(declared.projects)}); submit it with locks=({project_id},) "
            '(docs/storage.md, "Lock order: the project first")'
        )


def declare_created(conn: Connection, project_id: int) -> None:
    """Declare a project the running job has just inserted (a new project, an imported one):
    its row is locked by the insert itself, which no other transaction sees before the commit,
    so none can hold it while waiting for a row this job holds. Its seqs are then the job's to
    take (:func:`check_declared`)."""
    if isinstance(conn, _Guarded) and conn.declared is not None:
        declared = conn.declared
        if project_id not in declared.projects:
            conn.declared = Declared((*declared.projects, project_id), declared.job)


class WriterConnection(sqlite3.Connection):
    """The writer's connection. While the batch's :class:`Appends` (``appends``) holds rows, a
    statement that names one of their tables has them written first: a job cannot read, update
    or count past a row an earlier job of its batch left to the batch.

    ``declared``: the running job's declared projects, while the writer checks them
    (:func:`check_declared`)."""

    appends: Appends | None = None
    declared: Declared | None = None

    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
        appends = self.appends
        if appends is not None and appends.waits_for(sql):
            appends.flush(self)
        return super().execute(sql, parameters)

    def executemany(self, sql: str, parameters: Any, /) -> sqlite3.Cursor:
        appends = self.appends
        if appends is not None and appends.waits_for(sql):
            appends.flush(self)
        return super().executemany(sql, parameters)


class PgWriterConnection(pg.PgConnection):
    """:class:`WriterConnection` on PostgreSQL: the same guard over a psycopg connection."""

    appends: Appends | None = None
    declared: Declared | None = None

    def execute(self, sql: str, parameters: Params = (), /) -> Cursor:
        appends = self.appends
        if appends is not None and appends.waits_for(sql):
            appends.flush(self)
        return super().execute(sql, parameters)

    def executemany(self, sql: str, parameters: Any, /) -> Cursor:
        appends = self.appends
        if appends is not None and appends.waits_for(sql):
            appends.flush(self)
        return super().executemany(sql, parameters)


_Guarded = (WriterConnection, PgWriterConnection)


@dataclass(slots=True)
class Tx:
    """What a write job sees besides the connection: the time, the effects it records for after
    its commit, the writer's id counters, and for a job submitted with ``appends=True`` (outside
    a retry) the batch's :class:`Appends`."""

    now: float
    effects: list[Effect] = field(default_factory=list)
    counters: dict[str, int] = field(default_factory=dict)
    # PostgreSQL: ids taken from a table's sequence ahead of need, handed out by next_id (the
    # largest last, popped first from the end), dropped with the counters (their ids: holes).
    reserved: dict[str, list[int]] = field(default_factory=dict)
    appends: Appends | None = None
    # The loop brake's agent-turn count per project as this transaction last wrote it (see
    # room/store/brakes.py): a send that finds it zero costs no statement. Like the id counters,
    # it lives for one transaction and is dropped whenever one or a savepoint rolls back.
    agent_turns: dict[int, int] = field(default_factory=dict)
    # The node (server) whose writer runs the job (room.infra.boot.node_id): a turn records it,
    # and a start settles only its own node's turns. None outside a server (CLI, tests).
    node: str | None = None

    def emit(self, effect: Effect) -> None:
        """Record what must happen once this job has committed (dropped if it rolls back)."""
        self.effects.append(effect)

    def write_directly(self, conn: Connection) -> None:
        """From here on this job writes and reads the tables directly: what the batch has
        appended so far is written first, and the batch forgets its facts (this job may change
        them). For a job that goes on to arbitrary work."""
        if self.appends is not None:
            self.appends.flush(conn)
            self.appends.forget()
            self.appends = None

    def next_id(self, conn: Connection, table: str) -> int:
        """The id the next row of ``table`` will take, known before the INSERT (so a row can
        carry its own id without a second write).

        SQLite: the first call per table in a transaction reads ``max(id)``; later ones count
        on from it. Sound because the transaction holds the database's write lock from its
        ``BEGIN IMMEDIATE`` (no other process, a CLI import say, can insert in between) and
        the counters live for one transaction only, dropped at the next one's start and
        whenever one or a savepoint rolls back.

        PostgreSQL: the table's identity sequence (``nextval``), which several processes share
        safely; an id taken by a transaction that rolls back is a hole, never a duplicate. Ids
        are taken in blocks, one round trip each, as many as the transaction has taken so far
        (at least 8, at most 256): a batch of 512 sends costs 7 round trips, not 512 (they
        were most of the PostgreSQL writer's time, docs/storage.md "Durable sends on
        PostgreSQL"); the ids left over when the transaction ends are holes."""
        if dialect_for(conn).name == "postgresql":
            ids = self.reserved.get(table)
            if not ids:
                taken = self.counters.get(table, 0)
                size = min(256, max(8, taken))
                rows = conn.execute(
                    "SELECT nextval(pg_get_serial_sequence(?, 'id'))"
                    " FROM generate_series(1, CAST(? AS INTEGER))",
                    (table, size),
                ).fetchall()
                ids = self.reserved[table] = sorted((int(r[0]) for r in rows), reverse=True)
                self.counters[table] = taken + size
            return ids.pop()
        current = self.counters.get(table)
        if current is None:
            current = int(conn.execute(f"SELECT coalesce(max(id), 0) FROM {table}").fetchone()[0])
        self.counters[table] = current + 1
        return current + 1


WriteJob = Callable[[sqlite3.Connection, Tx], R]
ReadJob = Callable[[sqlite3.Connection], R]
# Looks up, for a whole batch at once, what each of its jobs would otherwise look up alone:
# called with every key the batch's jobs gave it, it leaves its findings as facts on the
# ``Appends`` (``remember_sent`` …).
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
    # The projects whose rows the job will lock (PostgreSQL: taken for the whole batch at its
    # start, in id order, so two processes' batches never wait for each other in a cycle).
    locks: tuple[int, ...] = ()
    tx: Tx | None = None
    result: Any = None
    error: BaseException | None = None
    on_done: Done | None = None
    # The lease of the agent turn that submitted the job (room.store.leases.FENCE): checked in
    # the job's transaction before it runs.
    fence: Fence | None = None


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
    """The writer and the readers of one database: SQLite's file at ``path`` (the default), or
    the PostgreSQL database at ``url`` (docs/storage.md). The same jobs run on both."""

    def __init__(
        self,
        path: Path,
        *,
        url: str | None = None,
        synchronous: str = "FULL",
        max_batch: int = 512,
        readers: int = 2,
        clock: Callable[[], float] = time.time,
        effects: EffectSink = _no_effects,
        attach: Mapping[str, Path] | None = None,
        statement_timeout_ms: int = 0,
        reconnect_secs: float = 0.5,
        node: str | None = None,
        check_locks: bool = False,
    ) -> None:
        self.path = path
        self.url = url
        # Other database files the readers see under these schema names (the messages'
        # search index, room.store.search.attach_index); the writer never touches them.
        # SQLite's only: on PostgreSQL the index lives in the database itself.
        self.attach = dict(attach or {})
        self.effects = effects
        self.synchronous = synchronous
        self.max_batch = max_batch
        self.n_readers = readers
        self.clock = clock
        self.statement_timeout_ms = statement_timeout_ms
        self.reconnect_secs = reconnect_secs
        self.node = node
        # Refuse a job's seq in a project it did not declare (UndeclaredProjectError): on in
        # the tests, on both stores, so a missing ``locks=`` fails there and not as a deadlock
        # between two PostgreSQL servers (docs/storage.md, "Lock order: the project first").
        self.check_locks = check_locks
        self.stats = WriterStats()
        self.leases = LeaseCounts()  # a cluster node's lost leases and fenced writes
        self._loop: asyncio.AbstractEventLoop | None = None
        self._writes: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._reads: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._stopping = threading.Event()
        # One transaction's counts (Tx.next_id, Tx.agent_turns): writer thread only, cleared
        # at each BEGIN, since another process may write the file between two transactions.
        self._counters: dict[str, int] = {}
        self._reserved: dict[str, list[int]] = {}
        self._agent_turns: dict[int, int] = {}
        # The store served on, for /healthz and the boot report (the version read at start).
        self.info: dict[str, str] = {"backend": "sqlite", "version": sqlite3.sqlite_version}

    @property
    def backend(self) -> str:
        return "sqlite" if self.url is None else "postgresql"

    # -- connections ---------------------------------------------------------------------------

    def _connect_writer(self) -> Connection:
        if self.url is None:
            return connect(self.path, synchronous=self.synchronous, factory=WriterConnection)
        return pg.connect(
            self.url,
            application_name="room-writer",
            statement_timeout_ms=self.statement_timeout_ms,
            factory=PgWriterConnection,
        )

    def _connect_reader(self) -> Connection:
        if self.url is None:
            conn = connect(self.path, synchronous=self.synchronous)
            for name, path in self.attach.items():
                attach(conn, name, path)
            conn.execute("PRAGMA query_only = ON")
            return conn
        return pg.connect(
            self.url,
            application_name="room-reader",
            statement_timeout_ms=self.statement_timeout_ms,
            readonly=True,
        )

    def _reconnect(self, conn: Connection | None, role: str) -> Connection | None:
        """``conn`` if it still works, else a new connection (None while the database cannot
        be reached). SQLite's connections do not break; a PostgreSQL one does when the server
        restarts or the network cuts it."""
        if conn is not None and not getattr(conn, "broken", False):
            return conn
        if conn is not None:
            log.warning("the %s's connection to the database was lost; reconnecting", role)
            with _suppressed():
                conn.close()
        try:
            fresh = self._connect_writer() if role == "writer" else self._connect_reader()
        except StorageError as exc:
            log.warning("the %s cannot reach the database: %s", role, exc.message)
            return None
        log.info("the %s is connected to the database again", role)
        return fresh

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        writer = self._connect_writer()
        if isinstance(writer, pg.PgConnection):
            self.info = {"backend": "postgresql", "version": pg.server_version(writer)}
        self._threads.append(
            threading.Thread(
                target=self._write_loop, args=(writer,), name="room-writer", daemon=True
            )
        )
        for i in range(self.n_readers):
            conn = self._connect_reader()
            self._threads.append(
                threading.Thread(
                    target=self._read_loop, args=(conn,), name=f"room-reader-{i}", daemon=True
                )
            )
        for thread in self._threads:
            thread.start()

    async def close(self) -> None:
        self._stopping.set()
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
        locks: tuple[int, ...] = (),
    ) -> asyncio.Future[R]:
        """Queue a write; the future resolves after the commit that holds it (pipelining).

        ``appends=True`` lets the job leave its rows to the batch (``tx.appends``); whatever
        it reads of their tables has them written first: see :class:`Appends`.
        ``prefetch=(function, key)`` lets the batch look ``key`` up together with the other
        jobs' keys before they run (one query instead of one per job); the job must still
        look up itself whatever the batch does not know (a plain job in between makes it
        forget, and the jobs after it are prefetched again).
        ``locks``: the projects the job takes a seq (or a per-project number) in. On
        PostgreSQL the batch locks their rows at its start, every batch in project id order
        (docs/storage.md, "Several writers"). A seq of a project not declared is refused where
        the writer checks (``check_locks``: the tests), so that no job locks a project's row
        after another row (docs/storage.md, "Lock order: the project first")."""
        assert self._loop is not None, "Database.start() first"
        future: asyncio.Future[R] = self._loop.create_future()
        pending = _Pending(job, future, appends, prefetch if appends else None, locks)
        pending.fence = FENCE.get()
        self._writes.put(pending)
        return future

    def submit_then(
        self,
        job: WriteJob[R],
        on_done: Callable[[R | None, BaseException | None], None],
        *,
        appends: bool = False,
        prefetch: tuple[Prefetch, Any] | None = None,
        locks: tuple[int, ...] = (),
    ) -> None:
        """:meth:`submit` for a caller that only needs to be told: ``on_done(result, error)``
        runs on the event loop right after the commit's effects, with no future and no
        extra turn of the loop (a connection's acks: one per send)."""
        assert self._loop is not None, "Database.start() first"
        pending = _Pending(
            job, None, appends, prefetch if appends else None, locks, on_done=on_done
        )
        pending.fence = FENCE.get()
        self._writes.put(pending)

    async def write(self, job: WriteJob[R], *, locks: tuple[int, ...] = ()) -> R:
        """:meth:`submit` and wait for the commit; ``locks``: the projects the job takes a seq
        in (every one it may post a notice, an event or a message in)."""
        return await self.submit(job, locks=locks)

    async def read(self, job: ReadJob[R]) -> R:
        assert self._loop is not None, "Database.start() first"
        future: asyncio.Future[R] = self._loop.create_future()
        self._reads.put((job, future))
        return await future

    # -- threads -------------------------------------------------------------------------------

    def _write_loop(self, first_conn: Connection) -> None:
        conn: Connection | None = first_conn
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
                conn = self._reconnect(conn, "writer")
                if conn is None:
                    self._refuse(batch)
                    self._stopping.wait(self.reconnect_secs)
                else:
                    self._run_batch(conn, batch)
                if stop:
                    return
        finally:
            if conn is not None:
                conn.close()

    def _refuse(self, batch: list[_Pending[Any]]) -> None:
        """The database cannot be reached: every job of the batch fails at once with a clear
        error (its client may retry; a send's retry is made exactly-once by its txn id)."""
        error = DatabaseUnavailableError(
            "the database cannot be reached; nothing was written, try again",
        )
        for pending in batch:
            pending.result, pending.error, pending.tx = None, error, None
        self._hand_back(batch)

    def _hand_back(self, batch: list[_Pending[Any]]) -> None:
        assert self._loop is not None
        # Counted once a job's outcome is final (a batch run again job by job meets the fence
        # twice).
        self.leases.refused += sum(isinstance(p.error, LeaseLostError) for p in batch)
        try:
            self._loop.call_soon_threadsafe(_complete, batch, self.effects)
        except RuntimeError:  # the loop closed under us during shutdown
            pass

    def _run_batch(self, conn: Connection, batch: list[_Pending[Any]]) -> None:
        started = time.perf_counter()
        try:
            # Optimistic first: no savepoints, which cost two statements per job. Jobs rarely
            # fail; when one does, the whole attempt is rolled back and the batch runs again
            # with a savepoint around each job, so the failure stays that job's alone.
            # A lone job that failed has its error already; anything else (several jobs, or
            # appended rows refused at the flush) is retried job by job. On PostgreSQL a
            # deadlock between two processes' batches (a job locking a project the batch
            # did not declare) reruns the batch: one of the two gave way.
            # A deadlock met outside any job (locking the declared projects, the flush, the
            # commit) reruns the attempt too, and a job that lost one in the isolated attempt
            # runs again on its own: a lost race is never a job's error.
            for attempt in range(_RETRIES_AFTER_DEADLOCK + 1):
                done = self._attempt_again(conn, batch, isolate=False)
                if done or attempt == _RETRIES_AFTER_DEADLOCK or not _lost_a_race(batch):
                    break
                self.stats.retries += 1
            if not done and (len(batch) > 1 or batch[0].error is None):
                self.stats.retries += 1
                self._attempt_again(conn, batch, isolate=True)
                losers = [p for p in batch if isinstance(p.error, _RACES)]
                for _ in range(_RETRIES_AFTER_DEADLOCK):
                    if not losers:
                        break
                    self.stats.retries += 1
                    self._attempt_again(conn, losers, isolate=True)
                    losers = [p for p in losers if isinstance(p.error, _RACES)]
        except Exception as exc:  # the driver's, or anything else: the writer must live on
            self._forget_counts()
            broken = bool(getattr(conn, "broken", False))
            if broken:  # said once, without a trace: the reconnection follows
                log.warning("group commit failed: the connection to the database was lost")
            else:
                log.exception("group commit failed")
            if not broken:
                try:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                except Exception:
                    log.exception("rolling back the failed group commit failed too")
            error: StorageError
            if broken:
                # Whether the COMMIT reached the server before the connection went is unknown:
                # a send retried with its txn id is acknowledged once either way.
                error = DatabaseUnavailableError(
                    "the connection to the database was lost; the write may not have been "
                    "saved, try again",
                )
            else:
                error = StorageError(f"the database refused the write: {exc}")
            for pending in batch:
                pending.result, pending.error, pending.tx = None, error, None
        self.stats.observe(len(batch), time.perf_counter() - started)
        self._hand_back(batch)

    def _attempt_again(self, conn: Connection, batch: list[_Pending[Any]], isolate: bool) -> bool:
        """:meth:`_attempt`, run again when it met a deadlock or a serialization failure
        outside any job (another process's transaction won): rolled back, nothing of it
        done."""
        for attempt in range(_RETRIES_AFTER_DEADLOCK + 1):
            try:
                return self._attempt(conn, batch, isolate)
            except _RACES:
                if attempt == _RETRIES_AFTER_DEADLOCK or getattr(conn, "broken", False):
                    raise
                self._forget_counts()
                conn.execute("ROLLBACK")
                self.stats.retries += 1
        raise AssertionError("unreachable")

    def _attempt(self, conn: Connection, batch: list[_Pending[Any]], isolate: bool) -> bool:
        """Run the batch in one transaction and commit; False if a job failed (not isolated:
        then nothing was committed and the caller retries isolated).

        Isolated, each job runs inside its own savepoint and writes its own rows: a failing
        multi-row INSERT could not say whose row it was."""
        appends = None if isolate else Appends()
        conn.execute("BEGIN IMMEDIATE")
        self._forget_counts()  # counted before this transaction held the lock: maybe stale
        if dialect_for(conn).name == "postgresql":
            self._lock_projects(conn, batch)
        if appends is not None and not self._prefetch(conn, batch, appends):
            return False
        guarded = conn if isinstance(conn, _Guarded) else None
        if guarded is not None:
            guarded.appends = appends
        try:
            return self._run_jobs(conn, batch, appends, isolate)
        finally:
            if guarded is not None:
                guarded.appends = None

    @staticmethod
    def _lock_projects(conn: Connection, batch: list[_Pending[Any]]) -> None:
        """Lock the rows of the projects the batch's jobs declared, in id order: a project's
        seq is then read and taken by one transaction at a time across every process.

        ``FOR NO KEY UPDATE``, not ``FOR UPDATE``: two batches still take a project one at a
        time, but the foreign-key checks (``FOR KEY SHARE``) of the rows other transactions
        insert naming the project — a turn, an event, a delivery — pass it; with ``FOR UPDATE``
        a turn opening on another node that held the project's brake row and then inserted its
        turn deadlocked with a send waiting here for that brake row (docs/storage.md,
        "Several writers"). No project row is ever deleted or has its id changed."""
        ids = sorted({project_id for pending in batch for project_id in pending.locks})
        for part in chunks(ids):
            marks = ", ".join("?" * len(part))
            conn.execute(
                f"SELECT id FROM projects WHERE id IN ({marks}) ORDER BY id FOR NO KEY UPDATE",
                part,
            ).fetchall()

    def _run_jobs(
        self,
        conn: Connection,
        batch: list[_Pending[Any]],
        appends: Appends | None,
        isolate: bool,
    ) -> bool:
        forgotten = False  # the facts were dropped for a plain job: prefetch again
        checked = conn if self.check_locks and isinstance(conn, _Guarded) else None
        for at, pending in enumerate(batch):
            if appends is not None:
                if not pending.appends and appends:
                    if not self._flush(conn, appends):
                        return False
                    appends.forget()
                    forgotten = True
                elif pending.appends and forgotten:
                    if not self._prefetch(conn, batch[at:], appends):
                        return False
                    forgotten = False
            pending.tx = Tx(
                now=self.clock(),
                counters=self._counters,
                reserved=self._reserved,
                agent_turns=self._agent_turns,
                appends=appends if pending.appends else None,
                node=self.node,
            )
            pending.result, pending.error = None, None
            if isolate:
                conn.execute("SAVEPOINT job")
            if checked is not None:
                checked.declared = Declared(pending.locks, job_name(pending.job))
            try:
                if pending.fence is not None:  # a turn's write: refused once its lease is lost
                    check_fence(conn, pending.fence)
                # A job is typed on sqlite3's connection (most of the store still says so); on
                # PostgreSQL it gets a PgConnection, which has the part of it the store uses.
                pending.result = pending.job(cast(sqlite3.Connection, conn), pending.tx)
            except BaseException as exc:  # one job's failure must not sink the batch
                pending.error, pending.tx = exc, None
                self._forget_counts()
                if getattr(conn, "broken", False):
                    raise  # nothing more can run on this connection: the batch fails whole
                if not isolate:
                    conn.execute("ROLLBACK")
                    return False
                conn.execute("ROLLBACK TO job")
            finally:
                if checked is not None:
                    checked.declared = None
            if isolate:
                conn.execute("RELEASE job")
        if appends and not self._flush(conn, appends):
            return False
        conn.execute("COMMIT")
        return True

    def _forget_counts(self) -> None:
        self._counters.clear()
        self._reserved.clear()
        self._agent_turns.clear()

    def _prefetch(self, conn: Connection, batch: list[_Pending[Any]], appends: Appends) -> bool:
        keys: dict[Prefetch, list[Any]] = {}
        for pending in batch:
            if pending.prefetch is not None:
                function, key = pending.prefetch
                keys.setdefault(function, []).append(key)
        try:
            for function, found in keys.items():
                function(cast(sqlite3.Connection, conn), appends, found)
        except Exception as exc:  # not only sqlite3's: whatever it is, the jobs alone meet it
            if getattr(conn, "broken", False) or isinstance(exc, _RACES):
                raise  # a lost race: the attempt runs again (_attempt_again)
            log.warning("a batch's prefetch failed; retrying job by job", exc_info=True)
            conn.execute("ROLLBACK")
            return False
        return True

    def _flush(self, conn: Connection, appends: Appends) -> bool:
        try:
            appends.flush(conn)
        except Exception as exc:
            if getattr(conn, "broken", False) or isinstance(exc, _RACES):
                raise  # a lost race: the attempt runs again (_attempt_again)
            # Whose row broke a constraint (or would not bind) is unknown here: the batch runs
            # again isolated, where each job meets its own error.
            log.warning("a batch's appended rows were refused; retrying job by job", exc_info=True)
            self._forget_counts()
            conn.execute("ROLLBACK")
            return False
        return True

    def _read_loop(self, first_conn: Connection) -> None:
        conn: Connection | None = first_conn
        try:
            while True:
                item = self._reads.get()
                if item is _STOP:
                    return
                job, future = item
                result: Any = None
                error: BaseException | None = None
                conn = self._reconnect(conn, "reader")
                if conn is None:
                    error = DatabaseUnavailableError(
                        "the database cannot be reached; try again",
                    )
                else:
                    result, error = self._read_once(conn, job)
                assert self._loop is not None
                try:
                    self._loop.call_soon_threadsafe(_resolve, future, result, error)
                except RuntimeError:
                    pass
        finally:
            if conn is not None:
                conn.close()

    @staticmethod
    def _read_once(conn: Connection, job: ReadJob[Any]) -> tuple[Any, BaseException | None]:
        try:
            # A read job sees one snapshot, as SQLite's read transaction does (PostgreSQL's
            # default, READ COMMITTED, takes a new one per statement).
            snapshot = dialect_for(conn).name == "postgresql"
            conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ" if snapshot else "BEGIN")
            try:
                return job(cast(sqlite3.Connection, conn)), None
            finally:
                if getattr(conn, "broken", False):
                    pass  # the server is gone: so is the transaction
                elif dialect_for(conn).name == "postgresql" and conn.in_transaction:
                    conn.execute("ROLLBACK")  # a failed read aborted it: COMMIT would fail
                else:
                    conn.execute("COMMIT")
        except psycopg.OperationalError as exc:
            if getattr(conn, "broken", False):
                return None, DatabaseUnavailableError(
                    "the connection to the database was lost; try again",
                )
            return None, exc
        except BaseException as exc:
            return None, exc


# How often a batch that lost a deadlock to another process's is run again before its jobs
# are retried one by one (each then meets its own error).
_RETRIES_AFTER_DEADLOCK = 3


# What another process's transaction winning looks like: running again is the cure.
_RACES = (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure)


def _lost_a_race(batch: list[_Pending[Any]]) -> bool:
    """Whether a job of the failed attempt met a deadlock or a serialization failure (another
    process's transaction won): running the batch again is the cure."""
    return any(isinstance(p.error, _RACES) for p in batch)


@contextlib.contextmanager
def _suppressed() -> Iterator[None]:
    try:
        yield
    except Exception:
        log.debug("ignored while closing a lost connection", exc_info=True)


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
    conn: C,
    job: Callable[[C, Tx], R],
    now: float | None = None,
    effects: EffectSink = _no_effects,
) -> R:
    """Run one write job synchronously in its own transaction (CLI, start-up, tests); its
    effects go to ``effects`` after the commit (nobody is listening before the server runs).
    On either store: ``conn`` is any :class:`~room.store.dialect.Connection`, and ``job``
    takes the same kind."""
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
