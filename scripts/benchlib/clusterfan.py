"""Fan-out over a cluster: 1,000 subscribers × 50 msg/s on 2 nodes vs the same on 1 node.

Issue 27's figures, in one run, on one private PostgreSQL cluster and one private
``nats-server`` (``tests/support/postgres.py`` and ``nats.py``, as the cluster tests start them;
both started from this process, so they share the generator's core):

* **1 node**: one ``room serve --database … --bus …`` on a fresh database; the 1,000 subscribers
  (:mod:`benchlib.subscribers`) and the open-loop sender (:mod:`benchlib.opensend`, ~300-byte
  probe bodies) all on it — :mod:`benchlib.fanout`'s case, on PostgreSQL and with the bus;
* **2 nodes**: two such servers on another fresh database and the same bus, the sender and half
  of the subscribers on node A, the other half on node B: B's subscribers get each message over
  the bus (the commit's hint carrying the frame, :mod:`room.actions.relay`), A's from A itself.

The 50 msg/s comparison sets both cases up at once (the 2-node case on a second nats-server:
two clusters on one bus would hear each other's hints) and measures them alternately,
``ROUNDS`` stretches each, so that the machine's load — which swings within a minute on a shared
machine — weighs on both alike; the ladder measures one case after the other.

Both nodes are pinned to the server core (``cores.SERVER_CPU``), as the single node is: on a
2-core machine the other core is the generator's, so the two cases have the same CPU budget and
the 2-node figures measure what the cluster costs per delivery, not what a second machine adds
(the sizing model in docs/cluster.md turns the per-core figures into nodes).

Reported: the socket p99 (kernel arrival timestamp minus send time) of the cross-node
subscribers ÷ the single node's (target ≤ 1.5), of the same-node half too, and cross-node ÷
same-node (both halves of one case: measured in the same minutes, so the machine's load, which
swings between the cases run minutes apart, weighs on both alike); the total CPU per
delivery of the server processes (utime + stime from ``/proc`` of every node, over the frames
delivered) ÷ the single node's (target ≤ 1.3), with PostgreSQL's and nats-server's CPU beside it;
the bus's own hop, commit on A → hint heard on B, from B's ``room_bus_lag_seconds`` histogram
(p50 and p99 as the upper bound of their bucket): the hop alone, without the sending path
before the commit or either node's fan-out;
and a capacity ladder (``CAPACITY_RATES`` messages/s to the 1,000 subscribers): the highest
deliveries/s whose socket p99 stays ≤ 50 ms with everything delivered, 2 nodes ÷ 1 node. The
generator's share of its core is reported with every step: above ~90 % the step measures the
generator, not the servers.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import time
from array import array
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchlib.fanout import CAPACITY_P99_MS, STRAGGLER_SECS, WARMUP_SECS, _stragglers
from benchlib.opensend import OpenLoopSender
from benchlib.pgstore import _without_pytest
from benchlib.serverproc import RoomServer, cpu_seconds, http_request
from benchlib.stats import Row, quantiles
from benchlib.subscribers import Recorder, Subscriber, open_many
from benchlib.wsraw import WsClient

WORKLOAD = "cluster fan-out"
SUBSCRIBERS = 1000
RATE_PER_SEC = 50.0
CAPACITY_RATES = (10.0, 25.0, 50.0, 100.0)  # msg/s × 1,000 subscribers: 10k … 100k deliveries/s
TARGET_P99_RATIO = 1.5
TARGET_CPU_RATIO = 1.3
NODE_ENV = {"ROOM_CREDENTIAL_RECHECK_SECS": "600"}
ROUNDS = 4  # the 50 msg/s comparison: each case measured in this many stretches, alternately


def _tree_cpu(root: int | None) -> float:
    """CPU seconds (utime + stime) of a process and its live descendants, from /proc."""
    if root is None:
        return 0.0
    tick = os.sysconf("SC_CLK_TCK")
    parent: dict[int, int] = {}
    used: dict[int, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        pid = int(entry)
        parent[pid] = int(fields[1])
        used[pid] = (int(fields[11]) + int(fields[12])) / tick
    total, todo = 0.0, [root]
    children: dict[int, list[int]] = {}
    for pid, ppid in parent.items():
        children.setdefault(ppid, []).append(pid)
    while todo:
        pid = todo.pop()
        total += used.get(pid, 0.0)
        todo += children.get(pid, [])
    return total


@contextmanager
def _backends() -> Iterator[tuple[Any, Any]]:
    """A private PostgreSQL cluster and a private nats-server (the tests' own)."""
    _without_pytest()
    from tests.support.nats import NatsServer, find_binary
    from tests.support.postgres import PostgresCluster, find_bin_dir

    cluster = PostgresCluster(find_bin_dir()).start()
    try:
        bus = NatsServer(find_binary()).start()
        try:
            yield cluster, bus
        finally:
            bus.stop()
    finally:
        cluster.stop()


def _nodes(workdir: Path, name: str, url: str, bus_url: str, count: int) -> list[RoomServer]:
    env = {**NODE_ENV, "ROOM_BUS_URL": bus_url}
    nodes: list[RoomServer] = []
    try:
        for i in range(count):  # one after the other: the first seeds the database
            data = workdir / f"{name}-{i}"
            shutil.rmtree(data, ignore_errors=True)
            nodes.append(RoomServer(data, env=env, database_url=url).start())
    except BaseException:
        for node in nodes:
            node.stop()
        raise
    return nodes


@dataclass
class _Setup:
    """One case's nodes with their subscribers (spread evenly, by node) and the sender's
    connection (on the first node)."""

    nodes: list[RoomServer]
    recorders: list[Recorder]
    groups: list[list[Subscriber]]
    client: WsClient

    def reset(self) -> None:
        for recorder in self.recorders:
            recorder.read, recorder.arrival = array("q"), array("q")
        for group in self.groups:
            for s in group:
                s.received = s.gaps = s.duplicates = 0

    def close(self) -> None:
        for group in self.groups:
            for s in group:
                s.client.close()
        self.client.close()


async def _open(nodes: list[RoomServer]) -> _Setup:
    recorders = [Recorder() for _ in nodes]
    groups: list[list[Subscriber]] = []
    share = SUBSCRIBERS // len(nodes)
    for i, (node, recorder) in enumerate(zip(nodes, recorders, strict=True)):
        n = share if i < len(nodes) - 1 else SUBSCRIBERS - share * (len(nodes) - 1)
        groups.append(await open_many(recorder, node.port, node.headers, n))
    client = WsClient(lambda payload, now, arrival: None)
    await client.connect("127.0.0.1", nodes[0].port, headers=nodes[0].headers)
    return _Setup(nodes, recorders, groups, client)


async def _run_step(
    setup: _Setup, others: dict[str, int | None], rate: float, seconds: float, name: str
) -> dict[str, Any]:
    sender = OpenLoopSender([setup.client], rate, prefix=name)
    setup.client.on_text = sender.on_text
    return await _step(setup.nodes, others, setup.groups, setup.recorders, sender, seconds)


async def _measure(
    nodes: list[RoomServer], others: dict[str, int | None], seconds: float, rates: tuple[float, ...]
) -> list[dict[str, Any]]:
    """One result per rate, on the same subscribers."""
    setup = await _open(nodes)
    await asyncio.sleep(1.0)
    out = []
    for step, rate in enumerate(rates):
        setup.reset()
        out.append(await _run_step(setup, others, rate, seconds, f"c{len(nodes)}x{step}x"))
    setup.close()
    return out


async def _alternate(
    one: list[RoomServer],
    two: list[RoomServer],
    others: tuple[dict[str, int | None], dict[str, int | None]],
    seconds: float,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The 1-node and the 2-node case, both set up at once (each on its own database), measured
    alternately, ``ROUNDS`` stretches of ``seconds / ROUNDS`` each: whatever the machine's load
    does meanwhile, it weighs on both cases alike. One result per case, over all its rounds."""
    setups = (await _open(one), await _open(two))
    await asyncio.sleep(1.0)
    lag0 = [_lag_buckets(node) for node in two[1:]]
    rounds: tuple[list[dict[str, Any]], list[dict[str, Any]]] = ([], [])
    for step in range(ROUNDS):
        for setup, theirs, done in zip(setups, others, rounds, strict=True):
            # Not reset between rounds: the latencies and counts add up over them.
            name = f"a{len(setup.nodes)}x{step}x"
            done.append(await _run_step(setup, theirs, RATE_PER_SEC, seconds / ROUNDS, name))
    lag1 = [_lag_buckets(node) for node in two[1:]]
    merged = [_merge(setup, done) for setup, done in zip(setups, rounds, strict=True)]
    for q, key in ((0.5, "bus_lag_p50_ms"), (0.99, "bus_lag_p99_ms")):
        found = [_lag_quantile(b, a, q) for b, a in zip(lag0, lag1, strict=True)]
        merged[1][key] = max(found, default=float("nan")) * 1000
    for setup in setups:
        setup.close()
    return merged[0], merged[1]


def _merge(setup: _Setup, rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """One case's rounds as one result: the last round's latencies (the recorders kept every
    round's), the counts and CPU summed over the rounds."""
    out = dict(rounds[-1])
    sent = sum(r["sent"] for r in rounds)
    wall = sum(r["wall_s"] for r in rounds)
    spent: dict[str, float] = {}
    for r in rounds:
        for k, v in r["cpu_s"].items():
            spent[k] = spent.get(k, 0.0) + v
    everyone = [s for group in setup.groups for s in group]
    received = sum(s.received for s in everyone)
    servers = sum(v for k, v in spent.items() if k.startswith("node"))
    nodes = []
    for group, node in zip(setup.groups, out["nodes"], strict=True):
        got = sum(s.received for s in group)
        nodes.append({
            **node,
            "delivered_pct": 100.0 * got / (sent * len(group)) if sent else 0.0,
            "faults": float(sum(s.gaps + s.duplicates + s.client.closed for s in group)),
        })  # fmt: skip
    out.update(
        nodes=nodes,
        sent=sent,
        received=float(received),
        delivered_pct=100.0 * received / (sent * len(everyone)) if sent else 0.0,
        faults=sum(n["faults"] for n in nodes),
        generator_cpu_pct=sum(r["generator_cpu_pct"] * r["wall_s"] for r in rounds) / wall,
        cpu_us_per_delivery=1e6 * servers / received if received else float("nan"),
        cpu_s=spent,
        wall_s=wall,
        deliveries_per_sec=received / wall,
        rounds=len(rounds),
    )
    return out


def _lag_buckets(node: RoomServer) -> dict[float, float]:
    """The node's ``room_bus_lag_seconds`` histogram so far: upper bound → cumulative count."""
    status, _, raw = http_request(node.port, "GET", "/metrics", headers=node.headers)
    if status != 200:
        return {}
    found: dict[float, float] = {}
    for line in raw.decode().splitlines():
        if line.startswith('room_bus_lag_seconds_bucket{le="'):
            bound, count = line[len('room_bus_lag_seconds_bucket{le="') :].split('"} ')
            found[float(bound)] = float(count)
    return found


def _lag_quantile(before: dict[float, float], after: dict[float, float], q: float) -> float:
    """The upper bound (seconds) of the bucket holding quantile ``q`` of the hints heard
    between the two readings; NaN when none were."""
    bounds = sorted(after)
    total = after.get(float("inf"), 0.0) - before.get(float("inf"), 0.0)
    if total <= 0:
        return float("nan")
    for bound in bounds:
        if after[bound] - before.get(bound, 0.0) >= q * total:
            return bound
    return float("inf")


def _cpu(nodes: list[RoomServer], others: dict[str, int | None]) -> dict[str, float]:
    used = {f"node{i}": sum(cpu_seconds(n.pid).values()) for i, n in enumerate(nodes)}
    for name, pid in others.items():
        used[name] = _tree_cpu(pid)
    return used


async def _step(
    nodes: list[RoomServer],
    others: dict[str, int | None],
    groups: list[list[Subscriber]],
    recorders: list[Recorder],
    sender: OpenLoopSender,
    seconds: float,
) -> dict[str, Any]:
    async def arm() -> None:
        await asyncio.sleep(WARMUP_SECS)
        for recorder in recorders:
            recorder.active = True

    everyone = [s for group in groups for s in group]
    # What the subscribers had before (earlier rounds of an alternate case add up).
    before = sum(s.received for s in everyone) // len(everyone)
    lag0 = [_lag_buckets(node) for node in nodes[1:]]
    cpu0, wall0, used0 = time.process_time(), time.monotonic(), _cpu(nodes, others)
    armer = asyncio.ensure_future(arm())
    log = await sender.run(seconds + WARMUP_SECS)
    await sender.drain(STRAGGLER_SECS)
    await _stragglers(everyone, before + log.sent)
    for recorder in recorders:
        recorder.active = False
    await armer
    cpu1, wall1, used1 = time.process_time(), time.monotonic(), _cpu(nodes, others)
    lag1 = [_lag_buckets(node) for node in nodes[1:]]
    spent = {k: used1[k] - used0[k] for k in used0}
    servers = sum(v for k, v in spent.items() if k.startswith("node"))
    received = sum(s.received for s in everyone)
    expected = log.sent * len(everyone)
    per_node = []
    for group, recorder in zip(groups, recorders, strict=True):
        (a99,) = quantiles(recorder.arrival, (99,)) if recorder.arrival else (float("nan"),)
        (r99,) = quantiles(recorder.read, (99,)) if recorder.read else (float("nan"),)
        got = sum(s.received for s in group)
        per_node.append({
            "arrival_p99_ms": a99 / 1e6,
            "read_p99_ms": r99 / 1e6,
            "delivered_pct": 100.0 * got / (log.sent * len(group)) if log.sent else 0.0,
            "faults": float(sum(s.gaps + s.duplicates + s.client.closed for s in group)),
        })  # fmt: skip
    every = array("q")
    for recorder in recorders:
        every.extend(recorder.arrival)
    (all99,) = quantiles(every, (99,)) if every else (float("nan"),)
    return {
        "rate": sender.log.rate,
        "nodes": per_node,
        "arrival_p99_ms": all99 / 1e6,
        "delivered_pct": 100.0 * received / expected if expected else 0.0,
        "faults": sum(n["faults"] for n in per_node),
        "sent": float(log.sent),
        "received": float(received),
        "generator_cpu_pct": 100 * (cpu1 - cpu0) / (wall1 - wall0),
        "cpu_us_per_delivery": 1e6 * servers / received if received else float("nan"),
        "cpu_s": spent,
        "wall_s": wall1 - wall0,
        "deliveries_per_sec": received / (wall1 - wall0),
        # The bus's hop as the receiving nodes timed it (commit on A → hint heard on B), at
        # the resolution of room_bus_lag_seconds's buckets: a bucket's upper bound.
        "bus_lag_p50_ms": max((_lag_quantile(b, a, 0.5) for b, a in zip(lag0, lag1, strict=True)),
                              default=float("nan")) * 1000,
        "bus_lag_p99_ms": max((_lag_quantile(b, a, 0.99) for b, a in zip(lag0, lag1, strict=True)),
                              default=float("nan")) * 1000,
    }  # fmt: skip


def _interleaved(
    workdir: Path, cluster: Any, bus: Any, seconds: float
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Both cases up at once, each on its own database and its own nats-server. The subjects
    name each database's cluster id (docs/cluster.md, "Subjects"), so one server could carry
    both; one each keeps each case's NATS CPU its own (``others``). Before the ids, one shared
    server carried the 1-node case's events to the 2-node case's sockets."""
    from tests.support.nats import NatsServer, find_binary

    one: list[RoomServer] = []
    two: list[RoomServer] = []
    with NatsServer(find_binary()) as bus2:
        try:
            one = _nodes(workdir, "cluster1", cluster.dsn(cluster.create_database()), bus.url, 1)
            two = _nodes(workdir, "cluster2", cluster.dsn(cluster.create_database()), bus2.url, 2)
            others = (
                {"postgresql": cluster.pid, "nats": bus._proc.pid if bus._proc else None},
                {"postgresql": cluster.pid, "nats": bus2._proc.pid if bus2._proc else None},
            )
            return asyncio.run(_alternate(one, two, others, seconds))
        finally:
            for node in one + two:
                node.stop()
                shutil.rmtree(node.data, ignore_errors=True)


def _case(
    workdir: Path, cluster: Any, bus: Any, count: int, seconds: float, rates: tuple[float, ...]
) -> list[dict[str, Any]]:
    url = cluster.dsn(cluster.create_database())
    nodes = _nodes(workdir, f"cluster{count}", url, bus.url, count)
    bus_pid = bus._proc.pid if bus._proc is not None else None
    try:
        return asyncio.run(
            _measure(nodes, {"postgresql": cluster.pid, "nats": bus_pid}, seconds, rates)
        )
    finally:
        for node in nodes:
            node.stop()
            shutil.rmtree(node.data, ignore_errors=True)


def _ratio(a: float, b: float) -> float | None:
    return a / b if b and b == b and a == a else None


def _passes(step: dict[str, Any]) -> bool:
    worst = max(n["arrival_p99_ms"] for n in step["nodes"])
    return bool(step["delivered_pct"] >= 100 and step["faults"] == 0 and worst <= CAPACITY_P99_MS)


def _capacity(steps: list[dict[str, Any]]) -> float:
    """Deliveries/s offered at the highest step up to which every step passed (0 when the
    first failed): on a shared machine a later step may pass after an earlier one failed, which
    says more about the neighbours than about the server."""
    best = 0.0
    for step in steps:
        if not _passes(step):
            break
        best = step["rate"] * SUBSCRIBERS
    return best


def run(workdir: Path, *, quick: bool) -> list[Row]:
    seconds = 5.0 if quick else 20.0
    ladder_secs = 3.0 if quick else 10.0
    rates = CAPACITY_RATES[:2] if quick else CAPACITY_RATES
    with _backends() as (cluster, bus):
        one, two = _interleaved(workdir, cluster, bus, seconds)
        ladder_one = _case(workdir, cluster, bus, 1, ladder_secs, rates)
        ladder_two = _case(workdir, cluster, bus, 2, ladder_secs, rates)
    case = (
        f"{SUBSCRIBERS:,} subscribers, {RATE_PER_SEC:g} msg/s, {seconds:g} s"
        f" ({ROUNDS} alternate rounds per case)"
    )
    same, cross = two["nodes"]
    single = one["nodes"][0]
    extra = {"one_node": one, "two_nodes": two}
    cpu_note = "; ".join(
        f"{label}: PostgreSQL {f['cpu_s']['postgresql'] / f['wall_s'] * 100:.0f} %,"
        f" nats {f['cpu_s']['nats'] / f['wall_s'] * 100:.0f} % of a core"
        for label, f in (("1 node", one), ("2 nodes", two))
    )
    rows = [
        Row(WORKLOAD, case, "cross-node socket p99 ÷ 1 node's", _ratio(cross["arrival_p99_ms"],
            single["arrival_p99_ms"]), None, "node B's 500 subscribers, the message sent on A",
            f"≤ {TARGET_P99_RATIO:g}", extra=extra),
        Row(WORKLOAD, case, "cross-node socket p99 ms", cross["arrival_p99_ms"],
            single["arrival_p99_ms"], "1 node: {ref:.2f} ms"),
        Row(WORKLOAD, case, "same-node socket p99 ms (2 nodes)", same["arrival_p99_ms"],
            single["arrival_p99_ms"], "1 node: {ref:.2f} ms"),
        Row(WORKLOAD, case, "cross-node ÷ same-node socket p99 (2 nodes)",
            _ratio(cross["arrival_p99_ms"], same["arrival_p99_ms"]), None,
            "B's half ÷ A's half of the same case: the same minutes, the same load"),
        Row(WORKLOAD, case, "bus hop p99 ms, commit on A → hint heard on B (≤ bucket)",
            two["bus_lag_p99_ms"], two["bus_lag_p50_ms"], "p50 ≤ {ref:g} ms",
            note="node B's room_bus_lag_seconds over the case"),
        Row(WORKLOAD, case, "server CPU per delivery ÷ 1 node's",
            _ratio(two["cpu_us_per_delivery"], one["cpu_us_per_delivery"]), None,
            "utime+stime of every node from /proc, per frame delivered",
            f"≤ {TARGET_CPU_RATIO:g}"),
        Row(WORKLOAD, case, "server CPU µs per delivery (2 nodes)", two["cpu_us_per_delivery"],
            one["cpu_us_per_delivery"], "1 node: {ref:.2f} µs", note=cpu_note),
        Row(WORKLOAD, case, "delivered % (2 nodes)", two["delivered_pct"], one["delivered_pct"],
            "1 node: {ref:.2f} %", "≥ 100"),
        Row(WORKLOAD, case, "gaps + duplicates + cut (2 nodes)", two["faults"], one["faults"],
            "1 node: {ref:.0f}", "≤ 0"),
        Row(WORKLOAD, case, "generator CPU % (2 nodes)", two["generator_cpu_pct"],
            one["generator_cpu_pct"], "1 node: {ref:.0f} % of its core"),
    ]  # fmt: skip
    for a, b in zip(ladder_one, ladder_two, strict=True):
        step = (
            f"ladder: {a['rate'] * SUBSCRIBERS / 1000:g}k deliveries/s offered, {ladder_secs:g} s"
        )
        worst = max(n["arrival_p99_ms"] for n in b["nodes"])
        rows += [
            Row(WORKLOAD, step, "2 nodes: worst node's socket p99 ms", worst,
                a["arrival_p99_ms"], "1 node: {ref:.2f} ms", f"≤ {CAPACITY_P99_MS:g}",
                extra={"one_node": a, "two_nodes": b}),
            Row(WORKLOAD, step, "passes, 2 nodes / 1 node", float(_passes(b)),
                float(_passes(a)), "1 node: {ref:.0f}",
                note=f"delivered {b['delivered_pct']:.1f} / {a['delivered_pct']:.1f} %"),
            Row(WORKLOAD, step, "server CPU µs per delivery, 2 nodes", b["cpu_us_per_delivery"],
                a["cpu_us_per_delivery"], "1 node: {ref:.2f} µs"),
            Row(WORKLOAD, step, "generator CPU %, 2 nodes", b["generator_cpu_pct"],
                a["generator_cpu_pct"], "1 node: {ref:.0f} % of its core"),
        ]  # fmt: skip
    cap_one, cap_two = _capacity(ladder_one), _capacity(ladder_two)
    rows.append(
        Row(WORKLOAD, "capacity: deliveries/s at socket p99 ≤ 50 ms, all delivered",
            "2 nodes ÷ 1 node", _ratio(cap_two, cap_one), None,
            f"{cap_two:,.0f} vs {cap_one:,.0f}/s (every step up to it passed); both nodes on the"
            " server core (same budget); a step the generator saturates (> 90 %) caps both"),
    )  # fmt: skip
    return rows
