"""Task transitions: the one place a task changes state, and what follows from it.

Every change goes through :func:`fire`, inside a write job: the pure machine
(:func:`room.rules.tasks.advance`) decides the new state; the row, a ``task_events`` history row and
an ``audit_events`` record (author, from, to, revision, note) are written; then what follows is done
in the same transaction — dependencies settle (:func:`room.rules.tasks.settle`), a task that becomes
``ready`` is dispatched to its owner, a submission is sent to its reviewer, requested changes go
back to the owner. Messages that ask a member to act are system messages with a delivery row for
each agent recipient (``pending``, or ``held`` while the member or project is paused), so the
runtime wakes the agent after the commit. :class:`Effects` collects what a job changed and records
the ephemeral ``tasks``/``decisions`` frames and the wake-ups as the job's effects.

Hooks the rest of the server calls inside its own write jobs: :func:`handoff_open_tasks` (a member
leaves) and :func:`digest_rows` (trash snapshots). The events members ask for, their evidence and
reviews are in :mod:`room.actions.task_updates`; plans in :mod:`room.actions.plans`; decisions
and requirement changes in :mod:`room.actions.decisions`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from room.actions import memory as memory_actions
from room.actions.messages import append_message, excerpt_of
from room.errors import ConflictError, ForbiddenError, NotFoundError
from room.rules import notices
from room.rules.effects import Broadcast, Wake
from room.rules.entities import Member, iso
from room.rules.ledger import initial_state
from room.rules.lifecycle import ActorKind, ProjectState, posting_open
from room.rules.protocol import encode
from room.rules.render import render
from room.rules.tasks import (
    NOTE_REQUIRED,
    TASK_EVENT_ACTORS,
    TaskActor,
    TaskEvent,
    TaskSnapshot,
    TaskState,
    advance,
    allowed_events,
    check_acceptance,
    missing_criteria,
    settle,
    waiting_on,
)
from room.services import Services
from room.store import Tx
from room.store import attempts as attempts_store
from room.store import audit as audit_store
from room.store import decisions as decisions_store
from room.store import deliveries as deliveries_store
from room.store import members as members_store
from room.store import messages as messages_store
from room.store import portfolio as portfolio_store
from room.store import projects as projects_store
from room.store import sync_requests as sync_store
from room.store import tasks as tasks_store
from room.store.dialect import Connection
from room.store.tasks import TaskRow

# Agent roles whose preset grants room_task_review (room.agents.presets): they may review any
# task they do not own. A test keeps the two in step.
REVIEW_ROLES = frozenset({"lead", "tester"})
MAX_EVIDENCE_ITEMS = 20
MAX_NOTE_CHARS = 4000

_S, _E = TaskState, TaskEvent


@dataclass(frozen=True, slots=True)
class Actor:
    """Who triggers a change: a member (human or agent) or the server itself."""

    kind: str  # human | agent | system
    member: Member | None = None

    @property
    def id(self) -> int | None:
        return self.member.id if self.member else None

    @property
    def label(self) -> str:
        return f"@{self.member.handle}" if self.member else "系统"

    @property
    def handle_or_none(self) -> str | None:
        """``@handle``, or None for the server itself (the notice words it)."""
        return f"@{self.member.handle}" if self.member else None


SYSTEM = Actor("system")


def actor_of(member: Member) -> Actor:
    return Actor(member.kind, member)


# -- publishing ---------------------------------------------------------------------------------


@dataclass(slots=True)
class Effects:
    """What one write job changed; :meth:`flush` records the frames and wake-ups as the job's
    effects. Hooks that run inside someone else's job make their own and flush it."""

    project_id: int
    tasks: set[int] = field(default_factory=set)
    decisions: set[int] = field(default_factory=set)
    wake: set[int] = field(default_factory=set)

    def flush(self, conn: Connection, tx: Tx) -> None:
        frames: list[str] = []
        if self.tasks:
            members = members_by_id(conn, self.project_id)
            rows = [tasks_store.get_task(conn, t) for t in self.tasks]
            objects = [
                task_object(conn, row, members)
                for row in sorted((r for r in rows if r is not None), key=lambda r: r.position)
            ]
            frames.append(
                encode({"type": "tasks", "project_id": self.project_id, "tasks": objects})
            )
        if self.decisions:
            # Decisions are project memory too: a new memory version, and its frame.
            memory_actions.index_decisions(conn, self.decisions)
            memory_actions.record_written(conn, tx, self.project_id, "decision",
                                          max(self.decisions))  # fmt: skip
            found = [decisions_store.get_decision(conn, d) for d in sorted(self.decisions)]
            objects = [decisions_store.decision_object(conn, d) for d in found if d is not None]
            frames.append(
                encode({"type": "decisions", "project_id": self.project_id, "decisions": objects})
            )
        for frame in frames:
            tx.emit(Broadcast(self.project_id, frame))
        if self.wake:
            tx.emit(Wake(self.project_id, tuple(sorted(self.wake))))
        self.tasks, self.decisions, self.wake = set(), set(), set()


