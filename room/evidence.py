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

Only this module reads the workspace. It does no other I/O and reads no clock. Every refusal is
an :class:`EvidenceError` (400) whose ``code`` says which rule, with a hint of what to do.
"""

from __future__ import annotations

import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Literal

from room.errors import BadRequestError

MAX_ARTIFACT_BYTES = 256 * 1024 * 1024  # hashing is streamed; this bounds the time it takes
MAX_PATH_CHARS = 1024
_CHUNK_BYTES = 1024 * 1024

EVIDENCE_CODES = {
    "no_workspace": "项目没有设置工作区 (The project has no workspace.)",
    "workspace_missing": "工作区目录不存在 (The workspace folder does not exist.)",
    "bad_path": "路径为空、过长或含有不允许的字符 (The path is empty, too long or has a bad character.)",
    "absolute_path": "不接受绝对路径 (Absolute paths are refused.)",
    "path_escapes": "路径含有 .. (The path contains '..'.)",
    "outside_workspace": "路径解析后位于工作区之外 (The path resolves outside the workspace.)",
    "artifact_missing": "文件不存在 (The file does not exist.)",
    "not_a_file": "不是普通文件 (Not a regular file.)",
    "artifact_too_large": "文件太大，无法计算摘要 (The file is too large to fingerprint.)",
}


class EvidenceError(BadRequestError):
    """An artifact path was refused; ``code`` is one of :data:`EVIDENCE_CODES`."""

    code = "bad_evidence"

    def __init__(self, code: str, path: str, hint: str) -> None:
        super().__init__(
            f"{EVIDENCE_CODES[code]}：{path[:200]}", code=code, path=path[:200], hint=hint
        )


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


def clean_relative(raw: str) -> str:
    """The normalised relative form of ``raw`` (``./a//b`` → ``a/b``) or :class:`EvidenceError`."""
    if not raw or not raw.strip() or len(raw) > MAX_PATH_CHARS or "\x00" in raw:
        raise EvidenceError("bad_path", raw, _HINT_RELATIVE)
    if "\\" in raw:
        raise EvidenceError("bad_path", raw, "用 / 分隔目录 (Separate folders with '/'.)")
    if raw.startswith("/") or PureWindowsPath(raw).is_absolute() or PureWindowsPath(raw).drive:
        raise EvidenceError("absolute_path", raw, _HINT_RELATIVE)
    parts = [p for p in PurePosixPath(raw).parts if p != "."]
    if ".." in parts:
        raise EvidenceError(
            "path_escapes",
            raw,
            "去掉 ..，从工作区根目录写起 (Drop '..'; start at the workspace root.)",
        )
    if not parts:
        raise EvidenceError("bad_path", raw, _HINT_RELATIVE)
    return "/".join(parts)


def workspace_root(workspace: str | os.PathLike[str] | None) -> Path:
    """The workspace's own resolved path (symlinks followed), or :class:`EvidenceError`."""
    if workspace is None or not str(workspace).strip():
        raise EvidenceError(
            "no_workspace", "", "创建项目时设置 workspace (Set a workspace for the project.)"
        )
    try:
        root = Path(workspace).resolve(strict=True)
    except (OSError, RuntimeError):
        raise EvidenceError(
            "workspace_missing", str(workspace), "请先创建工作区目录 (Create the workspace folder.)"
        ) from None
    if not root.is_dir():
        raise EvidenceError(
            "workspace_missing",
            str(workspace),
            "工作区必须是目录 (The workspace must be a folder.)",
        )
    return root


def resolve_artifact(workspace: str | os.PathLike[str] | None, raw: str) -> tuple[str, Path]:
    """(normalised relative path, real absolute path) of an artifact inside the workspace."""
    relative = clean_relative(raw)
    root = workspace_root(workspace)
    try:
        real = (root / relative).resolve(strict=True)
    except FileNotFoundError:
        raise EvidenceError(
            "artifact_missing",
            raw,
            "先把文件写进工作区，再提交 (Write the file first, then submit.)",
        ) from None
    except (OSError, RuntimeError):  # a symlink loop, a path component that is a file …
        raise EvidenceError("artifact_missing", raw, _HINT_RELATIVE) from None
    if not real.is_relative_to(root):
        raise EvidenceError(
            "outside_workspace",
            raw,
            "只能提交工作区内的文件；不要用指向外部的符号链接 "
            "(Only files inside the workspace; no symlinks pointing outside.)",
        )
    return relative, real


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
