"""The cluster's bus (docs/cluster.md): two room servers on one PostgreSQL database and one
private nats-server, real WebSocket clients on both.

The servers check the database for events whose hint never came only every
``ROOM_BUS_POLL_SECS`` = 60 s while the bus is up, far beyond the tests' waits: what reaches the
other server's sockets while the bus is up came over the bus. With the bus stopped, the 50 ms
poll carries everything (in order, nothing twice); once it is back, the bus does again.

The nodes and the helpers (send, wait for seqs, pause the lead, read /metrics) are
tests/support/cluster.py's, as the other cluster modules' are: each node's links to the database
and the bus go through a pass-through proxy of its own, which these tests never cut."""

from __future__ import annotations

import contextlib
import io
import json
import urllib.parse
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import anyio
import psycopg
import pytest
from websockets.exceptions import ConnectionClosed

from room.cli import main as room_main
from tests.support.cluster import (
    WAIT,
    first_project,
    make_node,
    metrics_show,
    pause_lead,
    send_some,
    start_nodes,
    stream_seqs,
    until_seq,
)
from tests.support.llm_servers import TEST_API_KEY, OpenAIServer, openai_text
from tests.support.nats import NatsServer
from tests.support.server import ServerProcess
from tests.support.wsclient import Client, subscribed

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("clients")]


async def test_events_typing_and_sign_out_cross_nodes_on_the_bus(
    tmp_path: Path, pg_dsn: str, nats_server: NatsServer
) -> None:
    a, b = await start_nodes(tmp_path, pg_dsn, nats_server, 2)
    try:
        project = first_project(a)
        pause_lead(a, project)
        reader = await subscribed(b.server, b.owner.cookie, project)
        head = reader.frames[-1].get("head_seq")
        sender = await subscribed(a.server, a.owner.cookie, project)
        acked = await send_some(sender, project, "A", 30)
        seqs = await until_seq(reader, acked[-1])
        # Every one, once, in order, from just after the head it subscribed at.
        assert seqs == list(range(seqs[0], acked[-1] + 1)), seqs
        assert head is None or seqs[0] == head + 1

        # Each node hears the other's heartbeat.
        await metrics_show(a, "room_bus_peers 1.0")
        await metrics_show(b, "room_bus_peers 1.0")
        # B timed the hints it heard from A's commits (room_bus_lag_seconds).
        code, text = b.server.request("GET", "/metrics", cookie=b.owner.cookie)
        lines = dict(line.rsplit(" ", 1) for line in str(text).splitlines() if line[:1] != "#")
        assert code == 200 and float(lines["room_bus_lag_seconds_count"]) >= 1

        # `room cluster status` hears both, and names the data folder's own.
        out = io.StringIO()
        args = ["cluster", "status", "--json", "--data", str(a.server.data), "--database", pg_dsn]
        args += ["--bus", nats_server.url]

        def status() -> int:
            with contextlib.redirect_stdout(out):
                return room_main(args)

        assert await anyio.to_thread.run_sync(status) == 0
        found = json.loads(out.getvalue())
        ids = [(n.server.data / "node-id").read_text().strip() for n in (a, b)]
        assert found["node"] == ids[0] and found["problems"] == []
        assert found["bus"]["reached"] and sorted(found["bus"]["nodes"]) == sorted(ids)
        report = json.loads((a.server.data / "boot-report.json").read_text())
        assert report["database"]["node"] == ids[0]
        assert report["database"]["bus"] == a.bus.url(nats_server.url)  # through its proxy
        # The database's cluster id, which names every subject (docs/cluster.md, "Subjects").
        with psycopg.connect(pg_dsn) as conn:
            row = conn.execute("SELECT cluster FROM cluster_identity").fetchone()
        assert row is not None and found["cluster"] == report["database"]["cluster"] == row[0]

        # Typing on A shows on B (a frame outside the stream: only the bus carries it).
        await sender.send({"type": "typing", "project_id": project, "active": True})
        typing = await reader.wait_for(lambda f: f.get("type") == "typing", timeout=WAIT)
        assert typing["project_id"] == project and typing["active"] is True

        # The owner signs out on A: the same session's socket on B is cut at once.
        same_session = await subscribed(b.server, a.owner.cookie, project)
        data = urllib.parse.urlencode({"csrf_token": a.owner.csrf}).encode()
        request = urllib.request.Request(
            f"{a.server.origin}/logout",
            data=data,
            headers={"Origin": a.server.origin, "Cookie": f"room_session={a.owner.cookie}"},
        )
        opener = urllib.request.build_opener(_NoRedirect)
        with pytest.raises(urllib.error.HTTPError) as redirect:
            opener.open(request, timeout=10)
        redirect.value.close()
        assert redirect.value.code == 303
        with anyio.fail_after(WAIT), pytest.raises(ConnectionClosed) as closed:
            while True:
                await same_session.recv(timeout=WAIT)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 4401
        # The owner's other session (signed in on B) goes on.
        await reader.send({"type": "typing", "project_id": project, "active": False})
        for client in (reader, sender):
            client.drop()
    finally:
        a.stop()
        b.stop()


