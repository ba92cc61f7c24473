"""Reference for durable sends: the same rows through raw ``sqlite3``, on the server's core.

A scratch data folder made by the server's own migrations and seeding. Per message: the
project's ``last_seq`` update, a message row with a ~700-byte ``frame``, one delivery row (to the
lead agent) and an event row, with ``synchronous=FULL`` in WAL mode. Measured two ways for a fixed
time each: one transaction (one fsync) per message, and ``BATCH`` messages per transaction. The
thread is moved to the server's core for the measurement, so it competes with nothing.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from benchlib.corpus import PROJECT_ID, filler, make_data_folder
from benchlib.serverproc import GENERATOR_CPU, SERVER_CPU
from room.store.migrate import connect

BATCH = 100
_FRAME_TAIL = '"html":"<p>{body}</p>\\n","reply_to":null,"reply_excerpt":null,"mentions":[],'


def _frame(message_id: int, seq: int, author: int, body: str, txn: str) -> str:
    return (
        f'{{"id":{message_id},"project_id":{PROJECT_ID},"seq":{seq},"author_id":{author},'
        f'"kind":"chat","body":"{body}",' + _FRAME_TAIL.format(body=body) + f'"client_txn_id":'
        f'"{txn}","created_at":"2026-01-01T00:00:00.000Z","edited_at":null,"deleted":false}}'
    )


def measure(seconds: float, workdir: Path) -> dict[str, float]:
    """Messages/s committed with one transaction per message, and with ``BATCH`` per one."""
    import random

    body = filler(random.Random(5), 300)
    previous = os.sched_getaffinity(0)
    with tempfile.TemporaryDirectory(prefix="bench-sqlite-", dir=workdir) as tmp:
        data = Path(tmp) / "data"
        owner, lead = make_data_folder(data)
        conn = connect(data / "room.sqlite", synchronous="FULL")
        os.sched_setaffinity(0, {SERVER_CPU})
        try:
            first = conn.execute("SELECT coalesce(max(id), 0) + 1 FROM messages").fetchone()[0]
            next_id = [int(first)]

            def one(now: float) -> None:
                seq = conn.execute(
                    "UPDATE projects SET last_seq = last_seq + 1, updated_at = ? WHERE id = ?"
                    " RETURNING last_seq",
                    (now, PROJECT_ID),
                ).fetchone()[0]
                message_id = next_id[0]
                next_id[0] += 1
                txn = f"ref-{message_id}"
                conn.execute(
                    "INSERT INTO messages (id, project_id, seq, author_id, kind, body,"
                    " client_txn_id, txn_digest, frame, created_at)"
                    " VALUES (?, ?, ?, ?, 'chat', ?, ?, ?, ?, ?)",
                    (message_id, PROJECT_ID, seq, owner, body, txn, "0" * 32,
                     _frame(message_id, seq, owner, body, txn), now),
                )  # fmt: skip
                conn.execute(
                    "INSERT INTO deliveries (project_id, message_id, recipient_id, state,"
                    " created_at, updated_at) VALUES (?, ?, ?, 'pending', ?, ?)",
                    (PROJECT_ID, message_id, lead, now, now),
                )
                conn.execute(
                    "INSERT INTO events (project_id, seq, kind, message_id, created_at)"
                    " VALUES (?, ?, 'message', ?, ?)",
                    (PROJECT_ID, seq, message_id, now),
                )

            results = {}
            for name, per_txn in (("per_message", 1), ("batched", BATCH)):
                done = 0
                t0 = time.perf_counter()
                deadline = t0 + seconds
                while time.perf_counter() < deadline:
                    conn.execute("BEGIN IMMEDIATE")
                    for _ in range(per_txn):
                        one(time.time())
                    conn.execute("COMMIT")
                    done += per_txn
                results[name] = done / (time.perf_counter() - t0)
            return results
        finally:
            os.sched_setaffinity(0, previous or {GENERATOR_CPU})
            conn.close()
