"""The Anthropic Messages provider against a real local server speaking the protocol."""

from __future__ import annotations

import json
import random
from typing import Any

import httpx
import pytest

from room.errors import ProviderAuthError, ProviderRequestError, ProviderServerError
from room.providers import ChatMessage, ChatRequest, ToolCall, ToolSpec, Usage
from room.providers.anthropic import AnthropicProvider
from tests.support.llm_servers import (
    AnthropicServer,
    RecordedSleeps,
    anthropic_text,
    anthropic_tool_use,
    anthropic_tool_uses,
    error,
)

KEY = "sk-ant-test-0123456789"

READ_TOOL = ToolSpec(
    name="read_file",
    description="Read a file from the workspace.",
    parameters={"type": "object", "properties": {"path": {"type": "string"}}},
)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def make(base_url: str, sleeps: RecordedSleeps, **kwargs: Any) -> AnthropicProvider:
    options: dict[str, Any] = {"api_key": KEY, "max_retries": 3, "idle_timeout_secs": 5.0}
    options.update(kwargs)
    return AnthropicProvider(
        name="anthropic", base_url=base_url, sleep=sleeps, rng=random.Random(3), **options
    )


OPENING = (
    ChatMessage("system", "You are the lead."),
    ChatMessage("system", "The room is called demo."),
    ChatMessage("user", "看一下 README 和 setup.py", name="alice"),
)


@pytest.mark.anyio
async def test_text_round_trip_with_separate_system_prompt_and_usage() -> None:
    sleeps = RecordedSleeps()
    script = [anthropic_text("好的。", model="claude-test-2025", input_tokens=21, output_tokens=4)]
    with AnthropicServer(script, api_key=KEY) as srv:
        provider = make(srv.base_url, sleeps)
        try:
            result = await provider.chat(
                ChatRequest(model="claude-test", messages=OPENING, max_tokens=500)
            )
        finally:
            await provider.aclose()
        request = srv.requests[0]
    assert (result.text, result.usage, result.stop_reason) == ("好的。", Usage(21, 4), "end_turn")
    assert (result.provider, result.model, result.attempts) == ("anthropic", "claude-test-2025", 1)
    assert request.path == "/v1/messages"
    assert request.headers["x-api-key"] == KEY
    assert request.headers["anthropic-version"] == "2023-06-01"
    assert request.json == {
        "model": "claude-test",
        "max_tokens": 500,
        "system": "You are the lead.\n\nThe room is called demo.",
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "看一下 README 和 setup.py"}]}
        ],
        "stream": True,
    }