def post_message(
    conn: Connection,
    tx: Tx,
    fx: Effects,
    body: str,
    meta: dict[str, Any],
    *,
    to: Iterable[Member] = (),
    reply_to: int | None = None,
    author: Member | None = None,
    client_txn_id: str | None = None,
    for_agents: str = "",
) -> int:
    """A message in the timeline that reaches ``to``: each is mentioned; each agent among them
    gets a delivery row (``held`` while it or the project is paused) and is woken after the
    commit. Without an author it is a system message; with no one to reach it is a plain notice
    (as :func:`room.actions.notices.insert_notice` writes them).

    ``body`` is what people read: plain words, no tool syntax. ``for_agents`` is what agents read
    after it (the tool call the notice asks for), kept in ``meta.for_agents``: the page never
    shows it, an agent's context and an external agent's ``inbox`` carry it (docs/agents.md)."""
    if for_agents:
        meta = {**meta, "for_agents": for_agents}
    recipients = {m.id: m for m in to if m.status != "left"}
    project_id = fx.project_id
    excerpt = None
    if reply_to is not None:
        row = messages_store.get_row(conn, reply_to)
        if row is None or row["project_id"] != project_id:
            raise NotFoundError("no such message in this project", code="bad_reply_to")
        excerpt = excerpt_of(row)
    message_id, _, _ = append_message(
        conn, tx, project_id=project_id, author_id=author.id if author else None,
        kind="system" if author is None else "chat", body=body, html=render(body),
        reply_to=reply_to, reply_excerpt=excerpt, mentions=list(recipients),
        client_txn_id=client_txn_id, meta=meta,
    )  # fmt: skip
    messages_store.insert_mentions(conn, message_id, [(m, "handle") for m in recipients])
    state = projects_store.state_of(conn, project_id) or ProjectState.PURGED
    rows = [
        (m.id, initial_state(state, m.status)) for m in recipients.values() if m.kind == "agent"
    ]
    if rows:
        deliveries_store.insert_many(
            conn, project_id=project_id, message_id=message_id, recipients=rows, now=tx.now
        )
        fx.wake |= {member_id for member_id, state in rows if state == "pending"}
    return message_id


# -- views --------------------------------------------------------------------------------------


def members_by_id(conn: Connection, project_id: int) -> dict[int, Member]:
    return {m.id: m for m in members_store.list_for_project(conn, project_id)}


def _person(members: dict[int, Member], member_id: int | None) -> dict[str, Any] | None:
    member = members.get(member_id) if member_id is not None else None
    if member is None:
        return None
    return {"id": member.id, "handle": member.handle, "display_name": member.display_name,
            "kind": member.kind, "status": member.status}  # fmt: skip


