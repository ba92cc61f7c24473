"""Across projects: timelines, progress, the Gantt text and the risk rules (pure: no I/O, no clock).

Everything here takes ``today`` (a UTC :class:`~datetime.date`) and, where hours matter, ``now``
(epoch seconds) from the caller; ``docs/portfolio.md`` states each rule with its threshold, and
``tests/test_portfolio_rules.py`` checks every threshold and one step past it.

* :func:`progress` — done milestones / all milestones × 100, floored to a whole percent (so a
  comparison with 70 or 100 gives the same answer as the exact fraction); no milestones is 0.
* :func:`bar` — exactly :data:`BAR_WIDTH` characters, ``█`` done and ``░`` the rest.
* :func:`overdue` / :func:`at_risk` — the Gantt's 🔴 and 🟡.
* :func:`conflicts` — ⚠️ days on which :data:`CONFLICT_PROJECTS` or more projects have an open
  milestone.
* :func:`cycles` — the project dependency cycles (strongly connected components).
* :func:`scan` — the eight risk rules of :data:`RULES`, as :class:`Finding` objects.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from types import MappingProxyType
from typing import Any

from room.errors import BadRequestError
from room.rules.plans import strong_components

BAR_WIDTH = 20
CONFLICT_PROJECTS = 3  # ⚠️ when this many projects (or more) have milestones on one day
AT_RISK_DAYS = 3  # 🟡 when fewer days than this remain …
AT_RISK_PROGRESS = 70  # … and progress is below this percent
SILENT_DAYS = 14  # 🔴 no update for more than this many days
NO_MILESTONE_DAYS = 7  # 🔴 started more than this many days ago without a milestone
SINGLE_DEPENDENCY_PROJECTS = 3  # 🟡 more than this many projects depend on one thing
ESTIMATE_ERROR = 0.5  # 🟡 two consecutive completed projects off by more than this
SCOPE_GROWTH = 0.5  # 🟡 milestones grew by more than this over the first count, then again
INACTIVE_DAYS = 30  # the index flags "可能归档" past this many days without activity

MAX_MILESTONES = 200
MAX_NAME_CHARS = 200
MAX_HOURS = 1_000_000.0
MIN_YEAR, MAX_YEAR = 1970, 2999
DAY_SECS = 86_400

MILESTONE_STATUSES = ("done", "in_progress", "pending")
MILESTONE_MARKS: Mapping[str, str] = MappingProxyType(
    {"done": "✅", "in_progress": "🔄", "pending": "⏳"}
)
DEPENDENCY_KINDS = ("project", "skill", "external")

# Project states in which the timeline rules apply (work is expected to move).
LIVE_STATES = frozenset({"active", "paused", "stopping", "stop_unconfirmed"})
# States shown at the bottom of the index: the work is over or put away.
CLOSED_STATES = frozenset({"archived", "complete", "abandoned", "trashed", "purge_blocked"})


class TimelineError(BadRequestError):
    """A timeline, milestone or dependency that breaks a rule; ``field`` names where."""

    code = "bad_timeline"


# -- dates and input ----------------------------------------------------------------------------


def today_of(now: float) -> date:
    """The UTC calendar day of ``now`` (the caller reads the clock, not this module)."""
    return datetime.fromtimestamp(now, UTC).date()


def parse_date(value: Any, where: str) -> date:
    """``YYYY-MM-DD`` within years 1970–2999, or a :class:`TimelineError` naming ``where``."""
    if not isinstance(value, str) or len(value) != 10 or value[4] != "-" or value[7] != "-":
        raise TimelineError(
            f"{where}：日期须为 YYYY-MM-DD (a date must be YYYY-MM-DD)",
            code="bad_date",
            field=where,
            value=str(value)[:40],
        )
    try:
        parsed = date.fromisoformat(value)
    except ValueError:
        raise TimelineError(
            f"{where}：不是有效日期 (not a valid date)",
            code="bad_date",
            field=where,
            value=value,
        ) from None
    if not MIN_YEAR <= parsed.year <= MAX_YEAR:
        raise TimelineError(
            f"{where}：年份须在 {MIN_YEAR}–{MAX_YEAR} 之间 (year out of range)",
            code="date_out_of_range",
            field=where,
            value=value,
        )
    return parsed


def _optional_date(value: Any, where: str) -> date | None:
    return None if value is None or value == "" else parse_date(value, where)


def parse_hours(value: Any, where: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise TimelineError(f"{where}：须为数字 (must be a number)", code="bad_hours", field=where)
    if not 0 <= value <= MAX_HOURS:
        raise TimelineError(
            f"{where}：须在 0–{MAX_HOURS:.0f} 之间 (out of range)", code="bad_hours", field=where
        )
    return float(value)


@dataclass(frozen=True, slots=True)
class Milestone:
    name: str
    due: date
    status: str = "pending"

    def to_wire(self) -> dict[str, Any]:
        return {"name": self.name, "date": self.due.isoformat(), "status": self.status}


@dataclass(frozen=True, slots=True)
class Timeline:
    start: date | None = None
    end: date | None = None
    hours_estimated: float | None = None
    hours_actual: float | None = None
    milestones: tuple[Milestone, ...] = ()

    def to_wire(self) -> dict[str, Any]:
        return {
            "start": self.start.isoformat() if self.start else None,
            "end": self.end.isoformat() if self.end else None,
            "hours_estimated": self.hours_estimated,
            "hours_actual": self.hours_actual,
            "milestones": [m.to_wire() for m in self.milestones],
        }


def parse_milestone(item: Any, index: int) -> Milestone:
    where = f"milestones[{index}]"
    if not isinstance(item, dict):
        raise TimelineError(f"{where}：须为对象 (must be an object)", code="bad_milestone")
    unknown = sorted(set(item) - {"name", "date", "status"})
    if unknown:
        raise TimelineError(
            f"{where}：未知字段 (unknown fields) {', '.join(unknown)}",
            code="bad_milestone",
            field=where,
        )
    name = " ".join(str(item.get("name") or "").split())
    if not name or len(name) > MAX_NAME_CHARS:
        raise TimelineError(
            f"{where}.name：须为 1–{MAX_NAME_CHARS} 个字符 (name required, at most "
            f"{MAX_NAME_CHARS} characters)",
            code="bad_milestone",
            field=f"{where}.name",
        )
    status = item.get("status", "pending")
    if status not in MILESTONE_STATUSES:
        raise TimelineError(
            f"{where}.status：须为 {' / '.join(MILESTONE_STATUSES)}",
            code="bad_milestone",
            field=f"{where}.status",
            allowed=list(MILESTONE_STATUSES),
        )
    return Milestone(name, parse_date(item.get("date"), f"{where}.date"), status)


def parse_timeline(data: Mapping[str, Any]) -> Timeline:
    """Validate a timeline as sent by an owner (``start``, ``end``, ``hours_estimated``,
    ``hours_actual``, ``milestones``). Refuses with a :class:`TimelineError`; never guesses."""
    start = _optional_date(data.get("start"), "start")
    end = _optional_date(data.get("end"), "end")
    if start and end and end < start:
        raise TimelineError(
            "预计结束早于开始 (the estimated end is before the start)",
            code="end_before_start",
            field="end",
        )
    items = data.get("milestones") or []
    if not isinstance(items, list):
        raise TimelineError("milestones：须为列表 (must be a list)", code="bad_milestone")
    if len(items) > MAX_MILESTONES:
        raise TimelineError(
            f"里程碑最多 {MAX_MILESTONES} 个 (at most {MAX_MILESTONES} milestones)",
            code="too_many_milestones",
        )
    return Timeline(
        start=start,
        end=end,
        hours_estimated=parse_hours(data.get("hours_estimated"), "hours_estimated"),
        hours_actual=parse_hours(data.get("hours_actual"), "hours_actual"),
        milestones=tuple(parse_milestone(item, i) for i, item in enumerate(items)),
    )


def parse_task_dates(start: Any, end: Any) -> tuple[date | None, date | None]:
    """A task's estimated start and end (either may be absent; end not before start)."""
    s, e = _optional_date(start, "est_start"), _optional_date(end, "est_end")
    if s and e and e < s:
        raise TimelineError(
            "预计结束早于开始 (the estimated end is before the start)",
            code="end_before_start",
            field="est_end",
        )
    return s, e


