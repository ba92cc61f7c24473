"""The context renderer (pure): what an agent's model request contains.

In order, within ``budget_tokens`` (the system message and the new messages are always kept):

1. the system message: the member's role charter, the room rules, the project and its members;
2. ``records``: the project's memory section, already rendered (counted first, never cut here);
3. the member's last checkpoint: its current task, and the prompt a cut-off turn left pending;
4. its own earlier turns from its transcript (tool calls and results; older ones summarised);
5. when the message to answer is a reply in a thread: the thread — its root and its newest
   replies before the new messages (the replies left out are counted in one line);
6. the recent timeline before the new messages, newest kept first (without the thread's lines);
   what does not fit is announced by one line (how many, and how to read them) instead of
   vanishing;
7. the new messages, the last one marked as the one to answer.

Every message names its sender *in the content* (the providers send no ``name``): display name,
handle and whether a person or an agent, as ``张三（zhangsan，人类）``. The handle is written
without its at-sign, so an answer quoting a sender never mentions (and wakes) them by accident.

No I/O and no clock: everything comes in as arguments.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from room.providers import ChatMessage
from room.rules.entities import Member
from room.rules.transcripts import TurnRecord, clip, first_line, tool_digest

MAX_LINE_CHARS = 2_000
TRANSCRIPT_SHARE = 3  # the own-transcript section takes at most 1/3 of what is left
FULL_TURNS = 2  # the newest turns of the transcript are shown in full, older ones summarised
FULL_ARGS_CHARS = 400
FULL_RESULT_CHARS = 1_200
CHECKPOINT_DID_LINES = 10
ANSWER_MARK = "【需要你回答】"
SENDERS_RULE = (
    "消息格式：每条消息前写着发送者「显示名（账号，人类/AI）」，#数字 是消息序号；"
    f"标有{ANSWER_MARK}的是你这一轮要回答的消息（你的最终回答会回复它）。"
    "要让某人行动时才写 @账号；转述别人的话不要加 @。"
)


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
class Checkpoint:
    """The member's current task as last recorded (``room.store.checkpoints``)."""

    turn_id: int
    phase: str  # start | step | steer | end | interrupted
    state: str  # running | completed | cancelled | failed | braked | step_limit | interrupted
    summary: str
    step: int
    did: tuple[str, ...] = ()
    next: str = ""
    blocked: str = ""
    last_tool: str = ""
    pending_tools: tuple[str, ...] = ()
    prompt: tuple[Line, ...] = ()  # the messages left unanswered when the turn was cut off


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
    budget_tokens: int = 32_000
    records: str = ""  # the project-memory section, already rendered and labelled
    transcript: Sequence[TurnRecord] = field(default_factory=tuple)  # oldest first
    checkpoint: Checkpoint | None = None
    earlier_omitted: int = 0  # timeline messages before ``timeline`` that were not even read
    # The thread the message to answer is a reply in: its root, then its replies before the new
    # messages, oldest first (empty: not in a thread); ``thread_omitted`` older replies not read.
    thread: Sequence[Line] = ()
    thread_omitted: int = 0


def person_of(member: Member) -> Person:
    return Person(
        member.id, member.handle, member.display_name, member.role, member.kind, member.status
    )


def estimate_tokens(text: str) -> int:
    """A deliberately rough count: CJK characters ~1 token each, other text ~4 characters."""
    wide = sum(1 for ch in text if ord(ch) >= 0x2E80)
    return wide + (len(text) - wide + 3) // 4 + 1


def sender_label(person: Person | None, author_id: int | None, me: Person | None = None) -> str:
    """``显示名（账号，人类|AI）``; the handle without its at-sign (quoting it mentions nobody)."""
    if author_id is None:
        return "系统"
    if person is None:
        return f"成员#{author_id}"
    kind = "人类" if person.kind == "human" else "AI"
    mine = "，就是你" if me is not None and person.member_id == me.member_id else ""
    return f"{person.display_name}（{person.handle}，{kind}{mine}）"


