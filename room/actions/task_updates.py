"""What members do to tasks: the events they ask for (start, block, submit, sync, reassign …),
the evidence they cite, and per-criterion reviews. Each is one write job through
:func:`room.actions.tasks.fire`, which keeps the rules of the machine, the history and the
audit trail in one place.

Evidence: artifact paths are resolved and fingerprinted by the server (:mod:`room.infra.evidence`)
in a worker thread before the write job; messages must be live messages of the project; command
results exist only as the runtime recorded them (:func:`record_command_result`), so a model can cite
a command result by id but never create one.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from room.actions import attempts as attempt_actions
from room.actions import tasks as task_actions
from room.actions.workspaces import workspace_of
from room.errors import BadRequestError, ConflictError, ForbiddenError
from room.infra.evidence import Artifact, inspect_artifact
from room.rules import notices
from room.rules.entities import Member
from room.rules.tasks import (
    TaskEvent,
    TaskState,
    acceptance_complete,
    authorize,
    check_note,
    missing_criteria,
    revision_after,
)
from room.services import Services
from room.store import Tx
from room.store import members as members_store
from room.store import messages as messages_store
from room.store import projects as projects_store
from room.store import tasks as tasks_store
from room.store import users as users_store
from room.store.dialect import Connection
from room.store.tasks import TaskRow

COMMAND_TAIL_CHARS = 4000

# Events people and agents may ask for; the rest are the server's own (TaskActor.SYSTEM).
EVENT_NAMES: dict[str, TaskEvent] = {
    "start": TaskEvent.START,
    "block": TaskEvent.BLOCK,
    "unblock": TaskEvent.UNBLOCK,
    "submit": TaskEvent.SUBMIT,
    "request_changes": TaskEvent.REQUEST_CHANGES,
    "request-changes": TaskEvent.REQUEST_CHANGES,
    "accept": TaskEvent.ACCEPT,
    "reopen": TaskEvent.REOPEN,
    "reassign": TaskEvent.REASSIGN,
    "cancel": TaskEvent.CANCEL,
    "sync": TaskEvent.SYNC_RECEIPT,
    "sync_receipt": TaskEvent.SYNC_RECEIPT,
    "sync-receipt": TaskEvent.SYNC_RECEIPT,
}

_S, _E = TaskState, TaskEvent


# -- evidence -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EvidenceInput:
    """What a submission or a verdict cites. Artifact paths are resolved by the server;
    commands are ids of results the runtime recorded (:func:`record_command_result`)."""

    summary: str | None = None
    artifacts: tuple[str, ...] = ()
    messages: tuple[int, ...] = ()
    commands: tuple[int, ...] = ()

    @property
    def cited(self) -> int:
        return len(self.artifacts) + len(self.messages) + len(self.commands)


async def inspect_artifacts(
    core: Services, project_id: int, paths: Sequence[str], task_ref: str | int | None = None
) -> list[Artifact]:
    """Resolve and fingerprint artifacts in a worker thread (never in the writer): inside the
    task's attempt worktree while it has one, else the project's workspace."""
    if not paths:
        return []
    limit = task_actions.MAX_EVIDENCE_ITEMS
    if len(paths) > limit:
        raise BadRequestError(
            f"最多 {limit} 个文件 (At most {limit} artifacts.)",
            code="too_much_evidence",
        )
    if task_ref is not None:
        workspace = await attempt_actions.evidence_root(core, project_id, task_ref)
    else:
        project = await core.db.read(lambda conn: projects_store.get(conn, project_id))
        workspace = str(workspace_of(core.settings, project)) if project else None
    return await asyncio.to_thread(lambda: [inspect_artifact(workspace, p) for p in paths])


def insert_evidence(
    conn: Connection,
    tx: Tx,
    task: TaskRow,
    revision: int,
    member: Member,
    evidence: EvidenceInput,
    artifacts: Sequence[Artifact],
    review_id: int | None = None,
) -> None:
    """Store what ``member`` cites. Messages must be live messages of the project; commands must
    be results recorded in this project — for an agent, by its own runtime."""
    limit = task_actions.MAX_EVIDENCE_ITEMS
    if len(evidence.messages) > limit or len(evidence.commands) > limit:
        raise BadRequestError(
            f"每类证据最多 {limit} 条 (At most {limit} of each kind.)",
            code="too_much_evidence",
        )
    base: dict[str, Any] = {"project_id": task.project_id, "task_id": task.id,
                            "revision": revision, "added_by": member.id, "now": tx.now,
                            "review_id": review_id}  # fmt: skip
    if evidence.summary and review_id is None:
        tasks_store.insert_evidence(conn, kind="note", note=evidence.summary, **base)
    for artifact in artifacts:
        tasks_store.insert_evidence(
            conn, kind="artifact", path=artifact.path, real_path=artifact.real_path,
            size=artifact.size, sha256=artifact.sha256, **base,
        )  # fmt: skip
    for message_id in dict.fromkeys(evidence.messages):
        row = messages_store.get_row(conn, message_id)
        if row is None or row["project_id"] != task.project_id or row["deleted_at"] is not None:
            raise BadRequestError(
                f"消息 {message_id} 不在本项目中或已删除 "
                f"(Message {message_id} is not a live message of this project.)",
                code="bad_evidence_message",
                message_id=message_id,
            )
        tasks_store.insert_evidence(conn, kind="message", message_id=message_id, **base)
    for command_id in dict.fromkeys(evidence.commands):
        found = tasks_store.command_owner(conn, command_id)
        if found is None or found[0] != task.project_id:
            raise BadRequestError(
                f"没有命令结果 {command_id} (No command result {command_id} in this project.)",
                code="bad_evidence_command",
                command_id=command_id,
            )
        if member.kind == "agent" and found[1] != member.id:
            raise ForbiddenError(
                "只能引用你自己的运行时记录的命令结果 "
                "(Cite only command results your own runtime recorded.)",
                code="command_not_yours",
                command_id=command_id,
            )
        tasks_store.insert_evidence(conn, kind="command", command_id=command_id, **base)


# -- actions ------------------------------------------------------------------------------------


def parse_event(name: str) -> TaskEvent:
    event = EVENT_NAMES.get(name.strip().lower())
    if event is None:
        raise BadRequestError(
            f"未知的任务操作 {name[:40]} (Unknown task action {name[:40]}.)",
            code="bad_task_event",
            allowed=sorted({k for k in EVENT_NAMES if "-" not in k}),
        )
    return event


async def change_task(
    core: Services,
    member: Member,
    task_ref: str | int,
    event_name: str,
    *,
    note: str | None = None,
    evidence: EvidenceInput | None = None,
    owner: str | None = None,
) -> dict[str, Any]:
    """A member asks for a task event (start, block, submit, sync, reassign …); returns the task.

    ``note`` is the reason (block, request_changes, reopen, cancel) or the sync note; a submission
    carries ``evidence`` (a summary and at least one artifact, message or command result);
    ``reassign`` names the new ``owner`` by handle.
    """
    event = parse_event(event_name)
    if note is not None and len(note) > task_actions.MAX_NOTE_CHARS:
        raise BadRequestError(
            f"说明最多 {task_actions.MAX_NOTE_CHARS} 字 (Note too long.)", code="note_too_long"
        )
    evidence = evidence or EvidenceInput()
    artifacts: list[Artifact] = []
    if event is _E.SUBMIT:
        check_note(event, evidence.summary)
        if not evidence.cited:
            raise BadRequestError(
                "提交评审需要证据：工作区文件、消息或命令结果 "
                "(A submission needs evidence: a workspace file, a message or a command result.)",
                code="evidence_required",
            )
        if evidence.artifacts:
            await _precheck(core, member, task_ref, event)
            artifacts = await inspect_artifacts(
                core, member.project_id, evidence.artifacts, task_ref
            )
    prepared = None
    if event is _E.START:
        prepared = await attempt_actions.prepare(core, member, task_ref)
    elif event is _E.ACCEPT:
        await _precheck(core, member, task_ref, event)
        await attempt_actions.check_artifacts_unchanged(core, member.project_id, task_ref)
    project_id = member.project_id

    def job(conn: Connection, tx: Tx) -> dict[str, Any]:
        task_actions.check_open(conn, member)
        task = task_actions.find_task(conn, project_id, task_ref)
        authorize(event, task_actions.roles_of(member, task))
        text = evidence.summary if event is _E.SUBMIT else (note.strip() if note else None)
        check_note(event, text)
        fx = task_actions.Effects(project_id)
        if event is _E.SUBMIT:
            revision = revision_after(event, task.revision)
            insert_evidence(conn, tx, task, revision, member, evidence, artifacts)
        if event is _E.REASSIGN:
            task = _reassign(conn, tx, task, owner)
        task = task_actions.fire(conn, tx, fx, task, event, task_actions.actor_of(member), text)
        if prepared is not None:
            attempt_actions.record(conn, tx, fx, task, prepared)
        fx.flush(conn, tx)
        return task_actions.current_object(conn, project_id, task.id)

    return await core.db.write(job, locks=(project_id,))


async def _precheck(core: Services, member: Member, task_ref: str | int, event: TaskEvent) -> None:
    """Refuse a caller who may not act on the task before reading any file for them (the write
    job checks again, against the state it commits on)."""

    def read(conn: Connection) -> None:
        authorize(
            event,
            task_actions.roles_of(
                member, task_actions.find_task(conn, member.project_id, task_ref)
            ),
        )

    await core.db.read(read)


def _reassign(conn: Connection, tx: Tx, task: TaskRow, owner: str | None) -> TaskRow:
    handle = (owner or "").strip().lstrip("@＠")
    found = members_store.by_handle(conn, task.project_id, handle) if handle else None
    if (
        found is None
        or found.status != "active"
        or found.id in users_store.disabled_members(conn, task.project_id)
    ):
        raise BadRequestError(
            f"reassign 需要一个在职成员的 handle：{handle[:40] or '（空）'} "
            "(reassign needs the handle of an active member.)",
            code="bad_owner",
            owner=handle[:40],
        )
    if task.state is not _S.HANDOFF:
        return task  # task_actions.fire() refuses the event with the allowed ones listed
    reviewer = None if task.reviewer_id == found.id else task.reviewer_id
    tasks_store.update_task(conn, task.id, tx.now, owner_id=found.id, reviewer_id=reviewer)
    return task_actions.reload_task(conn, task.id)


@dataclass(frozen=True, slots=True)
class CriterionVerdict:
    """One criterion's verdict in a review: its 1-based number, pass/fail and the reason."""

    criterion: int
    passed: bool
    evidence: str
    artifacts: tuple[str, ...] = ()
    messages: tuple[int, ...] = ()