# -- progress, bars, flags ----------------------------------------------------------------------


def progress(milestones: Sequence[Milestone]) -> int:
    """Done milestones / all milestones × 100, floored; 0 without milestones."""
    if not milestones:
        return 0
    done = sum(1 for m in milestones if m.status == "done")
    return done * 100 // len(milestones)


def bar(percent: int) -> str:
    """Exactly :data:`BAR_WIDTH` characters: ``█`` for the done part (floored), ``░`` the rest."""
    percent = max(0, min(100, int(percent)))
    filled = percent * BAR_WIDTH // 100
    return "█" * filled + "░" * (BAR_WIDTH - filled)


def overdue(today: date, end: date | None, percent: int) -> bool:
    """🔴: today is past the estimated end and progress is below 100 %."""
    return end is not None and today > end and percent < 100


def days_left(today: date, end: date) -> int:
    return (end - today).days


def at_risk(today: date, end: date | None, percent: int) -> bool:
    """🟡: fewer than :data:`AT_RISK_DAYS` days remain (not yet past the end) and progress is
    below :data:`AT_RISK_PROGRESS` %. Past the end it is :func:`overdue` instead."""
    if end is None or today > end:
        return False
    return days_left(today, end) < AT_RISK_DAYS and percent < AT_RISK_PROGRESS


