"""Message bodies and pre-filled data folders for the workloads.

Bodies are ~300 bytes of one-line prose that begin ``probe <monotonic_ns> <realtime_ns>``, so a
receiver finds the send time with ``bytes.find`` instead of decoding JSON. A data folder is made
the way the server makes one (``RoomServer.open``: migrations, owner, the demo project with its
lead agent), then filled with raw ``executemany``: message rows whose ``frame`` column is what
``room.store.messages.message_object`` returns for them, and their ``events`` rows.
"""

from __future__ import annotations

import random
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path

from room.app import RoomServer
from room.rules.render import render
from room.settings import load_settings
from room.store import pg
from room.store.dialect import Connection
from room.store.messages import message_object
from room.store.migrate import connect

PROJECT_ID = 1
BODY_BYTES = 300
PROBE = b'"body":"probe '
_TEXT = (
    "the build on main is green again after the flaky migration test was fixed, "
    "please review the delivery ledger change before the release this afternoon, "
    "numbers from last night look fine but the tail doubled after the deploy, "
    "let us keep the schema change reversible and write the backup first, "
    "I will pair with the lead agent on the resume path tomorrow morning, "
)
_WORDS = tuple(_TEXT.split())


def filler(rng: random.Random, size: int) -> str:
    words: list[str] = []
    length = 0
    while length < size:
        word = rng.choice(_WORDS)
        words.append(word)
        length += len(word) + 1
    return " ".join(words)[:size].rstrip(" ,")


def probe_body(mono_ns: int, real_ns: int, tail: str) -> str:
    """A ~300-byte plain-prose body carrying its send times; ``tail`` pads it out."""
    head = f"probe {mono_ns} {real_ns} "
    return head + tail[: BODY_BYTES - len(head)].rstrip(" ,")


def parse_probe(payload: bytes) -> tuple[int, int] | None:
    """The (monotonic_ns, realtime_ns) a probe body carries, or None when there is none."""
    at = payload.find(PROBE)
    if at < 0:
        return None
    start = at + len(PROBE)
    mid = payload.find(b" ", start)
    end = payload.find(b" ", mid + 1)
    try:
        return int(payload[start:mid]), int(payload[mid + 1 : end])
    except ValueError:
        return None


def make_data_folder(
    data: Path, *, pause_lead: bool = True, database_url: str | None = None
) -> tuple[int, int]:
    """A fresh data folder as the server makes it; returns (owner member id, lead member id).

    With ``pause_lead`` the demo project's lead agent is paused (as ``room`` does it: its member
    status): a human message still writes its delivery row to the lead — in state ``held`` —
    but no agent turn runs and no reply is posted, so a workload measures exactly the messages
    it sends. With ``database_url`` the store is that (empty) PostgreSQL database instead of the
    folder's room.sqlite, seeded the same way.
    """
    options: dict[str, object] = {"data": data}
    if database_url:
        options["database_url"] = database_url
    server = RoomServer(load_settings(options, env={}))
    server.open()
    server.close()
    conn: Connection = pg.connect(database_url) if database_url else connect(data / "room.sqlite")
    try:
        owner = conn.execute(
            "SELECT id FROM members WHERE project_id = ? AND kind = 'human'", (PROJECT_ID,)
        ).fetchone()[0]
        lead = conn.execute(
            "SELECT lead_member_id FROM projects WHERE id = ?", (PROJECT_ID,)
        ).fetchone()[0]
        if pause_lead:
            conn.execute("UPDATE members SET status = 'paused' WHERE id = ?", (lead,))
    finally:
        conn.close()
    return int(owner), int(lead)


def _rows(
    first_id: int, first_seq: int, count: int, author: int, rng: random.Random, now: float
) -> Iterator[tuple[tuple[object, ...], tuple[object, ...]]]:
    for i in range(count):
        message_id, seq = first_id + i, first_seq + i
        body = f"message {seq} " + filler(rng, BODY_BYTES - 16)
        created = now - (count - i) * 0.5
        txn = f"fill-{seq}"
        frame = message_object(
            message_id=message_id,
            project_id=PROJECT_ID,
            seq=seq,
            author_id=author,
            kind="chat",
            body=body,
            html=render(body),
            reply_to=None,
            reply_excerpt=None,
            mentions=(),
            client_txn_id=txn,
            created_at=created,
        )
        yield (
            (message_id, PROJECT_ID, seq, author, "chat", body, txn, frame, created),
            (PROJECT_ID, seq, "message", message_id, created),
        )


def fill_messages(data: Path, count: int, *, chunk: int = 20_000, seed: int = 7) -> int:
    """Append ``count`` messages (and their events) to project 1; returns the new head seq."""
    conn = connect(data / "room.sqlite", synchronous="OFF")
    conn.execute("PRAGMA cache_size = -262144")  # 256 MB: the txn-id index takes random inserts
    rng = random.Random(seed)
    try:
        author = conn.execute(
            "SELECT id FROM members WHERE project_id = ? AND kind = 'human'", (PROJECT_ID,)
        ).fetchone()[0]
        head = int(
            conn.execute("SELECT last_seq FROM projects WHERE id = ?", (PROJECT_ID,)).fetchone()[0]
        )
        first_id = int(conn.execute("SELECT coalesce(max(id), 0) + 1 FROM messages").fetchone()[0])
        now = time.time()
        done = 0
        while done < count:
            n = min(chunk, count - done)
            pairs = list(_rows(first_id + done, head + done + 1, n, author, rng, now))
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(
                "INSERT INTO messages (id, project_id, seq, author_id, kind, body, client_txn_id,"
                " frame, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [m for m, _ in pairs],
            )
            conn.executemany(
                "INSERT INTO events (project_id, seq, kind, message_id, created_at)"
                " VALUES (?, ?, ?, ?, ?)",
                [e for _, e in pairs],
            )
            conn.execute(
                "UPDATE projects SET last_seq = ? WHERE id = ?", (head + done + n, PROJECT_ID)
            )
            conn.execute("COMMIT")
            done += n
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    return head + count


def message_count(db_path: Path) -> int:
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        return int(
            conn.execute(
                "SELECT count(*) FROM messages WHERE project_id = ?", (PROJECT_ID,)
            ).fetchone()[0]
        )
    finally:
        conn.close()