def task_object(conn: Connection, task: TaskRow, members: dict[int, Member]) -> dict[str, Any]:
    """A task as the board shows it: dependencies (and what a waiting task waits for), criteria
    with their latest verdicts, evidence, open sync requests, and the events possible from its
    state. A verdict ``counts`` only while the task is in review, accepted or sent back for
    changes on the revision the verdict was given for; a criterion's ``passed`` is then the
    verdict (true/false), else null (not checked on this revision). A requirement sync sends the
    work back to ``in_progress``, so earlier verdicts stop counting at once."""
    deps = tasks_store.deps_of(conn, task.id)
    verdicts = tasks_store.latest_verdicts(conn, task.id)
    judged = task.state in (_S.IN_REVIEW, _S.ACCEPTED, _S.CHANGES_REQUESTED)
    criteria: list[dict[str, Any]] = []
    for criterion_id, position, text in tasks_store.criteria_of(conn, task.id):
        verdict = verdicts.get(criterion_id)
        counts = bool(judged and verdict and verdict.revision == task.revision)
        criteria.append(
            {
                "id": criterion_id,
                "n": position,
                "text": text,
                "passed": verdict.passed if counts and verdict else None,
                "revision": verdict.revision if verdict else None,
                "verdict": None
                if verdict is None
                else {
                    "revision": verdict.revision,
                    "passed": verdict.passed,
                    "counts": counts,
                    "note": verdict.note,
                    "reviewer_id": verdict.reviewer_id,
                    "at": iso(verdict.created_at),
                },
            }
        )
    passes = {cid: (v.revision, v.passed) for cid, v in verdicts.items()}
    ids: list[int] = [c["id"] for c in criteria]
    attempt = attempts_store.latest(conn, task.id)
    return {
        "id": task.id,
        "key": task.key,
        "title": task.title,
        "state": str(task.state),
        "revision": task.revision,
        "position": task.position,
        "plan_id": task.plan_id,
        "owner_id": task.owner_id,
        "owner": _person(members, task.owner_id),
        "reviewer_id": task.reviewer_id,
        "reviewer": _person(members, task.reviewer_id),
        "held": task.held,
        "note": task.note,
        "sync_prior": str(task.sync_prior) if task.sync_prior else None,
        "depends_on": [key for key, _ in deps],
        "waiting_on": waiting_on(dict(deps)) if task.state is _S.WAITING else [],
        "criteria": criteria,
        "missing": [
            c["n"] for c in criteria if c["id"] in missing_criteria(ids, passes, task.revision)
        ],
        "evidence": tasks_store.evidence_of(conn, task.id),
        "sync": sync_store.open_sync_requests(conn, task.id),
        "decisions": decisions_store.decisions_of_task(conn, task.id),
        "allowed_events": [str(e) for e in allowed_events(task.state)],
        "event_rules": event_rules(task.state, held=task.held),
        "assumptions": list(task.assumptions),
        "attempt": attempt.to_wire() if attempt is not None else None,
        "created_at": iso(task.created_at),
        "updated_at": iso(task.updated_at),
    }


def board(conn: Connection, project_id: int) -> dict[str, Any]:
    members = members_by_id(conn, project_id)
    tasks = [task_object(conn, t, members) for t in tasks_store.tasks_of(conn, project_id)]
    dates = portfolio_store.task_dates(conn, project_id)
    for task in tasks:
        task["est_start"], task["est_end"] = dates.get(task["id"], (None, None))
    counts = {str(s): 0 for s in TaskState}
    for task in tasks:
        counts[task["state"]] += 1
    return {
        "project_id": project_id,
        "plan_first": bool(projects_store.settings(conn, project_id).get("plan_first", False)),
        "plans": tasks_store.plans(conn, project_id),
        "counts": counts,
        "tasks": tasks,
    }


# -- guards -------------------------------------------------------------------------------------


def roles_of(member: Member, task: TaskRow) -> set[TaskActor]:
    """The caller's roles on a task (see ``docs/tasks.md``, "Who may trigger what")."""
    roles: set[TaskActor] = set()
    if member.id == task.owner_id:
        roles.add(TaskActor.OWNER)
    if member.id == task.reviewer_id or (member.kind == "agent" and member.role in REVIEW_ROLES):
        roles.add(TaskActor.REVIEWER)
    if member.kind == "human":
        roles.add(TaskActor.HUMAN)
    return roles


def check_open(conn: Connection, member: Member) -> None:
    """Tasks change only while the project accepts messages from this kind of member."""
    state = projects_store.state_of(conn, member.project_id) or "purged"
    poster = ActorKind.AGENT if member.kind == "agent" else ActorKind.MEMBER
    if not posting_open(ProjectState(state), poster):
        raise ConflictError(
            f"项目处于 {state}，现在不能修改任务 (The project is {state}; tasks cannot change now.)",
            code="project_not_accepting",
            state=state,
        )
    if member.status == "left":
        raise ForbiddenError("你已离开本项目 (You have left this project.)", code="member_left")


