"""The OpenAI-compatible provider against a real local server speaking the protocol."""

from __future__ import annotations

import dataclasses
import json
import random
from typing import Any

import httpx
import pytest

from room.errors import (
    ProviderAuthError,
    ProviderRateLimitError,
    ProviderRequestError,
    ProviderServerError,
    ProviderTimeoutError,
)
from room.providers import CallMeter, ChatMessage, ChatRequest, ToolCall, ToolSpec, Usage
from room.providers.base import RETRY_AFTER_CAP_SECS
from room.providers.openai import OpenAIProvider
from tests.support.llm_servers import (
    OpenAIServer,
    RecordedSleeps,
    closed_port_url,
    error,
    openai_text,
    openai_tool_call,
    openai_tool_calls,
    raw,
)

KEY = "sk-test-0123456789"

SEND_TOOL = ToolSpec(
    name="room_send",
    description="Post a message to the room.",
    parameters={"type": "object", "properties": {"text": {"type": "string"}}},
)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def make(srv_url: str, sleeps: RecordedSleeps, **kwargs: Any) -> OpenAIProvider:
    options: dict[str, Any] = {"api_key": KEY, "max_retries": 3, "idle_timeout_secs": 5.0}
    options.update(kwargs)
    return OpenAIProvider(
        name="openai", base_url=srv_url, sleep=sleeps, rng=random.Random(7), **options
    )


def hello(**kwargs: Any) -> ChatRequest:
    return ChatRequest(
        model="gpt-test",
        messages=(
            ChatMessage("system", "You are a helpful member of the room."),
            ChatMessage("user", "你好，帮我看看", name="alice"),
        ),
        **kwargs,
    )


