"""Provider-neutral chat types, the :class:`Provider` protocol, and the retrying HTTP caller.

The types here are what the agent runtime speaks; each wire protocol (``openai``, ``anthropic``)
translates them to and from its own JSON and sends it through :class:`JsonCaller`, which owns the
timeout, retry and error policy shared by every HTTP provider.

Chat answers are **streamed** (server-sent events): the connection is given
``connect_timeout_secs``, the answer's first byte (its response headers) at most
``first_byte_timeout_secs`` once the request was written, and then at most ``idle_timeout_secs``
of silence between two chunks — there is no total timeout, so a slow answer that keeps arriving
is received once.

**No request is sent twice without proof that the first never ran.** A request is sent again
only when the connection failed before any of it was written (``httpx.ConnectError`` — refused,
unreachable, TLS —, ``ConnectTimeout``, ``PoolTimeout``) or when the provider answered with a
status that says it did not run it (429, 503, Anthropic's 529 "overloaded", 408 "the request
did not arrive in time"). Everything else after the request was written fails at once, with the
attempts made: silence before the first byte (``provider_timeout``, 1 attempt), a connection
cut before or during the answer, another 5xx (500, 502, 504: the provider, or a gateway's
upstream, may have run it), an unreadable answer. Such a failure is still ``retryable`` (trying
later may work): a person decides.

=============================  =========  ==========================================
answer (before it arrives)     resent?    raised when given up
=============================  =========  ==========================================
401, 403                       no         :class:`~room.errors.ProviderAuthError`
429                            yes (1)    :class:`~room.errors.ProviderRateLimitError`
408                            yes        :class:`~room.errors.ProviderTimeoutError`
no first byte in time          no         :class:`~room.errors.ProviderTimeoutError`
503, 529                       yes        :class:`~room.errors.ProviderServerError`
connection not made            yes        :class:`~room.errors.ProviderServerError`
                               (2)
other 5xx, connection cut,     no         :class:`~room.errors.ProviderServerError`
unreadable JSON or shape
other 4xx                      no         :class:`~room.errors.ProviderRequestError`
=============================  =========  ==========================================

(1) ``Retry-After`` (seconds or HTTP date) or ``retry-after-ms`` is honoured exactly; when it
asks for more than :data:`RETRY_AFTER_CAP_SECS` the caller gives up at once instead of sleeping
through a turn. Without it, waits grow exponentially with jitter.
(2) A connect error, connect timeout or pool timeout: no byte of the request was written.

While an answer arrives: silence past the idle timeout is a ``ProviderTimeoutError``; a
connection cut, an unreadable event, an ``error`` event or a stream that ends before its last
event is a ``ProviderServerError`` (an ``error`` event of kind ``rate_limit_error`` or
``overloaded_error`` keeps its meaning). Neither is retried; ``details["answer_started"]`` is true.

Every error carries ``provider``, ``status`` (``None`` when no HTTP answer arrived),
``retryable`` (the failure is transient: trying later may work), ``details["attempts"]`` (0 when
no request was sent, for example a missing key), ``details["usage"]`` when the provider reported
tokens before failing and, for 429s that named one, ``details["retry_after_secs"]``.
Messages include the provider's own error text, trimmed, with the API key scrubbed out.

A caller that needs to know what happened even when the call is abandoned (a person stops the
turn: the task is cancelled) passes a :class:`CallMeter`; the provider keeps it up to date with
the attempts made and the usage reported so far.
"""

from __future__ import annotations

import email.utils
import json
import logging
import random
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Generic, Literal, Protocol, TypeVar

import anyio
import httpx

from room import __version__
from room.errors import (
    ProviderAuthError,
    ProviderError,
    ProviderRateLimitError,
    ProviderRequestError,
    ProviderServerError,
    ProviderTimeoutError,
)

logger = logging.getLogger(__name__)

Role = Literal["system", "user", "assistant", "tool"]
Sleep = Callable[[float], Awaitable[None]]

# Normalised stop reasons. Provider-specific values without an equivalent pass through unchanged
# (for example "content_filter", "stop_sequence", "refusal").
STOP_END_TURN = "end_turn"
STOP_TOOL_USE = "tool_use"
STOP_MAX_TOKENS = "max_tokens"