def conflicts(milestones_by_project: Mapping[int, Sequence[Milestone]]) -> dict[date, list[int]]:
    """⚠️ resource conflicts: days on which at least :data:`CONFLICT_PROJECTS` projects have a
    milestone that is not done. A project counts once per day, however many it has there."""
    days: dict[date, set[int]] = {}
    for project_id, milestones in milestones_by_project.items():
        for m in milestones:
            if m.status != "done":
                days.setdefault(m.due, set()).add(project_id)
    return {day: sorted(ids) for day, ids in sorted(days.items()) if len(ids) >= CONFLICT_PROJECTS}


def cycles(edges: Mapping[int, Iterable[int]]) -> list[list[int]]:
    """The dependency cycles of a graph ``{project: projects it depends on}``: every strongly
    connected component with more than one project, or one that depends on itself. Each cycle is
    sorted; the list is sorted by its first id."""
    graph = {node: sorted(set(targets)) for node, targets in edges.items()}
    for targets in list(graph.values()):
        for target in targets:
            graph.setdefault(target, [])
    return sorted(
        sorted(component)
        for component in strong_components(sorted(graph), graph)
        if len(component) > 1 or component[0] in graph[component[0]]
    )


# -- the portfolio and its risks ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PortfolioProject:
    """What the rules read about one project (the store builds it; no I/O here)."""

    id: int
    name: str
    state: str
    created_at: float
    last_activity: float
    timeline: Timeline = field(default_factory=Timeline)
    completed_at: float | None = None
    milestone_counts: tuple[int, ...] = ()
    depends_on: tuple[int, ...] = ()  # other projects
    needs: tuple[str, ...] = ()  # "skill:<name>" / "external:<name>", normalised

    @property
    def progress(self) -> int:
        return progress(self.timeline.milestones)

    @property
    def live(self) -> bool:
        return self.state in LIVE_STATES


@dataclass(frozen=True, slots=True)
class Rule:
    id: str
    level: str  # "red" | "yellow"
    title: str
    suggestion: str


RULES: Mapping[str, Rule] = MappingProxyType(
    {
        rule.id: rule
        for rule in (
            Rule(
                "silent",
                "red",
                f"沉默：超过 {SILENT_DAYS} 天没有更新 (silent for more than {SILENT_DAYS} days)",
                "确认项目是否仍在进行；若已停止，暂停或归档并写明原因。",
            ),
            Rule(
                "no_milestones",
                "red",
                f"无里程碑：开始超过 {NO_MILESTONE_DAYS} 天仍没有里程碑 (no milestones)",
                "拆出 2–5 个带日期的里程碑，让进度可以衡量。",
            ),
            Rule(
                "single_dependency",
                "yellow",
                f"单点依赖：超过 {SINGLE_DEPENDENCY_PROJECTS} 个项目依赖同一技能或外部项目 "
                "(single dependency)",
                "为这个依赖找第二个来源或负责人，或错开依赖它的项目。",
            ),
            Rule(
                "estimates_off",
                "yellow",
                "估算偏差：连续两个已完成项目的工时误差超过 50% (estimates off)",
                "估算乘 1.5 倍安全系数：下一个项目按 1.5 倍排工时，并用最近完成项目的实际工时"
                "重新校准进行中项目的估算。",
            ),
            Rule(
                "scope_creep",
                "yellow",
                "范围蔓延：里程碑数比最初多出 50% 以上，之后又增加 (scope creep)",
                "冻结范围：把新增的里程碑移到下一阶段，或重新确认目标。",
            ),
            Rule(
                "dependency_cycle",
                "red",
                "循环依赖：项目之间互相依赖 (dependency cycle)",
                "打破循环：确定哪一方先交付，去掉反向依赖。",
            ),
            Rule(
                "delay_risk",
                "yellow",
                f"延期风险：距预计结束不足 {AT_RISK_DAYS} 天且进度低于 {AT_RISK_PROGRESS}% "
                "(delay risk)",
                "缩小本期范围或推迟预计结束日期，并告知相关人。",
            ),
            Rule(
                "overdue",
                "red",
                "已逾期：已过预计结束日期且进度未到 100% (overdue)",
                "重新排期：设定新的预计结束日期，或标记完成 / 放弃。",
            ),
        )
    }
)


