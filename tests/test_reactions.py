"""Emoji reactions (issue 17 item 3) and "mark as unread", over a real server and real sockets:
live to a second client, replayed to a client resuming with ``since``, rate limited, refused
for anything but one emoji, and the agents' ``room_react`` tool — which never delivers, never
mentions and never calls a model."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from room.errors import BadRequestError
from room.rules.reactions import check_emoji, summarise
from tests.support.live_room import Room, agent_replies, eventually
from tests.support.llm_servers import openai_text, openai_tool_call
from tests.support.server import ServerProcess
from tests.support.wsclient import Client, subscribed


@pytest.mark.parametrize("emoji", ["👍", "❤️", "👍🏽", "👨‍👩‍👧‍👦", "🇨🇳", "1️⃣", "✅", " 🎉 "])
def test_one_emoji_is_a_reaction(emoji: str) -> None:
    assert check_emoji(emoji) == emoji.strip()


@pytest.mark.parametrize("text", ["", " ", "a", "好", "👍👍", "#", "+1", "👍a", "<b>", "🎉" * 20])
def test_anything_else_is_refused(text: str) -> None:
    with pytest.raises(BadRequestError) as caught:
        check_emoji(text)
    assert caught.value.code == "bad_emoji"


def test_summary_keeps_first_use_order() -> None:
    rows = [("👀", 3), ("👍", 1), ("👀", 1), ("👍", 2)]
    assert summarise(rows) == [
        {"emoji": "👀", "count": 2, "members": [3, 1]},
        {"emoji": "👍", "count": 2, "members": [1, 2]},
    ]


def demo_project(server: ServerProcess, cookie: str) -> int:
    return int(server.get_json("/api/me", cookie=cookie)["projects"][0]["id"])


def quiet_lead(server: ServerProcess, cookie: str, headers: dict[str, str], project: int) -> int:
    members = server.get_json(f"/api/projects/{project}", cookie=cookie)["members"]
    lead = next(m["id"] for m in members if m["handle"] == "lead")
    status, _ = server.request(
        "POST", f"/api/projects/{project}/members/{lead}/pause", {}, headers=headers
    )
    assert status == 200
    return int(lead)


async def send(client: Client, project: int, body: str) -> dict[str, Any]:
    await client.send(
        {"type": "send", "project_id": project, "client_txn_id": uuid.uuid4().hex, "body": body}
    )
    return await client.wait_for("ack")


async def seen(client: Client, check: Any) -> dict[str, Any]:
    """The first frame received (live or inside a replayed batch) that passes ``check``."""
    while True:
        for frame in client.frames:
            if check(frame):
                return frame
        await client.recv()


async def react(client: Client, project: int, message_id: int, emoji: str, **kw: Any) -> Any:
    req = uuid.uuid4().hex
    await client.send(
        {
            "type": "react",
            "req_id": req,
            "project_id": project,
            "message_id": message_id,
            "emoji": emoji,
            **kw,
        }
    )
    return await client.wait_for(lambda f: f.get("req_id") == req)


@pytest.mark.anyio
@pytest.mark.usefixtures("clients")
async def test_reactions_live_and_resumable(server: ServerProcess) -> None:
    a = server.login()
    project = demo_project(server, a.cookie)
    quiet_lead(server, a.cookie, a.headers, project)
    b = server.invite(a, project, "wang", "小王")
    ca = await subscribed(server, a.cookie, project)
    cb = await subscribed(server, b.cookie, project)
    ack = await send(ca, project, "发布计划在这里")
    message_id = ack["message_id"]
    await cb.wait_for("message")
    cursor = ack["seq"]

    answer = await react(cb, project, message_id, "👍")
    assert answer["type"] == "ack" and answer["changed"] is True
    live = await ca.wait_for("message_updated")
    [thumbs] = live["message"]["reactions"]
    assert (thumbs["emoji"], thumbs["count"]) == ("👍", 1)
    assert live["message"]["body"] == "发布计划在这里"
    assert live["message"]["edited_at"] is None  # a reaction is no edit

    # Same reaction twice changes nothing and publishes nothing.
    again = await react(cb, project, message_id, "👍")
    assert again["changed"] is False and again["seq"] is None
    # A reconnecting client that missed the reactions replays them with ``since``.
    await ca.close()
    mine = await react(cb, project, message_id, "🎉")
    assert mine["changed"] is True
    owner_too = server.request(
        "POST",
        f"/api/messages/{message_id}/reactions",
        {"emoji": "👍"},
        headers=a.headers,
    )
    assert owner_too[0] == 200 and owner_too[1]["reactions"][0]["count"] == 2
    resumed = await subscribed(server, a.cookie, project, since=cursor)
    update = await seen(
        resumed,
        lambda f: (
            f.get("type") == "message_updated"
            and len(f["message"].get("reactions", [])) == 2
            and f["message"]["reactions"][0]["count"] == 2
        ),
    )
    assert [r["emoji"] for r in update["message"]["reactions"]] == ["👍", "🎉"]
    # History pages carry them too (the stored wire object).
    page = server.get_json(f"/api/projects/{project}/messages?limit=5", cookie=b.cookie)
    stored = next(m for m in page["messages"] if m["id"] == message_id)
    assert stored["reactions"] == update["message"]["reactions"]

    # Removing one's own: gone for everyone; the last one removes the key.
    await react(cb, project, message_id, "🎉", remove=True)
    await react(cb, project, message_id, "👍", remove=True)
    status, body = server.request(
        "POST",
        f"/api/messages/{message_id}/reactions",
        {"emoji": "👍", "remove": True},
        headers=a.headers,
    )
    assert status == 200 and body["reactions"] == []
    latest = await seen(
        resumed, lambda f: f.get("type") == "message_updated" and "reactions" not in f["message"]
    )
    assert latest["message"]["id"] == message_id

    # An edit keeps the reactions; nobody got a delivery from any of it.
    await react(cb, project, message_id, "👀")
    await resumed.send(
        {"type": "edit", "project_id": project, "message_id": message_id, "body": "发布计划（改）"}
    )
    edited = await resumed.wait_for(
        lambda f: f.get("type") == "message_updated" and f["message"]["body"] == "发布计划（改）"
    )
    assert edited["message"]["reactions"][0]["emoji"] == "👀"
    detail = server.get_json(f"/api/messages/{message_id}", cookie=a.cookie)
    assert [d["state"] for d in detail["deliveries"]] == ["held"]  # the paused lead's, only


@pytest.mark.anyio
@pytest.mark.usefixtures("clients")
async def test_bad_reactions_are_refused(server: ServerProcess) -> None:
    a = server.login()
    project = demo_project(server, a.cookie)
    quiet_lead(server, a.cookie, a.headers, project)
    ca = await subscribed(server, a.cookie, project)
    ack = await send(ca, project, "hello")
    for emoji in ("ab", "👍👍", "好"):
        answer = await react(ca, project, ack["message_id"], emoji)
        assert (answer["type"], answer["code"]) == ("error", "bad_emoji")
    answer = await react(ca, project, 10_000_000, "👍")
    assert (answer["type"], answer["code"]) == ("error", "no_message")
    await ca.send({"type": "delete", "project_id": project, "message_id": ack["message_id"]})
    await ca.wait_for("ack")
    answer = await react(ca, project, ack["message_id"], "👍")
    assert (answer["type"], answer["code"]) == ("error", "message_deleted")


@pytest.mark.anyio
@pytest.mark.usefixtures("clients")
async def test_reactions_are_rate_limited(server: ServerProcess) -> None:
    a = server.login()
    project = demo_project(server, a.cookie)
    quiet_lead(server, a.cookie, a.headers, project)
    ca = await subscribed(server, a.cookie, project)
    ack = await send(ca, project, "hello")
    codes = []
    for i in range(40):
        answer = await react(ca, project, ack["message_id"], "👍", remove=bool(i % 2))
        codes.append(answer.get("code", "ok"))
    assert "rate_limited" in codes
    assert codes[:10] == ["ok"] * 10  # the burst passes
    refused = codes.index("rate_limited")
    assert refused >= 15


@pytest.mark.anyio
@pytest.mark.usefixtures("clients")
async def test_mark_as_unread_moves_the_cursor_back(server: ServerProcess) -> None:
    a = server.login()
    project = demo_project(server, a.cookie)
    quiet_lead(server, a.cookie, a.headers, project)
    b = server.invite(a, project, "wang", "小王")
    ca = await subscribed(server, a.cookie, project)
    cb = await subscribed(server, b.cookie, project)
    acks = [await send(ca, project, f"第{i}条") for i in range(3)]
    head = acks[-1]["seq"]
    await cb.send({"type": "read", "project_id": project, "seq": head})
    await ca.wait_for(lambda f: f.get("type") == "read" and f["seq"] == head)

    def unread() -> int:
        me = server.get_json("/api/me", cookie=b.cookie)
        return int(next(p for p in me["projects"] if p["id"] == project)["unread"])

    assert unread() == 0
    back = acks[1]["seq"] - 1
    await cb.send(
        {"type": "read", "req_id": "u", "project_id": project, "seq": back, "unread": True}
    )
    answer = await cb.wait_for(lambda f: f.get("req_id") == "u")
    assert answer == {"type": "ack", "req_id": "u", "read_cursor": back}
    moved = await ca.wait_for(lambda f: f.get("type") == "read" and f["seq"] == back)
    assert moved["member_id"] != 0
    assert unread() == 2
    # A plain read afterwards moves it forward again, as ever.
    await cb.send({"type": "read", "project_id": project, "seq": head})
    await ca.wait_for(lambda f: f.get("type") == "read" and f["seq"] == head)
    assert unread() == 0


@pytest.mark.anyio
@pytest.mark.usefixtures("clients")
async def test_an_agent_acknowledges_with_a_reaction(room: Room) -> None:
    room.route("lead")
    room.llm.push(
        openai_tool_call("room_react", {"seq": 0, "emoji": "👀"}, call_id="r1"),
        openai_text("收到。"),
    )
    watcher = await Client.open(
        room.server.ws_url, cookie=room.owner.cookie, origin=room.server.origin
    )
    await watcher.wait_for("hello")
    await watcher.send({"type": "subscribe", "project_id": room.project})
    await watcher.wait_for("subscribed")
    sent = room.say("@lead 请看一下部署脚本")
    # The scripted call names seq 0 (no such message): the tool says so and the turn goes on.
    await eventually(lambda: agent_replies(room, "lead"))
    tools = [m for m in room.messages() if m["kind"] == "tool"]
    assert tools and tools[-1]["meta"]["tool"]["calls"][0]["ok"] is False

    room.llm.push(
        openai_tool_call("room_react", {"seq": sent["seq"], "emoji": "👀"}, call_id="r2"),
        openai_text("我来处理。"),
    )
    calls_before = len(room.llm.chat_requests)
    second = room.say("@lead 再看一下")
    await eventually(lambda: len(agent_replies(room, "lead")) >= 2)
    # (The agent's answer, a reply, also updates the message's thread count: not this one.)
    update = await watcher.wait_for(
        lambda f: (
            f.get("type") == "message_updated"
            and f["message"]["id"] == sent["message_id"]
            and "reactions" in f["message"]
        )
    )
    [eyes] = update["message"]["reactions"]
    assert eyes["emoji"] == "👀" and eyes["members"] == [room.members["lead"]["id"]]
    # The reaction woke nobody and called no model: two requests for the second turn only.
    assert len(room.llm.chat_requests) == calls_before + 2
    assert update["message"]["mentions"] == sent["message"]["mentions"]
    assert [d["state"] for d in room.deliveries(sent["message_id"])] == ["consumed"]
    assert second["message_id"] != sent["message_id"]
