"""What a merge takes from a task's attempt: the attempt's changed files, which of them look
generated (junk), which the task's evidence cites, and which a person chose (docs/tasks.md,
"What a merge takes"). Pure: the changes are read by :mod:`room.infra.worktrees`, the choice
is checked here.

* **Junk** is a file whose path matches one of the project's ignore patterns (the owner's
  ``merge_ignore`` setting, else :data:`DEFAULT_MERGE_IGNORE`). A pattern is a small subset of
  ``.gitignore``: ``name/`` matches a folder of that name at any depth (``__pycache__/``);
  a pattern without ``/`` matches a file or folder name at any depth (``*.pyc``,
  ``.DS_Store``); a pattern with a ``/`` inside is matched from the repository's top
  (``docs/_build``, ``src/**/gen``). ``*`` and ``?`` stay inside one name, ``**`` crosses
  folders, ``[abc]`` / ``[!abc]`` are classes. No negation (``!``), comments or escapes.
* **By default** a merge takes the changed files the task's current evidence cites, nothing
  else; a person adds (or removes) files by naming them. A name that is not a changed file of
  the attempt is refused (``path_not_in_diff``), and so is an empty choice
  (``nothing_selected``).

Errors (:class:`~room.errors.BadRequestError`, 400): ``bad_merge_ignore`` (``details``:
``index`` from 0, ``position`` from 1, ``pattern``, ``problem`` — a code: ``not_list``,
``too_many``, ``not_string``, ``empty``, ``too_long``, ``control``, ``backslash``, ``space``,
``negation``, ``comment``, ``class`` — and ``reason`` in words); ``selection_incomplete``
(``details.paths``: deletions a chosen file needs, where a file replaced a folder or back), ``path_not_in_diff``
(``details.paths``), ``nothing_selected``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from room.errors import BadRequestError

MAX_PATTERNS = 100
MAX_PATTERN_CHARS = 200
MAX_LISTED_PATHS = 20
#: The ``problem`` codes of ``bad_merge_ignore`` (the page translates them).
PATTERN_PROBLEMS = frozenset({
    "not_list", "too_many", "not_string", "empty", "too_long", "control", "backslash", "space",
    "negation", "comment", "class",
})  # fmt: skip

#: Generated files a merge leaves out unless a person ticks them (an owner may edit the list:
#: the project setting ``merge_ignore``).
DEFAULT_MERGE_IGNORE: tuple[str, ...] = (
    # Python
    "__pycache__/", "*.pyc", "*.pyo", ".pytest_cache/", ".mypy_cache/", ".ruff_cache/",
    ".tox/", ".venv/", "*.egg-info/", ".coverage", "htmlcov/",
    # JavaScript
    "node_modules/", ".next/", ".parcel-cache/",
    # build outputs
    "build/", "dist/", "target/", "*.o", "*.obj", "*.class",
    # temporary files, editors and systems
    "*.tmp", "*.temp", "*.swp", "*.swo", "*~", "*.log", ".DS_Store", "Thumbs.db",
    ".idea/", ".vscode/",
)  # fmt: skip

Status = Literal["added", "modified", "deleted", "type_changed"]
Kind = Literal["file", "executable", "symlink", "submodule"]

_STATUS: dict[str, Status] = {
    "A": "added", "M": "modified", "D": "deleted", "T": "type_changed",
}  # fmt: skip
_KIND: dict[str, Kind] = {
    "100644": "file", "100755": "executable", "120000": "symlink", "160000": "submodule",
}  # fmt: skip
_NO_MODE = "000000"


@dataclass(frozen=True, slots=True)
class Change:
    """One changed path of an attempt against its merge base, as ``git diff --raw`` gives it
    (``old_*`` are zeros for an added file, ``new_*`` for a deleted one). ``path`` is git's
    own name, exactly (it may hold any byte but NUL); ``shown`` is its printable form."""

    path: str
    status: Status
    old_mode: str
    new_mode: str
    old_blob: str
    new_blob: str
    shown: str
    added: int | None = None  # lines; None for a binary file or when not counted
    deleted: int | None = None
    binary: bool = False

    @property
    def kind(self) -> Kind:
        mode = self.new_mode if self.status != "deleted" else self.old_mode
        return _KIND.get(mode, "file")


def status_of(letter: str) -> Status:
    """``A``/``M``/``D``/``T`` of ``git diff --raw`` (renames and copies are never asked for)."""
    try:
        return _STATUS[letter]
    except KeyError:
        raise ValueError(f"unexpected git status {letter!r}") from None


# ---------------------------------------------------------------- patterns


def _bad(index: int, pattern: Any, problem: str, reason: str) -> BadRequestError:
    shown = pattern if isinstance(pattern, str) else repr(pattern)
    return BadRequestError(
        f"merge_ignore 第 {index + 1} 项无效 (pattern {index + 1} is not usable): {reason}",
        code="bad_merge_ignore",
        index=index,
        position=index + 1,
        pattern=shown[: MAX_PATTERN_CHARS + 20],
        problem=problem,
        reason=reason,
    )


def check_patterns(patterns: Any) -> tuple[str, ...]:
    """The patterns, checked: a list of at most :data:`MAX_PATTERNS` non-empty strings of at
    most :data:`MAX_PATTERN_CHARS` characters each, no control characters, backslashes, leading
    or trailing spaces, ``!`` negations, ``#`` comments or unclosed ``[``. Duplicates are
    dropped, order kept. Raises ``bad_merge_ignore`` naming the first bad one."""
    if not isinstance(patterns, list | tuple):
        raise BadRequestError(
            "merge_ignore 须为字符串列表 (merge_ignore is a list of patterns)",
            code="bad_merge_ignore", index=None, position=None, pattern=None, problem="not_list",
            reason="not a list",
        )  # fmt: skip
    if len(patterns) > MAX_PATTERNS:
        raise BadRequestError(
            f"merge_ignore 最多 {MAX_PATTERNS} 项 (at most {MAX_PATTERNS} patterns)",
            code="bad_merge_ignore", index=MAX_PATTERNS, position=None, pattern=None,
            problem="too_many", reason="too many",
        )  # fmt: skip
    out: list[str] = []
    for index, pattern in enumerate(patterns):
        if not isinstance(pattern, str):
            raise _bad(index, pattern, "not_string", "not a string")
        if not pattern.strip() or pattern.strip("/") == "":
            raise _bad(index, pattern, "empty", "empty")
        if len(pattern) > MAX_PATTERN_CHARS:
            raise _bad(index, pattern, "too_long", f"longer than {MAX_PATTERN_CHARS} characters")
        if any(ord(c) < 32 or ord(c) == 127 for c in pattern):
            raise _bad(index, pattern, "control", "contains a control character")
        if "\\" in pattern:
            raise _bad(index, pattern, "backslash", "contains a backslash")
        if pattern != pattern.strip():
            raise _bad(index, pattern, "space", "leading or trailing space")
        if pattern.startswith("!"):
            raise _bad(index, pattern, "negation", "negation (!) is not supported")
        if pattern.startswith("#"):
            raise _bad(index, pattern, "comment", "comments (#) are not supported")
        try:
            _compile(pattern)
        except ValueError as exc:
            raise _bad(index, pattern, "class", str(exc)) from None
        if pattern not in out:
            out.append(pattern)
    return tuple(out)


def _glob(text: str) -> str:
    """The regular expression of one glob (``**`` crosses ``/``, ``*`` and ``?`` do not)."""
    out: list[str] = []
    i = 0
    while i < len(text):
        c = text[i]
        if text.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif text.startswith("**", i):
            out.append(".*")
            i += 2
        elif c == "*":
            out.append("[^/]*")
            i += 1
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "[":
            end = text.find("]", i + 2 if text[i + 1 : i + 2] in ("!", "^") else i + 1)
            if end < 0:
                raise ValueError("unclosed [")
            body = text[i + 1 : end]
            negate = body[:1] in ("!", "^")
            body = body[1:] if negate else body
            if not body or "/" in body:
                raise ValueError("empty class or / in a class")
            escaped = "".join("\\" + ch if ch in "]^\\[" else ch for ch in body)
            out.append(f"[{'^/' if negate else ''}{escaped}]")
            i = end + 1
        else:
            out.append(re.escape(c))
            i += 1
    return "".join(out)


@dataclass(frozen=True, slots=True)
class _Pattern:
    text: str
    regex: re.Pattern[str]
    folder_only: bool  # ``name/``: folders only, never the file's own name
    anchored: bool  # a ``/`` inside: matched from the repository's top


def _compile(pattern: str) -> _Pattern:
    folder_only = pattern.endswith("/")
    body = pattern.rstrip("/")
    anchored = "/" in body
    body = body.lstrip("/")
    return _Pattern(pattern, re.compile(_glob(body), re.DOTALL), folder_only, anchored)


def junk_pattern(path: str, patterns: Iterable[str]) -> str | None:
    """The first pattern ``path`` matches (its own name, or a folder above it), else None."""
    parts = path.split("/")
    for pattern in patterns:
        compiled = _compile(pattern)
        last = len(parts) - 1 if compiled.folder_only else len(parts)
        if compiled.anchored:
            if any(compiled.regex.fullmatch("/".join(parts[:n])) for n in range(1, last + 1)):
                return pattern
        elif any(compiled.regex.fullmatch(part) for part in parts[:last]):
            return pattern
    return None


# ---------------------------------------------------------------- the review and the choice


def digest(changes: Sequence[Change]) -> str:
    """A fingerprint of the changes as they are now (paths, modes, contents): a merge given
    the digest of the review a person saw is refused if the attempt changed since."""
    h = hashlib.sha256()
    for c in sorted(changes, key=lambda c: c.path):
        fields = (c.status, c.old_mode, c.new_mode, c.old_blob, c.new_blob, c.path)
        h.update("\0".join(fields).encode("utf-8", "surrogateescape") + b"\0\0")
    return h.hexdigest()


def review_files(
    changes: Sequence[Change], cited: Collection[str], patterns: Iterable[str]
) -> list[dict[str, Any]]:
    """The wire list of an attempt's changed files: ``{path, status, kind, added, deleted,
    binary, cited, junk, selected}``; ``junk`` is the matching pattern or null, ``selected``
    whether a merge takes the file by default (the cited ones)."""
    patterns = tuple(patterns)
    out = []
    for c in changes:
        is_cited = c.path in cited
        out.append({
            "path": c.shown, "status": c.status, "kind": c.kind, "added": c.added,
            "deleted": c.deleted, "binary": c.binary, "cited": is_cited,
            "junk": junk_pattern(c.path, patterns), "selected": is_cited,
        })  # fmt: skip
    return out


def choose(
    changes: Sequence[Change], requested: Sequence[str] | None, cited: Collection[str]
) -> tuple[tuple[Change, ...], tuple[Change, ...]]:
    """``(included, left_out)``: the changes named in ``requested`` (by their shown path, as
    the review lists them), or the cited ones when ``requested`` is None. Raises
    ``path_not_in_diff`` for a name that is not a changed file, ``nothing_selected`` when the
    attempt changed files but none is taken, ``selection_incomplete`` when a chosen file needs
    a deletion left out."""
    by_shown = {c.shown: c for c in changes}
    if requested is None:
        wanted = {c.path for c in changes if c.path in cited}
    else:
        unknown = [p for p in dict.fromkeys(requested) if p not in by_shown]
        if unknown:
            listed = [p[:300] for p in unknown[:MAX_LISTED_PATHS]]
            raise BadRequestError(
                f"这些路径不是本次尝试改动的文件 (not changed files of this attempt): "
                f"{', '.join(repr(p) for p in listed[:5])}",
                code="path_not_in_diff",
                paths=listed,
                count=len(unknown),
                hint="只能选择差异列表中的文件 (choose among the files the diff lists)",
            )
        wanted = {by_shown[p].path for p in requested}
    included = tuple(c for c in changes if c.path in wanted)
    left_out = tuple(c for c in changes if c.path not in wanted)
    _check_folders(included, left_out)
    if changes and not included:
        raise BadRequestError(
            "没有选择任何文件，无可合并 (No file is chosen: nothing to merge.)",
            code="nothing_selected",
            hint="勾选要合并的文件；任务的证据文件默认选中 (tick the files to merge; the files "
            "the task's evidence cites are ticked by default)",
        )
    return included, left_out


def _check_folders(included: Sequence[Change], left_out: Sequence[Change]) -> None:
    """A file that takes the place of a folder (or a folder's file that takes the place of a
    file) can only be merged with the deletion it needs: git would otherwise drop the other
    side silently, an unchosen deletion. Raises ``selection_incomplete`` naming what is
    missing."""
    gone = [c for c in left_out if c.status == "deleted"]
    needed: list[str] = []
    for change in included:
        if change.status == "deleted":
            continue
        for other in gone:
            if other.path.startswith(change.path + "/") or change.path.startswith(other.path + "/"):
                needed.append(other.shown)
    if needed:
        listed = list(dict.fromkeys(needed))[:MAX_LISTED_PATHS]
        raise BadRequestError(
            "这些删除须一起合并：同名的文件和目录互相替换了 (These deletions must be merged too: "
            f"a file and a folder of the same name replace each other): {', '.join(listed[:5])}",
            code="selection_incomplete",
            paths=listed,
            hint="一并勾选列出的删除 (tick the deletions listed as well)",
        )


def one_line(text: str, limit: int = 200) -> str:
    """``text`` fit for one line of a commit message: control characters become spaces."""
    clean = "".join(" " if ord(c) < 32 or ord(c) == 127 else c for c in text)
    return " ".join(clean.split())[:limit]


def commit_message(
    *,
    task_key: str,
    title: str,
    attempt: int,
    branch: str,
    reviewer: str,
    included: int,
    left_out: int,
) -> str:
    """The message of a merge's commits: the task, then trailer lines naming the task, the
    attempt and the person who reviewed and merged it (``reviewer``: ``Name <email>``)."""
    subject = one_line(f"{task_key}: {title}")
    body = (
        f"Reviewed changes of task {one_line(task_key)}, attempt {attempt}: "
        f"{included} file(s) merged, {left_out} left out."
    )
    trailers = (
        f"Room-Task: {one_line(task_key)}\n"
        f"Room-Attempt: {attempt} ({one_line(branch)})\n"
        f"Reviewed-by: {one_line(reviewer)}\n"
    )
    return f"{subject}\n\n{body}\n\n{trailers}"