def render_line(line: Line, people: Mapping[int, Person], me: Person, mark: str = "") -> str:
    person = people.get(line.author_id) if line.author_id is not None else None
    # A body's further lines are indented: none of them can pose as another sender's line.
    body = clip(line.text, MAX_LINE_CHARS).replace("\n", "\n  ")
    return f"{mark}#{line.seq} {sender_label(person, line.author_id, me)}：{body}"


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
        f"{goal}\n\n{ci.charter}\n\n{ci.rules}\n{SENDERS_RULE}\n\n项目成员：\n{roster}"
    )


def build_messages(ci: ContextInput) -> list[ChatMessage]:
    """The messages of a request, within ``budget_tokens`` (the new inputs are always kept)."""
    people = {p.member_id: p for p in ci.people}
    system = system_prompt(ci)
    inputs = _input_messages(ci.inputs, people, ci.me)
    used = estimate_tokens(system) + sum(estimate_tokens(m.content) + 8 for m in inputs)
    background: list[str] = []
    if ci.records:
        background.append(ci.records)
        used += estimate_tokens(ci.records) + 8
    if ci.checkpoint is not None:
        text = render_checkpoint(ci.checkpoint, people, ci.me, [line.seq for line in ci.inputs])
        cost = estimate_tokens(text) + 8
        if used + cost <= ci.budget_tokens:
            background.append(text)
            used += cost
    if ci.transcript:
        share = max(0, ci.budget_tokens - used) // TRANSCRIPT_SHARE
        text = render_transcript(ci.transcript, share)
        if text:
            background.append(text)
            used += estimate_tokens(text) + 8
    shown: frozenset[int] = frozenset()
    if ci.thread:
        text, shown = render_thread(ci, people, ci.budget_tokens - used)
        if text:
            background.append(text)
            used += estimate_tokens(text) + 8
    timeline = render_timeline(ci, people, ci.budget_tokens - used, shown)
    if timeline:
        background.append(timeline)
    messages = [ChatMessage(role="system", content=system)]
    for text in background:
        messages.append(ChatMessage(role="user", content=text, name="room"))
    if background:
        # Providers want alternating turns; an acknowledgement keeps the history readable.
        messages.append(ChatMessage(role="assistant", content="好的，我已了解以上背景。"))
    return messages + _merge_inputs(inputs)


THREAD_HEADER = "（这一轮要回答的消息在一个话题里；话题的第一条和最近的回复，最早的在前）"


def render_thread(
    ci: ContextInput, people: Mapping[int, Person], room: int
) -> tuple[str, frozenset[int]]:
    """The thread of the message to answer within ``room`` tokens: its root (when it fits) and
    its newest replies; the replies left out counted in one line. Returns the text and the seqs
    it shows (the timeline leaves them out)."""
    if not ci.thread:
        return "", frozenset()
    root, replies = ci.thread[0], ci.thread[1:]
    used = estimate_tokens(THREAD_HEADER) + 30  # the announcement line's share
    head = render_line(root, people, ci.me)
    if used + estimate_tokens(head) + 2 > room:
        return "", frozenset()
    used += estimate_tokens(head) + 2
    kept: list[Line] = []
    for line in reversed(replies):
        cost = estimate_tokens(render_line(line, people, ci.me)) + 2
        if used + cost > room:
            break
        kept.append(line)
        used += cost
    kept.reverse()
    lines = [THREAD_HEADER, head]
    left_out = len(replies) - len(kept) + ci.thread_omitted
    if left_out:
        lines.append(f"（话题中更早的 {left_out} 条回复未放入上下文）")
    lines += [render_line(line, people, ci.me) for line in kept]
    return "\n".join(lines), frozenset([root.seq, *(line.seq for line in kept)])


