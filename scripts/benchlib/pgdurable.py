"""Durable sends on PostgreSQL: acked messages/s of ``room serve --database`` ÷ raw psycopg.

Issue 26's figure, measured as :mod:`benchlib.durable` measures SQLite's: a fresh server (pinned
to the server core) serving a fresh database of a private PostgreSQL cluster that commits
durably (``fsync``, ``synchronous_commit`` and ``full_page_writes`` on:
:data:`benchlib.pgstore.DURABLE_SETTINGS`; with ``$ROOM_BENCH_PG_URL`` that database's own
settings, reported in the rows), ``SENDERS`` WebSocket connections of the owner sending
open-loop at ``durable.OFFERED_PER_SEC`` to the demo project (lead paused: each send is its
message, one ``held`` delivery row and its event), acked msg/s in the window and ack p50/p99.

Reference, in the same run on another fresh database of the same cluster: raw psycopg writing
the same rows (the project's ``last_seq``, message rows with their client id, digest and frame,
the delivery rows, the event rows; ids from the tables' sequences, as ``Tx.next_id`` takes them)
``BATCH`` messages per transaction (sqliteref's batch), each table's rows in one ``executemany``
inside one pipeline, as the server's ``Appends.flush`` writes them; its client on the server's
core. The server also runs its search indexer on the database (asynchronously, not in the send's
transaction); the reference writes no index rows. Beside it: the SQLite durable case of
:mod:`benchlib.durable` (10 senders, the same offered load) ÷ the raw sqlite3 batched reference.

The cluster is started from this process and runs on the generator's core (as in
:mod:`benchlib.pgstore`): during the server's case its backends share that core with the
senders; during the reference, with nothing. (Started on the server's core instead, beside the
server, the ratio was lower: 0.25 against 0.32, docs/storage.md.)
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import random
import shutil
import time
from pathlib import Path

from benchlib import durable
from benchlib.cores import GENERATOR_CPU, SERVER_CPU
from benchlib.corpus import PROJECT_ID, filler, make_data_folder
from benchlib.pgstore import databases
from benchlib.serverproc import RoomServer
from benchlib.sqliteref import BATCH, _frame
from benchlib.sqliteref import measure as measure_sqlite
from benchlib.stats import Row
from room.store import pg

WORKLOAD = "postgresql durable sends"
SENDERS = 10
TARGET_RATIO = 0.5


# Acknowledged at least this share of the offered rate: the server kept up with the offer.
KEPT_UP = 0.98


def _durability(url: str) -> str:
    conn = pg.connect(url)
    try:
        names = ("fsync", "synchronous_commit", "full_page_writes")
        return ", ".join(f"{n}={conn.execute(f'SHOW {n}').fetchone()[0]}" for n in names)
    finally:
        conn.close()


def measure_reference(url: str, workdir: Path, seconds: float) -> float:
    """Messages/s: the durable sends' rows through raw psycopg, ``BATCH`` per transaction."""
    owner, lead = make_data_folder(workdir / "pg-reference-data", database_url=url)
    tail = filler(random.Random(3), 255).rstrip(" ,")
    conn = pg.connect(url, application_name="bench-reference")
    raw = conn.raw
    previous = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {SERVER_CPU})
    try:
        done = 0
        t0 = time.perf_counter()
        while time.perf_counter() < t0 + seconds:
            now = time.time()
            with raw.transaction():
                (last,) = raw.execute(
                    "UPDATE projects SET last_seq = last_seq + %s, updated_at = %s"
                    " WHERE id = %s RETURNING last_seq",
                    (BATCH, now, PROJECT_ID),
                ).fetchone() or (0,)
                ids = [row[0] for row in raw.execute(
                    "SELECT nextval(pg_get_serial_sequence('messages', 'id'))"
                    " FROM generate_series(1, %s)", (BATCH,)
                ).fetchall()]  # fmt: skip
                messages, deliveries, events = [], [], []
                for i, message_id in enumerate(ids):
                    seq = last - BATCH + 1 + i
                    txn = f"ref{message_id}"
                    body = f"probe {time.monotonic_ns()} {time.time_ns()} {tail}"
                    digest = hashlib.blake2b(body.encode(), digest_size=16).hexdigest()
                    frame = _frame(message_id, seq, owner, body, txn)
                    messages.append(
                        (message_id, PROJECT_ID, seq, owner, body, txn, digest, frame, now)
                    )
                    deliveries.append((PROJECT_ID, message_id, lead, now, now))
                    events.append((PROJECT_ID, seq, message_id, now))
                with raw.pipeline(), raw.cursor() as cur:
                    cur.executemany(
                        "INSERT INTO messages (id, project_id, seq, author_id, kind, body,"
                        " client_txn_id, txn_digest, frame, created_at)"
                        " VALUES (%s, %s, %s, %s, 'chat', %s, %s, %s, %s, %s)",
                        messages,
                    )
                    cur.executemany(
                        "INSERT INTO deliveries (project_id, message_id, recipient_id,"
                        " state, created_at, updated_at) VALUES (%s, %s, %s, 'held', %s, %s)",
                        deliveries,
                    )
                    cur.executemany(
                        "INSERT INTO events (project_id, seq, kind, message_id, created_at)"
                        " VALUES (%s, %s, 'message', %s, %s)",
                        events,
                    )
            done += BATCH
        return done / (time.perf_counter() - t0)
    finally:
        os.sched_setaffinity(0, previous or {GENERATOR_CPU})
        conn.close()


