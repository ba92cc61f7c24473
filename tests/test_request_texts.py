"""Every text the server adds to a model request is listed in docs/agents.md ("Every text the
server adds to a request"): requests are built through the real code with every section present,
what people and agents wrote is taken out, the documented texts are taken out, and nothing but
numbers, spaces and punctuation may be left."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from room.agents import context as ctx
from room.agents import memory as memory_mod
from room.agents import research_run
from room.agents.context import Checkpoint, ContextInput, Line, Person
from room.agents.presets import PRESETS, ROOM_RULES
from room.agents.tools import bad_arguments, not_run_after_stop
from room.agents.turn import CUT_ARGUMENTS
from room.rules import deltas
from room.rules import injection as inj
from room.rules.attachments import with_attachments
from room.rules.entities import Member
from room.rules.transcripts import ToolStep, TurnRecord
from tests.support.doctables import read_table

PLACEHOLDER = re.compile(r"\{[^{}]*\}")

ME = Person(3, "lead", "负责人甲", "lead", "agent", "active")
OWNER = Person(1, "owner", "王老板", "owner", "human", "active")
BE = Person(4, "be", "后端乙", "backend", "agent", "paused")
GONE = Person(5, "gone", "走了的", "backend", "agent", "left")
PEOPLE = (OWNER, ME, BE, GONE)

#: What people and agents wrote, and names they chose: taken out before the check.
WRITTEN = [
    "演示项目名",
    "上线一个演示目标",
    "时间线里的话",
    "更早的一句",
    "先看日志",
    "@lead 总结一下",
    "多行消息第一行",
    "多行消息第二行",
    "报告.pdf",
    "application/pdf",
    ".room/attachments/7-报告.pdf",
    "修复接口",
    "shell",
    "fs_read",
    '{"command": "pytest"}',
    '{"path": "a.py"}',
    "测试全部通过",
    "文件内容",
    "接口已经修好",
    "写好接口",
    "跑测试",
    "fs_read a.py",
    "等待评审",
    "被中断前的请求",
    "上一轮的问题",
    "话题的开头",
    "话题里的回复",
    *(p.handle for p in PEOPLE),
    *(p.display_name for p in PEOPLE),
    *(p.role for p in PEOPLE),
    "paused",
]
LEFT_OVER = re.compile(r"[\s\d#@.,:;()\[\]/=\-+_*\"'{}→⇒…·，：；（）「」、。【】]*")


def documented() -> list[str]:
    """The fixed pieces of every documented text, the longest first."""
    _, rows = read_table("agents.md", "request-texts")
    pieces = {piece.strip() for row in rows for piece in PLACEHOLDER.split(row[0])}
    pieces |= {row[1] for row in read_table("agents.md", "role-charters")[1]}
    pieces |= {row[1] for row in read_table("agents.md", "room-rules")[1]}
    return sorted((p for p in pieces if p), key=len, reverse=True)


def left_over(texts: Iterable[str], extra: Iterable[str] = ()) -> list[str]:
    """The lines of ``texts`` that still hold words once written and documented texts are out."""
    remove = sorted({*WRITTEN, *extra, *documented()}, key=len, reverse=True)
    out = []
    for text in texts:
        for piece in remove:
            text = text.replace(piece, " ")
        out += [line for line in text.splitlines() if not LEFT_OVER.fullmatch(line)]
    return out


def test_role_charters_and_room_rules_are_the_documented_ones() -> None:
    _, charters = read_table("agents.md", "role-charters")
    assert {role: charter for role, charter in charters} == {
        role: preset.charter for role, preset in PRESETS.items()
    }
    _, rules = read_table("agents.md", "room-rules")
    documented_rules = "房间规则：\n" + "\n".join(f"{n}. {rule}" for n, rule in rules)
    assert documented_rules == ROOM_RULES


def records_section() -> str:
    """The records section (its lines are pinned by docs/memory.md and tests/golden/injection/)."""
    records = inj.Records(
        summary=None, decisions=(), sessions=(), sessions_total=0, version=3, stale=None
    )
    return inj.build(records).text


def records_text() -> str:
    section = records_section()
    reminder = inj.Reminders().after_turn(now=1_000.0, work=["shell"], recorded=False).pending
    assert reminder is not None
    return section + "\n\n" + inj.notices(built_version=2, version=3, reminder=reminder)


def full_context(**changes: Any) -> ContextInput:
    """A context with every section: records, a cut-off checkpoint with its pending prompt, the
    agent's own turns (in full and summarised, some left out), the thread of the message to
    answer (replies left out), a timeline with lines left out,
    messages with no author, an unknown author and a file, and several new messages."""
    attachment = {
        "id": 7,
        "name": "报告.pdf",
        "mime": "application/pdf",
        "size": 2048,
        "url": "/api/attachments/7",
    }
    timeline = [
        Line(1, OWNER.member_id, "更早的一句"),
        Line(2, None, "时间线里的话"),
        Line(3, 99, "时间线里的话"),
        Line(4, ME.member_id, "多行消息第一行\n多行消息第二行"),
        Line(
            5,
            OWNER.member_id,
            with_attachments("时间线里的话", [attachment], {7: ".room/attachments/7-报告.pdf"}),
        ),
    ]
    turn = TurnRecord(
        8,
        ("上一轮的问题",),
        (
            ToolStep("shell", '{"command": "pytest"}', "测试全部通过"),
            ToolStep("fs_read", '{"path": "a.py"}', ""),
        ),
        "接口已经修好",
    )
    base: dict[str, Any] = {
        "project_name": "演示项目名",
        "goal": "上线一个演示目标",
        "me": ME,
        "charter": PRESETS["lead"].charter,
        "rules": ROOM_RULES,
        "people": PEOPLE,
        "timeline": timeline,
        "inputs": (
            Line(20, OWNER.member_id, "先看日志"),
            Line(21, OWNER.member_id, "@lead 总结一下"),
        ),
        "budget_tokens": 32_000,
        "records": records_text(),
        "transcript": (
            TurnRecord(6, (), (), None),
            turn,
            TurnRecord(9, ("上一轮的问题",), (), "接口已经修好"),
            turn,
            turn,
        ),
        "checkpoint": Checkpoint(
            turn_id=9,
            phase="interrupted",
            state="interrupted",
            summary="修复接口",
            step=2,
            did=("fs_read a.py",),
            next="跑测试",
            blocked="等待评审",
            last_tool="shell",
            pending_tools=("fs_read a.py",),
            prompt=(Line(15, OWNER.member_id, "被中断前的请求"),),
        ),
        "earlier_omitted": 40,
        "thread": (Line(2, OWNER.member_id, "话题的开头"), Line(6, BE.member_id, "话题里的回复")),
        "thread_omitted": 3,
    }
    base.update(changes)
    return ContextInput(**base)


def test_a_full_request_holds_only_documented_texts() -> None:
    messages = ctx.build_messages(full_context())
    roles = [m.role for m in messages]
    assert roles[0] == "system" and roles[-3:] == ["user", "assistant", "user"]
    assert "assistant" in roles[1:-3]  # the line that closes the background
    assert left_over((m.content for m in messages), extra=[records_section()]) == []
    # the test can fail: an undocumented line is found
    assert [line.strip() for line in left_over(["（这句没有写进文档）"])] == ["这句没有写进文档"]


def test_every_state_and_edge_of_the_sections_is_documented() -> None:
    texts = []
    for state in ("running", "completed", "cancelled", "failed", "braked", "step_limit"):
        cp = Checkpoint(1, "end", state, "", 1, prompt=(Line(20, 1, "先看日志"),))
        texts.append(ctx.render_checkpoint(cp, {p.member_id: p for p in PEOPLE}, ME, [20]))
    # the timeline announcement when nothing of the timeline fits
    tiny = full_context(budget_tokens=10, records="", transcript=(), checkpoint=None)
    texts += [m.content for m in ctx.build_messages(tiny)]
    texts.append(ctx.render_timeline(full_context(inputs=()), {}, 10))
    texts.append(ctx.steer_message([Line(30, 1, "先看日志")], PEOPLE, ME).content)
    assert left_over(texts) == []


def changed_records() -> str:
    """The records changed mid-session as a request carries them: every kind, every way a record
    changes, a decision, a requirement, a record with no text, and some that did not fit."""
    stored: list[tuple[str, dict[str, Any]]] = [
        ("summary", {"sections": {k: "时间线里的话" for k in ("what", "run", "where", "status", "pitfalls")}}),
        ("fact", {"text": "时间线里的话"}),
        ("convention", {"text": ""}),
        ("progress", {"text": "修复接口", "stage": "跑测试", "next": "写好接口", "blocked": "等待评审"}),
        ("session", {"summary": "修复接口", "did": "跑测试", "verified": "测试全部通过", "next": "写好接口", "blocked": "等待评审"}),
        ("reference", {"ref_kind": "shell", "target": "修复接口", "note": "文件内容"}),
    ]  # fmt: skip
    changes = [
        deltas.Delta(kind, what, float(n), deltas.text_of(kind, body), "id=3")
        for n, (kind, body) in enumerate(stored)
        for what in ("new", "edited", "archived")
    ]
    for n, (status, kind) in enumerate(
        [("proposed", "decision"), ("accepted", "requirement"), ("superseded", "decision")]
    ):
        text = deltas.decision_text("修复接口", status, "写好接口", kind)
        changes.append(deltas.Delta("decision", "new", 100.0 + n, text, "ADR-0001"))
    changes += [deltas.Delta("fact", "new", 0.5, "修复接口" * 100)] * 200  # past the budget
    text = deltas.render(changes, budget_bytes=20_000)
    assert "（还有" in text and all(f"- {w}" in text for w in ("新", "改动的", "已归档的"))
    return text


def test_the_records_notices_and_tool_wrappers_are_documented() -> None:
    texts = [memory_mod.UNREADABLE, inj.notices(built_version=1, version=2), changed_records()]
    texts += [
        not_run_after_stop().text,
        bad_arguments("arguments were not valid JSON").text,
        bad_arguments(CUT_ARGUMENTS).text,
    ]
    # the section's own lines are documented in docs/memory.md: only its label is checked here
    assert inj.LABEL in " ".join(row[0] for row in read_table("agents.md", "request-texts")[1])
    assert (
        left_over(
            texts,
            # ... and the changed records' labels (a decision's number, a session entry's id)
            extra=[
                "stopped",
                "bad_arguments",
                "ok",
                "false",
                "error",
                "message",
                "ADR-0001",
                "id=3",
            ],
        )
        == []
    )


def test_a_research_session_request_holds_only_documented_texts() -> None:
    stored = {
        "question": "上线一个演示目标",
        "scope": {
            "paths": ["src"],
            "references": [
                {"id": 1, "kind": "dir", "target": "/srv/docs", "real": "/srv/docs"},
                {"id": 2, "kind": "file", "target": "/srv/a.txt", "real": "/srv/a.txt"},
                {"id": 3, "kind": "url", "target": "https://example.org", "note": "先看日志"},
            ],
        },
        "members": [ME.member_id],
        "budget": {"tokens": 1000, "requests": 5, "seconds": 60, "steps": 4},
        "approved_rev": None,
        "tokens_used": 0,
        "requests_used": 0,
        "run_secs": 0,
        "steps_used": 0,
        "state": "running",
        "rev": 1,
        "digest": "d",
    }
    member = Member(ME.member_id, 1, "agent", None, "lead", ME.handle, ME.display_name,
                    "active")  # fmt: skip
    charter = research_run.charter_of(12, stored, member, "演示项目名")
    assert charter.startswith("你是 @lead（负责人甲），项目「演示项目名」的研究成员（角色 lead）。")
    written = ["src", "/srv/docs", "/srv/a.txt", "https://example.org", "tokens", "requests"]
    written += ["seconds", "steps"]
    assert left_over([charter], extra=written) == []
