"""Inspecting a workspace, making and listing attempt worktrees."""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from room.infra.git import (
    Git,
    GitFailedError,
    GitRun,
    UnsafeRepositoryError,
    check_repository,
    printable,
)
from room.infra.worktrees._model import (
    GIT_CHECKOUT_TIMEOUT_SECS,
    MAX_LISTED_PATHS,
    WORKTREE_CODES,
    Attempt,
    BadRefNameError,
    RepoInfo,
    Worktree,
    WorktreeError,
    attempt_names,
    project_part,
)

log = logging.getLogger(__name__)


# ---------------------------------------------------------------- git helpers


@dataclass(frozen=True, slots=True)
class At:
    """Where git runs: the folder, and the other folders the operation may write (a worktree's
    repository, a new worktree's folder, a temporary index) — all the isolation binds.

    Made by :meth:`checked`: the repository's configuration is checked once for the operation
    (:func:`room.infra.git.check_repository`), not again before each of its git commands."""

    git: Git
    cwd: Path
    writable: Sequence[Path] = ()

    @classmethod
    def checked(cls, git: Git, cwd: Path, writable: Sequence[Path] = ()) -> At:
        """Raises :class:`~room.infra.git.UnsafeRepositoryError` for a repository whose
        configuration would make git run a program."""
        check_repository(cwd)
        return cls(git, cwd, writable)

    def __call__(self, *args: str, **kwargs: Any) -> GitRun:
        return self.git.run(self.cwd, *args, writable=self.writable, checked=True, **kwargs)

    def also(self, *paths: Path) -> At:
        return At(self.git, self.cwd, (*self.writable, *paths))


def rev(at: At, rev: str) -> str | None:
    run = at("rev-parse", "-q", "--verify", "--end-of-options", rev, check=False)
    return run.stdout.strip() if run.returncode == 0 else None


def oneline(at: At, rev: str) -> str:
    return at("log", "-1", "--oneline", "--no-decorate", rev, "--").stdout.strip()


def current_branch(at: At) -> str | None:
    run = at("symbolic-ref", "-q", "HEAD", check=False)
    ref = run.stdout.strip()
    return ref.removeprefix("refs/heads/") if run.returncode == 0 and ref else None


def is_ancestor(at: At, older: str, newer: str) -> bool:
    run = at("merge-base", "--is-ancestor", older, newer, check=False)
    if run.returncode not in (0, 1):
        raise GitFailedError(("merge-base", "--is-ancestor"), run.returncode, run.stderr)
    return run.returncode == 0


def status_paths(at: At, untracked: str) -> list[str]:
    out = at("status", "--porcelain=v1", "-z", f"--untracked-files={untracked}").stdout
    paths: list[str] = []
    fields = iter(out.split("\0"))
    for field in fields:
        if not field:
            continue
        paths.append(printable(field[3:]))
        if field[0] in "RC":  # a rename's second field is its old path
            next(fields, None)
    return paths


def _within(path: Path, folder: Path) -> bool:
    """Is ``path`` ``folder`` or inside it? Compared after normalising ``..`` away: a path read
    from git's output (a worktree registered by whoever could write the repository) may say
    ``<folder>/../..``."""
    path = Path(os.path.normpath(path))
    return path == folder or folder in path.parents


def _enclosing_repository(folder: Path) -> Path | None:
    """The nearest folder above ``folder`` with a ``.git`` entry, looked up without git (the
    isolated git does not see the folders above the workspace)."""
    for parent in folder.resolve().parents:
        if os.path.lexists(parent / ".git"):
            return parent
    return None


# ---------------------------------------------------------------- inspect


def _serial(workspace: Path, code: str, detail: str | None = None, **known: Any) -> RepoInfo:
    reason = WORKTREE_CODES[code] + (f"：{detail}" if detail else "")
    fields: dict[str, Any] = {
        "root": None,
        "branch": None,
        "base": None,
        "head": None,
        "head_oneline": None,
        "clean": None,
        "dirty_paths": (),
    }
    fields.update(known)
    return RepoInfo(workspace=workspace, mode="serial", reason_code=code, reason=reason, **fields)


