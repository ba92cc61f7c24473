"""Durable sends: acknowledged messages/s with ``synchronous=FULL``, at 10 and 100 senders.

A fresh server (pinned to the server core) and N WebSocket connections of the owner post ~300-byte
plain messages with no mention to the demo project, so each commit holds the message, its delivery
row to the lead agent and its event. The offered load is open-loop (``OFFERED_PER_SEC`` in total,
above the target), and a connection keeps sending while its earlier sends commit. Before it, on
another fresh server, a stepped search finds the *sustained* rate (every message acked, ack p99
under ``SUSTAINED_P99_MS``), because an overloaded server's throughput is not its capacity.
Reported per case: acknowledged messages/s inside the measurement window (after a warm-up), ack latency from
the scheduled send time (p50/p99), whether the offered load was really sent, the group-commit
batch statistics from ``/healthz`` and the generator's own CPU use. Reference, in the same run:
the same rows through raw ``sqlite3`` (:mod:`benchlib.sqliteref`); issue 18's target is acked
sends/s ÷ its batched rate, and the server's CPU per acknowledged send (both threads, from
``/proc``) is shown against its CPU per message, the figure that holds on a shared machine.
"""

from __future__ import annotations

import asyncio
import shutil
import time
from pathlib import Path

from benchlib.opensend import OpenLoopSender
from benchlib.serverproc import RoomServer, cpu_seconds
from benchlib.sqliteref import BATCH
from benchlib.sqliteref import measure as measure_sqlite
from benchlib.stats import Row, quantiles
from benchlib.wsraw import WsClient

WORKLOAD = "durable sends"
TARGET_PER_SEC = 10_000
ISSUE_NAIVE_PER_SEC = 3_000  # "a naive per-message-commit server manages ~3,000 here"

OFFERED_PER_SEC = 14_000
SENDERS = (10, 100)
# The sustained rate: the highest of these offered rates the server keeps up with (all acked,
# ack p99 under SUSTAINED_P99_MS), each held for a few seconds on a fresh server.
SEARCH_PER_SEC = (500, 1000, 1500, 2000, 2500, 3000, 4000, 5000, 6000, 8000, 10_000, 12_000)
SUSTAINED_P99_MS = 250.0


async def _connect(server: RoomServer, n: int, sender: OpenLoopSender | None) -> list[WsClient]:
    clients = []
    for _ in range(n):
        client = WsClient(sender.on_text if sender else (lambda *_: None))
        await client.connect("127.0.0.1", server.port, headers=server.headers)
        clients.append(client)
    return clients


