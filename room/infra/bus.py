"""The cluster's bus: NATS core between room servers (nodes) on one PostgreSQL database
(docs/cluster.md).

What rides it is a *hint*, never the record: the ``events``/``messages`` tables are the log of
record, and a hint that is lost (NATS down, a node killed between its commit and its publish)
costs latency only, because every node checks the database too (room.actions.relay). One
subject per project (``room.<cluster>.p.<id>``), which a node subscribes to while it has live
subscribers to the project; one subject for every node (``room.<cluster>.nodes``) for what is
not a project's (a session's sockets cut). ``<cluster>`` is the database's id
(room.store.schema_cluster): two clusters on one nats-server never hear each other, even where
their project ids are the same. ``no_echo``: a node never hears its own publishes.

:class:`ClusterHub` is the hub whose frames outside the stream (typing, read cursors, delivery
labels, drafts; not presence, see :data:`LOCAL_ONLY`) and socket cuts (a member removed, a project purged, a session signed out or a
token rotated) go to the other nodes' sockets too; what comes from the bus is applied here only.

:class:`ClusterPresence` merges presence without letting nodes contradict each other: each node
says which people have a connection open on it, which external agents a socket and which agents
a running turn — the whole sets, in every heartbeat and soon after they change — and each node
counts a person (an agent) present while in its own sets or in the last sets of a node heard
within :data:`PEER_LAPSE_SECS`. Every node computes from the same
sets, so they agree; a node that dies (or loses the bus) drops out at the lapse.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import nats
import orjson
from nats.aio.client import Client as NatsClient
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription as NatsSubscription

from room.infra.frames import Frame
from room.infra.hub import Hub
from room.infra.outbox import Outbox
from room.infra.presence import Presence

log = logging.getLogger(__name__)

SUBJECT_ROOT = "room."  # + the cluster id (the database's, room.store.schema_cluster)
RECONNECT_WAIT_SECS = 0.5
HEARTBEAT_SECS = 2.0  # each node says it is there on its cluster's nodes subject this often
PEER_LAPSE_SECS = 3 * HEARTBEAT_SECS  # a peer unheard for this long is not counted
CONNECT_TIMEOUT_SECS = 2.0
TELL_AFTER_SECS = 0.05  # a node's changed set of people goes out this soon (ClusterPresence)
REPORT_SECS = 10.0  # boot-report.json's ``cluster`` is rewritten this often (and on a change)
REPORT_CHECK_SECS = 0.5
MAX_SEEN = 64  # peers remembered for the report (a cluster has a few; node ids are stable)

Hint = dict[str, Any]


def project_subject(cluster: str, project_id: int) -> str:
    """The subject of one project's hints in one cluster: ``room.<cluster>.p.<id>``."""
    return f"{SUBJECT_ROOT}{cluster}.p.{project_id}"


def nodes_subject(cluster: str) -> str:
    """The subject every node of one cluster hears: ``room.<cluster>.nodes``."""
    return f"{SUBJECT_ROOT}{cluster}.nodes"


def check_cluster(cluster: str) -> str:
    """``cluster`` if it can be one token of a subject (no ``.``, ``*``, ``>`` or blank);
    else ValueError: a hand-edited id must not widen or split the subjects."""
    if not cluster or any(c in cluster for c in ".*> \t\r\n"):
        raise ValueError(f"{cluster!r} cannot name a cluster's bus subjects")
    return cluster


# Each node computes a project's presence frames itself, from the same merged sets of people
# (ClusterPresence): sent to the others as well, every change would reach their sockets twice.
LOCAL_ONLY = '{"type":"presence",'


