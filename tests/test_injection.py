"""The injected records section (room.rules.injection): golden files for each degradation step, the
byte ceiling at every budget, cuts that never break a character, staleness and reminders.

Golden files are in tests/golden/injection/; ``ROOM_UPDATE_GOLDEN=1`` rewrites them (read the
diff before committing).
"""

from __future__ import annotations

import dataclasses
import os
import re
import unicodedata
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from room.rules import injection as inj
from room.settings import Settings
from tests.support.records import CONVENTIONS, T0, example, prose, records, summary

GOLDEN = Path(__file__).parent / "golden" / "injection"

# (golden file, budget, expected step, session entries shown, decision heads, summary cut)
CASES = [
    ("1-everything.txt", 64_000, 1, 15, False, False),
    ("2-sessions-7.txt", 12_000, 2, 7, False, False),
    ("2-sessions-3.txt", 9_000, 2, 3, False, False),
    ("2-sessions-1.txt", 8_000, 2, 1, False, False),
    ("3-no-sessions.txt", 7_000, 3, 0, False, False),
    ("4-decision-heads.txt", 6_000, 4, 0, True, False),
    ("5-summary-cut.txt", 4_096, 5, 0, True, True),
]


def golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("ROOM_UPDATE_GOLDEN"):
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"missing golden file {path}; run with ROOM_UPDATE_GOLDEN=1"
    assert text == path.read_text(encoding="utf-8")


@pytest.mark.parametrize(("name", "budget", "step", "shown", "heads", "cut"), CASES)
def test_each_degradation_step_matches_its_golden_file(
    name: str, budget: int, step: int, shown: int, heads: bool, cut: bool
) -> None:
    built = inj.build(records(), budget_bytes=budget)
    assert (built.step, built.sessions_shown, built.decision_heads, built.summary_cut) == (
        step,
        shown,
        heads,
        cut,
    )
    assert built.size <= budget
    assert built.text.startswith(f"# {inj.LABEL}\n（{inj.LABEL_EN}）\n")
    golden(name, built.text)


def test_each_step_adds_one_line_naming_what_was_left_out_and_memory_read() -> None:
    expected_notes = {1: 0, 2: 1, 3: 1, 4: 2, 5: 3}
    for _, budget, step, *_ in CASES:
        text = inj.build(records(), budget_bytes=budget).text
        notes = [line for line in text.splitlines() if line.startswith("（注入预算所限）")]
        assert len(notes) == expected_notes[step], (step, notes)
        assert all("memory_read" in line for line in notes)
    assert (
        "会话记录只列出了最新的 7 条，省略了其后的 8 条"
        in inj.build(records(), budget_bytes=12_000).text
    )
    assert "会话记录一条也没有列出（共 42 条）" in inj.build(records(), budget_bytes=7_000).text
    assert "决策只列出了 4/4 条的标题行" in inj.build(records(), budget_bytes=6_000).text


def test_the_summary_cut_is_marked_and_ends_on_a_whole_character() -> None:
    built = inj.build(records(), budget_bytes=4_096)
    whole = inj.build(records(), budget_bytes=64_000).text
    head, mark, _ = built.text.partition("\n" + inj.TRUNCATED_MARK + "\n")
    assert mark, "the cut summary carries the marker"
    # What is kept is the summary's own beginning, character for character.
    assert whole.startswith(head)
    assert not unicodedata.combining(whole[len(head)])


def test_a_budget_is_a_ceiling_and_the_step_never_goes_back_as_it_shrinks() -> None:
    data = records()
    full = inj.build(data, budget_bytes=64_000)
    # Exactly the full size still fits everything; one byte less does not.
    assert inj.build(data, budget_bytes=full.size).step == 1
    assert inj.build(data, budget_bytes=full.size - 1).step == 2
    last_step = 1
    for budget in range(full.size, inj.MIN_BUDGET_BYTES - 1, -97):
        built = inj.build(data, budget_bytes=budget)
        assert built.size <= budget
        assert built.step >= last_step
        last_step = built.step


