"""Memory end to end: a real server, a scripted OpenAI-compatible model calling the memory tools
in a real turn, and the page's HTTP reads."""

from __future__ import annotations

import json

import pytest

from tests.support.live_room import Room, agent_replies, eventually
from tests.support.llm_servers import openai_text, openai_tool_call

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("clients")]


async def test_an_agent_checkpoints_in_a_turn_and_people_see_it(room: Room) -> None:
    room.route("lead")
    room.llm.push(
        openai_tool_call(
            "memory_checkpoint",
            {"kind": "progress", "text": "登录页", "stage": "", "next": "写测试"},
            call_id="c1",
        ),
        openai_tool_call(
            "memory_checkpoint",
            {"kind": "session", "summary": "规划了登录页", "did": "拆了任务", "next": "写测试"},
            call_id="c2",
        ),
        openai_tool_call("memory_read", {"kind": "session"}, call_id="c3"),
        openai_text("记下了。"),
    )
    room.say("@lead 记一下进展")
    await eventually(lambda: agent_replies(room, "lead"))
    requests = room.llm.chat_requests
    refusal = json.loads(requests[1]["messages"][-1]["content"])
    assert refusal["error"] == "empty_field" and refusal["details"]["field"] == "stage"
    read = json.loads(requests[3]["messages"][-1]["content"])
    assert [e["body"]["summary"] for e in read["entries"]] == ["规划了登录页"]
    memory = room.get(f"/api/projects/{room.project}/memory")
    [session] = memory["sessions"]
    assert session["author"]["handle"] == "lead" and session["author"]["kind"] == "agent"
    assert session["body"]["turn_id"] is not None
    assert memory["progress"] == [] and memory["version"] == 1
