"""Decisions (ADR-0001 …) and requirement changes.

A decision has context, decision, consequences, a status (``proposed`` → ``accepted`` →
``superseded``) and revisions. Agents propose; people accept; a person's own decision is accepted
at once. Accepting a decision that ``supersedes`` another marks that one ``superseded``.

A **requirement change** is never inferred: a person marks a message (the ``/change`` prefix, or
the UI action). The server keeps the original words, adds a revision to the project's requirement
decision, and marks ``needs_sync`` exactly the tasks bound to it (or the targets named, which are
then bound to it). Each affected owner is told — agents get a delivery — and must answer with a
sync receipt (``sync_receipt``: ``room_task_update`` action ``sync``, or the HTTP sync-receipt);
the decision log lists, per revision, who has synced. Accepted, cancelled and handed-off tasks
are not interrupted (a person reopens accepted work first); they are listed as ``skipped``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from room.actions import memory as memory_actions
from room.actions import plans as plan_actions
from room.actions import tasks as task_actions
from room.actions.message_edits import annotate_message
from room.errors import BadRequestError, ConflictError, ForbiddenError, NotFoundError, RoomError
from room.rules import notices
from room.rules.effects import FollowUp
from room.rules.entities import Member
from room.rules.tasks import AFTER_SYNC, TaskEvent, TaskState
from room.services import Services
from room.store import Tx
from room.store import audit as audit_store
from room.store import decisions as decisions_store
from room.store import members as members_store
from room.store import messages as messages_store
from room.store import projects as projects_store
from room.store import sync_requests as sync_store
from room.store import tasks as tasks_store
from room.store.db import WriteJob
from room.store.dialect import Connection

MAX_TITLE_CHARS = 200
MAX_TEXT_CHARS = 8000
MAX_ALTERNATIVES = 12
MAX_ALTERNATIVE_CHARS = 2000
_CHANGE_RE = re.compile(r"/change(?:\s*\[(?P<keys>[^\]\n]*)\]\s*|\s+|$)(?P<text>.*)", re.DOTALL)
_SYNCABLE = frozenset(AFTER_SYNC) | {TaskState.NEEDS_SYNC}


@dataclass(frozen=True, slots=True)
class ChangeCommand:
    """``/change [api, ui] text`` → keys ``["api", "ui"]``; plain ``/change text`` → no keys."""

    keys: tuple[str, ...] | None
    text: str


def parse_change_command(body: str) -> ChangeCommand | None:
    """The requirement-change command at the start of ``body``, or None (pure).

    Only a leading ``/change`` followed by a space, a line break, ``[`` or the end counts:
    ``/changes`` or a ``/change`` later in the text is an ordinary message.
    """
    found = _CHANGE_RE.fullmatch(body.lstrip())
    if found is None:
        return None
    raw_keys = found.group("keys")
    keys = None
    if raw_keys is not None:
        parts = (k.strip("` ") for k in re.split(r"[,，、\s]+", raw_keys))
        keys = tuple(dict.fromkeys(k for k in parts if k))
    return ChangeCommand(keys or None, found.group("text").strip())


def _text(name: str, value: str, limit: int, *, required: bool = True) -> str:
    value = value.strip()
    if (required and not value) or len(value) > limit:
        raise BadRequestError(
            f"{name} 需要 1–{limit} 个字符 ({name} needs 1–{limit} characters.)",
            code="bad_decision",
            field=name,
        )
    return value


def alternatives_of(raw: Any) -> list[dict[str, str]]:
    """The options a decision rejected: a list of ``{option, why_rejected}``, both required
    (``empty_field`` names the one missing, ``bad_field`` a wrong shape)."""
    if raw is None:
        return []
    if not isinstance(raw, list) or len(raw) > MAX_ALTERNATIVES:
        raise BadRequestError(
            f"alternatives 是最多 {MAX_ALTERNATIVES} 项的列表，每项 {{option, why_rejected}} "
            f"(alternatives is a list of up to {MAX_ALTERNATIVES} {{option, why_rejected}}.)",
            code="bad_field",
            field="alternatives",
        )
    out = []
    for n, item in enumerate(raw):
        if not isinstance(item, dict) or set(item) - {"option", "why_rejected"}:
            raise BadRequestError(
                "每个备选项是 {option, why_rejected} (Each alternative is {option, why_rejected}.)",
                code="bad_field",
                field=f"alternatives[{n}]",
            )
        pair = {}
        for key in ("option", "why_rejected"):
            value = item.get(key)
            text = value.strip() if isinstance(value, str) else ""
            if not text:
                raise BadRequestError(
                    f"alternatives[{n}].{key} 不能为空 ({key} is required.)",
                    code="empty_field",
                    field=f"alternatives[{n}].{key}",
                )
            if len(text) > MAX_ALTERNATIVE_CHARS:
                raise BadRequestError(
                    f"alternatives[{n}].{key} 超过 {MAX_ALTERNATIVE_CHARS} 字 (too long.)",
                    code="record_too_large",
                    field=f"alternatives[{n}].{key}",
                    limit=MAX_ALTERNATIVE_CHARS,
                )
            pair[key] = text
        out.append(pair)
    return out


async def propose_decision(
    core: Services,
    actor: Member,
    *,
    title: str,
    context: str,
    decision: str,
    consequences: str = "",
    task_keys: list[str] | None = None,
    supersedes: int | None = None,
    alternatives: Any = None,
    constraints: str = "",
) -> dict[str, Any]:
    """Record a decision: ``accepted`` at once when a person writes it, ``proposed`` when an agent
    does. ``task_keys`` binds it to tasks; ``supersedes`` names the number it replaces (applied
    on acceptance); ``alternatives`` are the options rejected (``{option, why_rejected}``) and
    ``constraints`` what bounded the choice. Past the decisions cap (32 KiB) the oldest
    decisions move to the archive (docs/memory.md)."""
    title = _text("title", title, MAX_TITLE_CHARS)
    context = _text("context", context, MAX_TEXT_CHARS)
    decision = _text("decision", decision, MAX_TEXT_CHARS)
    consequences = _text("consequences", consequences, MAX_TEXT_CHARS, required=False)
    constraints = _text("constraints", constraints, MAX_TEXT_CHARS, required=False)
    rejected = alternatives_of(alternatives)
    if not rejected:  # a decision says what it chose over what (docs/memory.md, "Records")
        raise BadRequestError(
            "决定要写明至少一个被否决的方案：alternatives 是 [{option, why_rejected}] "
            "(A decision names at least one alternative it rejected, and why.)",
            code="alternatives_required",
            field="alternatives",
        )
    project_id = actor.project_id
    human = actor.kind == "human"

    def job(conn: Connection, tx: Tx) -> dict[str, Any]:
        task_actions.check_open(conn, actor)
        fx = task_actions.Effects(project_id)
        old = None
        if supersedes is not None:
            old = decisions_store.decision_by_number(conn, project_id, supersedes)
            if old is None or old.status == "superseded":
                raise NotFoundError(
                    f"没有可被取代的 ADR-{supersedes:04d} (No live ADR-{supersedes:04d}.)",
                    code="no_decision",
                )
        tasks = [
            task_actions.find_task(conn, project_id, k) for k in dict.fromkeys(task_keys or [])
        ]
        row = decisions_store.insert_decision(
            conn, project_id=project_id, kind="decision", title=title,
            status="accepted" if human else "proposed", created_by=actor.id,
            accepted_by=actor.id if human else None, now=tx.now,
            supersedes=old.id if old else None,
        )  # fmt: skip
        decisions_store.insert_decision_revision(
            conn, project_id=project_id, decision_id=row.id, revision=1, context=context,
            decision=decision, consequences=consequences, author_id=actor.id, now=tx.now,
            alternatives=rejected, constraints=constraints,
        )  # fmt: skip
        decisions_store.bind_tasks(conn, project_id, row.id, [t.id for t in tasks])
        fx.decisions.add(row.id)
        fx.decisions.update(memory_actions.enforce_cap(conn, tx, project_id, "decision"))
        fx.tasks |= {t.id for t in tasks}
        if human and old is not None:
            _supersede(conn, tx, fx, old.id, row.id)
        audit_store.record(
            conn, now=tx.now, actor_kind=actor.kind, actor_id=actor.id, project_id=project_id,
            action="decision.accept" if human else "decision.propose", outcome="ok",
            detail={"decision": row.label, "title": title},
        )  # fmt: skip
        who = task_actions.actor_of(actor).handle_or_none
        code = "decision_recorded" if human else "decision_proposed"
        return _announce(
            conn, tx, fx, row.id, row.label, notices.decision(code, who, row.label, title)
        )

    return await core.db.write(job, locks=(actor.project_id,))


def _announce(
    conn: Connection,
    tx: Tx,
    fx: task_actions.Effects,
    decision_id: int,
    label: str,
    notice: notices.Notice,
) -> dict[str, Any]:
    """Post the decision's notice, publish what changed, and return the decision as it is now."""
    task_actions.post_message(
        conn, tx, fx, notice.body, {"decision": label, "notice": notice.meta()}
    )
    fx.flush(conn, tx)
    current = decisions_store.get_decision(conn, decision_id)
    assert current is not None
    return decisions_store.decision_object(conn, current)


def _supersede(
    conn: Connection, tx: Tx, fx: task_actions.Effects, old_id: int, new_id: int
) -> None:
    decisions_store.set_decision_status(conn, old_id, "superseded", tx.now, superseded_by=new_id)
    fx.decisions.add(old_id)


async def accept_decision(core: Services, actor: Member, number: int) -> dict[str, Any]:
    """A person accepts a proposed decision (and retires the one it supersedes)."""
    if actor.kind != "human":
        raise ForbiddenError(
            "只有人类可以接受决定 (Only a person accepts a decision.)", code="human_only"
        )
    project_id = actor.project_id

    def job(conn: Connection, tx: Tx) -> dict[str, Any]:
        task_actions.check_open(conn, actor)
        row = decisions_store.decision_by_number(conn, project_id, number)
        if row is None:
            raise NotFoundError(f"没有 ADR-{number:04d} (No ADR-{number:04d}.)", code="no_decision")
        if row.status != "proposed":
            raise ConflictError(
                f"{row.label} 状态为 {row.status}，不是 proposed "
                f"({row.label} is {row.status}, not proposed.)",
                code="decision_not_proposed",
                status=row.status,
            )
        fx = task_actions.Effects(project_id)
        decisions_store.set_decision_status(conn, row.id, "accepted", tx.now, accepted_by=actor.id)
        fx.decisions.add(row.id)
        if row.supersedes is not None:
            _supersede(conn, tx, fx, row.supersedes, row.id)
        audit_store.record(
            conn, now=tx.now, actor_kind="human", actor_id=actor.id, project_id=project_id,
            action="decision.accept", from_state="proposed", outcome="ok",
            detail={"decision": row.label},
        )  # fmt: skip
        who = task_actions.actor_of(actor).handle_or_none
        notice = notices.decision("decision_accepted", who, row.label, row.title)
        return _announce(conn, tx, fx, row.id, row.label, notice)

    return await core.db.write(job, locks=(project_id,))


def requirement_change_from_message(
    conn: Connection,
    tx: Tx,
    message_id: int,
    author_member: Member,
    target_task_keys: list[str] | None,
) -> dict[str, Any]:
    """A person marks a message as a requirement change; call inside a write job.

    ``author_member`` is the person marking it (never an agent); the message must be a live
    message written by a person in the same project. The change text is the message body (after
    a ``/change [keys]`` prefix, whose keys are the targets when ``target_task_keys`` is None);
    the whole body is kept verbatim as the original words. It becomes a new revision of the
    project's requirement decision (created first if the project has none). The affected tasks
    are the targets (bound to the decision from now on) or else every task bound to it; each one
    that can be interrupted goes to ``needs_sync`` and gets an open sync request for its owner.
    One notice replies to the message and reaches every affected owner (agents get a delivery).

    Idempotent per message: a second call returns the first result with ``duplicate: true``.
    Returns ``{decision, number, revision, affected, skipped, duplicate}``.
    """
    row, writer = _change_message(conn, message_id, author_member)
    earlier = _earlier_change(conn, message_id)
    if earlier is not None:
        return earlier
    text, keys = _change_of(str(row["body"]), target_task_keys)
    fx = task_actions.Effects(author_member.project_id)
    requirement, revision = _requirement_to_revise(conn, tx, fx, author_member)
    affected_ids = _affected_task_ids(conn, requirement, keys)
    label = f"{requirement.label} 第 {revision} 版"
    affected, skipped, owners = _require_sync(conn, tx, fx, requirement, revision, label,
                                              affected_ids)  # fmt: skip
    _record_revision(conn, tx, fx, requirement, revision, author_member, writer, message_id,
                     row, text, affected, skipped)  # fmt: skip
    _post_change_notice(conn, tx, fx, requirement, revision, author_member, message_id,
                        text, affected, skipped, owners)  # fmt: skip
    # The message itself now says it changed the requirement (the page shows a badge on it).
    marked = {"decision": requirement.label, "revision": revision}
    annotate_message(conn, tx, message_id, {"requirement_change": marked})
    fx.flush(conn, tx)
    keys_affected = [t.key for t in affected]
    return _change_result(requirement, revision, keys_affected, skipped, duplicate=False)


def _change_message(
    conn: Connection, message_id: int, author_member: Member
) -> tuple[dict[str, Any], Member]:
    """The message a person marks, and its writer: a live message of the same project, written
    by a person."""
    if author_member.kind != "human":
        raise ForbiddenError(
            "只有人类可以标记需求变更 (Only a person marks a requirement change.)",
            code="human_only",
        )
    row = messages_store.get_row(conn, message_id)
    if (
        row is None
        or row["project_id"] != author_member.project_id
        or row["deleted_at"] is not None
    ):
        raise NotFoundError("没有这条消息 (No such message in this project.)", code="no_message")
    writer = members_store.get(conn, row["author_id"]) if row["author_id"] else None
    if writer is None or writer.kind != "human":
        raise BadRequestError(
            "需求变更必须是人类说的话 (A requirement change must be a person's own words.)",
            code="not_human_words",
        )
    return row, writer


def _earlier_change(conn: Connection, message_id: int) -> dict[str, Any] | None:
    """The result of the change this message already made (``duplicate: true``), if any."""
    done = decisions_store.revision_from_message(conn, message_id)
    if done is None:
        return None
    decision = decisions_store.get_decision(conn, done[0])
    assert decision is not None
    syncs = [s for s in sync_store.sync_requests_of(conn, decision.id)
             if s["revision"] == done[1]]  # fmt: skip
    affected = [s["task"] for s in syncs]
    return _change_result(decision, done[1], affected, [], duplicate=True)


def _change_of(original: str, target_task_keys: list[str] | None) -> tuple[str, list[str] | None]:
    """The new requirement's text and the task keys it targets (the caller's, else those of a
    ``/change [keys]`` prefix, else None: every bound task)."""
    command = parse_change_command(original)
    text = command.text if command is not None else original.strip()
    keys = target_task_keys if target_task_keys is not None else (
        list(command.keys) if command is not None and command.keys else None
    )  # fmt: skip
    if not text:
        raise BadRequestError(
            "需求变更需要写明新的要求 (Say what the new requirement is.)", code="empty_change"
        )
    return text, keys


def _requirement_to_revise(
    conn: Connection, tx: Tx, fx: task_actions.Effects, author_member: Member
) -> tuple[decisions_store.DecisionRow, int]:
    """The project's requirement decision and the number of the revision this change adds."""
    project_id = author_member.project_id
    requirement = decisions_store.requirement_decision(conn, project_id)
    if requirement is None and not _project_goal(conn, project_id):
        # Nothing to revise yet: the change itself is the requirement's first revision.
        requirement = decisions_store.insert_decision(
            conn, project_id=project_id, kind="requirement", title=plan_actions.REQUIREMENT_TITLE,
            status="accepted", created_by=author_member.id, accepted_by=author_member.id,
            now=tx.now,
        )  # fmt: skip
        return requirement, 1
    requirement = requirement or plan_actions.requirement_decision(conn, tx, fx, None)
    return requirement, requirement.revision + 1


def _affected_task_ids(
    conn: Connection, requirement: decisions_store.DecisionRow, keys: list[str] | None
) -> list[int]:
    """The tasks named by ``keys`` (bound to the requirement from now on), or else every task
    already bound to it."""
    if not keys:
        return decisions_store.bound_tasks(conn, requirement.id)
    project_id = requirement.project_id
    targets = [task_actions.find_task(conn, project_id, k) for k in dict.fromkeys(keys)]
    decisions_store.bind_tasks(conn, project_id, requirement.id, [t.id for t in targets])
    return [t.id for t in targets]


def _require_sync(
    conn: Connection,
    tx: Tx,
    fx: task_actions.Effects,
    requirement: decisions_store.DecisionRow,
    revision: int,
    label: str,
    task_ids: list[int],
) -> tuple[list[tasks_store.TaskRow], list[dict[str, str]], dict[int, Member]]:
    """Move each task that can be interrupted to ``needs_sync`` with an open sync request for
    its owner. Returns the affected tasks, the skipped ones (key and state) and the owners."""
    affected, skipped, owners = [], [], {}
    for task_id in task_ids:
        task = tasks_store.get_task(conn, task_id)
        assert task is not None
        if task.state not in _SYNCABLE:
            skipped.append({"task": task.key, "state": str(task.state)})
            continue
        task_actions.fire(conn, tx, fx, task, TaskEvent.REQUIRE_SYNC, task_actions.SYSTEM, label)
        sync_store.insert_sync_request(
            conn, project_id=requirement.project_id, decision_id=requirement.id,
            revision=revision, task_id=task.id, owner_id=task.owner_id, now=tx.now,
        )  # fmt: skip
        affected.append(task)
        owner = members_store.get(conn, task.owner_id)
        if owner is not None:
            owners[owner.id] = owner
    return affected, skipped, owners


def _record_revision(
    conn: Connection,
    tx: Tx,
    fx: task_actions.Effects,
    requirement: decisions_store.DecisionRow,
    revision: int,
    author_member: Member,
    writer: Member,
    message_id: int,
    row: dict[str, Any],
    text: str,
    affected: list[tasks_store.TaskRow],
    skipped: list[dict[str, str]],
) -> None:
    """The requirement's new revision (keeping the message's original words) and its audit
    record."""
    project_id = requirement.project_id
    consequences = "需要同步：" + ("、".join(t.key for t in affected) or "无")
    if skipped:
        consequences += "；未中断：" + "、".join(f"{s['task']}（{s['state']}）" for s in skipped)
    decisions_store.insert_decision_revision(
        conn, project_id=project_id, decision_id=requirement.id, revision=revision,
        context=f"需求变更：{task_actions.actor_of(writer).label} 的消息 #{row['seq']}",
        decision=text, consequences=consequences, author_id=author_member.id, now=tx.now,
        original_text=str(row["body"]), source_message_id=message_id,
    )  # fmt: skip
    fx.decisions.add(requirement.id)
    audit_store.record(
        conn, now=tx.now, actor_kind="human", actor_id=author_member.id, project_id=project_id,
        action="requirement.change", outcome="ok",
        detail={"decision": requirement.label, "revision": revision, "message_id": message_id,
                "affected": [t.key for t in affected], "skipped": skipped},
    )  # fmt: skip


def _post_change_notice(
    conn: Connection,
    tx: Tx,
    fx: task_actions.Effects,
    requirement: decisions_store.DecisionRow,
    revision: int,
    author_member: Member,
    message_id: int,
    text: str,
    affected: list[tasks_store.TaskRow],
    skipped: list[dict[str, str]],
    owners: dict[int, Member],
) -> None:
    """One notice, in reply to the message, that reaches every affected owner."""
    excerpt = text if len(text) <= 300 else text[:299] + "…"
    notice = notices.requirement_changed(
        requirement.label, revision, task_actions.actor_of(author_member).handle_or_none, excerpt,
        [(t.key, owners[t.owner_id].handle) for t in affected if t.owner_id in owners],
        skipped,
    )  # fmt: skip
    task_actions.post_message(
        conn, tx, fx, notice.body,
        {"requirement_change": {"decision": requirement.label, "revision": revision},
         "notice": notice.meta()},
        to=list(owners.values()), reply_to=message_id,
        for_agents='工具调用：读完新需求后用 room_task_update(task="<任务 key>", action="sync", '
        'reason="同步了什么") 确认同步。' if affected else "",
    )  # fmt: skip


def _change_result(
    decision: decisions_store.DecisionRow,
    revision: int,
    affected: list[str],
    skipped: list[dict[str, str]],
    *,
    duplicate: bool,
) -> dict[str, Any]:
    return {
        "decision": decision.label,
        "number": decision.number,
        "revision": revision,
        "affected": affected,
        "skipped": skipped,
        "duplicate": duplicate,
    }


def change_hook(sender: Member, body: str) -> Callable[[int], FollowUp] | None:
    """The send path's hook (:data:`room.services.SendHook`): a person's message that starts with
    ``/change`` (after any leading whitespace) revises the requirement once it is stored, as a
    write of its own. An empty change is refused before the send; a change that fails later
    (a task key that does not exist) is answered with a notice under the message."""
    if sender.kind != "human" or "/change" not in body:  # the common case costs one search
        return None
    command = parse_change_command(body)
    if command is None:
        return None
    if not command.text:
        raise BadRequestError(
            "需求变更需要写明新的要求 (Say what the new requirement is.)", code="empty_change"
        )

    def follow_up(message_id: int) -> FollowUp:
        def job(conn: Connection, tx: Tx) -> dict[str, Any]:
            # The project may have closed since the send committed: a closed project changes
            # no tasks (as the UI's mark does).
            task_actions.check_open(conn, sender)
            return requirement_change_from_message(conn, tx, message_id, sender, None)

        def on_error(error: BaseException) -> WriteJob[int] | None:
            if not isinstance(error, RoomError):
                return None
            notice = notices.requirement_change_failed(error.code, error.message)

            def report(conn: Connection, tx: Tx) -> int:
                task_actions.check_open(conn, sender)  # nothing is said in a closed project
                return task_actions.post_message(
                    conn, tx, task_actions.Effects(sender.project_id), notice.body,
                    {"requirement_change_failed": error.code, "notice": notice.meta()},
                    reply_to=message_id,
                )  # fmt: skip

            return report

        return FollowUp("requirement change", job, on_error, locks=(sender.project_id,))

    return follow_up


def register(core: Services) -> None:
    """Hook the requirement change onto the send path."""
    core.send_hooks.append(change_hook)


async def mark_requirement_change(
    core: Services, member: Member, message_id: int, task_keys: list[str] | None
) -> dict[str, Any]:
    """The UI action: a person marks an existing message as a requirement change."""

    def job(conn: Connection, tx: Tx) -> dict[str, Any]:
        task_actions.check_open(conn, member)
        return requirement_change_from_message(conn, tx, message_id, member, task_keys)

    return await core.db.write(job, locks=(member.project_id,))


def _project_goal(conn: Connection, project_id: int) -> str:
    project = projects_store.get(conn, project_id)
    return project.goal.strip() if project else ""


def decision_log(conn: Connection, project_id: int) -> list[dict[str, Any]]:
    return [
        decisions_store.decision_object(conn, d)
        for d in decisions_store.decisions_of(conn, project_id)
    ]
