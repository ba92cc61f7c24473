"""Timelines, the index summary, dependencies, task dates and the risk scan (docs/portfolio.md).

Owners edit a project's timeline, summary and dependencies (refused with ``not_owner`` for
anyone else, ``project_closed`` once the project is archived, complete, abandoned or trashed);
every change is audited. The scan runs the pure rules of ``room.rules.portfolio`` over every project
on the server, writes each finding into its project's risk log, and posts one notice in a project
for each *new* 🔴 finding (a finding that stands from scan to scan is not announced again).
"""

from __future__ import annotations

import asyncio
import logging
import unicodedata
from collections.abc import Collection
from typing import Any

from room.actions.notices import insert_notice
from room.errors import ForbiddenError, NotFoundError
from room.rules import portfolio as pf
from room.rules.entities import Member
from room.services import Services
from room.store import Tx
from room.store import audit as audit_store
from room.store import portfolio as portfolio_store
from room.store import projects as projects_store
from room.store import tasks as tasks_store
from room.store.dialect import Connection

log = logging.getLogger(__name__)

MAX_SUMMARY_CHARS = 200
MAX_DEPENDENCIES = 50
RISK_SCAN_PERIOD_SECS = 86_400.0


def _require_owner(actor: Member) -> None:
    if not actor.is_owner:
        raise ForbiddenError(
            "只有项目所有者可以修改 (Only a project owner can change this.)", code="not_owner"
        )


def _audit(conn: Connection, tx: Tx, actor: Member, action: str, **detail: Any) -> None:
    audit_store.record(
        conn,
        now=tx.now,
        actor_kind=actor.kind,
        actor_id=actor.id,
        project_id=actor.project_id,
        action=action,
        outcome="ok",
        detail=detail,
    )


def timeline_wire(conn: Connection, project_id: int, today: Any) -> dict[str, Any]:
    """A project's timeline as the page and the API show it, with progress and flags."""
    tl = portfolio_store.timeline(conn, project_id)
    pct = pf.progress(tl.milestones)
    return tl.to_wire() | {
        "summary": portfolio_store.summary(conn, project_id),
        "progress": pct,
        "bar": pf.bar(pct),
        "overdue": pf.overdue(today, tl.end, pct),
        "at_risk": pf.at_risk(today, tl.end, pct),
        "dependencies": portfolio_store.dependencies(conn, project_id),
    }


async def update_timeline(
    core: Services, actor: Member, project_id: int, data: dict[str, Any]
) -> dict[str, Any]:
    """Change the timeline (start, estimated end, hours, milestones) as an owner sent it: a field
    left out keeps its value, ``milestones`` when given replaces the whole list."""
    _require_owner(actor)
    pf.parse_timeline(data)  # refuse bad input before taking the writer

    def job(conn: Connection, tx: Tx) -> dict[str, Any]:
        projects_store.require_open(conn, project_id)
        current = portfolio_store.timeline(conn, project_id).to_wire()
        current["milestones"] = [
            {"name": m["name"], "date": m["date"], "status": m["status"]}
            for m in current["milestones"]
        ]
        value = pf.parse_timeline(current | data)
        portfolio_store.save_timeline(conn, project_id, value, by=actor.id, now=tx.now)
        _audit(conn, tx, actor, "project.timeline", milestones=len(value.milestones),
               fields=sorted(data))  # fmt: skip
        return timeline_wire(conn, project_id, pf.today_of(tx.now))

    return await core.db.write(job, locks=(project_id,))


def clean_summary(text: str) -> str:
    flat = " ".join(unicodedata.normalize("NFC", text).split())
    if len(flat) > MAX_SUMMARY_CHARS:
        raise pf.TimelineError(
            f"概要最多 {MAX_SUMMARY_CHARS} 个字符 (the summary is at most {MAX_SUMMARY_CHARS} "
            "characters)",
            code="summary_too_long",
            field="summary",
        )
    return flat


async def set_summary(core: Services, actor: Member, project_id: int, text: str) -> dict[str, Any]:
    """The one-line summary the index shows (verb + object + purpose)."""
    _require_owner(actor)
    value = clean_summary(text)

    def job(conn: Connection, tx: Tx) -> dict[str, Any]:
        projects_store.require_open(conn, project_id)
        portfolio_store.set_summary(conn, project_id, value, by=actor.id, now=tx.now)
        _audit(conn, tx, actor, "project.summary", summary=value)
        return {"project_id": project_id, "summary": value}

    return await core.db.write(job, locks=(project_id,))


def _dependency(item: Any, index: int) -> tuple[str, int | None, str]:
    where = f"dependencies[{index}]"
    if not isinstance(item, dict) or item.get("kind") not in pf.DEPENDENCY_KINDS:
        raise pf.TimelineError(
            f"{where}：kind 须为 project / skill / external",
            code="bad_dependency",
            field=where,
            allowed=list(pf.DEPENDENCY_KINDS),
        )
    if item["kind"] == "project":
        target = item.get("project_id")
        if isinstance(target, bool) or not isinstance(target, int) or target < 1:
            raise pf.TimelineError(
                f"{where}.project_id：须为项目编号 (a project id)",
                code="bad_dependency",
                field=f"{where}.project_id",
            )
        return "project", target, ""
    name = " ".join(unicodedata.normalize("NFKC", str(item.get("name") or "")).split()).casefold()
    if not name or len(name) > pf.MAX_NAME_CHARS:
        raise pf.TimelineError(
            f"{where}.name：须为 1–{pf.MAX_NAME_CHARS} 个字符",
            code="bad_dependency",
            field=f"{where}.name",
        )
    return item["kind"], None, name