RETRY_BASE_SECS = 0.5
RETRY_MAX_BACKOFF_SECS = 8.0
RETRY_AFTER_CAP_SECS = 20.0
CATALOGUE_TIMEOUT_SECS = 10.0
IDLE_TIMEOUT_SECS = 120.0  # the defaults of the server's provider_* settings
FIRST_BYTE_TIMEOUT_SECS = 120.0
CONNECT_TIMEOUT_SECS = 10.0
MAX_RETRIES = 2
ERROR_TEXT_MAX_CHARS = 300
USER_AGENT = f"project-room/{__version__}"


@dataclass(frozen=True, slots=True)
class ToolSpec:
    name: str
    description: str
    parameters: dict[str, Any]  # a JSON schema object


@dataclass(frozen=True, slots=True)
class ToolCall:
    """A tool call the model asked for.

    ``raw_arguments`` is non-empty only when the model's arguments were not a JSON object; then
    ``arguments`` is ``{}`` and the runtime reports the problem back to the model.
    """

    id: str
    name: str
    arguments: dict[str, Any]
    raw_arguments: str = ""


@dataclass(frozen=True, slots=True)
class ChatMessage:
    role: Role
    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None  # required for role "tool"
    name: str | None = None  # sender (user) or tool name (tool); not sent: senders go in content

    def __post_init__(self) -> None:
        if self.role == "tool" and not self.tool_call_id:
            raise ValueError("a tool message needs the tool_call_id it answers")
        if self.tool_calls and self.role != "assistant":
            raise ValueError("only assistant messages carry tool calls")


@dataclass(frozen=True, slots=True)
class ChatRequest:
    model: str  # the part after "provider/"
    messages: tuple[ChatMessage, ...]
    tools: tuple[ToolSpec, ...] = ()
    max_tokens: int = 2048
    temperature: float | None = None


@dataclass(frozen=True, slots=True)
class Usage:
    """Tokens the provider reported. ``reported=False`` means it reported none (counts are 0)."""

    input_tokens: int
    output_tokens: int
    reported: bool = True


@dataclass(frozen=True, slots=True)
class ChatResult:
    text: str
    tool_calls: tuple[ToolCall, ...]
    usage: Usage
    provider: str  # configured provider name
    model: str  # as reported by the provider's answer
    latency_ms: float  # of the attempt that answered
    stop_reason: str  # STOP_* when there is an equivalent, else the provider's value
    attempts: int


def _no_text() -> str:
    return ""


@dataclass(slots=True)
class CallMeter:
    """What one ``chat`` call has done so far, kept up to date by the provider as it goes, so
    that a failed or abandoned call can be recorded honestly: the HTTP requests sent
    (``attempts``), whether an answer had started to arrive, and the usage the provider had
    reported (``None``: none yet).

    It also lets the caller follow a streamed answer: ``text()`` is the answer's text so far
    (joined only when asked), and ``on_progress``, when given, is called after each event that
    arrived (it must be cheap and must not raise: it runs inside the read loop)."""

    attempts: int = 0
    answer_started: bool = False
    usage: Usage | None = None
    on_progress: Callable[[], None] | None = None
    text: Callable[[], str] = _no_text


