"""``builtin/echo``: the offline route, so a new server shows the whole loop without any key.

It calls no model and no network. It answers, deterministically, with a short acknowledgement
naming the sender and quoting the last user message (truncated), labelled as the offline echo.
The quote is a Markdown ``>`` line: quote lines wake nobody (shared/mentions/SPEC.md), so echoing
``@someone`` never wakes them. It reports 0/0 tokens (it used none) and never calls tools.
"""

from __future__ import annotations

from room.errors import ProviderRequestError
from room.providers.base import STOP_END_TURN, CallMeter, ChatRequest, ChatResult, Usage

ECHO_MODEL = "echo"
ECHO_LABEL = "（builtin/echo 离线回显，未调用任何模型）"
ECHO_QUOTE_MAX_CHARS = 80


def _quote(text: str) -> str:
    flat = " ".join(text.split())
    if not flat:
        return "（空消息）"
    if len(flat) > ECHO_QUOTE_MAX_CHARS:
        return flat[: ECHO_QUOTE_MAX_CHARS - 1] + "…"
    return flat


def echo_reply(request: ChatRequest) -> str:
    """The acknowledgement for ``request`` (pure)."""
    last = next((m for m in reversed(request.messages) if m.role == "user"), None)
    if last is None:
        return f"收到，但没有可回显的用户消息。\n{ECHO_LABEL}"
    sender = f" {last.name} " if last.name else "你"
    return f"收到{sender}的消息：\n> {_quote(last.content)}\n\n{ECHO_LABEL}"


class EchoProvider:
    kind = "echo"
    offline = True

    def __init__(self, *, name: str = "builtin") -> None:
        self.name = name

    async def chat(self, request: ChatRequest, meter: CallMeter | None = None) -> ChatResult:
        if request.model != ECHO_MODEL:
            raise ProviderRequestError(
                f"{self.name}: unknown model {request.model!r}; the only one is {ECHO_MODEL!r}",
                provider=self.name,
                status=None,
                retryable=False,
                attempts=0,
            )
        if meter is not None:
            meter.attempts, meter.answer_started, meter.usage = 1, True, Usage(0, 0)
        return ChatResult(
            text=echo_reply(request),
            tool_calls=(),
            usage=Usage(0, 0),
            provider=self.name,
            model=ECHO_MODEL,
            latency_ms=0.0,
            stop_reason=STOP_END_TURN,
            attempts=1,
        )

    async def catalogue(self) -> list[str]:
        return [ECHO_MODEL]

    async def aclose(self) -> None:
        return None
