"""The room as an MCP server (issue 31), driven by the official ``mcp`` SDK's own client over
Streamable HTTP against a real server subprocess: the member's tools, authorship, evidence,
refusals, resources and their notifications, revocation."""

from __future__ import annotations

import asyncio
import hashlib
import importlib.metadata
import json
import os
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import mcp_types as types
import pytest
from mcp import Client as SdkClient
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, get_default_environment, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from mcp.shared.subscriptions import ResourceUpdated

from room.agents.presets import WORK_TOOLS, preset_for
from room.agents.tools import BUILTIN_TOOLS
from room.cli import main as room_main
from tests.support.live_room import Room, eventually
from tests.support.llm_servers import OpenAIServer
from tests.support.server import ServerProcess, start_with_openai
from tests.support.work import git_workspace
from tests.support.wsclient import Client

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("clients")]
ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def room(tmp_path: Path, llm: OpenAIServer) -> Iterator[Room]:
    """The ``room`` of tests/conftest.py, re-checking credentials every half second."""
    server = start_with_openai(tmp_path / "data", llm, ROOM_CREDENTIAL_RECHECK_SECS="0.5")
    try:
        yield Room(server, llm)
    finally:
        server.stop()


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
    # A role the owner marks read-only loses the memory-writing tool here as in-process.
    status, body = room.server.request(
        "PATCH",
        f"/api/projects/{room.project}/settings",
        {"read_only_roles": ["backend"]},
        headers=room.owner.headers,
    )
    assert status == 200, body
    async with mcp_session(room.server, token) as client:
        read_only = {t.name for t in (await client.list_tools()).tools}
        refused = await client.call_tool("memory_checkpoint", {"kind": "fact", "text": "x"})
    assert read_only == names - {"memory_checkpoint"}
    assert refused.is_error and payload(refused)["error"] == "tool_refused"
    # The boot report names the SDK serving /mcp, and where it was imported from.
    report = json.loads((room.server.data / "boot-report.json").read_text())
    sdk = report["dependencies"]["mcp"]
    assert sdk["version"] == importlib.metadata.version("mcp")
    assert sdk["file"].endswith("/mcp/__init__.py")


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


async def test_task_evidence_is_rehashed_by_the_server(room: Room) -> None:
    _, token = external(room, "coder")
    plan = {"items": [{"key": "api", "title": "写接口", "owner": "coder", "acceptance": ["有"]}]}
    room.post(f"/api/projects/{room.project}/plan", plan, expect=201)
    workspace = Path(room.get(f"/api/projects/{room.project}")["project"]["workspace"]["path"])
    async with mcp_session(room.server, token) as client:
        started = await client.call_tool("room_task_update", {"task": "api", "action": "start"})
        assert payload(started)["ok"] is True, payload(started)
        (workspace / "api.py").write_text("def items():\n    return []\n")
        claimed = await client.call_tool(
            "room_task_update",
            {"task": "api", "action": "submit", "summary": "写好了", "commands": [1]},
        )
        # Command evidence exists only for commands the server ran: a client cannot cite one.
        assert claimed.is_error and payload(claimed)["error"] == "bad_evidence_command"
        submitted = await client.call_tool(
            "room_task_update",
            {
                "task": "api",
                "action": "submit",
                "summary": "写好了",
                "artifacts": ["api.py"],
                "sha256": "0" * 64,  # not a parameter: the server hashes the file itself
            },
        )
        assert payload(submitted)["ok"] is True, payload(submitted)
        # Its session record in project memory, outside any turn of the server's.
        noted = await client.call_tool(
            "memory_checkpoint",
            {"kind": "session", "summary": "写了 api.py", "verified": "提交了证据"},
        )
        assert payload(noted)["ok"] is True, payload(noted)
        found = payload(await client.call_tool("memory_search", {"q": "提交了证据"}))
        assert found["ok"] is not False, found
        assert "写了 api.py" in json.dumps(found, ensure_ascii=False)
    task = next(t for t in room.get(f"/api/projects/{room.project}/tasks")["tasks"])
    assert task["state"] == "in_review"
    (artifact,) = [e for e in task["evidence"] if e["kind"] == "artifact"]
    assert artifact["path"] == "api.py"
    assert artifact["sha256"] == sha256(workspace / "api.py")
    assert artifact["size"] == (workspace / "api.py").stat().st_size


