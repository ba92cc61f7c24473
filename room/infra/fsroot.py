"""Paths inside a folder that others may be changing: resolved and opened in one walk, by
descriptor, so the answer cannot be redirected outside between the check and the open.

Why: a workspace is written by agents (``shell``, the write tools) while the server reads it.
Resolving a path to an absolute name (``Path.resolve``), checking that name lies inside, then
opening it leaves a gap: a folder on the way swapped for a symlink meanwhile
(``renameat2(RENAME_EXCHANGE)`` makes it atomic) sends the open outside, and ``O_NOFOLLOW``
guards only the last name. Here nothing is ever opened by an absolute name below the root:

* :func:`open_root` opens the root once, each of its own components with ``O_NOFOLLOW`` (it is
  a real path, resolved first), and keeps the descriptor (:class:`Root`).
* :meth:`Root.open` and :meth:`Root.folder` walk a relative path one name at a time with
  ``openat(parent, name, O_NOFOLLOW | O_DIRECTORY)``, holding a stack of folder descriptors. The
  kernel never follows a symlink on the way; a symlink met is read (``readlinkat``) and its target
  walked by the same rules: relative from the folder holding it, ``..`` popping the stack (and
  refused at the root: the stack never goes above it), absolute only when it names the root's own
  path (then from the root's descriptor). So ``/proc`` magic links are never entered, and every
  descriptor handed out was reached from the root by names the walk itself checked.
* The last name is looked at (``fstatat`` without following) before it is opened, so a FIFO or a
  device is refused without being opened; a regular file is opened ``O_NOFOLLOW | O_NONBLOCK``
  and checked again (``fstat``) on the descriptor the caller then reads.
* A swap seen half way (a name that was a folder is a symlink by the time it is read, or the
  reverse) is looked at again; every look counts against :data:`MAX_SYMLINK_HOPS`, so a path
  that keeps changing ends in a refusal, never in a loop.

The rules are those of :func:`room.infra.evidence.resolve_inside` before this module (its tests pin
them): a symlink is followed only while it stays inside; one leaving is ``outside_workspace``
(even dangling); a file where a folder is needed is ``not_a_directory``. Two rules are
narrower, because the walk only trusts what it holds: an absolute symlink target counts as inside
only when it starts with the root's path (resolved, or as the caller gave it) — one reaching the
root through some other alias is refused; and a relative target whose ``..`` climbs above the
root is refused even if it would come back in (``../ws/src`` from the root of ``ws``).

Refusals go through the ``error`` the caller names (``(code, path, hint)`` → its own subclass of
:class:`~room.errors.WorkspacePathError`), with codes from ``room.infra.evidence.PATH_CODES``. Linux
only, like the rest of the server (``O_DIRECTORY``, ``dir_fd``). No clock, no other I/O.
"""

from __future__ import annotations

import errno
import os
import stat
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Literal, Self

from room.errors import WorkspacePathError

MAX_SYMLINK_HOPS = 40  # Linux's own MAXSYMLINKS; also bounds the looks at a name being swapped
MAX_NEW_FOLDERS = 512  # folders one walk may make: a 1024-character path has no more names

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
"""A folder below a held one: never through a symlink."""
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
"""A file to read: never through a symlink; a FIFO planted since cannot block the open."""

PathKind = Literal["file", "dir", "any"]
Refusal = Callable[[str, str, str], WorkspacePathError]
"""Builds the error a caller wants from ``(code, path, hint)``; ``code`` is one of PATH_CODES."""

HINT_RELATIVE = (
    "写相对于工作区根目录的路径，如 src/app.py (Give a path relative to the workspace, e.g. "
    "src/app.py.)"
)
HINT_MISSING = (
    "先创建它，或列出上级目录看看有什么 (Create it first, or list the folder above to see what "
    "is there.)"
)
HINT_OUTSIDE = (
    "只能使用工作区内的文件；不要用指向外部的符号链接 "
    "(Only files inside the workspace; no symlinks pointing outside.)"
)
_HINT_LOOP = (
    "符号链接太多、成环，或路径一直在变 (Too many symlinks, a symlink loop, or a path that kept "
    "changing while it was read.)"
)