def find_task(conn: Connection, project_id: int, ref: str | int) -> TaskRow:
    """A task by id (digits) or key; keys that are all digits are addressed by id."""
    text = str(ref).strip()
    if text.isascii() and text.isdigit():
        # Digits beyond a row id's range name no task (rather than overflow SQLite).
        task_id = projects_store.row_id(text)
        task = tasks_store.get_task(conn, task_id) if task_id is not None else None
        task = task if task is not None and task.project_id == project_id else None
    else:
        task = tasks_store.task_by_key(conn, project_id, text)
    if task is None:
        raise NotFoundError(
            f"没有任务 {text[:60]} (No task {text[:60]} in this project.)",
            code="no_task",
            task=text[:60],
        )
    return task


def _check_acceptance(conn: Connection, task: TaskRow) -> None:
    ids = [cid for cid, _, _ in tasks_store.criteria_of(conn, task.id)]
    verdicts = tasks_store.latest_verdicts(conn, task.id)
    check_acceptance(ids, {c: (v.revision, v.passed) for c, v in verdicts.items()}, task.revision)


# -- the transition -----------------------------------------------------------------------------


def fire(
    conn: Connection,
    tx: Tx,
    fx: Effects,
    task: TaskRow,
    event: TaskEvent,
    actor: Actor,
    note: str | None = None,
    *,
    announce: bool = True,
) -> TaskRow:
    """Apply ``event`` to ``task`` and everything that follows from it; returns the task after.

    Guards beyond the table: ``start`` is refused while the task's plan waits to be started
    (plan-first); ``accept`` only when every criterion passed on the current revision. The caller
    has already checked who may trigger the event (:func:`room.rules.tasks.authorize`).
    ``announce=False`` leaves the timeline message to the caller (a review posts its own).
    """
    event = TaskEvent(event)
    if event is _E.START and task.held:
        raise ConflictError(
            "计划尚未开始，任务还不能开始 (The plan has not been started yet.)",
            code="plan_not_started",
            task=task.key,
        )
    if event is _E.ACCEPT:
        _check_acceptance(conn, task)
    after = advance(TaskSnapshot(task.state, task.revision, task.sync_prior), event)
    fields: dict[str, Any] = {
        "state": after.state,
        "revision": after.revision,
        "sync_prior": after.sync_prior,
    }
    if event in NOTE_REQUIRED and event is not _E.SUBMIT:
        fields["note"] = note  # the reason of the state it enters (block, changes, cancel …)
    elif after.state is not task.state and event not in (_E.REQUIRE_SYNC, _E.SYNC_RECEIPT):
        fields["note"] = None  # a sync interrupts and returns: the reason survives it
    tasks_store.update_task(conn, task.id, tx.now, **fields)
    tasks_store.insert_task_event(
        conn, project_id=task.project_id, task_id=task.id, event=str(event),
        from_state=str(task.state), to_state=str(after.state), revision=after.revision,
        actor_kind=actor.kind, actor_id=actor.id, note=note, now=tx.now,
    )  # fmt: skip
    audit_store.record(
        conn, now=tx.now, actor_kind=actor.kind, actor_id=actor.id, project_id=task.project_id,
        action=f"task.{event}", from_state=str(task.state), outcome="ok",
        detail={"task_id": task.id, "key": task.key, "to": str(after.state),
                "revision": after.revision, **({"note": note[:500]} if note else {})},
    )  # fmt: skip
    fx.tasks.add(task.id)
    new = reload_task(conn, task.id)
    if announce:
        _announce(conn, tx, fx, task, new, event, actor, note)
    if event is _E.SYNC_RECEIPT:
        _synced(conn, tx, fx, new, actor, note)
    if event in (_E.HANDOFF, _E.CANCEL):
        sync_store.close_sync_requests(conn, task.id, str(event))
        # Its worktree and branch stay on disk, listed as kept; nothing is deleted.
        attempts_store.keep_open(conn, task_id=task.id, now=tx.now)
    if new.state is not task.state and new.state in (_S.WAITING, _S.READY):
        new = settle_task(conn, tx, fx, new)
    if (task.state is _S.ACCEPTED) != (new.state is _S.ACCEPTED):
        for dependent in tasks_store.dependents_of(conn, task.id):
            settle_task(conn, tx, fx, reload_task(conn, dependent))
    return reload_task(conn, task.id)