async def set_dependencies(
    core: Services, actor: Member, project_id: int, items: list[Any]
) -> dict[str, Any]:
    """Replace what the project depends on: other projects, skills, external projects."""
    _require_owner(actor)
    if len(items) > MAX_DEPENDENCIES:
        raise pf.TimelineError(
            f"依赖最多 {MAX_DEPENDENCIES} 个 (at most {MAX_DEPENDENCIES} dependencies)",
            code="too_many_dependencies",
        )
    parsed = [_dependency(item, i) for i, item in enumerate(items)]

    def job(conn: Connection, tx: Tx) -> dict[str, Any]:
        projects_store.require_open(conn, project_id)
        for kind, target, _ in parsed:
            if kind != "project":
                continue
            found = projects_store.get(conn, target or 0)
            if found is None or found.state == "purged":
                raise NotFoundError(
                    f"没有项目 #{target} (no such project)", code="no_project", project_id=target
                )
        portfolio_store.set_dependencies(conn, project_id, parsed, tx.now)
        _audit(conn, tx, actor, "project.dependencies", count=len(parsed))
        return {
            "project_id": project_id,
            "dependencies": portfolio_store.dependencies(conn, project_id),
        }

    return await core.db.write(job, locks=(project_id,))


async def set_task_dates(
    core: Services, actor: Member, project_id: int, key: str, start: Any, end: Any
) -> dict[str, Any]:
    """A task's estimated start and end (owners only; either may be cleared with null)."""
    _require_owner(actor)
    s, e = pf.parse_task_dates(start, end)

    def job(conn: Connection, tx: Tx) -> dict[str, Any]:
        projects_store.require_open(conn, project_id)
        task = tasks_store.task_by_key(conn, project_id, key)
        if task is None:
            raise NotFoundError(f"没有任务 {key} (no such task)", code="no_task", key=key)
        portfolio_store.set_task_dates(conn, task.id, s, e, now=tx.now)
        _audit(conn, tx, actor, "task.dates", key=key, start=start, end=end)
        return {
            "key": key,
            "est_start": s.isoformat() if s else None,
            "est_end": e.isoformat() if e else None,
        }

    return await core.db.write(job, locks=(project_id,))


# -- the risk scan ------------------------------------------------------------------------------


def notice_text(finding: pf.Finding) -> str:
    rule = pf.RULES[finding.rule]
    return f"🔴 风险扫描：{rule.title} — {finding.detail}。建议：{rule.suggestion}"


def scan_job(conn: Connection, tx: Tx, among: Collection[int] | None = None) -> dict[str, Any]:
    """Scan every project (not purged or trashed), write the risk logs, post the new 🔴 notices.
    ``among``: only these projects (the ones the write declared; one created since is scanned
    next time)."""
    projects = [
        p
        for p in portfolio_store.portfolio(conn)
        if p.state not in ("trashed", "purge_blocked") and (among is None or p.id in among)
    ]
    findings = pf.scan(projects, today=pf.today_of(tx.now), now=tx.now)
    fresh = portfolio_store.record_findings(conn, findings, [p.id for p in projects], tx.now)
    for log_id, finding in fresh:
        insert_notice(
            conn,
            tx,
            finding.project_id,
            notice_text(finding),
            {
                "risk": finding.rule,
                "risk_log_id": log_id,
                # Worded by the page in the reader's language (web/notices.js).
                "notice": {
                    "code": "risk_found",
                    "params": {"rule": finding.rule, **finding.to_wire()["params"]},
                },
            },
        )
        portfolio_store.mark_noticed(conn, log_id)
    return {
        "projects": projects,
        "findings": findings,
        "noticed": [f.project_id for _, f in fresh],
    }


def scan_wire(result: dict[str, Any], visible: set[int] | None) -> dict[str, Any]:
    """The scan grouped 🔴 / 🟡 / 🟢, limited to ``visible`` projects (None: all)."""
    projects = [p for p in result["projects"] if visible is None or p.id in visible]
    shown = {p.id for p in projects}
    findings = [f for f in result["findings"] if f.project_id in shown]
    names = {p.id: p.name for p in projects}
    flagged = {f.project_id for f in findings}

    def items(level: str) -> list[dict[str, Any]]:
        return [
            f.to_wire() | {"project": names[f.project_id]} for f in findings if f.level == level
        ]

    return {
        "red": items("red"),
        "yellow": items("yellow"),
        "green": [
            {"project_id": p.id, "project": p.name}
            for p in projects
            if p.live and p.id not in flagged
        ],
        "noticed": [i for i in result["noticed"] if i in shown],
        "text": pf.render_scan(projects, findings),
    }


async def run_scan(core: Services) -> dict[str, Any]:
    # Its notices may go to any project: every live one is read first and declared (docs/
    # storage.md, "Lock order: the project first").
    every = await core.db.read(projects_store.live_ids)
    return await core.db.write(lambda conn, tx: scan_job(conn, tx, set(every)), locks=every)


async def daily_scans(core: Services, period: float = RISK_SCAN_PERIOD_SECS) -> None:
    """The optional daily scan (setting ``risk_scan_daily``): once at start, then every day."""
    while True:
        try:
            result = await run_scan(core)
            log.info("risk scan: %d findings", len(result["findings"]))
        except Exception:  # pragma: no cover - a failed scan must not end the loop
            log.exception("risk scan failed")
        await asyncio.sleep(period)