# What a rule's title says in numbers: the page words a finding from its rule and these
# (web/strings-*.js risk.<rule>.*), in the reader's language; `title` and `detail` stay the
# server's Chinese for the CLI, index.md and an older page.
RULE_PARAMS: Mapping[str, Mapping[str, int]] = MappingProxyType(
    {
        "silent": {"days": SILENT_DAYS},
        "no_milestones": {"days": NO_MILESTONE_DAYS},
        "single_dependency": {"projects": SINGLE_DEPENDENCY_PROJECTS},
        "delay_risk": {"days": AT_RISK_DAYS, "progress": AT_RISK_PROGRESS},
    }
)


@dataclass(frozen=True, slots=True)
class Finding:
    project_id: int
    rule: str
    detail: str
    # The detail's facts, for wording it in another language (names, dates, numbers).
    params: Mapping[str, Any] = field(default_factory=dict)

    @property
    def level(self) -> str:
        return RULES[self.rule].level

    def to_wire(self) -> dict[str, Any]:
        rule = RULES[self.rule]
        return {
            "project_id": self.project_id,
            "rule": self.rule,
            "level": rule.level,
            "title": rule.title,
            "detail": self.detail,
            "suggestion": rule.suggestion,
            "params": {**RULE_PARAMS.get(self.rule, {}), **self.params},
        }


def estimate_error(estimated: float | None, actual: float | None) -> float | None:
    """|actual − estimated| / estimated, or None when either is missing or the estimate is 0."""
    if estimated is None or actual is None or estimated <= 0:
        return None
    return abs(actual - estimated) / estimated


def scope_crept(counts: Sequence[int]) -> bool:
    """Milestones grew by more than :data:`SCOPE_GROWTH` over the first (non-zero) count, and
    grew again after that."""
    counts = list(counts)
    while counts and counts[0] <= 0:
        counts.pop(0)
    if not counts:
        return False
    first = counts[0]
    for k, count in enumerate(counts):
        if count > first * (1 + SCOPE_GROWTH):
            return any(counts[j] > counts[j - 1] for j in range(k + 1, len(counts)))
    return False