async def review_task(
    core: Services, member: Member, task_ref: str | int, results: Sequence[CriterionVerdict]
) -> dict[str, Any]:
    """Record per-criterion verdicts on the task's current revision, then decide: any failure →
    ``request_changes``; every criterion passed on this revision → ``accept``; otherwise the task
    stays ``in_review`` for the rest. Reviewers and humans only; an agent never reviews its own
    task."""
    if not results:
        raise BadRequestError(
            "评审至少包含一条结论 (Give at least one verdict.)", code="no_results"
        )
    numbers = [r.criterion for r in results]
    if len(set(numbers)) != len(numbers):
        raise BadRequestError("同一条标准只能给一个结论 (One verdict per criterion.)",
                              code="duplicate_criterion")  # fmt: skip
    for verdict in results:
        if not verdict.evidence.strip():
            raise BadRequestError(
                f"标准 {verdict.criterion} 的结论需要依据 (Verdict {verdict.criterion} needs "
                "evidence: say what you checked.)",
                code="note_required",
                criterion=verdict.criterion,
            )
    project_id = member.project_id
    if any(r.artifacts for r in results) or any(r.passed for r in results):
        await _precheck(core, member, task_ref, _E.ACCEPT)
    if any(r.passed for r in results):
        # A criterion passes only on the files as they were submitted.
        await attempt_actions.check_artifacts_unchanged(core, project_id, task_ref)
    artifacts = {
        r.criterion: await inspect_artifacts(core, project_id, r.artifacts, task_ref)
        for r in results
    }

    def job(conn: Connection, tx: Tx) -> dict[str, Any]:
        task_actions.check_open(conn, member)
        task = task_actions.find_task(conn, project_id, task_ref)
        authorize(_E.ACCEPT, task_actions.roles_of(member, task))
        if task.state is not _S.IN_REVIEW:
            raise ConflictError(
                f"任务 {task.key} 处于 {task.state}，不在评审中 (Task {task.key} is {task.state}, "
                "not in review.)",
                code="not_in_review",
                state=str(task.state),
            )
        criteria = {n: (cid, text) for cid, n, text in tasks_store.criteria_of(conn, task.id)}
        unknown = [n for n in numbers if n not in criteria]
        if unknown:
            raise BadRequestError(
                f"没有这些标准：{unknown}；本任务有 1–{len(criteria)} "
                f"(No criteria {unknown}; this task has 1–{len(criteria)}.)",
                code="bad_criterion",
                criteria=unknown,
            )
        lines: list[dict[str, Any]] = []
        for verdict in sorted(results, key=lambda r: r.criterion):
            criterion_id, text = criteria[verdict.criterion]
            review_id = tasks_store.insert_verdict(
                conn, project_id=project_id, task_id=task.id, criterion_id=criterion_id,
                revision=task.revision, passed=verdict.passed, note=verdict.evidence.strip(),
                reviewer_id=member.id, now=tx.now,
            )  # fmt: skip
            cited = EvidenceInput(None, verdict.artifacts, verdict.messages)
            insert_evidence(
                conn, tx, task, task.revision, member, cited, artifacts[verdict.criterion],
                review_id,
            )  # fmt: skip
            lines.append({"n": verdict.criterion, "text": text, "passed": verdict.passed,
                          "evidence": verdict.evidence.strip()})  # fmt: skip
        verdicts = tasks_store.latest_verdicts(conn, task.id)
        passes = {c: (v.revision, v.passed) for c, v in verdicts.items()}
        ids = [cid for cid, _ in criteria.values()]
        failed = [r for r in results if not r.passed]
        owner = _member_of(conn, task.owner_id)
        fx = task_actions.Effects(project_id)
        by = task_actions.actor_of(member).handle_or_none
        event: TaskEvent | None = None
        to: list[Member] = []
        for_agents = ""
        if failed:
            event = _E.REQUEST_CHANGES
            next_code = None
            if owner is not None:
                to = [owner]
                for_agents = task_actions.next_step(owner, "resubmit", task).agents
                next_code = task_actions.next_code(owner, "resubmit")
            notice = notices.task_reviewed(
                task.key, task.revision, by, lines, outcome="changes",
                owner=owner.handle if owner is not None else None, next_step=next_code,
            )  # fmt: skip
        elif acceptance_complete(ids, passes, task.revision):
            event = _E.ACCEPT
            notice = notices.task_reviewed(task.key, task.revision, by, lines, outcome="accepted")
        else:
            left = len(missing_criteria(ids, passes, task.revision))
            notice = notices.task_reviewed(
                task.key, task.revision, by, lines, outcome="partial", left=left
            )
        meta = {**task_actions.task_meta(task, "review"), "notice": notice.meta()}
        task_actions.post_message(conn, tx, fx, notice.body, meta, to=to, for_agents=for_agents)
        if event is not None:
            reason = "；".join(f"{r.criterion}. {r.evidence.strip()}" for r in failed) or None
            task_actions.fire(
                conn, tx, fx, task, event, task_actions.actor_of(member), reason, announce=False
            )
        fx.flush(conn, tx)
        return task_actions.current_object(conn, project_id, task.id)

    return await core.db.write(job, locks=(member.project_id,))


