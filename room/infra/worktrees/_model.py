"""Names, results and errors of :mod:`room.infra.worktrees` (pure: no I/O)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

from room.errors import BadRequestError, ConflictError

GIT_CHECKOUT_TIMEOUT_SECS = 120.0  # adding a worktree checks out every file of the base
GIT_DIFF_TIMEOUT_SECS = 60.0
MAX_NAME_CHARS = 100
MAX_LISTED_PATHS = 50
DEFAULT_DIFF_BYTES = 256 * 1024

WORKTREE_CODES: Mapping[str, str] = MappingProxyType(
    {
        # why a workspace runs serially (RepoInfo.reason_code; raised by create_attempt)
        "no_workspace": "工作区目录不存在 (The workspace folder does not exist.)",
        "git_missing": "找不到 git 命令 (The git command is not installed.)",
        "not_a_repository": "工作区不是 git 仓库 (The workspace is not a git repository.)",
        "unsafe_repository": "仓库配置会让 git 运行外部程序（过滤器、合并驱动、包含文件等），服务器不在其中运行 git (The repository's configuration would make git run a program; the server runs no git in it.)",
        "nested_repository": "工作区位于另一个 git 仓库之内，而不是它的根目录 (The workspace is inside a git repository but is not its top folder.)",
        "repository_unreadable": "git 无法使用这个仓库 (git cannot use this repository.)",
        "no_commits": "仓库还没有任何提交 (The repository has no commits yet.)",
        "detached_head": "HEAD 处于分离状态，没有检出的分支 (HEAD is detached: no branch is checked out.)",
        "no_base_branch": "指定的基础分支不存在 (The configured base branch does not exist.)",
        # creating or using an attempt
        "worktree_failed": "无法创建工作树 (The worktree could not be made.)",
        "worktree_missing": "工作树目录不存在 (The worktree folder is missing.)",
        "branch_mismatch": "工作树不在它的任务分支上 (The worktree is not on its task branch.)",
        # merging
        "workspace_dirty": "工作区有未提交的修改 (The workspace has uncommitted changes.)",
        "base_not_checked_out": "工作区没有检出基础分支 (The base branch is not checked out in the workspace.)",
        "no_branch": "没有这个分支 (No such branch.)",
    }
)

Mode = Literal["worktrees", "serial"]
MergeMode = Literal["ff", "merge"]
MergeOutcome = Literal["fast_forward", "merged", "up_to_date", "not_fast_forward", "conflict"]


class WorktreeError(ConflictError):
    """The workspace or attempt is not in a state that allows this; ``code`` is one of
    :data:`WORKTREE_CODES`, ``details["reason"]`` says what exactly."""

    code = "worktree_error"

    def __init__(self, code: str, reason: str | None = None, **details: Any) -> None:
        text = WORKTREE_CODES[code]
        super().__init__(
            f"{text}：{reason}" if reason else text, code=code, reason=reason, **details
        )
        self.reason = reason


class BadRefNameError(BadRequestError):
    """A project slug, task key or attempt number cannot become a branch or folder name."""

    code = "bad_ref_name"

    def __init__(self, field: str, value: str, hint: str) -> None:
        shown = repr(value)[:120]
        super().__init__(
            f"{field} 不能用作分支名 ({field} cannot be used in a branch name): {shown}; {hint}",
            field=field,
            value=shown,
            hint=hint,
        )


@dataclass(frozen=True, slots=True)
class RepoInfo:
    """What :func:`~room.infra.worktrees.inspect` found. ``head``/``head_oneline`` are the base
    branch's tip (the ``git log --oneline -1`` form); ``clean`` is ``git status`` saying nothing,
    untracked files included; ``dirty_paths`` lists at most :data:`MAX_LISTED_PATHS` of them."""

    workspace: Path
    mode: Mode
    reason_code: str | None
    reason: str | None
    root: Path | None
    branch: str | None
    base: str | None
    head: str | None
    head_oneline: str | None
    clean: bool | None
    dirty_paths: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Worktree:
    """One attempt's worktree. ``fork_point`` is where its branch left the base; ``repository``
    is the project's workspace, whose ``.git`` holds the worktree's objects and refs (the server
    knows it from its own records: git's isolation binds it, never a path the worktree's own
    ``.git`` file names)."""

    project_id: int
    task_key: str
    attempt: int
    name: str
    branch: str
    path: Path
    base: str
    fork_point: str
    created: bool
    repository: Path


@dataclass(frozen=True, slots=True)
class Attempt:
    """A kept worktree or branch of a project, as :func:`~room.infra.worktrees.list_attempts`
    sees it.

    ``path`` is None for a branch without a worktree; ``missing`` is a registered worktree whose
    folder is gone (``dirty`` is then None). ``merged`` means every commit of the branch is in
    the base, so an attempt that never committed counts as merged — ``dirty`` tells whether it
    holds unsaved work. ``ahead``/``behind``/``merged`` are None without a base branch.
    """

    name: str | None
    branch: str | None
    path: Path | None
    head: str | None
    ahead: int | None
    behind: int | None
    merged: bool | None
    dirty: bool | None
    missing: bool
    locked: bool


@dataclass(frozen=True, slots=True)
class FileStat:
    path: str
    added: int | None  # None for a binary file
    deleted: int | None
    binary: bool


@dataclass(frozen=True, slots=True)
class DiffStat:
    base: str
    merge_base: str
    files: tuple[FileStat, ...]
    added: int
    deleted: int


@dataclass(frozen=True, slots=True)
class Diff:
    base: str
    merge_base: str
    text: str
    truncated: bool


@dataclass(frozen=True, slots=True)
class CommitResult:
    committed: bool
    head: str
    head_oneline: str


@dataclass(frozen=True, slots=True)
class MergeResult:
    """``after == before`` unless the outcome is ``fast_forward`` or ``merged``."""

    outcome: MergeOutcome
    base: str
    branch: str
    before: str
    after: str
    head_oneline: str
    conflicts: tuple[str, ...]


# ---------------------------------------------------------------- names (pure)

_UNSAFE_RUN = re.compile(r"[^a-z0-9_-]+")


def has_control(value: str) -> bool:
    return any(ord(c) < 32 or ord(c) == 127 for c in value)


def sanitize_name(value: str, field: str = "name") -> str:
    """The branch/folder-safe form of ``value`` (see the module docstring); '' when nothing is
    left. Raises BadRefNameError for empty, over-long or control-character input."""
    if not value:
        raise BadRefNameError(field, value, "不能为空 (must not be empty)")
    if len(value) > MAX_NAME_CHARS:
        raise BadRefNameError(field, value, f"最长 {MAX_NAME_CHARS} 个字符 (too long)")
    if has_control(value):
        raise BadRefNameError(field, value, "含有控制字符 (contains a control character)")
    clean = _UNSAFE_RUN.sub("-", value.lower()).strip("-")
    if clean and clean != value:
        digest = hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:8]
        clean = f"{clean[:48]}-{digest}"
    return clean


def project_part(project_id: int, project_slug: str | None) -> str:
    return (sanitize_name(project_slug, "project_slug") if project_slug else "") or str(project_id)


def attempt_names(
    project_id: int, project_slug: str | None, task_key: str, attempt: int
) -> tuple[str, str]:
    """``(branch, folder name)`` of an attempt; pure. Raises BadRefNameError."""
    if isinstance(project_id, bool) or not isinstance(project_id, int) or project_id < 1:
        raise BadRefNameError("project_id", str(project_id), "须为正整数 (a positive integer)")
    if isinstance(attempt, bool) or not isinstance(attempt, int) or attempt < 1:
        raise BadRefNameError("attempt", str(attempt), "须为正整数 (a positive integer)")
    project = project_part(project_id, project_slug)
    key = sanitize_name(task_key, "task_key")
    if not key:
        raise BadRefNameError(
            "task_key", task_key, "须含有字母或数字 (needs a letter or digit: a-z, 0-9)"
        )
    name = f"{key}-{attempt}"
    return f"room/{project}/{name}", name
