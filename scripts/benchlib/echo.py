"""End-to-end deliveries per second through ``builtin/echo``, and the runtime's per-turn overhead.

The real server on a fresh data folder, with ``AGENTS`` agent members on the offline echo route
(added over HTTP). One connection sends ``COUNT`` messages at an offered rate, each mentioning
one agent in turn; every message is a delivery the runtime must hand to the agent's in-process
session, take into a turn, answer through ``builtin/echo`` (no model time), post as a reply and
mark ``consumed``. Measured from the database the server wrote:

* consumed deliveries per second, from the first send to the last consumption (target ≥ 500/s);
* per-turn overhead excluding model time: a turn's wall time (``turns.started_at`` →
  ``ended_at``) minus the latency of its model requests (``model_requests.latency_ms``), median
  and p99, with the mean number of deliveries a turn took in.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sqlite3
import time
from pathlib import Path

from benchlib.corpus import PROJECT_ID
from benchlib.serverproc import RoomServer, http_request
from benchlib.stats import Row, quantiles
from benchlib.wsraw import WsClient

WORKLOAD = "agent turns (builtin/echo)"
AGENTS = 8
DRAIN_TIMEOUT_SECS = 120.0


def _add_agents(server: RoomServer) -> list[str]:
    _, _, raw = http_request(server.port, "GET", "/api/me", headers=server.headers)
    csrf = json.loads(raw)["csrf_token"]
    handles = []
    for i in range(AGENTS):
        handle = f"echo{i}"
        body = json.dumps({"role": "backend", "handle": handle, "display_name": f"回显{i}"})
        status, _, raw = http_request(
            server.port,
            "POST",
            f"/api/projects/{PROJECT_ID}/members",
            body.encode(),
            {
                **server.headers,
                "X-CSRF-Token": csrf,
                "Content-Type": "application/json",
                "Origin": f"http://127.0.0.1:{server.port}",
            },
        )
        if status != 201:
            raise RuntimeError(f"adding {handle} failed: {status} {raw[:200]!r}")
        handles.append(handle)
    return handles


async def _send(server: RoomServer, handles: list[str], count: int, rate: float) -> float:
    client = WsClient(lambda payload, now, arrival: None)
    await client.connect("127.0.0.1", server.port, headers=server.headers)
    start = time.time()
    t0 = time.monotonic()
    for i in range(count):
        due = t0 + i / rate
        delay = due - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        body = f"@{handles[i % len(handles)]} 第 {i} 条：请确认收到，这是端到端投递的基准消息。"
        frame = {"type": "send", "project_id": PROJECT_ID, "client_txn_id": f"e{i}", "body": body}
        client.send_text(json.dumps(frame, ensure_ascii=False).encode())
    await asyncio.sleep(0.2)
    client.close()
    return start


def _drain(db: Path, count: int, start: float) -> tuple[int, float]:
    deadline = time.monotonic() + DRAIN_TIMEOUT_SECS
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        while True:
            done, last = conn.execute(
                "SELECT count(*), max(updated_at) FROM deliveries d JOIN members m"
                " ON m.id = d.recipient_id WHERE m.handle LIKE 'echo%' AND d.state = 'consumed'"
            ).fetchone()
            if done >= count or time.monotonic() > deadline:
                return int(done), float(last or start) - start
            time.sleep(0.2)
    finally:
        conn.close()


def _turns(db: Path) -> tuple[list[float], float]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = conn.execute(
            "SELECT (t.ended_at - t.started_at) * 1000.0"
            " - coalesce((SELECT sum(latency_ms) FROM model_requests r WHERE r.turn_id = t.id), 0),"
            " (SELECT count(*) FROM deliveries d WHERE d.turn_id = t.id)"
            " FROM turns t WHERE t.state = 'completed'"
        ).fetchall()
    finally:
        conn.close()
    overhead = [float(r[0]) for r in rows]
    taken = [int(r[1]) for r in rows]
    return overhead, (sum(taken) / len(taken) if taken else 0.0)


def run(workdir: Path, *, quick: bool) -> list[Row]:
    count = 1000 if quick else 4000
    rate = 800.0
    data = workdir / "echo"
    shutil.rmtree(data, ignore_errors=True)  # a fresh server: agents are added by name below
    server = RoomServer(data).start()
    try:
        handles = _add_agents(server)
        start = asyncio.run(_send(server, handles, count, rate))
        done, elapsed = _drain(server.data / "room.sqlite", count, start)
    finally:
        server.stop()
    overhead, per_turn = _turns(server.data / "room.sqlite")
    o50, o99 = quantiles(overhead, (50, 99)) if overhead else (None, None)
    case = f"{AGENTS} echo agents, {count:,} messages at {rate:,.0f}/s offered"
    rate_done = done / elapsed if elapsed > 0 else 0.0
    return [
        Row(
            WORKLOAD,
            case,
            "consumed deliveries/s",
            rate_done,
            reference=float(count),
            reference_label=f"{done:,} of {{ref:,.0f}} consumed",
            target="≥ 500",
        ),
        Row(
            WORKLOAD,
            case,
            "turn overhead p50 ms (excl. model)",
            o50,
            reference=per_turn,
            reference_label="{ref:.1f} deliveries per turn",
        ),
        Row(
            WORKLOAD,
            case,
            "turn overhead p99 ms (excl. model)",
            o99,
            reference=float(len(overhead)),
            reference_label="{ref:,.0f} turns",
        ),
    ]