def scan(projects: Sequence[PortfolioProject], *, today: date, now: float) -> list[Finding]:
    """Run the eight rules of :data:`RULES` over the portfolio. Findings are ordered by project
    id, then by the rule's order in :data:`RULES`."""
    findings: list[Finding] = []
    live = [p for p in projects if p.live]
    by_id = {p.id: p for p in projects}

    for p in live:
        idle = now - p.last_activity
        if idle > SILENT_DAYS * DAY_SECS:
            idle_days = int(idle // DAY_SECS)
            findings.append(
                Finding(p.id, "silent", f"{idle_days} 天没有更新", {"idle_days": idle_days})
            )
        started = p.timeline.start or today_of(p.created_at)
        if not p.timeline.milestones and (today - started).days > NO_MILESTONE_DAYS:
            findings.append(
                Finding(
                    p.id,
                    "no_milestones",
                    f"开始于 {started.isoformat()}，没有里程碑",
                    {"started": started.isoformat()},
                )
            )

    needed: dict[str, list[int]] = {}
    for p in live:
        for key in sorted(set(p.needs) | {f"project:{d}" for d in p.depends_on}):
            needed.setdefault(key, []).append(p.id)
    for key, ids in sorted(needed.items()):
        if len(ids) > SINGLE_DEPENDENCY_PROJECTS:
            kind, _, name = key.partition(":")
            if kind == "project":
                target = by_id.get(int(name))
                name = target.name if target else f"#{name}"
            for project_id in ids:
                findings.append(
                    Finding(
                        project_id,
                        "single_dependency",
                        f"{len(ids)} 个项目依赖 {name}",
                        {"count": len(ids), "name": name},
                    )
                )

    done = sorted(
        (p for p in projects if p.state == "complete" and p.completed_at is not None),
        key=lambda p: (p.completed_at or 0.0, p.id),
    )
    errors = [estimate_error(p.timeline.hours_estimated, p.timeline.hours_actual) for p in done]
    for i in range(1, len(done)):
        a, b = errors[i - 1], errors[i]
        if a is not None and b is not None and a > ESTIMATE_ERROR and b > ESTIMATE_ERROR:
            findings.append(
                Finding(
                    done[i].id,
                    "estimates_off",
                    f"{done[i - 1].name} 误差 {a:.0%}，{done[i].name} 误差 {b:.0%}",
                    {
                        "first": done[i - 1].name,
                        "first_error": f"{a:.0%}",
                        "second": done[i].name,
                        "second_error": f"{b:.0%}",
                    },
                )
            )

    for p in live:
        if scope_crept(p.milestone_counts):
            counts = " → ".join(str(c) for c in p.milestone_counts)
            findings.append(Finding(p.id, "scope_creep", f"里程碑数 {counts}", {"counts": counts}))

    graph = {p.id: [d for d in p.depends_on if d in by_id] for p in projects if p.live}
    for cycle in cycles(graph):
        names = " → ".join(by_id[i].name for i in cycle if i in by_id)
        for project_id in cycle:
            if project_id in by_id and by_id[project_id].live:
                findings.append(Finding(project_id, "dependency_cycle", names, {"names": names}))

    for p in live:
        end, pct = p.timeline.end, p.progress
        if at_risk(today, end, pct):
            assert end is not None
            left = days_left(today, end)
            findings.append(
                Finding(
                    p.id,
                    "delay_risk",
                    f"剩 {left} 天，进度 {pct}%",
                    {"left": left, "percent": pct},
                )
            )
        if overdue(today, end, pct):
            assert end is not None
            findings.append(
                Finding(
                    p.id,
                    "overdue",
                    f"预计结束 {end.isoformat()}，进度 {pct}%",
                    {"end": end.isoformat(), "percent": pct},
                )
            )

    order = {rule: i for i, rule in enumerate(RULES)}
    return sorted(findings, key=lambda f: (f.project_id, order[f.rule]))


LEVEL_MARKS: Mapping[str, str] = MappingProxyType({"red": "🔴", "yellow": "🟡", "green": "🟢"})


def render_scan(projects: Sequence[PortfolioProject], findings: Sequence[Finding]) -> str:
    """The scan as text, grouped 🔴 / 🟡 / 🟢 (🟢: live projects with no finding)."""
    names = {p.id: p.name for p in projects}
    out = ["# 风险扫描 (risk scan)", ""]
    for level in ("red", "yellow"):
        group = [f for f in findings if f.level == level]
        out.append(f"## {LEVEL_MARKS[level]} {len(group)}")
        for f in group:
            rule = RULES[f.rule]
            out.append(f"- **{names.get(f.project_id, f.project_id)}** {rule.title}：{f.detail}")
            out.append(f"  - 建议 (suggestion)：{rule.suggestion}")
        out.append("")
    flagged = {f.project_id for f in findings}
    green = [p for p in projects if p.live and p.id not in flagged]
    out.append(f"## {LEVEL_MARKS['green']} {len(green)}")
    out += [f"- {p.name}" for p in green]
    out.append("")
    return "\n".join(out)


# -- Gantt text ---------------------------------------------------------------------------------


def gantt_line(p: PortfolioProject, today: date) -> str:
    """``name  ████░░… 40%  start → end  🔴/🟡`` for one project."""
    pct = p.progress
    tl = p.timeline
    span = f"{tl.start.isoformat() if tl.start else '?'} → {tl.end.isoformat() if tl.end else '?'}"
    flag = ""
    if overdue(today, tl.end, pct):
        flag = " 🔴 逾期 (overdue)"
    elif at_risk(today, tl.end, pct):
        flag = " 🟡 有风险 (at risk)"
    return f"{p.name}  {bar(pct)} {pct}%  {span}{flag}"


def gantt_summary(projects: Sequence[PortfolioProject], today: date) -> list[str]:
    """The lines at the top of the index: one bar per live project, then ⚠️ conflicts."""
    live = [p for p in projects if p.live]
    out = ["```"]
    out += [gantt_line(p, today) for p in live] or ["（没有进行中的项目 / no live projects）"]
    out.append("```")
    names = {p.id: p.name for p in projects}
    for day, ids in conflicts({p.id: p.timeline.milestones for p in live}).items():
        out.append(
            f"- ⚠️ 资源冲突 (resource conflict) {day.isoformat()}："
            + "、".join(names[i] for i in ids)
        )
    return out


def render_gantt(
    p: PortfolioProject,
    tasks: Sequence[Mapping[str, Any]],
    today: date,
    *,
    conflict_days: Mapping[date, Sequence[int]] = MappingProxyType({}),
) -> str:
    """``GANTT.md`` of one project: its bar, its milestones with ✅ / 🔄 / ⏳, the conflicts on
    its milestone days, and its tasks with estimated dates (in dependency order)."""
    tl = p.timeline
    out = [f"# GANTT — {p.name}", "", f"_由数据库生成 (generated from the database) · {today}_", ""]
    out += ["```", gantt_line(p, today), "```", ""]
    out.append(f"进度 (progress) = 已完成里程碑 / 全部里程碑 = {p.progress}%")
    out += ["", "## 里程碑 (Milestones)", ""]
    if not tl.milestones:
        out.append("（暂无 / none）")
    for m in sorted(tl.milestones, key=lambda m: m.due):
        line = f"- {MILESTONE_MARKS[m.status]} {m.due.isoformat()} {m.name}"
        if m.status != "done" and p.id in conflict_days.get(m.due, ()):
            line += f" ⚠️ 资源冲突：{len(conflict_days[m.due])} 个项目同日"
        out.append(line)
    out += ["", "## 任务 (Tasks)", ""]
    dated = [t for t in tasks if t.get("est_start") or t.get("est_end")]
    if not dated:
        out.append("（没有带预计日期的任务 / no tasks with estimated dates）")
    for t in dated:
        out.append(
            f"- `{t['key']}` {t['title']} · {t.get('est_start') or '?'} → "
            f"{t.get('est_end') or '?'} · {t['state']}"
        )
    out.append("")
    return "\n".join(out)


# -- the project index --------------------------------------------------------------------------

STATE_LABELS: Mapping[str, str] = MappingProxyType(
    {
        "active": "进行中",
        "paused": "已暂停",
        "stopping": "停止中",
        "stop_unconfirmed": "停止未确认",
        "archived": "已归档",
        "complete": "已完成",
        "abandoned": "已放弃",
        "trashed": "回收站",
        "purge_blocked": "清除未完成",
    }
)


@dataclass(frozen=True, slots=True)
class IndexRow:
    project: PortfolioProject
    folder: str
    summary: str = ""
    reason: str | None = None
    red: bool = False  # an open 🔴 finding in the risk log

    def inactive(self, now: float) -> bool:
        """Flagged 可能归档: still live, and no activity for more than :data:`INACTIVE_DAYS`."""
        return self.project.live and now - self.project.last_activity > INACTIVE_DAYS * DAY_SECS


def sort_index(rows: Iterable[IndexRow]) -> list[IndexRow]:
    """Newest activity first; archived, complete, abandoned and trashed projects at the bottom."""
    return sorted(
        rows,
        key=lambda r: (r.project.state in CLOSED_STATES, -r.project.last_activity, r.project.id),
    )


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def render_index(rows: Sequence[IndexRow], *, today: date, now: float) -> str:
    """``index.md``: the Gantt summary at the top, then | 项目 | 目录 | 最后更新 | 状态 | 备注 |."""
    ordered = sort_index(rows)
    out = [
        "# 项目索引 (project index)",
        "",
        f"_由数据库生成 (generated from the database) · {today}_",
    ]
    out += ["", "## 甘特概览 (Gantt summary)", ""]
    out += gantt_summary([r.project for r in ordered], today)
    out += ["", "| 项目 | 目录 | 最后更新 | 状态 | 备注 |", "|---|---|---|---|---|"]
    for row in ordered:
        p = row.project
        name = ("🔴 " if row.red else "") + _cell(p.name)
        updated = today_of(p.last_activity).isoformat()
        notes = [_cell(row.summary)] if row.summary else []
        if row.reason:
            notes.append(f"原因：{_cell(row.reason)}")
        if row.inactive(now):
            notes.append("可能归档")
        state = STATE_LABELS.get(p.state, p.state)
        out.append(f"| {name} | `{_cell(row.folder)}` | {updated} | {state} | {'；'.join(notes)} |")
    out.append("")
    return "\n".join(out)
