"""The room as an MCP server (issue 31), driven by the official ``mcp`` SDK's own client over
Streamable HTTP against a real server subprocess: the member's tools, authorship, evidence,
refusals, resources and their notifications, revocation."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import mcp_types as types
import pytest
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client

from room.agents.presets import WORK_TOOLS, preset_for
from room.agents.tools import BUILTIN_TOOLS
from tests.support.live_room import Room
from tests.support.server import ServerProcess
from tests.support.wsclient import Client

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("clients")]


@asynccontextmanager
async def mcp_session(
    server: ServerProcess, token: str, **session: Any
) -> AsyncIterator[ClientSession]:
    """The SDK's client: its Streamable HTTP transport and ClientSession, with the bearer token."""
    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(30, read=60)
    )
    async with (
        http,
        streamable_http_client(f"{server.origin}/mcp", http_client=http) as (read, write),
        ClientSession(read, write, **session) as client,
    ):
        await client.initialize()
        yield client


def payload(result: types.CallToolResult) -> dict[str, Any]:
    block = result.content[0]
    assert isinstance(block, types.TextContent)
    data: dict[str, Any] = json.loads(block.text)
    return data


def external(room: Room, handle: str, role: str = "backend") -> tuple[int, str]:
    member_id = room.add_agent(handle, role, f"外部{handle}", driver="external")
    return member_id, room.server.agent_token("演示项目", handle)


async def test_lists_exactly_the_roles_tools_from_the_same_specs(room: Room) -> None:
    _, token = external(room, "coder")
    _, lead_token = external(room, "planner", role="lead")
    async with mcp_session(room.server, token) as client:
        listed = (await client.list_tools()).tools
    names = {t.name for t in listed}
    granted = set(preset_for("backend").tools) - set(WORK_TOOLS)
    assert names == granted
    assert "room_plan_submit" not in names and "shell" not in names
    send = next(t for t in listed if t.name == "room_send")
    spec = BUILTIN_TOOLS["room_send"].spec
    assert send.description == spec.description
    assert send.input_schema == dict(spec.parameters)
    async with mcp_session(room.server, lead_token) as client:
        lead_names = {t.name for t in (await client.list_tools()).tools}
    assert lead_names == set(preset_for("lead").tools) - set(WORK_TOOLS)
    assert "room_plan_submit" in lead_names


async def test_a_message_is_authored_by_the_member_with_mentions_resolved(room: Room) -> None:
    coder_id, token = external(room, "coder")
    watcher = await Client.open(
        room.server.ws_url, cookie=room.owner.cookie, origin=room.server.origin
    )
    await watcher.send({"type": "subscribe", "project_id": room.project})
    await watcher.wait_for("subscribed")
    async with mcp_session(room.server, token) as client:
        result = await client.call_tool(
            "room_send", {"text": "@lead 接口写好了，请看", "author_id": 1}
        )
    assert not result.is_error, result
    sent = payload(result)
    assert sent["ok"] is True
    frame = await watcher.wait_for(
        lambda f: f.get("type") == "message" and f["message"]["kind"] != "tool"
    )
    message = frame["message"]
    assert message["id"] == sent["message_id"]
    assert message["author_id"] == coder_id  # the token's member, whatever the arguments say
    assert message["body"] == "@lead 接口写好了，请看"
    assert message["mentions"] == [room.members["lead"]["id"]]
    # The call shows in the timeline as the member's tool activity, like an in-process step's.
    activity = await watcher.wait_for(
        lambda f: f.get("type") == "message" and f["message"]["kind"] == "tool"
    )
    assert activity["message"]["author_id"] == coder_id
    assert activity["message"]["meta"]["tool"]["via"] == "mcp"
    assert activity["message"]["meta"]["tool"]["calls"][0]["name"] == "room_send"
    with room.db() as db:
        audit = db.execute(
            "SELECT actor_id, outcome, detail_json FROM audit_events WHERE action = 'mcp.tool_call'"
        ).fetchall()
    assert [(a, o, json.loads(d)["tool"]) for a, o, d in audit] == [(coder_id, "ok", "room_send")]


async def test_refused_outside_its_role_project_and_lifecycle(room: Room) -> None:
    coder_id, token = external(room, "coder")
    room.say("只在演示项目里的话")
    other = room.post("/api/projects", {"name": "别的项目", "goal": "不让外人看"}, expect=201)
    other_id = int(other["project"]["id"])
    room.post(
        f"/api/projects/{other_id}/messages",
        {"body": "别的项目的秘密", "client_txn_id": uuid.uuid4().hex},
        expect=201,
    )
    async with mcp_session(room.server, token) as client:
        for name, args in (
            ("room_plan_submit", {"tasks": []}),  # the lead's, not a backend's
            ("shell", {"command": "id"}),  # the server's own commands: never over MCP
            ("room_project_pause", {}),  # lifecycle: no tool exists for it
        ):
            refused = await client.call_tool(name, args)
            assert refused.is_error
            assert payload(refused)["error"] == "tool_refused", name
        history = await client.call_tool("room_history", {"project_id": other_id, "limit": 50})
        texts = [m["text"] for m in payload(history)["messages"]]
        assert "只在演示项目里的话" in texts
        assert "别的项目的秘密" not in texts
    # Its token has no path to lifecycle operations over HTTP either.
    status, body = room.server.request(
        "POST",
        f"/api/projects/{room.project}/lifecycle",
        {"op": "pause"},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert status == 403, (status, body)
    assert body["error"]["code"] == "agent_forbidden"
    with room.db() as db:
        outcomes = db.execute(
            "SELECT outcome, json_extract(detail_json, '$.tool') FROM audit_events"
            " WHERE action = 'mcp.tool_call' AND actor_id = ? ORDER BY id",
            (coder_id,),
        ).fetchall()
    assert outcomes[:3] == [
        ("refused", "room_plan_submit"),
        ("refused", "shell"),
        ("refused", "room_project_pause"),
    ]


async def test_no_token_or_a_person_is_refused_with_the_api_error(room: Room) -> None:
    async with httpx2.AsyncClient() as http:
        bare = await http.post(f"{room.server.origin}/mcp", json={})
        assert bare.status_code == 401
        assert bare.json()["error"]["code"] == "bearer_required"
        wrong = await http.post(
            f"{room.server.origin}/mcp", json={}, headers={"Authorization": "Bearer nope"}
        )
        assert wrong.status_code == 401
        assert wrong.json()["error"]["code"] == "bad_token"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
