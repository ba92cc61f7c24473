"""The operator's view of a cluster (docs/cluster.md, "Operators"): three room servers on one
private PostgreSQL database and one private nats-server.

Each node's ``boot-report.json`` keeps a ``cluster`` section current while it runs (its node id,
its bus and whether it is up, the peers it hears: when, at which address, what they are home
of), and ``room doctor`` shows the node, the database and the peers as ``room cluster status``
finds them; a node killed shows as not heard, and a home not heard is a problem. No password
of either URL shows anywhere."""

from __future__ import annotations

import contextlib
import io
import json
import re
from pathlib import Path
from typing import Any

import anyio
import psycopg
import pytest

from room.cli import main as room_main
from tests.support.cluster import WAIT, Node, start_nodes
from tests.support.nats import NatsServer

SECRET = "s3cret-pw"  # in both URLs: trust auth and an open nats-server ignore it


def with_password(url: str) -> str:
    scheme, rest = url.split("://", 1)
    user, _, host = rest.rpartition("@")
    return f"{scheme}://{user or 'room'}:{SECRET}@{host or rest}"


def node_id(node: Node) -> str:
    return (node.server.data / "node-id").read_text().strip()


def view_of(node: Node) -> dict[str, Any]:
    report = json.loads((node.server.data / "boot-report.json").read_text())
    return dict(report.get("cluster") or {})


