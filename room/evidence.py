"""Artifact evidence: a workspace-relative path resolved by the server, and its fingerprint.

An agent (or a person) names a file by a path relative to the project's workspace; the server —
never the model — decides what that path means and records what the file really is:

* refused before touching the disk: an empty path, NUL, a backslash, an absolute path (``/x``,
  ``C:/x``, ``//host/x``), and any ``..`` component (even one that would come back inside:
  evidence paths have one spelling);
* resolved with ``Path.resolve(strict=True)``, which follows every symlink; the result must lie
  inside the workspace's own resolved path, so a symlink that points outside is refused even when
  the link itself sits inside;
* it must be a regular file (not a directory, FIFO or device, which could block a read); it is
  opened with ``O_NOFOLLOW`` and checked with ``fstat`` to be the very file that was resolved,
  then read once to take its size and SHA-256.

The same rules resolve the paths of the file tools (:mod:`room.files`) through
:func:`resolve_inside`, which raises the error its caller names (:class:`EvidenceError` here,
``FileToolError`` there). This module does no other I/O and reads no clock. Every refusal is an
:class:`EvidenceError` (400) whose ``code`` says which rule, with a hint of what to do.
"""

from __future__ import annotations

import hashlib
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Literal

from room.errors import WorkspacePathError

MAX_ARTIFACT_BYTES = 256 * 1024 * 1024  # hashing is streamed; this bounds the time it takes
MAX_PATH_CHARS = 1024
_CHUNK_BYTES = 1024 * 1024

# The rules every workspace path obeys, whoever gives it (artifact evidence, the file tools).
PATH_CODES = {
    "no_workspace": "项目没有设置工作区 (The project has no workspace.)",
    "workspace_missing": "工作区目录不存在 (The workspace folder does not exist.)",
    "bad_path": "路径为空、过长或含有不允许的字符 (The path is empty, too long or has a bad character.)",
    "absolute_path": "不接受绝对路径 (Absolute paths are refused.)",
    "path_escapes": "路径含有 .. (The path contains '..'.)",
    "outside_workspace": "路径解析后位于工作区之外 (The path resolves outside the workspace.)",
    "path_missing": "路径不存在 (Nothing exists at this path.)",
    "not_a_file": "不是普通文件 (Not a regular file.)",
    "not_a_directory": "不是目录 (Not a folder.)",
}

EVIDENCE_CODES = {
    **{code: text for code, text in PATH_CODES.items() if code != "path_missing"},
    "artifact_missing": "文件不存在 (The file does not exist.)",
    "artifact_too_large": "文件太大，无法计算摘要 (The file is too large to fingerprint.)",
}

PathKind = Literal["file", "dir", "any"]
Refusal = Callable[[str, str, str], WorkspacePathError]
"""Builds the error a caller wants from ``(code, path, hint)``; ``code`` is one of PATH_CODES."""


class EvidenceError(WorkspacePathError):
    """An artifact path was refused; ``code`` is one of :data:`EVIDENCE_CODES`."""

    code = "bad_evidence"

    def __init__(self, code: str, path: str, hint: str) -> None:
        # Artifacts said "artifact_missing" before the rules were shared; clients know that code.
        code = "artifact_missing" if code == "path_missing" else code
        super().__init__(code, path, hint, EVIDENCE_CODES[code])


@dataclass(frozen=True, slots=True)
class Artifact:
    """A file as the server found it: the path as given (normalised), where it really is
    (relative to the workspace, after symlinks), its size and SHA-256."""

    path: str
    real_path: str
    size: int
    sha256: str


Verification = Literal["ok", "changed", "missing", "refused", "unchecked"]

_HINT_RELATIVE = "写相对于工作区根目录的路径，如 src/app.py (Give a path relative to the workspace, e.g. src/app.py.)"
_HINT_MISSING = "先创建它，或列出上级目录看看有什么 (Create it first, or list the folder above to see what is there.)"
_HINT_OUTSIDE = (
    "只能使用工作区内的文件；不要用指向外部的符号链接 "
    "(Only files inside the workspace; no symlinks pointing outside.)"
)


