"""One 1,000,000-message corpus on both stores, built in minutes by bulk inserts.

Building a million messages through the server (or ``room copy`` with its indexer catching up,
one multi-row ``INSERT`` per batch of tokens) takes hours on the 2-core VM. Here the rows go
straight into each store, exactly as the server writes them:

* **messages** — the columns of ``room.store.messages.MESSAGES`` (client id, the send path's
  ``txn_digest``, the ``frame`` that :func:`room.store.messages.message_object` makes of the
  rendered body), bodies from :mod:`benchlib.search`'s Zipf vocabulary (a third Chinese), so
  one corpus serves both the history page and search; **events** — the message events of
  ``EVENTS_NO_FRAME``; ``projects.last_seq`` — the head;
* **SQLite**: ``executemany`` in one transaction into a data folder the server made
  (:func:`benchlib.corpus.make_data_folder`), then the store's own indexer
  (:func:`room.store.indexer.catch_up`) builds the message index file, and the memory records
  go through :func:`room.store.search.index_record`;
* **PostgreSQL**: a database the server migrated and seeded the same way, then ``COPY`` of the
  SQLite corpus's very rows (messages, events), and of the message index rows made by the
  store's own tokenizer (:func:`room.rules.searchtokens.index_row` of
  :func:`room.rules.searchtext.index_texts`, what ``search_pg.index_step`` writes); the GIN
  index ``message_fts_tsv`` is dropped for the load and made again with the schema's own
  definition; ``index_state`` is left where the indexer would leave it, the sequences where
  ``room copy`` leaves them; records through :func:`room.store.search.index_record`; then
  ``VACUUM ANALYZE`` (what autovacuum would do to a table this size before long).

The SQLite corpus is cached in ``.bench-cache/bulk-v<schema>-<index>-<count>-<records>/``
and reused while its row counts are right; the PostgreSQL database is loaded afresh each run
(from the cached SQLite rows: the same ids, seqs, bodies and frames).
"""

from __future__ import annotations

import random
import shutil
import sqlite3
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from benchlib import search
from benchlib.corpus import PROJECT_ID, make_data_folder
from benchlib.search import _Text
from room.actions.messages import _digest
from room.rules.render import render
from room.rules.searchtext import index_texts
from room.rules.searchtokens import index_row
from room.store import pg
from room.store import search as search_store
from room.store.messages import message_object
from room.store.migrate import connect
from room.store.schema import SCHEMA_VERSION, SEARCH
from room.store.schema_pg import BASELINE

CHUNK = 20_000
MESSAGE_COLUMNS = (
    "id", "project_id", "seq", "author_id", "kind", "body", "reply_to", "client_txn_id",
    "txn_digest", "frame", "created_at",
)  # fmt: skip
EVENT_COLUMNS = ("project_id", "seq", "kind", "message_id", "created_at")
GIN_INDEX = "message_fts_tsv"


def _gin_definition() -> str:
    """The schema's own ``CREATE INDEX`` of the message index (re-made after the load)."""
    for statement in BASELINE.split(";"):
        if f"CREATE INDEX {GIN_INDEX} " in statement:
            return statement.strip()
    raise RuntimeError(f"{GIN_INDEX} is not in the PostgreSQL baseline schema")


def _message_rows(
    first_id: int, head: int, count: int, owner: int, lead: int, now: float
) -> Iterator[tuple[Any, ...]]:
    text = _Text(23)
    for i in range(count):
        message_id, seq = first_id + i, head + i + 1
        body = text.body()
        author = owner if i % 3 else lead
        created = now - (count - i) * 0.5
        txn = f"bulk-{seq}"
        frame = message_object(
            message_id=message_id, project_id=PROJECT_ID, seq=seq, author_id=author,
            kind="chat", body=body, html=render(body), reply_to=None, reply_excerpt=None,
            mentions=(), client_txn_id=txn, created_at=created,
        )  # fmt: skip
        digest = _digest(body, None, [], False, [])
        yield (message_id, PROJECT_ID, seq, author, "chat", body, None, txn, digest, frame, created)


def _counts(db: Path) -> tuple[int, int]:
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    except sqlite3.Error:
        return 0, 0
    try:
        return (
            int(conn.execute("SELECT count(*) FROM messages WHERE txn_digest IS NOT NULL AND"
                             " client_txn_id LIKE 'bulk-%'").fetchone()[0]),
            int(conn.execute("SELECT count(*) FROM search_records").fetchone()[0]),
        )  # fmt: skip
    except sqlite3.Error:
        return 0, 0
    finally:
        conn.close()


