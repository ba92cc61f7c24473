"""Fan-out latency: 1,000 subscribers on one project, 50 messages/s, send→receive percentiles.

The real server (fresh data folder) and, in the same run, a floor — the cheapest broadcast
Python can do, raw sockets and one ``send`` per subscriber (:mod:`benchlib.floor`) — each get
the same load: 1,000 WebSocket subscribers to project 1 (:mod:`benchlib.subscribers`) and one
open-loop sender posting ~300-byte messages at ``RATE_PER_SEC``. Latencies of messages sent in
the first ``WARMUP_SECS`` are not counted. Reported, each next to the floor's figure of the same
run (absolute times mean nothing on a shared machine without it): p50/p99/p99.9 of the read
latency (what a client sees), p99 of the kernel arrival latency (the server's share alone), the
server's CPU per delivered frame (utime + stime of the process over the frames delivered), the
delivery ratio (frames received / (sent messages × subscribers), after waiting for stragglers),
gaps and duplicates, and the generator's CPU use. The targets are ratios to the floor (issue 18).
CPU per delivery compares like with like only while both keep up: a server that falls behind
writes several frames per ``send`` (one write per connection per loop turn), the floor never does.
A naive Starlette loop (:mod:`benchlib.refapp`) is measured too, as information only: its p99
swings by orders of magnitude between runs, so a ratio to it says nothing.

``capacity`` (:func:`run_capacity`) steps the rate on one server and one floor — 50k, 75k and
100k deliveries/s to the same 1,000 subscribers — and reports the socket p99 at each step (target
≤ 50 ms) with the floor's, and CPU per delivery against the floor's. Where the floor itself misses
50 ms, or the generator is saturated, the step is beyond what this machine can offer and only the
CPU ratio says anything.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from array import array
from pathlib import Path
from typing import Any

from benchlib.opensend import OpenLoopSender
from benchlib.serverproc import Process, RoomServer, cpu_seconds, start_reference
from benchlib.stats import Row, quantiles
from benchlib.subscribers import Recorder, Subscriber, open_many
from benchlib.wsraw import WsClient

WORKLOAD = "fan-out latency"
CAPACITY = "fan-out capacity"
SUBSCRIBERS = 1000
RATE_PER_SEC = 50.0
CAPACITY_RATES = (50.0, 75.0, 100.0)  # messages/s to 1,000 subscribers: 50k, 75k, 100k deliveries/s
CAPACITY_P99_MS = 50.0
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


def _server_cpu(pid: int) -> tuple[float, float]:
    """CPU seconds of the process so far: the event-loop thread, and all its threads."""
    used = cpu_seconds(pid)
    return used["main"], used["main"] + used["threads"]


async def _measure(
    port: int, headers: dict[str, str], seconds: float, pid: int, rates: tuple[float, ...]
) -> list[dict[str, float]]:
    """One result per rate, in order, on the same subscribers (each step starts when the last
    one's stragglers are in)."""
    recorder = Recorder()
    subs = await open_many(recorder, port, headers, SUBSCRIBERS)
    client = WsClient(lambda payload, now, arrival: None)
    await client.connect("127.0.0.1", port, headers=headers)
    await asyncio.sleep(0.5)
    out = []
    for step, rate in enumerate(rates):
        recorder.read, recorder.arrival = array("q"), array("q")
        for s in subs:
            s.received = s.gaps = s.duplicates = 0
        sender = OpenLoopSender([client], rate, prefix=f"f{step}x")
        client.on_text = sender.on_text
        out.append(await _step(subs, recorder, sender, seconds, pid))
    for s in subs:
        s.client.close()
    client.close()
    return out


async def _step(
    subs: list[Subscriber], recorder: Recorder, sender: OpenLoopSender, seconds: float, pid: int
) -> dict[str, float]:
    async def arm() -> None:
        await asyncio.sleep(WARMUP_SECS)
        recorder.active = True

    frames0 = sum(s.client.frames_in for s in subs)
    bytes0 = sum(s.client.bytes_in for s in subs)
    cpu0, wall0, server0 = time.process_time(), time.monotonic(), _server_cpu(pid)
    armer = asyncio.ensure_future(arm())
    log = await sender.run(seconds + WARMUP_SECS)
    await sender.drain(STRAGGLER_SECS)
    await _stragglers(subs, log.sent)
    recorder.active = False
    await armer
    cpu1, wall1, server1 = time.process_time(), time.monotonic(), _server_cpu(pid)
    loop_s, all_s = server1[0] - server0[0], server1[1] - server0[1]
    received = sum(s.received for s in subs)
    expected = log.sent * len(subs)
    closed = sum(1 for s in subs if s.client.closed)
    p50, p99, p999 = quantiles(recorder.read, (50, 99, 99.9))
    (a99,) = quantiles(recorder.arrival, (99,)) if recorder.arrival else (float("nan"),)
    return {
        "rate": sender.log.rate,
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
        # Everything the server process spent from the first send to the last straggler
        # (commits, acks, keepalives included), per frame delivered.
        "cpu_us_per_delivery": 1e6 * all_s / received if received else float("nan"),
        "server_cpu_s": all_s,
        "server_loop_cpu_s": loop_s,  # the event-loop thread's share (the rest: writer, readers)
        "messages_per_sec": log.sent / (wall1 - wall0),
        "received": float(received),
        # Frames other than the messages (presence, unread counts …) the subscribers got.
        "other_frames": float(sum(s.client.frames_in for s in subs) - frames0 - received),
        "bytes_per_frame": (sum(s.client.bytes_in for s in subs) - bytes0) / received
        if received
        else 0.0,
    }


def _server(workdir: Path, seconds: float, rates: tuple[float, ...]) -> list[dict[str, float]]:
    data = workdir / "fanout"
    shutil.rmtree(data, ignore_errors=True)
    server = RoomServer(data).start()
    try:
        return asyncio.run(_measure(server.port, server.headers, seconds, server.pid, rates))
    finally:
        server.stop()
        shutil.rmtree(data, ignore_errors=True)


def _reference(
    workdir: Path, seconds: float, module: str, rates: tuple[float, ...]
) -> list[dict[str, float]]:
    process: Process | None = None
    try:
        process, port = start_reference(workdir, module)
        return asyncio.run(_measure(port, {}, seconds, process.pid, rates))
    finally:
        if process is not None:
            process.stop()


TARGET_SOCKET_P99_RATIO = 1.5  # issue 18: socket p99 ÷ the floor's socket p99
TARGET_CPU_RATIO = 1.25  # issue 18: server CPU per delivery ÷ the floor's


def _ratio(a: float, b: float) -> float | None:
    return a / b if b and b == b and a == a else None


def run(workdir: Path, *, quick: bool) -> list[Row]:
    seconds = 5.0 if quick else 30.0
    (got,) = _server(workdir, seconds, (RATE_PER_SEC,))
    (floor,) = _reference(workdir, seconds, "benchlib.floor", (RATE_PER_SEC,))
    (ref,) = _reference(workdir, seconds, "benchlib.refapp", (RATE_PER_SEC,))
    case = f"{SUBSCRIBERS:,} subscribers, {RATE_PER_SEC:g} msg/s, {seconds:g} s"
    naive = "naive Starlette loop (information)"
    fl = "floor: {ref:.2f} ms"
    extra: dict[str, Any] = {"server": got, "floor": floor, "reference": ref}
    return [
        Row(WORKLOAD, case, "p99 at socket ÷ floor's", _ratio(got["arrival_p99_ms"],
            floor["arrival_p99_ms"]), None, "what the server adds over one raw send per socket",
            f"≤ {TARGET_SOCKET_P99_RATIO:g}", extra=extra),
        Row(WORKLOAD, case, "CPU per delivery ÷ floor's", _ratio(got["cpu_us_per_delivery"],
            floor["cpu_us_per_delivery"]), None, "utime+stime per frame; behind (p50 ≫ floor's), the"
            " server coalesces frames per send and the floor does not",
            f"≤ {TARGET_CPU_RATIO:g}"),
        Row(WORKLOAD, case, "CPU µs per delivery", got["cpu_us_per_delivery"],
            floor["cpu_us_per_delivery"], "floor: {ref:.2f} µs"),
        Row(WORKLOAD, case, "p99 ms at socket (kernel timestamp)", got["arrival_p99_ms"],
            floor["arrival_p99_ms"], fl),
        Row(WORKLOAD, case, "p50 ms", got["p50_ms"], floor["p50_ms"], fl),
        Row(WORKLOAD, case, "p99 ms", got["p99_ms"], floor["p99_ms"], fl),
        Row(WORKLOAD, case, "p99.9 ms", got["p999_ms"], floor["p999_ms"], fl),
        Row(WORKLOAD, case, "delivered %", got["delivered_pct"], floor["delivered_pct"],
            "floor: {ref:.2f} %", "≥ 100"),
        Row(WORKLOAD, case, "gaps + duplicates + cut", got["gaps"] + got["duplicates"]
            + got["closed"], floor["gaps"] + floor["duplicates"] + floor["closed"],
            "floor: {ref:.0f}", "≤ 0"),
        Row(WORKLOAD, case, "generator CPU %", got["generator_cpu_pct"],
            floor["generator_cpu_pct"], "during the floor: {ref:.0f} %"),
        Row(WORKLOAD, naive, "p99 ms at socket ÷ floor's", _ratio(ref["arrival_p99_ms"],
            floor["arrival_p99_ms"]), None, "swings by orders of magnitude between runs"),
        Row(WORKLOAD, naive, "CPU per delivery ÷ floor's", _ratio(ref["cpu_us_per_delivery"],
            floor["cpu_us_per_delivery"])),
        Row(WORKLOAD, naive, "delivered %", ref["delivered_pct"]),
    ]  # fmt: skip


def run_capacity(workdir: Path, *, quick: bool) -> list[Row]:
    seconds = 3.0 if quick else 10.0
    got = _server(workdir, seconds, CAPACITY_RATES)
    floor = _reference(workdir, seconds, "benchlib.floor", CAPACITY_RATES)
    rows = []
    for mine, base in zip(got, floor, strict=True):
        per_sec = mine["rate"] * SUBSCRIBERS
        case = f"{per_sec / 1000:g}k deliveries/s ({mine['rate']:g} msg/s × {SUBSCRIBERS:,})"
        extra = {"server": mine, "floor": base}
        # Beyond the machine: the floor misses the bound too, or the generator cannot keep up;
        # then the socket p99 measures the generator, and only CPU per delivery says anything.
        beyond = (base["arrival_p99_ms"] > CAPACITY_P99_MS or base["delivered_pct"] < 100
                  or max(mine["generator_cpu_pct"], base["generator_cpu_pct"]) > 90)  # fmt: skip
        whole = mine["delivered_pct"] >= 100 and mine["gaps"] + mine["duplicates"] == 0
        rows += [
            Row(CAPACITY, case, "p99 ms at socket", mine["arrival_p99_ms"],
                base["arrival_p99_ms"], "floor: {ref:.2f} ms",
                "" if beyond else f"≤ {CAPACITY_P99_MS:g}", extra=extra,
                note="" if whole else "not all delivered"),
            Row(CAPACITY, case, "passes (socket p99 ≤ 50 ms, all delivered)",
                None if beyond else float(whole and mine["arrival_p99_ms"] <= CAPACITY_P99_MS),
                None, "beyond what the generator (or the floor) can offer here" if beyond
                else "1 = yes", "" if beyond else "≥ 1"),
            Row(CAPACITY, case, "CPU per delivery ÷ floor's", _ratio(mine["cpu_us_per_delivery"],
                base["cpu_us_per_delivery"]), None,
                f"{mine['cpu_us_per_delivery']:.2f} µs vs floor {base['cpu_us_per_delivery']:.2f} µs",
                f"≤ {TARGET_CPU_RATIO:g}"),
            Row(CAPACITY, case, "generator CPU %", mine["generator_cpu_pct"],
                base["generator_cpu_pct"], "during the floor: {ref:.0f} %"),
        ]  # fmt: skip
    return rows
