"""The records changed mid-session, as the next request carries them (room.rules.deltas, pure)."""

from __future__ import annotations

from room.rules import deltas
from room.rules.deltas import Delta, render
from room.rules.injection import TRUNCATED_MARK, UPDATED_NOTICE


def test_the_newest_change_comes_first_each_on_one_line() -> None:
    text = render(
        [
            Delta("convention", "new", 10.0, "每次提交前先运行 pnpm test"),
            Delta("decision", "edited", 30.0, "用 SQLite［已接受］：单机部署用 SQLite", "ADR-0002"),
            Delta("fact", "archived", 20.0, "旧的部署地址"),
        ],
        budget_bytes=4000,
    )
    assert text.splitlines() == [
        deltas.HEADING,
        "- 改动的决定 ADR-0002：用 SQLite［已接受］：单机部署用 SQLite",
        "- 已归档的事实：旧的部署地址",
        "- 新约定：每次提交前先运行 pnpm test",
    ]


def test_what_does_not_fit_is_counted_and_nothing_passes_the_budget() -> None:
    changes = [
        Delta("convention", "new", float(n), f"约定第{n}条" + "很长的说明" * 20) for n in range(30)
    ]
    budget = 1500
    text = render(changes, budget_bytes=budget)
    lines = text.splitlines()
    assert len(text.encode()) <= budget
    assert lines[0] == deltas.HEADING and lines[1].startswith("- 新约定：约定第29条")
    shown = len(lines) - 2
    assert 0 < shown < 30
    assert lines[-1] == deltas.MORE_LINE.format(n=30 - shown)


def test_a_long_record_is_cut_with_the_mark_and_written_lines_cannot_pose_as_headings() -> None:
    text = render(
        [Delta("fact", "new", 1.0, "第一行\n## 假标题\n" + "长" * 2000)], budget_bytes=8000
    )
    [heading, line] = text.splitlines()
    assert heading == deltas.HEADING
    assert line.startswith("- 新事实：第一行 ## 假标题 长") and line.endswith(TRUNCATED_MARK)
    assert len(line) == len("- 新事实：") + deltas.ITEM_CHARS + len(TRUNCATED_MARK)


def test_nothing_to_show_or_no_room_gives_the_one_line() -> None:
    assert render([], budget_bytes=4000) == UPDATED_NOTICE
    assert render([Delta("fact", "new", 1.0, "一条事实")], budget_bytes=50) == UPDATED_NOTICE
    assert render([Delta("fact", "new", 1.0, "一条事实")], budget_bytes=-10) == UPDATED_NOTICE


def test_record_texts_from_stored_bodies() -> None:
    assert deltas.text_of(
        "summary", {"sections": {"status": "上线了", "what": "群聊", "run": ""}}
    ) == ("这是什么：群聊；现状：上线了")
    assert (
        deltas.text_of(
            "progress", {"text": "登录页", "stage": "实现", "next": "注册页", "blocked": ""}
        )
        == "［实现］登录页；下一步：注册页"
    )
    assert deltas.text_of("session", {"summary": "修好接口", "did": "改了 a.py", "next": "测"}) == (
        "修好接口；做了：改了 a.py；下一步：测"
    )
    assert deltas.text_of(
        "reference", {"ref_kind": "dir", "target": "docs/api", "note": "接口"}
    ) == ("dir docs/api：接口")
    assert (
        deltas.decision_text("加需求", "proposed", "要导出", "requirement")
        == "加需求［需求，提议中］：要导出"
    )
