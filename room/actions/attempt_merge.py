"""Reviewing and merging a task's attempt: a merge is what a person reviewed (docs/tasks.md,
"What a merge takes").

The review (:func:`task_diff`) lists every file the attempt changed — commits, uncommitted and
untracked work — with the ones the task's evidence cites, the ones that look generated (the
project's ``merge_ignore`` patterns, :mod:`room.rules.merging`), and a ``digest`` of what was
listed. The merge (:func:`merge_task`) reads the attempt again, in one snapshot under the
project's git lock, and commits on the merge base only the chosen files (the cited ones unless
the person names others, each a changed file of the attempt), then merges that commit into the
base. The server computes the changes itself; a client only names paths among them. Whatever
is not chosen stays on the attempt's branch and folder, untouched.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

from room.actions import tasks as task_actions
from room.actions import workspaces as workspace_actions
from room.actions.attempts import worktree_of
from room.errors import ConflictError, ForbiddenError, NotFoundError
from room.infra import worktrees
from room.infra.git import Git
from room.rules import merging
from room.rules.entities import Member, Project
from room.rules.tasks import TaskState
from room.services import Services
from room.store import Tx
from room.store import attempts as attempts_store
from room.store import audit as audit_store
from room.store import members as members_store
from room.store import projects as projects_store
from room.store import tasks as tasks_store
from room.store.attempts import AttemptRow
from room.store.dialect import Connection
from room.store.tasks import TaskRow

NOREPLY_DOMAIN = "users.noreply.room.invalid"
MAX_AUDITED_PATHS = 50


def ignore_patterns(stored: Mapping[str, Any]) -> tuple[str, ...]:
    """The project's ``merge_ignore`` (checked when it was set), else the default list."""
    patterns = stored.get("merge_ignore")
    if isinstance(patterns, list) and all(isinstance(p, str) for p in patterns):
        return tuple(patterns)
    return merging.DEFAULT_MERGE_IGNORE


def _cited(evidence: Sequence[dict[str, Any]], revision: int) -> dict[str, str | None]:
    """The paths the task's current evidence cites, each with the SHA-256 its file had when
    cited (None for a path that only led to the file: a symlink inside the folder)."""
    cited: dict[str, str | None] = {}
    for item in evidence:
        if item["kind"] == "artifact" and item["revision"] == revision:
            cited.setdefault(item["path"], None)
            cited[item["real_path"]] = item["sha256"]
    return cited


def _read(
    conn: Connection, member: Member, task_ref: str
) -> tuple[Project, TaskRow, AttemptRow, dict[str, str | None]]:
    task = task_actions.find_task(conn, member.project_id, task_ref)
    row = attempts_store.latest(conn, task.id)
    if row is None:
        raise NotFoundError("这个任务没有工作树 (This task has no worktree attempt.)",
                            code="no_attempt", task=task.key)  # fmt: skip
    project = projects_store.get(conn, member.project_id)
    if project is None:
        raise NotFoundError("no such project", code="no_project")
    return project, task, row, _cited(tasks_store.evidence_of(conn, task.id), task.revision)


def _review(
    attempt: worktrees.Worktree, cited: Mapping[str, str | None], patterns: Sequence[str], git: Git
) -> dict[str, Any]:
    with worktrees.read_changes(attempt, git=git) as snapshot:
        changes = snapshot.changes
        text, truncated = snapshot.text()
        return {
            "text": text,
            "truncated": truncated,
            "merge_base": snapshot.merge_base,
            "files": merging.review_files(changes, cited, patterns),
            "digest": merging.digest(changes),
        }


async def task_diff(core: Services, member: Member, task_ref: str) -> dict[str, Any]:
    """The review of a task's latest attempt: ``{task, attempt, branch, base, state, text,
    truncated, merge_base, files, digest, ignore}`` (``ignore``: the patterns that flag junk)."""
    project, task, row, cited = await core.db.read(partial(_read, member=member, task_ref=task_ref))
    stored = await core.db.read(lambda conn: projects_store.settings(conn, project.id))
    patterns = ignore_patterns(stored)
    workspace = workspace_actions.workspace_of(core.settings, project)
    attempt = worktree_of(row, task.key, workspace)
    review = await asyncio.to_thread(_review, attempt, cited, patterns, core.git)
    return {"task": task.key, "attempt": row.attempt, "branch": row.branch, "base": row.base,
            "state": row.state, **review, "ignore": list(patterns)}  # fmt: skip


