"""Anthropic Messages: ``POST {base_url}/v1/messages`` and ``GET {base_url}/v1/models``.

The wire rules this module enforces so the runtime does not have to:

* Leading system messages become the separate ``system`` prompt. A system message later in the
  transcript stays where it is, as a user text block prefixed ``[system]`` (Anthropic has no
  mid-conversation system role).
* Tool results become ``tool_result`` blocks in a user turn; consecutive same-role messages are
  merged into one turn, so the results of several tool calls share one user message, and inside a
  user turn the ``tool_result`` blocks come first, as the API requires.
* Empty and whitespace-only text blocks (which the API rejects) are dropped, in every turn
  (an assistant's text before its tool calls is often just a newline); the text that is sent
  is sent as it was. A tool call whose arguments were not an object goes back with ``input: {}``.
* ``input_tokens`` counts cache reads and writes too, so it is the prompt's full size.
* No ``temperature``: the Messages API's request type (the ``anthropic`` SDK's
  ``MessageCreateParams``) has none; a request that asks for one is sent without it.
* Requests are streamed (``stream: true``); :class:`StreamingAnswer` builds the answer from the
  events (``message_start`` carries the input tokens, ``message_delta`` the stop reason and the
  output tokens so far, ``message_stop`` ends it; ``ping`` keeps an idle connection alive).
"""

from __future__ import annotations

import json
import random
from typing import Any

import anyio
import httpx

from room.providers.base import (
    CATALOGUE_TIMEOUT_SECS,
    CONNECT_TIMEOUT_SECS,
    FIRST_BYTE_TIMEOUT_SECS,
    IDLE_TIMEOUT_SECS,
    MAX_RETRIES,
    STOP_END_TURN,
    STOP_MAX_TOKENS,
    STOP_TOOL_USE,
    Answer,
    CallMeter,
    ChatMessage,
    ChatRequest,
    ChatResult,
    JsonCaller,
    Sleep,
    StreamErrorEvent,
    ToolCall,
    UnreadableAnswerError,
    Usage,
    log_route,
    missing_key_error,
    parse_arguments,
    text_only,
)

DEFAULT_ANTHROPIC_BASE_URL = "https://api.anthropic.com"
ANTHROPIC_VERSION = "2023-06-01"
CATALOGUE_MAX_PAGES = 10


def _has_text(text: str) -> bool:
    """Whether the API takes ``text`` as a text block: it refuses empty and whitespace-only."""
    return bool(text.strip())


def _blocks(message: ChatMessage, *, late_system: bool) -> tuple[str, list[dict[str, Any]]]:
    if message.role == "tool":
        block: dict[str, Any] = {"type": "tool_result", "tool_use_id": message.tool_call_id}
        if _has_text(message.content):
            block["content"] = message.content
        return "user", [block]
    if message.role == "assistant":
        blocks: list[dict[str, Any]] = []
        if _has_text(message.content):
            blocks.append({"type": "text", "text": message.content})
        blocks.extend(
            {"type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments}
            for call in message.tool_calls
        )
        return "assistant", blocks
    text = f"[system] {message.content}" if late_system else message.content
    return "user", [{"type": "text", "text": text}] if _has_text(message.content) else []


def encode_messages(messages: tuple[ChatMessage, ...]) -> tuple[str, list[dict[str, Any]]]:
    """``(system prompt, turns)`` with same-role messages merged and tool results first."""
    system_parts: list[str] = []
    turns: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "system" and not turns:
            if _has_text(message.content):
                system_parts.append(message.content)
            continue
        role, blocks = _blocks(message, late_system=message.role == "system")
        if not blocks:
            continue
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    for turn in turns:
        if turn["role"] == "user":
            turn["content"].sort(key=lambda b: b["type"] != "tool_result")  # stable
    return "\n\n".join(system_parts), turns


def encode_request(request: ChatRequest) -> dict[str, Any]:
    system, turns = encode_messages(request.messages)
    body: dict[str, Any] = {
        "model": request.model,
        "max_tokens": request.max_tokens,
        "messages": turns,
        "stream": True,
    }
    if system:
        body["system"] = system
    if request.tools:
        body["tools"] = [
            {"name": tool.name, "description": tool.description, "input_schema": tool.parameters}
            for tool in request.tools
        ]
    return body


def _decode_usage(raw: Any) -> Usage:
    if not isinstance(raw, dict):
        return Usage(0, 0, reported=False)

    def count(key: str) -> int:
        value = raw.get(key)
        return value if isinstance(value, int) else 0

    prompt = (
        count("input_tokens")
        + count("cache_creation_input_tokens")
        + count("cache_read_input_tokens")
    )
    if "input_tokens" not in raw and "output_tokens" not in raw:
        return Usage(0, 0, reported=False)
    return Usage(prompt, count("output_tokens"))


def decode_response(data: Any, *, requested_model: str = "") -> Answer:
    if not isinstance(data, dict) or not isinstance(data.get("content"), list):
        raise UnreadableAnswerError("the answer has no content list")
    texts: list[str] = []
    calls: list[ToolCall] = []
    for block in data["content"]:
        if not isinstance(block, dict):
            raise UnreadableAnswerError("a content block is not an object")
        if block.get("type") == "text":
            texts.append(str(block.get("text", "")))
        elif block.get("type") == "tool_use":
            if not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str):
                raise UnreadableAnswerError("a tool_use block has no id or name")
            arguments, raw_arguments = parse_arguments(block.get("input"))
            calls.append(ToolCall(block["id"], block["name"], arguments, raw_arguments))
        # thinking and other block types are not part of the answer shown to the room
    stop = data.get("stop_reason")
    stop_reason = stop if isinstance(stop, str) else (STOP_TOOL_USE if calls else STOP_END_TURN)
    if stop_reason == "model_context_window_exceeded":  # cut off as by max_tokens
        stop_reason = STOP_MAX_TOKENS
    model = data.get("model")
    return Answer(
        text="".join(texts),
        tool_calls=tuple(calls),
        usage=_decode_usage(data.get("usage")),
        model=model if isinstance(model, str) and model else requested_model,
        stop_reason=stop_reason,
    )


