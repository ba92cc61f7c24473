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
  (:func:`matching_lines`), which is what keeps ``room.infra.files.search`` near ``grep``.
* Everything is by descriptor (:mod:`room.infra.fsroot`): the walk lists a folder through the
  descriptor it opened, opens each sub-folder by name relative to it (``O_NOFOLLOW |
  O_DIRECTORY``), and files and ``.gitignore`` files are read the same way. A folder swapped for
  a symlink while the walk is inside the workspace cannot take it outside: the kernel is never
  asked to follow a link, and a name looked up is one name in a folder already held. Each level
  holds one descriptor while the walk is in it, so folders deeper than :data:`MAX_WALK_DEPTH`
  are not entered.
"""

from __future__ import annotations

import os
import re
import stat
import time
from collections.abc import Generator, Iterator
from dataclasses import dataclass

import regex
from pathspec import GitIgnoreSpec, RegexPattern

from room.errors import WorkspacePathError
from room.infra.fsroot import DIR_FLAGS, FILE_FLAGS, Root

HIDDEN_NAMES = frozenset({".git"})
MAX_GITIGNORE_BYTES = 1024 * 1024
BINARY_SNIFF_BYTES = 8192  # a NUL in the first this many bytes marks a binary file
MAX_WALK_DEPTH = 64  # folders below the start a walk enters (one descriptor held per level)
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

    def entering(self, folder: int, relative: str) -> Ignores:
        """These rules plus the ``.gitignore`` in the folder open as ``folder`` (when it has a
        readable one)."""
        rules = _load(folder, relative)
        return self if rules is None else Ignores((*self.rules, rules))


def _load(folder: int, relative: str) -> Rules | None:
    try:
        fd = os.open(".gitignore", FILE_FLAGS, dir_fd=folder)
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


def ignores_for(root: Root, relative: str) -> Ignores:
    """The rules that apply inside the folder ``relative`` (``.`` for the root): every
    ``.gitignore`` on the way down from the root, the folder's own included. Each folder on the
    way is walked to by the root's rules (a symlink followed only inside); one that cannot be
    (removed meanwhile) adds no rules."""
    ignores = Ignores().entering(root.fd, ".")
    if relative == ".":
        return ignores
    done: list[str] = []
    for part in relative.split("/"):
        done.append(part)
        try:
            found = root.open(done, kind="dir", raw=relative, error=_unreadable)
        except WorkspacePathError:
            break
        with found:
            ignores = ignores.entering(found.fd, "/".join(done))
    return ignores


def _unreadable(code: str, path: str, hint: str) -> WorkspacePathError:
    return WorkspacePathError(code, path, hint, code)


def walk(
    folder: int, relative: str, *, ignores: Ignores | None, max_depth: int | None = None
) -> Generator[tuple[str, os.DirEntry[str], int, int], None, None]:
    """``(path relative to the root, entry, depth, folder)`` for everything under the folder
    open as ``folder`` (the caller's descriptor; not closed here), which is ``relative`` from
    the root; depth 1 is that folder's own entries. ``folder`` in each item is the descriptor of
    the entry's own folder, to open the entry by name (``dir_fd``); it stays open until the walk
    moves on. Folders are entered up to ``max_depth`` (and never past :data:`MAX_WALK_DEPTH`);
    with ``ignores``, ignored entries are left out and ignored folders not entered (without,
    nothing is left out but ``.git``). Close the iterator (or exhaust it) to release the
    descriptors it holds."""
    limit = MAX_WALK_DEPTH if max_depth is None else min(max_depth, MAX_WALK_DEPTH)
    stack: list[tuple[Iterator[os.DirEntry[str]], str, int, Ignores | None, int]] = []

    def push(fd: int, rel: str, depth: int, rules: Ignores | None) -> None:
        try:
            with os.scandir(fd) as scan:
                entries = sorted(scan, key=lambda e: e.name)
        except OSError:  # unreadable: there is nothing to list
            if depth > 1:
                os.close(fd)
            return
        if rules is not None and depth > 1 and any(e.name == ".gitignore" for e in entries):
            rules = rules.entering(fd, rel)
        stack.append((iter(entries), rel, depth, rules, fd))

    try:
        push(folder, relative, 1, ignores)
        while stack:
            entries, rel, depth, rules, fd = stack[-1]
            entry = next(entries, None)
            if entry is None:
                stack.pop()
                if depth > 1:
                    os.close(fd)
                continue
            if entry.name in HIDDEN_NAMES:
                continue
            path = entry.name if rel == "." else f"{rel}/{entry.name}"
            is_dir = entry.is_dir(follow_symlinks=False)
            if rules is not None and rules.ignored(path, is_dir):
                continue
            yield path, entry, depth, fd
            if is_dir and depth < limit:
                try:  # by name in the folder held: a symlink planted since is not followed
                    child = os.open(entry.name, DIR_FLAGS, dir_fd=fd)
                except OSError:  # removed, or no longer a folder: nothing to enter
                    continue
                push(child, path, depth + 1, rules)
    finally:
        for _, _, depth, _, fd in stack:
            if depth > 1:
                os.close(fd)


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


def read_text(folder: int, name: str, max_bytes: int) -> str | None:
    """The text of the file ``name`` in the folder open as ``folder`` (as :func:`walk` gives
    both), or None when it is binary, not UTF-8, over ``max_bytes`` or unreadable.

    The walk already knows the entry is a regular file (the folder listing's type), so there is
    no ``fstat``: it costs as much as the read of a small file. ``O_NOFOLLOW`` refuses a symlink
    planted since, and ``O_NONBLOCK`` keeps a FIFO planted since from blocking the read."""
    try:
        fd = os.open(name, FILE_FLAGS, dir_fd=folder)
    except OSError:
        return None
    try:
        return text_of(fd, max_bytes)
    finally:
        os.close(fd)


def text_of(fd: int, max_bytes: int) -> str | None:
    """The text of the open file ``fd``; see :func:`read_text`."""
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
