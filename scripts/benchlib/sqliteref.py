"""Reference for durable sends: the same rows through raw ``sqlite3``, on the server's core.

A scratch data folder made by the server's own migrations and seeding. Per message, what the
server writes for one of the durable workload's sends (a ~300-byte ``probe`` body from
:class:`benchlib.opensend.OpenLoopSender`, no mention, the demo project's lead paused): the
project's ``last_seq`` update, a message row with its client id, content digest and ~900-byte
``frame``, one delivery row to the lead agent in state ``held``, an event row and, with
``search_index`` (the server's default ``search_index_messages``), the message's row in the
full-text index, with ``synchronous=FULL`` in WAL mode. Measured two ways for a fixed time each:
one transaction (one fsync) per message, and ``BATCH`` messages per transaction. The thread is
moved to the server's core for the measurement, so it competes with nothing; besides messages/s
the CPU time per message is reported (``*_cpu_us``), the figure to hold the server's CPU per
acknowledged send against on a shared machine.
"""

from __future__ import annotations

import hashlib
import os
import random
import tempfile
import time
from pathlib import Path

from benchlib.cores import GENERATOR_CPU, SERVER_CPU
from benchlib.corpus import PROJECT_ID, filler, make_data_folder
from room.rules.searchtext import index_texts
from room.store.migrate import connect

BATCH = 100
FTS_INSERT = "INSERT INTO search_fts (rowid, body, uni) VALUES (?, ?, ?)"
_FRAME_TAIL = '"reply_to":null,"reply_excerpt":null,"mentions":[],'


def _frame(message_id: int, seq: int, author: int, body: str, txn: str) -> str:
    return (
        f'{{"id":{message_id},"project_id":{PROJECT_ID},"seq":{seq},"author_id":{author},'
        f'"kind":"chat","body":"{body}","html":"<p>{body}</p>\\n",{_FRAME_TAIL}"client_txn_id":'
        f'"{txn}","created_at":"2026-01-01T00:00:00.000Z","edited_at":null,"deleted":false}}'
    )


def measure(seconds: float, workdir: Path, *, search_index: bool = True) -> dict[str, float]:
    """Messages/s committed with one transaction per message, and with ``BATCH`` per one, and
    the CPU microseconds per message of each (``per_message_cpu_us``, ``batched_cpu_us``)."""
    # The sender's body: "probe <monotonic ns> <realtime ns> " and the same tail of prose.
    tail = filler(random.Random(3), 255).rstrip(" ,")
    previous = os.sched_getaffinity(0)
    results: dict[str, float] = {}
    try:
        for name, per_txn in (("per_message", 1), ("batched", BATCH)):
            # Each on a fresh folder: the thousands of one-message commits leave the full-text
            # index in small segments that the next mode would otherwise pay to merge.
            with tempfile.TemporaryDirectory(prefix="bench-sqlite-", dir=workdir) as tmp:
                rate, cpu_us = _run(Path(tmp) / "data", seconds, per_txn, tail, search_index)
            results[name], results[f"{name}_cpu_us"] = rate, cpu_us
    finally:
        os.sched_setaffinity(0, previous or {GENERATOR_CPU})
    return results


def _run(
    data: Path, seconds: float, per_txn: int, tail: str, search_index: bool
) -> tuple[float, float]:
    """Messages/s and CPU µs per message, ``per_txn`` messages per transaction."""
    owner, lead = make_data_folder(data)
    conn = connect(data / "room.sqlite", synchronous="FULL")
    os.sched_setaffinity(0, {SERVER_CPU})
    try:
        first = conn.execute("SELECT coalesce(max(id), 0) + 1 FROM messages").fetchone()[0]
        next_id = [int(first)]
        # The index rows are written last in each transaction: a statement that may abort (an
        # INSERT checking foreign keys) opens a savepoint, which makes FTS5 write out what it
        # has buffered, so interleaved they would cost the index a segment per message.
        indexed: list[tuple[int, str, str]] = []

        def one(now: float) -> None:
            seq = conn.execute(
                "UPDATE projects SET last_seq = last_seq + 1, updated_at = ? WHERE id = ?"
                " RETURNING last_seq",
                (now, PROJECT_ID),
            ).fetchone()[0]
            message_id = next_id[0]
            next_id[0] += 1
            txn = f"ref{message_id}"
            body = f"probe {time.monotonic_ns()} {time.time_ns()} {tail}"
            digest = hashlib.blake2b(body.encode(), digest_size=16).hexdigest()
            conn.execute(
                "INSERT INTO messages (id, project_id, seq, author_id, kind, body,"
                " client_txn_id, txn_digest, frame, created_at)"
                " VALUES (?, ?, ?, ?, 'chat', ?, ?, ?, ?, ?)",
                (message_id, PROJECT_ID, seq, owner, body, txn, digest,
                 _frame(message_id, seq, owner, body, txn), now),
            )  # fmt: skip
            conn.execute(
                "INSERT INTO deliveries (project_id, message_id, recipient_id, state,"
                " created_at, updated_at) VALUES (?, ?, ?, 'held', ?, ?)",
                (PROJECT_ID, message_id, lead, now, now),
            )
            conn.execute(
                "INSERT INTO events (project_id, seq, kind, message_id, created_at)"
                " VALUES (?, ?, 'message', ?, ?)",
                (PROJECT_ID, seq, message_id, now),
            )
            if search_index:
                indexed.append((message_id, *index_texts(body)))

        done = 0
        t0, cpu0 = time.perf_counter(), time.process_time()
        deadline = t0 + seconds
        while time.perf_counter() < deadline:
            conn.execute("BEGIN IMMEDIATE")
            for _ in range(per_txn):
                one(time.time())
            if indexed:
                conn.executemany(FTS_INSERT, indexed)
                indexed.clear()
            conn.execute("COMMIT")
            done += per_txn
        return done / (time.perf_counter() - t0), 1e6 * (time.process_time() - cpu0) / done
    finally:
        conn.close()
