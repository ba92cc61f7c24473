"""Every request body the providers build is a valid request of the official SDKs' types
(``openai``'s ``CompletionCreateParamsStreaming``, ``anthropic``'s
``MessageCreateParamsStreaming``), checked strictly — and the check itself refuses what the real
APIs would (issue 14, item 17). The local test servers run the same check on every chat request
of every provider and runtime test (``tests.support.llm_servers``)."""

from __future__ import annotations

import copy
import json
from typing import Any

import httpx
import pytest

from room.providers import ChatMessage, ChatRequest, ToolCall, ToolSpec
from room.providers import anthropic as anthropic_wire
from room.providers import openai as openai_wire
from room.providers.openai import OpenAIProvider
from tests.support.llm_servers import RecordedSleeps, openai_text
from tests.support.sdk_types import request_problem

TOOLS = (
    ToolSpec(
        "fs_read",
        "Read a file.",
        {
            "type": "object",
            "properties": {"path": {"type": "string"}, "lines": {"type": "array"}},
            "required": ["path"],
        },
    ),
    ToolSpec("room_members", "List the members.", {"type": "object", "properties": {}}),
)

TRANSCRIPT = (
    ChatMessage("system", "你是 @lead，项目的负责人。"),
    ChatMessage("system", ""),
    ChatMessage("user", "[张三] @lead 看一下 README", name="张三"),
    ChatMessage("user", "   "),
    ChatMessage(
        "assistant",
        "\n",
        tool_calls=(
            ToolCall("c1", "fs_read", {"path": "README.md", "lines": [1, 20]}),
            ToolCall("c2", "room_members", {}, raw_arguments="{not json"),
        ),
    ),
    ChatMessage("tool", "# Demo\n你好", tool_call_id="c1", name="fs_read"),
    ChatMessage("tool", "", tool_call_id="c2", name="room_members"),
    ChatMessage("system", "提醒：步数快用完了。"),
    ChatMessage("assistant", "好的，我看完了。"),
    ChatMessage("user", "谢谢"),
)


def requests() -> list[ChatRequest]:
    return [
        ChatRequest(model="m", messages=(ChatMessage("user", "hi"),)),
        ChatRequest(model="m", messages=TRANSCRIPT, tools=TOOLS, max_tokens=512),
        ChatRequest(model="m", messages=TRANSCRIPT, temperature=0.3),
    ]


@pytest.mark.parametrize("request_", requests())
@pytest.mark.parametrize("field", ["max_tokens", "max_completion_tokens"])
def test_openai_bodies_are_sdk_requests(request_: ChatRequest, field: str) -> None:
    body = openai_wire.encode_request(request_, max_tokens_field=field)
    assert request_problem("openai", body) is None
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize("request_", requests())
def test_anthropic_bodies_are_sdk_requests(request_: ChatRequest) -> None:
    body = anthropic_wire.encode_request(request_)
    assert request_problem("anthropic", body) is None
    assert body["stream"] is True
    assert "temperature" not in body  # the Messages request type has none


def _set(body: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    broken = copy.deepcopy(body)
    target: Any = broken
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    return broken


OPENAI_BODY = openai_wire.encode_request(requests()[1])
ANTHROPIC_BODY = anthropic_wire.encode_request(requests()[1])


@pytest.mark.parametrize(
    ("protocol", "body", "expected"),
    [
        ("openai", _set(OPENAI_BODY, ("stream",), False), "stream"),
        ("openai", _set(OPENAI_BODY, ("max_tokens",), "512"), "max_tokens"),
        ("openai", _set(OPENAI_BODY, ("sender",), "张三"), "sender"),
        ("openai", _set(OPENAI_BODY, ("messages", 1, "author"), "张三"), "author"),
        ("openai", _set(OPENAI_BODY, ("messages", 4, "tool_calls", 0, "type"), "fn"), "messages.4"),
        ("openai", _set(OPENAI_BODY, ("tools", 0, "function", "schema"), {}), "schema"),
        ("openai", _set(OPENAI_BODY, ("stream_options", "usage"), True), "usage"),
        ("anthropic", _set(ANTHROPIC_BODY, ("temperature",), 0.2), "temperature"),
        ("anthropic", _set(ANTHROPIC_BODY, ("stream",), False), "stream"),
        ("anthropic", _set(ANTHROPIC_BODY, ("messages", 0, "content", 0, "zz"), 1), "TextBlock"),
        (
            "anthropic",
            _set(ANTHROPIC_BODY, ("messages", 1, "content", 1, "input"), "{}"),
            "messages.1",
        ),
        ("anthropic", _set(ANTHROPIC_BODY, ("messages", 0, "role"), "robot"), "messages.0"),
        ("anthropic", _set(ANTHROPIC_BODY, ("tools", 0, "parameters"), {}), "parameters"),
    ],
)
def test_the_sdk_check_refuses_bodies_the_api_would(
    protocol: Any, body: dict[str, Any], expected: str
) -> None:
    problem = request_problem(protocol, body)
    assert problem is not None and expected in problem, problem


def test_the_sdk_check_walks_every_message_of_a_lazy_iterable() -> None:
    # ``messages`` is an Iterable in the SDK types, which pydantic checks lazily: a bad last
    # message must still be found.
    body = _set(OPENAI_BODY, ("messages", -1, "role"), "robot")
    assert request_problem("openai", body) is not None
    body = _set(ANTHROPIC_BODY, ("messages", -1, "content", 0, "type"), "video")
    assert request_problem("anthropic", body) is not None


@pytest.mark.anyio
async def test_openai_itself_gets_an_sdk_request_with_max_completion_tokens() -> None:
    seen: list[httpx.Request] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=openai_text("hi").body)

    provider = OpenAIProvider(
        name="openai", api_key="sk", transport=httpx.MockTransport(answer), sleep=RecordedSleeps()
    )
    try:
        result = await provider.chat(requests()[1])
    finally:
        await provider.aclose()
    body = json.loads(seen[0].content)
    assert request_problem("openai", body) is None
    assert "max_completion_tokens" in body and "max_tokens" not in body
    assert result.text == "hi"  # a JSON answer to a streamed request is read as such
