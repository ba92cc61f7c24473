"""Real local HTTP servers that speak the OpenAI and Anthropic wire protocols, for tests.

Each server runs ``http.server.ThreadingHTTPServer`` in a background thread on an ephemeral
127.0.0.1 port, so it works from any event loop (or none)::

    with OpenAIServer(
        script=[openai_tool_call("room_send", {"text": "x"}), openai_text("done")],
        api_key="sk-test",
    ) as srv:
        provider = OpenAIProvider(name="openai", base_url=srv.base_url, api_key="sk-test")
        ...
        assert srv.chat_requests[1]["messages"][-1]["role"] == "tool"

The *script* drives the chat endpoint: either a sequence consumed one reply per chat request
(an item may also be a callable ``(request_json) -> Reply``, called once), or a single callable
called for every chat request. When a sequence runs out the server answers 500 "script
exhausted". The model list is served from ``models`` (or a :class:`Reply`, to make it fail).

Every request is recorded (:attr:`LLMServer.requests`: method, path, lower-cased headers, body,
parsed JSON). With ``api_key`` set, any request without that key gets 401 (and is recorded).
With ``validate=True`` (the default) a chat request that breaks the protocol's shape rules — the
rules the real APIs enforce with a 400 — gets a 400 naming the rule, so a provider bug cannot pass
just because the fake server was lenient; every chat body is also checked against the official
SDK's request type (``tests.support.sdk_types``).

A chat request with ``"stream": true`` is answered as the real API streams: a 200 reply's body
(a whole completion or message, as the builders below make) is sent as server-sent events —
OpenAI chunks ending in ``data: [DONE]`` (with a usage chunk only when the request asked for it
with ``stream_options.include_usage``), or Anthropic's ``message_start`` … ``message_stop``.
``Reply.chunk_delay_secs`` spaces the events; ``stall_after=N`` sends N events and then nothing
(until the server closes); ``cut_after=N`` sends N events and closes the connection;
``events`` replaces the derived events (``(event name or None, JSON or "[DONE]")``).
"""

from __future__ import annotations

import collections
import json
import socket
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar, Self

from tests.support.sdk_types import request_problem

TEST_API_KEY = "sk-room-test"  # what the local provider servers of the tests accept

__all__ = [
    "AnthropicServer",
    "LLMServer",
    "OpenAIServer",
    "RecordedRequest",
    "RecordedSleeps",
    "Reply",
    "anthropic_events",
    "anthropic_text",
    "anthropic_tool_use",
    "anthropic_tool_uses",
    "closed_port_url",
    "error",
    "openai_events",
    "openai_text",
    "openai_tool_call",
    "openai_tool_calls",
    "raw",
]


@dataclass(frozen=True)
class Reply:
    """One canned HTTP answer. ``body`` is JSON-serialisable, or ``bytes`` sent verbatim."""

    status: int = 200
    body: Any = None
    headers: Mapping[str, str] = field(default_factory=dict)
    delay_secs: float = 0.0  # before the answer's headers
    chunk_delay_secs: float = 0.0  # between two streamed events
    stall_after: int | None = None  # streamed events sent before falling silent
    cut_after: int | None = None  # streamed events sent before the connection is closed
    events: Sequence[tuple[str | None, Any]] | None = None  # streamed events, as they are


@dataclass(frozen=True)
class RecordedRequest:
    method: str
    path: str  # with the query string
    headers: Mapping[str, str]  # names lower-cased
    body: bytes
    json: Any  # None when the body is empty or not JSON


Responder = Callable[[Any], Reply]
Script = Sequence[Reply | Responder] | Responder


# ---------------------------------------------------------------------------------------------
# Reply builders


def error(
    status: int,
    message: str = "test server error",
    *,
    retry_after: float | None = None,
    headers: Mapping[str, str] | None = None,
    delay_secs: float = 0.0,
) -> Reply:
    """An error in the shape both protocols share (``error.message``)."""
    all_headers = dict(headers or {})
    if retry_after is not None:
        all_headers["retry-after"] = f"{retry_after:g}"
    body = {"type": "error", "error": {"type": f"http_{status}", "message": message}}
    return Reply(status, body, all_headers, delay_secs)


