"""Pure parts of the providers (no I/O), and the test servers' protocol checks."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime

import pytest

from room.providers import ChatMessage, ToolCall
from room.providers import anthropic as anthropic_wire
from room.providers import openai as openai_wire
from room.providers.base import (
    RETRY_MAX_BACKOFF_SECS,
    UnreadableAnswerError,
    backoff_delay,
    parse_arguments,
    parse_retry_after,
)
from tests.support.llm_servers import anthropic_problem, openai_problem

NOW = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)


def test_backoff_doubles_then_caps_and_jitter_stays_within_half() -> None:
    assert [backoff_delay(n, 1.0) for n in (1, 2, 3, 4, 5)] == [0.5, 1.0, 2.0, 4.0, 8.0]
    assert backoff_delay(50, 1.0) == RETRY_MAX_BACKOFF_SECS
    assert [backoff_delay(n, 0.0) for n in (1, 2, 3)] == [0.25, 0.5, 1.0]


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({}, None),
        ({"retry-after": "3"}, 3.0),
        ({"retry-after": "0.25"}, 0.25),
        ({"retry-after": "-5"}, 0.0),
        ({"retry-after-ms": "1500", "retry-after": "9"}, 1.5),
        ({"retry-after": "Wed, 01 Jan 2025 12:00:30 GMT"}, 30.0),
        ({"retry-after": "Wed, 01 Jan 2025 11:00:00 GMT"}, 0.0),
        ({"retry-after": "soon"}, None),
    ],
)
def test_retry_after(headers: dict[str, str], expected: float | None) -> None:
    assert parse_retry_after(headers, NOW) == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ('{"a": 1}', ({"a": 1}, "")),
        ({"a": 1}, ({"a": 1}, "")),
        ("", ({}, "")),
        (None, ({}, "")),
        ('{"a": ', ({}, '{"a": ')),
        ("[1, 2]", ({}, "[1, 2]")),
        ('"text"', ({}, '"text"')),
        ([1], ({}, "[1]")),
    ],
)
def test_tool_arguments(raw: object, expected: tuple[dict[str, object], str]) -> None:
    assert parse_arguments(raw) == expected


def test_messages_refuse_impossible_shapes() -> None:
    with pytest.raises(ValueError, match="tool_call_id"):
        ChatMessage("tool", "result")
    with pytest.raises(ValueError, match="assistant"):
        ChatMessage("user", "hi", tool_calls=(ToolCall("c", "t", {}),))


def test_openai_decodes_content_parts_missing_ids_and_tool_calls_under_stop() -> None:
    answer = openai_wire.decode_response(
        {
            "choices": [
                {
                    "finish_reason": "stop",
                    "message": {
                        "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
                        "tool_calls": [{"function": {"name": "t", "arguments": "{}"}}],
                    },
                }
            ]
        },
        requested_model="asked",
    )
    assert (answer.text, answer.model, answer.stop_reason) == ("ab", "asked", "tool_use")
    assert answer.tool_calls == (ToolCall("call_0", "t", {}),)
    assert answer.usage.reported is False


@pytest.mark.parametrize(
    "body",
    [[], {}, {"choices": []}, {"choices": [{"message": None}]}, {"error": {"message": "x"}}],
)
def test_openai_answers_without_a_message_are_unreadable(body: object) -> None:
    with pytest.raises(UnreadableAnswerError):
        openai_wire.decode_response(body)


def test_openai_length_is_max_tokens() -> None:
    answer = openai_wire.decode_response(
        {"choices": [{"finish_reason": "length", "message": {"content": "tru"}}]}
    )
    assert answer.stop_reason == "max_tokens"


def test_anthropic_drops_empty_text_and_sends_invalid_arguments_as_empty_input() -> None:
    system, turns = anthropic_wire.encode_messages(
        (
            ChatMessage("user", ""),
            ChatMessage("user", "hi"),
            ChatMessage(
                "assistant", "", tool_calls=(ToolCall("t1", "f", {}, raw_arguments="{oops"),)
            ),
            ChatMessage("tool", "", tool_call_id="t1"),
        )
    )
    assert system == ""
    assert turns == [
        {"role": "user", "content": [{"type": "text", "text": "hi"}]},
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1"}]},
    ]


def test_anthropic_answers_cut_by_a_limit_are_max_tokens() -> None:
    for stop in ("max_tokens", "model_context_window_exceeded"):
        answer = anthropic_wire.decode_response(
            {"content": [{"type": "text", "text": "写到一"}], "stop_reason": stop}
        )
        assert (answer.text, answer.stop_reason) == ("写到一", "max_tokens")


def test_anthropic_usage_counts_cached_input() -> None:
    answer = anthropic_wire.decode_response(
        {
            "content": [{"type": "thinking", "thinking": "..."}, {"type": "text", "text": "x"}],
            "usage": {
                "input_tokens": 5,
                "cache_read_input_tokens": 100,
                "cache_creation_input_tokens": 20,
                "output_tokens": 2,
            },
            "stop_reason": "max_tokens",
        }
    )
    assert (answer.text, answer.stop_reason) == ("x", "max_tokens")
    assert (answer.usage.input_tokens, answer.usage.output_tokens) == (125, 2)


# -- the servers' checks bite (otherwise the provider tests could not fail on wire shape) ----


def test_openai_check_requires_tool_calls_to_be_answered_before_moving_on() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    ok = {
        "model": "m",
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "c1", "content": "r"},
        ],
    }
    assert openai_problem(ok) is None
    unanswered = {**ok, "messages": [*ok["messages"][:2], {"role": "user", "content": "?"}]}
    assert "not answered" in (openai_problem(unanswered) or "")
    dict_args = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": {}}}
    bad_args = {
        **ok,
        "messages": [ok["messages"][0], {"role": "assistant", "tool_calls": [dict_args]}],
    }
    assert "JSON string" in (openai_problem(bad_args) or "")


def test_anthropic_check_requires_alternation_and_results_first() -> None:
    use = {"type": "tool_use", "id": "t1", "name": "f", "input": {}}
    result = {"type": "tool_result", "tool_use_id": "t1", "content": "r"}
    text = {"type": "text", "text": "more"}

    def body(*messages: Mapping[str, object]) -> dict[str, object]:
        return {"model": "m", "max_tokens": 10, "messages": list(messages)}

    user = {"role": "user", "content": "hi"}
    assistant = {"role": "assistant", "content": [use]}
    assert (
        anthropic_problem(body(user, assistant, {"role": "user", "content": [result, text]}))
        is None
    )
    assert "alternate" in (anthropic_problem(body(user, user)) or "")
    assert "come first" in (
        anthropic_problem(body(user, assistant, {"role": "user", "content": [text, result]})) or ""
    )
    assert "no tool_result" in (anthropic_problem(body(user, assistant, user)) or "")
    assert "system" in (anthropic_problem(body({"role": "system", "content": "x"})) or "")
    for blank in ("", " \n\t"):
        assert "non-whitespace" in (
            anthropic_problem(body({"role": "user", "content": [{"type": "text", "text": blank}]}))
            or ""
        )