def test_every_byte_of_budget_around_multibyte_cuts_stays_whole() -> None:
    """Budgets one byte apart move the hard cut across 2-, 3- and 4-byte characters, a combining
    accent and an emoji with a skin-tone modifier: every text is within budget and its summary
    is a clean prefix."""
    data = records(summary_paragraphs=12)
    full_summary = inj.build(data, budget_bytes=64_000).text
    held_back = set()
    for budget in range(4_096, 5_000):
        built = inj.build(data, budget_bytes=budget)
        assert built.step == 5 and built.size <= budget
        kept = built.text.partition("\n" + inj.TRUNCATED_MARK)[0]
        assert full_summary.startswith(kept)
        following = full_summary[len(kept)]
        assert not inj._binds(following), (budget, repr(kept[-3:]), repr(following))
        assert len(kept.encode()) > budget - 2_000  # the cut uses the room it has
        if inj._binds(full_summary[len(kept) + 1]):
            held_back.add(following)
    # The range crossed an accent and a skin tone: the base character was held back with them.
    assert held_back == {"e", "👍"}


def test_many_decisions_keep_the_newest_heads_in_half_of_what_is_left() -> None:
    data = records(decision_count=60)
    built = inj.build(data, budget_bytes=4_096)
    assert built.step == 5 and built.decision_heads and built.summary_cut
    assert 0 < built.decisions_shown < 60
    assert f"决策只列出了 {built.decisions_shown}/60 条的标题行" in built.text
    kept = [f"- ADR-{n:04d} " for n in range(60, 60 - built.decisions_shown, -1)]
    assert all(head in built.text for head in kept)
    assert built.text.index(kept[0]) < built.text.index(kept[-1])  # newest first
    assert f"- ADR-{60 - built.decisions_shown:04d} " not in built.text
    golden("5-summary-cut-fewer-heads.txt", built.text)


def test_empty_memory_reads_zanwu_everywhere() -> None:
    built = inj.build(inj.Records(None, [], [], 0, 0))
    assert built.step == 1
    golden("1-empty.txt", built.text)
    assert built.text.count(f"\n{inj.EMPTY}") == 7  # five sections, decisions, sessions


def test_cut_utf8_never_splits_a_character() -> None:
    assert inj.cut_utf8("中文", 4) == "中"
    assert inj.cut_utf8("中文", 5) == "中"
    assert inj.cut_utf8("中文", 6) == "中文"
    assert inj.cut_utf8("ae\u0301b", 3) == "a"  # never "ae" without its accent
    assert inj.cut_utf8("ae\u0301b", 4) == "ae\u0301"
    assert inj.cut_utf8("x👍🏽y", 5) == "x"  # the thumb without its skin tone is a change
    assert inj.cut_utf8("x👍🏽y", 9) == "x👍🏽"
    assert inj.cut_utf8("x👩\u200d💻", 9) == "x👩"  # not the joiner dangling
    assert inj.cut_utf8("abc", 0) == ""


@given(
    st.text(
        alphabet=st.sampled_from("中文字符测试ab \ne\u0301👍🏽\u200d☕é"),
        min_size=0,
        max_size=3_000,
    ),
    st.integers(min_value=0, max_value=40),
    st.integers(min_value=inj.MIN_BUDGET_BYTES, max_value=20_000),
)
@settings(max_examples=80, deadline=None)
def test_any_records_fit_any_budget(text: str, sessions: int, budget: int) -> None:
    data = records(session_count=sessions)
    data = inj.Records(
        inj.Summary({"what": text * 3, "pitfalls": text}, 1, T0),
        [*data.decisions, inj.Decision("ADR-0099", text[:30], "accepted", text)],
        data.sessions,
        sessions,
        data.version,
    )
    built = inj.build(data, budget_bytes=budget)
    assert built.size <= budget
    assert built.text.encode().decode() == built.text


def test_a_budget_under_the_minimum_is_refused() -> None:
    with pytest.raises(ValueError):
        inj.build(records(), budget_bytes=inj.MIN_BUDGET_BYTES - 1)
    assert Settings.model_fields["memory_budget_bytes"].metadata[0].ge == inj.MIN_BUDGET_BYTES


