"""Purging a trashed project: irreversible, so explicit, stepwise and idempotent.

Only from ``trashed`` (or ``purge_blocked`` to finish a failed run), with the full name typed
exactly and an explicit confirmation, never while a member is running. What the project owns is
released one step at a time, each step in its own transaction and recorded in ``purge_steps``;
a step that fails leaves ``purge_blocked`` and a retry continues after the last finished step.
What stays: the projects row as a tombstone (id, name, purged at, by whom), the audit trail, and
everything outside the data folder — workspaces and source code are never touched.

Races: the first write of a run re-reads the state and writes ``purge_blocked`` at once, so a
restore (allowed only from ``trashed``) can no longer win, and a crash mid-run leaves a state
that only a retry leaves. ``core.purging`` holds the projects with a run under way in this
process: a second purge of the same project is refused instead of running the steps twice.
Members go last: until they are gone the owner can still reach the project to retry.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from room.actions import attachments as attachment_actions
from room.actions import attempts as attempt_actions
from room.actions.lifecycle import decision_for, load, refuse
from room.errors import ConflictError, RoomError
from room.rules.effects import Broadcast, RosterChanged
from room.rules.entities import Member, Project
from room.rules.lifecycle import ProjectOp, ProjectState, check_purge_request, finish_purge
from room.rules.ops import project_frame
from room.rules.protocol import encode
from room.services import Services
from room.settings import Settings
from room.store import Tx
from room.store import attempts as attempts_store
from room.store import audit as audit_store
from room.store import memory as memory_store
from room.store import portfolio as portfolio_store
from room.store import projects as projects_store
from room.store import reactions as reactions_store
from room.store import research as research_store
from room.store import search as search_store
from room.store import threads as threads_store
from room.store.dialect import Connection
from room.store.schema_tasks import TASK_TABLES

StepFn = Callable[[Connection, int, Settings], dict[str, Any]]
Failure = tuple[str, str]  # the step's name, the error


@dataclass(frozen=True, slots=True)
class PurgeStep:
    name: str
    label: str
    run: StepFn


def _delete(conn: Connection, sql: str, project_id: int) -> int:
    return conn.execute(sql, {"p": project_id}).rowcount


def _sessions(conn: Connection, project_id: int, settings: Settings) -> dict[str, Any]:
    members = "(SELECT id FROM members WHERE project_id = :p)"
    return {
        "transcript_entries": _delete(
            conn, f"DELETE FROM transcript_entries WHERE member_id IN {members}", project_id
        ),
        "checkpoints": _delete(conn, "DELETE FROM checkpoints WHERE project_id = :p", project_id),
        "model_requests": _delete(
            conn, "DELETE FROM model_requests WHERE project_id = :p", project_id
        ),
        "turns": _delete(conn, "DELETE FROM turns WHERE project_id = :p", project_id),
        # Member stops whose notices were still owed (room.actions.stops): no one to tell.
        "member_stops": _delete(conn, "DELETE FROM member_stops WHERE project_id = :p", project_id),
    }


def _tokens(conn: Connection, project_id: int, settings: Settings) -> dict[str, Any]:
    members = "(SELECT id FROM members WHERE project_id = :p)"
    return {
        "agent_tokens": _delete(
            conn, f"DELETE FROM agent_tokens WHERE member_id IN {members}", project_id
        ),
        "invites": _delete(conn, "DELETE FROM login_links WHERE project_id = :p", project_id),
    }


def _deliveries(conn: Connection, project_id: int, settings: Settings) -> dict[str, Any]:
    return {
        "reconciliations": _delete(
            conn,
            "DELETE FROM reconciliations WHERE delivery_id IN"
            " (SELECT id FROM deliveries WHERE project_id = :p)",
            project_id,
        ),
        "deliveries": _delete(conn, "DELETE FROM deliveries WHERE project_id = :p", project_id),
    }


def _tasks(conn: Connection, project_id: int, settings: Settings) -> dict[str, Any]:
    # The attempt rows only: their worktrees and branches stay on disk (listed in the preview).
    counts = {"task_attempts": attempts_store.delete_project(conn, project_id)}
    return counts | {
        table: _delete(conn, f"DELETE FROM {table} WHERE project_id = :p", project_id)
        for table in TASK_TABLES
    }


def _memory(conn: Connection, project_id: int, settings: Settings) -> dict[str, Any]:
    return memory_store.delete_project(conn, project_id)


def _research(conn: Connection, project_id: int, settings: Settings) -> dict[str, Any]:
    return research_store.delete_project(conn, project_id)


def _search(conn: Connection, project_id: int, settings: Settings) -> dict[str, Any]:
    return search_store.purge_project(conn, project_id)


def _messages(conn: Connection, project_id: int, settings: Settings) -> dict[str, Any]:
    messages = "(SELECT id FROM messages WHERE project_id = :p)"
    counts = {
        **threads_store.purge_project(conn, project_id),
        "reactions": reactions_store.purge_project(conn, project_id),
        "mentions": _delete(
            conn, f"DELETE FROM mentions WHERE message_id IN {messages}", project_id
        ),
        "message_edits": _delete(
            conn, f"DELETE FROM message_edits WHERE message_id IN {messages}", project_id
        ),
        "events": _delete(conn, "DELETE FROM events WHERE project_id = :p", project_id),
        "read_cursors": _delete(conn, "DELETE FROM read_cursors WHERE project_id = :p", project_id),
    }
    conn.execute("UPDATE projects SET lead_member_id = NULL WHERE id = :p", {"p": project_id})
    counts["messages"] = _delete(conn, "DELETE FROM messages WHERE project_id = :p", project_id)
    return counts


def _attachments(conn: Connection, project_id: int, settings: Settings) -> dict[str, Any]:
    """The project's uploads; their files unless another project still has the same content
    (files are content-addressed and shared)."""
    return attachment_actions.purge_project(conn, project_id, settings.attachments_root)


def _settings(conn: Connection, project_id: int, settings: Settings) -> dict[str, Any]:
    return {
        "route_settings": _delete(
            conn, "DELETE FROM route_settings WHERE project_id = :p", project_id
        ),
        "route_changes": _delete(
            conn, "DELETE FROM route_changes WHERE project_id = :p", project_id
        ),
        "project_brakes": _delete(
            conn, "DELETE FROM project_brakes WHERE project_id = :p", project_id
        ),
        "project_snapshots": _delete(
            conn, "DELETE FROM project_snapshots WHERE project_id = :p", project_id
        ),
        "leases": _delete(conn, "DELETE FROM leases WHERE project_id = :p", project_id),
        # An upload still under way when the project went: its room need not be held any more.
        "upload_reservations": _delete(
            conn, "DELETE FROM upload_reservations WHERE project_id = :p", project_id
        ),
        # Timeline, milestones, dependencies (both ways) and the risk log (docs/portfolio.md).
        "portfolio": portfolio_store.purge_project(conn, project_id),
    }


def _members(conn: Connection, project_id: int, settings: Settings) -> dict[str, Any]:
    return {
        # Again here: a cursor written late (a deferred read) must not hold the members back.
        "read_cursors": _delete(conn, "DELETE FROM read_cursors WHERE project_id = :p", project_id),
        "member_names": _delete(conn, "DELETE FROM member_names WHERE project_id = :p", project_id),
        "notification_levels": _delete(
            conn,
            "DELETE FROM notification_levels"
            " WHERE member_id IN (SELECT id FROM members WHERE project_id = :p)",
            project_id,
        ),
        "members": _delete(conn, "DELETE FROM members WHERE project_id = :p", project_id),
    }


def project_files(data: Path, project_id: int) -> Path:
    return data / "projects" / str(project_id)


def _files(conn: Connection, project_id: int, settings: Settings) -> dict[str, Any]:
    """Files the server keeps for the project under the data folder — nothing else, ever."""
    folder = project_files(settings.data, project_id)
    root = settings.data.resolve()
    if not folder.exists() and not folder.is_symlink():
        return {"files": 0}
    if folder.is_symlink() or not folder.resolve().is_relative_to(root):
        # A link out of the data folder is removed as a link; its target is never followed.
        folder.unlink()
        return {"files": 0, "unlinked": str(folder)}
    count = sum(1 for p in folder.rglob("*") if p.is_file() or p.is_symlink())
    # rmtree removes symlinks inside as links, without following them.
    shutil.rmtree(folder)
    return {"files": count}


PURGE_STEPS: tuple[PurgeStep, ...] = (
    # First: the project's text is no longer findable, whatever a later step meets.
    PurgeStep("search", "the search index: messages and memory records", _search),
    PurgeStep("sessions", "agent sessions, transcripts, model requests", _sessions),
    PurgeStep("tokens", "agent tokens and invites", _tokens),
    PurgeStep("deliveries", "the delivery ledger", _deliveries),
    PurgeStep("memory", "memory records, their revisions and version", _memory),
    PurgeStep("research", "research runs, their revisions and items", _research),
    PurgeStep("tasks", "plans, tasks, evidence and decisions", _tasks),
    PurgeStep("attachments", "attachments and the files no other project uses", _attachments),
    PurgeStep("messages", "messages, edits, mentions, events, read cursors", _messages),
    PurgeStep("settings", "routes, brake, snapshots", _settings),
    PurgeStep("files", "files under the data folder", _files),
    # Last: once the members are gone nobody can reach the project to retry a purge.
    PurgeStep("members", "members and their names", _members),
)

KEPT = (
    {"what": "tombstone", "detail": "project id, name, purged at, by whom"},
    {"what": "audit", "detail": "every audit record of the project"},
    {"what": "workspace", "detail": "the workspace folder and source code are never deleted"},
    {"what": "accounts", "detail": "people's accounts (they may be in other projects)"},
    {"what": "worktrees", "detail": "task worktrees and their branches are never deleted"},
)


def preview(conn: Connection, project_id: int, settings: Settings) -> dict[str, Any]:
    """What a purge would delete (counts) and what it keeps; changes nothing."""
    conn.execute("SAVEPOINT preview")
    try:
        delete = []
        for step in PURGE_STEPS:
            if step.name == "attachments":  # counted, no file touched
                counts = attachment_actions.purge_preview(conn, project_id)
                delete.append({"step": step.name, "what": step.label, "counts": counts})
            elif step.name == "files":
                folder = project_files(settings.data, project_id)
                files = sum(1 for p in folder.rglob("*") if p.is_file()) if folder.is_dir() else 0
                delete.append({"step": step.name, "what": step.label, "counts": {"files": files}})
            else:
                delete.append(
                    {
                        "step": step.name,
                        "what": step.label,
                        "counts": step.run(conn, project_id, settings),
                    }
                )
    finally:
        conn.execute("ROLLBACK TO preview")
        conn.execute("RELEASE preview")
    project = projects_store.get(conn, project_id)
    kept = [dict(item) for item in KEPT]
    if project is not None and project.workspace:
        kept[2] = {**kept[2], "path": project.workspace}
    return {"delete": delete, "keep": kept}


async def cleanup_preview(core: Services, project_id: int) -> dict[str, Any]:
    settings = core.settings
    # A read connection is query-only; the preview counts inside a rolled-back savepoint.
    result = await core.db.write(lambda conn, tx: preview(conn, project_id, settings))
    # What git keeps for the project (read off the loop, outside the write).
    kept = await attempt_actions.kept_worktrees(core, project_id)
    for item in result["keep"]:
        if item["what"] == "worktrees":
            item["worktrees"] = kept
    return result


async def purge(
    core: Services,
    actor: Member,
    project_id: int,
    *,
    confirm_name: str,
    confirmed: bool,
    steps: Sequence[PurgeStep] = PURGE_STEPS,
) -> dict[str, Any]:
    project = await load(core, project_id)
    decision = decision_for(project, ProjectOp.PURGE, actor)
    if not decision.allowed:
        await refuse(core, actor, project, "purge", decision.reason or "")
        decision.raise_if_refused()
    try:
        check_purge_request(project.name, confirm_name, confirmed)
    except RoomError as exc:
        await refuse(core, actor, project, "purge", exc.code)
        raise
    running = core.agents.running_members(project_id)
    if running:
        await refuse(core, actor, project, "purge", "members_running")
        raise ConflictError(
            "有成员仍在运行，先停止再清除 (Members are still running; stop them first.)",
            code="members_running",
            running=running,
        )
    if project_id in core.purging:
        await refuse(core, actor, project, "purge", "purge_in_progress")
        raise ConflictError(
            "清除正在进行，请稍候 (A purge of this project is already running; wait for it.)",
            code="purge_in_progress",
        )
    # Checked and taken with no await in between: the event loop runs one purge start at a time.
    core.purging.add(project_id)
    try:
        return await _run(core, actor, project, steps)
    finally:
        core.purging.discard(project_id)


PURGEABLE = frozenset({ProjectState.TRASHED.value, ProjectState.PURGE_BLOCKED.value})


async def _run(
    core: Services, actor: Member, project: Project, steps: Sequence[PurgeStep]
) -> dict[str, Any]:
    project_id = project.id
    settings = core.settings
    done = await _begin(core, actor, project_id)
    core.hub.cut_project(project_id, "project purged")
    # The last step (the members) runs in the transaction that ends the purge: until it
    # commits the owner can still reach the project, and once it has, the purge is finished —
    # a crash in between never leaves a blocked purge nobody can retry.
    last = steps[-1] if steps and steps[-1].name not in done else None
    before_last = [s for s in steps if s.name not in done and s is not last]
    results, failed = await _run_steps(core, project_id, settings, before_last)
    state, results, failed = await core.db.write(
        partial(_finish, actor=actor, project=project, settings=settings, last=last, results=results,
                earlier=failed),
        locks=(project_id,),
    )  # fmt: skip
    return {
        "project_id": project_id,
        "state": state,
        "steps": results,
        "failed": {"step": failed[0], "error": failed[1]} if failed else None,
    }


async def _begin(core: Services, actor: Member, project_id: int) -> set[str]:
    """Start (or resume) a run: the names of the steps an earlier run already finished.
    Refused when the project left the purgeable states meanwhile."""
    started = await core.db.write(
        partial(_start, actor=actor, project_id=project_id), locks=(project_id,)
    )
    if isinstance(started, str):
        raise ConflictError(
            f"项目已变为 {started}，未清除 (The project is now {started}; nothing was purged.)",
            code="state_changed",
            state=started,
        )
    return set(started)


def _start(conn: Connection, tx: Tx, *, actor: Member, project_id: int) -> list[str] | str:
    """Audit the start and enter ``purge_blocked``; the finished steps, or the state that
    refuses the purge."""
    state = projects_store.state_of(conn, project_id) or ProjectState.PURGED.value
    allowed = state in PURGEABLE
    audit_store.record(
        conn,
        now=tx.now,
        actor_kind="human",
        actor_id=actor.id,
        project_id=project_id,
        action="project.purge",
        from_state=state,
        outcome="started" if allowed else "refused",
        detail=None if allowed else {"reason": "state_changed"},
    )
    if not allowed:
        return state
    # At once: restore is allowed only from trashed, so it cannot win from here on, and a
    # run cut off by a crash is left for a retry.
    projects_store.set_state(
        conn,
        project_id,
        state=ProjectState.PURGE_BLOCKED.value,
        state_from=None,
        stop_target=None,
        now=tx.now,
    )
    return [
        str(r[0])
        for r in conn.execute(
            "SELECT step FROM purge_steps WHERE project_id = :p", {"p": project_id}
        )
    ]


async def _run_steps(
    core: Services, project_id: int, settings: Settings, steps: Sequence[PurgeStep]
) -> tuple[dict[str, Any], Failure | None]:
    """Each step in its own write, in order, until one fails: the counts of those that ran and
    the failure."""
    results: dict[str, Any] = {}
    for step in steps:
        try:
            results[step.name] = await core.db.write(
                partial(_run_step, project_id=project_id, settings=settings, step=step),
                locks=(project_id,),
            )
        except Exception as exc:
            return results, (step.name, f"{type(exc).__name__}: {exc}")
    return results, None


def _run_step(
    conn: Connection, tx: Tx, *, project_id: int, settings: Settings, step: PurgeStep
) -> dict[str, Any]:
    """One step, recorded in ``purge_steps`` so a retry continues after it."""
    counts = step.run(conn, project_id, settings)
    conn.execute(
        "INSERT OR IGNORE INTO purge_steps (project_id, step, done_at, detail)"
        " VALUES (:p, :s, :now, :d)",
        {"p": project_id, "s": step.name, "now": tx.now, "d": str(counts)},
    )
    return counts


def _finish(
    conn: Connection,
    tx: Tx,
    *,
    actor: Member,
    project: Project,
    settings: Settings,
    last: PurgeStep | None,
    results: dict[str, Any],
    earlier: Failure | None,
) -> tuple[str, dict[str, Any], Failure | None]:
    """End the run: the last step (when all before it succeeded), the state it reached
    (``purged`` with a tombstone, or ``purge_blocked``), the audit record and the
    announcement. Returns the state, every step's counts and the failure."""
    # Pure in what it returns (the writer may run a job twice): nothing outside is changed.
    project_id = project.id
    state = projects_store.state_of(conn, project_id) or ProjectState.PURGED.value
    # Only over the state this run wrote: never turn a finished purge back into blocked.
    ours = state == ProjectState.PURGE_BLOCKED.value
    done_now, failure = dict(results), earlier
    if ours and failure is None and last is not None:
        failure = _run_last_step(conn, tx, project_id, settings, last, done_now)
    reached = finish_purge(failure is None)
    if ours:
        projects_store.set_state(
            conn,
            project_id,
            state=reached.value,
            state_from=None,
            stop_target=None,
            now=tx.now,
        )
        state = reached.value
    if ours and reached is ProjectState.PURGED:
        _write_tombstone(conn, tx, project, actor)
    audit_store.record(
        conn,
        now=tx.now,
        actor_kind="human",
        actor_id=actor.id,
        project_id=project_id,
        action="project.purge",
        from_state=project.state,
        outcome=("ok" if failure is None else "purge_blocked") if ours else "state_changed",
        detail={"steps": done_now, "failed": list(failure) if failure else None},
    )
    frame = encode(project_frame({"id": project_id, "state": state}))
    tx.emit(Broadcast(project_id, frame))
    projects_store.bump_roster(conn, project_id)
    tx.emit(RosterChanged(project_id))
    return state, done_now, failure


def _run_last_step(
    conn: Connection,
    tx: Tx,
    project_id: int,
    settings: Settings,
    last: PurgeStep,
    done_now: dict[str, Any],
) -> Failure | None:
    """The last step inside the finishing transaction, in a savepoint: a failure undoes only
    the step, and the run ends ``purge_blocked``."""
    conn.execute("SAVEPOINT last_step")
    failure = None
    try:
        done_now[last.name] = _run_step(
            conn, tx, project_id=project_id, settings=settings, step=last
        )
    except Exception as exc:
        conn.execute("ROLLBACK TO last_step")
        failure = (last.name, f"{type(exc).__name__}: {exc}")
    conn.execute("RELEASE last_step")
    return failure


def _write_tombstone(conn: Connection, tx: Tx, project: Project, actor: Member) -> None:
    conn.execute(
        "INSERT INTO project_tombstones (project_id, name, purged_at, purged_by)"
        " VALUES (:p, :name, :now, :by) ON CONFLICT (project_id) DO UPDATE"
        " SET name = excluded.name, purged_at = excluded.purged_at,"
        " purged_by = excluded.purged_by",
        {"p": project.id, "name": project.name, "now": tx.now, "by": actor.user_id},
    )
