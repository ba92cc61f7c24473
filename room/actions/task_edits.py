"""Tasks by hand: a person creates, edits, reorders and moves tasks on the board.

Everything goes through the rules the lead's plan obeys. A new task is a plan of one item
(:func:`room.actions.plans.store_plan`: the same validation, the same requirement binding,
settling and dispatch). An edit is checked by :func:`room.rules.taskedits.validate_edit` against
the members and the project's whole dependency graph inside the write job; an owner change of a
handed-off task is the ``reassign`` event, and a moved card is the event
:func:`room.rules.tasks.move_event` names, fired like any other (who may, the note it needs).

Authority: creating is the plan's (people and the lead agent); editing and reordering are a
person's (``human_only`` for agents); estimated dates are the portfolio's (project owners).
"""

from __future__ import annotations

from typing import Any

from room.actions import plans as plan_actions
from room.actions import task_updates as update_actions
from room.actions import tasks as task_actions
from room.errors import BadRequestError, ForbiddenError, RoomError
from room.rules import portfolio as pf
from room.rules.entities import Member
from room.rules.lifecycle import MemberStatus
from room.rules.plans import OwnerInfo, PlanInvalidError
from room.rules.taskedits import (
    EditProblem,
    TaskEdit,
    TaskEditInvalidError,
    TaskFacts,
    order_problem,
    validate_edit,
)
from room.rules.tasks import TaskEvent, TaskState, move_event
from room.services import Services
from room.store import Tx
from room.store import audit as audit_store
from room.store import members as members_store
from room.store import portfolio as portfolio_store
from room.store import tasks as tasks_store
from room.store.dialect import Connection

_S, _E = TaskState, TaskEvent

# The field a plan problem concerns, for the form that shows it under that field.
_PLAN_FIELDS = {
    "duplicate_key": "key",
    "missing_criteria": "acceptance",
    "unknown_owner": "owner",
    "inactive_owner": "owner",
    "unknown_dependency": "depends_on",
    "self_dependency": "depends_on",
    "cycle": "depends_on",
}
_NOT_SET = object()


def _human(member: Member) -> None:
    if member.kind != "human":
        raise ForbiddenError(
            "只有人类可以手动修改任务 (Only a person edits tasks by hand.)", code="human_only"
        )


def _dates(
    start: Any, end: Any, member: Member, current: tuple[Any, Any] = (None, None)
) -> tuple[Any, Any] | None:
    """Parsed dates (or ``None`` when neither is given), refused for non-owners like
    ``PUT …/tasks/{key}/dates``; one not given keeps its ``current`` value (ISO text or None).
    A bad date is a problem under its field."""
    if start is _NOT_SET and end is _NOT_SET:
        return None
    if not member.is_owner:
        raise ForbiddenError(
            "只有项目所有者可以设定任务日期 (Only the project's owners set task dates.)",
            code="not_owner",
        )
    try:
        return pf.parse_task_dates(
            current[0] if start is _NOT_SET else start, current[1] if end is _NOT_SET else end
        )
    except RoomError as exc:
        field = str(exc.details.get("field") or "est_start")
        problem: EditProblem = {
            "code": exc.code,
            "field": field,
            "message": exc.message,
            "hint": "日期格式 YYYY-MM-DD，结束不早于开始 (Dates are YYYY-MM-DD; the end is not "
            "before the start.)",
        }
        raise TaskEditInvalidError([problem]) from None


def _next_key(existing: dict[str, int]) -> str:
    n = len(existing) + 1
    while f"task-{n}" in existing:
        n += 1
    return f"task-{n}"