def test_the_settings_defaults_are_the_builders() -> None:
    defaults = Settings()
    assert defaults.memory_budget_bytes == inj.DEFAULT_BUDGET_BYTES == 64_000
    assert defaults.memory_session_entries == inj.DEFAULT_SESSION_ENTRIES == 15
    assert defaults.memory_stale_days == inj.DEFAULT_STALE_DAYS == 14


def test_halvings() -> None:
    assert inj.halvings(15) == [15, 7, 3, 1]
    assert inj.halvings(4) == [4, 2, 1]
    assert inj.halvings(0) == []


# -- staleness -------------------------------------------------------------------------------------


def test_a_summary_is_stale_after_the_set_days_when_newer_sessions_exist() -> None:
    day = inj.DAY_SECS
    assert inj.staleness(T0, T0 + 14 * day, 14, 3) == inj.Stale(14, 3)
    assert inj.staleness(T0, T0 + 14 * day - 1, 14, 3) is None  # not yet 14 days
    assert inj.staleness(T0, T0 + 30 * day, 14, 0) is None  # nothing newer
    assert inj.staleness(T0, T0 + 30 * day, 0, 3) is None  # 0 turns it off
    assert inj.staleness(None, T0, 14, 3) is None  # no summary yet


def test_the_stale_line_names_the_age_and_the_entries_since() -> None:
    text = inj.build(records(stale=True)).text
    assert "⚠️ 这份概要已 20 天没有更新，此后又新增了 31 条会话记录" in text
    assert "没有更新" not in inj.build(records(stale=False)).text


# -- notices and reminders -------------------------------------------------------------------------


def test_notices_after_the_section() -> None:
    assert inj.notices(built_version=3, version=3) == ""
    assert inj.notices(built_version=3, version=4) == inj.UPDATED_NOTICE
    assert inj.notices(built_version=3, version=4, reminder="提醒") == f"{inj.UPDATED_NOTICE}\n提醒"


def test_a_turn_that_worked_and_recorded_nothing_earns_one_reminder() -> None:
    state = inj.Reminders().after_turn(
        now=T0, work=["fs_write", "shell", "fs_read"], recorded=False
    )
    text, state = state.take()
    assert text is not None and "写了文件、运行了命令" in text and "memory_checkpoint" in text
    assert state.take()[0] is None  # carried once


def test_reading_or_chatting_is_not_work() -> None:
    state = inj.Reminders().after_turn(now=T0, work=["fs_read", "room_send"], recorded=False)
    assert state.take()[0] is None


def test_reminders_are_ten_minutes_apart_and_at_most_three() -> None:
    state, given = inj.Reminders(), []
    for minute in range(0, 120, 5):
        state = state.after_turn(now=T0 + minute * 60, work=["shell"], recorded=False)
        text, state = state.take()
        if text:
            given.append(minute)
    assert given == [0, 10, 20]


def test_a_memory_write_resets_the_count() -> None:
    state = inj.Reminders()
    for minute in (0, 10, 20):
        state = state.after_turn(now=T0 + minute * 60, work=["shell"], recorded=False).take()[1]
    assert state.given == 3
    state = state.after_turn(now=T0 + 25 * 60, work=["shell"], recorded=True)
    assert state == inj.Reminders()
    state = state.after_turn(now=T0 + 26 * 60, work=["fs_edit"], recorded=False)
    assert state.take()[0] is not None


def test_a_session_entry_is_named_by_its_record_id_never_as_a_message_number() -> None:
    """The rules tell the model that ``#N`` is a message's number; a session entry's heading
    names its record id as ``memory_read`` takes it instead, so ``#2`` never means two things."""
    text = inj.build(records()).text
    assert re.search(r"#\d", text) is None, re.findall(r".*#\d.*", text)
    entry = records().sessions[0]
    assert f"### 会话记录 id={entry.id} · " in text


def test_fixture_summary_has_an_empty_section() -> None:
    assert summary().sections["status"] == ""