def raw(status: int, data: bytes, *, headers: Mapping[str, str] | None = None) -> Reply:
    """Bytes sent as they are, for unreadable answers."""
    return Reply(status, data, dict(headers or {}))


def openai_tool_calls(
    calls: Sequence[tuple[str, str, Mapping[str, Any] | str]],
    *,
    text: str | None = None,
    model: str = "gpt-test",
    prompt_tokens: int | None = 11,
    completion_tokens: int | None = 7,
    finish_reason: str = "tool_calls",
    delay_secs: float = 0.0,
) -> Reply:
    """A chat completion asking for ``calls``: ``(id, name, arguments)``; a ``str`` is sent raw."""
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        message["tool_calls"] = [
            {
                "id": call_id,
                "type": "function",
                "function": {
                    "name": name,
                    "arguments": args if isinstance(args, str) else json.dumps(dict(args)),
                },
            }
            for call_id, name, args in calls
        ]
    body: dict[str, Any] = {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
    }
    if prompt_tokens is not None and completion_tokens is not None:
        body["usage"] = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }
    return Reply(200, body, {}, delay_secs)


def openai_text(
    text: str,
    *,
    model: str = "gpt-test",
    prompt_tokens: int | None = 11,
    completion_tokens: int | None = 7,
    finish_reason: str = "stop",
    delay_secs: float = 0.0,
) -> Reply:
    """A plain text chat completion; ``prompt_tokens=None`` leaves ``usage`` out."""
    return openai_tool_calls(
        [],
        text=text,
        model=model,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        finish_reason=finish_reason,
        delay_secs=delay_secs,
    )


def openai_tool_call(
    name: str,
    arguments: Mapping[str, Any] | str,
    *,
    call_id: str = "call_1",
    text: str | None = None,
    model: str = "gpt-test",
    prompt_tokens: int | None = 11,
    completion_tokens: int | None = 7,
) -> Reply:
    return openai_tool_calls(
        [(call_id, name, arguments)],
        text=text,
        model=model,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
    )


def anthropic_tool_uses(
    calls: Sequence[tuple[str, str, Mapping[str, Any]]],
    *,
    text: str | None = None,
    model: str = "claude-test",
    input_tokens: int | None = 13,
    output_tokens: int | None = 5,
    stop_reason: str = "tool_use",
    delay_secs: float = 0.0,
) -> Reply:
    """A Messages answer: optional text, then ``tool_use`` blocks for ``(id, name, input)``."""
    content: list[dict[str, Any]] = []
    if text:
        content.append({"type": "text", "text": text})
    content.extend(
        {"type": "tool_use", "id": tool_id, "name": name, "input": dict(tool_input)}
        for tool_id, name, tool_input in calls
    )
    body: dict[str, Any] = {
        "id": "msg_test",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
    }
    if input_tokens is not None and output_tokens is not None:
        body["usage"] = {"input_tokens": input_tokens, "output_tokens": output_tokens}
    return Reply(200, body, {}, delay_secs)


def anthropic_text(
    text: str,
    *,
    model: str = "claude-test",
    input_tokens: int | None = 13,
    output_tokens: int | None = 5,
    stop_reason: str = "end_turn",
    delay_secs: float = 0.0,
) -> Reply:
    return anthropic_tool_uses(
        [],
        text=text,
        model=model,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        stop_reason=stop_reason,
        delay_secs=delay_secs,
    )


def anthropic_tool_use(
    name: str,
    tool_input: Mapping[str, Any],
    *,
    tool_id: str = "toolu_1",
    text: str | None = None,
    model: str = "claude-test",
    input_tokens: int | None = 13,
    output_tokens: int | None = 5,
) -> Reply:
    return anthropic_tool_uses(
        [(tool_id, name, tool_input)],
        text=text,
        model=model,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
    )


