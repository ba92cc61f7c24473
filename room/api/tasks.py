"""Plans, the task board, task events, reviews, decisions, requirement changes, and the generated
``STATUS.md`` of a project.

People use a session cookie (mutations need ``X-CSRF-Token``); agents their bearer token. Who may
do what is decided by the actions (``docs/tasks.md``): agents propose decisions but never accept
them, never review their own tasks, and never start a plan.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from room.actions import attempts as attempt_actions
from room.actions import decisions as decision_actions
from room.actions import plans as plan_actions
from room.actions import portfolio as portfolio_actions
from room.actions import task_updates as update_actions
from room.actions import tasks as task_actions
from room.actions import workspaces as workspace_actions
from room.api.requests import RowId, body_of, core_of, identity, member_in, message_of, path_id
from room.errors import NotFoundError
from room.infra.evidence import verify_artifact
from room.rules.entities import Member, Project, iso
from room.rules.portfolio import today_of
from room.rules.tasks import TaskState
from room.store import members as members_store
from room.store import memory as memory_store
from room.store import portfolio as portfolio_store
from room.store import projects as projects_store
from room.store import tasks as tasks_store

MAX_ITEMS = task_actions.MAX_EVIDENCE_ITEMS


class _In(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PlanIn(_In):
    goal: str | None = None
    items: Any = None  # checked by the plan validator, which reports every problem at once
    start: bool | None = None


class PlanStartIn(_In):
    plan_id: RowId | None = None


class VerdictIn(_In):
    criterion: RowId
    passed: bool
    evidence: str = Field(max_length=task_actions.MAX_NOTE_CHARS)
    artifacts: list[str] = Field(default_factory=list, max_length=MAX_ITEMS)
    messages: list[RowId] = Field(default_factory=list, max_length=MAX_ITEMS)


class TaskEventIn(_In):
    reason: str | None = Field(default=None, max_length=task_actions.MAX_NOTE_CHARS)
    summary: str | None = Field(default=None, max_length=task_actions.MAX_NOTE_CHARS)
    artifacts: list[str] = Field(default_factory=list, max_length=MAX_ITEMS)
    messages: list[RowId] = Field(default_factory=list, max_length=MAX_ITEMS)
    commands: list[RowId] = Field(default_factory=list, max_length=MAX_ITEMS)
    results: list[VerdictIn] | None = Field(default=None, max_length=100)
    owner: str | None = Field(default=None, max_length=64)


class SyncIn(_In):
    note: str | None = Field(default=None, max_length=task_actions.MAX_NOTE_CHARS)


class DecisionIn(_In):
    title: str
    context: str
    decision: str
    consequences: str = ""
    tasks: list[str] = Field(default_factory=list, max_length=MAX_ITEMS)
    supersedes: RowId | None = None
    alternatives: Any = None  # checked by the action: [{option, why_rejected}]
    constraints: str = ""


class ChangeIn(_In):
    tasks: list[str] | None = Field(default=None, max_length=MAX_ITEMS)


async def _member(request: Request, *, mutation: bool = False) -> Member:
    who = await identity(request, mutation=mutation)
    return await member_in(core_of(request), who, path_id(request, "project_id"))


def _verify(workspace: str | None, board: dict[str, Any]) -> None:
    """Check every recorded artifact against the file now on disk (runs in a worker thread):
    in the task's attempt worktree while it is not merged, else in the workspace."""
    for task in board["tasks"]:
        attempt = task.get("attempt")
        root = attempt["path"] if attempt and attempt["state"] != "merged" else workspace
        for item in task["evidence"]:
            if item["kind"] == "artifact":
                item["verification"] = verify_artifact(
                    root, item["real_path"], item["size"], item["sha256"]
                )
                item["verified"] = item["verification"] == "ok"


async def get_board(request: Request) -> Response:
    member = await _member(request)
    core = core_of(request)

    def read(conn: Any) -> tuple[Project | None, dict[str, Any]]:
        return projects_store.get(conn, member.project_id), task_actions.board(
            conn, member.project_id
        )

    project, board = await core.db.read(read)
    workspace = str(workspace_actions.workspace_of(core.settings, project)) if project else None
    await asyncio.to_thread(_verify, workspace, board)
    await attempt_actions.add_diff_stats(core, board["tasks"])
    return JSONResponse(board)


