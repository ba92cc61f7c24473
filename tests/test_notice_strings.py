"""Server notices and risk findings worded by the page: every risk rule has a title, detail and
suggestion in both string tables (web/strings-zh.js, web/strings-en.js), and every placeholder of
those templates is among the facts a real finding of that rule carries on the wire — so no
reader sees "{days}", and no Chinese reader sees "(overdue)"."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

from room.rules import portfolio as pf
from tests.test_portfolio_rules import NOW, TODAY, ms, project

ROOT = Path(__file__).resolve().parents[1]
TABLES = {"zh": ROOT / "web" / "strings-zh.js", "en": ROOT / "web" / "strings-en.js"}


def table(path: Path) -> dict[str, str]:
    return dict(re.findall(r'^\s*"([\w.]+)": "((?:[^"\\]|\\.)*)",?$', path.read_text(), re.M))


def findings() -> list[pf.Finding]:
    """One portfolio on which every rule fires at least once."""
    done = [
        project(10, state="complete", hours=(10, 16), completed_at=1),
        project(11, state="complete", hours=(10, 4), completed_at=2),
    ]
    projects = [
        project(1, idle_days=15),
        project(2, start=TODAY - timedelta(days=8), milestones=()),
        *(project(i, needs=("skill:rust",)) for i in (3, 4, 5, 6)),
        *done,
        project(12, counts=(4, 7, 8)),
        project(13, depends_on=(14,)),
        project(14, depends_on=(13,)),
        project(15, end=TODAY + timedelta(days=2), milestones=ms(6, 10)),
        project(16, end=TODAY - timedelta(days=1), milestones=ms(9, 10)),
    ]
    return pf.scan(projects, today=TODAY, now=NOW)


def test_every_rule_fires_in_the_sample() -> None:
    assert {f.rule for f in findings()} == set(pf.RULES)


def test_every_risk_template_is_filled_by_its_findings() -> None:
    tables = {lang: table(path) for lang, path in TABLES.items()}
    for finding in findings():
        wire = finding.to_wire()
        for lang, strings in tables.items():
            for part in ("title", "detail", "suggestion"):
                key = f"risk.{finding.rule}.{part}"
                assert key in strings, (lang, key)
                missing = set(re.findall(r"\{(\w+)\}", strings[key])) - set(wire["params"])
                assert not missing, (lang, key, missing)
        assert "(overdue)" not in tables["zh"][f"risk.{finding.rule}.title"]
    for lang, strings in tables.items():
        assert "noticeText.risk_found" in strings, lang


def test_every_research_state_notice_is_worded() -> None:
    from room.actions.research import STATE_TEXT

    for lang, path in TABLES.items():
        strings = table(path)
        assert "noticeText.research_state" in strings, lang
        missing = {s for s in STATE_TEXT if f"researchNotice.{s}" not in strings}
        assert not missing, (lang, missing)
    # The Chinese words are the server's own, without its leading emoji.
    zh = table(TABLES["zh"])
    for state, text in STATE_TEXT.items():
        assert text.endswith(zh[f"researchNotice.{state}"]), state


def test_every_research_wait_reason_is_worded() -> None:
    """A running run that cannot step says why on its card (``waiting``, docs/cluster.md)."""
    from room.rules.research import WaitReason

    assert list(WaitReason)  # a reason to word: the scan below cannot pass on nothing
    for lang, path in TABLES.items():
        strings = table(path)
        assert "research.waiting" in strings, lang
        missing = {w.value for w in WaitReason if f"research.wait.{w.value}" not in strings}
        assert not missing, (lang, missing)


def test_the_task_ready_next_steps_are_the_servers() -> None:
    from room.actions import tasks
    from room.rules.entities import Member

    zh = table(TABLES["zh"])
    # The server's next steps (for people and for agents) are the page's Chinese words.
    for kind, who in (("human", "person"), ("agent", "agent")):
        owner = Member(1, 1, kind, None, "dev", "x", "x", "active")  # type: ignore[arg-type]
        step = tasks.next_step(owner, "start", SimpleNamespace(key="T1"))  # type: ignore[arg-type]
        assert step.people == zh[f"noticeText.next.start_{who}"]
    en = table(TABLES["en"])
    for key in (
        "task_ready",
        "criteria",
        "assumptions",
        "deps",
        "next.start_person",
        "next.start_agent",
    ):
        assert f"noticeText.{key}" in en, key


# -- every other coded notice (room/rules/notices.py) ---------------------------------------------

#: A leading emoji (the page shows the notice's kind as an icon instead) and Markdown backticks.
LEADING_SYMBOL = re.compile(r"^[^\w\s@{（(\-]+\s+")


def placeholders(template: str) -> set[str]:
    return set(re.findall(r"\{(\w+)(?::[^}]*)?\}", template))


def test_every_notice_text_has_the_servers_words_and_placeholders_in_both_languages() -> None:
    from room.rules.notices import TEXTS

    zh, en = table(TABLES["zh"]), table(TABLES["en"])
    for key, server in TEXTS.items():
        assert key in zh and key in en, key
        assert zh[key] == LEADING_SYMBOL.sub("", server).replace("`", ""), key
        assert placeholders(en[key]) == placeholders(server), key
        assert not re.search(r"[\u4e00-\u9fff]", en[key]), key


def test_every_notice_code_has_its_text_and_a_case_on_the_page() -> None:
    from room.rules.notices import BRAKE_REASONS, CODES, TEXTS

    page = (ROOT / "web" / "notices.js").read_text()
    for code in CODES:
        if code == "brake_tripped":
            continue  # worded per reason: noticeText.brake.<reason>
        assert f"noticeText.{code}" in TEXTS, code
    for code in CODES:
        family = code.split("_")[0] + "_"
        assert f'"{code}"' in page or f'startsWith("{family}")' in page, code
    assert {"agent_turn_cap", "token_budget", "step_limit", "repetition"} <= BRAKE_REASONS


def test_the_bodies_read_as_before_and_fill_every_placeholder() -> None:
    """The stored Chinese body (search, exports, agents' context) is the text the server wrote
    before notices had codes; each builder fills every placeholder it uses."""
    from room.rules import notices as n

    evidence = [
        {"kind": "artifact", "path": "a.py", "size": 3, "sha": "abc"},
        {"kind": "message", "seq": 4},
        {"kind": "command", "command": "pytest", "exit_code": 0},
    ]
    built = [
        n.lifecycle("paused", "Ann", reason="午休"),
        n.lifecycle("trashed", "Ann", days=30),
        n.lifecycle("paused", "Ann", restored_from="archived"),
        n.lifecycle("active", "Ann", cancelled=True),
        n.member_op("leave", "Ann", "dev"),
        n.brake_tripped("agent_turn_cap", {"agent_turns": 8, "cap": 8}, ["a", "b"]),
        n.brake_tripped("command_time", {"handle": "a", "secs": 31, "cap": 30.0}, ["a"]),
        n.brake_tripped("token_budget", {"tokens_used": 10, "budget": 5}, None),
        n.brake_tripped(
            "repetition", {"handle": "a", "what": "相同的回复", "same_reply": True}, []
        ),
        n.brake_interrupted("a", [("T1", "登录页")], 7, 3),
        n.brake_cleared(["a"]),
        n.turn_failed("a", "provider_timeout", "builtin/echo"),
        n.turn_failed("a", "weird"),
        n.restart_interrupted(None, 4),
        n.task_changes_requested("T1", 2, "@rev", "dev", "缺测试", "resubmit_agent"),
        n.task_accepted("T1", "登录页", 2, None),
        n.task_noted("task_reopened", "T1", "@ann", "再看看", "dev", "resubmit_person"),
        n.task_reassigned("T1", "@ann", "dev", "old"),
        n.tasks_handed_off("dev", ["T1", "T2"]),
        n.review_requested(
            "T1",
            1,
            "@dev",
            None,
            summary="好了",
            criteria=["能登录"],
            agent_reviewer=False,
            evidence=evidence,
        ),
        n.sync_receipt("@dev", "T1", [("需求", 2)], None),
        n.plan_started("@ann", [1, 2]),
        n.task_reviewed(
            "T1",
            2,
            "@rev",
            [{"n": 1, "text": "能登录", "passed": False, "evidence": "登录失败"}],
            outcome="changes",
            owner="dev",
            next_step="resubmit_agent",
        ),
        n.decision("decision_recorded", "@ann", "ADR-0001", "用 SQLite"),
        n.decision("decision_proposed", "@lead", "ADR-0002", "用 uv"),
        n.decision("decision_accepted", "@ann", "ADR-0002", "用 uv"),
        n.requirement_changed(
            "REQ-0001", 2, "@ann", "改成暗色", [("T1", "dev")], [{"task": "T2", "state": "done"}]
        ),
        n.requirement_change_failed("no_task", "没有任务 T9 (No task T9.)"),
    ]
    assert {b.code for b in built} == n.CODES - {
        "project_complete", "project_abandoned", "project_archived", "project_stop_unconfirmed",
        "member_pause", "member_resume", "member_stop", "task_blocked", "task_cancelled",
        "project_active",
    }  # fmt: skip
    for notice in built:
        assert "{" not in notice.body, notice
    bodies = [b.body for b in built]
    assert bodies[0] == (
        "⏸ 项目已暂停：不再派发给 AI 成员，人类消息会保留到恢复后再送达。原因：午休（Ann）"
    )
    assert bodies[3] == "↩️ 已取消停止，项目回到进行中。（Ann）"
    assert bodies[6] == (
        "⛔ 命令时间制动：@a 的一轮命令已运行 31 秒（上限 30 秒）。已暂停派发给 @a，其他成员照常"
        "工作；请人类查看后在界面上解除（解除后被打断的工作会继续）。"
    )
    assert bodies[11] == (
        "⚠️ @a 处理消息失败（模型 builtin/echo）：模型服务没有在限定时间内开始回答（请求已送达，"
        "为免重复计费没有重发）（provider_timeout）。下一步：稍后点「重试」；反复出现时请检查模型"
        "服务，或调大 provider_first_byte_timeout_secs（「重试」在这条通知上）。"
    )
    assert bodies[15] == "✅ 任务 `T1`「登录页」第 2 版通过验收（系统）。"
    assert bodies[19].splitlines() == [
        "🔍 任务 `T1` 第 1 版已提交评审（@dev）— 请人类在任务看板上评审", "",
        "提交说明：好了", "", "证据：", "- 📄 a.py（3 字节，sha256 abc…）", "- 💬 消息 #4",
        "- ⚙️ 命令 `pytest` 退出码 0", "", "验收标准：", "1. 能登录",
    ]  # fmt: skip
    assert bodies[21] == "▶️ @ann 开始了计划 v1、v2，就绪的任务开始派发。"
    assert bodies[22] == (
        "🔍 @rev 评审任务 `T1` 第 2 版：\n- ❌ 1. 能登录 — 登录失败\n\n结果：需要修改 — @dev\n\n"
        "下一步：修改后重新提交（新版本的每条标准都要重新评审）。"
    )
    assert bodies[26].split("\n\n") == [
        "📝 需求变更 REQ-0001 第 2 版（@ann）：\n> 改成暗色",
        "需同步的任务：`T1` @dev",
        "负责人请阅读新需求后确认同步（人类在任务看板上点「已同步」）。确认前任务保持「需同步需求」，"
        "不会继续推进。",
        "未中断（如需按新需求返工，请先 reopen）：`T2`（done）",
    ]