def closed_port_url() -> str:
    """``http://127.0.0.1:<port>`` where nothing listens (the port was just released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


class RecordedSleeps:
    """An injectable ``sleep`` that records the delays asked for and returns at once."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, delay: float) -> None:
        self.delays.append(delay)


# ---------------------------------------------------------------------------------------------
# The servers


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    owner: LLMServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client that hung up (for example after its own timeout) is not a test failure


class _Handler(BaseHTTPRequestHandler):
    server: _HTTPServer

    def do_GET(self) -> None:
        self._handle()

    def do_POST(self) -> None:
        self._handle()

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _handle(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else b""
        try:
            parsed = json.loads(body) if body else None
        except ValueError:
            parsed = None
        request = RecordedRequest(
            method=self.command,
            path=self.path,
            headers={k.lower(): v for k, v in self.headers.items()},
            body=body,
            json=parsed,
        )
        owner = self.server.owner
        reply = owner._dispatch(request)
        if reply.delay_secs and owner._stopping.wait(reply.delay_secs):
            return  # closing: drop the answer
        streamed = isinstance(parsed, dict) and parsed.get("stream") is True
        if streamed and reply.status == 200 and not isinstance(reply.body, bytes):
            assert isinstance(parsed, dict)
            self._stream(owner, reply, parsed)
            return
        payload = reply.body if isinstance(reply.body, bytes) else json.dumps(reply.body).encode()
        try:
            self.send_response(reply.status)
            if "content-type" not in {k.lower() for k in reply.headers}:
                self.send_header("content-type", "application/json")
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.send_header("content-length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _stream(self, owner: LLMServer, reply: Reply, request: dict[str, Any]) -> None:
        events = reply.events if reply.events is not None else owner._events(reply.body, request)
        try:
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("cache-control", "no-cache")
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.end_headers()  # HTTP/1.0 without a length: the body ends when we close
            self.wfile.flush()
            for sent, (event_name, data) in enumerate(events):
                if reply.stall_after is not None and sent >= reply.stall_after:
                    owner._stopping.wait()  # silent until the server closes
                    return
                if reply.cut_after is not None and sent >= reply.cut_after:
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if sent and reply.chunk_delay_secs and owner._stopping.wait(reply.chunk_delay_secs):
                    return
                text = data if isinstance(data, str) else json.dumps(data)  # \u escapes: any text
                frame = (f"event: {event_name}\n" if event_name else "") + f"data: {text}\n\n"
                self.wfile.write(frame.encode())
                self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, OSError):
            pass


def _pieces(text: str, size: int = 4, most: int = 32) -> list[str]:
    """``text`` in pieces of ``size`` characters, or longer ones when that would make more than
    ``most`` (a 10 MB argument is streamed in a few large chunks, not a million small ones)."""
    size = max(size, -(-len(text) // most))
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def openai_events(body: Mapping[str, Any], *, include_usage: bool) -> list[tuple[None, Any]]:
    """A chat completion as the chunks the real API streams for it."""
    base = {
        "id": body.get("id", "chatcmpl-test"),
        "object": "chat.completion.chunk",
        "created": 0,
        "model": body.get("model", "gpt-test"),
    }
    choice = body["choices"][0]
    message = choice["message"]

    def chunk(delta: dict[str, Any], finish: str | None = None) -> tuple[None, Any]:
        return None, {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

    events = [chunk({"role": "assistant", "content": ""})]
    if message.get("content"):
        events += [chunk({"content": piece}) for piece in _pieces(message["content"])]
    for index, call in enumerate(message.get("tool_calls") or []):
        function = call["function"]
        start = {"name": function["name"], "arguments": ""}
        events.append(
            chunk(
                {
                    "tool_calls": [
                        {"index": index, "id": call["id"], "type": "function", "function": start}
                    ]
                }
            )
        )
        events += [
            chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
            for piece in _pieces(function["arguments"], 8)
        ]
    events.append(chunk({}, choice["finish_reason"]))
    if include_usage and body.get("usage"):
        events.append((None, {**base, "choices": [], "usage": body["usage"]}))
    events.append((None, "[DONE]"))
    return events


def anthropic_events(body: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """A Messages answer as the events the real API streams for it."""
    usage = body.get("usage")
    start_usage = (
        None if usage is None else {"input_tokens": usage["input_tokens"], "output_tokens": 1}
    )
    message = {
        "id": body.get("id", "msg_test"),
        "type": "message",
        "role": "assistant",
        "model": body.get("model", "claude-test"),
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        **({"usage": start_usage} if start_usage else {}),
    }
    events: list[tuple[str, Any]] = [
        ("message_start", {"type": "message_start", "message": message}),
        ("ping", {"type": "ping"}),
    ]
    for index, block in enumerate(body["content"]):
        if block["type"] == "text":
            first: dict[str, Any] = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": p} for p in _pieces(block["text"])]
        else:
            first = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            arguments = json.dumps(block["input"], ensure_ascii=False)
            deltas = [
                {"type": "input_json_delta", "partial_json": p} for p in _pieces(arguments, 8)
            ]
        events.append(
            (
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": first},
            )
        )
        events += [
            ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": d})
            for d in deltas
        ]
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}))
    delta = {
        "type": "message_delta",
        "delta": {"stop_reason": body.get("stop_reason"), "stop_sequence": None},
        **({"usage": {"output_tokens": usage["output_tokens"]}} if usage else {}),
    }
    events += [("message_delta", delta), ("message_stop", {"type": "message_stop"})]
    return events


class LLMServer:
    """Base of the protocol servers; see the module docstring."""

    chat_path: ClassVar[str]
    models_path: ClassVar[str]
    url_prefix: ClassVar[str] = ""  # what clients put after host:port in their base URL

    def __init__(
        self,
        script: Script = (),
        *,
        api_key: str | None = None,
        models: Sequence[str] | Reply = ("test-model",),
        validate: bool = True,
    ) -> None:
        self._lock = threading.Lock()
        self._responder: Responder | None = script if callable(script) else None
        self._queue: collections.deque[Reply | Responder] = collections.deque(
            () if callable(script) else script
        )
        self._api_key = api_key
        self._models = models
        self._validate = validate
        self._requests: list[RecordedRequest] = []
        self._stopping = threading.Event()
        self._server: _HTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle --------------------------------------------------------------------------

    def start(self) -> Self:
        server = _HTTPServer(("127.0.0.1", 0), _Handler)
        server.owner = self
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"{type(self).__name__}:{self.port}",
            daemon=True,
        )
        self._thread.start()
        return self

    def close(self) -> None:
        self._stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- what tests read ----------------------------------------------------------------------

    @property
    def port(self) -> int:
        assert self._server is not None, "server not started"
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def base_url(self) -> str:
        """The base URL a provider is configured with."""
        return self.url + self.url_prefix

    @property
    def requests(self) -> list[RecordedRequest]:
        with self._lock:
            return list(self._requests)

    @property
    def chat_requests(self) -> list[Any]:
        """The JSON bodies of the chat requests, in order."""
        return [r.json for r in self.requests if r.path.split("?")[0] == self.chat_path]

    @property
    def remaining(self) -> int:
        """Script replies not yet used."""
        with self._lock:
            return len(self._queue)

    def push(self, *replies: Reply | Responder) -> None:
        with self._lock:
            self._queue.extend(replies)

    # -- protocol hooks -----------------------------------------------------------------------

    def _authorised(self, headers: Mapping[str, str]) -> tuple[bool, str]:
        raise NotImplementedError

    def _models_body(self, models: Sequence[str]) -> Any:
        raise NotImplementedError

    def _problem(self, request: RecordedRequest) -> str | None:
        raise NotImplementedError

    def _events(self, body: Any, request: Mapping[str, Any]) -> Sequence[tuple[str | None, Any]]:
        raise NotImplementedError

    # -- dispatch (runs in the server's threads) ------------------------------------------------

    def _dispatch(self, request: RecordedRequest) -> Reply:
        with self._lock:
            self._requests.append(request)
        if self._api_key is not None:
            ok, given = self._authorised(request.headers)
            if not ok:
                # Echo the key we were given, as some providers do, so tests can check that it
                # never reaches our errors.
                return error(401, f"Incorrect API key provided: {given}")
        path = request.path.split("?")[0]
        if request.method == "GET" and path == self.models_path:
            if isinstance(self._models, Reply):
                return self._models
            return Reply(200, self._models_body(self._models))
        if request.method == "POST" and path == self.chat_path:
            try:
                problem = self._problem(request) if self._validate else None
            except Exception as exc:  # a shape the checks did not foresee is still a bad request
                problem = f"malformed request ({exc!r})"
            if problem is not None:
                return error(400, f"llm test server: {problem}")
            return self._next_reply(request.json)
        return error(404, f"llm test server: no endpoint for {request.method} {path}")

    def _next_reply(self, body: Any) -> Reply:
        with self._lock:
            step: Reply | Responder | None = self._responder
            if step is None:
                step = self._queue.popleft() if self._queue else None
        if step is None:
            return error(500, "llm test server: script exhausted")
        if isinstance(step, Reply):
            return step
        try:
            return step(body)
        except Exception as exc:  # surfaced to the client, which is where the test looks
            return error(500, f"llm test server: script raised {exc!r}")


class OpenAIServer(LLMServer):
    """``POST /v1/chat/completions`` and ``GET /v1/models``; ``base_url`` ends in ``/v1``."""

    chat_path = "/v1/chat/completions"
    models_path = "/v1/models"
    url_prefix = "/v1"

    def _authorised(self, headers: Mapping[str, str]) -> tuple[bool, str]:
        given = headers.get("authorization", "").removeprefix("Bearer ")
        return given == self._api_key, given

    def _models_body(self, models: Sequence[str]) -> Any:
        data = [{"id": m, "object": "model", "created": 0, "owned_by": "test"} for m in models]
        return {"object": "list", "data": data}

    def _problem(self, request: RecordedRequest) -> str | None:
        return openai_problem(request.json) or request_problem("openai", request.json)

    def _events(self, body: Any, request: Mapping[str, Any]) -> Sequence[tuple[str | None, Any]]:
        options = request.get("stream_options")
        asked = isinstance(options, dict) and options.get("include_usage") is True
        return openai_events(body, include_usage=asked)


class AnthropicServer(LLMServer):
    """``POST /v1/messages`` and ``GET /v1/models``; ``base_url`` is the bare origin."""

    chat_path = "/v1/messages"
    models_path = "/v1/models"

    def _authorised(self, headers: Mapping[str, str]) -> tuple[bool, str]:
        given = headers.get("x-api-key", "")
        return given == self._api_key, given

    def _models_body(self, models: Sequence[str]) -> Any:
        data = [
            {"type": "model", "id": m, "display_name": m, "created_at": "2025-01-01T00:00:00Z"}
            for m in models
        ]
        first, last = (models[0], models[-1]) if models else (None, None)
        return {"data": data, "has_more": False, "first_id": first, "last_id": last}

    def _problem(self, request: RecordedRequest) -> str | None:
        if request.headers.get("anthropic-version") != "2023-06-01":
            return "missing or unknown anthropic-version header"
        return anthropic_problem(request.json) or request_problem("anthropic", request.json)

    def _events(self, body: Any, request: Mapping[str, Any]) -> Sequence[tuple[str | None, Any]]:
        return anthropic_events(body)


# ---------------------------------------------------------------------------------------------
# Shape rules the real APIs enforce (a subset, the ones a client can get wrong)


def openai_problem(body: Any) -> str | None:
    if not isinstance(body, dict):
        return "body is not a JSON object"
    if not isinstance(body.get("model"), str) or not body["model"]:
        return "model is required"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages must be a non-empty list"
    for tool in body.get("tools", []):
        function = tool.get("function") if isinstance(tool, dict) else None
        if tool.get("type") != "function" or not isinstance(function, dict):
            return "tools[] must be {type: function, function: {...}}"
        if not isinstance(function.get("name"), str) or not isinstance(
            function.get("parameters"), dict
        ):
            return "tools[].function needs a name and a parameters object"
    pending: list[str] = []  # tool_call ids still waiting for their tool message
    for index, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else None
        if role not in ("system", "developer", "user", "assistant", "tool"):
            return f"messages[{index}].role is invalid"
        if role != "tool" and pending:
            return f"messages[{index}]: tool calls {pending} were not answered by tool messages"
        if role == "tool":
            call_id = message.get("tool_call_id")
            if call_id not in pending:
                return f"messages[{index}]: tool message answers unknown tool_call_id {call_id!r}"
            pending.remove(call_id)
            if not isinstance(message.get("content"), str):
                return f"messages[{index}]: tool content must be a string"
        elif role == "assistant" and message.get("tool_calls"):
            for call in message["tool_calls"]:
                function = call.get("function", {})
                if call.get("type") != "function" or not isinstance(call.get("id"), str):
                    return f"messages[{index}]: tool_calls[] need an id and type function"
                if not isinstance(function.get("arguments"), str):
                    return f"messages[{index}]: function.arguments must be a JSON string"
                pending.append(call["id"])
        elif not isinstance(message.get("content"), str | list):
            return f"messages[{index}]: content is required"
    return None


def anthropic_problem(body: Any) -> str | None:
    if not isinstance(body, dict):
        return "body is not a JSON object"
    if not isinstance(body.get("model"), str) or not body["model"]:
        return "model: field required"
    if not isinstance(body.get("max_tokens"), int) or body["max_tokens"] < 1:
        return "max_tokens: field required"
    if "system" in body and not isinstance(body["system"], str | list):
        return "system must be a string or a list of text blocks"
    for tool in body.get("tools", []):
        if not isinstance(tool.get("name"), str) or not isinstance(tool.get("input_schema"), dict):
            return "tools[] need a name and an input_schema object"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages: at least one message is required"
    previous_tool_uses: list[str] = []
    for index, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else None
        if role not in ("user", "assistant"):
            return f"messages.{index}.role: must be user or assistant (system goes in 'system')"
        if index and messages[index - 1].get("role") == role:
            return f"messages.{index}: roles must alternate between user and assistant"
        content = message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        if not isinstance(blocks, list) or not blocks:
            return f"messages.{index}.content: must be a non-empty string or list"
        kinds = [b.get("type") if isinstance(b, dict) else None for b in blocks]
        for block, kind in zip(blocks, kinds, strict=True):
            if kind == "text" and not str(block.get("text", "")).strip():
                return f"messages.{index}: text content blocks must contain non-whitespace text"
            if kind == "tool_use" and role != "assistant":
                return f"messages.{index}: tool_use blocks belong to assistant turns"
            if kind == "tool_result" and role != "user":
                return f"messages.{index}: tool_result blocks belong to user turns"
            if kind not in ("text", "tool_use", "tool_result", "image"):
                return f"messages.{index}: unknown content block type {kind!r}"
            if kind == "tool_use" and not isinstance(block.get("input"), dict):
                return f"messages.{index}: tool_use.input must be an object"
        results = [
            b["tool_use_id"] for b, k in zip(blocks, kinds, strict=True) if k == "tool_result"
        ]
        if results:
            unknown = [r for r in results if r not in previous_tool_uses]
            if unknown:
                return f"messages.{index}: tool_result for unknown tool_use ids {unknown}"
            first_other = next((i for i, k in enumerate(kinds) if k != "tool_result"), len(kinds))
            if any(k == "tool_result" for k in kinds[first_other:]):
                return f"messages.{index}: tool_result blocks must come first in the user turn"
        if previous_tool_uses:
            missing = [t for t in previous_tool_uses if t not in results]
            if missing:
                return f"messages.{index}: tool_use ids {missing} have no tool_result right after"
        previous_tool_uses = [
            b["id"] for b, k in zip(blocks, kinds, strict=True) if k == "tool_use"
        ]
    return None