async def test_the_poll_covers_for_a_stopped_bus_and_the_bus_takes_over_again(
    tmp_path: Path, pg_dsn: str, nats_server: NatsServer
) -> None:
    a, b = await start_nodes(tmp_path, pg_dsn, nats_server, 2)
    try:
        project = first_project(a)
        pause_lead(a, project)
        reader = await subscribed(b.server, b.owner.cookie, project)
        sender = await subscribed(a.server, a.owner.cookie, project)
        first = await send_some(sender, project, "before", 10)
        await until_seq(reader, first[-1])

        nats_server.stop_for_now()  # mid-burst: the hints of these are lost
        during = await send_some(sender, project, "during", 20)
        seqs = await until_seq(reader, during[-1])  # over the 50 ms poll
        assert seqs == list(range(seqs[0], during[-1] + 1)), seqs

        nats_server.resume()
        await metrics_show(a, "room_bus_up 1.0")
        await metrics_show(b, "room_bus_up 1.0")
        after = await send_some(sender, project, "after", 10)
        seqs = await until_seq(reader, after[-1])  # the long poll is 60 s away: the bus
        assert seqs == list(range(seqs[0], after[-1] + 1)), seqs
        for client in (reader, sender):
            client.drop()
    finally:
        a.stop()
        b.stop()


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


async def test_a_node_killed_mid_burst_costs_its_sockets_a_resume_elsewhere(
    tmp_path: Path, pg_dsn: str, nats_server: NatsServer
) -> None:
    a, b = await start_nodes(tmp_path, pg_dsn, nats_server, 2)
    try:
        project = first_project(a)
        pause_lead(a, project)
        # A reader on the node that dies.
        doomed = await subscribed(a.server, a.owner.cookie, project)
        subscribed_frame = next(f for f in doomed.frames if f.get("type") == "subscribed")
        epoch = subscribed_frame["project"]["epoch"]
        head = int(subscribed_frame.get("head_seq") or 0)
        survivor = await subscribed(b.server, b.owner.cookie, project)
        sender = await subscribed(b.server, b.owner.cookie, project)
        acked = await send_some(sender, project, "one", 15)
        await until_seq(doomed, acked[-1])

        a.server.kill9()  # mid-burst: the sender goes on on B
        acked += await send_some(sender, project, "two", 15)
        seen = stream_seqs(doomed)
        cursor = seen[-1]
        # The doomed reader resumes on B from its cursor: no gap, no duplicate.
        resumed = await subscribed(b.server, b.owner.cookie, project, since=cursor, epoch=epoch)
        acked += await send_some(sender, project, "three", 5)
        after = await until_seq(resumed, acked[-1])
        assert seen + after == list(range(head + 1, acked[-1] + 1)), (seen, after)
        # The survivor's subscriber on B got everything, once each and in order.
        seqs = await until_seq(survivor, acked[-1])
        assert seqs == list(range(seqs[0], acked[-1] + 1)), seqs
        assert sorted(acked) == list(range(acked[0], acked[-1] + 1))
        for client in (resumed, survivor, sender):
            client.drop()
        doomed.drop()
    finally:
        a.stop()
        b.stop()