async def get_task(request: Request) -> Response:
    member = await _member(request)
    core = core_of(request)

    def read(conn: Any) -> dict[str, Any]:
        task = task_actions.find_task(conn, member.project_id, request.path_params["task"])
        data = task_actions.task_object(
            conn, task, task_actions.members_by_id(conn, member.project_id)
        )
        data["history"] = tasks_store.task_events(conn, task.id)
        return data

    data = await core.db.read(read)
    await attempt_actions.add_diff_stats(core, [data])
    return JSONResponse({"task": data})


async def post_plan(request: Request) -> Response:
    member = await _member(request, mutation=True)
    data: PlanIn = await body_of(request, PlanIn)
    raw = {"goal": data.goal, "items": data.items}
    result = await plan_actions.submit_plan(core_of(request), member, raw, start=data.start)
    return JSONResponse(result, status_code=201)


async def post_plan_start(request: Request) -> Response:
    member = await _member(request, mutation=True)
    data: PlanStartIn = await body_of(request, PlanStartIn)
    return JSONResponse(await plan_actions.start_plan(core_of(request), member, data.plan_id))


async def post_task_event(request: Request) -> Response:
    member = await _member(request, mutation=True)
    data: TaskEventIn = await body_of(request, TaskEventIn)
    core = core_of(request)
    task, event = request.path_params["task"], request.path_params["event"]
    if event == "review":
        verdicts = [
            update_actions.CriterionVerdict(
                v.criterion, v.passed, v.evidence, tuple(v.artifacts), tuple(v.messages)
            )
            for v in data.results or []
        ]
        return JSONResponse(
            {"task": await update_actions.review_task(core, member, task, verdicts)}
        )
    evidence = update_actions.EvidenceInput(
        (data.summary or "").strip() or None,
        tuple(data.artifacts),
        tuple(data.messages),
        tuple(data.commands),
    )
    result = await update_actions.change_task(
        core, member, task, event, note=data.reason, evidence=evidence, owner=data.owner
    )
    return JSONResponse({"task": result})


async def post_sync_receipt(request: Request) -> Response:
    member = await _member(request, mutation=True)
    data: SyncIn = await body_of(request, SyncIn)
    result = await update_actions.change_task(
        core_of(request), member, request.path_params["task"], "sync_receipt", note=data.note
    )
    return JSONResponse({"task": result})


async def get_decisions(request: Request) -> Response:
    member = await _member(request)
    log = await core_of(request).db.read(
        lambda conn: decision_actions.decision_log(conn, member.project_id)
    )
    return JSONResponse({"project_id": member.project_id, "decisions": log})


async def post_decision(request: Request) -> Response:
    member = await _member(request, mutation=True)
    data: DecisionIn = await body_of(request, DecisionIn)
    result = await decision_actions.propose_decision(
        core_of(request), member, title=data.title, context=data.context,
        decision=data.decision, consequences=data.consequences, task_keys=data.tasks,
        supersedes=data.supersedes, alternatives=data.alternatives, constraints=data.constraints,
    )  # fmt: skip
    return JSONResponse({"decision": result}, status_code=201)


async def post_decision_accept(request: Request) -> Response:
    member = await _member(request, mutation=True)
    await body_of(request, _In)
    number = path_id(request, "number")
    accepted = await decision_actions.accept_decision(core_of(request), member, number)
    return JSONResponse({"decision": accepted})


async def post_requirement_change(request: Request) -> Response:
    core, member, message_id, _row = await message_of(request, mutation=True)
    data: ChangeIn = await body_of(request, ChangeIn)
    result = await decision_actions.mark_requirement_change(core, member, message_id, data.tasks)
    body = {"message_id": message_id, "requirement_change": True, **result}
    return JSONResponse(body, status_code=200 if result["duplicate"] else 201)


