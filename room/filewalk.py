"""Walking a workspace the way the file tools see it: ``.git`` hidden, symlinks never followed,
``.gitignore`` respected, and the glob patterns the tools accept.

* The walk is depth first in name order, so a listing cut at a limit is the same every time.
* A symlink is reported (by :func:`walk`) but never entered or read through: a walk cannot leave
  the workspace, and a link's target is found under its own path when it lies inside.
* Ignore rules: every ``.gitignore`` from the workspace root down to a folder applies to what is
  in it, with git's precedence (a deeper file's last matching pattern wins, ``!`` re-includes);
  an ignored folder is not entered, as in git. ``.git/info/exclude`` and global excludes are not
  read: what the project commits is what every member sees. Matching is ``pathspec``'s
  ``GitIgnoreSpec``, which follows git's own tests.
* Glob patterns are relative to the workspace root: ``*`` and ``?`` stay within one folder name,
  ``[abc]`` / ``[!abc]`` are classes, ``**`` as a whole component is any number of folders
  (``**/*.py`` is every Python file, ``src/**`` everything under ``src``). Case-sensitive;
  ``*`` matches names that start with a dot.
* Searching reads each file once (:func:`read_text`: binary files are known from the first
  chunk) and runs the expression over the whole text, splitting lines only around a hit
  (:func:`matching_lines`), which is what keeps ``room.files.search`` near ``grep``.
"""

from __future__ import annotations

import os
import re
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import regex
from pathspec import GitIgnoreSpec, RegexPattern

HIDDEN_NAMES = frozenset({".git"})
MAX_GITIGNORE_BYTES = 1024 * 1024
BINARY_SNIFF_BYTES = 8192  # a NUL in the first this many bytes marks a binary file
_FIRST_READ_BYTES = 64 * 1024  # most source files are read whole by the first read
_NAMED_GROUP = re.compile(r"(?<!\\)\(\?P<\w+>")


@dataclass(frozen=True, slots=True)
class Rules:
    """One ``.gitignore``: its folder (relative to the root), the spec, and one expression that
    matches wherever any of its patterns does — most paths match none, and one match answers
    that several times faster than asking each pattern."""

    base: str
    spec: GitIgnoreSpec
    anything: re.Pattern[str] | None  # anchored at the start, as pathspec writes them


@dataclass(frozen=True, slots=True)
class Ignores:
    """The ``.gitignore`` files that apply in one folder, shallowest first."""

    rules: tuple[Rules, ...] = ()

    def ignored(self, relative: str, is_dir: bool) -> bool:
        for rules in reversed(self.rules):  # the deepest file that has an opinion decides
            sub = relative if rules.base == "." else relative[len(rules.base) + 1 :]
            if is_dir:
                sub += "/"
            if rules.anything is not None and rules.anything.match(sub) is None:
                continue
            include = rules.spec.check_file(sub).include
            if include is not None:
                return include
        return False

    def entering(self, folder: Path, relative: str) -> Ignores:
        """These rules plus the ``.gitignore`` of ``folder`` (when it has a readable one)."""
        rules = _load(folder / ".gitignore", relative)
        return self if rules is None else Ignores((*self.rules, rules))


def _load(path: Path, relative: str) -> Rules | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not _regular(fd):
            return None
        data = os.read(fd, MAX_GITIGNORE_BYTES)
    finally:
        os.close(fd)
    spec = GitIgnoreSpec.from_lines(data.decode("utf-8", errors="replace").splitlines())
    expressions = [
        f"(?:{p.regex.pattern})"
        for p in spec.patterns
        if isinstance(p, RegexPattern) and p.include is not None and p.regex is not None
    ]
    if not expressions:
        return None
    if not all(e.startswith("(?:^") for e in expressions):
        return Rules(relative, spec, None)
    # pathspec names a group ps_d in every pattern; ``re`` wants each name once, and only the
    # question "does any match?" is asked here, so the groups become plain ones.
    combined = _NAMED_GROUP.sub("(?:", "|".join(expressions))
    try:
        anything: re.Pattern[str] | None = re.compile(combined)
    except re.error:  # a pattern the combined form cannot hold: ask each one
        anything = None
    return Rules(relative, spec, anything)


def _regular(fd: int) -> bool:
    return stat.S_ISREG(os.fstat(fd).st_mode)


def hidden(relative: str) -> bool:
    """Is ``relative`` inside a folder that walks never enter (``.git``)?"""
    return any(part in HIDDEN_NAMES for part in relative.split("/"))


def ignores_for(root: Path, relative: str) -> Ignores:
    """The rules that apply inside the folder ``relative`` (``.`` for the root): every
    ``.gitignore`` on the way down from the root, the folder's own included."""
    ignores = Ignores().entering(root, ".")
    if relative == ".":
        return ignores
    done: list[str] = []
    for part in relative.split("/"):
        done.append(part)
        ignores = ignores.entering(root.joinpath(*done), "/".join(done))
    return ignores


