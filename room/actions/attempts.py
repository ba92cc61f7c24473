"""Task attempts in git worktrees: made when a member starts a task, kept when it leaves or the
task is handed off or cancelled, merged into the base branch by a person
(:mod:`room.actions.attempt_merge`; docs/tasks.md, "Attempts and worktrees").

How an attempt is made — the worktree first, then the row. Before the ``start`` write job,
:func:`prepare` checks that the start would be allowed, then (in a worker thread, under the
project's git lock) asks :func:`room.infra.worktrees.create_attempt` for the worktree; the write job
then records it with :func:`record`. So a row never claims a worktree that does not exist. If
the write is refused after the worktree was made (a concurrent change of the task), the worktree
stays on disk as a kept branch, listed by ``GET /api/projects/{id}/worktrees``, and making the
same attempt again finds it (``create_attempt`` is idempotent).

Where the workspace is not a git repository, or the worktree cannot be made, the member works
in the workspace, one writer at a time ("serial"), and one notice per project and reason says
so and why.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

from room.actions import tasks as task_actions
from room.actions import workspaces as workspace_actions
from room.errors import BadRequestError, ConflictError, NotFoundError
from room.infra import worktrees
from room.infra.evidence import verify_artifact
from room.infra.git import Git
from room.rules.entities import Member, Project
from room.rules.tasks import TaskEvent, allowed_events, authorize
from room.services import Services
from room.store import Tx
from room.store import attempts as attempts_store
from room.store import audit as audit_store
from room.store import projects as projects_store
from room.store import tasks as tasks_store
from room.store.attempts import AttemptRow
from room.store.dialect import Connection, dialect_for
from room.store.tasks import TaskRow


@dataclass(frozen=True, slots=True)
class Prepared:
    """What :func:`prepare` found for a start: a new worktree to record, an open attempt to
    continue, or serial mode with the reason."""

    worktree: worktrees.Worktree | None = None
    owner_id: int | None = None
    reuse: bool = False
    reason_code: str | None = None
    reason: str | None = None


def worktree_of(row: AttemptRow, task_key: str, workspace: Path) -> worktrees.Worktree:
    return worktrees.Worktree(
        project_id=row.project_id, task_key=task_key, attempt=row.attempt,
        name=Path(row.path).name, branch=row.branch, path=Path(row.path), base=row.base,
        fork_point=row.fork_point, created=False, repository=workspace,
    )  # fmt: skip


async def prepare(core: Services, member: Member, task_ref: str | int) -> Prepared:
    """Before a ``start``: the attempt's worktree, made now if the start would be allowed."""

    def read(conn: Connection) -> tuple[Project | None, TaskRow, AttemptRow | None, int]:
        task = task_actions.find_task(conn, member.project_id, task_ref)
        authorize(TaskEvent.START, task_actions.roles_of(member, task))
        return (
            projects_store.get(conn, member.project_id),
            task,
            attempts_store.latest(conn, task.id),
            attempts_store.next_number(conn, task.id),
        )

    project, task, latest, number = await core.db.read(read)
    if project is None or TaskEvent.START not in allowed_events(task.state) or task.held:
        return Prepared()  # the write job refuses it with the usual error
    owner_id = task.owner_id
    if latest is not None and latest.state == "open" and latest.member_id == owner_id:
        return Prepared(owner_id=owner_id, reuse=True)
    info = await workspace_actions.workspace_info(core, project)
    if info["mode"] != "worktrees":
        return Prepared(owner_id=owner_id, reason_code=info["reason_code"], reason=info["reason"])
    workspace = workspace_actions.workspace_of(core.settings, project)
    root = workspace_actions.worktrees_root(core.settings)
    slug = project.name
    try:
        async with workspace_actions.git_lock(core, project.id):
            made = await asyncio.to_thread(
                partial(worktrees.create_attempt, git=core.git),
                workspace, root, project.id, slug, task.key, number,
            )  # fmt: skip
    except (worktrees.WorktreeError, worktrees.BadRefNameError) as exc:
        return Prepared(owner_id=owner_id, reason_code=exc.code, reason=exc.message)
    return Prepared(worktree=made, owner_id=owner_id)


def record(
    conn: Connection, tx: Tx, fx: task_actions.Effects, task: TaskRow, prepared: Prepared
) -> None:
    """Inside the ``start`` write job, after the event fired: record the attempt, or say once
    per project and reason that work is serial."""
    if prepared.worktree is not None:
        made = prepared.worktree
        attempts_store.insert(
            conn, project_id=task.project_id, task_id=task.id, attempt=made.attempt,
            member_id=prepared.owner_id, branch=made.branch, path=str(made.path),
            base=made.base, fork_point=made.fork_point, now=tx.now,
        )  # fmt: skip
        fx.tasks.add(task.id)
    elif prepared.reason_code is not None:
        serial_notice(conn, tx, fx, task.project_id, prepared.reason_code, prepared.reason)