async def status_md(request: Request) -> Response:
    member = await _member(request)
    core = core_of(request)
    project_id = member.project_id
    project = await core.db.read(lambda conn: projects_store.get(conn, project_id))
    if project is None:
        raise NotFoundError("no such project", code="no_project")
    # The workspace's commit (`git log --oneline -1`), read off the loop and cached.
    head = (await workspace_actions.workspace_info(core, project)).get("head")
    now = time.time()

    def read(conn: Any) -> str:
        current = projects_store.get(conn, project_id)
        assert current is not None
        members = {m.id: m for m in members_store.list_for_project(conn, project_id)}
        extra = StatusExtra(
            head=head,
            timeline=portfolio_actions.timeline_wire(conn, project_id, today_of(now)),
            risks=portfolio_store.risk_log(conn, project_id, limit=20),
            context=[
                f"{'约定' if e['kind'] == 'convention' else '事实'}：{e['body'].get('text', '')}"
                for kind in ("convention", "fact")
                for e in memory_store.entries(conn, project_id, kind, limit=8)
            ],
            last_activity=portfolio_store.last_activity(conn, project_id, current.created_at),
        )
        return render_status(
            current,
            task_actions.board(conn, project_id),
            decision_actions.decision_log(conn, project_id),
            members,
            now=now,
            extra=extra,
        )

    text = await core.db.read(read)
    return Response(text, media_type="text/markdown; charset=utf-8")


# -- STATUS.md (pure) ---------------------------------------------------------------------------

_STATE_LABELS = {
    TaskState.IN_PROGRESS: "进行中 (in progress)",
    TaskState.IN_REVIEW: "评审中 (in review)",
    TaskState.CHANGES_REQUESTED: "需要修改 (changes requested)",
    TaskState.NEEDS_SYNC: "需同步需求 (needs sync)",
    TaskState.BLOCKED: "受阻 (blocked)",
    TaskState.HANDOFF: "待移交 (handoff)",
    TaskState.READY: "就绪 (ready)",
    TaskState.WAITING: "等待依赖 (waiting)",
    TaskState.ACCEPTED: "已验收 (accepted)",
    TaskState.CANCELLED: "已取消 (cancelled)",
}