def render_timeline(
    ci: ContextInput,
    people: Mapping[int, Person],
    room: int,
    shown: frozenset[int] = frozenset(),
) -> str:
    """The newest timeline lines that fit in ``room`` tokens (but those the thread section
    ``shown``); the rest announced by one line."""
    header = "（最近的时间线，仅供参考，最早的在前）"
    used = estimate_tokens(header) + 40  # the announcement line's share
    kept: list[str] = []
    timeline = [line for line in ci.timeline if line.seq not in shown] if shown else ci.timeline
    for line in reversed(timeline):
        text = render_line(line, people, ci.me)
        cost = estimate_tokens(text) + 2
        if used + cost > room:
            break
        kept.append(text)
        used += cost
    kept.reverse()
    left_out = len(timeline) - len(kept) + ci.earlier_omitted
    if not kept and not left_out:
        return ""
    lines = [header]
    if left_out:
        if kept:
            first: int | None = timeline[len(timeline) - len(kept)].seq
        else:
            first = ci.inputs[0].seq if ci.inputs else None
        where = f"before={first}" if first is not None else "before=消息序号"
        lines.append(
            f"（更早的 {left_out} 条消息未放入上下文；需要时用 room_history（{where}）读取）"
        )
    return "\n".join(lines + kept)


def _input_messages(
    lines: Sequence[Line], people: Mapping[int, Person], me: Person
) -> list[ChatMessage]:
    out = []
    for n, line in enumerate(lines):
        person = people.get(line.author_id) if line.author_id is not None else None
        mark = ANSWER_MARK if n == len(lines) - 1 else ""
        out.append(
            ChatMessage(
                role="user",
                content=render_line(line, people, me, mark),
                name=person.display_name if person else "系统",
            )
        )
    return out


def _merge_inputs(inputs: list[ChatMessage]) -> list[ChatMessage]:
    """Several new messages become one user turn (the last, the one to answer, stays apart)."""
    if len(inputs) <= 1:
        return inputs
    lines = ["（这一轮的新消息，最早的在前）", *(m.content for m in inputs[:-1])]
    last = inputs[-1]
    return [
        ChatMessage(role="user", content="\n".join(lines), name="room"),
        ChatMessage(role="assistant", content="（已读）"),
        last,
    ]


def steer_message(lines: Sequence[Line], people: Sequence[Person], me: Person) -> ChatMessage:
    """New messages that arrived while a turn runs, inserted at the next step boundary; the last
    is now the one the final answer replies to."""
    index = {p.member_id: p for p in people}
    text = "\n".join(
        render_line(line, index, me, ANSWER_MARK if n == len(lines) - 1 else "")
        for n, line in enumerate(lines)
    )
    return ChatMessage(role="user", content=f"（你工作时收到的新消息）\n{text}", name="room")


# --- the member's own transcript ---------------------------------------------------------------


def render_turn(record: TurnRecord, full: bool) -> str:
    """One earlier turn: its prompt, each tool call and result, its answer. Summarised (tool
    name, the arguments' head, the result's first line) unless ``full``."""
    prompt = " / ".join(first_line(p, 80) for p in record.prompts) or "（无）"
    lines = [f"第 {record.turn_id} 轮 · 收到：{prompt}"]
    for tool in record.tools:
        if full:
            lines.append(f"  → {tool.name} {clip(tool.arguments, FULL_ARGS_CHARS)}")
            result = clip(tool.result.strip(), FULL_RESULT_CHARS).replace("\n", "\n    ")
            lines.append(f"    结果：{result}")
        else:
            lines.append(f"  → {tool_digest(tool)}")
    if record.answer is not None:
        answer = clip(record.answer, 600) if full else first_line(record.answer, 120)
        answer = answer.replace("\n", "\n    ")
        lines.append(f"  最终回答：{answer}")
    else:
        lines.append("  （没有最终回答）")
    return "\n".join(lines)


