"""What an attempt changed (diff stat, diff), committing it, and merging it into the base."""

from __future__ import annotations

import logging
import os
import re
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from room.errors import BadRequestError
from room.infra.git import Git, GitFailedError, printable
from room.infra.worktrees._model import (
    DEFAULT_DIFF_BYTES,
    GIT_DIFF_TIMEOUT_SECS,
    MAX_LISTED_PATHS,
    CommitResult,
    Diff,
    DiffStat,
    FileStat,
    MergeMode,
    MergeOutcome,
    MergeResult,
    Worktree,
    WorktreeError,
    has_control,
)
from room.infra.worktrees._repo import (
    At,
    current_branch,
    inspect,
    is_ancestor,
    oneline,
    rev,
    status_paths,
)

log = logging.getLogger(__name__)

_HEX = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")


# ---------------------------------------------------------------- diffs and commits


def _at(attempt: Worktree, git: Git) -> At:
    """git in the attempt's worktree, which writes into its repository's ``.git`` as well."""
    return At.checked(git, attempt.path, (attempt.repository,))


def _require_on_branch(attempt: Worktree, at: At) -> None:
    if not attempt.path.is_dir():
        raise WorktreeError("worktree_missing", str(attempt.path))
    current = current_branch(at)
    if current != attempt.branch:
        raise WorktreeError("branch_mismatch", f"{attempt.branch} ≠ {current or 'detached HEAD'}")


def _copy_regular(source: Path, target: Path) -> None:
    """Copy ``source`` if it is a regular file, not through a symlink (the index lives in a
    folder the worktree's writers may have written), with its modification time."""
    try:
        fd = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return  # no index yet (or not a file): the snapshot starts empty and adds everything
    with os.fdopen(fd, "rb") as handle:
        found = os.fstat(handle.fileno())
        if not stat.S_ISREG(found.st_mode):
            return
        with open(target, "wb") as out:
            while chunk := handle.read(1 << 20):
                out.write(chunk)
    # The copy keeps the index's time: git compares the contents of an entry as new as the index
    # ("racy git"); a copy stamped now would make a same-size edit made in the checkout's clock
    # tick look unchanged, and the review and the merge would miss it.
    os.utime(target, ns=(found.st_atime_ns, found.st_mtime_ns))


@contextmanager
def _snapshot(attempt: Worktree, git: Git) -> Iterator[tuple[At, dict[str, str], str]]:
    """A temporary index holding the worktree as ``git add --all`` would stage it, and the
    merge base with the base branch. The worktree's own index is not touched."""
    at = _at(attempt, git)
    _require_on_branch(attempt, at)
    merge_base = at("merge-base", f"refs/heads/{attempt.base}", "HEAD").stdout.strip()
    index = Path(at("rev-parse", "--path-format=absolute", "--git-path", "index").stdout.strip())
    with tempfile.TemporaryDirectory(prefix="room-diff-") as tmp:
        temp_index = Path(tmp) / "index"
        _copy_regular(index, temp_index)
        env = {"GIT_INDEX_FILE": str(temp_index)}
        with_index = at.also(Path(tmp))
        with_index("add", "--all", env=env, timeout=GIT_DIFF_TIMEOUT_SECS)
        yield with_index, env, merge_base


_DIFF_FLAGS = ("--cached", "--no-renames", "--no-ext-diff", "--no-textconv", "--no-color")


def diff_stat(attempt: Worktree, *, git: Git) -> DiffStat:
    """Files changed by the attempt (commits and uncommitted work) with +/- line counts."""
    with _snapshot(attempt, git) as (at, env, merge_base):
        out = at(
            "diff",
            *_DIFF_FLAGS,
            "--numstat",
            "-z",
            merge_base,
            "--",
            env=env,
            timeout=GIT_DIFF_TIMEOUT_SECS,
        ).stdout
    files: list[FileStat] = []
    for record in out.split("\0"):
        if not record:
            continue
        added, deleted, file_path = record.split("\t", 2)
        binary = added == "-"
        files.append(
            FileStat(
                path=printable(file_path),
                added=None if binary else int(added),
                deleted=None if binary else int(deleted),
                binary=binary,
            )
        )
    return DiffStat(
        base=attempt.base,
        merge_base=merge_base,
        files=tuple(files),
        added=sum(f.added or 0 for f in files),
        deleted=sum(f.deleted or 0 for f in files),
    )