async def test_a_revoked_token_ends_its_session(room: Room) -> None:
    _, token = external(room, "coder")
    async with mcp_session(room.server, token) as client:
        await client.list_tools()
        health = room.server.get_json("/healthz")
        assert health["mcp"]["sessions"] == 1
        # Revoked from the CLI, beside the running server: the server hears nothing of it and
        # finds it at its re-check (credential_recheck_secs, 0.5 s for this server).
        assert (
            room_main(["member", "revoke", "--data", str(room.server.data), "演示项目", "coder"])
            == 0
        )
        await eventually(lambda: room.server.get_json("/healthz")["mcp"]["sessions"] == 0)
        with pytest.raises(MCPError):  # the server answered 401 (bad_token)
            await client.list_tools()
    async with httpx2.AsyncClient() as http:
        again = await http.post(
            f"{room.server.origin}/mcp", json={}, headers={"Authorization": f"Bearer {token}"}
        )
    assert again.status_code == 401 and again.json()["error"]["code"] == "bad_token"


async def test_an_owners_revoke_or_a_departure_ends_the_session_at_once(
    tmp_path: Path, llm: OpenAIServer
) -> None:
    # No re-check within the test: only the revoke's and the departure's own effects can end it.
    server = start_with_openai(tmp_path / "data", llm, ROOM_CREDENTIAL_RECHECK_SECS="600")
    try:
        room = Room(server, llm)
        helper_id, token = external(room, "helper")
        coder_id, coder_token = external(room, "coder")
        async with (
            mcp_session(server, token) as helper,
            mcp_session(server, coder_token) as coder,
        ):
            await helper.list_tools()
            await coder.list_tools()
            assert server.get_json("/healthz")["mcp"]["sessions"] == 2
            status, _ = server.request(
                "DELETE",
                f"/api/projects/{room.project}/members/{helper_id}/token",
                headers=room.owner.headers,
            )
            assert status == 200
            await eventually(lambda: server.get_json("/healthz")["mcp"]["sessions"] == 1)
            room.post(f"/api/projects/{room.project}/members/{coder_id}/leave", {})
            await eventually(lambda: server.get_json("/healthz")["mcp"]["sessions"] == 0)
            with pytest.raises(MCPError):
                await coder.list_tools()
    finally:
        server.stop()


async def read_json(client: ClientSession, uri: str) -> dict[str, Any]:
    contents = (await client.read_resource(uri)).contents
    assert len(contents) == 1 and isinstance(contents[0], types.TextResourceContents)
    assert contents[0].mime_type == "application/json"
    data: dict[str, Any] = json.loads(contents[0].text)
    return data