@pytest.mark.anyio
async def test_multi_step_tool_use_puts_all_results_in_one_user_turn() -> None:
    script = [
        anthropic_tool_uses(
            [
                ("toolu_a", "read_file", {"path": "README.md"}),
                ("toolu_b", "read_file", {"path": "setup.py"}),
            ],
            text="我先读两个文件。",
            input_tokens=50,
            output_tokens=30,
        ),
        anthropic_tool_use("read_file", {"path": "LICENSE"}, tool_id="toolu_c"),
        anthropic_text("两个文件都看过了。"),
    ]
    with AnthropicServer(script, api_key=KEY) as srv:
        provider = make(srv.base_url, RecordedSleeps())
        try:
            first = await provider.chat(
                ChatRequest(model="claude-test", messages=OPENING, tools=(READ_TOOL,))
            )
            assert first.tool_calls == (
                ToolCall("toolu_a", "read_file", {"path": "README.md"}),
                ToolCall("toolu_b", "read_file", {"path": "setup.py"}),
            )
            assert (first.stop_reason, first.usage) == ("tool_use", Usage(50, 30))
            transcript: tuple[ChatMessage, ...] = (
                *OPENING,
                ChatMessage("assistant", first.text, tool_calls=first.tool_calls),
                ChatMessage("tool", "# Demo", tool_call_id="toolu_a", name="read_file"),
                # a room message that arrived while the tools ran (steered into the turn)
                ChatMessage("user", "顺便看看 LICENSE", name="bob"),
                ChatMessage("tool", "from setuptools import setup", tool_call_id="toolu_b"),
            )
            second = await provider.chat(
                ChatRequest(model="claude-test", messages=transcript, tools=(READ_TOOL,))
            )
            transcript = (
                *transcript,
                ChatMessage("assistant", "", tool_calls=second.tool_calls),
                ChatMessage("tool", "MIT", tool_call_id="toolu_c"),
            )
            third = await provider.chat(
                ChatRequest(model="claude-test", messages=transcript, tools=(READ_TOOL,))
            )
        finally:
            await provider.aclose()
        step1, step2, step3 = srv.chat_requests
    assert third.text == "两个文件都看过了。"
    assert step1["tools"] == [
        {
            "name": "read_file",
            "description": "Read a file from the workspace.",
            "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}},
        }
    ]
    assert step2["messages"][1:] == [
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "我先读两个文件。"},
                {
                    "type": "tool_use",
                    "id": "toolu_a",
                    "name": "read_file",
                    "input": {"path": "README.md"},
                },
                {
                    "type": "tool_use",
                    "id": "toolu_b",
                    "name": "read_file",
                    "input": {"path": "setup.py"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_a", "content": "# Demo"},
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_b",
                    "content": "from setuptools import setup",
                },
                {"type": "text", "text": "顺便看看 LICENSE"},
            ],
        },
    ]
    assert step3["messages"][-2:] == [
        {
            "role": "assistant",
            "content": [
                {
                    "type": "tool_use",
                    "id": "toolu_c",
                    "name": "read_file",
                    "input": {"path": "LICENSE"},
                }
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_c", "content": "MIT"}],
        },
    ]


@pytest.mark.anyio
async def test_whitespace_only_text_is_not_sent_back_in_the_assistant_turn() -> None:
    # Models often put a bare newline before their tool calls; the API refuses a text block
    # that holds only whitespace, so the next request would fail if it went back as it came.
    script = [
        anthropic_tool_use("read_file", {"path": "README.md"}, tool_id="toolu_w", text="\n\n"),
        anthropic_text("读完了。"),
    ]
    with AnthropicServer(script, api_key=KEY) as srv:
        provider = make(srv.base_url, RecordedSleeps())
        try:
            first = await provider.chat(
                ChatRequest(model="claude-test", messages=OPENING, tools=(READ_TOOL,))
            )
            assert first.text == "\n\n"
            second = await provider.chat(
                ChatRequest(
                    model="claude-test",
                    messages=(
                        *OPENING,
                        ChatMessage("assistant", first.text, tool_calls=first.tool_calls),
                        ChatMessage("tool", " ", tool_call_id="toolu_w", name="read_file"),
                        ChatMessage("user", "  \t"),
                        ChatMessage("assistant", " 有内容的回答 "),
                        ChatMessage("user", "好"),
                    ),
                    tools=(READ_TOOL,),
                )
            )
        finally:
            await provider.aclose()
        step2 = srv.chat_requests[1]
    assert second.text == "读完了。"
    assert step2["messages"][1:] == [
        {
            "role": "assistant",
            "content": [
                {
                    "type": "tool_use",
                    "id": "toolu_w",
                    "name": "read_file",
                    "input": {"path": "README.md"},
                }
            ],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_w"}]},
        {"role": "assistant", "content": [{"type": "text", "text": " 有内容的回答 "}]},
        {"role": "user", "content": [{"type": "text", "text": "好"}]},
    ]


@pytest.mark.anyio
async def test_consecutive_user_messages_are_merged_into_one_turn() -> None:
    with AnthropicServer([anthropic_text("ok")]) as srv:
        provider = make(srv.base_url, RecordedSleeps())
        try:
            await provider.chat(
                ChatRequest(
                    model="claude-test",
                    messages=(
                        ChatMessage("user", "第一条", name="alice"),
                        ChatMessage("user", "第二条", name="bob"),
                        ChatMessage("system", "budget: 80% used"),
                    ),
                )
            )
        finally:
            await provider.aclose()
        body = srv.chat_requests[0]
    assert "system" not in body
    assert body["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "第一条"},
                {"type": "text", "text": "第二条"},
                {"type": "text", "text": "[system] budget: 80% used"},
            ],
        }
    ]


@pytest.mark.anyio
async def test_overloaded_529_is_retried_then_succeeds() -> None:
    sleeps = RecordedSleeps()
    with AnthropicServer([error(529, "Overloaded"), anthropic_text("ok")]) as srv:
        provider = make(srv.base_url, sleeps)
        try:
            result = await provider.chat(ChatRequest(model="claude-test", messages=OPENING))
        finally:
            await provider.aclose()
    assert (result.text, result.attempts, len(sleeps.delays)) == ("ok", 2, 1)


