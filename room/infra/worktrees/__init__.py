"""Git worktrees per task attempt (docs/tasks.md, "Attempts and worktrees"): each attempt works
on its own branch, in its own folder, and nothing it does is seen in the workspace until the task
is accepted and merged.

Decisions, so callers need not guess them:

* **Which folders qualify.** The workspace must be the *top* of a git work tree. A workspace that
  is a subfolder of a larger repository runs serially: a worktree checks out the whole repository,
  so paths would shift and a merge would touch files outside the workspace.
* **Serial mode.** :func:`inspect` never raises for an unusable workspace; it answers
  ``mode="serial"`` with a ``reason_code`` from :data:`WORKTREE_CODES` and a reason in Chinese
  then English. :func:`create_attempt` raises :class:`WorktreeError` with that same code, so the
  caller can fall back to serial work and say why.
* **Base branch.** The branch checked out in the workspace, unless the caller names one. A
  detached HEAD with no named base is serial.
* **Names.** Branch ``room/<project>/<task>-<attempt>``, folder
  ``<worktrees_root>/<project_id>/<task>-<attempt>``; ``<project>`` is the sanitized slug, or the
  id when nothing of the slug survives. Sanitizing lowercases and turns every run of characters
  outside ``[a-z0-9_-]`` into ``-``; a name that changed gets ``-`` and 8 hex digits of the
  SHA-256 of the original, so ``../x`` and ``x`` can never share a branch. Empty names, control
  characters (NUL …), names over :data:`MAX_NAME_CHARS`, and task keys with nothing left after
  sanitizing (``~``, ``..``) are refused with :class:`BadRefNameError`. The branch is then checked
  with ``git check-ref-format``. Renaming a project changes the branch of *new* attempts only.
* **Idempotence.** A worktree registered at the attempt's folder is returned as it is
  (``created=False``); a branch that exists without a worktree is checked out again, never reset.
* **Diffs** compare the merge base of the attempt's branch and the base with a snapshot of the
  attempt's folder *as it would be committed*: commits, staged and unstaged edits and untracked
  files (``.gitignore`` respected). The snapshot uses a temporary index, so the agent's own index
  is not touched.
* **What a merge takes** (:func:`read_changes`): the attempt's changes from one snapshot, and
  a commit on the merge base of only the chosen ones (:meth:`Snapshot.commit`), which
  :func:`merge` then merges by its id; the attempt's own branch is never merged whole.
* **Merging** needs the base checked out in the workspace and no changes to tracked files there
  (untracked files are allowed: git itself refuses to overwrite one, and that refusal is reported
  as ``workspace_dirty``). A conflict is aborted with ``git merge --abort`` and returned as
  ``outcome="conflict"`` with the paths.
* **Nothing is ever deleted or forced**: no ``--force``, no ``reset``, no ``worktree remove`` or
  ``prune``, no ``branch -D``. Cleaning up is a person's decision (:func:`list_attempts` shows what
  is kept).

Errors, in the tree of :mod:`room.errors` (a merge conflict is a result, not an error)::

    BadRequestError      400
    └── BadRefNameError       bad_ref_name: a slug, task key or attempt unusable in a name
        (also raised as BadRequestError: bad_identity, bad_commit_message, bad_mode)
    ConflictError        409
    └── WorktreeError         code from WORKTREE_CODES; details["reason"] says what exactly
    RoomError            500
    └── GitFailedError        git_failed: git failed unexpectedly or timed out; stderr tail

Functions are synchronous and may take seconds on a big repository; call them through
``asyncio.to_thread``. Calls for the same workspace should be serialised by the caller.
"""

from room.infra.git import GitFailedError
from room.infra.worktrees._changes import commit_all, diff, diff_stat, merge
from room.infra.worktrees._model import (
    DEFAULT_DIFF_BYTES,
    MAX_NAME_CHARS,
    WORKTREE_CODES,
    Attempt,
    BadRefNameError,
    CommitResult,
    Diff,
    DiffStat,
    FileStat,
    MergeMode,
    MergeOutcome,
    MergeResult,
    Mode,
    RepoInfo,
    Worktree,
    WorktreeError,
    attempt_names,
    sanitize_name,
)
from room.infra.worktrees._repo import create_attempt, inspect, list_attempts
from room.infra.worktrees._review import Snapshot, read_changes

__all__ = [
    "DEFAULT_DIFF_BYTES",
    "MAX_NAME_CHARS",
    "WORKTREE_CODES",
    "Attempt",
    "BadRefNameError",
    "CommitResult",
    "Diff",
    "DiffStat",
    "FileStat",
    "GitFailedError",
    "MergeMode",
    "MergeOutcome",
    "MergeResult",
    "Mode",
    "RepoInfo",
    "Snapshot",
    "Worktree",
    "WorktreeError",
    "attempt_names",
    "commit_all",
    "create_attempt",
    "diff",
    "diff_stat",
    "inspect",
    "list_attempts",
    "merge",
    "read_changes",
    "sanitize_name",
]