async def test_a_mention_notifies_and_reading_the_inbox_takes_it_once(room: Room) -> None:
    coder_id, token = external(room, "coder")
    updates: list[str] = []
    updated = asyncio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            updates.append(str(message.params.uri))
            updated.set()

    watcher = await Client.open(
        room.server.ws_url, cookie=room.owner.cookie, origin=room.server.origin
    )
    await watcher.send({"type": "subscribe", "project_id": room.project})
    await watcher.wait_for("subscribed")
    async with mcp_session(room.server, token, message_handler=on_message) as client:
        listed = {str(r.uri) for r in (await client.list_resources()).resources}
        assert listed == {"room://project", "room://task", "room://inbox"}
        # The handshake-era subscription (what today's coding agents speak); the SDK warns that
        # protocol 2026-07-28 replaces it with subscriptions/listen (tested below).
        with pytest.warns(MCPDeprecationWarning):
            await client.subscribe_resource("room://inbox")
        assert await read_json(client, "room://inbox") == {"deliveries": []}
        said = room.say("@coder 请看一下接口，谢谢")
        await asyncio.wait_for(updated.wait(), 10)
        assert updates == ["room://inbox"]
        (delivery,) = (await read_json(client, "room://inbox"))["deliveries"]
        assert delivery["message_id"] == said["message_id"]
        assert delivery["body"] == "@coder 请看一下接口，谢谢"
        assert delivery["author_handle"] == room.owner.user["handle"]
        assert await read_json(client, "room://inbox") == {"deliveries": []}  # taken once
        project = await read_json(client, "room://project")
        assert project["you"] == {"id": coder_id, "handle": "coder", "role": "backend"}
        assert {m["handle"] for m in project["members"]} >= {"coder", "lead"}
        task = await read_json(client, "room://task")
        assert task["tasks"] == [] and task["workdir"]["mode"] == "serial"
    (row,) = [d for d in room.deliveries(said["message_id"]) if d["recipient_id"] == coder_id]
    assert (row["state"], row["mode"]) == ("consumed", "queue")
    await watcher.wait_for(
        lambda f: f.get("type") == "delivery" and f["delivery_id"] == row["id"]
        and f["state"] == "consumed"
    )  # fmt: skip
    moves = [
        f["state"]
        for f in watcher.frames
        if f.get("type") == "delivery" and f["delivery_id"] == row["id"]
    ]
    assert moves == ["delivered", "consumed"]


async def test_the_stdio_bridge_relays_the_members_session(room: Room) -> None:
    coder_id, token = external(room, "coder")
    updated = asyncio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            updated.set()

    bridge = StdioServerParameters(
        command=sys.executable,
        args=["-m", "room", "mcp", "--url", room.server.origin, f"--token={token}"],
        cwd=str(ROOT),
    )
    async with (
        stdio_client(bridge) as (read, write),
        ClientSession(read, write, message_handler=on_message) as client,
    ):
        await client.initialize()
        names = {t.name for t in (await client.list_tools()).tools}
        assert names == set(preset_for("backend").tools) - set(WORK_TOOLS)
        with pytest.warns(MCPDeprecationWarning):
            await client.subscribe_resource("room://inbox")
        said = room.say("@coder 经过桥也能收到吗")
        await asyncio.wait_for(updated.wait(), 10)
        (delivery,) = (await read_json(client, "room://inbox"))["deliveries"]
        assert delivery["message_id"] == said["message_id"]
        sent = payload(
            await client.call_tool(
                "room_send", {"text": "收到了，经过 stdio 桥", "reply_to": said["message_id"]}
            )
        )
        assert sent["ok"] is True
        refused = await client.call_tool("room_plan_submit", {"tasks": []})
        assert refused.is_error and payload(refused)["error"] == "tool_refused"
    (reply,) = [m for m in room.messages() if m["id"] == sent["message_id"]]
    assert (reply["author_id"], reply["reply_to"]) == (coder_id, said["message_id"])
    (row,) = [d for d in room.deliveries(said["message_id"]) if d["recipient_id"] == coder_id]
    assert row["state"] == "consumed"


FAKE_CODING_AGENT = """
import asyncio, json, os, sys
import httpx2
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, get_default_environment, stdio_client
from mcp.client.streamable_http import streamable_http_client

async def main():
    path = sys.argv[1]
    assert os.environ["ROOM_MCP_CONFIG"] == path
    server = json.load(open(path))["mcpServers"]["room"]
    batch = json.loads(sys.stdin.read())
    last = batch["deliveries"][-1]
    async with (
        httpx2.AsyncClient(headers=server["headers"]) as http,
        streamable_http_client(server["url"], http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        text = f"已处理 #{last['seq']}，目录 {os.getcwd()}"
        await session.call_tool("room_send", {"text": text, "reply_to": last["message_id"]})

asyncio.run(main())
"""


