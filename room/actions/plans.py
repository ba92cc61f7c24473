"""Plans: a project's goal delivered to its lead, a plan validated as a whole and stored as tasks,
and the start of a plan-first plan.

A plan is checked by the pure :func:`room.rules.plans.validate_plan` against the project's members
as they are inside the write job, so nothing is stored unless the whole plan is valid. A later plan
adds tasks to the project: its keys must be new, and its items may depend on existing tasks by key.
Every task starts ``waiting`` (history: ``created``) and settles at once: tasks whose dependencies
are all accepted become ``ready`` and are dispatched to their owners — unless the project is in
plan-first mode (``projects.settings_json`` ``plan_first: true``), where the plan's tasks are held
and nothing is dispatched until a person starts the plan.
"""

from __future__ import annotations

from typing import Any

from room.actions import tasks as task_actions
from room.errors import ForbiddenError, NotFoundError
from room.rules import notices
from room.rules.entities import Member
from room.rules.lifecycle import MemberStatus
from room.rules.plans import OwnerInfo, PlanInvalidError, PlanProblem, ValidatedPlan, validate_plan
from room.rules.tasks import TaskState
from room.services import Services
from room.store import Tx
from room.store import audit as audit_store
from room.store import brakes as brakes_store
from room.store import decisions as decisions_store
from room.store import members as members_store
from room.store import messages as messages_store
from room.store import notifications as notifications_store
from room.store import projects as projects_store
from room.store import tasks as tasks_store
from room.store import users as users_store
from room.store.dialect import Connection

GOAL_TXN = "goal-{project_id}"
REQUIREMENT_TITLE = "项目需求 (Project requirement)"


def plan_first(conn: Connection, project_id: int) -> bool:
    return bool(projects_store.settings(conn, project_id).get("plan_first", False))


def _split_external(
    raw: Any, existing: dict[str, int]
) -> tuple[Any, dict[str, list[str]], list[PlanProblem]]:
    """Take dependencies on existing tasks out of the plan (the validator knows only the plan's
    own items) and report keys that clash with existing tasks."""
    if not isinstance(raw, dict) or not isinstance(raw.get("items"), list):
        return raw, {}, []
    # Only string keys can clash; anything else is the validator's to report (and a list or a
    # dict would not even hash).
    own = {
        key for i in raw["items"] if isinstance(i, dict) and isinstance(key := i.get("key"), str)
    }
    items, external, problems = [], {}, []
    for index, item in enumerate(raw["items"]):
        if not isinstance(item, dict):
            items.append(item)
            continue
        key, deps = item.get("key"), item.get("depends_on")
        if isinstance(key, str) and key in existing:
            problems.append(
                PlanProblem(
                    code="duplicate_key",
                    item=key,
                    index=index,
                    message=f"条目 {key} 与已有任务重名 (Item {key} has the key of an existing "
                    "task.)",
                    hint="换一个新的 key；已有任务不会被计划修改 "
                    "(Use a new key; a plan does not change existing tasks.)",
                )
            )
        if isinstance(deps, list) and isinstance(key, str):
            outside = [d for d in deps if isinstance(d, str) and d in existing and d not in own]
            if outside:
                external[key] = outside
                item = {**item, "depends_on": [d for d in deps if d not in outside]}
        items.append(item)
    return {**raw, "items": items}, external, problems


def _validate(
    conn: Connection, project_id: int, raw: Any
) -> tuple[ValidatedPlan, dict[str, list[str]], dict[str, Member]]:
    members = task_actions.members_by_id(conn, project_id)
    disabled = users_store.disabled_members(conn, project_id)
    owners = {
        m.handle.lower(): OwnerInfo(MemberStatus(m.status), m.kind, m.id in disabled)
        for m in members.values()
    }
    by_handle = {
        m.handle.lower(): m
        for m in members.values()
        if m.status == "active" and m.id not in disabled
    }
    stripped, external, clashes = _split_external(raw, tasks_store.task_keys(conn, project_id))
    try:
        validated = validate_plan(stripped, owners)
    except PlanInvalidError as exc:
        problems = exc.problems + clashes
        problems.sort(
            key=lambda p: (p["code"] == "cycle", -1 if p["index"] is None else p["index"])
        )
        raise PlanInvalidError(problems) from None
    if clashes:
        raise PlanInvalidError(clashes)
    return validated, external, by_handle