async def create_task(
    core: Services,
    member: Member,
    item: dict[str, Any],
    *,
    est_start: Any = _NOT_SET,
    est_end: Any = _NOT_SET,
    start: bool | None = None,
) -> dict[str, Any]:
    """One task made by hand: a plan of one item (``key`` optional: ``task-N`` is picked).

    Refused with ``plan_invalid`` whose problems also name the ``field`` they concern.
    """
    if member.kind == "agent" and member.role != "lead":
        raise ForbiddenError(
            "只有人类和负责人（lead）可以创建任务 (Only people and the lead agent create tasks.)",
            code="plan_forbidden",
        )
    dates = _dates(est_start, est_end, member)
    project_id = member.project_id

    def job(conn: Connection, tx: Tx) -> dict[str, Any]:
        task_actions.check_open(conn, member)
        raw = dict(item)
        if not str(raw.get("key") or "").strip():
            raw["key"] = _next_key(tasks_store.task_keys(conn, project_id))
        fx = task_actions.Effects(project_id)
        try:
            result = plan_actions.store_plan(conn, tx, fx, member, {"items": [raw]}, start)
        except PlanInvalidError as exc:
            for problem in exc.problems:  # the form shows each under its field
                problem["field"] = problem.get("field") or _PLAN_FIELDS.get(problem["code"])
            raise
        task = result["tasks"][0]
        if dates is not None:
            portfolio_store.set_task_dates(conn, task["id"], *dates, now=tx.now)
        fx.flush(conn, tx)
        return {"plan": result["plan"], "task": task_actions.current_object(
            conn, project_id, task["id"])}  # fmt: skip

    return await core.db.write(job, locks=(member.project_id,))


def _facts(conn: Connection, task: tasks_store.TaskRow) -> TaskFacts:
    owner = members_store.get(conn, task.owner_id)
    handle = owner.handle.lower() if owner is not None else ""
    return TaskFacts(
        key=task.key,
        state=task.state,
        revision=task.revision,
        owner=handle,
        depends_on=tuple(key for key, _ in tasks_store.deps_of(conn, task.id)),
    )


def _apply(
    conn: Connection,
    tx: Tx,
    fx: task_actions.Effects,
    member: Member,
    task: tasks_store.TaskRow,
    edit: TaskEdit,
) -> tasks_store.TaskRow:
    if edit.title is not None:
        tasks_store.update_task(conn, task.id, tx.now, title=edit.title)
    if edit.acceptance is not None:
        tasks_store.replace_criteria(conn, task.project_id, task.id, edit.acceptance)
    if edit.depends_on is not None:
        keys = tasks_store.task_keys(conn, task.project_id)
        tasks_store.replace_deps(conn, task.project_id, task.id, [keys[k] for k in edit.depends_on])
    task = task_actions.reload_task(conn, task.id)
    if edit.owner is not None:
        found = members_store.by_handle(conn, task.project_id, edit.owner)
        assert found is not None  # the rules checked it is an active member
        reviewer = None if task.reviewer_id == found.id else task.reviewer_id
        tasks_store.update_task(conn, task.id, tx.now, owner_id=found.id, reviewer_id=reviewer)
        task = task_actions.reload_task(conn, task.id)
        actor = task_actions.actor_of(member)
        if task.state is _S.HANDOFF:
            task = task_actions.fire(conn, tx, fx, task, _E.REASSIGN, actor)
        elif task.state is _S.READY and not task.held:
            task_actions.dispatch_ready(conn, tx, fx, task)  # tell the new owner
    if edit.depends_on is not None and task.state in (_S.WAITING, _S.READY):
        task = task_actions.settle_task(conn, tx, fx, task)
    return task