def diff_text(at: At, env: dict[str, str], merge_base: str, max_bytes: int) -> tuple[str, bool]:
    """The unified diff of a snapshot (:func:`_snapshot`) against ``merge_base``, cut at a line
    end before ``max_bytes`` with a marker line saying so; ``(text, truncated)``."""
    data, truncated = at.git.run_capped(
        at.cwd,
        "diff",
        *_DIFF_FLAGS,
        merge_base,
        "--",
        max_bytes=max(max_bytes, 0),
        env=env,
        timeout=GIT_DIFF_TIMEOUT_SECS,
        writable=at.writable,
        checked=True,  # by _snapshot's At
    )
    if truncated:
        cut = data.rfind(b"\n")
        data = data[: cut + 1] if cut >= 0 else b""
    text = data.decode("utf-8", "replace")
    if truncated:
        text += (
            f"[… 差异已截断，只显示前 {len(data)} 字节 "
            f"(diff truncated: only the first {len(data)} bytes are shown)]\n"
        )
    return text, truncated


def diff(attempt: Worktree, max_bytes: int = DEFAULT_DIFF_BYTES, *, git: Git) -> Diff:
    """The attempt's unified diff against the merge base (see :func:`diff_text`)."""
    with _snapshot(attempt, git) as (at, env, merge_base):
        text, truncated = diff_text(at, env, merge_base, max_bytes)
    return Diff(base=attempt.base, merge_base=merge_base, text=text, truncated=truncated)


def _identity(name: str, email: str) -> dict[str, str]:
    for field, value in (("author_name", name), ("author_email", email)):
        if not value.strip() or has_control(value) or "<" in value or ">" in value:
            raise BadRequestError(
                f"{field} 无效 ({field} is empty or has < > or control characters)",
                code="bad_identity",
                field=field,
            )
    return {
        "GIT_AUTHOR_NAME": name,
        "GIT_AUTHOR_EMAIL": email,
        "GIT_COMMITTER_NAME": name,
        "GIT_COMMITTER_EMAIL": email,
    }


def commit_all(
    attempt: Worktree, message: str, author_name: str, author_email: str, *, git: Git
) -> CommitResult:
    """Stage everything in the attempt's worktree (``git add --all``) and commit it on the
    attempt's branch. Nothing to commit is not an error: ``committed=False``."""
    ident = _identity(author_name, author_email)
    if not message.strip() or "\0" in message:
        raise BadRequestError(
            "提交说明为空或含有 NUL (The commit message is empty or has NUL.)",
            code="bad_commit_message",
        )
    at = _at(attempt, git)
    _require_on_branch(attempt, at)
    at("add", "--all", timeout=GIT_DIFF_TIMEOUT_SECS)
    staged = at("diff", "--cached", "--quiet", "--no-ext-diff", check=False)
    committed = staged.returncode == 1
    if staged.returncode not in (0, 1):
        raise GitFailedError(("diff", "--cached", "--quiet"), staged.returncode, staged.stderr)
    if committed:
        at(
            "commit",
            "--quiet",
            "--no-verify",
            "--cleanup=whitespace",
            "-F",
            "-",
            stdin=message,
            env=ident,
        )
        log.info("committed the work of %s", attempt.branch)
    head = at("rev-parse", "HEAD").stdout.strip()
    return CommitResult(committed=committed, head=head, head_oneline=oneline(at, head))


# ---------------------------------------------------------------- merging


def _conflicted(at: At) -> tuple[str, ...]:
    out = at("diff", "--name-only", "--diff-filter=U", "-z").stdout
    return tuple(sorted(printable(p) for p in out.split("\0") if p))