@pytest.mark.usefixtures("hermetic_git", "workspace_roots")
async def test_room_agent_mcp_runs_the_coding_agent_in_its_task_worktree(
    room: Room, tmp_path: Path
) -> None:
    git_workspace(room, tmp_path)
    coder_id, token = external(room, "coder")
    plan = {"items": [{"key": "api", "title": "写接口", "owner": "coder", "acceptance": ["有"]}]}
    room.post(f"/api/projects/{room.project}/plan", plan, expect=201)
    async with mcp_session(room.server, token) as client:
        started = await client.call_tool("room_task_update", {"task": "api", "action": "start"})
        assert payload(started)["ok"] is True, payload(started)
        workdir = (await read_json(client, "room://task"))["workdir"]
    assert workdir["mode"] == "worktree" and workdir["task"] == "api"
    script = tmp_path / "fake_agent.py"
    script.write_text(FAKE_CODING_AGENT)
    elsewhere = tmp_path / "started-here"
    elsewhere.mkdir()
    runner = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "room", "agent", "--mcp", "--url", room.server.origin,
        f"--token={token}", "--", sys.executable, str(script), "{mcp_config}",
        cwd=elsewhere, env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        said = room.say("@coder 接口做到哪了？")

        def answered() -> list[dict[str, Any]]:
            return [
                m for m in room.messages()
                if m["author_id"] == coder_id and m["reply_to"] == said["message_id"]
            ]  # fmt: skip

        (reply,) = await eventually(answered, timeout=30)
    finally:
        runner.terminate()
        _, errors = await asyncio.wait_for(runner.communicate(), 10)
    assert reply["body"] == f"已处理 #{said['seq']}，目录 {workdir['path']}", errors
    (row,) = [d for d in room.deliveries(said["message_id"]) if d["recipient_id"] == coder_id]
    assert (row["state"], row["mode"]) == ("consumed", "queue")


async def test_calls_and_reads_are_rate_limited_per_member(
    tmp_path: Path, llm: OpenAIServer
) -> None:
    server = start_with_openai(
        tmp_path / "data", llm, ROOM_SEND_BURST="3", ROOM_SEND_RATE_PER_SEC="0.01"
    )
    try:
        room = Room(server, llm)
        _, token = external(room, "coder")
        async with mcp_session(server, token) as client:
            for _ in range(3):
                assert not (await client.call_tool("room_members", {})).is_error
            limited = await client.call_tool("room_members", {})
            assert limited.is_error
            refusal = payload(limited)
            assert refusal["error"] == "rate_limited"
            assert refusal["details"]["retry_after_ms"] > 0
            with pytest.raises(MCPError) as refused:
                await client.read_resource("room://project")
            assert refused.value.data["error"]["code"] == "rate_limited"
    finally:
        server.stop()


async def test_a_session_belongs_to_its_token_and_the_inbox_to_external_agents(
    room: Room,
) -> None:
    _, token = external(room, "coder")
    _, other = external(room, "helper")
    room.add_agent("inside", "backend", "内部")  # an in-process agent: its session takes them
    inside_token = room.server.agent_token("演示项目", "inside")
    opening = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"},
        },
    }
    accept = {"Accept": "application/json, text/event-stream"}
    async with httpx2.AsyncClient(base_url=room.server.origin) as http:
        opened = await http.post(
            "/mcp", json=opening, headers={**accept, "Authorization": f"Bearer {token}"}
        )
        assert opened.status_code == 200, opened.text
        session_id = opened.headers["mcp-session-id"]
        listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
        stolen = await http.post(
            "/mcp",
            json=listing,
            headers={**accept, "Authorization": f"Bearer {other}", "Mcp-Session-Id": session_id},
        )
        assert stolen.status_code == 404  # as if the session did not exist
        # A rotated token is the member's, but the session was the old token's.
        rotated = room.server.agent_token("演示项目", "coder")
        carried_over = await http.post(
            "/mcp",
            json=listing,
            headers={**accept, "Authorization": f"Bearer {rotated}", "Mcp-Session-Id": session_id},
        )
        assert carried_over.status_code == 404
    async with mcp_session(room.server, inside_token) as client:
        with pytest.raises(MCPError) as refused:
            await client.read_resource("room://inbox")
        assert refused.value.data["error"]["code"] == "not_external"