def _ident(member: Member) -> tuple[str, str]:
    return f"{member.display_name} ({member.handle})", f"{member.handle}@{NOREPLY_DOMAIN}"


async def merge_task(
    core: Services,
    member: Member,
    task_ref: str,
    mode: str,
    paths: Sequence[str] | None = None,
    digest: str | None = None,
) -> dict[str, Any]:
    """An owner merges an accepted task's attempt into the base (``ff`` or ``merge``): only the
    chosen files (``paths``; by default the cited ones), committed on the merge base by the
    attempt's member with the person as committer and trailers naming the task, the attempt and
    the reviewer. A ``digest`` other than the attempt's now is ``409 diff_changed``; a cited
    file whose content differs from what was cited is ``409 artifact_changed``. Conflicts are
    reported and nothing is forced. Audited; a notice in the room says what happened."""
    if member.kind != "human" or not member.is_owner:
        raise ForbiddenError("只有项目所有者可以合并 (Only a project owner merges.)",
                             code="not_owner")  # fmt: skip
    if mode not in ("ff", "merge"):
        raise worktrees.BadRefNameError("mode", mode, "ff 或 merge (ff or merge)")
    project_id = member.project_id

    def read(conn: Connection) -> tuple[Any, ...]:
        project, task, row, cited = _read(conn, member, task_ref)
        if task.state is not TaskState.ACCEPTED:
            raise ConflictError(
                f"任务 {task.key} 处于 {task.state}，验收后才能合并 (Only an accepted task is "
                "merged.)",
                code="not_accepted",
                state=str(task.state),
            )
        if row.state == "merged":
            raise ConflictError("已合并 (Already merged.)", code="already_merged", task=task.key)
        author = members_store.get(conn, row.member_id) if row.member_id else None
        return project, task, row, cited, author

    project, task, row, cited, author = await core.db.read(read)
    workspace = workspace_actions.workspace_of(core.settings, project)
    work_by = _ident(author) if author else ("Project Room", f"room@{NOREPLY_DOMAIN}")
    reviewer = _ident(member)

    def run() -> tuple[tuple[merging.Change, ...], tuple[merging.Change, ...], str | None,
                       worktrees.MergeResult]:  # fmt: skip
        attempt = worktree_of(row, task.key, workspace)
        with worktrees.read_changes(attempt, git=core.git) as snapshot:
            if digest is not None and digest != merging.digest(snapshot.changes):
                raise ConflictError(
                    "任务的改动在评审之后变了，请重新查看差异 (The attempt changed since this review: "
                    "look at the diff again.)",
                    code="diff_changed",
                )
            included, left_out = merging.choose(snapshot.changes, paths, cited)
            _check_cited(snapshot, included, cited)
            commit, message = None, "unused"
            if included:
                message = merging.commit_message(
                    task_key=task.key, title=task.title, attempt=row.attempt, branch=row.branch,
                    reviewer=f"{reviewer[0]} <{reviewer[1]}>", included=len(included),
                    left_out=len(left_out),
                )  # fmt: skip
                commit = snapshot.commit(included, message, work_by, reviewer)
            merged = worktrees.merge(
                workspace, row.branch, mode,  # type: ignore[arg-type]
                f"Merge {row.branch}: {message}", base=row.base,
                git=core.git, author_name=reviewer[0], author_email=reviewer[1],
                commit=commit or snapshot.merge_base,
            )  # fmt: skip
        return included, left_out, commit, merged

    async with workspace_actions.git_lock(core, project_id):
        included, left_out, commit, result = await asyncio.to_thread(run)
    workspace_actions.forget_info(core, project_id)
    done = result.outcome in ("fast_forward", "merged", "up_to_date")
    taken = [c.shown for c in included]
    left = [c.shown for c in left_out]

    def job(conn: Connection, tx: Tx) -> None:
        fx = task_actions.Effects(project_id)
        if done:
            attempts_store.end(conn, row.id, "merged", tx.now)
            fx.tasks.add(task.id)
        audit_store.record(
            conn, now=tx.now, actor_kind="human", actor_id=member.id, project_id=project_id,
            action="task.merge", outcome="ok" if done else result.outcome,
            detail={"task": task.key, "branch": row.branch, "base": result.base, "mode": mode,
                    "outcome": result.outcome, "conflicts": list(result.conflicts),
                    "before": result.before, "after": result.after, "commit": commit,
                    "included": taken[:MAX_AUDITED_PATHS], "left_out": left[:MAX_AUDITED_PATHS],
                    "counts": {"included": len(taken), "left_out": len(left)}},
        )  # fmt: skip
        task_actions.post_message(
            conn, tx, fx, _merge_notice(member, task.key, row.branch, result, taken, left),
            {**task_actions.task_meta(task, "merge"),
             "merge": {"outcome": result.outcome, "branch": row.branch,
                       "conflicts": list(result.conflicts), "included": len(taken),
                       "left_out": len(left)}},
        )  # fmt: skip
        fx.flush(conn, tx)

    await core.db.write(job, locks=(member.project_id,))
    return {
        "outcome": result.outcome,
        "conflicts": list(result.conflicts),
        "head_oneline": result.head_oneline,
        "branch": row.branch,
        "base": result.base,
        "committed": commit is not None,
        "commit": commit,
        "included": taken,
        "left_out": left,
    }


