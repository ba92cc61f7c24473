"""Across projects (docs/portfolio.md): timelines, summaries, dependencies, task dates, the
project index (``/api/index.md`` and ``/api/portfolio`` for the overview page), ``GANTT.md``,
the risk scan and a project's risk log.

Reads are open to the project's members (the index and the portfolio to a person, over the
projects they are in); edits are for owners (the actions refuse anyone else).
"""

from __future__ import annotations

import time
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from room.actions import portfolio as portfolio_actions
from room.actions import tasks as task_actions
from room.actions import workspaces as workspace_actions
from room.api.requests import body_of, core_of, identity, member_in, path_id
from room.errors import ForbiddenError
from room.rules import portfolio as pf
from room.rules.entities import Member, iso
from room.services import Services
from room.store import members as members_store
from room.store import portfolio as portfolio_store
from room.store import projects as projects_store

MARKDOWN = "text/markdown; charset=utf-8"


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TimelineIn(_In):
    # Checked by room.rules.portfolio.parse_timeline, which names the field and the rule it broke.
    start: Any = None
    end: Any = None
    hours_estimated: Any = None
    hours_actual: Any = None
    milestones: Any = None


class SummaryIn(_In):
    summary: str = Field(max_length=2000)


class DependenciesIn(_In):
    dependencies: list[Any] = Field(max_length=200)


class TaskDatesIn(_In):
    est_start: Any = None
    est_end: Any = None


async def _member(request: Request, *, mutation: bool = False) -> Member:
    who = await identity(request, mutation=mutation)
    return await member_in(core_of(request), who, path_id(request, "project_id"))


async def _person_projects(request: Request, *, mutation: bool = False) -> set[int]:
    """The projects the signed-in person is in (agents have no portfolio)."""
    who = await identity(request, mutation=mutation)
    if who.user is None:
        raise ForbiddenError("只有人类成员可以查看项目总览 (Only people see the portfolio.)",
                             code="human_only")  # fmt: skip
    user_id = who.user.id
    found = await core_of(request).db.read(lambda conn: projects_store.list_for_user(conn, user_id))
    return {p.id for p in found}


def _tasks(conn: Any, project_id: int) -> list[dict[str, Any]]:
    """The project's tasks for the Gantt: ordered by dependency (a task after what it needs)."""
    board = task_actions.board(conn, project_id)
    tasks = [
        {k: t[k] for k in ("key", "title", "state", "depends_on", "est_start", "est_end")}
        for t in board["tasks"]
    ]
    placed: list[dict[str, Any]] = []
    done: set[str] = set()
    pending = list(tasks)
    while pending:
        ready = [t for t in pending if all(d in done for d in t["depends_on"])] or pending[:1]
        for t in ready:
            placed.append(t)
            done.add(t["key"])
            pending.remove(t)
    return placed


async def get_timeline(request: Request) -> Response:
    member = await _member(request)
    project_id = member.project_id
    now = time.time()

    def read(conn: Any) -> dict[str, Any]:
        return portfolio_actions.timeline_wire(conn, project_id, pf.today_of(now)) | {
            "project_id": project_id,
            "today": pf.today_of(now).isoformat(),
            "tasks": _tasks(conn, project_id),
            "risks": [
                r | {"first_at": iso(r["first_at"]), "last_at": iso(r["last_at"]),
                     "resolved_at": iso(r["resolved_at"])}
                for r in portfolio_store.risk_log(conn, project_id)
            ],
        }  # fmt: skip

    return JSONResponse(await core_of(request).db.read(read))


async def put_timeline(request: Request) -> Response:
    member = await _member(request, mutation=True)
    data: TimelineIn = await body_of(request, TimelineIn)
    result = await portfolio_actions.update_timeline(
        core_of(request), member, member.project_id, data.model_dump(exclude_unset=True)
    )
    return JSONResponse(result)


async def put_summary(request: Request) -> Response:
    member = await _member(request, mutation=True)
    data: SummaryIn = await body_of(request, SummaryIn)
    result = await portfolio_actions.set_summary(
        core_of(request), member, member.project_id, data.summary
    )
    return JSONResponse(result)


async def put_dependencies(request: Request) -> Response:
    member = await _member(request, mutation=True)
    data: DependenciesIn = await body_of(request, DependenciesIn)
    result = await portfolio_actions.set_dependencies(
        core_of(request), member, member.project_id, data.dependencies
    )
    return JSONResponse(result)


async def put_task_dates(request: Request) -> Response:
    member = await _member(request, mutation=True)
    data: TaskDatesIn = await body_of(request, TaskDatesIn)
    key = str(request.path_params["task"])
    result = await portfolio_actions.set_task_dates(
        core_of(request), member, member.project_id, key, data.est_start, data.est_end
    )
    return JSONResponse(result)


