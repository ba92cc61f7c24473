"""Two room clusters on one nats-server (docs/cluster.md, "Subjects"): each on a private
PostgreSQL database of its own, each with one node, both with a project of id 1 at the same
seq. Every subject names the database's cluster id (``room.<cluster>.p.1``), so neither node
hears the other's hints: each subscriber gets exactly its own cluster's messages.

On subjects named by the project's id alone (``room.p.1``) the node of the cluster that is
behind took the other's hints for its own next seqs and wrote the other cluster's messages to
its sockets; a spy on ``room.>`` makes sure those hints were out before the other sends."""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Any

import anyio
import nats
import orjson
import psycopg
import pytest
from nats.aio.msg import Msg

from room.errors import StorageError
from room.infra.bus import Bus, nodes_subject, project_subject
from room.store import cluster as cluster_store
from room.store.migrate import connect, migrate
from tests.support.cluster import (
    WAIT,
    Node,
    first_project,
    make_node,
    pause_lead,
    send_one,
    until_seq,
)
from tests.support.nats import NatsServer
from tests.support.postgres import PostgresCluster
from tests.support.wsclient import Client, subscribed

ROUND = 4  # messages each cluster sends per round


def cluster_id(dsn: str) -> str:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT cluster FROM cluster_identity WHERE id = 1").fetchone()
    assert row is not None
    return str(row[0])


def bodies(client: Client) -> list[str]:
    return [f["message"]["body"] for f in client.frames if f.get("type") == "message"]


def metric(node: Node, name: str) -> float:
    status, text = node.server.request("GET", "/metrics", cookie=node.owner.cookie)
    assert status == 200
    lines = dict(line.rsplit(" ", 1) for line in str(text).splitlines() if line[:1] != "#")
    return float(lines[name])


class Spy:
    """A plain NATS client on ``room.>``: every hint of both clusters, by subject."""

    def __init__(self) -> None:
        self.heard: list[tuple[str, dict[str, Any]]] = []
        self.more = anyio.Event()  # set by the next hint heard

    async def on_msg(self, msg: Msg) -> None:
        self.heard.append((msg.subject, orjson.loads(msg.data)))
        self.more.set()
        self.more = anyio.Event()

    def event_seqs(self, subject: str) -> set[int]:
        return {int(h["s"]) for s, h in self.heard if s == subject and h.get("k") == "e"}

    async def until_typing(self, subject: str) -> None:
        with anyio.fail_after(WAIT):
            while not any(
                s == subject and h.get("k") == "b" and '"typing"' in str(h.get("f"))
                for s, h in self.heard
            ):
                await self.more.wait()

    async def until(self, subject: str, seqs: list[int]) -> None:
        with anyio.fail_after(WAIT):
            while not set(seqs) <= self.event_seqs(subject):
                await self.more.wait()


async def send_round(sender: Client, project: int, prefix: str) -> tuple[list[int], list[str]]:
    """:data:`ROUND` messages, each acknowledged before the next: their seqs and bodies."""
    seqs, said = [], []
    for n in range(ROUND):
        body = f"{prefix}{n}-{uuid.uuid4().hex[:6]}"
        answer = await send_one(sender, project, body)  # the body is its client_txn_id too
        assert answer["type"] == "ack", answer
        seqs.append(int(answer["seq"]))
        said.append(body)
    return seqs, said


def test_each_database_draws_its_own_cluster_id_and_a_bad_one_is_refused(tmp_path: Path) -> None:
    ids = []
    for name in ("a", "b"):
        path = tmp_path / f"{name}.sqlite"
        conn = connect(path)
        migrate(conn, path, now=0.0)
        ids.append(cluster_store.cluster_id(conn))
        assert cluster_store.cluster_id(conn) == ids[-1]  # drawn once, read as often as asked
        if name == "a":
            conn.close()
    assert ids[0] != ids[1] and all(re.fullmatch(r"[0-9a-f]{16}", i) for i in ids), ids
    assert project_subject(ids[0], 1) == f"room.{ids[0]}.p.1"
    assert nodes_subject(ids[0]) == f"room.{ids[0]}.nodes"

    # Set by hand (on the second database) to what would widen or split the subjects: refused, naming it.
    for bad in ("a.b", ">", "x*", ""):
        conn.execute("UPDATE cluster_identity SET cluster = ?", (bad,))
        with pytest.raises(StorageError) as refused:
            cluster_store.cluster_id(conn)
        assert refused.value.code == "storage_error" and refused.value.details == ({"cluster": bad})
        with pytest.raises(ValueError):
            Bus("nats://127.0.0.1:1", "node", bad)
    conn.execute("DELETE FROM cluster_identity")
    with pytest.raises(StorageError, match="missing"):
        cluster_store.cluster_id(conn)
    conn.close()


