"""The context renderer (pure): what an agent's model request contains.

System message: the member's role charter, the room rules, the project and its members. Then the
recent timeline before the new messages, newest kept first within a token budget, as one user
message. Then the new messages, one user message each (with the sender's name), in order. The
room timeline is the shared memory: an agent's own earlier answers appear there as "(you)".

No I/O and no clock: everything comes in as arguments.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from room.providers import ChatMessage

MAX_LINE_CHARS = 2_000


@dataclass(frozen=True, slots=True)
class Person:
    member_id: int
    handle: str
    display_name: str
    role: str
    kind: str
    status: str


@dataclass(frozen=True, slots=True)
class Line:
    """One timeline message as the model sees it."""

    seq: int
    author_id: int | None
    body: str
    kind: str = "chat"
    for_agents: str = ""  # the message's words for agents only (a tool call), after the body

    @property
    def text(self) -> str:
        """What an agent reads: the body people see, then what is meant for agents."""
        return f"{self.body}\n\n{self.for_agents}" if self.for_agents else self.body


@dataclass(frozen=True, slots=True)
class ContextInput:
    project_name: str
    goal: str
    me: Person
    charter: str
    rules: str
    people: Sequence[Person]
    timeline: Sequence[Line]  # before the new messages, oldest first
    inputs: Sequence[Line]  # the delivered messages this turn takes in, oldest first
    budget_tokens: int = 6_000


def estimate_tokens(text: str) -> int:
    """A deliberately rough count: CJK characters ~1 token each, other text ~4 characters."""
    wide = sum(1 for ch in text if ord(ch) >= 0x2E80)
    return wide + (len(text) - wide + 3) // 4 + 1


def _name(people: dict[int, Person], author_id: int | None, me: Person) -> str:
    if author_id is None:
        return "系统"
    person = people.get(author_id)
    if person is None:
        return f"#{author_id}"
    label = f"@{person.handle}（{person.display_name}）"
    return f"{label}（你）" if person.member_id == me.member_id else label


def _plain_name(people: dict[int, Person], author_id: int | None) -> str:
    person = people.get(author_id) if author_id is not None else None
    return person.display_name if person else "系统"


def _clip(text: str) -> str:
    return text if len(text) <= MAX_LINE_CHARS else text[: MAX_LINE_CHARS - 1] + "…"


def system_prompt(ci: ContextInput) -> str:
    roster = "\n".join(
        f"- @{p.handle}（{p.display_name}）：{'人类' if p.kind == 'human' else 'AI'}，角色 {p.role}"
        + ("" if p.status == "active" else f"，状态 {p.status}")
        for p in ci.people
        if p.status != "left"
    )
    goal = f"\n项目目标：{ci.goal}" if ci.goal else ""
    return (
        f"你是 @{ci.me.handle}（{ci.me.display_name}），项目「{ci.project_name}」的成员。"
        f"{goal}\n\n{ci.charter}\n\n{ci.rules}\n\n项目成员：\n{roster}"
    )


def build_messages(ci: ContextInput) -> list[ChatMessage]:
    """The messages of a request, within ``budget_tokens`` (the new inputs are always kept)."""
    people = {p.member_id: p for p in ci.people}
    system = system_prompt(ci)
    inputs = [
        # The display name, not "@handle": a reply quoting its sender must not wake them back.
        ChatMessage(role="user", content=_clip(line.text), name=_plain_name(people, line.author_id))
        for line in ci.inputs
    ]
    used = estimate_tokens(system) + sum(estimate_tokens(m.content) + 8 for m in inputs)
    kept: list[str] = []
    for line in reversed(ci.timeline):
        text = f"#{line.seq} {_name(people, line.author_id, ci.me)}：{_clip(line.text)}"
        cost = estimate_tokens(text) + 2
        if used + cost > ci.budget_tokens:
            break
        kept.append(text)
        used += cost
    kept.reverse()
    messages = [ChatMessage(role="system", content=system)]
    if kept:
        messages.append(
            ChatMessage(
                role="user",
                content="（最近的时间线，仅供参考，最早的在前）\n" + "\n".join(kept),
                name="room",
            )
        )
        # Providers want alternating turns; an acknowledgement keeps the history readable.
        messages.append(ChatMessage(role="assistant", content="好的，我已了解最近的讨论。"))
    return messages + _merge_inputs(inputs)


def _merge_inputs(inputs: list[ChatMessage]) -> list[ChatMessage]:
    """Several new messages become one user turn (the last keeps its own sender name)."""
    if len(inputs) <= 1:
        return inputs
    lines = [f"{m.name}：{m.content}" for m in inputs[:-1]]
    last = inputs[-1]
    return [
        ChatMessage(role="user", content="\n".join(lines), name="room"),
        ChatMessage(role="assistant", content="（已读）"),
        last,
    ]


def steer_message(lines: Sequence[Line], people: Sequence[Person], me: Person) -> ChatMessage:
    """New messages that arrived while a turn runs, inserted at the next step boundary."""
    index = {p.member_id: p for p in people}
    text = "\n".join(f"{_name(index, line.author_id, me)}：{_clip(line.text)}" for line in lines)
    return ChatMessage(role="user", content=f"（你工作时收到的新消息）\n{text}", name="room")
