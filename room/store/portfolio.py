"""Timelines, milestones, dependencies and the risk log (migration 0015_portfolio,
docs/portfolio.md). Raw SQL; the rules themselves are in the pure ``room.rules.portfolio``."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import date
from typing import Any

from room.rules.portfolio import Finding, Milestone, PortfolioProject, Timeline
from room.store.dialect import Connection


def _day(text: str | None) -> date | None:
    return date.fromisoformat(text) if text else None


def summary(conn: Connection, project_id: int) -> str:
    row = conn.execute(
        "SELECT summary FROM project_timelines WHERE project_id = :p", {"p": project_id}
    ).fetchone()
    return str(row[0]) if row else ""


def _ensure_row(conn: Connection, project_id: int, by: int | None, now: float) -> None:
    conn.execute(
        "INSERT INTO project_timelines (project_id, updated_at, updated_by) VALUES (:p, :now, :by)"
        " ON CONFLICT (project_id) DO UPDATE SET updated_at = :now, updated_by = :by",
        {"p": project_id, "now": now, "by": by},
    )


def set_summary(
    conn: Connection, project_id: int, text: str, *, by: int | None, now: float
) -> None:
    _ensure_row(conn, project_id, by, now)
    conn.execute(
        "UPDATE project_timelines SET summary = :s WHERE project_id = :p",
        {"p": project_id, "s": text},
    )


def milestones(conn: Connection, project_id: int) -> tuple[Milestone, ...]:
    rows = conn.execute(
        "SELECT name, due, status FROM milestones WHERE project_id = :p ORDER BY position, id",
        {"p": project_id},
    ).fetchall()
    return tuple(Milestone(r[0], date.fromisoformat(r[1]), r[2]) for r in rows)


def timeline(conn: Connection, project_id: int) -> Timeline:
    row = conn.execute(
        "SELECT start_date, end_date, hours_estimated, hours_actual FROM project_timelines"
        " WHERE project_id = :p",
        {"p": project_id},
    ).fetchone()
    found = milestones(conn, project_id)
    if row is None:
        return Timeline(milestones=found)
    return Timeline(_day(row[0]), _day(row[1]), row[2], row[3], found)


def save_timeline(
    conn: Connection, project_id: int, value: Timeline, *, by: int | None, now: float
) -> None:
    """Replace the project's timeline and milestones; a changed milestone count is recorded in
    ``milestone_counts`` (the scope-creep history)."""
    before = len(milestones(conn, project_id))
    _ensure_row(conn, project_id, by, now)
    conn.execute(
        "UPDATE project_timelines SET start_date = :s, end_date = :e, hours_estimated = :he,"
        " hours_actual = :ha WHERE project_id = :p",
        {
            "p": project_id,
            "s": value.start.isoformat() if value.start else None,
            "e": value.end.isoformat() if value.end else None,
            "he": value.hours_estimated,
            "ha": value.hours_actual,
        },
    )
    conn.execute("DELETE FROM milestones WHERE project_id = :p", {"p": project_id})
    conn.executemany(
        "INSERT INTO milestones (project_id, position, name, due, status, updated_at)"
        " VALUES (?, ?, ?, ?, ?, ?)",
        [
            (project_id, i, m.name, m.due.isoformat(), m.status, now)
            for i, m in enumerate(value.milestones)
        ],
    )
    count = len(value.milestones)
    if (count != before or not _has_counts(conn, project_id)) and (count or before):
        conn.execute(
            "INSERT INTO milestone_counts (project_id, count, at) VALUES (:p, :c, :now)",
            {"p": project_id, "c": count, "now": now},
        )


def _has_counts(conn: Connection, project_id: int) -> bool:
    return (
        conn.execute(
            "SELECT 1 FROM milestone_counts WHERE project_id = :p LIMIT 1", {"p": project_id}
        ).fetchone()
        is not None
    )


def set_actual_hours(
    conn: Connection, project_id: int, hours: float, *, by: int | None, now: float
) -> None:
    _ensure_row(conn, project_id, by, now)
    conn.execute(
        "UPDATE project_timelines SET hours_actual = :h WHERE project_id = :p",
        {"p": project_id, "h": hours},
    )


def milestone_counts(conn: Connection, project_id: int) -> tuple[int, ...]:
    return tuple(
        int(r[0])
        for r in conn.execute(
            "SELECT count FROM milestone_counts WHERE project_id = :p ORDER BY id",
            {"p": project_id},
        )
    )


# -- dependencies -------------------------------------------------------------------------------


def dependencies(conn: Connection, project_id: int) -> list[dict[str, Any]]:
    rows = conn.execute(
        "SELECT d.kind, d.target_project_id, d.name, p.name FROM project_dependencies d"
        " LEFT JOIN projects p ON p.id = d.target_project_id"
        " WHERE d.project_id = :p ORDER BY d.kind, d.name, d.target_project_id",
        {"p": project_id},
    ).fetchall()
    return [
        {"kind": r[0], "project_id": r[1], "name": r[3] if r[0] == "project" else r[2]}
        for r in rows
    ]


def set_dependencies(
    conn: Connection,
    project_id: int,
    items: Sequence[tuple[str, int | None, str]],
    now: float,
) -> None:
    """Replace what the project depends on: ``(kind, target project id or None, name)``."""
    conn.execute("DELETE FROM project_dependencies WHERE project_id = :p", {"p": project_id})
    conn.executemany(
        "INSERT OR IGNORE INTO project_dependencies"
        " (project_id, kind, target_project_id, name, created_at) VALUES (?, ?, ?, ?, ?)",
        [(project_id, kind, target, name, now) for kind, target, name in items],
    )


# -- tasks' estimated dates ---------------------------------------------------------------------


def set_task_dates(
    conn: Connection, task_id: int, start: date | None, end: date | None, *, now: float
) -> None:
    """Set a task's estimated dates; a change of the task like any other (``updated_at``, which
    :func:`last_activity` reads)."""
    conn.execute(
        "UPDATE tasks SET est_start = :s, est_end = :e, updated_at = :now WHERE id = :t",
        {
            "t": task_id,
            "now": now,
            "s": start.isoformat() if start else None,
            "e": end.isoformat() if end else None,
        },
    )


def task_dates(conn: Connection, project_id: int) -> dict[int, tuple[str | None, str | None]]:
    return {
        int(r[0]): (r[1], r[2])
        for r in conn.execute(
            "SELECT id, est_start, est_end FROM tasks WHERE project_id = :p", {"p": project_id}
        )
    }


# -- the portfolio ------------------------------------------------------------------------------


def last_activity(conn: Connection, project_id: int, created_at: float) -> float:
    """The last time people or agents changed the project — the one answer to "最后更新" for
    the index, the portfolio, STATUS.md and the silent / 可能归档 rules (docs/portfolio.md,
    "Activity"). Read from the records themselves, so no writer can forget to count: the latest
    authored message (system notices, such as the risk scan's own, do not count), a change of a
    message already posted (an edit, a deletion, a reaction added or removed, a requirement-change
    mark, a research card's progress: each is a sequenced ``message_updated`` event), a task
    change (its dates included), any memory write (every kind, session-log entries and summary
    edits included, and decisions: the memory version's time), a timeline or milestone edit, a
    dependency set, a lifecycle change (pause, resume, archive, restore …: the state's time),
    and any other act of a person or an agent the audit log recorded as done (a member added
    or changed, a route, the settings, the workspace, research …; not an export or a fork,
    which only read the project)."""
    times = [created_at]
    last = conn.execute(
        "SELECT created_at, seq FROM messages WHERE project_id = :p AND author_id IS NOT NULL"
        " ORDER BY seq DESC LIMIT 1",
        {"p": project_id},
    ).fetchone()
    if last is not None:
        times.append(float(last[0]))
    # Events are in commit order, so an update before the last authored message is older than
    # it: only the events after it are read (a short walk, not the project's whole stream).
    row = conn.execute(
        "SELECT max(created_at) FROM events WHERE project_id = :p AND seq > :after"
        " AND kind = 'message_updated'",
        {"p": project_id, "after": int(last[1]) if last is not None else 0},
    ).fetchone()
    if row is not None and row[0] is not None:
        times.append(float(row[0]))
    # Every other act of a person or an agent is in the audit log (members added or changed,
    # routes, settings, the workspace, research, a brake cleared …): the newest one that
    # succeeded and changed something (an export or a fork only read the project).
    row = conn.execute(
        "SELECT at FROM audit_events WHERE project_id = :p AND outcome = 'ok'"
        " AND actor_kind IN ('human', 'agent') AND action NOT IN ('project.export', 'project.fork')"
        " ORDER BY id DESC LIMIT 1",
        {"p": project_id},
    ).fetchone()
    if row is not None and row[0] is not None:
        times.append(float(row[0]))
    for sql in (
        "SELECT max(updated_at) FROM tasks WHERE project_id = :p",
        "SELECT updated_at FROM memory_versions WHERE project_id = :p",
        "SELECT updated_at FROM project_timelines WHERE project_id = :p",
        "SELECT max(created_at) FROM project_dependencies WHERE project_id = :p",
        "SELECT state_at FROM projects WHERE id = :p",
    ):
        row = conn.execute(sql, {"p": project_id}).fetchone()
        if row is not None and row[0] is not None:
            times.append(float(row[0]))
    return max(times)


def portfolio(conn: Connection, project_ids: Iterable[int] | None = None) -> list[PortfolioProject]:
    """What the rules read, for the given projects (default: every project not purged)."""
    if project_ids is None:
        ids = [
            int(r[0])
            for r in conn.execute("SELECT id FROM projects WHERE state != 'purged' ORDER BY id")
        ]
    else:
        ids = sorted(set(project_ids))
    out: list[PortfolioProject] = []
    for project_id in ids:
        row = conn.execute(
            "SELECT name, state, created_at, state_at FROM projects WHERE id = :p",
            {"p": project_id},
        ).fetchone()
        if row is None:
            continue
        deps = conn.execute(
            "SELECT kind, target_project_id, name FROM project_dependencies WHERE project_id = :p",
            {"p": project_id},
        ).fetchall()
        out.append(
            PortfolioProject(
                id=project_id,
                name=row[0],
                state=row[1],
                created_at=row[2],
                last_activity=last_activity(conn, project_id, row[2]),
                timeline=timeline(conn, project_id),
                completed_at=row[3] if row[1] == "complete" else None,
                milestone_counts=milestone_counts(conn, project_id),
                depends_on=tuple(int(d[1]) for d in deps if d[0] == "project"),
                needs=tuple(f"{d[0]}:{d[2]}" for d in deps if d[0] != "project"),
            )
        )
    return out


# -- the risk log -------------------------------------------------------------------------------


def record_findings(
    conn: Connection,
    findings: Sequence[Finding],
    scanned: Iterable[int],
    now: float,
) -> list[tuple[int, Finding]]:
    """Write a scan into the risk log of every scanned project: a standing finding is counted
    again, a new one inserted, one no longer found is resolved. Returns the new 🔴 findings
    (with their log ids) whose notice has not been posted yet."""
    found = {(f.project_id, f.rule): f for f in findings}
    fresh: list[tuple[int, Finding]] = []
    for project_id in scanned:
        open_rows = {
            r[1]: int(r[0])
            for r in conn.execute(
                "SELECT id, rule FROM risk_log WHERE project_id = :p AND resolved_at IS NULL",
                {"p": project_id},
            )
        }
        for rule, log_id in open_rows.items():
            if (project_id, rule) not in found:
                conn.execute(
                    "UPDATE risk_log SET resolved_at = :now WHERE id = :id",
                    {"id": log_id, "now": now},
                )
    for (project_id, rule), finding in found.items():
        wire = finding.to_wire()
        row = conn.execute(
            "SELECT id, noticed FROM risk_log WHERE project_id = :p AND rule = :r"
            " AND resolved_at IS NULL",
            {"p": project_id, "r": rule},
        ).fetchone()
        if row is not None:
            conn.execute(
                "UPDATE risk_log SET last_at = :now, scans = scans + 1, detail = :d WHERE id = :id",
                {"id": row[0], "now": now, "d": finding.detail},
            )
            continue
        cur = conn.execute(
            "INSERT INTO risk_log (project_id, rule, level, detail, suggestion, first_at, last_at)"
            " VALUES (:p, :r, :l, :d, :s, :now, :now) RETURNING id",
            {
                "p": project_id,
                "r": rule,
                "l": wire["level"],
                "d": finding.detail,
                "s": wire["suggestion"],
                "now": now,
            },
        )
        risk_id = int(cur.fetchone()[0])
        if finding.level == "red":
            fresh.append((risk_id, finding))
    return fresh


def mark_noticed(conn: Connection, log_id: int) -> None:
    conn.execute("UPDATE risk_log SET noticed = 1 WHERE id = :id", {"id": log_id})


def risk_log(conn: Connection, project_id: int, limit: int = 50) -> list[dict[str, Any]]:
    """Standing findings first (red before yellow), then the resolved ones, newest first."""
    rows = conn.execute(
        "SELECT id, rule, level, detail, suggestion, first_at, last_at, resolved_at, scans"
        " FROM risk_log WHERE project_id = :p"
        " ORDER BY resolved_at IS NOT NULL, level = 'yellow', last_at DESC, id DESC LIMIT :n",
        {"p": project_id, "n": limit},
    ).fetchall()
    keys = (
        "id",
        "rule",
        "level",
        "detail",
        "suggestion",
        "first_at",
        "last_at",
        "resolved_at",
        "scans",
    )
    return [dict(zip(keys, r, strict=True)) for r in rows]


def red_projects(conn: Connection) -> set[int]:
    return {
        int(r[0])
        for r in conn.execute(
            "SELECT DISTINCT project_id FROM risk_log WHERE resolved_at IS NULL AND level = 'red'"
        )
    }


PRIVATE_TABLES = (
    "risk_log",
    "milestone_counts",
    "milestones",
    "project_dependencies",
    "project_timelines",
)


def purge_project(conn: Connection, project_id: int) -> int:
    """Delete the project's timeline, milestones, dependencies and risk log (purge)."""
    removed = conn.execute(
        "DELETE FROM project_dependencies WHERE target_project_id = :p", {"p": project_id}
    ).rowcount
    for table in PRIVATE_TABLES:
        removed += conn.execute(
            f"DELETE FROM {table} WHERE project_id = :p", {"p": project_id}
        ).rowcount
    return removed
