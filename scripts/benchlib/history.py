"""History page: 100 messages before a random cursor in a 1,000,000-message project.

The data folder is built once into ``.bench-cache/history-v<schema>-<count>/`` (the server's own
migrations and seeding, then raw ``executemany`` of message and event rows — see
:mod:`benchlib.corpus`) and reused while its row count is right. Server-side time is measured
in-process on a read connection made like the server's reader threads: the store's keyset query
(``room.store.messages.history``) plus building the response string exactly as ``/ws`` does, for
``SAMPLES`` random cursors. The reference is the same page fetched with ``OFFSET`` at a random
depth. A last row times the round trip of ``history`` frames against the real server on that
data folder (client-side, one request in flight), for context.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from pathlib import Path

from benchlib.corpus import PROJECT_ID, fill_messages, make_data_folder, message_count
from benchlib.serverproc import RoomServer
from benchlib.stats import Row, quantiles
from benchlib.wsraw import WsClient
from room.store import messages as messages_store
from room.store.migrate import connect
from room.store.schema import SCHEMA_VERSION

WORKLOAD = "history page"
PAGE = 100
OFFSET_SQL = (
    "SELECT frame FROM messages WHERE project_id = :p ORDER BY seq DESC LIMIT :limit OFFSET :offset"
)


def ensure_corpus(cache: Path, count: int, log: bool = True) -> Path:
    """The cached data folder with ``count`` messages in project 1, built when missing."""
    data = cache / f"history-v{SCHEMA_VERSION}-{count}"
    db = data / "room.sqlite"
    if db.exists() and message_count(db) == count:
        return data
    if data.exists():
        import shutil

        shutil.rmtree(data)
    if log:
        print(f"  building {count:,}-message history corpus in {data} (once) …", flush=True)
    t0 = time.monotonic()
    make_data_folder(data)
    fill_messages(data, count)
    if log:
        print(f"  built in {time.monotonic() - t0:.0f} s", flush=True)
    return data


def _page_text(frames: list[str], has_more: bool, before: int) -> str:
    # The same string ws.on_history builds around the store's page.
    return (
        f'{{"type":"history","project_id":{PROJECT_ID},"req_id":"r",'
        f'"before":{before},"has_more":{json.dumps(has_more)},'
        f'"messages":[{",".join(frames)}]}}'
    )


def keyset_us(data: Path, head: int, samples: int, rng: random.Random) -> list[float]:
    conn = connect(data / "room.sqlite")
    conn.execute("PRAGMA query_only = ON")
    try:
        out = []
        for _ in range(samples):
            before = rng.randint(PAGE + 1, head)
            conn.execute("BEGIN")
            t0 = time.perf_counter_ns()
            frames, has_more = messages_store.history(conn, PROJECT_ID, before, PAGE)
            text = _page_text(frames, has_more, before)
            out.append((time.perf_counter_ns() - t0) / 1000)
            conn.execute("COMMIT")
            assert len(frames) == PAGE and text
        return out
    finally:
        conn.close()


def offset_us(data: Path, head: int, samples: int, rng: random.Random) -> list[float]:
    conn = connect(data / "room.sqlite")
    try:
        out = []
        for _ in range(samples):
            depth = rng.randint(0, head - PAGE - 1)
            t0 = time.perf_counter_ns()
            rows = conn.execute(
                OFFSET_SQL, {"p": PROJECT_ID, "limit": PAGE + 1, "offset": depth}
            ).fetchall()
            frames = [str(r[0]) for r in rows[:PAGE]]
            frames.reverse()
            text = _page_text(frames, len(rows) > PAGE, head - depth + 1)
            out.append((time.perf_counter_ns() - t0) / 1000)
            assert text
        return out
    finally:
        conn.close()


async def _round_trips(server: RoomServer, head: int, samples: int, seed: int) -> list[float]:
    rng = random.Random(seed)
    answer: asyncio.Queue[int] = asyncio.Queue()

    def on_text(payload: bytes, now: int, _arrival: int) -> None:
        if payload.startswith(b'{"type":"history"'):
            answer.put_nowait(now)

    client = WsClient(on_text)
    await client.connect("127.0.0.1", server.port, headers=server.headers)
    out = []
    for _ in range(samples):
        before = rng.randint(PAGE + 1, head)
        frame = f'{{"type":"history","project_id":{PROJECT_ID},"before":{before},"limit":{PAGE}}}'
        t0 = time.monotonic_ns()
        client.send_text(frame.encode())
        out.append((await asyncio.wait_for(answer.get(), 10) - t0) / 1000)
    client.close()
    return out


def run(workdir: Path, cache: Path, *, quick: bool) -> list[Row]:
    count = 100_000 if quick else 1_000_000
    data = ensure_corpus(cache, count)
    rng = random.Random(11)
    keyset_us(data, count, 200, rng)  # warm the statement cache and the OS page cache a little
    keyset = keyset_us(data, count, 2000 if quick else 10_000, rng)
    offset = offset_us(data, count, 20 if quick else 60, rng)
    server = RoomServer(data).start()
    try:
        trips = asyncio.run(_round_trips(server, count, 300 if quick else 2000, 5))
    finally:
        server.stop()
    k50, k99 = quantiles(keyset, (50, 99))
    o50, o99 = quantiles(offset, (50, 99))
    t50, t99 = quantiles(trips, (50, 99))
    case = f"{PAGE} before a random cursor, {count:,} messages"
    return [
        Row(WORKLOAD, case, "server-side p50 ms", k50 / 1000, o50 / 1000,
            "OFFSET at random depth: {ref:.2f} ms"),
        Row(WORKLOAD, case, "server-side p99 ms", k99 / 1000, o99 / 1000,
            "OFFSET at random depth: {ref:.2f} ms", "≤ 1"),
        Row(WORKLOAD, case, "round trip over /ws p50 ms", t50 / 1000, None,
            "client-side, one request in flight"),
        Row(WORKLOAD, case, "round trip over /ws p99 ms", t99 / 1000, None,
            "client-side, one request in flight"),
    ]  # fmt: skip
