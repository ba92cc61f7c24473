"""Model calls honest about what happened, end to end: a real server, its real providers, and
local servers streaming the OpenAI and Anthropic wire protocols (issue 14, items 13, 15, 16)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.support.live_room import Room, agent_replies, eventually
from tests.support.llm_servers import (
    TEST_API_KEY,
    AnthropicServer,
    OpenAIServer,
    Reply,
    anthropic_text,
    error,
    openai_text,
    openai_tool_calls,
)
from tests.support.server import start_with_openai

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("clients")]

TRUNCATED = "长度上限"


def usage(room: Room) -> dict[str, Any]:
    return room.get(f"/api/projects/{room.project}/usage")


def calls(room: Room) -> list[tuple[Any, ...]]:
    with sqlite3.connect(room.server.data / "room.sqlite") as db:
        return db.execute(
            "SELECT ok, error_code, attempts, input_tokens, output_tokens, usage_reported"
            " FROM model_requests ORDER BY id"
        ).fetchall()


async def test_a_cut_off_answer_is_posted_marked_truncated(room: Room) -> None:
    room.route("lead")
    room.llm.push(openai_text("第一步先安装依赖，然后", finish_reason="length"))
    room.say("@lead 写一份部署说明")
    [reply] = await eventually(lambda: agent_replies(room, "lead"))
    assert reply["body"].startswith("第一步先安装依赖，然后")
    assert TRUNCATED in reply["body"] and "截断" in reply["body"]
    assert reply["meta"]["truncated"] == "max_tokens"
    # A whole answer carries no such mark.
    room.llm.push(openai_text("完整的回答。"))
    room.say("@lead 再说一句")
    await eventually(lambda: len(agent_replies(room, "lead")) == 2)
    whole = agent_replies(room, "lead")[1]
    assert whole["body"] == "完整的回答。" and "truncated" not in whole["meta"]


async def test_a_tool_call_cut_at_the_token_limit_is_not_run_and_the_model_is_told_why(
    room: Room,
) -> None:
    room.route("lead")
    cut = openai_tool_calls([("c1", "room_send", '{"text": "一段很长的')], finish_reason="length")
    room.llm.push(cut, openai_text("我分几次发。"))
    room.say("@lead 发一段长消息")
    await eventually(lambda: agent_replies(room, "lead"))
    result = json.loads(room.llm.chat_requests[1]["messages"][-1]["content"])
    assert (result["ok"], result["error"]) == (False, "bad_arguments")
    assert "max_tokens" in result["message"]
    assert [r["body"] for r in agent_replies(room, "lead")] == ["我分几次发。"]


async def test_a_slow_answer_that_keeps_streaming_is_paid_for_once(
    tmp_path: Path, llm: OpenAIServer
) -> None:
    # The provider settings of the server: 1 s of silence allowed between chunks; the answer
    # takes ~2.5 s in all and keeps arriving (the 65 s answer, scaled down).
    server = start_with_openai(tmp_path / "data", llm, ROOM_PROVIDER_IDLE_TIMEOUT_SECS="1")
    try:
        room = Room(server, llm)
        room.route("lead")
        text = "慢慢地，" * 12
        llm.push(Reply(body=openai_text(text).body, chunk_delay_secs=0.2), openai_text("多余"))
        room.say("@lead 慢慢回答")
        [reply] = await eventually(lambda: agent_replies(room, "lead"))
        assert reply["body"] == text
        assert (len(llm.chat_requests), llm.remaining) == (1, 1)
        assert calls(room) == [(1, None, 1, 11, 7, 1)]
    finally:
        server.stop()


async def test_a_first_byte_slower_than_its_timeout_reaches_the_provider_once(
    tmp_path: Path, llm: OpenAIServer
) -> None:
    """Issue 28, item 3, end to end: the provider is slow to start answering; the request it
    received is not sent again. The call is recorded failed with its one attempt, and the
    room is told."""
    server = start_with_openai(
        tmp_path / "data", llm, ROOM_PROVIDER_FIRST_BYTE_TIMEOUT_SECS="0.5",
        ROOM_PROVIDER_MAX_RETRIES="2",
    )  # fmt: skip
    try:
        room = Room(server, llm)
        room.route("lead")
        llm.push(openai_text("太晚了", delay_secs=3.0), openai_text("不该被请求"))
        room.say("@lead 慢慢来")
        await eventually(lambda: calls(room))
        await anyio.sleep(1.0)  # a resend would have come by now
        assert (len(llm.chat_requests), llm.remaining) == (1, 1)
        assert calls(room) == [(0, "provider_timeout", 1, 0, 0, 0)]
        totals = usage(room)
        assert (totals["requests"], totals["attempts"], totals["failed_requests"]) == (1, 1, 1)
        notices = [m["body"] for m in room.messages() if m["kind"] == "system"]
        assert any("provider_timeout" in n and "@lead" in n for n in notices), notices
    finally:
        server.stop()


async def test_failed_and_retried_calls_are_recorded_with_their_attempts(
    tmp_path: Path, llm: OpenAIServer
) -> None:
    server = start_with_openai(tmp_path / "data", llm, ROOM_PROVIDER_MAX_RETRIES="2")
    try:
        room = Room(server, llm)
        room.route("lead")
        llm.push(error(503, "overloaded"), error(429), openai_text("第三次才成功"))
        room.say("@lead 第一件事")
        await eventually(lambda: agent_replies(room, "lead"))
        llm.push(*[error(503, "still overloaded")] * 3, openai_text("not reached"))
        room.say("@lead 第二件事")
        await eventually(lambda: len(calls(room)) == 2)
        assert llm.remaining == 1  # 1 + 2 retries, no more
        assert calls(room) == [
            (1, None, 3, 11, 7, 1),
            (0, "provider_server_error", 3, 0, 0, 0),
        ]
        totals = usage(room)
        assert {k: totals[k] for k in ("requests", "attempts", "failed_requests")} == {
            "requests": 2,
            "attempts": 6,
            "failed_requests": 1,
        }
        card = room.get(f"/api/projects/{room.project}/members/{room.members['lead']['id']}")
        assert (card["observed"]["ok"], card["observed"]["attempts"]) == (False, 3)
    finally:
        server.stop()


async def test_a_stopped_calls_reported_usage_is_not_lost(
    tmp_path: Path, llm: OpenAIServer
) -> None:
    with AnthropicServer(api_key=TEST_API_KEY) as claude:
        server = start_with_openai(
            tmp_path / "data",
            llm,
            ANTHROPIC_API_KEY=TEST_API_KEY,
            ANTHROPIC_BASE_URL=claude.url,
        )
        try:
            room = Room(server, llm)
            room.route("lead", "anthropic/claude-test")
            room.post(f"/api/projects/{room.project}/limits", {"token_budget": 10})
            # The answer starts (message_start reports 13 input tokens), then stalls.
            claude.push(Reply(body=anthropic_text("一个很长的回答").body, stall_after=4))
            room.say("@lead 开始一件长任务")
            await eventually(lambda: len(claude.chat_requests) == 1)
            await anyio.sleep(0.5)  # the first events reach the provider
            lead = room.members["lead"]["id"]
            room.post(f"/api/projects/{room.project}/members/{lead}/stop", {})
            await eventually(lambda: calls(room))
            assert calls(room) == [(0, "stopped", 1, 13, 1, 1)]
            totals = usage(room)
            assert (totals["requests"], totals["stopped_requests"]) == (1, 1)
            assert (totals["input_tokens"], totals["output_tokens"]) == (13, 1)
            brake = await eventually(
                lambda: (
                    (b := room.get(f"/api/projects/{room.project}/brake")["brake"])["tripped"] and b
                )
            )
            # The budget sees what the stopped call cost, and is spent by it.
            assert (brake["tokens_used"], brake["tripped"]) == (14, "token_budget")
        finally:
            server.stop()
