"""The context renderer (pure): agents read a notice's words for agents after its body; the
same line as people see it carries no tool syntax."""

from __future__ import annotations

from room.agents.context import ContextInput, Line, Person, build_messages, steer_message

ME = Person(2, "be", "后端", "backend", "agent", "active")
OWNER = Person(1, "owner", "管理员", "owner", "human", "active")
NOTICE = Line(
    7,
    None,
    "📋 任务 `api` 已就绪 — @be 请开始\n\n下一步：开始任务，完成后附证据提交评审。",
    "system",
    for_agents='工具调用：room_task_update(task="api", action="start") 开始。',
)


def context(timeline: list[Line], inputs: list[Line]) -> ContextInput:
    return ContextInput("项目", "", ME, "charter", "rules", [ME, OWNER], timeline, inputs)


def test_an_agent_reads_the_body_then_its_words_for_agents() -> None:
    assert NOTICE.text == NOTICE.body + "\n\n" + NOTICE.for_agents
    assert Line(1, 1, "你好").text == "你好"  # most messages have nothing for agents
    [*_, last] = build_messages(context([], [NOTICE]))
    assert last.content == NOTICE.text
    # In the timeline and when steering in, too.
    later = Line(8, 1, "好的")
    messages = build_messages(context([NOTICE], [later]))
    assert 'room_task_update(task="api", action="start")' in messages[1].content
    steer = steer_message([NOTICE], [ME, OWNER], ME)
    assert 'room_task_update(task="api", action="start")' in steer.content