@pytest.fixture
def second_dsn(pg_cluster: PostgresCluster) -> Any:
    """Another fresh database on the same private PostgreSQL: another cluster's."""
    name = pg_cluster.create_database()
    try:
        yield pg_cluster.dsn(name)
    finally:
        pg_cluster.drop_database(name)


@pytest.mark.anyio
@pytest.mark.usefixtures("clients")
async def test_two_clusters_on_one_nats_server_hear_only_their_own(
    tmp_path: Path, pg_dsn: str, second_dsn: str, nats_server: NatsServer
) -> None:
    x = make_node(tmp_path / "x", pg_dsn, nats_server)
    y = make_node(tmp_path / "y", second_dsn, nats_server)
    spy_nc = await nats.connect(nats_server.url)
    spy = Spy()
    await spy_nc.subscribe("room.>", cb=spy.on_msg)
    try:
        await anyio.to_thread.run_sync(x.start)  # one after the other: 2 shared cores
        await anyio.to_thread.run_sync(y.start)
        ids = cluster_id(pg_dsn), cluster_id(second_dsn)
        assert ids[0] != ids[1] and all(len(i) == 16 for i in ids), ids
        project = first_project(x)
        assert project == first_project(y) == 1  # the same id in both databases
        for node in (x, y):
            pause_lead(node, project)
        readers = [await subscribed(n.server, n.owner.cookie, project) for n in (x, y)]
        heads = [r.frames[-1].get("head_seq") for r in readers]
        assert heads[0] == heads[1], heads  # the same seq: each other's next would fit
        senders = [await subscribed(n.server, n.owner.cookie, project) for n in (x, y)]
        subjects = [f"room.{c}.p.{project}" for c in ids]

        sent: list[list[str]] = [[], []]
        # Round 1: X first (its hints out on the bus), then Y at the same seqs; round 2 the
        # other way round. On shared subjects the node that is behind published the other's.
        for first, second in ((0, 1), (1, 0)):
            seqs, said = await send_round(senders[first], project, f"c{first}-")
            sent[first] += said
            await spy.until(subjects[first], seqs)
            seqs_second, said = await send_round(senders[second], project, f"c{second}-")
            sent[second] += said
            assert seqs_second == seqs  # the same seqs in both logs
            for n in (first, second):
                await until_seq(readers[n], seqs[-1])
        for n in (0, 1):
            assert len(sent[n]) == 2 * ROUND
            assert bodies(readers[n]) == sent[n], (n, bodies(readers[n]), sent[n])

        # Typing in X reaches X's reader only (frames outside the stream ride the bus too).
        await senders[0].send({"type": "typing", "project_id": project, "active": True})
        await readers[0].wait_for(lambda f: f.get("type") == "typing", timeout=WAIT)
        await spy.until_typing(subjects[0])
        # Y's next message comes after it (on shared subjects its node had the typing by then).
        _, said = await send_round(senders[1], project, "c1-")
        await until_seq(readers[1], seqs[-1] + ROUND)
        assert bodies(readers[1]) == sent[1] + said

        # Every hint went out on its own cluster's subjects, none on an unnamed one.
        heard_subjects = {s for s, _ in spy.heard}
        assert heard_subjects <= {*subjects, *(f"room.{c}.nodes" for c in ids)}, heard_subjects
        assert {f"room.{c}.nodes" for c in ids} <= heard_subjects  # the heartbeats
        # Neither node heard a hint, nor counts a peer: each is alone in its cluster.
        for node in (x, y):
            assert metric(node, "room_bus_hints_received_total") == 0
            assert metric(node, "room_bus_peers") == 0
        assert not [f for f in readers[1].frames if f.get("type") == "typing"]
        for client in (*readers, *senders):
            client.drop()
    finally:
        await spy_nc.close()
        x.stop()
        y.stop()
