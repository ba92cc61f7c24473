"""Streamed answers, both protocols, against local servers that stream as the real APIs do: an
idle timeout between chunks instead of a total one, and a request whose answer was arriving is
never sent again (issue 14, items 15 and 16)."""

from __future__ import annotations

import asyncio
import json
import random
from itertools import pairwise
from typing import Any

import pytest

from room.errors import ProviderServerError, ProviderTimeoutError
from room.providers import CallMeter, ChatMessage, ChatRequest, ToolCall, Usage
from room.providers.anthropic import AnthropicProvider
from room.providers.base import SseEvent, SseParser
from room.providers.openai import OpenAIProvider
from tests.support.llm_servers import (
    AnthropicServer,
    LLMServer,
    OpenAIServer,
    RecordedSleeps,
    Reply,
    anthropic_events,
    anthropic_text,
    anthropic_tool_uses,
    error,
    openai_text,
    openai_tool_calls,
    raw,
)

KEY = "sk-test-stream"
LONG = "这是一个很慢但一直在输出的回答。" * 3  # 48 characters: 12 events of 4

Provider = OpenAIProvider | AnthropicProvider


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def serve(kind: str, script: Any) -> LLMServer:
    return (OpenAIServer if kind == "openai" else AnthropicServer)(script, api_key=KEY)


def make(kind: str, srv: LLMServer, sleeps: RecordedSleeps, **kwargs: Any) -> Provider:
    options: dict[str, Any] = {
        "name": kind,
        "api_key": KEY,
        "base_url": srv.base_url,
        "sleep": sleeps,
        "rng": random.Random(1),
        "max_retries": 3,
        "idle_timeout_secs": 5.0,
        **kwargs,
    }
    return OpenAIProvider(**options) if kind == "openai" else AnthropicProvider(**options)


def text_reply(kind: str, text: str, **kwargs: Any) -> Reply:
    base = openai_text(text) if kind == "openai" else anthropic_text(text)
    return Reply(body=base.body, **kwargs)


def hello() -> ChatRequest:
    return ChatRequest(model="m", messages=(ChatMessage("user", "你好"),), max_tokens=100)


BOTH = pytest.mark.parametrize("kind", ["openai", "anthropic"])


def test_sse_parser_joins_data_lines_and_skips_comments() -> None:
    parser = SseParser()
    lines = [": keep-alive", "event: ping", "data: {}", "", "data: a", "data: b", "", ""]
    events = [e for e in (parser.feed(line) for line in lines) if e is not None]
    assert events == [SseEvent("ping", "{}"), SseEvent("message", "a\nb")]
    parser.feed("data: last")
    assert parser.flush() == SseEvent("message", "last")


@pytest.mark.slow
@BOTH
@pytest.mark.anyio
async def test_a_slow_answer_that_keeps_streaming_is_received_once(kind: str) -> None:
    # The answer takes ~3 s in all, far past the 0.5 s idle timeout, but never pauses that long
    # (the 65 s answer against a 60 s timeout, scaled down): received once, not retried.
    sleeps = RecordedSleeps()
    with serve(kind, [text_reply(kind, LONG, chunk_delay_secs=0.15)]) as srv:
        provider = make(kind, srv, sleeps, idle_timeout_secs=0.5)
        try:
            result = await provider.chat(hello())
        finally:
            await provider.aclose()
        assert len(srv.chat_requests) == 1
    assert (result.text, result.attempts, result.stop_reason) == (LONG, 1, "end_turn")
    assert result.usage.reported and result.usage.output_tokens > 0
    assert sleeps.delays == []


@BOTH
@pytest.mark.anyio
async def test_an_answer_that_stops_arriving_is_not_retried(kind: str) -> None:
    sleeps = RecordedSleeps()
    stalled = text_reply(kind, LONG, stall_after=4)
    with serve(kind, [stalled, text_reply(kind, "never asked for")]) as srv:
        provider = make(kind, srv, sleeps, idle_timeout_secs=0.3)
        meter = CallMeter()
        try:
            with pytest.raises(ProviderTimeoutError) as caught:
                await provider.chat(hello(), meter)
        finally:
            await provider.aclose()
        assert (len(srv.chat_requests), srv.remaining) == (1, 1)
    err = caught.value
    assert (err.details["attempts"], err.details["answer_started"]) == (1, True)
    assert "stopped" in err.message
    assert (meter.attempts, meter.answer_started) == (1, True)
    assert sleeps.delays == []
    if kind == "anthropic":  # message_start had reported the prompt's tokens
        assert err.details["usage"] == {"input_tokens": 13, "output_tokens": 1}
        assert meter.usage == Usage(13, 1)
    else:  # OpenAI reports usage only in the last chunk
        assert "usage" not in err.details and meter.usage is None


@BOTH
@pytest.mark.anyio
async def test_an_answer_cut_off_midway_is_not_retried(kind: str) -> None:
    with serve(kind, [text_reply(kind, LONG, cut_after=5), text_reply(kind, "x")]) as srv:
        provider = make(kind, srv, RecordedSleeps())
        try:
            with pytest.raises(ProviderServerError) as caught:
                await provider.chat(hello())
        finally:
            await provider.aclose()
        assert (len(srv.chat_requests), srv.remaining) == (1, 1)
    assert caught.value.details["answer_started"] is True
    assert "ended before its last event" in caught.value.message


