"""OpenAI-compatible chat completions: OpenAI, DeepSeek, Ollama, vLLM, llama.cpp server.

``POST {base_url}/chat/completions`` and ``GET {base_url}/models``; base URLs include ``/v1``.
Tools go out as ``{"type": "function", "function": {...}}``; the model's tool calls come back with
JSON-string arguments; tool results go back as ``{"role": "tool", "tool_call_id", "content"}``.

Decisions:

* ``ChatMessage.name`` is not sent: many compatible servers reject or ignore it, and OpenAI only
  accepts ASCII names. Put the sender in the content.
* ``api.openai.com`` gets ``max_completion_tokens`` (its newer models refuse ``max_tokens``);
  every other server gets ``max_tokens``, which all of them understand.
* An answer without ``usage`` yields ``Usage(0, 0, reported=False)``; nothing is estimated.
"""

from __future__ import annotations

import json
import random
from typing import Any

import anyio
import httpx

from room.providers.base import (
    CATALOGUE_TIMEOUT_SECS,
    STOP_END_TURN,
    STOP_MAX_TOKENS,
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

DEFAULT_OPENAI_BASE_URL = "https://api.openai.com/v1"

_STOP_REASONS = {
    "stop": STOP_END_TURN,
    "tool_calls": STOP_TOOL_USE,
    "function_call": STOP_TOOL_USE,
    "length": STOP_MAX_TOKENS,
}


def encode_message(message: ChatMessage) -> dict[str, Any]:
    if message.role == "tool":
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
    if message.role == "assistant" and message.tool_calls:
        return {
            "role": "assistant",
            "content": message.content or None,
            "tool_calls": [
                {
                    "id": call.id,
                    "type": "function",
                    "function": {
                        "name": call.name,
                        # Invalid arguments go back as the model wrote them, so the transcript
                        # shows the model its own mistake next to the error the runtime reports.
                        "arguments": call.raw_arguments
                        or json.dumps(call.arguments, ensure_ascii=False),
                    },
                }
                for call in message.tool_calls
            ],
        }
    return {"role": message.role, "content": message.content}


def encode_request(request: ChatRequest, *, max_tokens_field: str = "max_tokens") -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": request.model,
        "messages": [encode_message(m) for m in request.messages],
        max_tokens_field: request.max_tokens,
    }
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if request.tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": tool.parameters,
                },
            }
            for tool in request.tools
        ]
    return body


def _text_of(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # some servers answer with content parts
        return "".join(
            str(part.get("text", ""))
            for part in content
            if isinstance(part, dict) and part.get("type") == "text"
        )
    raise UnreadableAnswerError("message.content is neither text nor parts")


def _decode_tool_calls(raw_calls: Any) -> tuple[ToolCall, ...]:
    if raw_calls is None:
        return ()
    if not isinstance(raw_calls, list):
        raise UnreadableAnswerError("message.tool_calls is not a list")
    calls = []
    for index, raw in enumerate(raw_calls):
        function = raw.get("function") if isinstance(raw, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise UnreadableAnswerError("a tool call has no function name")
        arguments, raw_arguments = parse_arguments(function.get("arguments"))
        # Some llama.cpp builds omit ids; ids only need to be unique within one message.
        call_id = raw.get("id") or f"call_{index}"
        calls.append(ToolCall(str(call_id), function["name"], arguments, raw_arguments))
    return tuple(calls)


def _decode_usage(raw: Any) -> Usage:
    if not isinstance(raw, dict):
        return Usage(0, 0, reported=False)
    prompt, completion = raw.get("prompt_tokens"), raw.get("completion_tokens")
    if not isinstance(prompt, int) and not isinstance(completion, int):
        return Usage(0, 0, reported=False)
    return Usage(
        prompt if isinstance(prompt, int) else 0, completion if isinstance(completion, int) else 0
    )


def decode_response(data: Any, *, requested_model: str = "") -> Answer:
    if not isinstance(data, dict):
        raise UnreadableAnswerError("the answer is not a JSON object")
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise UnreadableAnswerError("the answer has no choices")
    message = choices[0].get("message")
    if not isinstance(message, dict):
        raise UnreadableAnswerError("the first choice has no message")
    tool_calls = _decode_tool_calls(message.get("tool_calls"))
    finish = choices[0].get("finish_reason")
    stop_reason = _STOP_REASONS.get(finish, finish) if isinstance(finish, str) else STOP_END_TURN
    if tool_calls:  # some servers say "stop" even when they ask for tools
        stop_reason = STOP_TOOL_USE
    model = data.get("model")
    return Answer(
        text=_text_of(message.get("content")),
        tool_calls=tool_calls,
        usage=_decode_usage(data.get("usage")),
        model=model if isinstance(model, str) and model else requested_model,
        stop_reason=stop_reason,
    )


def decode_catalogue(data: Any) -> list[str]:
    items = data.get("data") if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise UnreadableAnswerError("the model list has no data array")
    return sorted({str(item["id"]) for item in items if isinstance(item, dict) and "id" in item})


class OpenAIProvider:
    kind = "openai"
    offline = False

    def __init__(
        self,
        *,
        name: str,
        api_key: str | None,
        base_url: str = DEFAULT_OPENAI_BASE_URL,
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
        base = base_url.rstrip("/")
        is_openai = httpx.URL(base).host == "api.openai.com"
        self._max_tokens_field = "max_completion_tokens" if is_openai else "max_tokens"
        self._caller = JsonCaller(
            provider=name,
            base_url=base,
            headers={"authorization": f"Bearer {api_key}"} if api_key else {},
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
        body = encode_request(request, max_tokens_field=self._max_tokens_field)
        outcome = await self._caller.call(
            "POST",
            "/chat/completions",
            lambda data: decode_response(data, requested_model=request.model),
            body=body,
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
        outcome = await self._caller.call(
            "GET",
            "/models",
            decode_catalogue,
            max_retries=0,
            timeout_secs=self._catalogue_timeout_secs,
        )
        return outcome.value

    async def aclose(self) -> None:
        await self._caller.aclose()