async def _case(
    server: RoomServer, senders: int, rate: float, seconds: float, warmup: float
) -> tuple[dict[str, float], dict[str, object]]:
    sender = OpenLoopSender([], rate, prefix=f"d{senders}x")
    sender.clients = await _connect(server, senders, sender)
    # Warm the server (roster cache, member lookups) before the clock starts.
    warm = OpenLoopSender(await _connect(server, senders, None), 2000, prefix=f"w{senders}x")
    for client in warm.clients:
        client.on_text = warm.on_text
    await warm.run(0.25)
    await warm.drain(5)
    for client in warm.clients:
        client.close()

    async def writer_stats() -> tuple[dict[str, int], float]:
        # In a thread: an overloaded server answers late, and the senders must not wait for it.
        try:
            stats = await asyncio.to_thread(server.healthz, 60.0)
        except OSError:
            return {"batches": 0, "jobs": 0, "largest_batch": 0}, time.monotonic()
        return stats["writer"], time.monotonic()

    before, _ = await writer_stats()
    run = asyncio.ensure_future(sender.run(seconds + warmup))
    await asyncio.sleep(warmup + 0.05)
    cpu_mid, wall_mid = time.process_time(), time.monotonic()
    srv_mid = cpu_seconds(server.pid)
    mid, mid_at = await writer_stats()
    log = await run
    cpu_end, wall_end = time.process_time(), time.monotonic()
    srv_end = cpu_seconds(server.pid)
    after, after_at = await writer_stats()
    await sender.drain(15)
    for client in sender.clients:
        client.close()

    win_start = log.start + int(warmup * 1e9)
    win_end = log.start + int((seconds + warmup) * 1e9)
    acks_in_window = sum(1 for t in log.ack_at if win_start <= t < win_end)
    lat = [lat for lat, s in zip(log.ack_lat, log.ack_sched, strict=True) if s >= win_start]
    p50, p99 = quantiles(lat, (50, 99)) if lat else (float("nan"), float("nan"))
    lag99 = quantiles(log.lag, (99,))[0] if log.lag else 0.0
    seqs = sorted(log.ack_seq)
    duplicates = len(seqs) - len(set(seqs))
    batches = after["batches"] - mid["batches"]
    jobs = after["jobs"] - mid["jobs"]
    figures = {
        "acked_per_sec": acks_in_window / seconds,
        "offered_per_sec": rate,
        "sent_per_sec": log.sent / (seconds + warmup),
        "p50_ms": p50 / 1e6,
        "p99_ms": p99 / 1e6,
        "lag_p99_ms": lag99 / 1e6,
        "unacked": log.sent - log.acked - log.errors,
        "errors": log.errors,
        "duplicate_seqs": duplicates,
        "avg_batch": jobs / batches if batches > 0 else float("nan"),
        "batches_per_sec": batches / (after_at - mid_at),
        "largest_batch": after["largest_batch"],
        "generator_cpu_pct": 100 * (cpu_end - cpu_mid) / (wall_end - wall_mid),
        "warmup_jobs": mid["jobs"] - before["jobs"],
        "server_loop_cpu_pct": 100 * (srv_end["main"] - srv_mid["main"]) / (wall_end - wall_mid),
        "server_threads_cpu_pct": 100
        * (srv_end["threads"] - srv_mid["threads"])
        / (wall_end - wall_mid),
        # The server's CPU (both threads) per send acknowledged meanwhile: what to hold against
        # the reference's CPU per message when the machine is shared.
        "server_cpu_us_per_ack": 1e6
        * (srv_end["main"] + srv_end["threads"] - srv_mid["main"] - srv_mid["threads"])
        / max(1, sum(1 for t in log.ack_at if int(wall_mid * 1e9) <= t < int(wall_end * 1e9))),
    }
    detail = {"first_error": log.first_error.decode(errors="replace"), **figures}
    return figures, detail


async def _sustained(server: RoomServer, senders: int, step_secs: float) -> tuple[float, float]:
    """The highest offered rate of ``SEARCH_PER_SEC`` kept up with, and its ack p99 (ms)."""
    clients = await _connect(server, senders, None)
    best, best_p99 = 0.0, float("nan")
    for rate in SEARCH_PER_SEC:
        sender = OpenLoopSender(clients, rate, prefix=f"c{rate}x")
        for client in clients:
            client.on_text = sender.on_text
        log = await sender.run(step_secs)
        await sender.drain(5)
        (p99,) = quantiles(log.ack_lat, (99,)) if log.ack_lat else (float("inf"),)
        if log.errors or log.acked < log.sent or p99 / 1e6 > SUSTAINED_P99_MS:
            break
        best, best_p99 = rate, p99 / 1e6
    for client in clients:
        client.close()
    return best, best_p99


def _fresh_server(workdir: Path, name: str) -> RoomServer:
    data = workdir / name
    shutil.rmtree(data, ignore_errors=True)
    return RoomServer(data).start()


def _ratio(value: float | None, reference: float | None) -> float | None:
    return value / reference if value is not None and reference else None