def room(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = room_main(list(args))
    return code, out.getvalue()


async def until(check: Any, what: str) -> Any:
    with anyio.fail_after(WAIT * 2):
        while True:
            found = await anyio.to_thread.run_sync(check)
            if found:
                return found
            await anyio.sleep(0.2)
    raise AssertionError(what)  # pragma: no cover (fail_after raises first)


@pytest.mark.anyio
@pytest.mark.usefixtures("clients")
@pytest.mark.timeout(240)  # three nodes on 2 shared cores
async def test_reports_and_doctor_show_the_node_the_database_the_bus_and_the_peers(
    tmp_path: Path, pg_dsn: str, nats_server: NatsServer
) -> None:
    dsn, bus = with_password(pg_dsn), with_password(nats_server.url)
    nodes = await start_nodes(tmp_path, dsn, nats_server, 3)
    try:
        ids = [node_id(n) for n in nodes]
        addresses = {node_id(n): f"127.0.0.1:{n.server.port}" for n in nodes}
        # A project made on node 2 is node 2's (its home); the demo project is node 0's.
        status, made = nodes[2].server.request(
            "POST", "/api/projects", {"name": "二号的项目"}, headers=nodes[2].owner.headers
        )
        assert status in (200, 201), made
        project_2 = int(made["project"]["id"] if "project" in made else made["id"])

        # Each node's report: itself, its bus up, the two others heard with their addresses.
        def all_heard(node: Node) -> dict[str, Any] | None:
            view = view_of(node)
            live = {p["node"]: p for p in view.get("peers", []) if p["live"]}
            return view if len(live) == 2 else None

        views = [
            await until(lambda n=n: all_heard(n), "each node hears both others") for n in nodes
        ]
        # The database's cluster id (docs/cluster.md, "Subjects"): one for all three nodes.
        with psycopg.connect(pg_dsn) as conn:
            row = conn.execute("SELECT cluster FROM cluster_identity").fetchone()
        assert row is not None
        cluster_id = str(row[0])
        for node, view in zip(nodes, views, strict=True):
            assert view["node"] == node_id(node)
            assert view["cluster"] == cluster_id
            assert view["address"] == addresses[node_id(node)]
            assert view["bus"]["up"] is True and SECRET not in view["bus"]["url"]
            peers = {p["node"]: p for p in view["peers"]}
            assert sorted(peers) == sorted(i for i in ids if i != node_id(node))
            for peer, seen in peers.items():
                assert seen["address"] == addresses[peer]
                assert seen["last_heard"] is not None
        peers_of_0 = {p["node"]: p for p in views[0]["peers"]}
        assert views[0]["home_of"]["count"] == 1  # the demo project
        assert peers_of_0[ids[2]]["home_of"] == {
            "count": 1,
            "projects": [{"id": project_2, "name": "二号的项目"}],
        }
        report = json.loads((nodes[0].server.data / "boot-report.json").read_text())
        assert report["database"]["backend"] == "postgresql"
        assert report["database"]["version"]
        assert report["database"]["cluster"] == cluster_id
        assert SECRET not in json.dumps(report)

        # `room doctor` on node 0's folder, with the bus: the same nodes, heard now.
        args = ["--data", str(nodes[0].server.data), "--database", dsn, "--bus", bus]
        code, out = await anyio.to_thread.run_sync(lambda: room("doctor", "--json", *args))
        summary = json.loads(out)
        assert code == 0, summary["problems"]
        assert summary["node"] == ids[0] and SECRET not in out
        assert summary["database"]["backend"] == "postgresql" and summary["database"]["version"]
        cluster = summary["cluster"]
        assert cluster["cluster"] == cluster_id
        assert cluster["bus"]["reached"] is True
        found = {n["node"]: n for n in cluster["nodes"]}
        assert sorted(found) == sorted(ids)
        assert all(n["live"] for n in found.values())
        assert {n: f["address"] for n, f in found.items()} == addresses
        assert found[ids[0]]["this"] is True and found[ids[2]]["home_of"]["count"] == 1
        assert cluster["seen_by_server"]["node"] == ids[0]
        code, text = await anyio.to_thread.run_sync(lambda: room("doctor", *args))
        assert code == 0 and SECRET not in text
        assert f"node:     {ids[0]} at {addresses[ids[0]]}" in text
        assert f"cluster:  {cluster_id}\n" in text
        assert f"  node {ids[2]}: up at {addresses[ids[2]]}" in text
        assert f"home of 1 project(s) ({project_2} 二号的项目)" in text

        # Node 2 dies: node 0's report says so; doctor finds its project's home not heard.
        nodes[2].server.kill9()

        def lapsed() -> dict[str, Any] | None:
            view = view_of(nodes[0])
            peer = next((p for p in view.get("peers", []) if p["node"] == ids[2]), None)
            return peer if peer is not None and not peer["live"] else None

        gone = await until(lapsed, "node 0 stops hearing node 2")
        assert gone["address"] == addresses[ids[2]] and gone["home_of"]["count"] == 1
        code, out = await anyio.to_thread.run_sync(lambda: room("doctor", "--json", *args))
        summary = json.loads(out)
        assert code == 4
        found = {n["node"]: n for n in summary["cluster"]["nodes"]}
        assert found[ids[2]]["live"] is False and found[ids[1]]["live"] is True
        assert any(
            p.startswith(f"node {ids[2]} is home of 1 project(s) but is not heard")
            for p in summary["problems"]
        ), summary["problems"]
        # Without --bus, doctor shows the server's own view (when each peer was last heard).
        code, text = await anyio.to_thread.run_sync(
            lambda: room("doctor", "--data", str(nodes[0].server.data), "--database", dsn)
        )
        assert code == 4
        assert f"  node {ids[2]}: not heard for " in text
        assert f"  node {ids[1]}: up at {addresses[ids[1]]}" in text
    finally:
        for node in nodes:
            node.stop()


def test_every_cluster_metric_is_documented_in_cluster_md() -> None:
    """The metrics a cluster's node adds (room/metrics.py: the bus, the relay, homes and
    leases) are each named in docs/cluster.md's "Operators"."""
    root = Path(__file__).resolve().parents[1]
    source = (root / "room" / "metrics.py").read_text(encoding="utf-8")
    names = set(re.findall(r'"(room_(?:bus|relay|leases|fence|projects_home)[a-z_]*)"', source))
    assert {"room_leases_lost", "room_fence_refusals", "room_bus_peers"} <= names
    operators = (root / "docs" / "cluster.md").read_text(encoding="utf-8").split("## Operators")[1]
    missing = sorted(n for n in names if f"`{n}`" not in operators.split("\n## ")[0])
    assert not missing, f"undocumented in docs/cluster.md, Operators: {missing}"