def inspect(workspace: Path, base: str | None = None, *, git: Git) -> RepoInfo:
    """Whether attempts of this workspace can have worktrees, and from which base.

    Never raises for an unusable workspace (that is ``mode="serial"``); a git that times out
    or fails unexpectedly raises GitFailedError. Asked again on every use, so a workspace that
    became a repository after it was made (an agent's ``git init``) is checked like any other.
    """
    ws = Path(workspace)
    if not ws.is_dir():
        return _serial(ws, "no_workspace")
    if shutil.which("git") is None:
        return _serial(ws, "git_missing")
    if not os.path.lexists(ws / ".git"):
        above = _enclosing_repository(ws)
        if above is None:
            return _serial(ws, "not_a_repository")
        return _serial(ws, "nested_repository", str(above))
    try:
        at = At.checked(git, ws)
        top = at("rev-parse", "--show-toplevel", check=False)
    except UnsafeRepositoryError as exc:
        return _serial(ws, "unsafe_repository", ", ".join(exc.details["keys"][:5]))
    if top.returncode != 0:
        if "not a git repository" in top.stderr:
            return _serial(ws, "not_a_repository")
        return _serial(ws, "repository_unreadable", top.stderr.strip()[-300:])
    root = Path(top.stdout.strip()).resolve()
    if root != ws.resolve():
        return _serial(ws, "nested_repository", str(root))
    branch = current_branch(at)
    known: dict[str, Any] = {"root": root, "branch": branch}
    if rev(at, "HEAD^{commit}") is None:
        return _serial(ws, "no_commits", **known)
    if base is not None:
        if rev(at, f"refs/heads/{base}^{{commit}}") is None:
            return _serial(ws, "no_base_branch", base, **known)
    elif branch is None:
        return _serial(ws, "detached_head", **known)
    base_name = base if base is not None else branch
    assert base_name is not None
    head = rev(at, f"refs/heads/{base_name}^{{commit}}")
    if head is None:
        return _serial(ws, "no_base_branch", base_name, **known)
    dirty = status_paths(at, "normal")
    return RepoInfo(
        workspace=ws,
        mode="worktrees",
        reason_code=None,
        reason=None,
        root=root,
        branch=branch,
        base=base_name,
        head=head,
        head_oneline=oneline(at, head),
        clean=not dirty,
        dirty_paths=tuple(dirty[:MAX_LISTED_PATHS]),
    )


# ---------------------------------------------------------------- worktrees


@dataclass(frozen=True, slots=True)
class _Listed:
    path: Path
    head: str | None
    branch: str | None
    missing: bool
    locked: bool


def _listed(at: At) -> list[_Listed]:
    out = at("worktree", "list", "--porcelain", "-z").stdout
    found: list[_Listed] = []
    record: dict[str, str] = {}
    for field in [*out.split("\0"), ""]:
        if field:
            key, _, value = field.partition(" ")
            record[key] = value
            continue
        if "worktree" in record:
            branch = record.get("branch")
            path = Path(record["worktree"])
            found.append(
                _Listed(
                    path=path,
                    head=record.get("HEAD"),
                    branch=branch.removeprefix("refs/heads/") if branch else None,
                    # Looked at here: the isolated git sees no folder but its own, so it calls
                    # every other worktree "prunable".
                    missing=not path.is_dir(),
                    locked="locked" in record,
                )
            )
        record = {}
    return found


def _registered_at(at: At, path: Path) -> _Listed | None:
    for entry in _listed(at):
        if entry.path == path:
            return entry
    return None


@dataclass(frozen=True, slots=True)
class _Wanted:
    project_id: int
    task_key: str
    attempt: int
    name: str
    base: str


def _attempt_from(at: At, entry: _Listed, wanted: _Wanted, created: bool) -> Worktree:
    if entry.missing:
        raise WorktreeError(
            "worktree_failed",
            f"{entry.path} 已登记但目录不存在 (registered, but the folder is gone; "
            "`git worktree prune` clears it)",
        )
    if entry.branch is None:
        raise WorktreeError("branch_mismatch", f"{entry.path} 处于分离 HEAD (detached HEAD)")
    base = f"refs/heads/{wanted.base}"
    fork = at("merge-base", base, f"refs/heads/{entry.branch}")
    return Worktree(
        project_id=wanted.project_id,
        task_key=wanted.task_key,
        attempt=wanted.attempt,
        name=wanted.name,
        branch=entry.branch,
        path=entry.path,
        base=wanted.base,
        fork_point=fork.stdout.strip(),
        created=created,
        repository=at.cwd,
    )