def clean_relative(raw: str, *, allow_root: bool = False, error: Refusal = EvidenceError) -> str:
    """The normalised relative form of ``raw`` (``./a//b`` → ``a/b``) or ``error``.

    With ``allow_root``, ``.`` (or ``./``) names the workspace itself and comes back as ``.``."""
    if not raw or not raw.strip() or len(raw) > MAX_PATH_CHARS or "\x00" in raw:
        raise error("bad_path", raw, _HINT_RELATIVE)
    if "\\" in raw:
        raise error("bad_path", raw, "用 / 分隔目录 (Separate folders with '/'.)")
    if raw.startswith("/") or PureWindowsPath(raw).is_absolute() or PureWindowsPath(raw).drive:
        raise error("absolute_path", raw, _HINT_RELATIVE)
    parts = [p for p in PurePosixPath(raw).parts if p != "."]
    if ".." in parts:
        raise error(
            "path_escapes",
            raw,
            "去掉 ..，从工作区根目录写起 (Drop '..'; start at the workspace root.)",
        )
    if not parts:
        if allow_root:
            return "."
        raise error("bad_path", raw, _HINT_RELATIVE)
    return "/".join(parts)


def workspace_root(
    workspace: str | os.PathLike[str] | None, *, error: Refusal = EvidenceError
) -> Path:
    """The workspace's own resolved path (symlinks followed), or ``error``."""
    if workspace is None or not str(workspace).strip():
        raise error(
            "no_workspace", "", "创建项目时设置 workspace (Set a workspace for the project.)"
        )
    try:
        root = Path(workspace).resolve(strict=True)
    except (OSError, RuntimeError):
        raise error(
            "workspace_missing", str(workspace), "请先创建工作区目录 (Create the workspace folder.)"
        ) from None
    if not root.is_dir():
        raise error(
            "workspace_missing",
            str(workspace),
            "工作区必须是目录 (The workspace must be a folder.)",
        )
    return root


def resolve_inside(
    workspace: str | os.PathLike[str] | None,
    raw: str,
    *,
    must_exist: bool = True,
    kind: PathKind = "any",
    error: Refusal = EvidenceError,
) -> tuple[str, Path]:
    """(normalised relative path, real absolute path) of ``raw`` inside the workspace, or
    ``error(code, raw, hint)`` with ``code`` from :data:`PATH_CODES`.

    ``kind`` is what an existing path must be (``file``: a regular file, ``dir``: a folder);
    the workspace itself (``.``) is accepted unless ``kind`` is ``file``. With ``must_exist``
    false, a path whose tail does not exist yet is accepted: its deepest existing ancestor is
    resolved (symlinks followed) and must be a folder inside the workspace; the missing names
    are appended to it, so creating them creates nothing outside. The caller still decides what
    to do about a symlink in the *last* component (a writer refuses it)."""
    relative = clean_relative(raw, allow_root=kind != "file", error=error)
    root = workspace_root(workspace, error=error)
    parts = [] if relative == "." else relative.split("/")
    try:
        real = root.joinpath(*parts).resolve(strict=True)
    except FileNotFoundError:
        if must_exist:
            raise error("path_missing", raw, _HINT_MISSING) from None
        real = _resolve_missing(root, parts, raw, error)
        return relative, real
    except NotADirectoryError:
        raise error(
            "not_a_directory",
            raw,
            "路径中间有一段是文件 (A part of the path is a file, not a folder.)",
        ) from None
    except (OSError, RuntimeError):  # a symlink loop, a name too long …
        raise error("path_missing", raw, _HINT_RELATIVE) from None
    if not real.is_relative_to(root):
        raise error("outside_workspace", raw, _HINT_OUTSIDE)
    _check_kind(real, kind, raw, error)
    return relative, real


def _resolve_missing(root: Path, parts: list[str], raw: str, error: Refusal) -> Path:
    """Walk ``parts`` down from ``root`` until a name is missing; see :func:`resolve_inside`."""
    real = root
    for index, part in enumerate(parts):
        here = real / part
        try:
            info = os.lstat(here)
        except FileNotFoundError:
            return real.joinpath(*parts[index:])
        except OSError:
            raise error("path_missing", raw, _HINT_RELATIVE) from None
        if stat.S_ISLNK(info.st_mode):
            try:  # a dangling link leads where its target would be: it must be inside as well
                here = here.resolve(strict=False)
            except (OSError, RuntimeError):
                raise error("path_missing", raw, _HINT_RELATIVE) from None
            if not here.is_relative_to(root):
                raise error("outside_workspace", raw, _HINT_OUTSIDE)
            if not here.exists():
                return here.joinpath(*parts[index + 1 :])
        if not here.is_dir():
            raise error(
                "not_a_directory",
                raw,
                f"{'/'.join(parts[: index + 1])} 是文件，不是目录 "
                f"({'/'.join(parts[: index + 1])} is a file, not a folder.)",
            )
        real = here
    return real  # pragma: no cover - the whole path existed, so strict resolution did not fail