def requirement_decision(
    conn: Connection, tx: Tx, fx: task_actions.Effects, fallback: str | None
) -> decisions_store.DecisionRow:
    """The project's requirement decision, created if missing: accepted, revision 1 holding the
    project's goal in its creator's words (else ``fallback``, e.g. the plan's goal), authored by
    the project's creator."""
    found = decisions_store.requirement_decision(conn, fx.project_id)
    if found is not None:
        return found
    project = projects_store.get(conn, fx.project_id)
    goal = (project.goal if project else "").strip() or (fallback or "").strip()
    creator = project_creator(conn, fx.project_id)
    author = creator.id if creator else None
    row = decisions_store.insert_decision(
        conn, project_id=fx.project_id, kind="requirement", title=REQUIREMENT_TITLE,
        status="accepted", created_by=author, accepted_by=author, now=tx.now,
    )  # fmt: skip
    decisions_store.insert_decision_revision(
        conn, project_id=fx.project_id, decision_id=row.id, revision=1,
        context="项目目标 (the project's goal)", decision=goal or "（尚未写明 / not stated）",
        consequences="计划中的任务都绑定到此需求 (Every planned task is bound to it.)",
        author_id=author, now=tx.now, original_text=goal or None,
    )  # fmt: skip
    fx.decisions.add(row.id)
    current = decisions_store.get_decision(conn, row.id)
    assert current is not None
    return current


def project_creator(conn: Connection, project_id: int) -> Member | None:
    row = conn.execute("SELECT created_by FROM projects WHERE id = :id", {"id": project_id})
    found = row.fetchone()
    if found is None or found[0] is None:
        return None
    return members_store.for_user(conn, project_id, int(found[0]))


