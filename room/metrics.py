"""Prometheus metrics at ``/metrics``, for server admins only (a signed-in admin, or an admin's
bearer token is not a thing: agents' tokens are refused).

Read at scrape time, never kept twice: live numbers from the objects that own them (the hub's
connections and subscribers, the writer's batch and commit-latency histograms, messages
published since the start) and ledger, turn and model-call totals from the database (one read
job; those survive restarts, so they count since the database began, and a purge lowers them),
and the last backup's time and age from the data folder's note (absent before the first).
Rendered with ``prometheus_client``'s exposition format from a registry built per scrape: no
module-level registry for tests to reset.
"""

from __future__ import annotations

import asyncio
import dataclasses
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from room.infra import boot
from room.services import Services
from room.store.db import BATCH_BOUNDS, COMMIT_BOUNDS, WriterStats

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclass(frozen=True, slots=True)
class Totals:
    deliveries: list[tuple[str, int]]
    turns: list[tuple[str, int]]
    calls: list[tuple[str, bool, int, int, int]]  # provider, ok, calls, tokens in, tokens out
    last_backup_at: float | None = None  # room.infra.boot's last-backup.json (docs/backup.md)
    # A cluster's node: the projects it is home of, and the leases it holds unlapsed.
    homes: int | None = None
    leases_held: int | None = None


def read_totals(conn: sqlite3.Connection) -> Totals:
    return Totals(
        deliveries=conn.execute("SELECT state, count(*) FROM deliveries GROUP BY state").fetchall(),
        turns=conn.execute("SELECT state, count(*) FROM turns GROUP BY state").fetchall(),
        calls=[
            (provider, bool(ok), calls, tokens_in or 0, tokens_out or 0)
            for provider, ok, calls, tokens_in, tokens_out in conn.execute(
                "SELECT provider, ok, count(*), sum(input_tokens), sum(output_tokens)"
                " FROM model_requests GROUP BY provider, ok"
            )
        ],
    )


def _node_counts(conn: sqlite3.Connection, node: str, now: float) -> tuple[int, int]:
    homes = conn.execute(
        "SELECT count(*) FROM projects WHERE home_node = ? AND state != 'purged'", (node,)
    ).fetchone()[0]
    held = conn.execute(
        "SELECT count(*) FROM leases WHERE holder = ? AND expires_at > ?", (node, now)
    ).fetchone()[0]
    return int(homes), int(held)


def _histogram(
    name: str, doc: str, bounds: tuple[float, ...], counts: list[int], total: float
) -> HistogramMetricFamily:
    buckets: list[tuple[str, float]] = []
    running = 0
    for bound, count in zip((*bounds, float("inf")), counts, strict=True):
        running += count
        buckets.append(("+Inf" if bound == float("inf") else repr(float(bound)), running))
    return HistogramMetricFamily(name, doc, buckets=buckets, sum_value=total)