class Provider(Protocol):
    name: str  # configured provider name: "openai", "deepseek", "local", "anthropic", "builtin"
    kind: str  # "openai" | "anthropic" | "echo"
    offline: bool  # True only for builtin echo

    async def chat(self, request: ChatRequest, meter: CallMeter | None = None) -> ChatResult: ...

    async def catalogue(self) -> list[str]: ...

    async def aclose(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Answer:
    """A decoded chat answer, before the caller adds provider, latency and attempts."""

    text: str
    tool_calls: tuple[ToolCall, ...]
    usage: Usage
    model: str
    stop_reason: str


class UnreadableAnswerError(Exception):
    """A 2xx answer whose JSON does not have the expected shape (raised by decoders)."""


class StreamErrorEvent(Exception):
    """The provider said, inside a streamed answer, that it failed (an ``error`` event)."""

    def __init__(self, message: str, kind: str = "") -> None:
        super().__init__(message)
        self.kind = kind


class StreamDecoder(Protocol):
    """Builds one answer from a stream of server-sent events (one per wire protocol)."""

    def feed(self, event: str, data: str) -> None:
        """One event; raises :class:`UnreadableAnswerError` or :class:`StreamErrorEvent`."""

    def usage(self) -> Usage | None:
        """The usage reported so far (``None``: none yet)."""

    def complete(self) -> bool:
        """Whether the stream's last event has arrived."""

    def text(self) -> str:
        """The answer's text so far (what a person may be shown while it streams)."""

    def answer(self) -> Answer:
        """The answer the events built."""

    def whole(self, data: Any) -> Answer:
        """A server that ignored ``stream`` and answered with one JSON body."""


@dataclass(frozen=True, slots=True)
class SseEvent:
    event: str  # "message" when the stream named none
    data: str


class SseParser:
    """Server-sent events from lines (the line ending already removed); pure."""

    def __init__(self) -> None:
        self._event = ""
        self._data: list[str] = []

    def feed(self, line: str) -> SseEvent | None:
        if not line:
            if not self._data:
                self._event = ""
                return None
            event = SseEvent(self._event or "message", "\n".join(self._data))
            self._event, self._data = "", []
            return event
        if line.startswith(":"):
            return None  # a comment (keep-alive)
        field, _, value = line.partition(":")
        value = value.removeprefix(" ")
        if field == "event":
            self._event = value
        elif field == "data":
            self._data.append(value)
        return None

    def flush(self) -> SseEvent | None:
        """The last event when the stream ended without its blank line."""
        return self.feed("")


T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Outcome(Generic[T]):
    value: T
    attempts: int
    latency_ms: float


_SURROGATE = re.compile("[\ud800-\udfff]")


def text_only(value: Any) -> Any:
    """JSON as a model sent it, with every lone surrogate (a ``"\\ud800"`` escape: no text, so
    no message, database row, file name or tool result can hold it) replaced by U+FFFD."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            # A pair of escapes (``"\ud83d\ude00"``, or its halves in two streamed chunks) is
            # one character; only what is left alone becomes U+FFFD.
            joined = value.encode("utf-16", "surrogatepass").decode("utf-16", "surrogatepass")
            return _SURROGATE.sub("\ufffd", joined)
        return value
    if isinstance(value, dict):
        return {text_only(k): text_only(v) for k, v in value.items()}
    if isinstance(value, list):
        return [text_only(v) for v in value]
    return value


def parse_arguments(raw: Any) -> tuple[dict[str, Any], str]:
    """Tool-call arguments as ``(object, raw)``; ``raw`` is kept only when they are unusable."""
    if isinstance(raw, dict):
        return raw, ""
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}, ""
    text = raw if isinstance(raw, str) else json.dumps(raw, ensure_ascii=False)
    try:
        value = text_only(json.loads(text))
    except ValueError:
        return {}, text
    if isinstance(value, dict):
        return value, ""
    return {}, text


def backoff_delay(attempt: int, jitter: float) -> float:
    """Seconds to wait after failed ``attempt`` (1-based); ``jitter`` in [0, 1) spreads clients."""
    ceiling = min(RETRY_MAX_BACKOFF_SECS, RETRY_BASE_SECS * 2.0 ** (attempt - 1))
    return ceiling / 2 + ceiling / 2 * jitter


def parse_retry_after(headers: Mapping[str, str], now: datetime) -> float | None:
    """Seconds asked for by ``retry-after-ms`` or ``Retry-After`` (seconds or HTTP date)."""
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            return max(0.0, float(millis) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - now).total_seconds())


def error_text(response: httpx.Response) -> str:
    """The provider's own error message (both protocols nest it as ``error.message``)."""
    try:
        body = response.json()
    except ValueError:
        return response.text.strip()[:ERROR_TEXT_MAX_CHARS]
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            return str(err["message"])[:ERROR_TEXT_MAX_CHARS]
        if isinstance(err, str):
            return err[:ERROR_TEXT_MAX_CHARS]
        if isinstance(body.get("message"), str):
            return str(body["message"])[:ERROR_TEXT_MAX_CHARS]
    return response.text.strip()[:ERROR_TEXT_MAX_CHARS]


@dataclass(frozen=True, slots=True)
class _Failure:
    error_type: type[ProviderError]
    status: int | None
    summary: str
    retryable: bool
    retry_after: float | None = None
    started: bool = False  # the answer had started to arrive: never retried
    usage: Usage | None = None
    unsent: bool = False  # proof the provider never ran it (not connected, 429/503): resent


# Statuses that say the provider did not run the request, so it may be sent again: rate limited,
# unavailable / overloaded (Anthropic's 529), and 408 (the request did not arrive in time).
NOT_RUN_STATUSES = frozenset({408, 429, 503, 529})
# Failures before any byte of the request was written: no connection was made.
_UNSENT_ERRORS = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)

