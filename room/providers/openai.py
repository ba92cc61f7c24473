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
* Chat requests are streamed (``stream: true`` with ``stream_options.include_usage``, so the last
  chunk carries the usage); :class:`StreamingAnswer` builds the answer from the chunks. A server
  that ignores ``stream`` and answers with one JSON body is read as such.
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
        "stream": True,
        "stream_options": {"include_usage": True},
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
    if tool_calls and stop_reason == STOP_END_TURN:  # some servers say "stop" asking for tools
        stop_reason = STOP_TOOL_USE  # ("length" stays: the calls may have been cut)
    model = data.get("model")
    return Answer(
        text=_text_of(message.get("content")),
        tool_calls=tool_calls,
        usage=_decode_usage(data.get("usage")),
        model=model if isinstance(model, str) and model else requested_model,
        stop_reason=stop_reason,
    )


class StreamingAnswer:
    """A chat completion built from its streamed chunks (``data: {...}`` lines, then
    ``data: [DONE]``): text deltas joined, tool calls assembled by ``index``, the finish reason,
    and the usage of the last chunk. The whole is decoded as a non-streamed answer would be."""

    def __init__(self, requested_model: str) -> None:
        self._requested_model = requested_model
        self._model: str | None = None
        self._text: list[str] = []
        self._calls: dict[int, dict[str, Any]] = {}
        self._finish: str | None = None
        self._usage: Any = None
        self._done = False

    def feed(self, event: str, data: str) -> None:
        if data.strip() == "[DONE]":
            self._done = True
            return
        chunk = json.loads(data)
        if not isinstance(chunk, dict):
            raise UnreadableAnswerError("a chunk is not a JSON object")
        error = chunk.get("error")
        if error is not None:
            message = error.get("message") if isinstance(error, dict) else error
            kind = error.get("type") if isinstance(error, dict) else ""
            raise StreamErrorEvent(str(message), str(kind or ""))
        if isinstance(chunk.get("model"), str) and chunk["model"]:
            self._model = chunk["model"]
        if isinstance(chunk.get("usage"), dict):
            self._usage = chunk["usage"]
        choices = chunk.get("choices")
        if not isinstance(choices, list):
            return
        for choice in choices:
            if isinstance(choice, dict) and choice.get("index", 0) == 0:
                self._choice(choice)

    def _choice(self, choice: dict[str, Any]) -> None:
        delta = choice.get("delta")
        if isinstance(delta, dict):
            content = delta.get("content")
            if content is not None:
                self._text.append(_text_of(content))
            raw_calls = delta.get("tool_calls")
            if isinstance(raw_calls, list):
                for position, raw in enumerate(raw_calls):
                    if isinstance(raw, dict):
                        self._call_delta(position, raw)
        if isinstance(choice.get("finish_reason"), str):
            self._finish = choice["finish_reason"]

    def _call_delta(self, position: int, raw: dict[str, Any]) -> None:
        index = raw.get("index")
        call = self._calls.setdefault(
            index if isinstance(index, int) else position, {"name": "", "arguments": []}
        )
        if isinstance(raw.get("id"), str) and raw["id"]:
            call["id"] = raw["id"]
        function = raw.get("function")
        if isinstance(function, dict):
            if isinstance(function.get("name"), str) and not call["name"]:
                call["name"] = function["name"]
            if isinstance(function.get("arguments"), str):
                call["arguments"].append(function["arguments"])

    def usage(self) -> Usage | None:
        usage = _decode_usage(self._usage)
        return usage if usage.reported else None

    def complete(self) -> bool:
        return self._done or self._finish is not None

    def text(self) -> str:
        if len(self._text) > 1:  # joined once per read, not once per chunk
            self._text = ["".join(self._text)]
        return self._text[0] if self._text else ""

    def answer(self) -> Answer:
        message: dict[str, Any] = {"content": "".join(self._text)}
        if self._calls:
            message["tool_calls"] = [
                {
                    **({"id": call["id"]} if "id" in call else {}),
                    "function": {"name": call["name"], "arguments": "".join(call["arguments"])},
                }
                for _, call in sorted(self._calls.items())
            ]
        whole: dict[str, Any] = {
            "choices": [{"message": message, "finish_reason": self._finish}],
            "usage": self._usage,
        }
        if self._model:
            whole["model"] = self._model
        return decode_response(text_only(whole), requested_model=self._requested_model)

    def whole(self, data: Any) -> Answer:
        return decode_response(data, requested_model=self._requested_model)


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
        base = base_url.rstrip("/")
        is_openai = httpx.URL(base).host == "api.openai.com"
        self._max_tokens_field = "max_completion_tokens" if is_openai else "max_tokens"
        self._caller = JsonCaller(
            provider=name,
            base_url=base,
            headers={"authorization": f"Bearer {api_key}"} if api_key else {},
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
        body = encode_request(request, max_tokens_field=self._max_tokens_field)
        outcome = await self._caller.stream(
            "/chat/completions",
            body,
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
