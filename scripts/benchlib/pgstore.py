"""PostgreSQL beside SQLite, in the same run on the same data: the history page and search.

One corpus serves both, at ``--pg-messages`` messages (default 100,000; the issue's figure is
1,000,000, ``--pg-messages 1000000``) and 1 % as many memory records: built by bulk inserts
straight into each store, rows exactly as the server writes them and the search index made by
the store's own functions (:mod:`benchlib.bulkcorpus`: ``executemany`` in one transaction and
the indexer on SQLite, cached in ``.bench-cache``; ``COPY`` of the same rows and of the store's
own tokens into a fresh database of a private PostgreSQL cluster each run), minutes where
building it through the server took hours. The load's time is a row, the two stores' counts
and a sample of frames are checked equal. Then, on the same random cursors and the same query
words, the store's own functions run in-process on one connection of each store, as the
server's reader threads would: ``room.store.messages.history`` (+ the ``/ws`` page string) and
``room.store.search.search`` (parse, the ranked query, authors, snippets of the best 20).

The cluster is the tests' (tests/support/postgres.py: ``initdb`` in /tmp, 127.0.0.1, ``fsync``
and ``synchronous_commit`` off — these are reads), on the generator's core like the SQLite
reference, or the database at ``$ROOM_BENCH_PG_URL`` (emptied first: it must be one made for the bench). The
durable acked sends/s on PostgreSQL ÷ a raw psycopg reference is :mod:`benchlib.pgdurable`
(``--only pgdurable``), on a cluster of :func:`databases` with ``durable=True``.
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from benchlib import bulkcorpus, history, search
from benchlib.corpus import PROJECT_ID
from benchlib.stats import Row, quantiles
from room.store import messages as messages_store
from room.store import pg, search_pg
from room.store import search as search_store
from room.store.dialect import POSTGRESQL, Connection
from room.store.migrate import connect

WORKLOAD = "postgresql"
DEFAULT_MESSAGES = 100_000
EXPLAINED = 200  # statements timed inside PostgreSQL as well, per case
URL_ENV = "ROOM_BENCH_PG_URL"


# A cluster that commits durably (for the durable sends): the tests' settings with fsync,
# synchronous_commit and full_page_writes on, as PostgreSQL ships them.
DURABLE_SETTINGS = (
    "fsync=on",
    "synchronous_commit=on",
    "full_page_writes=on",
    "max_connections=50",
    "shared_buffers=128MB",
)


# The reads' cluster: the tests' settings (``fsync`` off: nothing here is a write to keep) with
# the buffers an operator gives a database of this size (PostgreSQL's guidance is a quarter of
# the memory; the tests' 32 MB hold none of a 1M-message table's hot pages).
READ_SETTINGS = (
    "fsync=off",
    "synchronous_commit=off",
    "full_page_writes=off",
    "max_connections=50",
    "shared_buffers=1GB",
)


@contextmanager
def databases(
    *, durable: bool = False, settings: tuple[str, ...] | None = None
) -> Iterator[Callable[[], str]]:
    """A maker of fresh empty databases: the private cluster's, or ``$ROOM_BENCH_PG_URL``.

    ``durable``: the private cluster runs with :data:`DURABLE_SETTINGS` instead of the tests'
    (``$ROOM_BENCH_PG_URL``'s settings are its own: the durable workload reports them)."""
    url = os.environ.get(URL_ENV)
    if url:

        def reuse() -> str:
            conn = pg.connect(url)
            try:
                conn.execute("DROP SCHEMA public CASCADE")
                conn.execute("CREATE SCHEMA public")
            finally:
                conn.close()
            return url

        yield reuse
        return
    _without_pytest()
    from tests.support import postgres
    from tests.support.postgres import PostgresCluster, find_bin_dir

    # Started from this process, the cluster inherits its core (the generator's): a query and
    # its backend take turns on one core, as the in-process SQLite reference runs there too.
    # (Pinned to the other core, each of a search's round trips waited for a core the
    # machine's other processes were using: 60 ms medians for 5 ms of work.)
    # The cluster reads the module's settings when it launches: swapped for this cluster only.
    saved = postgres.SERVER_SETTINGS
    if durable:
        postgres.SERVER_SETTINGS = DURABLE_SETTINGS
    elif settings is not None:
        postgres.SERVER_SETTINGS = settings
    try:
        cluster = PostgresCluster(find_bin_dir()).start()
    finally:
        postgres.SERVER_SETTINGS = saved
    try:
        yield lambda: cluster.dsn(cluster.create_database())
    finally:
        cluster.stop()


def _without_pytest() -> None:
    """The cluster is the tests' (tests/support/postgres.py), a module that also declares two
    pytest fixtures; the bench's venv has no pytest (no dev extras), so a stand-in whose
    ``fixture`` returns the function as it is lets the module import."""
    import importlib.util
    import sys
    import types

    # In sys.modules already: the stand-in of an earlier run (``--runs``), whose missing
    # ``__spec__`` makes find_spec raise.
    if "pytest" in sys.modules or importlib.util.find_spec("pytest") is not None:
        return
    stand_in = types.ModuleType("pytest")

    def fixture(*args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]
        return lambda fn: fn

    stand_in.fixture = fixture  # type: ignore[attr-defined]
    sys.modules["pytest"] = stand_in


def _history_us(conn: Connection, head: int, samples: int, seed: int) -> list[float]:
    rng = random.Random(seed)
    out = []
    for _ in range(samples):
        before = rng.randint(history.PAGE + 1, head)
        conn.execute("BEGIN")
        t0 = time.perf_counter_ns()
        frames, has_more = messages_store.history(conn, PROJECT_ID, before, history.PAGE)
        text = history._page_text(frames, has_more, before)
        out.append((time.perf_counter_ns() - t0) / 1000)
        conn.execute("COMMIT")
        assert len(frames) == history.PAGE and text
    return out


def _executed_ms(conn: pg.PgConnection, sql: str, params: dict[str, Any]) -> float:
    """The statement's execution time inside PostgreSQL (``EXPLAIN (ANALYZE, TIMING OFF)``'s
    "Execution Time"): what the query costs apart from the round trip, psycopg's decoding of
    the rows and the Python around it, and most of the machine's scheduling."""
    row = conn.raw.execute(
        "EXPLAIN (ANALYZE, TIMING OFF, FORMAT JSON) " + POSTGRESQL.adapt(sql), params, prepare=False
    ).fetchone()
    assert row is not None
    return float(row[0][0]["Execution Time"])


def _history_executed_ms(conn: pg.PgConnection, head: int, samples: int, seed: int) -> list[float]:
    """:func:`_history_us`'s cursors (same ``seed``), the history statement's execution alone."""
    rng = random.Random(seed)
    sql = messages_store.HISTORY_SQL
    return [
        _executed_ms(conn, sql, {"p": PROJECT_ID, "before": rng.randint(history.PAGE + 1, head),
                                 "limit": history.PAGE + 1})
        for _ in range(samples)
    ]  # fmt: skip


def _search_executed_ms(conn: pg.PgConnection, words: list[str], samples: int) -> list[float]:
    """The ranked messages' statement of each search (:func:`search_pg.best_messages`, caught
    as the store runs it), its execution alone."""
    caught: list[tuple[str, dict[str, Any]]] = []
    run = search_pg._planned_each_time

    def catch(conn: Connection, sql: str, params: dict[str, Any]) -> list[Any]:
        caught.append((sql, params))
        return run(conn, sql, params)

    out = []
    search_pg._planned_each_time = catch
    try:
        for i in range(samples):
            caught.clear()
            search_store.search(conn, PROJECT_ID, words[i % len(words)], kinds=["message"])
            out.append(_executed_ms(conn, *caught[0]))
    finally:
        search_pg._planned_each_time = run
    return out


def _search_ms(conn: Connection, words: list[str], samples: int) -> tuple[list[float], int]:
    out, found = [], 0
    for i in range(samples):
        conn.execute("BEGIN")
        t0 = time.perf_counter_ns()
        got = search_store.search(conn, PROJECT_ID, words[i % len(words)], limit=search.LIMIT)
        out.append((time.perf_counter_ns() - t0) / 1e6)
        conn.execute("COMMIT")
        found += len(got["results"])
    return out, found


def run(workdir: Path, cache: Path, *, quick: bool, messages: int | None = None) -> list[Row]:
    count = messages or (20_000 if quick else DEFAULT_MESSAGES)
    records = max(100, count // 100)
    samples = 500 if quick else 2000
    size = f"{count:,} messages"
    rows: list[Row] = []
    data, built = bulkcorpus.ensure_sqlite(cache, count, records)
    if built:
        rows.append(
            Row(WORKLOAD, f"SQLite corpus built, {size} + {records:,} records", "seconds",
                built["rows_secs"] + built["index_secs"], None,
                f"rows {built['rows_secs']:.0f} s (one transaction), the indexer"
                f" {built['index_secs']:.0f} s; cached for later runs"),
        )  # fmt: skip
    with databases(settings=READ_SETTINGS) as fresh:
        url = fresh()
        loaded = bulkcorpus.load_postgresql(data, url)
        same = bulkcorpus.check_same(data, url)
        rows.append(
            Row(WORKLOAD, f"PostgreSQL corpus loaded (COPY), {size} + {records:,} records",
                "seconds", loaded["secs"], None,
                f"tokens {loaded['tokens_secs']:.0f} s, GIN index {loaded['gin_secs']:.0f} s,"
                f" VACUUM ANALYZE {loaded['vacuum_secs']:.0f} s; {same['events']:,} events,"
                " counts and 50 frames checked equal"),
        )  # fmt: skip
        head = same["head"]
        lite = connect(data / "room.sqlite")
        search_store.attach_index(lite, data / "room.sqlite")
        pgc = pg.connect(url)
        try:
            bands = search._pick_words(lite, count, random.Random(5))  # (writes temp tables)
            lite.execute("PRAGMA query_only = ON")
            # -- history ----------------------------------------------------------------------
            for conn in (lite, pgc):
                _history_us(conn, head, 200, 1)  # warm caches and statements
            s = _history_us(lite, head, samples, 2)
            p = _history_us(pgc, head, samples, 2)
            s50, s99 = quantiles(s, (50, 99))
            p50, p99 = quantiles(p, (50, 99))
            case = f"history page of {history.PAGE}, random cursor, {size}"
            rows += [
                Row(WORKLOAD, case, "PostgreSQL server-side p50 ms", p50 / 1000, s50 / 1000,
                    "SQLite: {ref:.2f} ms"),
                Row(WORKLOAD, case, "PostgreSQL server-side p99 ms", p99 / 1000, s99 / 1000,
                    "SQLite: {ref:.2f} ms", "≤ 2", note=f"{samples} pages each, same cursors"),
            ]  # fmt: skip
            e50, e99 = quantiles(_history_executed_ms(pgc, head, EXPLAINED, 2), (50, 99))
            rows.append(
                Row(WORKLOAD, case, "PostgreSQL execution alone p50 / p99 ms", e50, None,
                    "", note=f"p99 {e99:.3f} ms; EXPLAIN ANALYZE of the first {EXPLAINED}"
                    " cursors: the rest of the server-side time is the round trip, decoding,"
                    " Python and the machine", extra={"p99_ms": e99}),
            )  # fmt: skip

            # -- search -----------------------------------------------------------------------
            for label, words in bands.items():
                case = f"search, {label}, {size} + {records:,} records"
                if not words:
                    rows.append(Row(WORKLOAD, case, "p99 ms", None, note="no word in this band"))
                    continue
                for conn in (lite, pgc):
                    _search_ms(conn, words, 50)
                s_ms, s_found = _search_ms(lite, words, samples)
                p_ms, p_found = _search_ms(pgc, words, samples)
                s50, s99 = quantiles(s_ms, (50, 99))
                p50, p99 = quantiles(p_ms, (50, 99))
                target = "≤ 20" if label == search.TARGET_BAND else ""
                rows += [
                    Row(WORKLOAD, case, "PostgreSQL p50 ms", p50, s50, "SQLite FTS5: {ref:.1f} ms"),
                    Row(WORKLOAD, case, "PostgreSQL p99 ms", p99, s99, "SQLite FTS5: {ref:.1f} ms",
                        target, note=f"e.g. {words[0]!r}; {samples} queries, {len(words)} words"),
                    Row(WORKLOAD, case, "results PostgreSQL ÷ SQLite", p_found / s_found
                        if s_found else None, None, "the same queries: 1.00 when both find as many"),
                ]  # fmt: skip
                e50, e99 = quantiles(_search_executed_ms(pgc, words, EXPLAINED), (50, 99))
                rows.append(
                    Row(WORKLOAD, case, "PostgreSQL ranked messages' execution p50 ms", e50,
                        None, "", note=f"p99 {e99:.2f} ms; EXPLAIN ANALYZE of that statement"
                        f" of {EXPLAINED} of the searches (the others: records, authors, the"
                        " queue check, snippets)", extra={"p99_ms": e99}),
                )  # fmt: skip
        finally:
            lite.close()
            pgc.close()
    return rows
