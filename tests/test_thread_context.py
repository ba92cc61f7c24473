"""What an agent addressed inside a thread reads (issue 30 item 2; room.agents.context): the
thread's root and newest replies, before the timeline, within the budget."""

from __future__ import annotations

from dataclasses import replace

import pytest

from room.agents.context import THREAD_HEADER, ContextInput, Line, Person, build_messages
from tests.support.live_room import Room, agent_replies, eventually
from tests.support.llm_servers import openai_text

ME = Person(3, "lead", "负责人", "lead", "agent", "active")
OWNER = Person(1, "owner", "王老板", "owner", "human", "active")


def thread_context(budget: int, replies: int = 3) -> ContextInput:
    timeline = [Line(seq, OWNER.member_id, f"时间线 {seq}") for seq in range(1, 30)]
    return ContextInput(
        project_name="p",
        goal="",
        me=ME,
        charter="",
        rules="",
        people=(ME, OWNER),
        timeline=timeline,
        inputs=(Line(40, OWNER.member_id, "@lead 话题里问你"),),
        budget_tokens=budget,
        thread=(
            Line(2, OWNER.member_id, "时间线 2"),
            *(Line(10 + n, OWNER.member_id, f"回复{n}") for n in range(replies)),
        ),
        thread_omitted=5,
    )


def background_text(ci: ContextInput) -> str:
    return "\n".join(m.content for m in build_messages(ci) if m.name == "room")


def test_an_agent_in_a_thread_reads_the_thread_first() -> None:
    text = background_text(thread_context(32_000))
    assert THREAD_HEADER in text and "（话题中更早的 5 条回复未放入上下文）" in text
    thread_part = text[text.index(THREAD_HEADER) : text.index("（最近的时间线")]
    assert [line.split("：")[1] for line in thread_part.splitlines()[3:]] == [
        "回复0",
        "回复1",
        "回复2",
    ]
    assert "#2 " in thread_part  # the root
    # The timeline does not repeat what the thread showed.
    assert text.count("#2 ") == 1 and text.count("#3 ") == 1


def test_a_small_budget_keeps_the_root_and_the_newest_replies() -> None:
    full = background_text(thread_context(32_000, replies=30))
    small = background_text(thread_context(420, replies=30))
    assert "#2 " in small and "回复29" in small and "回复0" not in small
    assert "回复0" in full
    left = int(small.split("（话题中更早的 ")[1].split(" ")[0])
    assert 5 < left < 35  # the five never read and the ones the budget left out
    # Not in a thread: no thread section at all.
    plain = replace(thread_context(32_000), thread=(), thread_omitted=0)
    assert THREAD_HEADER not in background_text(plain)


@pytest.mark.anyio
@pytest.mark.usefixtures("clients")
async def test_an_agent_addressed_in_a_thread_gets_it_in_its_request(room: Room) -> None:
    room.route("lead")
    room.llm.push(openai_text("先按 A 方案做。"))
    root = room.say("我们用哪个方案？")
    answers = await eventually(lambda: agent_replies(room, "lead"))
    assert answers[0]["reply_to"] == root["message_id"]  # the answer is in the root's thread
    first_request = "\n".join(str(m["content"]) for m in room.llm.chat_requests[-1]["messages"])
    assert THREAD_HEADER not in first_request  # the root was not a reply

    room.llm.push(openai_text("好的。"))
    room.say("@lead 那测试怎么安排？", reply_to=answers[0]["id"])
    await eventually(lambda: len(agent_replies(room, "lead")) >= 2)
    request = room.llm.chat_requests[-1]["messages"]
    background = "\n".join(str(m["content"]) for m in request[1:-1])
    section = background[background.index(THREAD_HEADER) :]
    assert "我们用哪个方案？" in section.splitlines()[1]  # the root first
    assert "先按 A 方案做。" in section  # then the reply
    timeline = background[background.index("（最近的时间线") :]
    assert "我们用哪个方案？" not in timeline and "先按 A 方案做。" not in timeline  # not twice
    thread = room.get(f"/api/messages/{root['message_id']}/thread")
    assert [m["body"] for m in thread["replies"]] == [
        "先按 A 方案做。",
        "@lead 那测试怎么安排？",
        "好的。",
    ]