def agent_token(server: ServerProcess, dsn: str, handle: str) -> str:
    out = io.StringIO()
    args = ["member", "token", "--data", str(server.data), "--database", dsn, "演示项目", handle]
    with contextlib.redirect_stdout(out):
        assert room_main(args) == 0
    return out.getvalue().strip()


async def test_an_external_agent_on_one_node_is_woken_by_a_mention_on_the_other(
    tmp_path: Path, pg_dsn: str, nats_server: NatsServer
) -> None:
    a, b = await start_nodes(tmp_path, pg_dsn, nats_server, 2)
    try:
        project = first_project(a)
        pause_lead(a, project)
        member = {"role": "backend", "handle": "outside", "display_name": "外部"}
        status, made = a.server.request(
            "POST", f"/api/projects/{project}/members", {**member, "driver": "external"},
            headers=a.owner.headers,
        )  # fmt: skip
        assert status == 201, made
        token = await anyio.to_thread.run_sync(agent_token, b.server, pg_dsn, "outside")
        agent = await Client.open(b.server.ws_url, token=token)  # its socket is on B
        await agent.wait_for("hello")
        status, sent = a.server.request(
            "POST", f"/api/projects/{project}/messages",
            {"body": "@outside 在吗", "client_txn_id": uuid.uuid4().hex}, headers=a.owner.headers,
        )  # fmt: skip
        assert status == 201, sent
        inbox = await agent.wait_for("inbox", timeout=WAIT)  # A's wake, over the bus
        assert inbox["deliveries"][0]["message_id"] == sent["message_id"]
        agent.drop()
    finally:
        a.stop()
        b.stop()


async def test_a_roster_change_on_one_node_drops_the_other_nodes_cached_roster(
    tmp_path: Path, pg_dsn: str, nats_server: NatsServer
) -> None:
    a, b = await start_nodes(tmp_path, pg_dsn, nats_server, 2)
    try:
        project = first_project(a)
        pause_lead(a, project)
        # B caches the project's roster.
        before = await subscribed(b.server, b.owner.cookie, project)
        first = next(f for f in before.frames if f.get("type") == "subscribed")
        member = {"role": "backend", "handle": "helper", "display_name": "帮手"}
        status, made = a.server.request(
            "POST", f"/api/projects/{project}/members", {**member, "driver": "external"},
            headers=a.owner.headers,
        )  # fmt: skip
        assert status == 201, made
        helper = str(made["member"]["id"])
        assert helper not in first["presence"]
        # B's presence snapshot is built from its cached roster: the new member shows once the
        # bus's invalidation came (never, if B kept the roster it cached).
        with anyio.fail_after(WAIT):
            while True:
                again = await subscribed(b.server, b.owner.cookie, project)
                frame = next(f for f in again.frames if f.get("type") == "subscribed")
                again.drop()
                if helper in frame["presence"]:
                    break
                await anyio.sleep(0.1)
        before.drop()
    finally:
        a.stop()
        b.stop()