@pytest.mark.anyio
async def test_gives_up_on_persistent_overload() -> None:
    sleeps = RecordedSleeps()
    with AnthropicServer(lambda body: error(529, "Overloaded")) as srv:
        provider = make(srv.base_url, sleeps, max_retries=1)
        try:
            with pytest.raises(ProviderServerError) as caught:
                await provider.chat(ChatRequest(model="claude-test", messages=OPENING))
        finally:
            await provider.aclose()
    assert (caught.value.provider, caught.value.status) == ("anthropic", 529)
    assert caught.value.details["attempts"] == 2


@pytest.mark.anyio
async def test_a_500_may_have_run_and_is_not_sent_again() -> None:
    sleeps = RecordedSleeps()
    with AnthropicServer([error(500, "internal"), anthropic_text("never asked for")]) as srv:
        provider = make(srv.base_url, sleeps, max_retries=2)
        try:
            with pytest.raises(ProviderServerError) as caught:
                await provider.chat(ChatRequest(model="claude-test", messages=OPENING))
        finally:
            await provider.aclose()
        assert (len(srv.chat_requests), srv.remaining) == (1, 1)
    assert (caught.value.status, caught.value.details["attempts"]) == (500, 1)
    assert sleeps.delays == []


@pytest.mark.anyio
async def test_wrong_key_is_an_auth_error_without_retry() -> None:
    sleeps = RecordedSleeps()
    with AnthropicServer([anthropic_text("unreachable")], api_key=KEY) as srv:
        provider = make(srv.base_url, sleeps, api_key="sk-ant-wrong-secret")
        try:
            with pytest.raises(ProviderAuthError) as caught:
                await provider.chat(ChatRequest(model="claude-test", messages=OPENING))
        finally:
            await provider.aclose()
        assert len(srv.requests) == 1
    assert caught.value.status == 401
    assert "sk-ant-wrong-secret" not in json.dumps(caught.value.to_dict())
    assert sleeps.delays == []


@pytest.mark.anyio
async def test_a_request_the_api_rejects_is_not_retried() -> None:
    sleeps = RecordedSleeps()
    # Through the strict server: a tool result that answers no tool_use is refused with a 400.
    with AnthropicServer([anthropic_text("unreachable")]) as srv:
        provider = make(srv.base_url, sleeps)
        try:
            with pytest.raises(ProviderRequestError) as caught:
                await provider.chat(
                    ChatRequest(
                        model="claude-test",
                        messages=(*OPENING, ChatMessage("tool", "orphan", tool_call_id="toolu_x")),
                    )
                )
        finally:
            await provider.aclose()
        assert srv.remaining == 1
    assert caught.value.status == 400
    assert "tool_result for unknown tool_use ids" in caught.value.message
    assert sleeps.delays == []


@pytest.mark.anyio
async def test_catalogue_lists_models() -> None:
    with AnthropicServer(models=["claude-b", "claude-a"], api_key=KEY) as srv:
        provider = make(srv.base_url, RecordedSleeps())
        try:
            assert await provider.catalogue() == ["claude-a", "claude-b"]
        finally:
            await provider.aclose()
        assert srv.requests[0].path.startswith("/v1/models")


@pytest.mark.anyio
async def test_catalogue_follows_pages() -> None:
    pages = {
        None: {"data": [{"id": "claude-1"}], "has_more": True, "last_id": "claude-1"},
        "claude-1": {"data": [{"id": "claude-2"}], "has_more": False, "last_id": "claude-2"},
    }
    seen: list[httpx.URL] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.url)
        return httpx.Response(200, json=pages[request.url.params.get("after_id")])

    provider = AnthropicProvider(
        name="anthropic", api_key=KEY, transport=httpx.MockTransport(answer), sleep=RecordedSleeps()
    )
    try:
        assert await provider.catalogue() == ["claude-1", "claude-2"]
    finally:
        await provider.aclose()
    assert [u.host for u in seen] == ["api.anthropic.com", "api.anthropic.com"]
    assert seen[1].params["after_id"] == "claude-1"
