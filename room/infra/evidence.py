"""Artifact evidence: a workspace-relative path resolved by the server, and its fingerprint.

An agent (or a person) names a file by a path relative to the project's workspace; the server —
never the model — decides what that path means and records what the file really is:

* refused before touching the disk: an empty path, NUL, a backslash, an absolute path (``/x``,
  ``C:/x``, ``//host/x``), and any ``..`` component (even one that would come back inside:
  evidence paths have one spelling);
* resolved and opened in one walk from the workspace's descriptor (:mod:`room.infra.fsroot`): every
  symlink on the way is followed only while it stays inside the workspace, so a symlink that
  points outside is refused even when the link itself sits inside — and a folder swapped for
  such a link while the path is read cannot redirect the read, because nothing is opened by an
  absolute name;
* it must be a regular file (not a directory, FIFO or device, which could block a read: those are
  refused without being opened); the descriptor the walk opened is the one read, once, to take
  its size and SHA-256.

The same rules resolve the paths of the file tools (:mod:`room.infra.files`) through
:func:`open_workspace` and :func:`resolve_inside`, which raise the error their caller names
(:class:`EvidenceError` here, ``FileToolError`` there). This module reads no clock. Every refusal
is an :class:`EvidenceError` (400) whose ``code`` says which rule, with a hint of what to do.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Literal

from room.errors import WorkspacePathError
from room.infra.fsroot import (
    HINT_RELATIVE,
    Found,
    PathKind,
    Refusal,
    Root,
    open_root,
)

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


def clean_relative(raw: str, *, allow_root: bool = False, error: Refusal = EvidenceError) -> str:
    """The normalised relative form of ``raw`` (``./a//b`` → ``a/b``) or ``error``.

    With ``allow_root``, ``.`` (or ``./``) names the workspace itself and comes back as ``.``."""
    if not raw or not raw.strip() or len(raw) > MAX_PATH_CHARS or "\x00" in raw:
        raise error("bad_path", raw, HINT_RELATIVE)
    if "\\" in raw:
        raise error("bad_path", raw, "用 / 分隔目录 (Separate folders with '/'.)")
    if raw.startswith("/") or PureWindowsPath(raw).is_absolute() or PureWindowsPath(raw).drive:
        raise error("absolute_path", raw, HINT_RELATIVE)
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
        raise error("bad_path", raw, HINT_RELATIVE)
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


def open_workspace(
    workspace: str | os.PathLike[str] | None, *, error: Refusal = EvidenceError
) -> Root:
    """The workspace opened as a :class:`~room.infra.fsroot.Root` (the caller closes it), or
    ``error``. Every path a tool or an artifact names is walked from this descriptor."""
    root = workspace_root(workspace, error=error)
    assert workspace is not None
    try:
        return open_root(root, given=os.fspath(workspace))
    except OSError:  # a component became a symlink, or went away, since it was resolved
        raise error(
            "workspace_missing",
            str(workspace),
            "工作区目录刚刚被移动或替换 (The workspace folder was moved or replaced meanwhile.)",
        ) from None


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

    ``kind`` is what an existing path must be (``file``: a regular file, ``dir``: a folder;
    ``any``: either); the workspace itself (``.``) is accepted unless ``kind`` is ``file``. With
    ``must_exist`` false, a path whose tail does not exist yet is accepted: its existing part is
    walked by the same rules (a dangling symlink must lead inside as well) and the missing names
    are appended to it, so creating them creates nothing outside.

    The answer is a *name*, true when it was computed: whoever opens it later by that name can
    be raced (a folder on the way swapped for a symlink). The file tools and artifacts do not
    use it; they open what they read through :func:`open_workspace` in the same walk."""
    relative = clean_relative(raw, allow_root=kind != "file", error=error)
    parts = [] if relative == "." else relative.split("/")
    with open_workspace(workspace, error=error) as root:
        if must_exist:
            with root.open(parts, kind=kind, raw=raw, error=error) as found:
                real = found.real
        else:
            real = root.locate(parts, kind=kind, raw=raw, error=error)
        return relative, root.path.joinpath(*real)


def fingerprint(found: Found, display: str) -> tuple[int, str]:
    """(size, sha256) of the regular file ``found`` holds open, read once from that descriptor
    (the very file the walk checked: no name is looked up again)."""
    if found.info.st_size > MAX_ARTIFACT_BYTES:
        raise EvidenceError(
            "artifact_too_large",
            display,
            f"文件超过 {MAX_ARTIFACT_BYTES // (1024 * 1024)} MiB；提交它的摘要文件 "
            f"(Over {MAX_ARTIFACT_BYTES // (1024 * 1024)} MiB; submit a checksum file instead.)",
        )
    digest = hashlib.sha256()
    size = 0
    while size <= MAX_ARTIFACT_BYTES and (chunk := os.read(found.fd, _CHUNK_BYTES)):
        digest.update(chunk)
        size += len(chunk)
    if size > MAX_ARTIFACT_BYTES:
        raise EvidenceError("artifact_too_large", display, "文件在读取时变大 (The file grew.)")
    return size, digest.hexdigest()


def inspect_artifact(workspace: str | os.PathLike[str] | None, raw: str) -> Artifact:
    """Resolve ``raw`` inside ``workspace`` and fingerprint it, or raise :class:`EvidenceError`."""
    relative = clean_relative(raw)  # a bad path is refused before the workspace is looked at
    with (
        open_workspace(workspace) as root,
        root.open(relative.split("/"), kind="file", raw=raw, error=EvidenceError) as found,
    ):
        size, sha256 = fingerprint(found, raw)
    return Artifact(relative, "/".join(found.real), size, sha256)


def verify_artifact(
    workspace: str | os.PathLike[str] | None, real_path: str, size: int, sha256: str
) -> Verification:
    """Does the recorded file still hold what was recorded? Never raises."""
    try:
        relative = clean_relative(real_path)
        with (
            open_workspace(workspace) as root,
            root.open(
                relative.split("/"), kind="file", raw=real_path, error=EvidenceError
            ) as found,
        ):
            if found.info.st_size > MAX_ARTIFACT_BYTES:
                return "unchecked"
            now = fingerprint(found, real_path)
    except EvidenceError as exc:
        return "missing" if exc.code in ("artifact_missing", "workspace_missing") else "refused"
    except OSError:
        return "missing"
    return "ok" if now == (size, sha256) else "changed"