def ensure_sqlite(cache: Path, count: int, records: int) -> tuple[Path, dict[str, float]]:
    """The cached SQLite data folder (built when missing) and its build's seconds."""
    index = zlib.crc32((SEARCH + "".join(search_store.INDEX_SCHEMA)).encode())
    data = cache / f"bulk-v{SCHEMA_VERSION}-{index:08x}-{count}-{records}"
    db = data / "room.sqlite"
    if db.exists() and _counts(db) == (count, records):
        return data, {}
    shutil.rmtree(data, ignore_errors=True)
    print(f"  building the {count:,}-message SQLite corpus in {data} (once) …", flush=True)
    t0 = time.monotonic()
    owner, lead = make_data_folder(data)
    conn = connect(db, synchronous="OFF")
    conn.execute("PRAGMA cache_size = -262144")
    try:
        first = int(conn.execute("SELECT coalesce(max(id), 0) + 1 FROM messages").fetchone()[0])
        head = int(
            conn.execute("SELECT last_seq FROM projects WHERE id = ?", (PROJECT_ID,)).fetchone()[0]
        )
        now = time.time()
        insert_messages = (
            f"INSERT INTO messages ({', '.join(MESSAGE_COLUMNS)})"
            f" VALUES ({', '.join('?' * len(MESSAGE_COLUMNS))})"
        )
        insert_events = (
            f"INSERT INTO events ({', '.join(EVENT_COLUMNS)}) VALUES (?, ?, 'message', ?, ?)"
        )
        rows = _message_rows(first, head, count, owner, lead, now)
        conn.execute("BEGIN IMMEDIATE")  # one transaction
        while chunk := [row for _, row in zip(range(CHUNK), rows, strict=False)]:
            conn.executemany(insert_messages, chunk)
            conn.executemany(insert_events, [(r[1], r[2], r[0], r[10]) for r in chunk])
        conn.execute(
            "UPDATE projects SET last_seq = ?, updated_at = ? WHERE id = ?",
            (head + count, now, PROJECT_ID),
        )
        search.index_records(conn, records, lead, now, _Text(29))
        conn.execute("COMMIT")
        search.optimize_records(conn)
    finally:
        conn.close()
    t1 = time.monotonic()
    search.index_messages(db)  # the server's indexer, the store's own tokens
    took = {"rows_secs": t1 - t0, "index_secs": time.monotonic() - t1}
    print(f"  built in {t1 - t0:.0f} s + indexed in {took['index_secs']:.0f} s", flush=True)
    return data, took


def _copy(raw: Any, table: str, columns: tuple[str, ...], rows: Iterator[tuple[Any, ...]]) -> int:
    done = 0
    with (
        raw.cursor() as cursor,
        cursor.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as copy,
    ):
        for row in rows:
            copy.write_row(row)
            done += 1
    return done