class _Scrape(Collector):
    def __init__(self, core: Services, totals: Totals, stats: WriterStats) -> None:
        self.core, self.totals, self.stats = core, totals, stats

    def collect(self) -> Iterator[Metric]:
        hub, stats, totals = self.core.hub, self.stats, self.totals
        yield GaugeMetricFamily(
            "room_connections", "Open WebSocket connections.", value=hub.connections
        )
        yield GaugeMetricFamily(
            "room_subscribers", "Live project subscriptions.", value=hub.subscriber_count()
        )
        yield CounterMetricFamily(
            "room_messages",
            "New messages published since the start (sends, agent replies, notices).",
            value=hub.messages,
        )
        deliveries = GaugeMetricFamily(
            "room_deliveries", "Delivery ledger rows by state.", labels=["state"]
        )
        for state, count in totals.deliveries:
            deliveries.add_metric([state], count)
        yield deliveries
        yield _histogram(
            "room_writer_batch_size",
            "Write jobs committed together in one transaction.",
            BATCH_BOUNDS,
            stats.batch_counts,
            float(stats.jobs),
        )
        yield _histogram(
            "room_writer_commit_seconds",
            "Time to run and commit one group of writes.",
            COMMIT_BOUNDS,
            stats.commit_counts,
            stats.commit_seconds,
        )
        yield CounterMetricFamily(
            "room_writer_retries", "Batches run again job by job.", value=stats.retries
        )
        turns = CounterMetricFamily("room_turns", "Agent turns by state.", labels=["state"])
        for state, count in totals.turns:
            turns.add_metric([state], count)
        yield turns
        calls = CounterMetricFamily(
            "room_model_calls", "Model requests by provider and outcome.",
            labels=["provider", "outcome"],
        )  # fmt: skip
        tokens = CounterMetricFamily(
            "room_model_tokens", "Tokens the providers reported, by provider and direction.",
            labels=["provider", "direction"],
        )  # fmt: skip
        token_sums: dict[tuple[str, str], int] = {}
        for provider, ok, count, tokens_in, tokens_out in totals.calls:
            calls.add_metric([provider, "ok" if ok else "failed"], count)
            for direction, value in (("input", tokens_in), ("output", tokens_out)):
                key = (provider, direction)
                token_sums[key] = token_sums.get(key, 0) + value
        for (provider, direction), value in sorted(token_sums.items()):
            tokens.add_metric([provider, direction], value)
        yield calls
        yield tokens
        if self.core.relay is not None:  # several servers on one PostgreSQL database
            relay = self.core.relay
            yield from _relay_metrics(relay.stats(), self.core.settings.bus_url, relay.lag())
            leases = self.core.db.leases
            yield CounterMetricFamily(
                "room_leases_lost",
                "Agent-turn leases this server found adopted by another server (at a renewal, "
                "or refused when opening a turn).",
                value=leases.lost,
            )
            yield CounterMetricFamily(
                "room_fence_refusals",
                "Writes of this server's agent turns refused by the fence (lease_lost): the "
                "project's lease had been adopted by another server.",
                value=leases.refused,
            )
            yield CounterMetricFamily(
                "room_workspace_lock_refusals",
                "Times a turn or research run could not open here because another server held "
                "its project's shared workspace lock (one paused past the lease this server "
                "adopted): the work waited and was tried again.",
                value=leases.workspace_refused,
            )
        if totals.homes is not None and totals.leases_held is not None:
            yield GaugeMetricFamily(
                "room_projects_home",
                "Projects this server is the home node of (their agents run here).",
                value=totals.homes,
            )
            yield GaugeMetricFamily(
                "room_leases_held",
                "Projects whose agent-turn lease this server holds, unlapsed.",
                value=totals.leases_held,
            )
        if totals.last_backup_at is not None:
            yield GaugeMetricFamily(
                "room_backup_last_timestamp_seconds",
                "When the last `room backup` of this data folder was written (Unix time).",
                value=totals.last_backup_at,
            )
            yield GaugeMetricFamily(
                "room_backup_age_seconds",
                "Seconds since the last `room backup` of this data folder was written.",
                value=max(0.0, time.time() - totals.last_backup_at),
            )


def _relay_metrics(
    stats: dict[str, float],
    bus_url: str | None,
    lag: tuple[tuple[float, ...], list[int], float],
) -> Iterator[Metric]:
    """The relay between the servers on one database and their bus (docs/cluster.md)."""
    if bus_url is not None:
        bounds, counts, total = lag
        yield _histogram(
            "room_bus_lag_seconds",
            "From another server's commit to this server hearing its event hint (their clocks).",
            bounds,
            counts,
            total,
        )
        yield GaugeMetricFamily(
            "room_bus_up", "1 while this server's NATS bus is connected.", value=stats["bus_up"]
        )
        yield GaugeMetricFamily(
            "room_bus_peers",
            "Other servers heard on the bus within the last 6 s (their heartbeats).",
            value=stats["peers"],
        )
        for name, key, text in (
            (
                "room_bus_hints_published",
                "bus_published",
                "Hints (and heartbeats) this server sent on the bus.",
            ),
            ("room_bus_hints_received", "bus_received", "Hints heard from the other servers."),
            ("room_bus_hints_unsent", "bus_unsent", "Hints not sent: the bus was down."),
            ("room_bus_events_applied", "hints_applied", "Events published from a hint."),
            ("room_bus_hints_dropped", "hints_dropped", "Hints of an event already published."),
            (
                "room_bus_peer_checks",
                "peer_checks",
                "Checks of the projects' last seqs asked by a server whose bus came (back) up.",
            ),
        ):
            yield CounterMetricFamily(name, text, value=stats[key])
    yield CounterMetricFamily(
        "room_relay_refills",
        "Catch-ups of a project's events from the database (a gap, the poll, a bus sweep).",
        value=stats["refills"],
    )
    yield GaugeMetricFamily(
        "room_relay_projects", "Projects with live subscribers here.", value=stats["followed"]
    )


async def render(core: Services) -> bytes:
    totals = await core.db.read(read_totals)
    last = await asyncio.to_thread(boot.read_last_backup, core.settings.data)
    if last is not None:
        totals = dataclasses.replace(totals, last_backup_at=float(last["at"]))
    node = core.db.node
    if core.relay is not None and node is not None:  # a cluster's node (docs/cluster.md)
        homes, held = await core.db.read(lambda conn: _node_counts(conn, node, time.time()))
        totals = dataclasses.replace(totals, homes=homes, leases_held=held)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Scrape(core, totals, core.db.stats))
    data: Any = generate_latest(registry)
    return bytes(data)
