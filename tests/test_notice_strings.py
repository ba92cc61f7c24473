"""Server notices and risk findings worded by the page: every risk rule has a title, detail and
suggestion in both string tables (web/strings-zh.js, web/strings-en.js), and every placeholder of
those templates is among the facts a real finding of that rule carries on the wire — so no
reader sees "{days}", and no Chinese reader sees "(overdue)"."""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path

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


def test_the_task_ready_next_steps_are_the_servers() -> None:
    import inspect

    from room.actions import tasks

    zh = table(TABLES["zh"])
    source = inspect.getsource(tasks.next_step)
    # The page's Chinese next steps are the server's own words (for people and for agents).
    assert f'"start": "{zh["noticeText.next.start_person"]}"' in source
    assert f'"start": "{zh["noticeText.next.start_agent"]}"' in source
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