async def edit_task(
    core: Services,
    member: Member,
    task_ref: str | int,
    patch: dict[str, Any],
    *,
    est_start: Any = _NOT_SET,
    est_end: Any = _NOT_SET,
) -> dict[str, Any]:
    """A person edits a task (title, acceptance, owner, dependencies, dates); returns it.

    Refused with ``task_edit_invalid`` listing every problem under its field; nothing changes.
    """
    _human(member)
    dates = _dates(est_start, est_end, member)
    if not patch and dates is not None:
        patch_checked: dict[str, Any] | None = None  # only dates: nothing for the rules
    else:
        patch_checked = patch
    project_id = member.project_id

    def job(conn: Connection, tx: Tx) -> dict[str, Any]:
        task_actions.check_open(conn, member)
        task = task_actions.find_task(conn, project_id, task_ref)
        members = task_actions.members_by_id(conn, project_id)
        owners = {
            m.handle.lower(): OwnerInfo(MemberStatus(m.status), m.kind) for m in members.values()
        }
        edit = TaskEdit()
        if patch_checked is not None:
            facts = _facts(conn, task)
            edit = validate_edit(
                facts, patch_checked, owners, tasks_store.dependency_graph(conn, project_id)
            )
        fx = task_actions.Effects(project_id)
        task = _apply(conn, tx, fx, member, task, edit)
        changed = edit.changed
        if dates is not None:  # again, with what the task has now for a date not given
            current = portfolio_store.task_dates(conn, project_id).get(task.id, (None, None))
            merged = _dates(est_start, est_end, member, current)
            assert merged is not None
            portfolio_store.set_task_dates(conn, task.id, *merged, now=tx.now)
            changed.append("dates")
        if changed:
            tasks_store.insert_task_event(
                conn, project_id=project_id, task_id=task.id, event="edited",
                from_state=str(task.state), to_state=str(task.state), revision=task.revision,
                actor_kind=member.kind, actor_id=member.id, note=", ".join(changed), now=tx.now,
            )  # fmt: skip
            audit_store.record(
                conn, now=tx.now, actor_kind=member.kind, actor_id=member.id,
                project_id=project_id, action="task.edit", outcome="ok",
                detail={"task_id": task.id, "key": task.key, "fields": changed},
            )  # fmt: skip
            fx.tasks.add(task.id)
        fx.flush(conn, tx)
        return task_actions.current_object(conn, project_id, task.id)

    return await core.db.write(job, locks=(member.project_id,))


async def reorder_tasks(core: Services, member: Member, keys: Any) -> dict[str, Any]:
    """A person puts the board in a new order: ``keys`` is every task key of the project, once."""
    _human(member)
    project_id = member.project_id

    def job(conn: Connection, tx: Tx) -> dict[str, Any]:
        task_actions.check_open(conn, member)
        rows = tasks_store.tasks_of(conn, project_id)
        problem = order_problem(keys, [t.key for t in rows])
        if problem is not None:
            raise BadRequestError(
                "顺序必须恰好列出本项目的每个任务一次 "
                "(The order must list every task of the project exactly once.)",
                code="bad_order",
                **problem,
            )
        by_key = {t.key: t for t in rows}
        tasks_store.set_positions(conn, [by_key[k].id for k in keys], tx.now)
        audit_store.record(
            conn, now=tx.now, actor_kind=member.kind, actor_id=member.id, project_id=project_id,
            action="task.reorder", outcome="ok", detail={"keys": list(keys)[:200]},
        )  # fmt: skip
        fx = task_actions.Effects(project_id)
        fx.tasks |= {t.id for t in rows if t.position != keys.index(t.key) + 1}
        fx.flush(conn, tx)
        return {"project_id": project_id, "order": list(keys)}

    return await core.db.write(job, locks=(member.project_id,))


async def move_task(
    core: Services,
    member: Member,
    task_ref: str | int,
    to: str,
    *,
    reason: str | None = None,
    owner: str | None = None,
) -> dict[str, Any]:
    """A card dragged to the column ``to``: the event that leads there is asked for like any
    other (``invalid_task_move`` when none does; then who may, and the note it needs)."""
    try:
        target = TaskState(to)
    except ValueError:
        raise BadRequestError(
            f"没有任务状态 {to[:40]} (No task state {to[:40]}.)",
            code="bad_state",
            allowed=[str(s) for s in TaskState],
        ) from None

    def read(conn: Connection) -> TaskEvent:
        task = task_actions.find_task(conn, member.project_id, task_ref)
        return move_event(task.state, target, task.sync_prior)

    event = await core.db.read(read)
    return await update_actions.change_task(
        core, member, task_ref, str(event), note=reason, owner=owner
    )