def load_postgresql(data: Path, url: str) -> dict[str, float]:
    """Load the SQLite corpus of ``data`` into the empty database at ``url``; seconds taken."""
    t0 = time.monotonic()
    lite = connect(data / "room.sqlite")
    lite.execute("PRAGMA query_only = ON")
    make_data_folder(data.parent / f"{data.name}-pg-seed", database_url=url)
    shutil.rmtree(data.parent / f"{data.name}-pg-seed", ignore_errors=True)
    conn = pg.connect(url, application_name="bench-bulk-load")
    raw = conn.raw
    try:
        first = int(conn.execute("SELECT coalesce(max(id), 0) + 1 FROM messages").fetchone()[0])
        head = int(
            conn.execute("SELECT last_seq FROM projects WHERE id = ?", (PROJECT_ID,)).fetchone()[0]
        )
        lite_first = int(
            lite.execute("SELECT min(id) FROM messages WHERE client_txn_id LIKE 'bulk-%'")
            .fetchone()[0]
        )  # fmt: skip
        if lite_first != first:
            raise RuntimeError(f"the seeded stores differ: next id {first} vs SQLite {lite_first}")
        select = f"SELECT {', '.join(MESSAGE_COLUMNS)} FROM messages WHERE id >= ? ORDER BY id"
        with raw.transaction():
            raw.execute("SET LOCAL maintenance_work_mem = '256MB'")
            raw.execute(f"DROP INDEX {GIN_INDEX}")
            n = _copy(raw, "messages", MESSAGE_COLUMNS, lite.execute(select, (first,)))
            _copy(
                raw, "events", EVENT_COLUMNS,
                ((r[0], r[1], r[2], r[3], r[4]) for r in lite.execute(
                    "SELECT project_id, seq, kind, message_id, created_at FROM events"
                    " WHERE message_id >= ? ORDER BY seq", (first,))),
            )  # fmt: skip
            t1 = time.monotonic()
            _copy(
                raw, "message_fts", ("rowid", "project_id", "body", "uni"),
                ((int(i), int(p), *index_row(index_texts(str(b)))) for i, p, b in lite.execute(
                    "SELECT id, project_id, body FROM messages WHERE deleted_at IS NULL"
                    " ORDER BY id")),
            )  # fmt: skip
            # The trigger of 0027_pg_parity queued every copied message for the indexer; the
            # COPY above wrote their index rows, as index_step would, so their queue rows go
            # too (left, each search would leave a million queued ids out: NOT IN).
            raw.execute("DELETE FROM search_changes WHERE message_id >= %s", (first,))
            t2 = time.monotonic()
            raw.execute(_gin_definition())
            t3 = time.monotonic()
            last = raw.execute(
                "SELECT id, created_at FROM messages ORDER BY id DESC LIMIT 1"
            ).fetchone()
            assert last is not None
            last_id, last_at = last
            raw.execute(
                "UPDATE index_state SET messages_done = %s, done_at = %s,"
                " changes_done = (SELECT coalesce(max(seq), 0) FROM search_changes)",
                (last_id, last_at),
            )
            raw.execute(
                "UPDATE projects SET last_seq = %s, updated_at = %s WHERE id = %s",
                (head + n, time.time(), PROJECT_ID),
            )
            raw.execute("SELECT setval(pg_get_serial_sequence('messages', 'id'), %s)", (last_id,))
        records = lite.execute(
            "SELECT record_id, kind, author_id, at, body FROM search_records"
            " WHERE project_id = ? ORDER BY id",
            (PROJECT_ID,),
        ).fetchall()
        conn.execute("BEGIN")
        for record_id, kind, author, at, body in records:
            search_store.index_record(
                conn, project_id=PROJECT_ID, record_id=int(record_id), kind=str(kind),
                author_id=author, at=float(at), text=str(body),
            )  # fmt: skip
        conn.execute("COMMIT")
        t4 = time.monotonic()
        raw.autocommit = True
        raw.execute("VACUUM ANALYZE")
        t5 = time.monotonic()
    finally:
        lite.close()
        conn.close()
    return {
        "messages": n,
        "secs": t5 - t0,
        "tokens_secs": t2 - t1,
        "gin_secs": t3 - t2,
        "records_secs": t4 - t3,
        "vacuum_secs": t5 - t4,
    }


def check_same(data: Path, url: str) -> dict[str, int]:
    """The two stores hold the same corpus: counts, head and a sample of frames."""
    lite = connect(data / "room.sqlite")
    conn = pg.connect(url)
    try:
        out: dict[str, int] = {}
        for name, sql in (
            ("messages", "SELECT count(*) FROM messages WHERE project_id = 1"),
            ("events", "SELECT count(*) FROM events WHERE project_id = 1"),
            ("head", "SELECT last_seq FROM projects WHERE id = 1"),
            ("records", "SELECT count(*) FROM search_records"),
        ):
            a = int(lite.execute(sql).fetchone()[0])
            b = int(conn.execute(sql).fetchone()[0])
            if a != b:
                raise RuntimeError(f"{name}: SQLite {a:,} vs PostgreSQL {b:,}")
            out[name] = a
        queued = int(conn.execute("SELECT count(*) FROM search_changes").fetchone()[0])
        if queued:
            raise RuntimeError(f"{queued:,} messages still queued for the PostgreSQL indexer")
        rng = random.Random(3)
        for seq in rng.sample(range(1, out["head"] + 1), 50):
            sql = "SELECT frame FROM messages WHERE project_id = 1 AND seq = ?"
            if lite.execute(sql, (seq,)).fetchone() != tuple(conn.execute(sql, (seq,)).fetchone()):
                raise RuntimeError(f"the frames of seq {seq} differ")
        return out
    finally:
        lite.close()
        conn.close()
