"""Fan-out latency: 1,000 subscribers on one project, 50 messages/s, send→receive percentiles.

The real server (fresh data folder) and, in the same run, the reference — a plain Starlette app
broadcasting in a naive loop (:mod:`benchlib.refapp`) — and a floor — the cheapest broadcast
Python can do, raw sockets and one ``send`` per subscriber (:mod:`benchlib.floor`) — each get
the same load: 1,000 WebSocket
subscribers to project 1 (:mod:`benchlib.subscribers`) and one open-loop sender posting ~300-byte
messages at ``RATE_PER_SEC``. Latencies of messages sent in the first ``WARMUP_SECS`` are not
counted. Reported: p50/p99/p99.9 of the read latency (what a client sees), p99 of the kernel
arrival latency (the server's share alone), the delivery ratio (frames received / (sent
messages × subscribers), after waiting for stragglers), gaps and duplicates, and the generator's CPU use.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path
from typing import Any

from benchlib.opensend import OpenLoopSender
from benchlib.serverproc import Process, RoomServer, start_reference
from benchlib.stats import Row, quantiles
from benchlib.subscribers import Recorder, Subscriber, open_many
from benchlib.wsraw import WsClient

WORKLOAD = "fan-out latency"
SUBSCRIBERS = 1000
RATE_PER_SEC = 50.0
WARMUP_SECS = 1.0
STRAGGLER_SECS = 60.0  # an overloaded server may still be fanning out after the last send


async def _stragglers(subs: list[Subscriber], sent: int) -> None:
    """Wait until every subscriber has every message, or nothing arrived for a second."""
    deadline = time.monotonic() + STRAGGLER_SECS
    last = -1
    while time.monotonic() < deadline:
        got = sum(s.received for s in subs)
        if got >= sent * len(subs) or got == last:
            return
        last = got
        await asyncio.sleep(1.0)


async def _measure(port: int, headers: dict[str, str], seconds: float) -> dict[str, float]:
    recorder = Recorder()
    subs = await open_many(recorder, port, headers, SUBSCRIBERS)
    sender = OpenLoopSender([], RATE_PER_SEC, prefix="f")
    client = WsClient(sender.on_text)
    await client.connect("127.0.0.1", port, headers=headers)
    sender.clients = [client]
    await asyncio.sleep(0.5)

    async def arm() -> None:
        await asyncio.sleep(WARMUP_SECS)
        recorder.active = True

    cpu0, wall0 = time.process_time(), time.monotonic()
    armer = asyncio.ensure_future(arm())
    log = await sender.run(seconds + WARMUP_SECS)
    await sender.drain(STRAGGLER_SECS)
    await _stragglers(subs, log.sent)
    recorder.active = False
    await armer
    cpu1, wall1 = time.process_time(), time.monotonic()
    received = sum(s.received for s in subs)
    expected = log.sent * len(subs)
    closed = sum(1 for s in subs if s.client.closed)
    for s in subs:
        s.client.close()
    client.close()
    p50, p99, p999 = quantiles(recorder.read, (50, 99, 99.9))
    (a99,) = quantiles(recorder.arrival, (99,)) if recorder.arrival else (float("nan"),)
    return {
        "p50_ms": p50 / 1e6,
        "p99_ms": p99 / 1e6,
        "p999_ms": p999 / 1e6,
        "arrival_p99_ms": a99 / 1e6,
        "delivered_pct": 100.0 * received / expected if expected else 0.0,
        "gaps": float(sum(s.gaps for s in subs)),
        "duplicates": float(sum(s.duplicates for s in subs)),
        "closed": float(closed),
        "sent": float(log.sent),
        "acked": float(log.acked),
        "samples": float(len(recorder.read)),
        "generator_cpu_pct": 100 * (cpu1 - cpu0) / (wall1 - wall0),
    }


def _server(workdir: Path, seconds: float) -> dict[str, float]:
    data = workdir / "fanout"
    shutil.rmtree(data, ignore_errors=True)
    server = RoomServer(data).start()
    try:
        return asyncio.run(_measure(server.port, server.headers, seconds))
    finally:
        server.stop()
        shutil.rmtree(data, ignore_errors=True)


def _reference(workdir: Path, seconds: float, module: str) -> dict[str, float]:
    process: Process | None = None
    try:
        process, port = start_reference(workdir, module)
        return asyncio.run(_measure(port, {}, seconds))
    finally:
        if process is not None:
            process.stop()


TARGET_P99_MS = 5.0
ISSUE_NAIVE_P99_MS = 12.0  # "the naive loop gives p99 ≈ 12 ms"


def run(workdir: Path, *, quick: bool) -> list[Row]:
    seconds = 5.0 if quick else 30.0
    got = _server(workdir, seconds)
    ref = _reference(workdir, seconds, "benchlib.refapp")
    floor = _reference(workdir, seconds, "benchlib.floor")
    case = f"{SUBSCRIBERS:,} subscribers, {RATE_PER_SEC:g} msg/s, {seconds:g} s"
    label = "naive Starlette loop: {ref:.2f} ms"
    extra: dict[str, Any] = {"server": got, "reference": ref, "floor": floor}
    return [
        Row(WORKLOAD, case, "p50 ms", got["p50_ms"], ref["p50_ms"], label, extra=extra),
        Row(WORKLOAD, case, "p99 ms", got["p99_ms"], ref["p99_ms"], label, "≤ 5"),
        Row(WORKLOAD, case, "p99.9 ms", got["p999_ms"],
            ref["p999_ms"], label, "≤ 10"),
        # The issue's target as a ratio: p99 ≤ 5 ms where the naive loop gave ≈ 12 ms.
        Row(WORKLOAD, case, "p99 ÷ naive loop p99", got["p99_ms"] / ref["p99_ms"]
            if ref["p99_ms"] else None, None, "the issue's ratio: 5 ms vs ≈ 12 ms there",
            f"≤ {TARGET_P99_MS / ISSUE_NAIVE_P99_MS:.2f}"),
        Row(WORKLOAD, case, "p99 ms at socket (kernel timestamp)", got["arrival_p99_ms"],
            ref["arrival_p99_ms"], label),
        Row(WORKLOAD, case, "delivered %", got["delivered_pct"], ref["delivered_pct"],
            "naive Starlette loop: {ref:.2f} %", "≥ 100"),
        Row(WORKLOAD, case, "gaps + duplicates + cut", got["gaps"] + got["duplicates"]
            + got["closed"], ref["gaps"] + ref["duplicates"] + ref["closed"],
            "naive Starlette loop: {ref:.0f}", "≤ 0"),
        Row(WORKLOAD, case, "generator CPU %", got["generator_cpu_pct"],
            ref["generator_cpu_pct"], "during the reference: {ref:.0f} %"),
        Row(WORKLOAD, "floor: raw-socket broadcast, same load", "p50 ms", floor["p50_ms"]),
        Row(WORKLOAD, "floor: raw-socket broadcast, same load", "p99 ms", floor["p99_ms"]),
        Row(WORKLOAD, "floor: raw-socket broadcast, same load", "p99.9 ms", floor["p999_ms"]),
        Row(WORKLOAD, "floor: raw-socket broadcast, same load", "p99 ms at socket",
            floor["arrival_p99_ms"], None, "the machine's own limit for one core: a target"
            " below it cannot be met here"),
        Row(WORKLOAD, case, "p99 at socket ÷ floor's", got["arrival_p99_ms"]
            / floor["arrival_p99_ms"] if floor["arrival_p99_ms"] else None, None,
            "what the server adds over one raw send per socket"),
    ]  # fmt: skip