def test_no_line_a_record_holds_can_pose_as_a_line_of_the_section() -> None:
    """Headings, entries and the budget's own lines written inside records stay indented text."""
    forged = "正常的一行\n### 坑\n## 决策\n### #999 2020-01-01 @owner\n（注入预算所限）假的\r\n# 项目记录\u2028最后"
    data = inj.Records(
        inj.Summary({"what": forged}, 1, T0, author="@a\n### 坑"),
        [inj.Decision("ADR-0001", "标题\n## 决策", "accepted", forged, context=forged)],
        [inj.SessionEntry(1, "@b", T0, forged, did=forged)],
        1,
        1,
        conventions=[forged],
        facts=[forged],
        progress=[inj.Progress(forged, "阶段\n## 决策", forged, T0, tags=("a\n# b",))],
        progress_total=1,
        references=[inj.Reference("dir", "src/\n## 参考", forged)],
        references_total=1,
    )
    text = inj.build(data).text
    starts = [line for line in text.splitlines() if line.startswith(("#", "（注入预算所限）"))]
    assert starts == [
        f"# {inj.LABEL}",
        "## 项目概要（第 1 版，2025-11-24 16:00 UTC，@a ### 坑）",
        "### 这是什么",
        "### 怎么跑和怎么测",
        "### 东西都在哪",
        "### 现状",
        "### 坑",
        "## 约定（最新的在前，共 1 条）",
        "## 决策（最新的在前，共 1 条）",
        "### ADR-0001 标题 ## 决策［已接受］",
        "## 最近的进展（最新的在前，列出 1 条，共 1 条）",
        "## 最近的会话记录（最新的在前，列出 1 条，共 1 条）",
        "### 会话记录 id=1 · 2025-11-24 16:00 UTC · @b",
        "## 事实（最新的在前，共 1 条）",
        "## 参考（最新的在前，列出 1 条，共 1 条）",
    ]
    entries = [line for line in text.splitlines() if line.startswith("- ")]
    assert entries == [
        "- 正常的一行",  # the convention
        "- 2025-11-24 16:00 UTC［阶段 ## 决策］正常的一行",
        "- 正常的一行",  # the fact
        "- dir src/ ## 参考：正常的一行",
    ]
    assert "\n  ### 坑\n  ## 决策\n" in text


# -- conventions, progress, facts and references ---------------------------------------------------


def _headings(text: str) -> list[str]:
    return [line.split("（")[0] for line in text.splitlines() if line.startswith("## ")]


def test_every_part_is_in_its_documented_order() -> None:
    built = inj.build(records(extras=True))
    assert built.step == 1 and built.left_out == ()
    assert _headings(built.text) == [
        "## 项目概要",
        "## 约定",
        "## 决策",
        "## 最近的进展",
        "## 最近的会话记录",
        "## 事实",
        "## 参考",
    ]
    assert "- 每次提交前先运行 pnpm test。" in built.text
    assert (
        "## 最近的进展（最新的在前，列出 5 条，共 12 条；更早的用 memory_read 读取）" in built.text
    )
    assert "## 参考（最新的在前，列出 6 条，共 30 条；更早的用 memory_read 读取）" in built.text
    assert "- 2025-12-13 16:00 UTC［设计］第 5 段进展：" in built.text
    assert "  下一步：" in built.text and " · 标签：存储、页面" in built.text
    assert "- dir docs/part-6.md\n- file docs/part-5.md：" in built.text


def test_references_facts_and_progress_go_first_each_whole_with_a_line() -> None:
    data = records(extras=True)
    full = inj.build(data)
    seen: list[tuple[str, ...]] = []
    for budget in range(full.size, inj.MIN_BUDGET_BYTES - 1, -37):
        built = inj.build(data, budget_bytes=budget)
        assert built.size <= budget
        if built.left_out not in seen:
            seen.append(built.left_out)
        if len(built.left_out) < 3:  # the seed's steps start only when all three are out
            assert (built.step, built.sessions_shown) == (1, 15)
    assert seen == [(), ("reference",), ("reference", "fact"), ("reference", "fact", "progress")]
    text = inj.build(data, budget_bytes=full.size - 1).text
    assert "## 参考" not in text and "## 事实" in text
    assert text.endswith(
        '（注入预算所限）参考没有列出（共 30 条）；用 memory_read（kind="reference"）读取。'
    )
    text = inj.build(data, budget_bytes=7_500).text
    notes = [line for line in text.splitlines() if line.startswith("（注入预算所限）")]
    assert notes[:3] == [
        '（注入预算所限）参考没有列出（共 30 条）；用 memory_read（kind="reference"）读取。',
        '（注入预算所限）事实没有列出（共 4 条）；用 memory_read（kind="fact"）读取。',
        '（注入预算所限）进展没有列出（共 12 条）；用 memory_read（kind="progress"）读取。',
    ]