def run(workdir: Path, *, quick: bool) -> list[Row]:
    seconds, warmup = (3.0, 1.0) if quick else (10.0, 2.0)
    step = 1.5 if quick else 3.0
    ref = measure_sqlite(1.0 if quick else 3.0, workdir)
    rows: list[Row] = []
    for senders in SENDERS:
        server = _fresh_server(workdir, f"durable-{senders}-search")
        try:
            sustained, sustained_p99 = asyncio.run(_sustained(server, senders, step))
        finally:
            server.stop()
            shutil.rmtree(server.data, ignore_errors=True)
        server = _fresh_server(workdir, f"durable-{senders}")
        try:
            fig, detail = asyncio.run(_case(server, senders, OFFERED_PER_SEC, seconds, warmup))
        finally:
            server.stop()
            shutil.rmtree(server.data, ignore_errors=True)
        rows.append(
            Row(WORKLOAD, f"{senders} senders, stepped offered load", "sustained msg/s",
                sustained, None, (f"ack p99 {sustained_p99:.0f} ms there" if sustained
                else f"not even {SEARCH_PER_SEC[0]}/s") + "; a step fails on any unacked"
                f" message or ack p99 > {SUSTAINED_P99_MS:.0f} ms")
        )  # fmt: skip
        case = f"{senders} senders, {OFFERED_PER_SEC:,}/s offered"
        target = f"≥ {TARGET_PER_SEC}" if senders == 10 else ""
        rows += [
            Row(WORKLOAD, case, "acked msg/s", fig["acked_per_sec"], ref["per_message"],
                "raw sqlite3, 1 txn/msg: {ref:,.0f}/s", target, extra=detail),
            # The issue's target as a ratio, for machines slower or faster than the one it
            # was written on: 10,000/s where a per-message-commit server managed ~3,000.
            Row(WORKLOAD, case, "acked ÷ raw 1-txn/msg reference", _ratio(fig["acked_per_sec"],
                ref["per_message"]), None, "the issue's ratio: 10,000/s vs ~3,000/s there",
                f"≥ {TARGET_PER_SEC / ISSUE_NAIVE_PER_SEC:.2f}" if senders == 10 else ""),
            # Issue 18's target: the server against the same rows written by raw sqlite3 in
            # group commits, which is what a CPU-bound group-commit writer can approach.
            Row(WORKLOAD, case, "acked ÷ raw sqlite batched", _ratio(fig["acked_per_sec"],
                ref["batched"]), None, f"same rows, {BATCH} per txn: {ref['batched']:,.0f}/s",
                "≥ 0.85" if senders == 10 else ""),
            Row(WORKLOAD, case, "server CPU µs per acked msg", fig["server_cpu_us_per_ack"],
                ref["batched_cpu_us"], f"raw sqlite3, {BATCH}/txn: {{ref:.0f}} µs CPU per msg"),
            # The same ratio by CPU: what the rates' ratio is when both are CPU-bound on their
            # core, and unlike the rates it holds while neighbours use the disk and the cores.
            Row(WORKLOAD, case, "raw sqlite batched ÷ server, CPU per msg", _ratio(
                ref["batched_cpu_us"], fig["server_cpu_us_per_ack"]), None,
                "the target's ratio by CPU time, not by rate"),
            Row(WORKLOAD, case, "offered msg/s sent", fig["sent_per_sec"], None,
                f"schedule {OFFERED_PER_SEC:,}/s; tick lag p99 {fig['lag_p99_ms']:.2f} ms",
                f"≥ {0.98 * OFFERED_PER_SEC:.0f}"),
            Row(WORKLOAD, case, "ack latency p50 ms", fig["p50_ms"]),
            Row(WORKLOAD, case, "ack latency p99 ms", fig["p99_ms"]),
            Row(WORKLOAD, case, "errors", fig["errors"], target="≤ 0"),
            Row(WORKLOAD, case, "backlog: not acked 15 s after the last send", fig["unacked"],
                None, "an overloaded server's queue (nothing lost: see sustained rows)"),
            Row(WORKLOAD, case, "writer avg batch (jobs)", fig["avg_batch"], None,
                f"{fig['batches_per_sec']:,.0f} commits/s; largest {fig['largest_batch']:.0f}"),
            Row(WORKLOAD, case, "generator CPU %", fig["generator_cpu_pct"], None,
                "of its own core; ≥ 90 % means generator-bound"),
        ]  # fmt: skip
    rows += [
        Row(WORKLOAD, "reference: raw sqlite3", "msg/s, 1 txn per message", ref["per_message"],
            reference_label="same rows, synchronous=FULL, server core"),
        Row(WORKLOAD, "reference: raw sqlite3", f"msg/s, {BATCH} per txn", ref["batched"],
            reference_label="same rows, synchronous=FULL, server core"),
        Row(WORKLOAD, "reference: raw sqlite3", f"CPU µs per msg, {BATCH} per txn",
            ref["batched_cpu_us"], reference_label="search index on, as the server's default"),
    ]  # fmt: skip
    return rows