_STREAM_ERROR_KINDS: dict[str, type[ProviderError]] = {
    "rate_limit_error": ProviderRateLimitError,
    "overloaded_error": ProviderServerError,
    "api_error": ProviderServerError,
    "timeout_error": ProviderTimeoutError,
    "authentication_error": ProviderAuthError,
    "permission_error": ProviderAuthError,
    "invalid_request_error": ProviderRequestError,
}


class JsonCaller:
    """JSON over HTTP for one provider, with its timeout, retry and error policy (see the
    module's docstring). Internal to ``room.providers``; the ``transport`` is injected so tests
    can swap it."""

    def __init__(
        self,
        *,
        provider: str,
        base_url: str,
        headers: Mapping[str, str],
        secret: str | None,
        idle_timeout_secs: float,
        connect_timeout_secs: float,
        max_retries: int,
        transport: httpx.AsyncBaseTransport | None,
        sleep: Sleep,
        rng: random.Random | None = None,
        first_byte_timeout_secs: float = FIRST_BYTE_TIMEOUT_SECS,
    ) -> None:
        self.provider = provider
        self._secret = secret
        self._idle_secs = idle_timeout_secs
        self._first_byte_secs = first_byte_timeout_secs
        self._max_retries = max_retries
        self._sleep = sleep
        self._rng = rng or random.Random()
        # No total timeout: ``read`` bounds the silence between two chunks of an answer.
        self._timeout = httpx.Timeout(
            connect=connect_timeout_secs,
            read=idle_timeout_secs,
            write=idle_timeout_secs,
            pool=connect_timeout_secs,
        )
        # A streamed request waits for its first byte (the response headers) with this read
        # timeout; once they arrived the idle timeout takes over (see _stream_attempt).
        self._first_byte_timeout = httpx.Timeout(
            connect=connect_timeout_secs,
            read=first_byte_timeout_secs,
            write=idle_timeout_secs,
            pool=connect_timeout_secs,
        )
        self._client = httpx.AsyncClient(
            base_url=base_url,
            headers={"user-agent": USER_AGENT, **headers},
            timeout=self._timeout,
            transport=transport,
            follow_redirects=False,
        )

    async def aclose(self) -> None:
        await self._client.aclose()

    async def call(
        self,
        method: str,
        path: str,
        decode: Callable[[Any], T],
        *,
        body: Any = None,
        params: Mapping[str, str] | None = None,
        max_retries: int | None = None,
        timeout_secs: float | None = None,
    ) -> Outcome[T]:
        """One JSON request and its whole answer, within ``timeout_secs`` in total (for short
        calls such as the catalogue)."""
        limit = self._idle_secs if timeout_secs is None else timeout_secs

        async def attempt() -> tuple[T] | _Failure:
            return await self._attempt(method, path, decode, body, params, limit)

        return await self._retrying(attempt, max_retries, CallMeter())

    async def stream(
        self, path: str, body: Any, decoder: Callable[[], StreamDecoder], meter: CallMeter
    ) -> Outcome[Answer]:
        """POST ``body`` and read the answer as server-sent events, with the idle timeout between
        chunks; ``meter`` follows the attempts and the usage reported so far."""

        async def attempt() -> tuple[Answer] | _Failure:
            return await self._stream_attempt(path, body, decoder(), meter)

        return await self._retrying(attempt, None, meter)

    async def _retrying(
        self,
        attempt_once: Callable[[], Awaitable[tuple[T] | _Failure]],
        max_retries: int | None,
        meter: CallMeter,
    ) -> Outcome[T]:
        retries = self._max_retries if max_retries is None else max_retries
        attempt = 0
        while True:
            attempt += 1
            meter.attempts = attempt
            started = time.perf_counter()
            result = await attempt_once()
            if not isinstance(result, _Failure):
                latency_ms = (time.perf_counter() - started) * 1000
                return Outcome(value=result[0], attempts=attempt, latency_ms=latency_ms)
            failure = result
            if failure.started or not failure.unsent or attempt > retries:
                # Only a request the provider provably never ran is sent again.
                raise self._error(failure, attempt)
            if failure.retry_after is not None:
                if failure.retry_after > RETRY_AFTER_CAP_SECS:
                    raise self._error(failure, attempt)
                delay = failure.retry_after
            else:
                delay = backoff_delay(attempt, self._rng.random())
            logger.warning(
                "provider %s: %s (attempt %d of %d), retrying in %.2fs",
                self.provider,
                failure.summary,
                attempt,
                retries + 1,
                delay,
            )
            await self._sleep(delay)

    async def _attempt(
        self,
        method: str,
        path: str,
        decode: Callable[[Any], T],
        body: Any,
        params: Mapping[str, str] | None,
        limit_secs: float,
    ) -> tuple[T] | _Failure:
        try:
            with anyio.fail_after(limit_secs):
                response = await self._client.request(
                    method, path, json=body, params=params, timeout=limit_secs
                )
        except _UNSENT_ERRORS as exc:
            return _Failure(
                ProviderServerError, None, f"connection failed: {exc}", True, unsent=True
            )
        except (httpx.TimeoutException, TimeoutError):
            return _Failure(ProviderTimeoutError, None, f"no answer within {limit_secs:g}s", True)
        except httpx.TransportError as exc:
            return _Failure(ProviderServerError, None, f"connection failed: {exc}", True)
        except httpx.RequestError as exc:  # for example a body that fails to decompress
            return _Failure(ProviderServerError, None, f"unreadable answer: {exc}", True)
        status = response.status_code
        if 200 <= status < 300:
            try:
                return (decode(text_only(response.json())),)
            except (ValueError, UnreadableAnswerError) as exc:
                reason = str(exc) if isinstance(exc, UnreadableAnswerError) else "invalid JSON"
                return _Failure(ProviderServerError, status, f"unreadable answer: {reason}", True)
        return self._refused(response)

    async def _stream_attempt(
        self, path: str, body: Any, decoder: StreamDecoder, meter: CallMeter
    ) -> tuple[Answer] | _Failure:
        status: int | None = None
        started = False

        def cut(error_type: type[ProviderError], summary: str) -> _Failure:
            # Once the answer has started nothing is retried; the usage so far goes with it.
            return _Failure(error_type, status, summary, True, started=started, usage=meter.usage)

        try:
            async with self._client.stream(
                "POST", path, json=body, timeout=self._first_byte_timeout
            ) as response:
                # The first byte arrived: from here on the idle timeout bounds each read of the
                # answer (httpcore reads the request's timeouts when the body is first read).
                timeouts = response.request.extensions.get("timeout")
                if isinstance(timeouts, dict):
                    timeouts["read"] = self._idle_secs
                status = response.status_code
                if not 200 <= status < 300:
                    await response.aread()
                    return self._refused(response)
                if "text/event-stream" not in response.headers.get("content-type", ""):
                    # A server that ignored ``stream``: its one JSON body is the answer (and a
                    # body that is none, such as a gateway's page, is no answer: retried).
                    try:
                        answer = decoder.whole(text_only(json.loads(await response.aread())))
                    except (ValueError, UnreadableAnswerError) as exc:
                        reason = str(exc) if isinstance(exc, UnreadableAnswerError) else "not JSON"
                        return _Failure(
                            ProviderServerError, status, f"unreadable answer: {reason}", True
                        )
                    meter.answer_started = True
                    meter.usage = answer.usage if answer.usage.reported else None
                    return (answer,)
                started = meter.answer_started = True
                meter.text = decoder.text
                parser = SseParser()
                async for line in response.aiter_lines():
                    event = parser.feed(line)
                    if event is not None:
                        decoder.feed(event.event, event.data)
                        meter.usage = decoder.usage()
                        if meter.on_progress is not None:
                            meter.on_progress()
                last = parser.flush()
                if last is not None:
                    decoder.feed(last.event, last.data)
                    meter.usage = decoder.usage()
                if not decoder.complete():
                    return cut(ProviderServerError, "the answer ended before its last event")
                return (decoder.answer(),)
        except _UNSENT_ERRORS as exc:
            return _Failure(
                ProviderServerError, None, f"connection failed: {exc}", True, unsent=True
            )
        except (httpx.TimeoutException, TimeoutError):
            if started:
                return cut(
                    ProviderTimeoutError, f"the answer stopped: no data for {self._idle_secs:g}s"
                )
            if status is None:
                # The request was written and nothing came back: it may be running; not resent.
                return _Failure(
                    ProviderTimeoutError,
                    None,
                    f"no first byte of the answer within {self._first_byte_secs:g}s after the "
                    "request was sent (not sent again: the provider may be running it)",
                    True,
                )
            return _Failure(
                ProviderTimeoutError, status, f"no answer within {self._idle_secs:g}s", True
            )
        except StreamErrorEvent as exc:
            error_type = _STREAM_ERROR_KINDS.get(exc.kind, ProviderServerError)
            return cut(error_type, f"the provider failed while answering: {exc}")
        except (ValueError, UnreadableAnswerError) as exc:
            reason = str(exc) if isinstance(exc, UnreadableAnswerError) else "invalid JSON"
            return cut(ProviderServerError, f"unreadable answer: {reason}")
        except httpx.TransportError as exc:
            if started:
                return cut(ProviderServerError, f"the answer was cut off: {exc}")
            # Connected and (at least partly) written: the provider may have the request.
            return _Failure(ProviderServerError, status, f"connection lost: {exc}", True)
        except httpx.RequestError as exc:
            return cut(ProviderServerError, f"unreadable answer: {exc}")

    def _refused(self, response: httpx.Response) -> _Failure:
        status = response.status_code
        text = self._scrub(error_text(response))
        if status in (401, 403):
            return _Failure(ProviderAuthError, status, f"credentials refused: {text}", False)
        unsent = status in NOT_RUN_STATUSES
        if status == 429:
            retry_after = parse_retry_after(response.headers, datetime.now(UTC))
            return _Failure(
                ProviderRateLimitError,
                status,
                f"rate limited: {text}",
                True,
                retry_after,
                unsent=True,
            )
        if status == 408:
            return _Failure(
                ProviderTimeoutError, status, f"request timeout: {text}", True, unsent=True
            )
        if status >= 500:
            return _Failure(
                ProviderServerError, status, f"server error: {text}", True, unsent=unsent
            )
        return _Failure(ProviderRequestError, status, f"request rejected: {text}", False)

    def _scrub(self, text: str) -> str:
        if self._secret:
            text = text.replace(self._secret, "***")
        return text

    def _error(self, failure: _Failure, attempts: int) -> ProviderError:
        extra: dict[str, Any] = {}
        if failure.retry_after is not None:
            extra["retry_after_secs"] = failure.retry_after
        if failure.started:
            extra["answer_started"] = True
        if failure.usage is not None:
            extra["usage"] = {
                "input_tokens": failure.usage.input_tokens,
                "output_tokens": failure.usage.output_tokens,
            }
        where = f"HTTP {failure.status}" if failure.status is not None else "no HTTP answer"
        tries = "1 attempt" if attempts == 1 else f"{attempts} attempts"
        message = f"{self.provider}: {failure.summary} ({where}, {tries})"
        return failure.error_type(
            self._scrub(message),
            provider=self.provider,
            status=failure.status,
            retryable=failure.retryable,
            attempts=attempts,
            **extra,
        )


def missing_key_error(provider: str, key_env: str | None) -> ProviderAuthError:
    hint = f"set {key_env}" if key_env else "configure api_key"
    return ProviderAuthError(
        f"{provider}: no API key ({hint})",
        provider=provider,
        status=None,
        retryable=False,
        attempts=0,
        reason="missing_key",
    )


def log_route(result: ChatResult) -> None:
    """Log the route a real request observed (never message bodies or keys)."""
    logger.info(
        "provider=%s model=%s latency_ms=%.0f tokens_in=%d tokens_out=%d attempts=%d%s",
        result.provider,
        result.model,
        result.latency_ms,
        result.usage.input_tokens,
        result.usage.output_tokens,
        result.attempts,
        "" if result.usage.reported else " usage=unreported",
    )