def test_conventions_stay_to_the_last_step_and_are_cut_after_the_summary() -> None:
    data = records(extras=True)
    at_heads = inj.build(data, budget_bytes=6_000)
    assert at_heads.step == 4 and all(c in at_heads.text for c in CONVENTIONS)
    many = dataclasses.replace(
        data, summary=summary(1), conventions=[f"约定 {n}：{prose(1, n)}" for n in range(40)]
    )
    built = inj.build(many, budget_bytes=4_096)
    assert built.step == 5 and built.summary_cut and built.size <= 4_096
    kept = built.text.partition("\n" + inj.TRUNCATED_MARK)[0]
    assert "## 约定（最新的在前，共 40 条）\n- 约定 0：" in kept  # the whole summary, then some
    assert "约定 39" not in kept
    assert "（注入预算所限）项目概要和约定被截断，只列出了前 " in built.text
    assert 'memory_read（kind="convention"）' in built.text


def test_the_docs_show_a_section_the_code_renders() -> None:
    """docs/memory.md's example is this code's output for ``example()``, byte for byte
    (``ROOM_UPDATE_GOLDEN=1`` rewrites it)."""
    built = inj.build(example())
    assert built.step == 1 and built.left_out == ()
    doc = Path(__file__).parent.parent / "docs" / "memory.md"
    text = doc.read_text(encoding="utf-8")
    start = text.index("<!-- rendered-section -->\n```text\n") + len("<!-- rendered-section -->\n")
    end = text.index("\n```\n", start + len("```text")) + len("\n```\n")
    shown = f"```text\n{built.text}\n```\n"
    if os.environ.get("ROOM_UPDATE_GOLDEN"):
        doc.write_text(text[:start] + shown + text[end:], encoding="utf-8")
        text = doc.read_text(encoding="utf-8")
    assert text[start : start + len(shown)] == shown


def test_progress_says_what_blocks_it() -> None:
    blocked = inj.Progress("接口评审", "验证", "合并", T0, tags=("api",), blocked="等评审\n第二行")
    text = inj.build(dataclasses.replace(example(), progress=[blocked])).text
    assert "［验证］接口评审\n  下一步：合并 · 标签：api\n  受阻：等评审\n  第二行\n" in text


def test_an_empty_summary_asks_an_agent_that_may_write_to_fill_it_in() -> None:
    empty = inj.Records(None, [], [], 0, 0)
    text = inj.build(empty, bootstrap=True).text
    assert f"## 项目概要（还没有人写过）\n{inj.BOOTSTRAP_LINE}\n### 这是什么" in text
    blank = dataclasses.replace(example(), summary=inj.Summary({"what": " \n"}, 1, T0))
    assert inj.BOOTSTRAP_LINE in inj.build(blank, bootstrap=True).text
    assert inj.BOOTSTRAP_LINE not in inj.build(empty).text  # not asked for
    assert inj.BOOTSTRAP_LINE not in inj.build(example(), bootstrap=True).text  # written


@pytest.mark.parametrize(
    ("max_given", "gap_secs", "minutes"),
    [(0, 600.0, []), (5, 0.0, [0, 5, 10, 15, 20]), (2, 1_800.0, [0, 30])],
)
def test_the_reminder_settings_bound_how_many_and_how_often(
    max_given: int, gap_secs: float, minutes: list[int]
) -> None:
    state, given = inj.Reminders(), []
    for minute in range(0, 120, 5):
        state = state.after_turn(
            now=T0 + minute * 60, work=["shell"], recorded=False,
            max_given=max_given, gap_secs=gap_secs,
        )  # fmt: skip
        text, state = state.take()
        if text:
            given.append(minute)
    assert given == minutes