def _one_line(text: str | None, limit: int = 200) -> str:
    flat = " ".join((text or "").split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _handle(members: dict[int, Member], person: dict[str, Any] | None) -> str:
    if not person:
        return "—"
    member = members.get(person["id"])
    return f"@{member.handle}" if member else f"#{person['id']}"


@dataclass(frozen=True, slots=True)
class StatusExtra:
    """What STATUS.md shows beyond the board and the decisions (docs/portfolio.md, "STATUS.md")."""

    head: str | None = None  # the workspace's `git log --oneline -1`, when it is a repository
    timeline: dict[str, Any] = field(default_factory=dict)  # portfolio_actions.timeline_wire
    risks: list[dict[str, Any]] = field(default_factory=list)  # the risk log, newest first
    context: list[str] = field(default_factory=list)  # conventions and facts from memory
    last_activity: float | None = None  # portfolio_store.last_activity; None: the time generated


_PROJECT_STATES = {
    "active": "进行中 (active)",
    "paused": "已暂停 (paused)",
    "stopping": "停止中 (stopping)",
    "stop_unconfirmed": "停止未确认 (stop unconfirmed)",
    "archived": "已归档 (archived)",
    "complete": "已完成 (complete)",
    "abandoned": "已放弃 (abandoned)",
    "trashed": "回收站 (trashed)",
    "purge_blocked": "清除未完成 (purge blocked)",
    "purged": "已清除 (purged)",
}
_LEVELS = {"red": "🔴", "yellow": "🟡"}


def render_status(
    project: Project,
    board: dict[str, Any],
    decisions: list[dict[str, Any]],
    members: dict[int, Member],
    *,
    now: float,
    extra: StatusExtra | None = None,
) -> str:
    """STATUS.md, generated from the database (never edited by hand): last updated, the
    workspace's commit, the owners as PM, 🎯 goal, 📍 current state, 📋 the to-do list as
    checkboxes, 🔑 key context and decisions, 🛑 the pause reason or leftovers, 📅 the timeline,
    ⚠️ the risk log, and the open questions. No I/O; ``now`` is passed in."""
    extra = extra or StatusExtra()
    tasks = board["tasks"]
    out = [f"# STATUS — {_one_line(project.name)}", ""]
    out.append(f"_由数据库生成 (generated from the database) · {iso(now)}_")
    out.append("")
    updated = extra.last_activity if extra.last_activity is not None else now
    out.append(f"- 最后更新 (last updated)：{iso(updated)}")
    out.append(f"- 提交 (git commit)：`{extra.head}`" if extra.head else "- 提交 (git commit)：—")
    owners = [f"@{m.handle}" for m in members.values() if m.is_owner and m.status != "left"]
    out.append(f"- 负责人 (PM)：{'、'.join(owners) or '—'}")
    if extra.timeline.get("summary"):
        out.append(f"- 概要 (summary)：{_one_line(extra.timeline['summary'])}")
    out += ["", "## 🎯 目标 (Goal)", "", project.goal.strip() or "（尚未设定 / not set）", ""]
    accepted = board["counts"][str(TaskState.ACCEPTED)]
    live = len([t for t in tasks if t["state"] != TaskState.CANCELLED])
    out += ["## 📍 当前状态 (Current state)", ""]
    out.append(f"- 项目 (project)：{_PROJECT_STATES.get(project.state, project.state)}")
    plans = board["plans"]
    if plans:
        latest = plans[-1]
        started = "已开始 (started)" if latest["started"] else "等待人类开始 (waiting to start)"
        out.append(f"- 计划 (plan)：v{latest['version']}，{started}；共 {len(plans)} 版")
    else:
        out.append("- 计划 (plan)：尚未提交 (none yet)")
    out.append(f"- 任务 (tasks)：{accepted}/{live} 已验收 (accepted)")
    if board["plan_first"]:
        out.append("- 计划优先 (plan-first)：计划需人类开始后才派发")
    out += ["", "## 📋 待办 (To-do)", ""]
    if not tasks:
        out += ["（暂无任务 / no tasks yet）", ""]
    for state, label in _STATE_LABELS.items():
        group = [t for t in tasks if t["state"] == state]
        if not group:
            continue
        out += [f"### {label} · {len(group)}", ""]
        box = "[x]" if state == TaskState.ACCEPTED else "[ ]"
        for task in group:
            passed = sum(1 for c in task["criteria"] if c["passed"])
            line = (
                f"- {box} `{task['key']}` {_one_line(task['title'], 120)} — "
                f"{_handle(members, task['owner'])} · r{task['revision']} · "
                f"{passed}/{len(task['criteria'])} 标准通过"
            )
            if state == TaskState.CANCELLED:
                line = f"- {box} ~~`{task['key']}` {_one_line(task['title'], 120)}~~"
            if task.get("est_start") or task.get("est_end"):
                line += f" · 📅 {task.get('est_start') or '?'} → {task.get('est_end') or '?'}"
            if task["waiting_on"]:
                line += f" · 等待 (waiting on) {', '.join(task['waiting_on'])}"
            if task["held"]:
                line += " · 计划未开始 (plan not started)"
            out.append(line)
        out.append("")
    out += ["## 🔑 关键上下文与决定 (Key context and decisions)", ""]
    out += [f"- {_one_line(text)}" for text in extra.context]
    if not decisions and not extra.context:
        out.append("（暂无 / none）")
    for decision in decisions:
        latest_rev = decision["revisions"][-1] if decision["revisions"] else {}
        out.append(
            f"- **{decision['label']}** {_one_line(decision['title'], 120)} — {decision['status']}"
            f" · 第 {decision['revision']} 版 (r{decision['revision']})"
            + (f"：{_one_line(latest_rev.get('decision'))}" if latest_rev else "")
        )
    out += ["", "## 🛑 暂停原因与遗留 (Pause reason and leftovers)", ""]
    if project.state_reason:
        label = _PROJECT_STATES.get(project.state, project.state)
        out.append(f"- {label}，原因 (reason)：{_one_line(project.state_reason, 500)}")
    leftovers = [t for t in tasks if t["state"] not in (TaskState.ACCEPTED, TaskState.CANCELLED)]
    if project.state != "active" and leftovers:
        out.append(f"- 遗留任务 (leftovers)：{'、'.join(t['key'] for t in leftovers)}")
    if not project.state_reason and not (project.state != "active" and leftovers):
        out.append("（无 / none）")
    out += ["", "## 📅 时间线 (Timeline)", ""]
    out += _timeline_lines(extra.timeline)
    out += ["", "## ⚠️ 风险日志 (Risk log)", ""]
    if not extra.risks:
        out.append("（暂无 / none — 运行风险扫描：room risk）")
    for risk in extra.risks:
        mark = "✔️ 已解除" if risk["resolved_at"] else _LEVELS.get(risk["level"], "")
        out.append(
            f"- {mark} {risk['rule']}：{_one_line(risk['detail'])} · 首次 {iso(risk['first_at'])}"
            f" · 扫描 {risk['scans']} 次 · 建议：{risk['suggestion']}"
        )
    out += ["", "## 待解决的问题 (Open questions)", ""]
    questions = _open_questions(tasks, decisions, members)
    out += questions or ["（没有 / none）"]
    out.append("")
    return "\n".join(out)


_MARKS = {"done": "✅", "in_progress": "🔄", "pending": "⏳"}


def _timeline_lines(tl: dict[str, Any]) -> list[str]:
    if not tl:
        return ["（尚未设定 / not set）"]
    out = [
        f"- 开始 (start)：{tl.get('start') or '—'} · 预计结束 (estimated end)：{tl.get('end') or '—'}",
        f"- 进度 (progress)：`{tl['bar']}` {tl['progress']}%"
        + (" 🔴 逾期 (overdue)" if tl.get("overdue") else "")
        + (" 🟡 有风险 (at risk)" if tl.get("at_risk") else ""),
        f"- 工时 (hours)：预计 {_hours(tl.get('hours_estimated'))} · 实际 "
        f"{_hours(tl.get('hours_actual'))}",
    ]
    for m in tl.get("milestones", []):
        out.append(f"- {_MARKS[m['status']]} {m['date']} {_one_line(m['name'], 120)}")
    for dep in tl.get("dependencies", []):
        out.append(f"- 依赖 (depends on) {dep['kind']}：{dep['name']}")
    return out


def _hours(value: float | None) -> str:
    return "—" if value is None else f"{value:g} h"


def _open_questions(
    tasks: list[dict[str, Any]], decisions: list[dict[str, Any]], members: dict[int, Member]
) -> list[str]:
    lines = []
    for task in tasks:
        key, owner = f"`{task['key']}`", _handle(members, task["owner"])
        state = task["state"]
        if state == TaskState.BLOCKED:
            lines.append(f"- {key} 受阻 (blocked)，{owner}：{_one_line(task['note'])}")
        elif state == TaskState.NEEDS_SYNC:
            waits = ", ".join(f"{s['decision']} r{s['revision']}" for s in task["sync"])
            lines.append(f"- {key} 等待 {owner} 确认需求变更 (sync receipt)：{waits}")
        elif state == TaskState.HANDOFF:
            lines.append(f"- {key} 负责人已离开，需要人类重新指派 (reassign)")
        elif state == TaskState.CHANGES_REQUESTED:
            lines.append(f"- {key} 需要修改 (changes requested)：{_one_line(task['note'])}")
        elif state == TaskState.IN_REVIEW:
            missing = ", ".join(str(n) for n in task["missing"])
            lines.append(f"- {key} 等待评审 (awaiting review)，未通过的标准：{missing}")
    for decision in decisions:
        if decision["status"] == "proposed":
            lines.append(
                f"- {decision['label']}「{_one_line(decision['title'], 120)}」等待人类接受"
            )
    return lines


endpoints = [
    Route("/api/projects/{project_id:int}/tasks", get_board, methods=["GET"]),
    Route("/api/projects/{project_id:int}/tasks/{task}", get_task, methods=["GET"]),
    Route(
        "/api/projects/{project_id:int}/tasks/{task}/sync-receipt",
        post_sync_receipt,
        methods=["POST"],
    ),
    Route("/api/projects/{project_id:int}/tasks/{task}/{event}", post_task_event, methods=["POST"]),
    Route("/api/projects/{project_id:int}/plan", post_plan, methods=["POST"]),
    Route("/api/projects/{project_id:int}/plan/start", post_plan_start, methods=["POST"]),
    Route("/api/projects/{project_id:int}/decisions", get_decisions, methods=["GET"]),
    Route("/api/projects/{project_id:int}/decisions", post_decision, methods=["POST"]),
    Route(
        "/api/projects/{project_id:int}/decisions/{number:int}/accept",
        post_decision_accept,
        methods=["POST"],
    ),
    Route(
        "/api/messages/{message_id:int}/requirement-change",
        post_requirement_change,
        methods=["POST"],
    ),
    Route("/projects/{project_id:int}/status.md", status_md, methods=["GET"]),
]