async def test_the_sdks_high_level_client_on_the_newest_protocol(room: Room) -> None:
    coder_id, token = external(room, "coder")
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"})
    transport = streamable_http_client(f"{room.server.origin}/mcp", http_client=http)
    async with http, SdkClient(transport) as client:  # mode "auto": server/discover first
        assert client.session.protocol_version == "2026-07-28"
        names = {t.name for t in (await client.list_tools()).tools}
        assert names == set(preset_for("backend").tools) - set(WORK_TOOLS)
        sent = await client.call_tool("room_send", {"text": "新协议也能说话"})
        assert not sent.is_error, sent
        project = json.loads(
            (await client.read_resource("room://project")).contents[0].text  # type: ignore[union-attr]
        )
        assert project["you"]["id"] == coder_id
        # Its notifications come on a subscriptions/listen stream (no standing GET stream).
        async with client.listen(resource_subscriptions=["room://inbox"]) as listening:
            assert listening.honored.resource_subscriptions == ["room://inbox"]
            said = room.say("@coder 新协议收得到吗")
            event = await asyncio.wait_for(anext(aiter(listening)), 10)
        assert event == ResourceUpdated(uri="room://inbox")
        inbox = json.loads(
            (await client.read_resource("room://inbox")).contents[0].text  # type: ignore[union-attr]
        )
        assert [d["message_id"] for d in inbox["deliveries"]] == [said["message_id"]]
    (message,) = [m for m in room.messages() if m["body"] == "新协议也能说话"]
    assert message["author_id"] == coder_id
    (row,) = [d for d in room.deliveries(said["message_id"]) if d["recipient_id"] == coder_id]
    assert (row["state"], row["mode"]) == ("consumed", "queue")


async def test_room_agent_mcp_stops_when_its_token_is_refused(room: Room) -> None:
    runner = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "room", "agent", "--mcp", "--url", room.server.origin,
        "--token", "not-a-token", "--", "true",
        cwd=ROOT, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, errors = await asyncio.wait_for(runner.communicate(), 30)
    assert runner.returncode == 1
    assert "the server refused the token (bad_token" in errors.decode()


async def test_room_agent_mcp_says_so_when_its_command_cannot_run(room: Room) -> None:
    coder_id, token = external(room, "coder")
    runner = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "room", "agent", "--mcp", "--url", room.server.origin,
        f"--token={token}", "--", "/nonexistent/coding-agent", "{mcp_config}",
        cwd=ROOT, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    try:
        said = room.say("@coder 在吗")

        def warned() -> list[dict[str, Any]]:
            return [
                m for m in room.messages()
                if m["author_id"] == coder_id and m["reply_to"] == said["message_id"]
            ]  # fmt: skip

        (warning,) = await eventually(warned, timeout=30)
    finally:
        runner.terminate()
        await asyncio.wait_for(runner.wait(), 10)
    # The batch was taken (consumed) and the room is told it was not handled.
    assert warning["body"].startswith("⚠️ 命令 /nonexistent/coding-agent 无法启动")


async def test_the_stdio_bridge_relays_the_newest_protocol(room: Room) -> None:
    coder_id, token = external(room, "coder")
    bridge = StdioServerParameters(  # the token from the environment, not the process list
        command=sys.executable,
        args=["-m", "room", "mcp", "--url", room.server.origin],
        cwd=str(ROOT),
        env={**get_default_environment(), "ROOM_TOKEN": token},
    )
    async with SdkClient(bridge) as client:  # mode "auto": server/discover through the bridge
        assert client.session.protocol_version == "2026-07-28"
        sent = await client.call_tool("room_send", {"text": "经过桥，用新协议"})
        assert not sent.is_error, sent
        async with client.listen(resource_subscriptions=["room://inbox"]) as listening:
            said = room.say("@coder 桥上的新协议收得到吗")
            event = await asyncio.wait_for(anext(aiter(listening)), 10)
        assert event == ResourceUpdated(uri="room://inbox")
        inbox = json.loads(
            (await client.read_resource("room://inbox")).contents[0].text  # type: ignore[union-attr]
        )
        assert [d["message_id"] for d in inbox["deliveries"]] == [said["message_id"]]
    (message,) = [m for m in room.messages() if m["body"] == "经过桥，用新协议"]
    assert message["author_id"] == coder_id