def render_transcript(records: Sequence[TurnRecord], room: int) -> str:
    """The newest turns that fit in ``room`` tokens (the newest :data:`FULL_TURNS` in full when
    they fit, else summarised); older ones left out are counted in one line."""
    header = "（你自己之前几轮的工作记录：工具调用与结果，较早的已摘要；最早的在前）"
    used = estimate_tokens(header) + 30
    kept: list[str] = []
    for n, record in enumerate(reversed(records)):
        # A turn without tool calls is all in the timeline already: one short entry is enough.
        text = render_turn(record, full=n < FULL_TURNS and bool(record.tools))
        cost = estimate_tokens(text) + 2
        if used + cost > room and n < FULL_TURNS:
            text = render_turn(record, full=False)
            cost = estimate_tokens(text) + 2
        if used + cost > room:
            break
        kept.append(text)
        used += cost
    left_out = len(records) - len(kept)
    if not kept:
        return ""
    kept.reverse()
    lines = [header]
    if left_out:
        lines.append(f"（更早的 {left_out} 轮未放入上下文；它们的消息可用 room_history 读取）")
    return "\n".join(lines + kept)


# --- the checkpoint ------------------------------------------------------------------------------


def render_checkpoint(
    cp: Checkpoint, people: Mapping[int, Person], me: Person, input_seqs: Sequence[int] = ()
) -> str:
    """The last checkpoint of the member's task, and the prompt it left pending (unless that
    prompt is exactly among this turn's new messages)."""
    state = {
        "running": "进行中",
        "completed": "已完成",
        "cancelled": "被停止",
        "failed": "出错",
        "braked": "被刹车",
        "step_limit": "达到步数上限",
        "interrupted": "被服务器重启打断",
    }.get(cp.state, cp.state)
    lines = [
        f"（你的任务检查点：第 {cp.turn_id} 轮，第 {cp.step} 步，{state}）",
        f"任务：{cp.summary or '（无）'}",
    ]
    if cp.state == "completed":
        return "\n".join(lines)  # what it did is in its own earlier turns, just below
    if cp.did:
        lines.append("已做：")
        lines += [f"  - {d}" for d in cp.did[-CHECKPOINT_DID_LINES:]]
    if cp.last_tool:
        lines.append(f"最后一个工具：{cp.last_tool}")
    if cp.pending_tools:
        lines.append("未完成的工具调用：" + "；".join(cp.pending_tools))
    if cp.blocked:
        lines.append(f"受阻：{cp.blocked}")
    if cp.next:
        lines.append(f"下一步：{cp.next}")
    if cp.prompt:
        seqs = {line.seq for line in cp.prompt}
        if seqs <= set(input_seqs):
            lines.append("被打断时待回答的消息就是这一轮的新消息。")
        else:
            lines.append("被打断时待回答的消息（请接着处理，除非新消息另有要求）：")
            lines += [render_line(line, people, me) for line in cp.prompt]
    return "\n".join(lines)


def checkpoint_from_row(row: Mapping[str, Any]) -> Checkpoint:
    """A :class:`Checkpoint` from a stored row (``room.store.checkpoints.latest``)."""
    return Checkpoint(
        turn_id=int(row["turn_id"]),
        phase=str(row["phase"]),
        state=str(row["state"]),
        summary=str(row.get("summary") or ""),
        step=int(row.get("step") or 0),
        did=tuple(str(d) for d in row.get("did") or ()),
        next=str(row.get("next") or ""),
        blocked=str(row.get("blocked") or ""),
        last_tool=str(row.get("last_tool") or ""),
        pending_tools=tuple(str(t) for t in row.get("pending_tools") or ()),
        prompt=tuple(
            Line(
                int(p["seq"]),
                p.get("author_id"),
                str(p.get("body") or ""),
                for_agents=str(p.get("for_agents") or ""),
            )
            for p in row.get("prompt") or ()
        ),
    )