def settle_task(conn: Connection, tx: Tx, fx: Effects, task: TaskRow) -> TaskRow:
    """Fire the system event that brings a waiting/ready task in line with its dependencies."""
    event = settle(task.state, dict(tasks_store.deps_of(conn, task.id)))
    return fire(conn, tx, fx, task, event, SYSTEM) if event is not None else task


def reload_task(conn: Connection, task_id: int) -> TaskRow:
    task = tasks_store.get_task(conn, task_id)
    assert task is not None
    return task


def current_object(conn: Connection, project_id: int, task_id: int) -> dict[str, Any]:
    """The board's view of a task as it is now (after the changes of the caller's write)."""
    return task_object(conn, reload_task(conn, task_id), members_by_id(conn, project_id))


def _member(conn: Connection, member_id: int | None) -> Member | None:
    return members_store.get(conn, member_id) if member_id is not None else None


def event_rules(state: TaskState, *, held: bool = False) -> dict[str, dict[str, Any]]:
    """For each event allowed from ``state`` that a member may ask for: who may (``owner``,
    ``reviewer``, ``human``) and the note it needs (``reason``, ``evidence`` or null). The page
    offers a person the events whose ``who`` they hold; the server still decides. A ``held``
    task (its plan not started) cannot be started (:func:`fire`)."""
    return {
        str(e): {
            "who": sorted(str(a) for a in TASK_EVENT_ACTORS[e] if a is not TaskActor.SYSTEM),
            "note": NOTE_REQUIRED.get(e),
        }
        for e in allowed_events(state)
        if TASK_EVENT_ACTORS[e] != {TaskActor.SYSTEM} and not (held and e is _E.START)
    }


def task_meta(task: TaskRow, event: str) -> dict[str, Any]:
    return {"task": {"id": task.id, "key": task.key, "event": event, "revision": task.revision}}


def _announce(
    conn: Connection,
    tx: Tx,
    fx: Effects,
    before: TaskRow,
    task: TaskRow,
    event: TaskEvent,
    actor: Actor,
    note: str | None,
) -> None:
    owner = _member(conn, task.owner_id)
    key, by = task.key, actor.handle_or_none
    if event is _E.DEPS_ACCEPTED and not task.held:
        dispatch_ready(conn, tx, fx, task)
    elif event is _E.SUBMIT:
        request_review(conn, tx, fx, task, actor)
    elif event is _E.REQUEST_CHANGES and owner is not None:
        step = next_step(owner, "resubmit", task)
        notice = notices.task_changes_requested(
            key, task.revision, by, owner.handle, note, next_code(owner, "resubmit")
        )
        meta = _noticed(task_meta(task, str(event)), notice)
        post_message(conn, tx, fx, notice.body, meta, to=[owner], for_agents=step.agents)
    elif event is _E.ACCEPT:
        notice = notices.task_accepted(key, task.title, task.revision, by)
        post_message(conn, tx, fx, notice.body, _noticed(task_meta(task, str(event)), notice))
    elif event is _E.BLOCK:
        reviewer = _member(conn, task.reviewer_id)
        to = [reviewer] if reviewer is not None and reviewer.id != actor.id else []
        notice = notices.task_noted("task_blocked", key, by, note)
        meta = _noticed(task_meta(task, str(event)), notice)
        post_message(conn, tx, fx, notice.body, meta, to=to)
    elif event is _E.CANCEL:
        to = [owner] if owner is not None and owner.id != actor.id else []
        notice = notices.task_noted("task_cancelled", key, by, note)
        meta = _noticed(task_meta(task, str(event)), notice)
        post_message(conn, tx, fx, notice.body, meta, to=to)
    elif event is _E.REOPEN:
        to = [owner] if owner is not None and task.state is _S.CHANGES_REQUESTED else []
        step = Step("", "")
        notice = notices.task_noted("task_reopened", key, by, note)
        if to and owner is not None:
            step = next_step(owner, "resubmit", task)
            notice = notices.task_noted(
                "task_reopened", key, by, note, owner.handle, next_code(owner, "resubmit")
            )
        meta = _noticed(task_meta(task, str(event)), notice)
        post_message(conn, tx, fx, notice.body, meta, to=to, for_agents=step.agents)
    elif event is _E.REASSIGN and owner is not None:
        was = _member(conn, before.owner_id)
        earlier = was.handle if was is not None and was.id != owner.id else None
        notice = notices.task_reassigned(key, by, owner.handle, earlier)
        post_message(conn, tx, fx, notice.body, _noticed(task_meta(task, str(event)), notice))