def merge(
    workspace: Path,
    branch: str,
    mode: MergeMode,
    message: str,
    *,
    base: str | None = None,
    author_name: str | None = None,
    author_email: str | None = None,
    commit: str | None = None,
    git: Git,
) -> MergeResult:
    """Merge ``branch`` — or, given, the ``commit`` made from it (a reviewed commit,
    :meth:`room.infra.worktrees.Snapshot.commit`) — into the base branch checked out in
    ``workspace``.

    ``mode="ff"`` only fast-forwards (``not_fast_forward`` when the base moved on);
    ``mode="merge"`` always makes a merge commit with ``message`` (committed as the given
    author, else git's configured identity). A conflict is aborted — the workspace is left as
    it was — and returned as ``outcome="conflict"`` with the conflicting paths. Raises
    WorktreeError (``workspace_dirty``, ``base_not_checked_out``, ``no_branch``, a serial
    reason) and never forces or resets anything.
    """
    ws = Path(workspace).resolve()
    info = inspect(ws, base, git=git)
    if info.mode == "serial":
        assert info.reason_code is not None
        raise WorktreeError(info.reason_code, info.reason)
    at = At.checked(git, ws)
    assert info.base is not None and info.head is not None
    if info.branch != info.base:
        raise WorktreeError("base_not_checked_out", f"{info.base} ≠ {info.branch or 'HEAD'}")
    ref = f"refs/heads/{branch}"
    if commit is not None and not _HEX.fullmatch(commit):
        raise BadRequestError(f"不是提交号 (not a commit id): {commit[:80]!r}", code="bad_commit")
    theirs = rev(at, f"{commit or ref}^{{commit}}")
    if theirs is None:
        raise WorktreeError("no_branch", commit or branch)
    ref = theirs if commit is not None else ref
    if mode not in ("ff", "merge"):
        raise BadRequestError(f"未知的合并方式 (unknown merge mode): {mode!r}", code="bad_mode")
    for marker in ("MERGE_HEAD", "CHERRY_PICK_HEAD", "REVERT_HEAD", "REBASE_HEAD"):
        if rev(at, marker) is not None:
            raise WorktreeError("workspace_dirty", f"{marker}: 另一个操作未完成 (in progress)")
    changed = status_paths(at, "no")
    if changed:
        raise WorktreeError(
            "workspace_dirty", ", ".join(changed[:10]), paths=changed[:MAX_LISTED_PATHS]
        )
    before = info.head

    def result(outcome: MergeOutcome, conflicts: tuple[str, ...] = ()) -> MergeResult:
        after = rev(at, "HEAD") or before
        return MergeResult(
            outcome=outcome,
            base=info.base or "",
            branch=branch,
            before=before,
            after=after,
            head_oneline=oneline(at, after),
            conflicts=conflicts,
        )

    if is_ancestor(at, theirs, before):
        return result("up_to_date")
    if mode == "ff":
        if not is_ancestor(at, before, theirs):
            return result("not_fast_forward")
        run = at("merge", "--ff-only", "--quiet", ref, check=False)
    else:
        if "\0" in message or not message.strip():
            raise BadRequestError(
                "合并说明为空或含有 NUL (The merge message is empty or has NUL.)",
                code="bad_commit_message",
            )
        ident = _identity(author_name, author_email) if author_name and author_email else {}
        args = ["merge", "--no-ff", "--no-edit", "--no-verify", "--quiet", "-m", message, ref]
        run = at(*args, check=False, env=ident)
    if run.returncode == 0:
        log.info("merged %s into %s (%s)", branch, info.base, mode)
        return result("fast_forward" if mode == "ff" else "merged")
    if rev(at, "MERGE_HEAD") is not None:
        conflicts = _conflicted(at)
        at("merge", "--abort")
        if rev(at, "HEAD") != before:  # merge --abort puts HEAD back; say so if it did not
            log.error("merge --abort left %s at another commit than %s", ws, before)
        if conflicts:
            return result("conflict", conflicts)
        raise GitFailedError(("merge", ref), run.returncode, run.stderr)
    if "would be overwritten" in run.stderr:
        # git refused before touching anything: an untracked file stands where the branch has one
        raise WorktreeError("workspace_dirty", run.stderr.strip()[-500:])
    raise GitFailedError(("merge", ref), run.returncode, run.stderr)