class Root:
    """An open folder that relative paths are resolved in. ``path`` is its real absolute path
    when opened (for showing and for absolute symlink targets), ``fd`` its descriptor: the one
    thing every walk starts from. Close it (or use it as a context manager)."""

    __slots__ = ("_prefixes", "fd", "links", "path")

    def __init__(
        self, fd: int, path: Path, aliases: Sequence[Path] = (), *, links: bool = True
    ) -> None:
        self.fd = fd
        self.path = path
        self.links = links  # False: any symlink below the root is refused, even one inside
        self._prefixes = tuple({path.parts, *(a.parts for a in aliases if a.is_absolute())})

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def inside(self, target: str) -> tuple[str, ...] | None:
        """The names below the root of an absolute symlink target that starts with the root's
        path, or None when it does not (the target is then outside, whatever it leads to)."""
        parts = Path(target).parts
        for prefix in self._prefixes:
            if parts[: len(prefix)] == prefix:
                return parts[len(prefix) :]
        return None

    def open(self, parts: Sequence[str], *, kind: PathKind, raw: str, error: Refusal) -> Found:
        """The file or folder ``parts`` names, opened: a folder as by :data:`DIR_FLAGS`, a regular
        file as by :data:`FILE_FLAGS`. ``kind`` is what it must be (``any``: either; anything else
        — FIFO, device, socket — is ``not_a_file`` and never opened). No parts: the root itself."""
        found, rest = _resolve(self, parts, kind=kind, missing="fail", raw=raw, error=error)
        assert found is not None and not rest
        return found

    def folder(self, parts: Sequence[str], *, create: bool, raw: str, error: Refusal) -> Found:
        """The folder ``parts`` names, opened; with ``create``, missing folders are made on the
        way (``mkdirat`` in the folder just walked, so they are made inside or not at all)."""
        found, rest = _resolve(
            self, parts, kind="dir", missing="create" if create else "fail", raw=raw, error=error
        )
        assert found is not None and not rest
        return found

    def locate(
        self, parts: Sequence[str], *, kind: PathKind, raw: str, error: Refusal
    ) -> tuple[str, ...]:
        """Where ``parts`` really is, relative to the root, opening nothing that is handed out.
        A path whose tail is missing is accepted: the existing part is walked as by
        :meth:`open` (a dangling symlink on the way must lead inside as well) and the missing
        names are appended, ``..`` among them applied lexically and never above the root."""
        found, rest = _resolve(self, parts, kind=kind, missing="stop", raw=raw, error=error)
        if found is not None:
            found.close()
            return found.real
        assert rest is not None
        real, missing = rest
        names = list(real)
        for name in missing:
            if name == "..":
                if not names:
                    raise error("outside_workspace", raw, HINT_OUTSIDE)
                names.pop()
            elif name not in ("", "."):
                names.append(name)
        return tuple(names)


