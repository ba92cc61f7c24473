"""Room servers (nodes) of a cluster for the tests (docs/cluster.md): each on its own data
folder, one private PostgreSQL database and one private nats-server, and each node's links to
both through a :class:`~tests.support.proxy.LinkProxy` of its own, so a test can cut or delay
one node's links while the others' stay up.

With ``bus_poll_secs`` = 60 (the default here) a node checks the database for events whose hint
never came only every minute, far beyond the tests' waits: what reaches a node's sockets
within them while its bus is up came over the bus."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import psycopg

from tests.support.nats import NatsServer
from tests.support.proxy import LinkProxy
from tests.support.server import ServerProcess, Session
from tests.support.wsclient import Client

NOT_STREAM = {"ack", "history", "subscribed", "batch", "hello", "error"}
WAIT = 20.0  # generous: the bus delivers in milliseconds, the long poll comes after 60 s


@dataclass(eq=False)
class Node:
    """One room server and the proxies of its links."""

    server: ServerProcess
    pg: LinkProxy
    bus: LinkProxy
    session: Session | None = None
    env: dict[str, str] = field(default_factory=dict)

    @property
    def owner(self) -> Session:
        assert self.session is not None, "sign_in() first"
        return self.session

    def start(self) -> Node:
        self.server.start()
        self.session = self.server.login(self.server.login_url.rsplit("/", 1)[-1])
        return self

    def restart(self) -> Node:
        """Start again on the same data folder and port (after :meth:`ServerProcess.kill9`);
        the owner's session stays valid (it is in the database)."""
        self.server.start()
        return self

    def stop(self) -> None:
        self.server.stop()
        self.pg.stop()
        self.bus.stop()


def make_node(data: Path, dsn: str, nats: NatsServer, bus_poll_secs: str = "60") -> Node:
    db_port = urlsplit(dsn).port
    assert db_port is not None
    pg = LinkProxy("127.0.0.1", db_port).start()
    bus = LinkProxy("127.0.0.1", nats.port).start()
    env = {
        "ROOM_DATABASE_URL": pg.url(dsn),
        "ROOM_BUS_URL": bus.url(nats.url),
        "ROOM_BUS_POLL_SECS": bus_poll_secs,
        "ROOM_CREDENTIAL_RECHECK_SECS": "600",
    }
    return Node(ServerProcess(data, env=env), pg, bus)


async def start_nodes(
    tmp_path: Path, dsn: str, nats: NatsServer, count: int, bus_poll_secs: str = "60"
) -> list[Node]:
    """``count`` started nodes, one after the other (2 shared cores), the first one's owner
    signed in on each."""
    nodes: list[Node] = []
    try:
        for n in range(count):
            node = make_node(tmp_path / f"node{n}", dsn, nats, bus_poll_secs)
            nodes.append(node)
            await anyio.to_thread.run_sync(node.start)
    except BaseException:
        for node in nodes:
            node.stop()
        raise
    return nodes


def first_project(node: Node) -> int:
    return int(node.server.get_json("/api/me", cookie=node.owner.cookie)["projects"][0]["id"])


def pause_lead(node: Node, project: int) -> None:
    """The lead agent paused: human messages wake no turn (the tests are about the stream)."""
    members = node.server.get_json(f"/api/projects/{project}", cookie=node.owner.cookie)["members"]
    lead = next(m["id"] for m in members if m["handle"] == "lead")
    status, _ = node.server.request(
        "POST", f"/api/projects/{project}/members/{lead}/pause", {}, headers=node.owner.headers
    )
    assert status == 200


def stream_seqs(client: Client) -> list[int]:
    return [f["seq"] for f in client.frames if f.get("type") not in NOT_STREAM and "seq" in f]


async def send_one(client: Client, project: int, txn: str) -> dict[str, Any]:
    """Send one message and return the server's answer to it: its ``ack`` or ``error``."""
    await client.send({"type": "send", "project_id": project, "client_txn_id": txn, "body": txn})
    return await client.wait_for(
        lambda f: f["type"] in ("ack", "error") and _txn_of(f) == txn, timeout=WAIT
    )


def _txn_of(frame: dict[str, Any]) -> str | None:
    if frame["type"] == "ack":
        return frame.get("client_txn_id")
    return (frame.get("details") or {}).get("client_txn_id")


async def send_some(client: Client, project: int, prefix: str, count: int) -> list[int]:
    """``count`` messages, each acknowledged before the next; their seqs."""
    seqs = []
    for n in range(count):
        answer = await send_one(client, project, f"{prefix}-{n}-{uuid.uuid4().hex[:6]}")
        assert answer["type"] == "ack", answer
        seqs.append(int(answer["seq"]))
    return seqs


async def until_seq(client: Client, top: int, wait: float = WAIT) -> list[int]:
    with anyio.fail_after(wait):
        while not stream_seqs(client) or stream_seqs(client)[-1] < top:
            await client.recv(timeout=wait)
    return stream_seqs(client)


async def metrics_show(node: Node, line: str) -> None:
    """Until the node's /metrics shows ``line`` (e.g. ``room_bus_up 1.0``)."""
    with anyio.fail_after(WAIT):
        while True:
            status, text = await anyio.to_thread.run_sync(
                lambda: node.server.request("GET", "/metrics", cookie=node.owner.cookie)
            )
            if status == 200 and line in str(text):
                return
            await anyio.sleep(0.1)


def stored_log(dsn: str, project: int) -> dict[str, int]:
    """txn → seq of the project's messages, after checking the log is whole: the seqs of
    ``events`` are gap-free from 1, every message has its event at its seq (nothing
    half-applied), and each txn is stored once."""
    with psycopg.connect(dsn) as conn:
        messages = conn.execute(
            "SELECT seq, client_txn_id FROM messages WHERE project_id = %s ORDER BY seq",
            (project,),
        ).fetchall()
        events = conn.execute(
            "SELECT seq, message_id FROM events WHERE project_id = %s ORDER BY seq", (project,)
        ).fetchall()
        head = conn.execute("SELECT last_seq FROM projects WHERE id = %s", (project,)).fetchone()
        missing = conn.execute(
            "SELECT m.seq FROM messages m WHERE m.project_id = %s AND NOT EXISTS (SELECT 1"
            " FROM events e WHERE e.project_id = m.project_id AND e.seq = m.seq"
            " AND e.message_id = m.id)",
            (project,),
        ).fetchall()
    assert [seq for seq, _ in events] == list(range(1, len(events) + 1))
    assert head is not None and int(head[0]) == len(events)
    assert not missing, f"messages without their event: {missing}"
    txns = [t for _, t in messages if t is not None]
    assert len(txns) == len(set(txns)), "a txn stored twice"
    return {t: seq for seq, t in messages if t is not None}
