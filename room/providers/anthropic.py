"""Anthropic Messages: ``POST {base_url}/v1/messages`` and ``GET {base_url}/v1/models``.

The wire rules this module enforces so the runtime does not have to:

* Leading system messages become the separate ``system`` prompt. A system message later in the
  transcript stays where it is, as a user text block prefixed ``[system]`` (Anthropic has no
  mid-conversation system role).
* Tool results become ``tool_result`` blocks in a user turn; consecutive same-role messages are
  merged into one turn, so the results of several tool calls share one user message, and inside a
  user turn the ``tool_result`` blocks come first, as the API requires.
* Empty text blocks (which the API rejects) are dropped; a tool call whose arguments were not an
  object goes back with ``input: {}``.
* ``input_tokens`` counts cache reads and writes too, so it is the prompt's full size.
"""

from __future__ import annotations

import random
from typing import Any

import anyio
import httpx

from room.providers.base import (
    CATALOGUE_TIMEOUT_SECS,
    STOP_END_TURN,
    STOP_TOOL_USE,
    Answer,
    ChatMessage,
    ChatRequest,
    ChatResult,
    JsonCaller,
    Sleep,
    ToolCall,
    UnreadableAnswerError,
    Usage,
    log_route,
    missing_key_error,
    parse_arguments,
)

DEFAULT_ANTHROPIC_BASE_URL = "https://api.anthropic.com"
ANTHROPIC_VERSION = "2023-06-01"
CATALOGUE_MAX_PAGES = 10


def _blocks(message: ChatMessage, *, late_system: bool) -> tuple[str, list[dict[str, Any]]]:
    if message.role == "tool":
        block: dict[str, Any] = {"type": "tool_result", "tool_use_id": message.tool_call_id}
        if message.content:
            block["content"] = message.content
        return "user", [block]
    if message.role == "assistant":
        blocks: list[dict[str, Any]] = []
        if message.content:
            blocks.append({"type": "text", "text": message.content})
        blocks.extend(
            {"type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments}
            for call in message.tool_calls
        )
        return "assistant", blocks
    text = f"[system] {message.content}" if late_system else message.content
    return "user", [{"type": "text", "text": text}] if message.content else []


def encode_messages(messages: tuple[ChatMessage, ...]) -> tuple[str, list[dict[str, Any]]]:
    """``(system prompt, turns)`` with same-role messages merged and tool results first."""
    system_parts: list[str] = []
    turns: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "system" and not turns:
            if message.content:
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
    }
    if system:
        body["system"] = system
    if request.temperature is not None:
        body["temperature"] = request.temperature
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
    model = data.get("model")
    return Answer(
        text="".join(texts),
        tool_calls=tuple(calls),
        usage=_decode_usage(data.get("usage")),
        model=model if isinstance(model, str) and model else requested_model,
        stop_reason=stop_reason,
    )


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
        timeout_secs: float = 60.0,
        max_retries: int = 3,
        transport: httpx.AsyncBaseTransport | None = None,
        sleep: Sleep = anyio.sleep,
        rng: random.Random | None = None,
    ) -> None:
        self.name = name
        self._api_key = api_key
        self._key_required = key_required
        self._key_env = key_env
        self._catalogue_timeout_secs = min(timeout_secs, CATALOGUE_TIMEOUT_SECS)
        headers = {"anthropic-version": ANTHROPIC_VERSION}
        if api_key:
            headers["x-api-key"] = api_key
        self._caller = JsonCaller(
            provider=name,
            base_url=base_url.rstrip("/"),
            headers=headers,
            secret=api_key,
            timeout_secs=timeout_secs,
            max_retries=max_retries,
            transport=transport,
            sleep=sleep,
            rng=rng,
        )

    def _check_key(self) -> None:
        if self._key_required and not self._api_key:
            raise missing_key_error(self.name, self._key_env)

    async def chat(self, request: ChatRequest) -> ChatResult:
        self._check_key()
        outcome = await self._caller.call(
            "POST",
            "/v1/messages",
            lambda data: decode_response(data, requested_model=request.model),
            body=encode_request(request),
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
