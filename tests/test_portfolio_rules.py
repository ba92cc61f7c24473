"""Golden tests of room.rules.portfolio: every threshold, and one step past it, with a fixed
clock."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

import pytest

from room.rules import portfolio as pf
from room.rules.portfolio import Milestone, PortfolioProject, Timeline

TODAY = date(2026, 12, 3)
NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC).timestamp()
DAY = 86_400


def ms(done: int, total: int, due: date = TODAY) -> tuple[Milestone, ...]:
    return tuple(Milestone(f"m{i}", due, "done" if i < done else "pending") for i in range(total))


def project(
    pid: int = 1,
    *,
    state: str = "active",
    idle_days: float = 0,
    start: date | None = TODAY,
    end: date | None = None,
    milestones: tuple[Milestone, ...] = ms(1, 1),
    counts: tuple[int, ...] = (),
    depends_on: tuple[int, ...] = (),
    needs: tuple[str, ...] = (),
    hours: tuple[float | None, float | None] = (None, None),
    completed_at: float | None = None,
) -> PortfolioProject:
    return PortfolioProject(
        id=pid,
        name=f"p{pid}",
        state=state,
        created_at=NOW - 400 * DAY,
        last_activity=NOW - idle_days * DAY,
        timeline=Timeline(
            start=start,
            end=end,
            hours_estimated=hours[0],
            hours_actual=hours[1],
            milestones=milestones,
        ),
        completed_at=completed_at,
        milestone_counts=counts,
        depends_on=depends_on,
        needs=needs,
    )


def rules(projects: list[PortfolioProject], today: date = TODAY) -> list[tuple[int, str]]:
    return [(f.project_id, f.rule) for f in pf.scan(projects, today=today, now=NOW)]


# -- progress and bars --------------------------------------------------------------------------


def test_bars_at_0_50_100_are_exactly_20_characters() -> None:
    assert pf.bar(0) == "░" * 20
    assert pf.bar(50) == "█" * 10 + "░" * 10
    assert pf.bar(100) == "█" * 20
    assert pf.bar(99) == "█" * 19 + "░"  # floored: a bar is never full before 100 %
    for pct in range(101):
        assert len(pf.bar(pct)) == 20


def test_progress_is_done_over_all_floored() -> None:
    assert pf.progress(()) == 0
    assert pf.progress(ms(0, 4)) == 0
    assert pf.progress(ms(2, 4)) == 50
    assert pf.progress(ms(4, 4)) == 100
    assert pf.progress(ms(2, 3)) == 66
    in_progress = (Milestone("a", TODAY, "in_progress"), Milestone("b", TODAY, "done"))
    assert pf.progress(in_progress) == 50


def test_marks() -> None:
    assert [pf.MILESTONE_MARKS[s] for s in ("done", "in_progress", "pending")] == ["✅", "🔄", "⏳"]


# -- the Gantt's flags --------------------------------------------------------------------------


def test_overdue_starts_the_day_after_the_end_and_only_below_100() -> None:
    assert not pf.overdue(TODAY, TODAY, 0)  # on the end day: not yet
    assert pf.overdue(TODAY + timedelta(days=1), TODAY, 99)
    assert not pf.overdue(TODAY + timedelta(days=1), TODAY, 100)
    assert not pf.overdue(TODAY, None, 0)


def test_at_risk_below_3_days_and_below_70_percent() -> None:
    end = TODAY + timedelta(days=3)
    assert not pf.at_risk(TODAY, end, 0)  # exactly 3 days left: not at risk
    assert pf.at_risk(TODAY, end - timedelta(days=1), 69)  # 2 days left
    assert not pf.at_risk(TODAY, end - timedelta(days=1), 70)  # 70 % is enough
    assert pf.at_risk(TODAY, TODAY, 0)  # the end day itself
    assert not pf.at_risk(TODAY + timedelta(days=1), TODAY, 0)  # past the end: overdue instead


def test_conflict_at_exactly_3_projects_and_none_at_2() -> None:
    day = TODAY + timedelta(days=5)
    two = {1: (Milestone("a", day),), 2: (Milestone("b", day), Milestone("c", day))}
    assert pf.conflicts(two) == {}
    three = {**two, 3: (Milestone("d", day, "in_progress"),)}
    assert pf.conflicts(three) == {day: [1, 2, 3]}
    done = {**two, 3: (Milestone("d", day, "done"),)}
    assert pf.conflicts(done) == {}  # a done milestone takes no resources


# -- the cycle check ----------------------------------------------------------------------------


def test_cycle_of_three_projects() -> None:
    assert pf.cycles({1: [2], 2: [3], 3: [1], 4: [1]}) == [[1, 2, 3]]
    assert pf.cycles({1: [2], 2: [3], 3: []}) == []
    assert pf.cycles({1: [2], 2: [1], 5: [5]}) == [[1, 2], [5]]


def test_dependency_cycle_rule_on_three_projects() -> None:
    ring = [project(1, depends_on=(2,)), project(2, depends_on=(3,)), project(3, depends_on=(1,))]
    assert rules(ring) == [
        (1, "dependency_cycle"),
        (2, "dependency_cycle"),
        (3, "dependency_cycle"),
    ]
    chain = [project(1, depends_on=(2,)), project(2, depends_on=(3,)), project(3)]
    assert rules(chain) == []


# -- the eight rules: at the threshold (silent) and one step past it (fires) -------------------


def test_silent_fires_past_14_days() -> None:
    assert rules([project(idle_days=14)]) == []
    assert rules([project(idle_days=14 + 1 / DAY)]) == [(1, "silent")]


def test_no_milestones_fires_past_7_days_from_start() -> None:
    assert rules([project(start=TODAY - timedelta(days=7), milestones=())]) == []
    past = project(start=TODAY - timedelta(days=8), milestones=())
    assert rules([past]) == [(1, "no_milestones")]


def test_single_dependency_fires_above_3_projects() -> None:
    three = [project(i, needs=("skill:rust",)) for i in (1, 2, 3)]
    assert rules(three) == []
    four = [*three, project(4, needs=("skill:rust",))]
    assert rules(four) == [(i, "single_dependency") for i in (1, 2, 3, 4)]
    on_project = [project(9)] + [project(i, depends_on=(9,)) for i in (1, 2, 3, 4)]
    assert rules(on_project) == [(i, "single_dependency") for i in (1, 2, 3, 4)]


def test_estimates_off_needs_two_consecutive_completed_projects_past_50_percent() -> None:
    def done(pid: int, actual: float, at: float) -> PortfolioProject:
        return project(pid, state="complete", hours=(10, actual), completed_at=at)

    assert rules([done(1, 15, 1), done(2, 15, 2)]) == []  # exactly 50 %: not past it
    assert rules([done(1, 15.1, 1), done(2, 4.9, 2)]) == [(2, "estimates_off")]
    # not consecutive: a good estimate in between
    assert rules([done(1, 16, 1), done(2, 10, 2), done(3, 16, 3)]) == []


def test_scope_creep_fires_after_growing_past_50_percent_and_again() -> None:
    assert (
        rules([project(counts=(4, 6, 7))]) == []
    )  # 6 is exactly +50 %; 7 past it, no growth after
    assert rules([project(counts=(4, 7))]) == []  # past 50 %, not grown again
    assert rules([project(counts=(4, 7, 8))]) == [(1, "scope_creep")]
    assert pf.scope_crept((0, 2, 4, 5))  # the first count is the first non-zero one


def test_delay_risk_and_overdue_at_their_boundaries() -> None:
    three_days = project(end=TODAY + timedelta(days=3), milestones=ms(0, 10))
    assert rules([three_days]) == []
    two_days = project(end=TODAY + timedelta(days=2), milestones=ms(6, 10))
    assert rules([two_days]) == [(1, "delay_risk")]
    seventy = project(end=TODAY + timedelta(days=2), milestones=ms(7, 10))
    assert rules([seventy]) == []
    end_day = project(end=TODAY, milestones=ms(9, 10))
    assert rules([end_day]) == []  # on the end day: delay risk needs < 70 %, not overdue yet
    past = project(end=TODAY - timedelta(days=1), milestones=ms(9, 10))
    assert rules([past]) == [(1, "overdue")]
    finished = project(end=TODAY - timedelta(days=1), milestones=ms(10, 10))
    assert rules([finished]) == []


def test_closed_projects_are_not_scanned_for_live_rules() -> None:
    for state in ("archived", "complete", "abandoned", "trashed"):
        assert (
            rules(
                [
                    project(
                        state=state, idle_days=100, milestones=(), start=TODAY - timedelta(days=30)
                    )
                ]
            )
            == []
        )


def test_every_rule_has_a_level_and_a_suggestion() -> None:
    assert list(pf.RULES) == [
        "silent",
        "no_milestones",
        "single_dependency",
        "estimates_off",
        "scope_creep",
        "dependency_cycle",
        "delay_risk",
        "overdue",
    ]
    levels = {r.id: r.level for r in pf.RULES.values()}
    assert [k for k, v in levels.items() if v == "red"] == [
        "silent",
        "no_milestones",
        "dependency_cycle",
        "overdue",
    ]
    assert all(r.suggestion for r in pf.RULES.values())


def test_render_scan_groups_red_yellow_green() -> None:
    ps = [project(1, idle_days=20), project(2, counts=(2, 4, 5)), project(3)]
    text = pf.render_scan(ps, pf.scan(ps, today=TODAY, now=NOW))
    red, yellow, green = text.index("## 🔴 1"), text.index("## 🟡 1"), text.index("## 🟢 1")
    assert red < yellow < green
    assert "建议" in text and text.rstrip().endswith("- p3")


# -- input ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "code"),
    [
        ({"milestones": [{"name": "x", "date": "10000-01-01"}]}, "bad_date"),
        ({"milestones": [{"name": "x", "date": "1969-12-31"}]}, "date_out_of_range"),
        ({"milestones": [{"name": "x", "date": "2026-02-30"}]}, "bad_date"),
        ({"milestones": [{"name": "", "date": "2026-02-03"}]}, "bad_milestone"),
        ({"milestones": [{"name": "x", "date": "2026-02-03", "status": "late"}]}, "bad_milestone"),
        ({"start": "2026-03-01", "end": "2026-02-01"}, "end_before_start"),
        ({"hours_estimated": -1}, "bad_hours"),
        ({"hours_estimated": float("nan")}, "bad_hours"),
    ],
)
def test_bad_timelines_are_refused_with_a_code(data: dict[str, object], code: str) -> None:
    with pytest.raises(pf.TimelineError) as err:
        pf.parse_timeline(data)
    assert err.value.code == code
    assert err.value.http_status == 400


def test_gantt_text_lists_milestones_with_marks() -> None:
    p = project(
        end=TODAY - timedelta(days=1),
        milestones=(
            Milestone("设计", TODAY - timedelta(days=9), "done"),
            Milestone("实现", TODAY, "in_progress"),
        ),
    )
    text = pf.render_gantt(p, [], TODAY, conflict_days={TODAY: [1, 2, 3]})
    assert "█" * 10 + "░" * 10 + " 50%" in text
    assert "🔴 逾期" in text
    assert "✅ 2026-11-24 设计" in text
    assert "🔄 2026-12-03 实现 ⚠️ 资源冲突：3 个项目同日" in text


def test_index_sorts_flags_and_puts_closed_projects_last() -> None:
    rows = [
        pf.IndexRow(project(1, idle_days=2), "/w/1", "做 A 以便 B"),
        pf.IndexRow(project(2, idle_days=31), "/w/2", red=True),
        pf.IndexRow(project(3, idle_days=30), "/w/3"),
        pf.IndexRow(project(4, state="archived", idle_days=0), "/w/4", reason="不做了"),
        pf.IndexRow(project(5, state="paused", idle_days=1), "/w/5", reason="等设计稿"),
    ]
    text = pf.render_index(rows, today=TODAY, now=NOW)
    lines = [line for line in text.splitlines() if line.startswith("| ") and "/w/" in line]
    assert [line.split(" | ")[1] for line in lines] == [
        "`/w/5`",
        "`/w/1`",
        "`/w/3`",
        "`/w/2`",
        "`/w/4`",
    ]
    assert lines[0].startswith("| p5 |") and "已暂停" in lines[0] and "原因：等设计稿" in lines[0]
    assert lines[3].startswith("| 🔴 p2 |") and lines[3].endswith("可能归档 |")
    assert "可能归档" not in lines[2]  # exactly 30 days: not yet
    assert "已归档" in lines[4] and "可能归档" not in lines[4]
    assert text.index("## 甘特概览") < text.index("| 项目 | 目录 | 最后更新 | 状态 | 备注 |")