def create_attempt(
    workspace: Path,
    worktrees_root: Path,
    project_id: int,
    project_slug: str,
    task_key: str,
    attempt: int,
    base: str | None = None,
    *,
    git: Git,
) -> Worktree:
    """The worktree of one attempt of a task, made from the base branch's tip if it is new.

    Calling again for the same attempt returns the existing worktree (``created=False``).
    Raises BadRefNameError for unusable names and WorktreeError when there can be no worktree:
    ``code`` is a serial reason of :func:`inspect` or ``worktree_failed`` (with git's words).
    """
    branch, name = attempt_names(project_id, project_slug, task_key, attempt)
    ws = Path(workspace).resolve()
    try:
        info = inspect(ws, base, git=git)
    except GitFailedError as exc:
        raise WorktreeError("worktree_failed", exc.message, stderr=exc.stderr) from exc
    if info.mode == "serial":
        assert info.reason_code is not None
        raise WorktreeError(info.reason_code, info.reason)
    assert info.root is not None and info.base is not None and info.head is not None
    at = At.checked(git, ws)
    if at("check-ref-format", f"refs/heads/{branch}", check=False).returncode != 0:
        raise BadRefNameError("branch", branch, "git check-ref-format 拒绝 (refused by git)")
    path = Path(worktrees_root).resolve() / str(project_id) / name
    if _within(path, info.root) or _within(info.root, path):
        raise WorktreeError(
            "worktree_failed", f"{path} 位于工作区之内 (would be inside the workspace)"
        )
    wanted = _Wanted(project_id, task_key, attempt, name, info.base)
    try:
        existing = _registered_at(at, path)
        if existing is not None:
            return _attempt_from(at, existing, wanted, created=False)
        if os.path.lexists(path):
            raise WorktreeError(
                "worktree_failed",
                f"{path} 已存在但不是本仓库的工作树 (exists and is not a worktree of this "
                "repository; it is left alone)",
            )
        path.parent.mkdir(parents=True, exist_ok=True)
        # Made empty here so that the isolated git can be given this folder and nothing around
        # it (git adds a worktree into an empty folder).
        path.mkdir()
        if rev(at, f"refs/heads/{branch}") is not None:
            args = ["worktree", "add", "--quiet", str(path), branch]
        else:
            args = ["worktree", "add", "--quiet", "--no-track", "-b", branch, str(path), info.head]
        run = at.also(path)(*args, check=False, timeout=GIT_CHECKOUT_TIMEOUT_SECS)
        entry = _registered_at(at, path)
        if entry is None or entry.branch != branch:
            if run.returncode != 0:
                _remove_if_empty(path)
            reason = run.stderr.strip()[-500:] or f"git exited with {run.returncode}"
            raise WorktreeError("worktree_failed", reason, stderr=run.stderr[-2000:])
        log.info("worktree %s for project %s at %s", branch, project_id, path)
        return _attempt_from(at, entry, wanted, created=run.returncode == 0)
    except GitFailedError as exc:
        raise WorktreeError("worktree_failed", exc.message, stderr=exc.stderr) from exc
    except OSError as exc:
        raise WorktreeError("worktree_failed", str(exc)) from exc


def _remove_if_empty(path: Path) -> None:
    try:
        path.rmdir()
    except OSError:
        pass  # not empty (git wrote something) or gone: left for a person to look at


def _dirty(at: At) -> bool:
    return bool(at("status", "--porcelain=v1", "-z", "--untracked-files=all").stdout)


def list_attempts(
    workspace: Path,
    worktrees_root: Path,
    project_id: int,
    project_slug: str | None = None,
    base: str | None = None,
    *,
    git: Git,
) -> tuple[Attempt, ...]:
    """Every kept worktree of the project (registered under ``worktrees_root/<project_id>``)
    and, when ``project_slug`` is given, every ``room/<slug>/…`` branch, worktree or not.

    Nothing is removed; a folder that is no repository has none. ``base`` defaults to the
    workspace's checked-out branch.
    """
    ws = Path(workspace).resolve()
    if not ws.is_dir() or not os.path.lexists(ws / ".git"):
        return ()  # no repository, so no worktrees or branches
    at = At.checked(git, ws)
    if at("rev-parse", "--show-toplevel", check=False).returncode != 0:
        return ()
    folder = Path(worktrees_root).resolve() / str(project_id)
    base_name = base if base is not None else current_branch(at)
    base_ref = f"refs/heads/{base_name}" if base_name is not None else None
    if base_ref is not None and rev(at, base_ref) is None:
        base_ref = None
    found: dict[str, tuple[_Listed | None, str | None]] = {}
    for entry in _listed(at):
        if _within(entry.path, folder) and Path(os.path.normpath(entry.path)) != folder:
            found[entry.branch or str(entry.path)] = (entry, entry.branch)
    if project_slug is not None:
        prefix = f"refs/heads/room/{project_part(project_id, project_slug)}"
        refs = at("for-each-ref", "--format=%(refname)", prefix).stdout.split("\n")
        for ref in filter(None, refs):
            branch = ref.removeprefix("refs/heads/")
            found.setdefault(branch, (None, branch))
    return tuple(_row(at, folder, base_ref, *found[key]) for key in sorted(found))


def _row(
    at: At, folder: Path, base_ref: str | None, entry: _Listed | None, branch: str | None
) -> Attempt:
    tip = entry.head if entry is not None else rev(at, f"refs/heads/{branch}")
    ahead = behind = None
    if base_ref is not None and tip:
        counts = at("rev-list", "--left-right", "--count", f"{base_ref}...{tip}")
        behind, ahead = (int(n) for n in counts.stdout.split())
    if entry is None:
        return Attempt(
            name=branch.rsplit("/", 1)[-1] if branch else None,
            branch=branch,
            path=None,
            head=tip,
            ahead=ahead,
            behind=behind,
            merged=None if ahead is None else ahead == 0,
            dirty=None,
            missing=False,
            locked=False,
        )
    # Only a real folder inside the project's own worktrees folder is looked into (its path
    # came from the repository, which its writers control).
    real = entry.path.resolve() if entry.path.is_dir() else None
    missing = entry.missing or real is None or not _within(real, folder)
    return Attempt(
        name=entry.path.name,
        branch=branch,
        path=entry.path,
        head=tip,
        ahead=ahead,
        behind=behind,
        merged=None if ahead is None else ahead == 0,
        dirty=None if real is None or missing else _dirty(At.checked(at.git, real, (at.cwd,))),
        missing=missing,
        locked=entry.locked,
    )