# -- command results ----------------------------------------------------------------------------


def insert_command_result(
    conn: Connection,
    tx: Tx,
    *,
    project_id: int,
    member_id: int | None,
    turn_id: int | None,
    command: str,
    exit_code: int,
    duration_ms: int,
    output: bytes | str,
    whole: tuple[int, str] | None = None,
) -> int:
    """Record what a command really did: its full output's size and SHA-256, and a tail.
    ``whole`` is (size, SHA-256) of the full output when ``output`` is only its capped text
    (the runner hashed everything the command wrote)."""
    data = output.encode() if isinstance(output, str) else output
    tail = data[-COMMAND_TAIL_CHARS * 4 :].decode(errors="replace")[-COMMAND_TAIL_CHARS:]
    size, digest = whole if whole is not None else (len(data), hashlib.sha256(data).hexdigest())
    return tasks_store.insert_command_result(
        conn, project_id=project_id, member_id=member_id, turn_id=turn_id,
        command=command[:2000], exit_code=exit_code, duration_ms=max(0, duration_ms),
        output_bytes=size, output_sha256=digest, output_tail=tail, now=tx.now,
    )  # fmt: skip


async def record_command_result(
    core: Services,
    member: Member,
    *,
    turn_id: int | None,
    command: str,
    exit_code: int,
    duration_ms: int,
    output: bytes | str,
    whole: tuple[int, str] | None = None,
) -> int:
    """For the runtime only, after it ran a command itself: the id a submission may cite.

    The ``shell`` tool (:mod:`room.agents.work_tools`) calls this with what the process really
    returned (a killed command is recorded with exit code -1). Nothing a model writes can
    become command evidence any other way.
    """
    return await core.db.write(
        lambda conn, tx: insert_command_result(
            conn, tx, project_id=member.project_id, member_id=member.id, turn_id=turn_id,
            command=command, exit_code=exit_code, duration_ms=duration_ms, output=output,
            whole=whole,
        ),
        locks=(member.project_id,),
    )  # fmt: skip


def _member_of(conn: Connection, member_id: int | None) -> Member | None:
    return members_store.get(conn, member_id) if member_id is not None else None
