"""What a merge takes from an attempt: its changes read from one snapshot, and a commit of only
the chosen ones (docs/tasks.md, "What a merge takes").

The snapshot is the attempt's folder as ``git add --all`` would stage it, in a temporary index
(the agent's own index is not touched). The reviewed commit is built from the merge base's tree
with the chosen entries of the snapshot written over it — blob ids and modes exactly as git
listed them, fed to ``git update-index -z --index-info`` on stdin — so no path a person or an
agent wrote is ever a command-line argument or opened by the server, and nothing else of the
attempt (not its own commits, not its other files) is in the commit or its history: its one
parent is the merge base. The attempt's branch and folder are left as they are.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from room.infra.git import Git, printable
from room.infra.worktrees._changes import _DIFF_FLAGS, _identity, _snapshot, diff_text
from room.infra.worktrees._model import DEFAULT_DIFF_BYTES, GIT_DIFF_TIMEOUT_SECS, Worktree
from room.infra.worktrees._repo import At
from room.rules.merging import Change, status_of


@dataclass(slots=True)
class Snapshot:
    """One reading of an attempt: its :attr:`changes` against :attr:`merge_base`, the blobs
    behind them (:meth:`blob`), and :meth:`commit` of a choice among them."""

    at: At
    env: dict[str, str]
    merge_base: str
    changes: tuple[Change, ...]

    def text(self, max_bytes: int = DEFAULT_DIFF_BYTES) -> tuple[str, bool]:
        """The unified diff of these changes, ``(text, truncated)`` (as :func:`room.infra.worktrees.diff` cuts it)."""
        return diff_text(self.at, self.env, self.merge_base, max_bytes)

    def blob(self, blob_id: str) -> bytes:
        """The content of a blob the snapshot listed (a cited file's, to compare its hash)."""
        out = self.at("cat-file", "blob", blob_id, timeout=GIT_DIFF_TIMEOUT_SECS).stdout
        return out.encode("utf-8", "surrogateescape")

    def commit(
        self,
        included: Sequence[Change],
        message: str,
        author: tuple[str, str],
        committer: tuple[str, str],
    ) -> str:
        """A new commit on the merge base holding exactly ``included`` (changes of this
        snapshot); its id. No branch or ref moves."""
        ident = _identity(*author)
        committed_by = _identity(*committer)
        ident |= {
            "GIT_COMMITTER_NAME": committed_by["GIT_COMMITTER_NAME"],
            "GIT_COMMITTER_EMAIL": committed_by["GIT_COMMITTER_EMAIL"],
        }
        entries = []
        for change in included:
            if change.status == "deleted":
                entries.append(f"0 {'0' * len(change.old_blob)}\t{change.path}\0")
            else:
                entries.append(f"{change.new_mode} {change.new_blob}\t{change.path}\0")
        with tempfile.TemporaryDirectory(prefix="room-merge-") as tmp:
            env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
            at = self.at.also(Path(tmp))
            at("read-tree", self.merge_base, env=env, timeout=GIT_DIFF_TIMEOUT_SECS)
            at("update-index", "-z", "--index-info", stdin="".join(entries), env=env,
               timeout=GIT_DIFF_TIMEOUT_SECS)  # fmt: skip
            tree = at("write-tree", env=env, timeout=GIT_DIFF_TIMEOUT_SECS).stdout.strip()
        return self.at(
            "commit-tree", tree, "-p", self.merge_base, "-F", "-", stdin=message, env=ident
        ).stdout.strip()


def _parse_raw(out: str) -> list[tuple[str, str, str, str, str, str]]:
    """``git diff --raw -z --no-abbrev``: ``:old_mode new_mode old new STATUS\\0path\\0`` …"""
    fields = out.split("\0")
    records = []
    for i in range(0, len(fields) - 1, 2):
        meta, path = fields[i], fields[i + 1]
        if not meta.startswith(":"):
            break
        old_mode, new_mode, old_blob, new_blob, letter = meta[1:].split(" ")
        records.append((path, letter[:1], old_mode, new_mode, old_blob, new_blob))
    return records


def _numstat(out: str) -> dict[str, tuple[int | None, int | None, bool]]:
    counts: dict[str, tuple[int | None, int | None, bool]] = {}
    for record in out.split("\0"):
        if record:
            added, deleted, path = record.split("\t", 2)
            binary = added == "-"
            counts[path] = (
                None if binary else int(added), None if binary else int(deleted), binary
            )  # fmt: skip
    return counts


@contextmanager
def read_changes(attempt: Worktree, *, git: Git) -> Iterator[Snapshot]:
    """The attempt's changes as they are now (commits, staged, unstaged and untracked files,
    the repository's ``.gitignore`` respected), held in one snapshot while the caller decides
    and commits. Raises WorktreeError (``worktree_missing``, ``branch_mismatch``)."""
    with _snapshot(attempt, git) as (at, env, merge_base):
        args = (*_DIFF_FLAGS, "-z", merge_base, "--")
        raw = at("diff", "--raw", "--no-abbrev", *args, env=env, timeout=GIT_DIFF_TIMEOUT_SECS)
        numstat = at("diff", "--numstat", *args, env=env, timeout=GIT_DIFF_TIMEOUT_SECS)
        counts = _numstat(numstat.stdout)
        changes = []
        for path, letter, old_mode, new_mode, old_blob, new_blob in _parse_raw(raw.stdout):
            added, deleted, binary = counts.get(path, (None, None, False))
            change = Change(
                path=path, status=status_of(letter), old_mode=old_mode, new_mode=new_mode,
                old_blob=old_blob, new_blob=new_blob, shown=printable(path), added=added,
                deleted=deleted, binary=binary,
            )  # fmt: skip
            changes.append(change)
        yield Snapshot(at, env, merge_base, tuple(changes))