@pytest.mark.anyio
async def test_text_round_trip_sends_the_wire_shape_and_reads_usage() -> None:
    sleeps = RecordedSleeps()
    with OpenAIServer([openai_text("好的", model="gpt-test-2024")], api_key=KEY) as srv:
        provider = make(srv.base_url, sleeps)
        try:
            result = await provider.chat(hello(temperature=0.2, max_tokens=300))
        finally:
            await provider.aclose()
        request = srv.requests[0]
    assert result.text == "好的"
    assert result.tool_calls == ()
    assert result.usage == Usage(11, 7)
    assert (result.provider, result.model) == ("openai", "gpt-test-2024")
    assert (result.stop_reason, result.attempts) == ("end_turn", 1)
    assert result.latency_ms > 0
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert request.json == {
        "model": "gpt-test",
        "messages": [
            {"role": "system", "content": "You are a helpful member of the room."},
            {"role": "user", "content": "你好，帮我看看"},
        ],
        "max_tokens": 300,
        "temperature": 0.2,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    assert sleeps.delays == []


@pytest.mark.anyio
async def test_tool_use_exchange_carries_the_result_back_in_wire_shape() -> None:
    script = [
        openai_tool_call("room_send", {"text": "先发个消息"}, call_id="call_a", text="稍等"),
        openai_text("done", prompt_tokens=40, completion_tokens=2),
    ]
    with OpenAIServer(script, api_key=KEY) as srv:
        provider = make(srv.base_url, RecordedSleeps())
        try:
            first = await provider.chat(hello(tools=(SEND_TOOL,)))
            assert first.tool_calls == (ToolCall("call_a", "room_send", {"text": "先发个消息"}),)
            assert (first.text, first.stop_reason) == ("稍等", "tool_use")
            second = await provider.chat(
                ChatRequest(
                    model="gpt-test",
                    messages=(
                        *hello().messages,
                        ChatMessage("assistant", first.text, tool_calls=first.tool_calls),
                        ChatMessage("tool", "sent as #42", tool_call_id="call_a", name="room_send"),
                    ),
                    tools=(SEND_TOOL,),
                )
            )
        finally:
            await provider.aclose()
        step1, step2 = srv.chat_requests
    assert step1["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "room_send",
                "description": "Post a message to the room.",
                "parameters": {"type": "object", "properties": {"text": {"type": "string"}}},
            },
        }
    ]
    assert step2["messages"][-2:] == [
        {
            "role": "assistant",
            "content": "稍等",
            "tool_calls": [
                {
                    "id": "call_a",
                    "type": "function",
                    "function": {"name": "room_send", "arguments": '{"text": "先发个消息"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_a", "content": "sent as #42"},
    ]
    assert (second.text, second.usage, second.stop_reason) == ("done", Usage(40, 2), "end_turn")


@pytest.mark.anyio
async def test_parallel_tool_calls_and_invalid_arguments_are_kept_raw() -> None:
    script = [
        openai_tool_calls(
            [("c1", "room_send", {"text": "ok"}), ("c2", "room_send", '{"text": "unterminated')]
        ),
        openai_text("noted"),
    ]
    with OpenAIServer(script) as srv:
        provider = make(srv.base_url, RecordedSleeps())
        try:
            first = await provider.chat(hello(tools=(SEND_TOOL,)))
            await provider.chat(
                ChatRequest(
                    model="gpt-test",
                    messages=(
                        *hello().messages,
                        ChatMessage("assistant", "", tool_calls=first.tool_calls),
                        ChatMessage("tool", "sent", tool_call_id="c1"),
                        ChatMessage("tool", "error: arguments are not JSON", tool_call_id="c2"),
                    ),
                    tools=(SEND_TOOL,),
                )
            )
        finally:
            await provider.aclose()
        step2 = srv.chat_requests[1]
    assert first.tool_calls == (
        ToolCall("c1", "room_send", {"text": "ok"}),
        ToolCall("c2", "room_send", {}, raw_arguments='{"text": "unterminated'),
    )
    assistant = step2["messages"][2]
    assert assistant["content"] is None
    assert [c["function"]["arguments"] for c in assistant["tool_calls"]] == [
        '{"text": "ok"}',
        '{"text": "unterminated',
    ]
    assert [m["tool_call_id"] for m in step2["messages"][3:]] == ["c1", "c2"]


@pytest.mark.anyio
async def test_missing_usage_is_zero_and_marked_unreported() -> None:
    with OpenAIServer([openai_text("hi", prompt_tokens=None)]) as srv:
        provider = make(srv.base_url, RecordedSleeps())
        try:
            result = await provider.chat(hello())
        finally:
            await provider.aclose()
    assert result.usage == Usage(0, 0, reported=False)


@pytest.mark.anyio
async def test_429_is_retried_honouring_retry_after() -> None:
    sleeps = RecordedSleeps()
    script = [
        error(429, "slow down", retry_after=2),
        error(429, retry_after=0.5),
        openai_text("ok"),
    ]
    with OpenAIServer(script) as srv:
        provider = make(srv.base_url, sleeps)
        try:
            result = await provider.chat(hello())
        finally:
            await provider.aclose()
        assert len(srv.chat_requests) == 3
    assert sleeps.delays == [2.0, 0.5]
    assert (result.text, result.attempts) == ("ok", 3)


@pytest.mark.anyio
async def test_statuses_that_say_nothing_ran_are_resent_with_growing_backoff() -> None:
    sleeps = RecordedSleeps()
    script = [error(503), error(408), error(529, "Overloaded"), openai_text("ok")]
    with OpenAIServer(script) as srv:
        provider = make(srv.base_url, sleeps)
        try:
            result = await provider.chat(hello())
        finally:
            await provider.aclose()
    assert (result.text, result.attempts) == ("ok", 4)
    first, second, third = sleeps.delays
    assert 0.25 <= first <= 0.5
    assert 0.5 <= second <= 1.0
    assert 1.0 <= third <= 2.0


@pytest.mark.parametrize(
    "reply",
    [error(500), error(502, "bad gateway"), error(504), raw(200, b"<html>gateway</html>")],
    ids=["500", "502", "504", "unreadable-200"],
)
@pytest.mark.anyio
async def test_answers_that_do_not_prove_nothing_ran_are_never_sent_again(reply: Any) -> None:
    """Issue 28, item 3: a 500, a gateway's 502/504 or an unreadable answer may come after the
    provider ran the request: it fails at once, with the one attempt, and a person decides."""
    sleeps = RecordedSleeps()
    with OpenAIServer([reply, openai_text("never asked for")]) as srv:
        provider = make(srv.base_url, sleeps)
        meter = CallMeter()
        try:
            with pytest.raises(ProviderServerError) as caught:
                await provider.chat(hello(), meter)
        finally:
            await provider.aclose()
        assert (len(srv.chat_requests), srv.remaining) == (1, 1)
    err = caught.value
    assert (err.details["attempts"], meter.attempts, err.retryable) == (1, 1, True)
    assert sleeps.delays == []


@pytest.mark.anyio
async def test_gives_up_after_max_retries_with_a_server_error() -> None:
    sleeps = RecordedSleeps()
    with OpenAIServer(lambda body: error(503, "overloaded")) as srv:
        provider = make(srv.base_url, sleeps, max_retries=2)
        try:
            with pytest.raises(ProviderServerError) as caught:
                await provider.chat(hello())
        finally:
            await provider.aclose()
        assert len(srv.chat_requests) == 3
    err = caught.value
    assert (err.provider, err.status, err.retryable) == ("openai", 503, True)
    assert err.details["attempts"] == 3
    assert "overloaded" in err.message
    assert len(sleeps.delays) == 2


@pytest.mark.anyio
async def test_gives_up_on_429_with_a_rate_limit_error() -> None:
    sleeps = RecordedSleeps()
    with OpenAIServer(lambda body: error(429, "quota", retry_after=1)) as srv:
        provider = make(srv.base_url, sleeps, max_retries=1)
        try:
            with pytest.raises(ProviderRateLimitError) as caught:
                await provider.chat(hello())
        finally:
            await provider.aclose()
    assert caught.value.details == {
        "provider": "openai",
        "status": 429,
        "attempts": 2,
        "retry_after_secs": 1.0,
    }
    assert caught.value.retryable is True
    assert sleeps.delays == [1.0]


@pytest.mark.anyio
async def test_retry_after_beyond_the_cap_gives_up_at_once() -> None:
    sleeps = RecordedSleeps()
    wait = RETRY_AFTER_CAP_SECS + 100
    with OpenAIServer([error(429, retry_after=wait), openai_text("too late")]) as srv:
        provider = make(srv.base_url, sleeps)
        try:
            with pytest.raises(ProviderRateLimitError) as caught:
                await provider.chat(hello())
        finally:
            await provider.aclose()
        assert srv.remaining == 1
    assert caught.value.details["retry_after_secs"] == wait
    assert sleeps.delays == []


@pytest.mark.anyio
async def test_401_is_an_auth_error_without_retry_and_never_shows_the_key() -> None:
    sleeps = RecordedSleeps()
    wrong = "sk-wrong-secret-value"
    with OpenAIServer([openai_text("unreachable")], api_key=KEY) as srv:
        provider = make(srv.base_url, sleeps, api_key=wrong)
        try:
            with pytest.raises(ProviderAuthError) as caught:
                await provider.chat(hello())
        finally:
            await provider.aclose()
        assert len(srv.requests) == 1
    err = caught.value
    assert (err.status, err.retryable, err.details["attempts"]) == (401, False, 1)
    assert "Incorrect API key" in err.message
    assert wrong not in str(err)
    assert wrong not in json.dumps(err.to_dict())
    assert sleeps.delays == []


@pytest.mark.anyio
async def test_other_4xx_is_a_request_error_with_the_providers_message() -> None:
    sleeps = RecordedSleeps()
    with OpenAIServer([error(400, "context_length_exceeded: too long")]) as srv:
        provider = make(srv.base_url, sleeps)
        try:
            with pytest.raises(ProviderRequestError) as caught:
                await provider.chat(hello())
        finally:
            await provider.aclose()
    assert caught.value.status == 400
    assert "context_length_exceeded: too long" in caught.value.message
    assert sleeps.delays == []


@pytest.mark.anyio
async def test_a_first_byte_slower_than_its_timeout_fails_once_and_is_not_resent() -> None:
    """Issue 28, item 3: silence after the request was sent is no proof that it never arrived
    (the provider may be running it, and charging for it): exactly one request reaches it, and
    the call fails honestly (``provider_timeout``, 1 attempt)."""
    sleeps = RecordedSleeps()
    slow = openai_text("late", delay_secs=2.0)
    with OpenAIServer([slow, openai_text("never asked for")]) as srv:
        provider = make(
            srv.base_url, sleeps, first_byte_timeout_secs=0.3, idle_timeout_secs=5.0, max_retries=2
        )
        meter = CallMeter()
        try:
            with pytest.raises(ProviderTimeoutError) as caught:
                await provider.chat(hello(), meter)
        finally:
            await provider.aclose()
        assert (len(srv.chat_requests), srv.remaining) == (1, 1)
    err = caught.value
    assert (err.code, err.status, err.retryable) == ("provider_timeout", None, True)
    assert (err.details["attempts"], meter.attempts, meter.answer_started) == (1, 1, False)
    assert "no first byte" in err.message and "0.3s" in err.message
    assert sleeps.delays == []


@pytest.mark.anyio
async def test_the_first_byte_and_the_gaps_between_chunks_have_their_own_timeouts() -> None:
    """The first byte may take longer than the idle timeout, and once the answer arrives its
    chunks may be further apart than the first-byte timeout: each bound applies to its phase."""
    sleeps = RecordedSleeps()
    late_start = openai_text("慢慢开始", delay_secs=0.8)
    slow_chunks = dataclasses.replace(openai_text("慢慢地，" * 3), chunk_delay_secs=0.6)
    with OpenAIServer([late_start, slow_chunks]) as srv:
        starts_late = make(srv.base_url, sleeps, first_byte_timeout_secs=3.0, idle_timeout_secs=0.4)
        spaced = make(srv.base_url, sleeps, first_byte_timeout_secs=0.4, idle_timeout_secs=3.0)
        try:
            first = await starts_late.chat(hello())
            second = await spaced.chat(hello())
        finally:
            await starts_late.aclose()
            await spaced.aclose()
        assert len(srv.chat_requests) == 2
    assert (first.text, first.attempts) == ("慢慢开始", 1)
    assert (second.text, second.attempts) == ("慢慢地，" * 3, 1)


@pytest.mark.anyio
async def test_connection_refused_is_a_server_error_after_retries() -> None:
    sleeps = RecordedSleeps()
    provider = make(closed_port_url() + "/v1", sleeps, max_retries=2)
    try:
        with pytest.raises(ProviderServerError) as caught:
            await provider.chat(hello())
    finally:
        await provider.aclose()
    assert (caught.value.status, caught.value.details["attempts"]) == (None, 3)
    assert "connection failed" in caught.value.message
    assert len(sleeps.delays) == 2


@pytest.mark.anyio
async def test_catalogue_lists_models_sorted() -> None:
    with OpenAIServer(models=["qwen2.5", "llama3.1"], api_key=KEY) as srv:
        provider = make(srv.base_url, RecordedSleeps())
        try:
            assert await provider.catalogue() == ["llama3.1", "qwen2.5"]
        finally:
            await provider.aclose()
        assert srv.requests[0].path == "/v1/models"


@pytest.mark.anyio
async def test_openai_itself_gets_max_completion_tokens_at_the_default_base_url() -> None:
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=openai_text("hi").body)

    provider = OpenAIProvider(
        name="openai", api_key=KEY, transport=httpx.MockTransport(answer), sleep=RecordedSleeps()
    )
    try:
        await provider.chat(hello(max_tokens=64))
    finally:
        await provider.aclose()
    assert str(seen[0].url) == "https://api.openai.com/v1/chat/completions"
    body = json.loads(seen[0].content)
    assert body["max_completion_tokens"] == 64
    assert "max_tokens" not in body