def _check_cited(
    snapshot: worktrees.Snapshot,
    included: Sequence[merging.Change],
    cited: Mapping[str, str | None],
) -> None:
    """A cited file merged as it was cited, or not at all (``artifact_changed``)."""
    bad = []
    for change in included:
        expected = cited.get(change.path)
        if expected is None:
            continue
        if change.status == "deleted" or change.kind not in ("file", "executable"):
            bad.append((change.shown, "missing"))
        elif hashlib.sha256(snapshot.blob(change.new_blob)).hexdigest() != expected:
            bad.append((change.shown, "changed"))
    if bad:
        path, how = bad[0]
        raise ConflictError(
            f"证据文件 {path} 在提交后{'已改变' if how == 'changed' else '不见了'}，不能合并；请负责人"
            f"重新提交 (The cited file {path} is {how} since it was submitted: the merge is "
            "refused until the work is resubmitted.)",
            code="artifact_changed",
            path=path,
            files=[{"path": p, "verification": v} for p, v in bad],
        )


def _merge_notice(
    member: Member,
    key: str,
    branch: str,
    result: worktrees.MergeResult,
    taken: Sequence[str],
    left: Sequence[str],
) -> str:
    who = f"@{member.handle}"
    if result.outcome == "conflict":
        paths = "、".join(f"`{p}`" for p in result.conflicts[:20])
        return (f"⚠️ {who} 合并任务 `{key}` 的分支 `{branch}` 到 `{result.base}` 时有冲突，"
                f"未做任何改动 (merge conflict; nothing changed)：{paths}")  # fmt: skip
    if result.outcome == "not_fast_forward":
        return (f"⚠️ 任务 `{key}` 的分支 `{branch}` 不能快进合并到 `{result.base}`（基础分支已前进），"
                "可改用合并提交 (cannot fast-forward; use a merge commit)。")  # fmt: skip
    if result.outcome == "up_to_date":
        return f"ℹ️ 任务 `{key}` 的分支 `{branch}` 已在 `{result.base}` 中 (already merged)。"
    how = "快进 (fast-forward)" if result.outcome == "fast_forward" else "合并提交 (merge commit)"
    files = f"合并了 {len(taken)} 个文件 ({len(taken)} file(s) merged)"
    if left:
        files += (f"，{len(left)} 个未选的改动留在任务分支上 ({len(left)} unchosen change(s) stay on "
                  "the task's branch)")  # fmt: skip
    return (f"🔀 {who} 把任务 `{key}` 的分支 `{branch}` 合并到 `{result.base}`（{how}）："
            f"{result.head_oneline}\n\n{files}。")  # fmt: skip