@pytest.mark.parametrize("how", ["member_stop", "project_archive"])
async def test_a_stop_asked_on_one_node_stops_the_turn_running_on_the_other(
    tmp_path: Path, pg_dsn: str, nats_server: NatsServer, llm: OpenAIServer, how: str
) -> None:
    provider = {"OPENAI_BASE_URL": llm.base_url, "OPENAI_API_KEY": TEST_API_KEY}
    a, b = (make_node(tmp_path / n, pg_dsn, nats_server) for n in "ab")
    a.server.env.update(provider)
    b.server.env.update(provider)
    a.start()
    try:
        b.start()
        project = first_project(a)
        members = a.server.get_json(f"/api/projects/{project}", cookie=a.owner.cookie)["members"]
        lead = next(m["id"] for m in members if m["handle"] == "lead")
        route = {"scope": "member", "target": str(lead), "value": "openai/gpt-test"}
        status, body = a.server.request(
            "POST", f"/api/projects/{project}/routes", {**route, "reason": "测试"},
            headers=a.owner.headers,
        )  # fmt: skip
        assert status in (200, 201), body
        llm.push(openai_text("太慢了", delay_secs=120))  # the model takes its time
        status, sent = b.server.request(
            "POST", f"/api/projects/{project}/messages",
            {"body": "@lead 慢慢来", "client_txn_id": uuid.uuid4().hex}, headers=b.owner.headers,
        )  # fmt: skip
        assert status == 201, sent
        node_a = (a.server.data / "node-id").read_text().strip()

        def turn_state() -> list[tuple[str, str]]:
            with psycopg.connect(pg_dsn) as conn:
                rows = conn.execute(
                    "SELECT state, coalesce(owner, '') FROM turns WHERE member_id = %s", (lead,)
                ).fetchall()
            return [(str(s), str(o)) for s, o in rows]

        with anyio.fail_after(WAIT):
            while True:  # the turn runs on A, the project's home (it made it), woken by B
                if turn_state() == [("running", node_a)]:
                    break
                await anyio.sleep(0.1)
        if how == "member_stop":
            status, answer = b.server.request(
                "POST", f"/api/projects/{project}/members/{lead}/stop", {}, headers=b.owner.headers
            )
            assert status == 200, answer
            # It ran on A: the request went on, and the answer came once A had ended it.
            assert answer["stop_requested"] is True and answer["stop_confirmed"] is True
            assert turn_state() == [("cancelled", node_a)]
        else:  # archiving the project stops all its turns, wherever they run
            status, answer = b.server.request(
                "POST", f"/api/projects/{project}/lifecycle", {"op": "archive"},
                headers=b.owner.headers,
            )  # fmt: skip
            assert status == 200, answer
            assert answer["project"]["state"] == "archived"  # confirmed: A ended it first
            assert turn_state() == [("cancelled", node_a)]
        with anyio.fail_after(WAIT):  # A stops it (the model would answer in 120 s)
            while True:
                if turn_state()[0][0] != "running":
                    break
                await anyio.sleep(0.1)
        assert turn_state() == [("cancelled", node_a)]
    finally:
        a.stop()
        b.stop()


async def test_nodes_started_while_the_bus_is_down_serve_on_the_poll_then_join_it(
    tmp_path: Path, pg_dsn: str, nats_server: NatsServer
) -> None:
    nats_server.stop_for_now()
    a, b = await start_nodes(tmp_path, pg_dsn, nats_server, 2)  # they start all the same
    try:
        project = first_project(a)
        pause_lead(a, project)
        reader = await subscribed(b.server, b.owner.cookie, project)
        sender = await subscribed(a.server, a.owner.cookie, project)
        during = await send_some(sender, project, "down", 10)
        seqs = await until_seq(reader, during[-1])  # the 50 ms poll
        assert seqs == list(range(seqs[0], during[-1] + 1)), seqs
        nats_server.resume()
        await metrics_show(a, "room_bus_up 1.0")
        await metrics_show(b, "room_bus_up 1.0")
        after = await send_some(sender, project, "up", 10)
        seqs = await until_seq(reader, after[-1])  # the bus (the long poll is 60 s away)
        assert seqs == list(range(seqs[0], after[-1] + 1)), seqs
        for client in (reader, sender):
            client.drop()
    finally:
        a.stop()
        b.stop()