def store_plan(
    conn: Connection,
    tx: Tx,
    fx: task_actions.Effects,
    actor: Member,
    raw: Any,
    start: bool | None,
) -> dict[str, Any]:
    """Validate and store a plan inside a write job (see the module docstring)."""
    project_id = fx.project_id
    validated, external, owners = _validate(conn, project_id, raw)
    waiting_for_start = plan_first(conn, project_id)
    started = not waiting_for_start if start is None or actor.kind != "human" else start
    plan_json = {
        "goal": validated.goal,
        "items": [
            {**item.model_dump(mode="json"), "external_depends_on": external.get(item.key, [])}
            for item in validated.items
        ],
    }
    plan_id, version = tasks_store.insert_plan(
        conn, project_id=project_id, goal=validated.goal, plan=plan_json,
        submitted_by=actor.id, started=started, now=tx.now,
    )  # fmt: skip
    requirement = requirement_decision(conn, tx, fx, validated.goal)
    lead_id = projects_store.lead_of(conn, project_id)
    existing = tasks_store.task_keys(conn, project_id)
    created: dict[str, int] = {}
    for item in validated.items:
        owner = owners[item.owner]
        reviewer = actor.id if actor.id != owner.id else lead_id
        task_id = tasks_store.insert_task(
            conn, project_id=project_id, plan_id=plan_id, key=item.key, title=item.title,
            owner_id=owner.id, reviewer_id=reviewer if reviewer != owner.id else None,
            state=TaskState.WAITING, held=not started, assumptions=item.assumptions, now=tx.now,
        )  # fmt: skip
        created[item.key] = task_id
        tasks_store.insert_criteria(conn, project_id, task_id, item.acceptance)
        deps = [created[d] for d in item.depends_on] + [
            existing[d] for d in external.get(item.key, [])
        ]
        tasks_store.insert_deps(conn, project_id, task_id, deps)
        tasks_store.insert_task_event(
            conn, project_id=project_id, task_id=task_id, event="created", from_state=None,
            to_state=str(TaskState.WAITING), revision=0, actor_kind=actor.kind,
            actor_id=actor.id, note=f"plan v{version}", now=tx.now,
        )  # fmt: skip
    decisions_store.bind_tasks(conn, project_id, requirement.id, created.values())
    fx.decisions.add(requirement.id)
    fx.tasks |= set(created.values())
    audit_store.record(
        conn, now=tx.now, actor_kind=actor.kind, actor_id=actor.id, project_id=project_id,
        action="plan.submit", outcome="ok",
        detail={"plan_id": plan_id, "version": version, "tasks": list(created),
                "started": started},
    )  # fmt: skip
    lines = []
    items = []  # the same facts, for the page to word in the reader's language
    for n, item in enumerate(validated.items, start=1):
        shown = [*item.depends_on, *external.get(item.key, [])]
        after = f"（依赖 {', '.join(shown)}）" if shown else ""
        lines.append(f"{n}. `{item.key}` {item.title} — @{owners[item.owner].handle}{after}")
        items.append(
            {"key": item.key, "title": item.title, "owner": owners[item.owner].handle,
             "after": shown}
        )  # fmt: skip
    body = (
        f"🗺️ {task_actions.actor_of(actor).label} 提交了计划 v{version}（{len(lines)} 项）：\n"
        + "\n".join(lines)
    )
    if not started:
        body += "\n\n⏸️ 计划优先模式：计划已保存，等待人类在任务看板上开始，暂不派发。"
    notice = {
        "code": "plan_submitted",
        "params": {"by": task_actions.actor_of(actor).label, "version": version,
                   "count": len(lines), "items": items, "started": started},
    }  # fmt: skip
    task_actions.post_message(
        conn, tx, fx, body, {"plan": {"id": plan_id, "version": version}, "notice": notice}
    )
    for task_id in created.values():
        row = tasks_store.get_task(conn, task_id)
        assert row is not None
        task_actions.settle_task(conn, tx, fx, row)
    members = task_actions.members_by_id(conn, project_id)
    tasks = [tasks_store.get_task(conn, t) for t in created.values()]
    return {
        "plan": {"id": plan_id, "version": version, "started": started, "goal": validated.goal},
        "tasks": [task_actions.task_object(conn, t, members) for t in tasks if t is not None],
    }


async def submit_plan(
    core: Services, actor: Member, raw: Any, *, start: bool | None = None
) -> dict[str, Any]:
    """A person or the lead agent submits a plan (``{"goal", "items"}``); all or nothing.

    Raises :class:`room.rules.plans.PlanInvalidError` listing every problem, with nothing stored.
    ``start`` (people only) overrides plan-first mode for this plan.
    """
    if actor.kind == "agent" and actor.role != "lead":
        raise ForbiddenError(
            "只有人类和负责人（lead）可以提交计划 (Only people and the lead agent submit plans.)",
            code="plan_forbidden",
        )
    project_id = actor.project_id

    def job(conn: Connection, tx: Tx) -> dict[str, Any]:
        task_actions.check_open(conn, actor)
        fx = task_actions.Effects(project_id)
        result = store_plan(conn, tx, fx, actor, raw, start)
        fx.flush(conn, tx)
        return result

    return await core.db.write(job, locks=(actor.project_id,))