def _server_case(
    workdir: Path, name: str, seconds: float, warmup: float, url: str = ""
) -> dict[str, float]:
    data = workdir / name
    shutil.rmtree(data, ignore_errors=True)
    server = RoomServer(data, database_url=url).start()
    try:
        figures, _ = asyncio.run(
            durable._case(server, SENDERS, durable.OFFERED_PER_SEC, seconds, warmup)
        )
    finally:
        server.stop()
        shutil.rmtree(data, ignore_errors=True)
    return figures


def run(workdir: Path, *, quick: bool) -> list[Row]:
    seconds, warmup = (3.0, 1.0) if quick else (10.0, 2.0)
    ref_secs = 2.0 if quick else 5.0
    with databases(durable=True) as fresh:
        url = fresh()
        settings = _durability(url)
        ref = measure_reference(url, workdir, ref_secs)
        fig = _server_case(workdir, "pg-durable", seconds, warmup, fresh())
    lite_ref = measure_sqlite(1.0 if quick else 3.0, workdir)
    lite = _server_case(workdir, "pg-durable-sqlite", seconds, warmup)
    case = f"{SENDERS} senders, {durable.OFFERED_PER_SEC:,}/s offered"
    rows: list[Row] = []
    for store, f, reference, label in (
        ("PostgreSQL", fig, ref, f"raw psycopg, {BATCH}/txn, {settings}"),
        ("SQLite", lite, lite_ref["batched"], f"raw sqlite3, {BATCH}/txn, synchronous=FULL"),
    ):
        c = f"{store}: {case}"
        # A server that acknowledged the whole offer was not at its capacity: its ratio is the
        # offer's to the reference's, and no target is read from it.
        kept_up = f["acked_per_sec"] >= KEPT_UP * durable.OFFERED_PER_SEC
        rows += [
            Row(WORKLOAD, c, "acked msg/s", f["acked_per_sec"], reference, label + ": {ref:,.0f}/s"),
            Row(WORKLOAD, c, "acked ÷ raw batched", f["acked_per_sec"] / reference
                if reference else None, None,
                "kept up with the whole offer: the offer's ratio, not a capacity" if kept_up
                else "same rows, same batch size",
                "" if kept_up else f"≥ {TARGET_RATIO}" if store == "PostgreSQL" else "≥ 0.85"),
            Row(WORKLOAD, c, "ack latency p50 ms", f["p50_ms"]),
            Row(WORKLOAD, c, "ack latency p99 ms", f["p99_ms"]),
            Row(WORKLOAD, c, "offered msg/s sent", f["sent_per_sec"], None,
                f"tick lag p99 {f['lag_p99_ms']:.2f} ms"),
            Row(WORKLOAD, c, "errors", f["errors"], target="≤ 0"),
            Row(WORKLOAD, c, "writer avg batch (jobs)", f["avg_batch"], None,
                f"{f['batches_per_sec']:,.0f} commits/s; largest {f['largest_batch']:.0f}"),
            Row(WORKLOAD, c, "server CPU µs per acked msg", f["server_cpu_us_per_ack"]),
        ]  # fmt: skip
    return rows