def walk(
    folder: Path, relative: str, *, ignores: Ignores | None, max_depth: int | None = None
) -> Iterator[tuple[str, os.DirEntry[str], int]]:
    """``(path relative to the root, entry, depth)`` for everything under ``folder``, which is
    ``relative`` from the root; depth 1 is ``folder``'s own entries. Folders are entered up to
    ``max_depth``; with ``ignores``, ignored entries are left out and ignored folders not
    entered (without, nothing is left out but ``.git``)."""
    stack: list[tuple[Iterator[os.DirEntry[str]], str, int, Ignores | None]] = []

    def push(path: Path, rel: str, depth: int, rules: Ignores | None) -> None:
        try:
            with os.scandir(path) as scan:
                entries = sorted(scan, key=lambda e: e.name)
        except OSError:  # unreadable, or removed meanwhile: there is nothing to list
            return
        if rules is not None and depth > 1 and any(e.name == ".gitignore" for e in entries):
            rules = rules.entering(path, rel)
        stack.append((iter(entries), rel, depth, rules))

    push(folder, relative, 1, ignores)
    while stack:
        entries, rel, depth, rules = stack[-1]
        entry = next(entries, None)
        if entry is None:
            stack.pop()
            continue
        if entry.name in HIDDEN_NAMES:
            continue
        path = entry.name if rel == "." else f"{rel}/{entry.name}"
        is_dir = entry.is_dir(follow_symlinks=False)
        if rules is not None and rules.ignored(path, is_dir):
            continue
        yield path, entry, depth
        if is_dir and (max_depth is None or depth < max_depth):
            push(Path(entry.path), path, depth + 1, rules)


def compile_glob(pattern: str) -> re.Pattern[str]:
    """A regular expression that matches a whole relative path when ``pattern`` does.
    ``pattern`` is already a clean relative path (no ``..``, no leading ``/``)."""
    parts = pattern.split("/")
    out: list[str] = []
    for index, part in enumerate(parts):
        last = index == len(parts) - 1
        if part == "**":
            out.append(".*" if last else "(?:[^/]+/)*")
        else:
            out.append(_segment(part) + ("" if last else "/"))
    return re.compile("".join(out) + r"\Z", re.DOTALL)


def _segment(part: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(part):
        char = part[i]
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[" and (close := part.find("]", i + 1)) > i + 1:
            body = part[i + 1 : close]
            negate = body[:1] in ("!", "^")
            body = re.sub(r"([\\\[\]^&~|-])", r"\\\1", body[1:] if negate else body)
            # a range a-z keeps its dash; every other special character is literal
            body = re.sub(r"(?<=[^\\])\\-(?=[^\\])", "-", body)
            out.append("[" + ("^/" if negate else "") + body + "]")
            i = close
        else:
            out.append(re.escape(char))
        i += 1
    return "".join(out)


def read_text(path: str, max_bytes: int) -> str | None:
    """The text of a file the walk found, or None when it is binary, not UTF-8, over
    ``max_bytes`` or unreadable.

    The walk already knows the entry is a regular file (the folder listing's type), so there is
    no ``fstat``: it costs as much as the read of a small file. ``O_NOFOLLOW`` refuses a symlink
    planted since, and ``O_NONBLOCK`` keeps a FIFO planted since from blocking the read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        data = os.read(fd, min(_FIRST_READ_BYTES, max_bytes + 1))
        if data.find(b"\x00", 0, BINARY_SNIFF_BYTES) >= 0:
            return None  # the common binary case, known from the first chunk
        if len(data) == _FIRST_READ_BYTES:
            chunks = [data]
            size = len(data)
            while size <= max_bytes and (more := os.read(fd, min(1 << 20, max_bytes + 1 - size))):
                chunks.append(more)
                size += len(more)
            data = b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)
    if len(data) > max_bytes or (len(data) > BINARY_SNIFF_BYTES and b"\x00" in data):
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def matching_lines(
    compiled: regex.Pattern[str], text: str, deadline: float
) -> Iterator[tuple[int, str]]:
    """``(line number, line without its end)`` of each line where a match starts, in order.
    Raises ``TimeoutError`` once ``deadline`` (``time.monotonic``) passes inside the engine."""
    pos = 0
    line = 1
    counted = 0  # ``line`` is the number of the line that holds offset ``counted``
    while pos <= len(text):
        found = compiled.search(text, pos, timeout=max(deadline - time.monotonic(), 0.001))
        if found is None:
            return
        start = found.start()
        line += text.count("\n", counted, start)
        counted = start
        line_start = text.rfind("\n", 0, start) + 1
        line_end = text.find("\n", start)
        line_end = len(text) if line_end < 0 else line_end
        yield line, text[line_start:line_end].rstrip("\r")
        pos = line_end + 1