def serial_notice(
    conn: Connection,
    tx: Tx,
    fx: task_actions.Effects,
    project_id: int,
    code: str,
    reason: str | None,
) -> None:
    """One notice per project and reason: members write one at a time, and why."""
    seen = conn.execute(
        "SELECT 1 FROM audit_events WHERE project_id = :p AND action = 'workspace.serial'"
        f" AND {dialect_for(conn).json_text('detail_json', 'reason_code')} = :c LIMIT 1",
        {"p": project_id, "c": code},
    ).fetchone()
    if seen:
        return
    audit_store.record(
        conn, now=tx.now, actor_kind="system", actor_id=None, project_id=project_id,
        action="workspace.serial", outcome="ok", detail={"reason_code": code, "reason": reason},
    )  # fmt: skip
    body = (
        "⚠️ 本项目的任务尝试没有独立的工作树：成员在工作区里一次只允许一个写入者 "
        "(No worktree per attempt in this project: members write in the workspace one at a "
        f"time.)\n\n原因 (why)：{reason or code}"
    )
    meta = {"workspace": {"mode": "serial", "reason_code": code, "reason": reason}}
    task_actions.post_message(conn, tx, fx, body, meta)


# -- reading ------------------------------------------------------------------------------------


def _stat_wire(stat: worktrees.DiffStat) -> dict[str, Any]:
    return {
        "added": stat.added,
        "deleted": stat.deleted,
        "files": [
            {"path": f.path, "added": f.added, "deleted": f.deleted, "binary": f.binary}
            for f in stat.files
        ],
    }


def _diff_stats(git: Git, items: list[tuple[dict[str, Any], str, Path]]) -> None:
    for attempt, key, workspace in items:
        row = attempt["_row"]
        try:
            stat = worktrees.diff_stat(worktree_of(row, key, workspace), git=git)
            attempt["diff_stat"] = _stat_wire(stat)
        except (worktrees.WorktreeError, worktrees.GitFailedError) as exc:
            attempt["diff_stat"] = None
            attempt["diff_error"] = exc.code


async def add_diff_stats(core: Services, tasks: list[dict[str, Any]]) -> None:
    """Fill ``attempt.diff_stat`` of tasks whose attempt is not merged (in a worker thread)."""

    def read(conn: Connection) -> tuple[dict[int, AttemptRow | None], dict[int, Project]]:
        rows = {t["id"]: attempts_store.latest(conn, t["id"]) for t in tasks if t.get("attempt")}
        projects = {}
        for row in rows.values():
            if row is not None and row.project_id not in projects:
                project = projects_store.get(conn, row.project_id)
                if project is not None:
                    projects[row.project_id] = project
        return rows, projects

    rows, projects = await core.db.read(read)
    items = []
    for task in tasks:
        row = rows.get(task["id"])
        if row is not None and row.state != "merged" and task["attempt"]:
            try:
                workspace = workspace_actions.workspace_of(core.settings, projects[row.project_id])
            except (KeyError, BadRequestError):
                continue  # no project, or its workspace is refused: no stat to show
            task["attempt"]["_row"] = row
            items.append((task["attempt"], task["key"], workspace))
    if items:
        await asyncio.to_thread(_diff_stats, core.git, items)
    for attempt, _, _ in items:
        attempt.pop("_row", None)


async def list_worktrees(core: Services, member: Member) -> dict[str, Any]:
    """The project's attempts (rows) joined with what git keeps on disk."""
    project_id = member.project_id

    def read(conn: Connection) -> tuple[Project | None, list[AttemptRow], dict[int, str]]:
        rows = attempts_store.of_project(conn, project_id)
        keys = {t.id: t.key for t in tasks_store.tasks_of(conn, project_id)}
        return projects_store.get(conn, project_id), rows, keys

    project, rows, keys = await core.db.read(read)
    if project is None:
        raise NotFoundError("no such project", code="no_project")
    info = await workspace_actions.workspace_info(core, project)
    on_disk = await asyncio.to_thread(_on_disk, core, project)
    return {
        "mode": info["mode"],
        "reason": info["reason"],
        "attempts": join_attempts(rows, keys, on_disk),
    }