class Bus:
    """One NATS connection per node. :meth:`start` connects in the background (a node whose
    bus is down at its start serves on the database poll meanwhile) and reconnects forever."""

    def __init__(self, url: str, node: str, cluster: str, address: str | None = None) -> None:
        self.url = url
        self.shown = _redact(url)  # for the logs: never a password
        self.node = node
        self.cluster = check_cluster(cluster)  # the database's id: names the subjects
        self._project_prefix = project_subject(cluster, 0)[:-1]  # room.<cluster>.p.
        self._nodes_subject = nodes_subject(cluster)
        self.address = address  # where this node listens (host:port), said in its heartbeats
        self.on_hint: Callable[[int | None, Hint], None] = lambda project_id, hint: None
        self.on_reconnect: Callable[[], None] = lambda: None
        self.on_disconnect: Callable[[], None] = lambda: None
        # What a heartbeat carries besides the node's id (ClusterPresence: its people), what is
        # told of another node's heartbeat, and what runs after each of this node's.
        self.beat: Callable[[], Hint] = dict
        self.on_peer: Callable[[str, Hint], None] = lambda node, hint: None
        self.on_beat: Callable[[], None] = lambda: None
        self._nc: NatsClient | None = None
        self._subs: dict[int, NatsSubscription | None] = {}
        self._connecting: asyncio.Task[None] | None = None
        self._up = False
        self._up_since = 0.0  # when the bus last came (back) up (monotonic)
        self._changed_at = time.monotonic()  # when it last came up or went down (/healthz)
        self._beating: asyncio.Task[None] | None = None
        self._peers: dict[str, float] = {}  # another node's id → when it was last heard
        # Every peer heard since the start: when (Unix time) and the address it gave.
        self._seen: dict[str, tuple[float, str | None]] = {}
        self.published = 0  # hints sent (``/metrics``)
        self.received = 0  # hints heard from the other nodes
        self.unsent = 0  # hints not sent: the bus was down (the poll covers them)

    @property
    def up(self) -> bool:
        return self._up

    def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._connecting = loop.create_task(self._connect(), name="bus-connect")
        self._beating = loop.create_task(self._heartbeat(), name="bus-heartbeat")

    async def _heartbeat(self) -> None:
        while True:
            self.send(None, {**self.beat(), "k": "hb", "n": self.node, "ad": self.address})
            try:
                self.on_beat()
            except Exception:
                log.exception("a heartbeat's check failed")
            await asyncio.sleep(HEARTBEAT_SECS)

    def peers(self) -> list[str]:
        """The other nodes heard from lately (their heartbeats on the bus)."""
        now = time.monotonic()
        return sorted(n for n, at in self._peers.items() if now - at < PEER_LAPSE_SECS)

    @property
    def peers_known(self) -> bool:
        """Whether :meth:`peers` can be trusted to name every node that is up: the bus is up
        and has been for :data:`PEER_LAPSE_SECS` (three heartbeats of every node that is up
        came meanwhile). Right after it (re)connected, a node not heard yet may be up."""
        return self._up and time.monotonic() - self._up_since >= PEER_LAPSE_SECS

    def seen(self) -> list[dict[str, Any]]:
        """Every other node heard since this one started: its id, when it was last heard
        (Unix time), the address its heartbeats give, and whether it is counted now (heard
        within :data:`PEER_LAPSE_SECS`)."""
        live = set(self.peers())
        return [
            {"node": node, "last_heard": round(at, 3), "address": address, "live": node in live}
            for node, (at, address) in sorted(self._seen.items())
        ]

    def health(self) -> dict[str, Any]:
        """What ``/healthz`` says of the bus (docs/operators.md, "Health"): connected or not
        and for how long, this node's id, and how many other nodes it hears now. The bus is a
        hint (the database poll covers for it), so a node whose bus is down still serves."""
        return {
            "configured": True,
            "up": self._up,
            "for_secs": round(time.monotonic() - self._changed_at, 1),
            "url": self.shown,
            "node": self.node,
            "cluster": self.cluster,
            "peers": len(self.peers()),
            "peers_known": self.peers_known,
        }

    def view(self) -> dict[str, Any]:
        """This node's view of the cluster (boot-report.json's ``cluster``, docs/cluster.md)."""
        return {
            "node": self.node,
            "cluster": self.cluster,
            "address": self.address,
            "bus": {"url": self.shown, "up": self._up},
            "peers": self.seen(),
            "updated_at": round(time.time(), 3),
        }

    async def report(self, write: Callable[[dict[str, Any]], Awaitable[None]]) -> None:
        """Keep :meth:`view` written: at once when the bus goes up or down or a peer comes or
        lapses, else every :data:`REPORT_SECS` (its peers' last heard)."""
        told: Any = None
        at = 0.0
        while True:
            view = self.view()
            shape = (self._up, [(p["node"], p["live"], p["address"]) for p in view["peers"]])
            now = time.monotonic()
            if shape != told or now - at >= REPORT_SECS:
                try:
                    await write(view)
                    told, at = shape, now
                except Exception:
                    log.warning("writing the cluster's view into boot-report.json failed")
            await asyncio.sleep(REPORT_CHECK_SECS)

    async def _connect(self) -> None:
        while True:
            try:
                self._nc = await nats.connect(
                    servers=[self.url],
                    name=f"room {self.node}",
                    no_echo=True,
                    allow_reconnect=True,
                    max_reconnect_attempts=-1,
                    reconnect_time_wait=RECONNECT_WAIT_SECS,
                    connect_timeout=CONNECT_TIMEOUT_SECS,
                    disconnected_cb=self._disconnected,
                    reconnected_cb=self._reconnected,
                    error_cb=self._error,
                )
                break
            except Exception as exc:  # nats-py's NoServersError and the socket's errors
                log.warning("the bus %s cannot be reached (%s); trying again", self.shown, exc)
                await asyncio.sleep(RECONNECT_WAIT_SECS)
        self._up = True
        self._up_since = self._changed_at = time.monotonic()
        await self._nc.subscribe(self._nodes_subject, cb=self._heard)
        for project_id in list(self._subs):
            await self._subscribe(project_id)
        log.info("the bus %s is up", self.shown)
        self.on_reconnect()  # hints may have been missed before: the sweep catches them
        self._ask_peers_to_check()

    async def _disconnected(self) -> None:
        if self._up:
            log.warning("the bus %s went down; the database poll covers for it", self.shown)
            self._changed_at = time.monotonic()
        self._up = False
        self.on_disconnect()

    async def _reconnected(self) -> None:
        self._up = True
        self._up_since = self._changed_at = time.monotonic()
        log.info("the bus %s is back", self.shown)
        self.on_reconnect()
        self._ask_peers_to_check()

    def _ask_peers_to_check(self) -> None:
        """Tell the other nodes to check their projects' last seqs now. This node's hints
        while its link was down were never sent (or went into a dead socket), and a node that
        starts may have died before between a commit and its hint: without this, the others'
        bus being up, they would find those events only at their long poll."""
        self.send(None, {"k": "sw", "n": self.node})

    async def _error(self, exc: Exception) -> None:
        log.debug("bus: %s", exc)

    async def close(self) -> None:
        for task in (self._connecting, self._beating):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        nc, self._nc = self._nc, None
        self._up = False
        if nc is not None:
            with contextlib.suppress(Exception):
                await nc.close()

    def follow(self, project_id: int) -> None:
        """Hear the project's hints (this node has live subscribers to it)."""
        if project_id in self._subs:
            return
        self._subs[project_id] = None
        if self._nc is not None and self._up:
            asyncio.get_running_loop().create_task(self._subscribe(project_id))

    def unfollow(self, project_id: int) -> None:
        sub = self._subs.pop(project_id, None)
        if sub is not None:
            asyncio.get_running_loop().create_task(_unsubscribe(sub))

    async def _subscribe(self, project_id: int) -> None:
        if self._nc is None or project_id not in self._subs or self._subs[project_id]:
            return
        try:
            sub = await self._nc.subscribe(f"{self._project_prefix}{project_id}", cb=self._heard)
        except Exception as exc:
            log.warning("subscribing to project %d's hints failed: %s", project_id, exc)
            return
        if project_id in self._subs:
            self._subs[project_id] = sub
        else:  # unfollowed meanwhile
            await _unsubscribe(sub)

    async def _heard(self, msg: Msg) -> None:
        try:
            hint = orjson.loads(msg.data)
        except orjson.JSONDecodeError:
            log.warning("an unreadable hint on %s ignored", msg.subject)
            return
        if not isinstance(hint, dict):
            return
        project_id: int | None = None
        if msg.subject.startswith(self._project_prefix):
            try:
                project_id = int(msg.subject[len(self._project_prefix) :])
            except ValueError:
                return
        elif msg.subject != self._nodes_subject:  # not this cluster's (never subscribed to)
            return
        if project_id is None and hint.get("k") == "hb":
            node = str(hint.get("n"))
            self._peers[node] = time.monotonic()
            address = hint.get("ad")
            if not isinstance(address, str):  # a presence update says only the sets
                address = self._seen.get(node, (0.0, None))[1]
            self._seen[node] = (time.time(), address)
            if len(self._seen) > MAX_SEEN:
                del self._seen[min(self._seen, key=lambda n: self._seen[n][0])]
            try:
                self.on_peer(node, hint)
            except Exception:
                log.exception("applying a heartbeat from the bus failed")
            return
        self.received += 1
        try:
            self.on_hint(project_id, hint)
        except Exception:
            log.exception("applying a hint from the bus failed")

    def send(self, project_id: int | None, hint: Hint) -> None:
        """Publish a hint after the commit it is about (fire and forget: a hint may be lost)."""
        nc = self._nc
        if nc is None or not self._up:
            if hint.get("k") != "hb":
                self.unsent += 1
            return
        subject = (
            self._nodes_subject if project_id is None else f"{self._project_prefix}{project_id}"
        )
        # Now, not in a task of its own: nats-py's publish appends to its buffer and wakes its
        # flusher, whose write then comes first in the next turn of the loop — before this
        # turn's fan-out to the node's own sockets (room.infra.fanout.Flusher, scheduled after
        # the commit's hint). From a task the publish ran in the next turn and its write one
        # turn later, after that fan-out: the other nodes heard of an event only once this node
        # had written it to all its own sockets (docs/cluster.md, "Benchmark").
        _run_now(self._publish(nc, subject, orjson.dumps(hint)))

    async def _publish(self, nc: NatsClient, subject: str, data: bytes) -> None:
        try:
            await nc.publish(subject, data)
            self.published += 1
        except Exception as exc:
            self.unsent += 1
            log.debug("a hint on %s not sent: %s", subject, exc)


