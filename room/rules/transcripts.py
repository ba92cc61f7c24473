"""An agent session's transcript as turns (pure): what each earlier turn was asked, the tool
calls it made with the results the model read, and its final answer; and the one-line digest
of a tool call that summaries and checkpoints share. No I/O."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

DIGEST_ARGS_CHARS = 80
DIGEST_RESULT_CHARS = 120


@dataclass(frozen=True, slots=True)
class ToolStep:
    """One tool call of a turn and the result the model read."""

    name: str
    arguments: str  # compact JSON, keys sorted
    result: str


@dataclass(frozen=True, slots=True)
class TurnRecord:
    """One turn of a member, from its transcript."""

    turn_id: int
    prompts: tuple[str, ...]
    tools: tuple[ToolStep, ...]
    answer: str | None


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, the cut marked with an ellipsis."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def first_line(text: str, limit: int) -> str:
    """The first non-blank line of ``text`` within ``limit``; an ellipsis says there is more."""
    stripped = text.strip()
    line = stripped.splitlines()[0] if stripped else ""
    if len(line) > limit:
        return clip(line, limit)
    return line + ("…" if len(stripped) > len(line) else "")


def arguments_text(arguments: object) -> str:
    return json.dumps(arguments, ensure_ascii=False, sort_keys=True)


def tool_digest(step: ToolStep) -> str:
    """``name {args head} ⇒ first line of the result``: deterministic, one line."""
    return (
        f"{step.name} {clip(step.arguments, DIGEST_ARGS_CHARS)}"
        f" ⇒ {first_line(step.result, DIGEST_RESULT_CHARS) or '（空）'}"
    )


def turn_records(
    entries: Sequence[Mapping[str, object]], skip_turn: int | None = None
) -> list[TurnRecord]:
    """Group transcript rows (``room.store.turns.transcript``, oldest first) into turns, leaving
    out ``skip_turn`` (the one running now) and rows of no turn."""
    order: list[int] = []
    prompts: dict[int, list[str]] = {}
    tools: dict[int, list[ToolStep]] = {}
    answers: dict[int, str] = {}
    calls: dict[str, tuple[str, str]] = {}
    for entry in entries:
        turn_id = entry.get("turn_id")
        if not isinstance(turn_id, int) or turn_id == skip_turn:
            continue
        if turn_id not in prompts:
            order.append(turn_id)
            prompts[turn_id], tools[turn_id] = [], []
        role, content = entry.get("role"), str(entry.get("content") or "")
        requested = entry.get("tool_calls")
        if role == "user":
            prompts[turn_id].append(content)
        elif role == "assistant" and isinstance(requested, list) and requested:
            for call in requested:
                if isinstance(call, Mapping):
                    name, args = str(call.get("name")), arguments_text(call.get("arguments", {}))
                    calls[str(call.get("id"))] = (name, args)
        elif role == "assistant":
            answers[turn_id] = content
        elif role == "tool":
            name, args = calls.pop(str(entry.get("tool_call_id")), ("?", "{}"))
            tools[turn_id].append(ToolStep(name, args, content))
    return [
        TurnRecord(t, tuple(prompts[t]), tuple(tools[t]), answers.get(t))
        for t in order
        if prompts[t] or tools[t] or t in answers
    ]