def _check_kind(real: Path, kind: PathKind, raw: str, error: Refusal) -> None:
    if kind == "any":
        return
    try:
        mode = real.stat().st_mode
    except OSError:
        raise error("path_missing", raw, _HINT_RELATIVE) from None
    if kind == "file" and not stat.S_ISREG(mode):
        raise error("not_a_file", raw, "给出文件，不要给目录 (Name a file, not a folder.)")
    if kind == "dir" and not stat.S_ISDIR(mode):
        raise error("not_a_directory", raw, "给出目录，不要给文件 (Name a folder, not a file.)")


def resolve_artifact(workspace: str | os.PathLike[str] | None, raw: str) -> tuple[str, Path]:
    """(normalised relative path, real absolute path) of an artifact inside the workspace."""
    return resolve_inside(workspace, raw, must_exist=True, kind="file")


def fingerprint(real: Path, display: str) -> tuple[int, str]:
    """(size, sha256) of a regular file, read once through a descriptor opened without following
    a symlink and checked to be the same file as ``real`` was a moment ago."""
    try:
        before = os.stat(real, follow_symlinks=False)
    except FileNotFoundError:
        raise EvidenceError("artifact_missing", display, _HINT_RELATIVE) from None
    if not stat.S_ISREG(before.st_mode):
        raise EvidenceError(
            "not_a_file", display, "提交文件，不要提交目录 (Submit a file, not a folder.)"
        )
    if before.st_size > MAX_ARTIFACT_BYTES:
        raise EvidenceError(
            "artifact_too_large",
            display,
            f"文件超过 {MAX_ARTIFACT_BYTES // (1024 * 1024)} MiB；提交它的摘要文件 "
            f"(Over {MAX_ARTIFACT_BYTES // (1024 * 1024)} MiB; submit a checksum file instead.)",
        )
    try:
        fd = os.open(
            real, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
        )
    except OSError:
        raise EvidenceError("artifact_missing", display, _HINT_RELATIVE) from None
    with os.fdopen(fd, "rb") as handle:
        now = os.fstat(handle.fileno())
        if (now.st_dev, now.st_ino) != (before.st_dev, before.st_ino) or not stat.S_ISREG(
            now.st_mode
        ):
            raise EvidenceError(
                "artifact_missing", display, "文件在读取时被替换 (The file changed.)"
            )
        digest = hashlib.sha256()
        size = 0
        while size <= MAX_ARTIFACT_BYTES and (chunk := handle.read(_CHUNK_BYTES)):
            digest.update(chunk)
            size += len(chunk)
    if size > MAX_ARTIFACT_BYTES:
        raise EvidenceError("artifact_too_large", display, "文件在读取时变大 (The file grew.)")
    return size, digest.hexdigest()


def inspect_artifact(workspace: str | os.PathLike[str] | None, raw: str) -> Artifact:
    """Resolve ``raw`` inside ``workspace`` and fingerprint it, or raise :class:`EvidenceError`."""
    relative, real = resolve_artifact(workspace, raw)
    size, sha256 = fingerprint(real, raw)
    root = workspace_root(workspace)
    return Artifact(relative, real.relative_to(root).as_posix(), size, sha256)


def verify_artifact(
    workspace: str | os.PathLike[str] | None, real_path: str, size: int, sha256: str
) -> Verification:
    """Does the recorded file still hold what was recorded? Never raises."""
    try:
        _, real = resolve_artifact(workspace, real_path)
        if real.stat().st_size > MAX_ARTIFACT_BYTES:
            return "unchecked"
        now = fingerprint(real, real_path)
    except EvidenceError as exc:
        return "missing" if exc.code in ("artifact_missing", "workspace_missing") else "refused"
    except OSError:
        return "missing"
    return "ok" if now == (size, sha256) else "changed"