def describe_nodes(
    heard: list[dict[str, Any]],
    homes: dict[str, dict[str, Any]],
    running: dict[str, int],
    *,
    skip: str | None = None,
) -> list[dict[str, Any]]:
    """The nodes an operator should know of (docs/cluster.md, "Operators"): those heard on the
    bus (``heard``: :meth:`Bus.seen`'s entries) and those home of a project though not heard
    (dead, cut off, or gone for good: ``room cluster move`` their projects), each with its
    running turns and the projects it is home of; ``skip`` leaves one out (the node asking)."""
    by_node = {str(h["node"]): h for h in heard}
    nodes = sorted((set(by_node) | {n for n in homes if n}) - {skip})
    return [
        {
            "node": node,
            "live": bool(by_node.get(node, {}).get("live")),
            "last_heard": by_node.get(node, {}).get("last_heard"),
            "address": by_node.get(node, {}).get("address"),
            "running_turns": running.get(node, 0),
            "home_of": homes.get(node, {"count": 0, "projects": []}),
        }
        for node in nodes
    ]


def _redact(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def _run_now(coro: Coroutine[Any, Any, None]) -> None:
    """Run ``coro`` in the caller's turn of the loop up to its first suspension (what Python
    3.12's eager tasks do); a task carries on with it if it suspends (nats-py's buffer full, or
    its flusher's queue)."""
    try:
        waiting = _step(coro)
    except StopIteration:
        return
    asyncio.get_running_loop().create_task(_carry_on(coro, waiting))


def _step(coro: Coroutine[Any, Any, None]) -> Any:
    """Resume ``coro``; what it now waits on, taken as a task takes it (a future it awaits is
    marked as awaited by it, and the mark is the taker's to clear: until then nobody else may
    await that future)."""
    waiting = coro.send(None)
    if getattr(waiting, "_asyncio_future_blocking", False):
        waiting._asyncio_future_blocking = False
    return waiting


async def _carry_on(coro: Coroutine[Any, Any, None], waiting: Any) -> None:
    """Drive a coroutine :func:`_run_now` started, as a task would: wait for what it waits
    on (a future; None: a bare yield, one turn of the loop), then resume it."""
    try:
        while True:
            if waiting is None:
                await asyncio.sleep(0)
            else:
                await asyncio.wait((waiting,))  # its outcome is for the coroutine to read
            try:
                waiting = _step(coro)
            except StopIteration:
                return
    except BaseException:
        coro.close()
        raise


async def _unsubscribe(sub: NatsSubscription) -> None:
    with contextlib.suppress(Exception):
        await sub.unsubscribe()


@dataclass(frozen=True, slots=True)
class NodeSets:
    """What another node said last of what presence is computed from, and when."""

    people: frozenset[int] = frozenset()  # user ids with a connection open on it
    agents: frozenset[int] = frozenset()  # external agents (member ids) with a socket on it
    running: frozenset[int] = frozenset()  # agents (member ids) with a turn running on it
    at: float = 0.0


class ClusterPresence(Presence):
    """Presence merged over the nodes (see the module's docstring); its session cuts
    (sign-out, token rotation) reach the other nodes too."""

    def __init__(self, bus: Bus, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.bus = bus
        self.clock = clock
        # Told whose presence changed through another node (room/app.py wires them to
        # room.actions.presence); this node's own changes go as before (ws.py, the drivers).
        self.on_people: Callable[[set[int]], None] = lambda user_ids: None
        self.on_agents: Callable[[set[int]], None] = lambda member_ids: None
        # This node's external agents with a socket open and agents with a turn running.
        self.local_agents: Callable[[], tuple[list[int], list[int]]] = lambda: ([], [])
        self._remote: dict[str, NodeSets] = {}
        self._telling: asyncio.TimerHandle | None = None
        self._told: Hint | None = None
        bus.beat = self._beat
        bus.on_peer = self._heard_peer
        bus.on_beat = self.expire

    def person_present(self, user_id: int | None) -> bool:
        if user_id is None:
            return False
        return self.person_online(user_id) or any(
            user_id in said.people for said in self._remote.values()
        )

    def agent_connected_elsewhere(self, member_id: int) -> bool:
        return any(member_id in said.agents for said in self._remote.values())

    def agent_running_elsewhere(self, member_id: int) -> bool:
        return any(member_id in said.running for said in self._remote.values())

    def attach_person(self, user_id: int, outbox: Outbox) -> bool:
        first = super().attach_person(user_id, outbox)
        if first:
            self._tell_soon()
        return first

    def detach_person(self, user_id: int, outbox: Outbox) -> bool:
        last = super().detach_person(user_id, outbox)
        if last:
            self._tell_soon()
        return last

    def local_changed(self) -> None:
        self._tell_soon()

    def _beat(self) -> Hint:
        agents, running = self.local_agents()
        return {"p": sorted(self._people), "a": agents, "r": running}

    def _tell_soon(self) -> None:
        """This node's sets may have changed: say so within :data:`TELL_AFTER_SECS` (one
        message for everything that changed together), not only at the next heartbeat."""
        if self._telling is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not on the server's loop (a test's own): the heartbeat tells
            return
        self._telling = loop.call_later(TELL_AFTER_SECS, self._tell)

    def _tell(self) -> None:
        self._telling = None
        said = self._beat()
        if said != self._told:  # a change another node caused: nothing new to say here
            self._told = said
            self.bus.send(None, {**said, "k": "hb", "n": self.bus.node})

    def _heard_peer(self, node: str, hint: Hint) -> None:
        """Another node's heartbeat: its whole sets replace the ones it said before."""
        people = hint.get("p")
        if not isinstance(people, list):  # a node that does not say (an older release)
            return
        said = NodeSets(
            frozenset(int(u) for u in people),
            frozenset(int(m) for m in hint.get("a") or ()),
            frozenset(int(m) for m in hint.get("r") or ()),
            self.clock(),
        )
        self._replace(node, said)

    def expire(self) -> None:
        """Forget the sets of the nodes not heard within :data:`PEER_LAPSE_SECS` (dead, cut
        off, or this node's bus is down): what they said no longer counts."""
        now = self.clock()
        for node in [n for n, said in self._remote.items() if now - said.at >= PEER_LAPSE_SECS]:
            self._replace(node, None)

    def _replace(self, node: str, said: NodeSets | None) -> None:
        before = self._remote.get(node, NodeSets())
        after = said or NodeSets()
        people = before.people ^ after.people
        agents = (before.agents ^ after.agents) | (before.running ^ after.running)
        was_people = {u: self.person_present(u) for u in people}
        was_agents = {m: self._agent_elsewhere(m) for m in agents}
        if said is None:
            self._remote.pop(node, None)
        else:
            self._remote[node] = said
        changed = {u for u in people if self.person_present(u) != was_people[u]}
        if changed:
            self.on_people(changed)
        moved = {m for m in agents if self._agent_elsewhere(m) != was_agents[m]}
        if moved:
            self.on_agents(moved)

    def _agent_elsewhere(self, member_id: int) -> tuple[bool, bool]:
        return self.agent_connected_elsewhere(member_id), self.agent_running_elsewhere(member_id)

    def cut_session(self, session: str, reason: str, code: int) -> int:
        self.bus.send(None, {"k": "cs", "s": session, "r": reason, "c": code})
        return super().cut_session(session, reason, code)

    def cut_session_here(self, session: str, reason: str, code: int) -> int:
        return super().cut_session(session, reason, code)


class ClusterHub(Hub):
    """The hub of a node with a bus: what it broadcasts or cuts, the other nodes do too."""

    def __init__(self, bus: Bus) -> None:
        super().__init__()
        self.bus = bus
        self.cluster_presence = self.presence = ClusterPresence(bus)

    def broadcast(
        self,
        project_id: int,
        frame: Frame | str,
        *,
        exclude: Outbox | None = None,
        only_members: Iterable[int] | None = None,
        volatile: bool = False,
    ) -> None:
        members = None if only_members is None else sorted(only_members)
        text = frame.text if isinstance(frame, Frame) else frame
        if not text.startswith(LOCAL_ONLY):  # to the bus first: before this node's fan-out
            self.bus.send(project_id, {"k": "b", "f": text, "m": members, "v": volatile})
        super().broadcast(
            project_id, frame, exclude=exclude, only_members=members, volatile=volatile
        )

    def cut_member(self, project_id: int, member_id: int) -> None:
        super().cut_member(project_id, member_id)
        self.bus.send(project_id, {"k": "cm", "m": member_id})

    def cut_project(self, project_id: int, reason: str) -> None:
        super().cut_project(project_id, reason)
        self.bus.send(project_id, {"k": "cp", "r": reason})

    def heard(self, project_id: int | None, hint: Hint) -> bool:
        """Apply another node's frame or cut to this node's sockets only; False: not one."""
        kind = hint.get("k")
        if project_id is None:
            if kind == "cs":
                self.cluster_presence.cut_session_here(
                    str(hint["s"]), str(hint["r"]), int(hint["c"])
                )
                return True
            return False
        if kind == "b":
            Hub.broadcast(
                self,
                project_id,
                str(hint["f"]),
                only_members=hint.get("m"),
                volatile=bool(hint.get("v")),
            )
        elif kind == "cm":
            Hub.cut_member(self, project_id, int(hint["m"]))
        elif kind == "cp":
            Hub.cut_project(self, project_id, str(hint["r"]))
        else:
            return False
        return True