@dataclass(frozen=True, slots=True)
class Step:
    """What a notice asks its task owner to do next: ``people`` is the readable sentence in
    the body; ``agents`` the tool call an agent owner makes (``meta.for_agents``), or ""."""

    people: str
    agents: str


def next_code(owner: Member, step: str) -> str:
    """The next step's code (``start_person``, ``resubmit_agent`` …), worded by
    :mod:`room.rules.notices` and the page."""
    return f"{step}_{'person' if owner.kind == 'human' else 'agent'}"


def _noticed(meta: dict[str, Any], notice: notices.Notice) -> dict[str, Any]:
    return {**meta, "notice": notice.meta()}


def next_step(owner: Member, step: str, task: TaskRow) -> Step:
    key = task.key
    people = notices.word(f"next.{next_code(owner, step)}")
    if owner.kind == "human":
        return Step(people, "")
    agents = {
        "start": f'工具调用：room_task_update(task="{key}", action="start") 开始；完成后 '
        f'action="submit"，附 summary 和 artifacts（工作区内的相对路径）提交评审。',
        "resubmit": f'工具调用：修改后 room_task_update(task="{key}", action="submit") 重新提交。',
    }[step]
    return Step(people, agents)


def _criteria_lines(conn: Connection, task: TaskRow) -> str:
    return "\n".join(f"{n}. {text}" for _, n, text in tasks_store.criteria_of(conn, task.id))


def dispatch_ready(conn: Connection, tx: Tx, fx: Effects, task: TaskRow) -> None:
    """Tell the owner its task is ready: a message carrying the task, delivered to an agent."""
    owner = _member(conn, task.owner_id)
    if owner is None:
        return
    parts = [f"📋 任务 `{task.key}` 已就绪 — @{owner.handle} 请开始", f"**{task.title}**"]
    parts.append("验收标准：\n" + _criteria_lines(conn, task))
    if task.assumptions:
        parts.append("前提假设：\n" + "\n".join(f"- {a}" for a in task.assumptions))
    deps = [key for key, _ in tasks_store.deps_of(conn, task.id)]
    if deps:
        parts.append("已验收的依赖：" + "、".join(f"`{d}`" for d in deps))
    step = next_step(owner, "start", task)
    parts.append(step.people)
    meta = task_meta(task, "ready")
    # The same facts for the page to word in the reader's language (web/notices.js).
    meta["notice"] = {
        "code": "task_ready",
        "params": {
            "key": task.key,
            "title": task.title,
            "owner": owner.handle,
            "criteria": [text for _, _, text in tasks_store.criteria_of(conn, task.id)],
            "assumptions": list(task.assumptions or []),
            "deps": deps,
            "next": "start_person" if owner.kind == "human" else "start_agent",
        },
    }
    post_message(conn, tx, fx, "\n\n".join(parts), meta, to=[owner], for_agents=step.agents)


def _evidence(conn: Connection, task: TaskRow) -> list[dict[str, Any]]:
    """The evidence of the task's current revision, as :func:`room.rules.notices.review_requested`
    lists it."""
    found: list[dict[str, Any]] = []
    for item in tasks_store.evidence_of(conn, task.id):
        if item["revision"] != task.revision or item["review_id"] is not None:
            continue
        if item["kind"] == "artifact":
            found.append({"kind": "artifact", "path": item["path"], "size": item["size"],
                          "sha": item["sha256"][:12]})  # fmt: skip
        elif item["kind"] == "message":
            found.append({"kind": "message", "seq": item["seq"]})
        elif item["kind"] == "command":
            command = item["command"]
            found.append({"kind": "command", "command": command["command"][:80],
                          "exit_code": command["exit_code"]})  # fmt: skip
    return found