async def kept_worktrees(core: Services, project_id: int) -> list[dict[str, Any]]:
    """Every worktree and branch of the project on disk (the purge's preview lists them)."""

    def read(conn: Connection) -> tuple[Project | None, list[AttemptRow], dict[int, str]]:
        keys = {t.id: t.key for t in tasks_store.tasks_of(conn, project_id)}
        return (
            projects_store.get(conn, project_id),
            attempts_store.of_project(conn, project_id),
            keys,
        )

    project, rows, keys = await core.db.read(read)
    if project is None:
        return []
    on_disk = await asyncio.to_thread(_on_disk, core, project)
    return [a for a in join_attempts(rows, keys, on_disk) if a["on_disk"]]


def _on_disk(core: Services, project: Project) -> tuple[worktrees.Attempt, ...]:
    try:
        workspace = workspace_actions.workspace_of(core.settings, project)
    except BadRequestError:
        # A workspace the rules now refuse (outside narrowed roots) is never read, not even by
        # git; the purge preview still answers, listing no worktree from disk.
        return ()
    try:
        return worktrees.list_attempts(
            workspace,
            workspace_actions.worktrees_root(core.settings),
            project.id,
            project.name,
            git=core.git,
        )
    except worktrees.GitFailedError:
        return ()


def join_attempts(
    rows: list[AttemptRow], keys: dict[int, str], on_disk: tuple[worktrees.Attempt, ...]
) -> list[dict[str, Any]]:
    by_branch = {a.branch: a for a in on_disk if a.branch}
    out: list[dict[str, Any]] = []
    for row in rows:
        disk = by_branch.pop(row.branch, None)
        out.append({"task": keys.get(row.task_id), **row.to_wire(), **_disk_wire(disk)})
    for disk in by_branch.values():  # branches with no row: kept by git, not by the server
        out.append({"task": None, "attempt": None, "branch": disk.branch,
                    "path": str(disk.path) if disk.path else None, "state": "kept",
                    "member_id": None, **_disk_wire(disk)})  # fmt: skip
    for item in out:
        item.pop("diff_stat", None)
    return out


def _disk_wire(disk: worktrees.Attempt | None) -> dict[str, Any]:
    if disk is None:
        return {"on_disk": False}
    return {"on_disk": True, "head": disk.head, "ahead": disk.ahead, "behind": disk.behind,
            "merged": disk.merged, "dirty": disk.dirty, "missing": disk.missing}  # fmt: skip


# -- evidence against the attempt -----------------------------------------------------------------


async def evidence_root(core: Services, project_id: int, task_ref: str | int) -> str | None:
    """Where a task's cited files live: its attempt's worktree while it is not merged, else
    the project's workspace."""

    def read(conn: Connection) -> tuple[Project | None, AttemptRow | None]:
        project = projects_store.get(conn, project_id)
        try:
            task = task_actions.find_task(conn, project_id, task_ref)
        except NotFoundError:
            return project, None
        return project, attempts_store.latest(conn, task.id)

    project, row = await core.db.read(read)
    if row is not None and row.state != "merged":
        return row.path
    if project is None:
        return None
    return str(workspace_actions.workspace_of(core.settings, project))


async def check_artifacts_unchanged(core: Services, project_id: int, task_ref: str | int) -> None:
    """Re-hash every artifact cited for the task's current revision; a changed or missing file
    refuses with ``artifact_changed`` naming it (review and acceptance call this)."""

    def read(conn: Connection) -> list[dict[str, Any]]:
        task = task_actions.find_task(conn, project_id, task_ref)
        return [
            e
            for e in tasks_store.evidence_of(conn, task.id)
            if e["kind"] == "artifact" and e["revision"] == task.revision
        ]

    items = await core.db.read(read)
    if not items:
        return
    root = await evidence_root(core, project_id, task_ref)

    def check() -> list[tuple[str, str]]:
        bad: list[tuple[str, str]] = []
        for item in items:
            found = verify_artifact(root, item["real_path"], item["size"], item["sha256"])
            if found != "ok":
                bad.append((item["path"], found))
        return bad

    bad = await asyncio.to_thread(check)
    if bad:
        path, how = bad[0]
        raise ConflictError(
            f"证据文件 {path} 在提交后{'已改变' if how == 'changed' else '不见了'}，不能验收；请负责人"
            f"重新提交 (The cited file {path} is {how} since it was submitted: acceptance is "
            "refused until the work is resubmitted.)",
            code="artifact_changed",
            path=path,
            files=[{"path": p, "verification": v} for p, v in bad],
        )
