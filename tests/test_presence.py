"""Presence (issue 14, item 11): "在线" means here now — a person with a socket open, an agent
running, idle or paused — not membership. Over a real server and real sockets, and the pure rule."""

from __future__ import annotations

from typing import Any

import pytest

from room.rules.entities import Member
from room.rules.ops import presence_of
from tests.support.live_room import Room
from tests.support.llm_servers import openai_text
from tests.support.wsclient import Client, Frame


def _member(kind: str = "agent", status: str = "active", driver: str = "builtin") -> Member:
    return Member(1, 1, kind, None if kind == "agent" else 7, "backend", "m", "M", status, driver)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("member", "state", "connected", "running", "expected"),
    [
        (_member("human"), "active", True, False, "online"),
        (_member("human"), "active", False, False, "offline"),
        (_member("human"), "archived", True, False, "online"),
        (_member("human", status="left"), "active", True, False, "offline"),
        (_member(), "active", False, False, "idle"),
        (_member(), "active", False, True, "running"),
        (_member(status="paused"), "active", False, False, "paused"),
        (_member(status="paused"), "active", False, True, "running"),  # a stop not yet done
        (_member(), "paused", False, False, "paused"),
        (_member(), "stop_unconfirmed", False, True, "running"),
        (_member(), "archived", False, False, "offline"),
        (_member(), "trashed", False, False, "offline"),
        (_member(status="left"), "active", False, False, "offline"),
        (_member(driver="external"), "active", False, False, "offline"),
        (_member(driver="external"), "active", True, False, "idle"),
        (_member(driver="external", status="paused"), "active", True, False, "paused"),
    ],
)
def test_presence_rule(
    member: Member, state: str, connected: bool, running: bool, expected: str
) -> None:
    assert presence_of(member, state, connected=connected, running=running) == expected


async def watching(room: Room, cookie: str | None = None) -> tuple[Client, Frame]:
    server = room.server
    client = await Client.open(
        server.ws_url, cookie=cookie or room.owner.cookie, origin=server.origin
    )
    await client.wait_for("hello")
    await client.send({"type": "subscribe", "project_id": room.project})
    return client, await client.wait_for("subscribed")


async def presence_where(client: Client, member_id: int, state: str) -> dict[str, Any]:
    frame = await client.wait_for(
        lambda f: f["type"] == "presence" and f["presence"].get(str(member_id)) == state
    )
    return dict(frame["presence"])


@pytest.mark.anyio
@pytest.mark.usefixtures("clients")
async def test_a_person_is_online_while_a_socket_is_open(room: Room) -> None:
    bob = room.server.invite(room.owner, room.project, "bob", "王小明")
    bob_id = int(room.get(f"/api/projects/{room.project}")["members"][-1]["id"])
    owner_id = room.members["owner"]["id"]
    watcher, subscribed = await watching(room)
    assert subscribed["presence"][str(owner_id)] == "online"  # this very socket
    assert subscribed["presence"][str(bob_id)] == "offline"  # a member, not here
    assert subscribed["presence"][str(room.members["lead"]["id"])] == "idle"

    # Bob opens the page (a socket, not even subscribed to this project): online.
    first = await Client.open(room.server.ws_url, cookie=bob.cookie, origin=room.server.origin)
    await first.wait_for("hello")
    await presence_where(watcher, bob_id, "online")
    second, _ = await watching(room, bob.cookie)  # a second tab
    await first.close()
    await watcher.send({"type": "ping", "req_id": "p1"})
    await watcher.wait_for(lambda f: f.get("req_id") == "p1")
    # One tab still open: still online (no frame says otherwise).
    assert not any(
        f["type"] == "presence" and f["presence"][str(bob_id)] == "offline" for f in watcher.frames
    )
    # The browser closes without a goodbye (killed): offline at once.
    assert second.ws.transport is not None
    second.ws.transport.abort()
    await presence_where(watcher, bob_id, "offline")


@pytest.mark.anyio
@pytest.mark.usefixtures("clients")
async def test_agents_are_running_idle_paused_or_offline(room: Room) -> None:
    room.route("lead")
    lead = room.members["lead"]["id"]
    watcher, _ = await watching(room)
    room.llm.push(openai_text("想好了", delay_secs=1.5))
    room.say("@lead 想一想")
    await presence_where(watcher, lead, "running")
    await presence_where(watcher, lead, "idle")
    room.post(f"/api/projects/{room.project}/members/{lead}/pause", {})
    await presence_where(watcher, lead, "paused")
    room.post(f"/api/projects/{room.project}/members/{lead}/resume", {})
    await presence_where(watcher, lead, "idle")

    # An external agent is here only while its socket is open; killed, it goes offline.
    outside = room.add_agent("outside", "backend", "外部", driver="external")
    await presence_where(watcher, outside, "offline")
    token = room.server.agent_token("演示项目", "outside")
    agent = await Client.open(room.server.ws_url, token=token)
    await agent.wait_for("hello")
    await presence_where(watcher, outside, "idle")
    assert agent.ws.transport is not None
    agent.ws.transport.abort()
    await presence_where(watcher, outside, "offline")

    # A closed project's agents are not here.
    room.post(f"/api/projects/{room.project}/lifecycle", {"op": "archive"})
    closed = await presence_where(watcher, lead, "offline")
    # Only what changed is sent: the people who are here stay as they were.
    assert closed.get(str(room.members["owner"]["id"]), "online") == "online"
    assert set(closed) <= {str(lead), str(outside)}