async def start_plan(core: Services, actor: Member, plan_id: int | None = None) -> dict[str, Any]:
    """A person starts plan-first plans (one, or every unstarted one): their tasks are released
    and those already ``ready`` are dispatched to their owners."""
    if actor.kind != "human":
        raise ForbiddenError(
            "只有人类可以开始计划 (Only a person starts a plan.)", code="human_only"
        )
    project_id = actor.project_id

    def job(conn: Connection, tx: Tx) -> dict[str, Any]:
        task_actions.check_open(conn, actor)
        started = tasks_store.start_plans(conn, project_id, plan_id, actor.id, tx.now)
        if not started:
            raise NotFoundError(
                "没有等待开始的计划 (No plan is waiting to be started.)", code="no_plan"
            )
        fx = task_actions.Effects(project_id)
        released = [
            t for t in tasks_store.tasks_of(conn, project_id) if t.plan_id in started and t.held
        ]
        versions = [p["version"] for p in tasks_store.plans(conn, project_id) if p["id"] in started]
        audit_store.record(
            conn, now=tx.now, actor_kind="human", actor_id=actor.id, project_id=project_id,
            action="plan.start", outcome="ok", detail={"plans": started},
        )  # fmt: skip
        notice = notices.plan_started(task_actions.actor_of(actor).handle_or_none, versions)
        task_actions.post_message(
            conn, tx, fx, notice.body, {"plan_start": started, "notice": notice.meta()}
        )
        for task in released:
            tasks_store.update_task(conn, task.id, tx.now, held=0)
            fx.tasks.add(task.id)
            row = tasks_store.get_task(conn, task.id)
            assert row is not None
            if row.state is TaskState.READY:
                task_actions.dispatch_ready(conn, tx, fx, row)
            else:
                task_actions.settle_task(conn, tx, fx, row)
        fx.flush(conn, tx)
        return {"started": started, "tasks": len(released)}

    return await core.db.write(job, locks=(actor.project_id,))


def deliver_goal(
    conn: Connection,
    tx: Tx,
    project_id: int,
    creator_member_id: int,
    goal: str,
    plan_first: bool,
) -> int | None:
    """A new project's goal, delivered to its lead; call inside the create-project write job.

    Records ``goal`` as the project's goal and ``plan_first`` in ``projects.settings_json``, then
    posts the goal as the creator's own message mentioning the lead (one delivery row for the
    lead, ``held`` unless the project is active), published and the lead woken after the commit.
    Idempotent per project (the message has a fixed ``client_txn_id``). Returns the message id,
    or None when the goal is blank. Without a lead the goal is posted and reaches nobody.
    """
    goal = goal.strip()
    projects_store.update_settings(conn, project_id, {"plan_first": bool(plan_first)}, tx.now)
    if not goal:
        return None
    conn.execute("UPDATE projects SET goal = :g WHERE id = :id", {"g": goal, "id": project_id})
    txn = GOAL_TXN.format(project_id=project_id)
    existing = messages_store.find_txn(conn, creator_member_id, txn)
    if existing is not None:
        return existing[0]
    members = task_actions.members_by_id(conn, project_id)
    creator = members.get(creator_member_id)
    if creator is None:
        raise NotFoundError("the creator is not a member of the project", code="no_member")
    lead_id = projects_store.lead_of(conn, project_id)
    lead = members.get(lead_id) if lead_id is not None else None
    # The goal is posted in the person's name: it holds their words and a request anyone can
    # read; the tool to use is said to the lead alone (meta.for_agents).
    # In the creator's language: it is their message (a person's page sends the language it
    # shows, PUT /api/me/lang).
    lang = (
        notifications_store.contact(conn, creator.user_id)["lang"]
        if creator.user_id is not None
        else "zh"
    )
    words = notices.GOAL_WORDS.get(lang, notices.GOAL_WORDS["zh"])
    parts = [f"{words['head']}\n\n{goal}"]
    for_agents = ""
    if lead is not None:
        step = words["ask"].format(lead=lead.handle)
        if plan_first:
            step += words["plan_first"]
        parts.append(step)
        for_agents = words["for_agents"]
    fx = task_actions.Effects(project_id)
    message_id = task_actions.post_message(
        conn, tx, fx, "\n\n".join(parts), {"goal": True, "plan_first": bool(plan_first)},
        to=[lead] if lead is not None else [], author=creator, client_txn_id=txn,
        for_agents=for_agents,
    )  # fmt: skip
    if creator.kind == "human":
        brakes_store.reset_agent_turns(conn, tx, project_id)
    fx.flush(conn, tx)
    return message_id
