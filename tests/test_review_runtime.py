"""Regression tests for the review's findings on the runtime, the ledger and the hub."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus

from room.client import AgentClient, Batch
from room.store import deliveries as deliveries_store
from room.store.migrate import connect, migrate
from tests.support.llm_servers import OpenAIServer, Reply, openai_text, openai_tool_call
from tests.support.server import start_with_openai
from tests.support.wsclient import Client
from tests.test_runtime_live import Room, agent_replies, eventually


@pytest.mark.anyio
@pytest.mark.usefixtures("clients")
async def test_a_member_who_leaves_stops_receiving_the_project(room: Room) -> None:
    server = room.server
    bob = server.invite(room.owner, room.project, "bob", "小博")
    client = await Client.open(server.ws_url, cookie=bob.cookie, origin=server.origin)
    await client.send({"type": "subscribe", "project_id": room.project})
    await client.wait_for("subscribed")
    members = room.get(f"/api/projects/{room.project}")["members"]
    bob_id = next(m["id"] for m in members if m["handle"] == "bob")
    room.post(f"/api/projects/{room.project}/members/{bob_id}/leave", {})
    gone = await client.wait_for("unsubscribed")
    assert gone["reason"] == "left"
    room.say("@lead 鲍勃走了之后的消息")
    with pytest.raises(TimeoutError):
        await client.wait_for("message", timeout=1.0)
    status, body = server.request(
        "POST",
        f"/api/projects/{room.project}/messages",
        {"body": "我还在吗"},
        headers=bob.headers,
    )
    assert status == 403 and body["error"]["code"] == "not_member"


@pytest.mark.anyio
@pytest.mark.usefixtures("clients")
async def test_a_graceful_restart_reruns_the_interrupted_turn(
    tmp_path: Path, llm: OpenAIServer
) -> None:
    data = tmp_path / "data"
    server = start_with_openai(data, llm)
    room = Room(server, llm)
    room.route("lead")
    llm.push(Reply(body=openai_text("太慢").body, delay_secs=30))
    sent = room.say("@lead 慢慢来")
    await eventually(lambda: room.deliveries(sent["message_id"])[0]["state"] == "delivered")
    await eventually(lambda: len(llm.chat_requests) == 1)
    server.stop()  # SIGTERM: a normal stop, not a crash
    llm.push(openai_text("重启后完成"))
    again = start_with_openai(data, llm)
    try:
        room.server, room.owner = again, again.login()
        await eventually(lambda: agent_replies(room, "lead"))
        assert [r["body"] for r in agent_replies(room, "lead")] == ["重启后完成"]
        assert room.deliveries(sent["message_id"])[0]["state"] == "consumed"
    finally:
        again.stop()


@pytest.mark.anyio
@pytest.mark.usefixtures("clients")
async def test_a_pause_while_waiting_for_a_turn_slot_holds_instead_of_failing(
    tmp_path: Path, llm: OpenAIServer
) -> None:
    server = start_with_openai(tmp_path / "data", llm, ROOM_MAX_CONCURRENT_TURNS="1")
    try:
        room = Room(server, llm)
        room.add_agent("slow", "backend", "慢")
        room.add_agent("quick", "frontend", "快")
        room.route("slow")
        room.route("quick")

        def answer(request: dict[str, Any]) -> Reply:
            if "你是 @slow" in request["messages"][0]["content"]:
                return Reply(body=openai_text("慢的回答").body, delay_secs=1.5)
            return openai_text("快的回答")

        llm.push(*[answer] * 10)
        room.say("@slow 先做")
        await eventually(lambda: len(llm.chat_requests) == 1)
        waiting = room.say("@quick 等一个空位")
        room.post(f"/api/projects/{room.project}/lifecycle", {"op": "pause"})
        await anyio.sleep(2.0)
        assert room.deliveries(waiting["message_id"])[0]["state"] == "held"
        room.post(f"/api/projects/{room.project}/lifecycle", {"op": "resume"})
        await eventually(lambda: agent_replies(room, "quick"))
        assert room.deliveries(waiting["message_id"])[0]["state"] == "consumed"
    finally:
        server.stop()


@pytest.mark.anyio
@pytest.mark.usefixtures("clients")
async def test_the_token_budget_stops_the_turn_at_the_next_step(
    room: Room, llm: OpenAIServer
) -> None:
    room.route("lead")
    room.post(f"/api/projects/{room.project}/limits", {"token_budget": 10})
    llm.push(
        openai_tool_call("room_members", {}, call_id="a"),
        openai_tool_call("room_history", {}, call_id="b"),
        openai_text("不该走到这里"),
    )
    room.say("@lead 用掉预算")
    await eventually(lambda: room.get(f"/api/projects/{room.project}/brake")["tripped"])
    await anyio.sleep(1.0)
    assert len(llm.chat_requests) == 1  # no request after the budget was spent
    assert room.get(f"/api/projects/{room.project}/brake")["tripped"] == "token_budget"
    assert agent_replies(room, "lead") == []


@pytest.mark.anyio
@pytest.mark.usefixtures("clients")
async def test_a_message_steered_at_the_last_step_waits_instead_of_failing(
    room: Room, llm: OpenAIServer
) -> None:
    room.route("lead")
    room.post(f"/api/projects/{room.project}/limits", {"max_steps": 1})
    llm.push(Reply(body=openai_tool_call("room_members", {}).body, delay_secs=1.0))
    room.say("@lead 第一条")
    await eventually(lambda: len(llm.chat_requests) == 1)
    late = room.say("@lead 第二条")
    notice = await eventually(
        lambda: [m for m in room.messages() if m["kind"] == "system" and "步数制动" in m["body"]]
    )
    assert notice
    assert room.deliveries(late["message_id"])[0]["state"] == "pending"


@pytest.mark.anyio
@pytest.mark.usefixtures("clients")
async def test_a_null_limit_falls_back_to_the_default(room: Room) -> None:
    room.post(f"/api/projects/{room.project}/limits", {"agent_turn_cap": None})
    brake = room.get(f"/api/projects/{room.project}/brake")
    assert brake["limits"]["agent_turn_cap"] == 12
    sent = room.say("限额之后的消息")
    await eventually(lambda: agent_replies(room, "lead"))
    assert room.deliveries(sent["message_id"])[0]["state"] == "consumed"


@pytest.mark.anyio
@pytest.mark.usefixtures("clients")
async def test_two_sockets_of_one_external_agent_never_get_the_same_delivery(room: Room) -> None:
    server = room.server
    room.add_agent("outside", "backend", "外部", driver="external")
    token = server.agent_token("演示项目", "outside")
    a = await Client.open(server.ws_url, token=token)
    b = await Client.open(server.ws_url, token=token)
    await a.wait_for("hello")
    await b.wait_for("hello")
    for i in range(6):
        room.say(f"@outside 第 {i} 件")
    seen: list[int] = []

    async def collect(client: Client) -> None:
        with anyio.move_on_after(2.0):
            while True:
                frame = await client.recv(timeout=3)
                if frame["type"] == "inbox":
                    seen.extend(d["delivery_id"] for d in frame["deliveries"])

    async with anyio.create_task_group() as tg:
        tg.start_soon(collect, a)
        tg.start_soon(collect, b)
    assert len(seen) == len(set(seen)) == 6


@pytest.mark.anyio
@pytest.mark.usefixtures("clients")
async def test_an_external_agents_turns_count_toward_the_loop_brake(room: Room) -> None:
    server = room.server
    room.add_agent("outside", "backend", "外部", driver="external")
    room.post(f"/api/projects/{room.project}/limits", {"agent_turn_cap": 2})
    token = server.agent_token("演示项目", "outside")
    agent = await Client.open(server.ws_url, token=token)
    await agent.wait_for("hello")
    for i in range(3):
        room.say(f"@outside 第 {i} 件")
    ids: list[int] = []
    while len(ids) < 3:
        frame = await agent.wait_for("inbox")
        ids.extend(d["delivery_id"] for d in frame["deliveries"])
    # Three turns of its own, one delivery each, with no human message in between.
    for delivery_id in ids:
        await agent.send({"type": "consume", "delivery_ids": [delivery_id]})
    brake = await eventually(
        lambda: (b := room.get(f"/api/projects/{room.project}/brake"))["tripped"] and b
    )
    assert brake["tripped"] == "agent_turn_cap"
    # Braked: a new mention waits, it is not offered.
    held = room.say("@outside 还有一件")
    with anyio.move_on_after(1.0):
        frame = await agent.wait_for("inbox", timeout=2)
        pytest.fail(f"offered while braked: {frame}")
    assert room.deliveries(held["message_id"])[0]["state"] == "pending"
    # A steer is part of a running turn, not a new one: it never trips anything.
    room.post(f"/api/projects/{room.project}/brake/clear", {})
    frame = await agent.wait_for("inbox")
    steered = [d["delivery_id"] for d in frame["deliveries"]]
    await agent.send({"type": "consume", "delivery_ids": steered, "mode": "steer"})
    await eventually(lambda: room.deliveries(held["message_id"])[0]["state"] == "consumed")
    assert room.get(f"/api/projects/{room.project}/brake")["tripped"] is None


@pytest.mark.anyio
@pytest.mark.usefixtures("clients")
async def test_a_resume_that_is_never_read_is_cut_not_buffered(
    tmp_path: Path, llm: OpenAIServer
) -> None:
    server = start_with_openai(tmp_path / "data", llm, ROOM_OUTBOX_BYTES="131072")
    try:
        room = Room(server, llm)
        lead = room.members["lead"]["id"]
        room.post(f"/api/projects/{room.project}/members/{lead}/pause", {})
        writer = await Client.open(server.ws_url, cookie=room.owner.cookie, origin=server.origin)
        body = "满" * 10_000
        for i in range(300):
            await writer.send(
                {"type": "send", "project_id": room.project, "client_txn_id": f"r{i}", "body": body}
            )
            await writer.wait_for("ack")
        lazy = await Client.open(server.ws_url, cookie=room.owner.cookie, origin=server.origin)
        lazy.ws.transport.pause_reading()
        await lazy.send({"type": "subscribe", "project_id": room.project, "since": 0})
        await anyio.sleep(3.0)
        lazy.ws.transport.resume_reading()
        with pytest.raises(ConnectionClosed):
            while True:
                await lazy.recv()
        assert lazy.ws.close_code == 1013
    finally:
        server.stop()


def test_the_ledger_refuses_moves_out_of_final_states(tmp_path: Path) -> None:
    path = tmp_path / "room.sqlite"
    conn = connect(path)
    migrate(conn, path, now=time.time())
    conn.executescript(
        """
        INSERT INTO projects (name, created_at, updated_at) VALUES ('p', 0, 0);
        INSERT INTO members (project_id, kind, role, handle, display_name, created_at)
            VALUES (1, 'agent', 'lead', 'a', 'a', 0);
        INSERT INTO messages (id, project_id, seq, kind, body, frame, created_at)
            VALUES (1, 1, 1, 'chat', 'x', '{}', 0);
        INSERT INTO deliveries (project_id, message_id, recipient_id, state, created_at,
            updated_at) VALUES (1, 1, 1, 'cancelled', 0, 0);
        """
    )
    assert deliveries_store.set_state(conn, [1], "consumed", 1.0) == []
    assert deliveries_store.set_state(conn, [1], "pending", 1.0) == []
    assert conn.execute("SELECT state FROM deliveries").fetchone()[0] == "cancelled"


@pytest.mark.anyio
async def test_the_roster_cache_does_not_keep_a_read_that_raced_an_invalidation(
    tmp_path: Path,
) -> None:
    from room.core import RosterCache
    from room.store import Database

    path = tmp_path / "room.sqlite"
    conn = connect(path)
    migrate(conn, path, now=time.time())
    conn.execute("INSERT INTO projects (name, created_at, updated_at) VALUES ('p', 0, 0)")
    conn.close()
    db = Database(path, readers=1)
    db.start(asyncio.get_running_loop())
    try:
        cache = RosterCache(db)
        pending = asyncio.ensure_future(cache.get(1))
        await asyncio.sleep(0)  # the read is in flight
        cache.invalidate(1)  # a member changed meanwhile
        await pending
        assert cache.peek(1) is None
        await cache.get(1)
        assert cache.peek(1) is not None
    finally:
        await db.close()


@pytest.mark.anyio
@pytest.mark.usefixtures("clients")
async def test_an_agent_that_leaves_has_its_open_sockets_closed(room: Room) -> None:
    server = room.server
    outside = room.add_agent("outside", "backend", "外部", driver="external")
    token = server.agent_token("演示项目", "outside")
    by_header = await Client.open(server.ws_url, token=token)
    await by_header.wait_for("hello")
    by_frame = await Client.open(server.ws_url)  # authenticates with a first `auth` frame
    await by_frame.send({"type": "auth", "token": token})
    await by_frame.wait_for("hello")
    watcher = await Client.open(server.ws_url, cookie=room.owner.cookie, origin=server.origin)
    await watcher.wait_for("hello")

    async def handler(batch: Batch) -> str:
        return "不会收到"

    # room.client, as `room agent` runs it: it reconnects after a lost socket, and stops when
    # its token is refused.
    agent = AgentClient(server.origin, token, handler)
    agent_process = asyncio.ensure_future(agent.run())
    await eventually(lambda: agent.members)  # connected and subscribed
    room.post(f"/api/projects/{room.project}/members/{outside}/leave", {})
    for agent in (by_header, by_frame):
        with pytest.raises(ConnectionClosed) as closed:
            while True:
                await agent.recv(timeout=5)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 4401
        assert "left" in closed.value.rcvd.reason
    # The token is gone too: a new socket with it is refused.
    with pytest.raises(InvalidStatus):
        await Client.open(server.ws_url, token=token)
    with pytest.raises(InvalidStatus):
        await asyncio.wait_for(agent_process, 10)
    await watcher.send({"type": "ping", "req_id": "still-here"})
    await watcher.wait_for(lambda f: f.get("req_id") == "still-here")  # the owner's stays