@pytest.mark.anyio
async def test_an_error_event_while_answering_keeps_its_kind_and_is_not_retried() -> None:
    body = anthropic_text("半句").body
    events = [*anthropic_events(body)[:3]]
    events.append(
        ("error", {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    )
    with serve("anthropic", [Reply(body=body, events=events), anthropic_text("x")]) as srv:
        provider = make("anthropic", srv, RecordedSleeps())
        try:
            with pytest.raises(ProviderServerError) as caught:
                await provider.chat(hello())
        finally:
            await provider.aclose()
        assert srv.remaining == 1
    assert "Overloaded" in caught.value.message
    assert caught.value.details["usage"] == {"input_tokens": 13, "output_tokens": 1}


@BOTH
@pytest.mark.anyio
async def test_failures_before_the_answer_arrives_are_still_retried(kind: str) -> None:
    sleeps = RecordedSleeps()
    script = [error(503), error(429, retry_after=0.5), text_reply(kind, "终于")]
    with serve(kind, script) as srv:
        provider = make(kind, srv, sleeps)
        meter = CallMeter()
        try:
            result = await provider.chat(hello(), meter)
        finally:
            await provider.aclose()
        assert len(srv.chat_requests) == 3
    assert (result.text, result.attempts, meter.attempts) == ("终于", 3, 3)
    assert len(sleeps.delays) == 2


@pytest.mark.anyio
async def test_a_call_abandoned_midway_leaves_its_attempts_and_usage_on_the_meter() -> None:
    with serve("anthropic", [text_reply("anthropic", LONG, stall_after=4)]) as srv:
        provider = make("anthropic", srv, RecordedSleeps())
        meter = CallMeter()
        try:
            task = asyncio.ensure_future(provider.chat(hello(), meter))
            for _ in range(200):
                if meter.usage is not None:
                    break
                await asyncio.sleep(0.01)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        finally:
            await provider.aclose()
    assert (meter.attempts, meter.answer_started, meter.usage) == (1, True, Usage(13, 1))


@pytest.mark.anyio
async def test_streamed_tool_calls_are_assembled_from_their_pieces() -> None:
    openai_script = [
        openai_tool_calls([("c1", "fs_read", {"path": "README.md"}), ("c2", "fs_list", {})])
    ]
    anthropic_script = [
        anthropic_tool_uses([("t1", "fs_read", {"path": "文档/说明.md", "lines": [1, 40]})])
    ]
    with serve("openai", openai_script) as o, serve("anthropic", anthropic_script) as a:
        first, second = make("openai", o, RecordedSleeps()), make("anthropic", a, RecordedSleeps())
        try:
            from_openai = await first.chat(hello())
            from_anthropic = await second.chat(hello())
        finally:
            await first.aclose()
            await second.aclose()
    assert from_openai.tool_calls == (
        ToolCall("c1", "fs_read", {"path": "README.md"}),
        ToolCall("c2", "fs_list", {}),
    )
    assert from_anthropic.tool_calls == (
        ToolCall("t1", "fs_read", {"path": "文档/说明.md", "lines": [1, 40]}),
    )
    assert (from_openai.stop_reason, from_anthropic.stop_reason) == ("tool_use", "tool_use")


@BOTH
@pytest.mark.anyio
async def test_a_server_that_ignores_stream_is_read_from_its_json_body(kind: str) -> None:
    whole = text_reply(kind, "整段回答").body
    plain = raw(200, json.dumps(whole).encode(), headers={"content-type": "application/json"})
    with serve(kind, [plain]) as srv:
        provider = make(kind, srv, RecordedSleeps())
        try:
            result = await provider.chat(hello())
        finally:
            await provider.aclose()
    assert (result.text, result.attempts) == ("整段回答", 1)


@pytest.mark.anyio
async def test_streamed_text_holds_no_lone_surrogates() -> None:
    # A pair of escapes split over two chunks is one character; a lone one is no text (no
    # message or database row can hold it) and arrives as U+FFFD.
    def piece(text: str) -> tuple[None, str]:
        return None, '{"choices": [{"index": 0, "delta": {"content": "' + text + '"}}]}'

    events = [
        piece("笑\\ud83d"),
        piece("\\ude00 半个\\ud800"),
        (None, '{"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}'),
        (None, "[DONE]"),
    ]
    with serve("openai", [Reply(body={}, events=events)]) as srv:
        provider = make("openai", srv, RecordedSleeps())
        try:
            result = await provider.chat(hello())
        finally:
            await provider.aclose()
    assert result.text == "笑😀 半个\ufffd"


@BOTH
@pytest.mark.anyio
async def test_the_meter_follows_the_text_as_it_streams(kind: str) -> None:
    # What the room shows while an answer streams (room.agents.drafts): after each event the
    # meter's text() is the answer so far, one growing beginning of the whole.
    seen: list[str] = []
    meter = CallMeter()
    meter.on_progress = lambda: seen.append(meter.text())
    with serve(kind, [text_reply(kind, LONG)]) as srv:
        provider = make(kind, srv, RecordedSleeps())
        try:
            result = await provider.chat(hello(), meter)
        finally:
            await provider.aclose()
    assert result.text == LONG and meter.text() == LONG
    grown = [t for a, t in pairwise(["", *seen]) if t != a]
    assert len(grown) == 12  # one per text event of 4 characters
    assert all(LONG.startswith(t) for t in grown) and grown[-1] == LONG
    assert all(len(a) < len(b) for a, b in pairwise(grown))