class StreamingAnswer:
    """A Messages answer built from its streamed events; the whole is decoded as a
    non-streamed answer would be (so both paths agree on text, tool calls and usage)."""

    def __init__(self, requested_model: str) -> None:
        self._requested_model = requested_model
        self._model: str | None = None
        self._blocks: dict[int, dict[str, Any]] = {}
        self._json: dict[int, list[str]] = {}
        self._stop: str | None = None
        self._usage: dict[str, Any] | None = None
        self._done = False

    def feed(self, event: str, data: str) -> None:
        payload = json.loads(data)
        if not isinstance(payload, dict):
            raise UnreadableAnswerError("an event is not a JSON object")
        kind = payload.get("type", event)
        if kind == "error":
            error = payload.get("error")
            error = error if isinstance(error, dict) else {}
            raise StreamErrorEvent(str(error.get("message", "error")), str(error.get("type", "")))
        if kind == "message_start":
            message = payload.get("message")
            if not isinstance(message, dict):
                raise UnreadableAnswerError("message_start has no message")
            if isinstance(message.get("model"), str):
                self._model = message["model"]
            if isinstance(message.get("usage"), dict):
                self._usage = dict(message["usage"])
        elif kind == "content_block_start":
            block = payload.get("content_block")
            if not isinstance(block, dict) or not isinstance(payload.get("index"), int):
                raise UnreadableAnswerError("content_block_start has no block")
            self._blocks[payload["index"]] = dict(block)
            if block.get("type") == "tool_use":
                self._json[payload["index"]] = []
        elif kind == "content_block_delta":
            self._delta(payload)
        elif kind == "message_delta":
            delta = payload.get("delta")
            if isinstance(delta, dict) and isinstance(delta.get("stop_reason"), str):
                self._stop = delta["stop_reason"]
            if isinstance(payload.get("usage"), dict):
                self._usage = {**(self._usage or {}), **payload["usage"]}
        elif kind == "message_stop":
            self._done = True
        # ping, content_block_stop and unknown events change nothing

    def _delta(self, payload: dict[str, Any]) -> None:
        index, delta = payload.get("index"), payload.get("delta")
        block = self._blocks.get(index) if isinstance(index, int) else None
        if block is None or not isinstance(delta, dict):
            raise UnreadableAnswerError("a content_block_delta for no block")
        if delta.get("type") == "text_delta":
            block["text"] = str(block.get("text", "")) + str(delta.get("text", ""))
        elif delta.get("type") == "input_json_delta" and isinstance(index, int):
            self._json.setdefault(index, []).append(str(delta.get("partial_json", "")))

    def usage(self) -> Usage | None:
        usage = _decode_usage(self._usage)
        return usage if usage.reported else None

    def complete(self) -> bool:
        return self._done

    def text(self) -> str:
        return "".join(
            str(block.get("text", ""))
            for _, block in sorted(self._blocks.items())
            if block.get("type") == "text"
        )

    def answer(self) -> Answer:
        content = []
        for index, block in sorted(self._blocks.items()):
            if block.get("type") == "tool_use":
                partial = "".join(self._json.get(index, []))
                block = {**block, "input": partial if partial.strip() else block.get("input", {})}
            content.append(block)
        whole: dict[str, Any] = {"content": content, "stop_reason": self._stop}
        if self._usage is not None:
            whole["usage"] = self._usage
        if self._model:
            whole["model"] = self._model
        return decode_response(text_only(whole), requested_model=self._requested_model)

    def whole(self, data: Any) -> Answer:
        return decode_response(data, requested_model=self._requested_model)


