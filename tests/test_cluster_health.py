"""``/healthz`` on a cluster's node (docs/operators.md, "Health"): two room servers on one
private PostgreSQL database and one private nats-server. Each says its bus is up, its node id
and the one peer it hears; with the nats-server stopped each still answers 200 (chat goes on
through the database) but says the bus is down (``degraded``), and once the nats-server is
back the answer flips back. A node cut off from its database answers 503 until the link is back.
The node's ``/metrics`` (what a cluster node adds: the relay,
the leases, the bus) are all in docs/operators.md's table, as tests/test_metrics_doc.py checks
a server alone's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.support.cluster import WAIT, Node, start_nodes
from tests.support.metricsdoc import documented, exposed, undocumented
from tests.support.nats import NatsServer

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(180)]


def health(node: Node) -> tuple[int, dict[str, Any]]:
    status, body = node.server.request("GET", "/healthz")
    assert isinstance(body, dict), body
    return status, body


async def until_health(
    node: Node, check: Any, what: str, *, reconnecting: bool = False
) -> dict[str, Any]:
    """Until the node's /healthz answers 200 with a body ``check`` accepts; that body. Any
    other answer fails at once, unless the node is ``reconnecting`` to its database."""
    last: dict[str, Any] = {}
    with anyio.fail_after(WAIT):
        while True:
            status, last = await anyio.to_thread.run_sync(health, node)
            assert status == 200 or reconnecting, last  # whatever the bus does, it answers
            if status == 200 and check(last):
                return last
            await anyio.sleep(0.1)
    raise AssertionError(f"{what}: {last}")  # pragma: no cover (fail_after raises first)


def bus_up_with_a_peer(body: dict[str, Any]) -> bool:
    return bool(body["bus"]["up"] and body["bus"]["peers"] == 1)


async def test_healthz_says_the_bus_is_down_then_up_again(
    tmp_path: Path, pg_dsn: str, nats_server: NatsServer
) -> None:
    nodes = await start_nodes(tmp_path, pg_dsn, nats_server, 2)
    try:
        ids = [(n.server.data / "node-id").read_text().strip() for n in nodes]
        clusters = set()
        for node, node_id in zip(nodes, ids, strict=True):
            body = await until_health(node, bus_up_with_a_peer, "the bus up, the other heard")
            assert body["ok"] is True and body["degraded"] == []
            bus = body["bus"]
            assert bus["configured"] is True and bus["node"] == node_id
            assert bus["url"].endswith(f"127.0.0.1:{node.bus.port}")
            assert bus["for_secs"] >= 0 and bus["peers_known"] in (True, False)
            clusters.add(bus["cluster"])
        assert len(clusters) == 1 and "" not in clusters  # the database's id, for both
        # A node with a bus exposes every metric but the backup's, each as the table says.
        status, text = nodes[0].server.request("GET", "/metrics", cookie=nodes[0].owner.cookie)
        assert status == 200, text
        scraped = exposed(str(text))
        assert undocumented(scraped) == []
        table = {name for name, (_, when) in documented().items() if when != "backup"}
        assert set(scraped) == table, sorted(set(scraped) ^ table)

        nats_server.stop_for_now()
        for node in nodes:
            body = await until_health(node, lambda b: not b["bus"]["up"], "the bus down")
            assert body["ok"] is True and body["degraded"] == ["bus_down"]
            assert body["database"]["backend"] == "postgresql"
        # Chat goes on through the database meanwhile: a message sent on node 0 is stored.
        owner = nodes[0].owner
        project = nodes[0].server.get_json("/api/me", cookie=owner.cookie)["projects"][0]["id"]
        status, sent = nodes[0].server.request(
            "POST", f"/api/projects/{project}/messages",
            {"body": "总线停了也能发", "client_txn_id": "health-1"}, headers=owner.headers,
        )  # fmt: skip
        assert status == 201, sent
        # The peers lapse (no heartbeat comes): none is heard.
        down = await until_health(nodes[0], lambda b: b["bus"]["peers"] == 0, "no peer heard")
        assert down["bus"]["up"] is False and down["bus"]["peers_known"] is False

        nats_server.resume()
        for node in nodes:
            body = await until_health(node, bus_up_with_a_peer, "the bus back, the other heard")
            assert body["degraded"] == []

        # Its database cut off, a node answers 503 (a balancer takes it out), and 200 again once
        # the link is back; the other node never stops answering 200.
        nodes[0].pg.cut()
        try:
            with anyio.fail_after(WAIT):
                while True:
                    status, body = await anyio.to_thread.run_sync(health, nodes[0])
                    if status == 503:
                        break
                    await anyio.sleep(0.1)
            assert body["error"]["code"] == "database_unavailable", body
            status, other = await anyio.to_thread.run_sync(health, nodes[1])
            assert status == 200 and other["ok"] is True, other
        finally:
            nodes[0].pg.restore()
        body = await until_health(
            nodes[0], lambda b: b["ok"] is True, "the database back", reconnecting=True
        )
        assert body["degraded"] == []
    finally:
        for node in nodes:
            node.stop()