def request_review(conn: Connection, tx: Tx, fx: Effects, task: TaskRow, actor: Actor) -> None:
    reviewer = _member(conn, task.reviewer_id)
    if reviewer is not None and (reviewer.id == task.owner_id or reviewer.status == "left"):
        reviewer = None
    summary = next(
        (
            e["note"]
            for e in reversed(tasks_store.evidence_of(conn, task.id))
            if e["kind"] == "note" and e["revision"] == task.revision and e["review_id"] is None
        ),
        None,
    )
    agent_reviewer = reviewer is not None and reviewer.kind == "agent"
    notice = notices.review_requested(
        task.key, task.revision, actor.handle_or_none, reviewer.handle if reviewer else None,
        summary=summary, evidence=_evidence(conn, task),
        criteria=[text for _, _, text in tasks_store.criteria_of(conn, task.id)],
        agent_reviewer=agent_reviewer,
    )  # fmt: skip
    for_agents = ""
    if agent_reviewer:
        for_agents = (
            f'工具调用：room_task_review(task="{task.key}", results=[{{"criterion": 1, '
            '"passed": true, "evidence": "依据"}, …]) 逐条给出结论和依据。'
        )
    to = [reviewer] if reviewer is not None else []
    meta = _noticed(task_meta(task, "submit"), notice)
    post_message(conn, tx, fx, notice.body, meta, to=to, for_agents=for_agents)


def _synced(
    conn: Connection, tx: Tx, fx: Effects, task: TaskRow, actor: Actor, note: str | None
) -> None:
    assert actor.id is not None, "a sync receipt always has an author (the owner)"
    answered = sync_store.mark_synced(conn, task.id, actor.id, note, tx.now)
    labels = []
    for decision_id, revision in answered:
        fx.decisions.add(decision_id)
        decision = decisions_store.get_decision(conn, decision_id)
        if decision is not None:
            labels.append((decision.label, revision))
    notice = notices.sync_receipt(actor.handle_or_none, task.key, labels, note)
    post_message(conn, tx, fx, notice.body, _noticed(task_meta(task, "sync_receipt"), notice))


# -- hooks --------------------------------------------------------------------------------------


def handoff_open_tasks(conn: Connection, tx: Tx, project_id: int, member_id: int) -> int:
    """A member leaves: move their open tasks to ``handoff`` (each transition audited, authored by
    the system), drop them as reviewer, close their unanswered sync requests, post one notice and
    publish the changed tasks after the commit. Returns how many tasks were handed off.

    Call it inside the member-leave write job (before or after the status update; it reads no
    member status). Idempotent: a second call finds nothing open.
    """
    fx = Effects(project_id)
    tasks = [
        t
        for t in tasks_store.open_tasks_of(conn, project_id, member_id)
        if t.state is not _S.HANDOFF
    ]
    for task in tasks:
        fire(conn, tx, fx, task, _E.HANDOFF, SYSTEM, "负责人已离开 (the owner left)")
    reviewed = [t.id for t in tasks_store.tasks_of(conn, project_id) if t.reviewer_id == member_id]
    tasks_store.clear_reviewer(conn, project_id, member_id, tx.now)
    fx.tasks |= set(reviewed)
    if tasks:
        leaver = _member(conn, member_id)
        notice = notices.tasks_handed_off(
            leaver.handle if leaver else f"#{member_id}", [t.key for t in tasks]
        )
        meta = {"handoff": {"member_id": member_id, "tasks": [t.key for t in tasks]}}
        post_message(conn, tx, fx, notice.body, _noticed(meta, notice))
    fx.flush(conn, tx)
    return len(tasks)


def digest_rows(conn: Connection, project_id: int) -> dict[str, dict[str, Any]]:
    """``{table: {"count", "sha256"}}`` over the task tables
    (:data:`room.store.schema_tasks.TASK_TABLES`) for a project (rows in a fixed order), for the
    trash snapshot digest: the same rows give the same digest."""
    return tasks_store.digest_rows(conn, project_id)


async def read_board(core: Services, project_id: int) -> dict[str, Any]:
    return await core.db.read(lambda conn: board(conn, project_id))