@dataclass(slots=True)
class Found:
    """An open file or folder: ``fd`` (the caller's to close, or use as a context manager),
    ``real``: the names that lead to it from the root after symlinks, ``info``: its ``fstat``."""

    fd: int
    real: tuple[str, ...]
    info: os.stat_result

    @property
    def is_dir(self) -> bool:
        return stat.S_ISDIR(self.info.st_mode)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def open_root(path: Path, *, given: str | None = None, links: bool = True) -> Root:
    """Open ``path`` (an absolute real path, as ``Path.resolve`` gives it) one component at a
    time from ``/`` without following any symlink, so a component swapped for a link after it
    was resolved is refused (``OSError``) instead of followed. ``given`` is how the caller
    spelled the folder, accepted as a second prefix of absolute symlink targets. Without
    ``links``, a path below the root may not go through any symlink (``outside_workspace``):
    for a root that stands for one approved file, where a link can only lead elsewhere."""
    if not path.is_absolute():
        raise ValueError(f"open_root wants an absolute path, not {path}")
    fd = os.open("/", DIR_FLAGS)
    try:
        for name in path.parts[1:]:
            child = os.open(name, DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    # The caller's own spelling counts only without '..', which a lexical prefix cannot judge.
    aliases = [Path(os.path.abspath(given))] if given and ".." not in Path(given).parts else []
    return Root(fd, path, aliases, links=links)


# -- the walk -------------------------------------------------------------------------------------

_Missing = Literal["fail", "stop", "create"]
# What an open of one name answers when the name is not (or no longer) what it was looked at as:
# a symlink (ELOOP; ENOTDIR with O_DIRECTORY), a file where a folder was, or nothing at all.
_CHANGED = frozenset((errno.ELOOP, errno.ENOTDIR, errno.ENOENT))


class _Walk:
    """The folders walked so far below the root: their descriptors and names. Popping at the
    root is refused: this is what keeps ``..`` in symlink targets inside."""

    def __init__(self, root: Root, raw: str, error: Refusal) -> None:
        self.root = root
        self.raw = raw
        self.error = error
        self.fds: list[int] = []
        self.names: list[str] = []
        self.looks = 0

    @property
    def top(self) -> int:
        return self.fds[-1] if self.fds else self.root.fd

    def push(self, name: str, fd: int) -> None:
        self.fds.append(fd)
        self.names.append(name)

    def up(self) -> None:
        if not self.fds:
            raise self.error("outside_workspace", self.raw, HINT_OUTSIDE)
        os.close(self.fds.pop())
        self.names.pop()

    def look_again(self) -> None:
        """Count one more look (a symlink followed, or a name that changed while read)."""
        self.looks += 1
        if self.looks > MAX_SYMLINK_HOPS:
            raise self.error("path_missing", self.raw, _HINT_LOOP)

    def follow(self, name: str, pending: deque[str]) -> bool:
        """Put the target of the symlink ``name`` in front of ``pending``; False when ``name``
        is no longer a symlink (swapped back meanwhile: look at it again)."""
        self.look_again()
        if not self.root.links:
            raise self.error("outside_workspace", self.raw, HINT_OUTSIDE)
        try:
            target = os.readlink(name, dir_fd=self.top)
        except OSError as exc:
            if exc.errno in (errno.EINVAL, errno.ENOENT):
                return False
            raise
        if not target:
            raise self.error("path_missing", self.raw, HINT_MISSING)
        if target.startswith("/"):
            below = self.root.inside(target)
            if below is None:
                raise self.error("outside_workspace", self.raw, HINT_OUTSIDE)
            while self.fds:
                os.close(self.fds.pop())
            self.names.clear()
            pending.extendleft(reversed(below))
        else:
            pending.extendleft(reversed(target.split("/")))
        return True

    def take_top(self) -> Found:
        """The folder walked to, handed to the caller (the root itself as a copy)."""
        real = tuple(self.names)
        if self.fds:
            fd = self.fds.pop()
            self.names.pop()
        else:
            fd = os.dup(self.root.fd)
        try:
            info = os.fstat(fd)
        except BaseException:
            os.close(fd)
            raise
        return Found(fd, real, info)

    def close(self) -> None:
        while self.fds:
            os.close(self.fds.pop())


def _resolve(
    root: Root,
    parts: Sequence[str],
    *,
    kind: PathKind,
    missing: _Missing,
    raw: str,
    error: Refusal,
) -> tuple[Found | None, tuple[tuple[str, ...], tuple[str, ...]] | None]:
    """Walk ``parts`` from ``root``: ``(found, None)``, or with ``missing="stop"`` and a missing
    name, ``(None, (real names walked, names left))``. See the module docstring."""
    walk = _Walk(root, raw, error)
    try:
        return _steps(walk, deque(parts), kind=kind, missing=missing)
    except OSError as exc:  # refused by the file system itself (permissions, a name too long)
        raise error("path_missing", raw, f"{exc.strerror or exc} ({HINT_RELATIVE})") from None
    finally:
        walk.close()


def _steps(
    walk: _Walk, pending: deque[str], *, kind: PathKind, missing: _Missing
) -> tuple[Found | None, tuple[tuple[str, ...], tuple[str, ...]] | None]:
    made = 0
    while pending:
        name = pending.popleft()
        if name in ("", "."):
            continue
        if name == "..":
            walk.up()
            continue
        if not pending and kind != "dir":
            leaf = _leaf(walk, name, pending, kind=kind)
            if isinstance(leaf, Found):
                return leaf, None
            if leaf is _MISSING:
                if missing == "stop":
                    return None, (tuple(walk.names), (name,))
                raise walk.error("path_missing", walk.raw, HINT_MISSING)
            continue  # a symlink to follow or a name to look at again; or a folder, now on top
        try:
            walk.push(name, os.open(name, DIR_FLAGS, dir_fd=walk.top))
            continue
        except OSError as exc:
            if exc.errno not in _CHANGED:
                raise
        what = _lstat(walk.top, name)
        if what is None:
            if missing == "stop":
                return None, (tuple(walk.names), (name, *pending))
            if missing == "fail":
                raise walk.error("path_missing", walk.raw, HINT_MISSING)
            made += 1
            if made > MAX_NEW_FOLDERS:  # removed as fast as it is made: give up
                raise walk.error("path_missing", walk.raw, _HINT_LOOP)
            try:
                os.mkdir(name, 0o777, dir_fd=walk.top)
            except FileExistsError:
                pass  # made meanwhile: look at what it is
            pending.appendleft(name)
        elif stat.S_ISLNK(what.st_mode):
            if not walk.follow(name, pending):
                pending.appendleft(name)
        elif stat.S_ISDIR(what.st_mode):  # a folder again (swapped back): open it again
            walk.look_again()
            pending.appendleft(name)
        else:
            raise walk.error(
                "not_a_directory",
                walk.raw,
                "给出目录，不要给文件 (Name a folder, not a file.)"
                if not pending and kind == "dir"
                else "路径中间有一段是文件 (A part of the path is a file, not a folder.)",
            )
    if kind == "file":  # the path ended on a folder (a symlink target ending in '.' or '..')
        raise walk.error(
            "not_a_file", walk.raw, "给出文件，不要给目录 (Name a file, not a folder.)"
        )
    return walk.take_top(), None


class _Look:
    """What :func:`_leaf` found when it did not open a file."""


_AGAIN = _Look()  # a symlink was followed, or the name changed: the walk goes on
_MISSING = _Look()
_FOLDER = _Look()  # a folder, pushed onto the walk


def _leaf(walk: _Walk, name: str, pending: deque[str], *, kind: PathKind) -> Found | _Look:
    """The last name of a path that may be a file: looked at first, so only a regular file or a
    folder is ever opened."""
    what = _lstat(walk.top, name)
    if what is None:
        return _MISSING
    mode = what.st_mode
    if stat.S_ISLNK(mode):
        if not walk.follow(name, pending):
            pending.appendleft(name)
        return _AGAIN
    if stat.S_ISDIR(mode):
        if kind == "file":
            raise walk.error(
                "not_a_file", walk.raw, "给出文件，不要给目录 (Name a file, not a folder.)"
            )
        try:
            walk.push(name, os.open(name, DIR_FLAGS, dir_fd=walk.top))
        except OSError as exc:
            if exc.errno not in _CHANGED:
                raise
            walk.look_again()
            pending.appendleft(name)
            return _AGAIN
        return _FOLDER
    if not stat.S_ISREG(mode):
        raise walk.error(
            "not_a_file",
            walk.raw,
            "不是普通文件（FIFO、设备等不读）(Not a regular file: FIFOs, devices and sockets "
            "are not read.)",
        )
    try:
        fd = os.open(name, FILE_FLAGS, dir_fd=walk.top)
    except OSError as exc:
        if exc.errno not in _CHANGED:
            raise
        walk.look_again()
        pending.appendleft(name)
        return _AGAIN
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):  # swapped for a FIFO between the look and the open
        os.close(fd)
        walk.look_again()
        pending.appendleft(name)
        return _AGAIN
    return Found(fd, (*walk.names, name), info)


def _lstat(dir_fd: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