async def get_risks(request: Request) -> Response:
    member = await _member(request)
    project_id = member.project_id
    rows = await core_of(request).db.read(
        lambda conn: portfolio_store.risk_log(conn, project_id, limit=200)
    )
    for r in rows:
        r["first_at"], r["last_at"] = iso(r["first_at"]), iso(r["last_at"])
        r["resolved_at"] = iso(r["resolved_at"])
    return JSONResponse({"project_id": project_id, "risks": rows})


async def post_risk_scan(request: Request) -> Response:
    visible = await _person_projects(request, mutation=True)
    result = await portfolio_actions.run_scan(core_of(request))
    return JSONResponse(portfolio_actions.scan_wire(result, visible))


async def gantt_md(request: Request) -> Response:
    member = await _member(request)
    project_id = member.project_id
    now = time.time()
    today = pf.today_of(now)

    def read(conn: Any) -> str:
        everyone = [p for p in portfolio_store.portfolio(conn) if p.live]
        mine = portfolio_store.portfolio(conn, [project_id])[0]
        days = pf.conflicts({p.id: p.timeline.milestones for p in everyone})
        return pf.render_gantt(mine, _tasks(conn, project_id), today, conflict_days=days)

    return Response(await core_of(request).db.read(read), media_type=MARKDOWN)


async def _rows(core: Services, ids: set[int]) -> list[pf.IndexRow]:
    def read(conn: Any) -> tuple[list[Any], list[pf.PortfolioProject], dict[int, str], set[int]]:
        projects = [p for p in (projects_store.get(conn, i) for i in sorted(ids)) if p]
        found = portfolio_store.portfolio(conn, ids)
        summaries = {i: portfolio_store.summary(conn, i) for i in ids}
        return projects, found, summaries, portfolio_store.red_projects(conn)

    projects, found, summaries, red = await core.db.read(read)
    by_id = {p.id: p for p in projects}
    return [
        pf.IndexRow(
            project=p,
            folder=str(workspace_actions.workspace_of(core.settings, by_id[p.id])),
            summary=summaries.get(p.id, ""),
            reason=by_id[p.id].state_reason,
            red=p.id in red,
        )
        for p in found
        if p.id in by_id
    ]


async def index_md(request: Request) -> Response:
    ids = await _person_projects(request)
    rows = await _rows(core_of(request), ids)
    now = time.time()
    return Response(pf.render_index(rows, today=pf.today_of(now), now=now), media_type=MARKDOWN)


async def get_portfolio(request: Request) -> Response:
    """What the overview page draws: the index rows in order, each with its timeline, and the
    resource conflicts."""
    ids = await _person_projects(request)
    core = core_of(request)
    who = await identity(request)
    assert who.user is not None
    user_id = who.user.id
    owned = await core.db.read(lambda conn: members_store.owned_projects(conn, user_id))
    rows = pf.sort_index(await _rows(core, ids))
    now = time.time()
    today = pf.today_of(now)
    live = {r.project.id: r.project.timeline.milestones for r in rows if r.project.live}
    items = []
    for row in rows:
        p = row.project
        tl = p.timeline
        pct = p.progress
        items.append(
            {
                "id": p.id,
                "name": p.name,
                "owner": p.id in owned,
                "state": p.state,
                "state_reason": row.reason,
                "folder": row.folder,
                "summary": row.summary,
                "last_activity": iso(p.last_activity),
                "red": row.red,
                "inactive": row.inactive(now),
                "progress": pct,
                "bar": pf.bar(pct),
                "overdue": pf.overdue(today, tl.end, pct),
                "at_risk": pf.at_risk(today, tl.end, pct),
                **tl.to_wire(),
            }
        )
    return JSONResponse(
        {
            "today": today.isoformat(),
            "projects": items,
            "conflicts": [
                {"date": day.isoformat(), "project_ids": ids_}
                for day, ids_ in pf.conflicts(live).items()
            ],
            "gantt_text": "\n".join(pf.gantt_summary([r.project for r in rows], today)),
        }
    )


endpoints = [
    Route("/api/index.md", index_md, methods=["GET"]),
    Route("/api/portfolio", get_portfolio, methods=["GET"]),
    Route("/api/risk-scan", post_risk_scan, methods=["POST"]),
    Route("/api/projects/{project_id:int}/timeline", get_timeline, methods=["GET"]),
    Route("/api/projects/{project_id:int}/timeline", put_timeline, methods=["PUT"]),
    Route("/api/projects/{project_id:int}/summary", put_summary, methods=["PUT"]),
    Route("/api/projects/{project_id:int}/dependencies", put_dependencies, methods=["PUT"]),
    Route("/api/projects/{project_id:int}/tasks/{task}/dates", put_task_dates, methods=["PUT"]),
    Route("/api/projects/{project_id:int}/risks", get_risks, methods=["GET"]),
    Route("/projects/{project_id:int}/gantt.md", gantt_md, methods=["GET"]),
]