def _decode_page(data: Any) -> tuple[list[str], str | None]:
    items = data.get("data") if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise UnreadableAnswerError("the model list has no data array")
    ids = [str(item["id"]) for item in items if isinstance(item, dict) and "id" in item]
    more = data.get("has_more") is True and isinstance(data.get("last_id"), str)
    return ids, data["last_id"] if more else None


class AnthropicProvider:
    kind = "anthropic"
    offline = False

    def __init__(
        self,
        *,
        name: str,
        api_key: str | None,
        base_url: str = DEFAULT_ANTHROPIC_BASE_URL,
        key_required: bool = True,
        key_env: str | None = None,
        idle_timeout_secs: float = IDLE_TIMEOUT_SECS,
        first_byte_timeout_secs: float = FIRST_BYTE_TIMEOUT_SECS,
        connect_timeout_secs: float = CONNECT_TIMEOUT_SECS,
        max_retries: int = MAX_RETRIES,
        transport: httpx.AsyncBaseTransport | None = None,
        sleep: Sleep = anyio.sleep,
        rng: random.Random | None = None,
    ) -> None:
        self.name = name
        self._api_key = api_key
        self._key_required = key_required
        self._key_env = key_env
        self._catalogue_timeout_secs = min(idle_timeout_secs, CATALOGUE_TIMEOUT_SECS)
        headers = {"anthropic-version": ANTHROPIC_VERSION}
        if api_key:
            headers["x-api-key"] = api_key
        self._caller = JsonCaller(
            provider=name,
            base_url=base_url.rstrip("/"),
            headers=headers,
            secret=api_key,
            idle_timeout_secs=idle_timeout_secs,
            first_byte_timeout_secs=first_byte_timeout_secs,
            connect_timeout_secs=connect_timeout_secs,
            max_retries=max_retries,
            transport=transport,
            sleep=sleep,
            rng=rng,
        )

    def _check_key(self) -> None:
        if self._key_required and not self._api_key:
            raise missing_key_error(self.name, self._key_env)

    async def chat(self, request: ChatRequest, meter: CallMeter | None = None) -> ChatResult:
        self._check_key()
        outcome = await self._caller.stream(
            "/v1/messages",
            encode_request(request),
            lambda: StreamingAnswer(request.model),
            meter if meter is not None else CallMeter(),
        )
        answer = outcome.value
        result = ChatResult(
            text=answer.text,
            tool_calls=answer.tool_calls,
            usage=answer.usage,
            provider=self.name,
            model=answer.model,
            latency_ms=outcome.latency_ms,
            stop_reason=answer.stop_reason,
            attempts=outcome.attempts,
        )
        log_route(result)
        return result

    async def catalogue(self) -> list[str]:
        self._check_key()
        models: list[str] = []
        params = {"limit": "1000"}
        for _ in range(CATALOGUE_MAX_PAGES):
            outcome = await self._caller.call(
                "GET",
                "/v1/models",
                _decode_page,
                params=params,
                max_retries=0,
                timeout_secs=self._catalogue_timeout_secs,
            )
            ids, after = outcome.value
            models.extend(ids)
            if after is None:
                break
            params = {"limit": "1000", "after_id": after}
        return sorted(set(models))

    async def aclose(self) -> None:
        await self._caller.aclose()
