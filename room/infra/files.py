"""Workspace file operations behind the agents' file tools (``fs_list``, ``fs_glob``, ``fs_read``,
``fs_search``, ``fs_write``, ``fs_edit``).

Synchronous on purpose: a tool calls them through ``asyncio.to_thread``. Each takes the
workspace root and workspace-relative paths, and returns a dataclass with ``to_dict()`` (what the
tool hands back as JSON) or raises :class:`~room.errors.FileToolError` (400) whose ``code`` is one
of :data:`FILE_CODES` and whose ``details`` carry the ``path`` and a ``hint`` a model can act on.

Paths obey the same rules as artifact evidence (:func:`room.infra.evidence.clean_relative`): no
``..``, nothing absolute, no NUL or backslash, and a symlink may be followed only when it ends
inside the workspace. Every operation opens the workspace once
(:func:`room.infra.evidence.open_workspace`) and resolves *and opens* its path in one walk from that
descriptor (:mod:`room.infra.fsroot`): what is read, listed, searched or written is the very file or
folder the walk checked, never a name looked up again, so another member's ``shell`` swapping a
folder for a symlink meanwhile cannot send a tool outside the workspace (docs/agents.md, "Where
tools run"). Writing never goes *through* a symlink: ``write``, ``edit`` and ``edit_patch`` refuse a
path whose last component is one, the folders of a new file are made one by one inside the folder
just walked, and nothing is written into ``.git``, however the path gets there. Walks
(:mod:`room.infra.filewalk`) hide ``.git``, never follow symlinks, and — for ``glob`` and ``search``
— leave out what ``.gitignore`` ignores.

Writes are atomic: the new content goes to a temporary file in the same folder (opened
relative to that folder's descriptor), is flushed to disk, takes the old file's permission bits,
and is renamed over the target within that folder — a reader sees the old file or the new one,
never half of either.

Patch format (``edit_patch``): a list of hunks ``{"old": str, "new": str}``, applied in order to
the text as the previous hunks left it; each ``old`` must occur exactly once at that point. If
any hunk fails, nothing is written and the error names the hunk (``details.hunk``, 0-based) and
how many times its ``old`` occurs (``details.count``).
"""

from __future__ import annotations

import errno
import os
import re
import secrets
import stat
import time
from collections.abc import Generator, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, closing, contextmanager, nullcontext
from dataclasses import asdict, dataclass
from typing import Any, Literal

import regex

from room.errors import FileToolError
from room.infra.evidence import PATH_CODES, clean_relative, open_workspace
from room.infra.filewalk import (
    BINARY_SNIFF_BYTES,
    compile_glob,
    hidden,
    ignores_for,
    matching_lines,
    read_text,
    text_of,
    walk,
)
from room.infra.fsroot import Found, Root
from room.infra.perms import new_file_mode

MAX_READ_BYTES = 256 * 1024  # text returned by one read; the model asks for the next lines
MAX_READ_FILE_BYTES = 16 * 1024 * 1024  # a bigger file is not read at all
MAX_WRITE_BYTES = 1024 * 1024
MAX_SEARCH_FILE_BYTES = 2 * 1024 * 1024  # bigger files are skipped by search (counted)
MAX_HIT_LINE_CHARS = 400
MAX_PATTERN_CHARS = 2000
MAX_LIST_DEPTH = 10
MAX_PATCH_HUNKS = 200
LIST_LIMIT = 500
GLOB_LIMIT = 1000
SEARCH_LIMIT = 200
SEARCH_TIMEOUT_SECS = 10.0  # for the whole search: the regex engine stops a runaway pattern

FILE_CODES = {
    **PATH_CODES,
    "binary_file": "二进制文件，无法作为文本处理 (A binary file; it cannot be handled as text.)",
    "not_utf8": "文件不是 UTF-8 文本 (The file is not UTF-8 text.)",
    "file_too_large": "文件太大 (The file is too large.)",
    "content_too_large": "内容太大 (The content is too large.)",
    "is_directory": "这是一个目录 (This is a folder.)",
    "symlink_refused": "不通过符号链接写入 (Writing through a symlink is refused.)",
    "git_metadata": "不能改写 .git 里的内容 (Files inside .git are not written by tools.)",
    "edit_no_match": "要替换的文本没有出现 (The text to replace does not occur.)",
    "edit_ambiguous": "要替换的文本出现了不止一次 (The text to replace occurs more than once.)",
    "bad_patch": "补丁格式不对 (The patch is malformed.)",
    "bad_range": "行号范围不对 (The line range is wrong.)",
    "bad_regex": "正则表达式无效 (The regular expression is invalid.)",
    "bad_argument": "参数不对 (An argument is out of range.)",
    "io_error": "文件系统拒绝了操作 (The file system refused.)",
}

EntryType = Literal["file", "dir", "symlink", "other"]

Workspace = str | os.PathLike[str] | Root
"""Where a file operation works: a workspace folder (opened, resolved, for the one operation),
or a :class:`~room.infra.fsroot.Root` the caller opened its own way (and closes)."""


def _refuse(code: str, path: str, hint: str, **details: Any) -> FileToolError:
    return FileToolError(code, path, hint, FILE_CODES[code], **details)


class _Result:
    def to_dict(self) -> dict[str, Any]:
        return asdict(self)  # type: ignore[call-overload, no-any-return]


@dataclass(frozen=True, slots=True)
class Entry:
    name: str  # relative to the folder listed: ``app.py``, or ``src/app.py`` when deeper
    type: EntryType
    size: int | None  # bytes, for regular files


@dataclass(frozen=True, slots=True)
class Listing(_Result):
    path: str
    entries: list[Entry]
    truncated: bool


@dataclass(frozen=True, slots=True)
class GlobResult(_Result):
    pattern: str
    paths: list[str]
    truncated: bool


@dataclass(frozen=True, slots=True)
class FileText(_Result):
    path: str
    text: str  # lines start_line..end_line, with their line endings
    start_line: int  # 1-based
    end_line: int  # inclusive; start_line - 1 when no line is returned
    total_lines: int
    size_bytes: int
    truncated: bool  # the range was cut at max_bytes; continue from end_line + 1


@dataclass(frozen=True, slots=True)
class Hit:
    path: str
    line: int
    text: str  # the line, cut at MAX_HIT_LINE_CHARS


@dataclass(frozen=True, slots=True)
class SearchResult(_Result):
    pattern: str
    hits: list[Hit]
    truncated: bool  # stopped at the limit (or the timeout): there may be more
    timed_out: bool
    files_searched: int
    files_skipped: int  # binary, not UTF-8, or over max_file_bytes


@dataclass(frozen=True, slots=True)
class WriteResult(_Result):
    path: str
    bytes_written: int
    created: bool


@dataclass(frozen=True, slots=True)
class EditResult(_Result):
    path: str
    bytes_written: int
    lines: list[int]  # where each hunk's replacement starts, in the file as written


# -- reading --------------------------------------------------------------------------------------


def list_dir(root: Workspace, path: str = ".", depth: int = 1, limit: int = LIST_LIMIT) -> Listing:
    """The entries of a folder, ``depth`` levels down, in name order, ``.git`` hidden; symlinks
    are listed as such and not entered."""
    _bounded("depth", depth, 1, MAX_LIST_DEPTH)
    _bounded("limit", limit, 1, None)
    relative = clean_relative(path, allow_root=True, error=_refuse)
    entries: list[Entry] = []
    truncated = False
    with (
        _workspace(root) as ws,
        ws.open(_parts(relative), kind="dir", raw=path, error=_refuse) as folder,
        closing(walk(folder.fd, ".", ignores=None, max_depth=depth)) as found,
    ):
        for rel, entry, _, _ in found:
            if len(entries) >= limit:
                truncated = True
                break
            entries.append(_entry(shown(rel), entry))  # its stat (a file's size) needs the walk
    return Listing(relative, entries, truncated)


def _workspace(root: Workspace) -> AbstractContextManager[Root]:
    if isinstance(root, Root):
        return nullcontext(root)
    return open_workspace(root, error=_refuse)


def _parts(relative: str) -> list[str]:
    return [] if relative == "." else relative.split("/")


def shown(relative: str) -> str:
    """A path found on disk as a tool result gives it. A name that is not UTF-8 comes from the
    file system with lone surrogates (``os.fsdecode``), which no JSON text, message or database
    row can hold: its odd bytes are written ``\\xNN``. Such a path cannot be given back to a
    file tool (backslashes are refused); a command can rename the file."""
    try:
        relative.encode("utf-8")
    except UnicodeEncodeError:
        return os.fsencode(relative).decode("utf-8", "backslashreplace")
    return relative


def _entry(name: str, entry: os.DirEntry[str]) -> Entry:
    if entry.is_symlink():
        return Entry(name, "symlink", None)
    if entry.is_dir(follow_symlinks=False):
        return Entry(name, "dir", None)
    if entry.is_file(follow_symlinks=False):
        try:
            return Entry(name, "file", entry.stat(follow_symlinks=False).st_size)
        except OSError:
            return Entry(name, "file", None)
    return Entry(name, "other", None)


def glob(root: Workspace, pattern: str, limit: int = GLOB_LIMIT) -> GlobResult:
    """Files whose workspace-relative path matches ``pattern`` (see :mod:`room.infra.filewalk`), in
    path order; ``.git``, ignored files and symlinks left out."""
    _bounded("limit", limit, 1, None)
    cleaned = clean_relative(pattern, error=_refuse)
    matcher = compile_glob(cleaned)
    base = _literal_prefix(cleaned)
    if hidden(base):
        return GlobResult(pattern, [], False)
    paths: list[str] = []
    with _workspace(root) as ws:
        try:
            folder = ws.open(_parts(base), kind="dir", raw=base, error=_refuse)
        except FileToolError as exc:
            if exc.code in ("path_missing", "not_a_directory"):
                return GlobResult(pattern, [], False)
            raise
        with folder, closing(walk(folder.fd, base, ignores=ignores_for(ws, base))) as found:
            for rel, entry, _, _ in found:
                if matcher.match(rel) and entry.is_file(follow_symlinks=False):
                    paths.append(shown(rel))
    paths.sort()
    return GlobResult(pattern, paths[:limit], len(paths) > limit)


def _literal_prefix(pattern: str) -> str:
    """The folders at the start of a pattern that hold no wildcard: the walk starts there."""
    parts = pattern.split("/")[:-1]
    literal: list[str] = []
    for part in parts:
        if any(c in part for c in "*?["):
            break
        literal.append(part)
    return "/".join(literal) or "."


def read(
    root: Workspace,
    path: str,
    start_line: int | None = None,
    end_line: int | None = None,
    max_bytes: int = MAX_READ_BYTES,
) -> FileText:
    """Lines ``start_line``..``end_line`` (1-based, inclusive; all by default) of a UTF-8 text
    file, cut after the last whole line that fits in ``max_bytes`` (``truncated``)."""
    _bounded("max_bytes", max_bytes, 1, None)
    relative = clean_relative(path, error=_refuse)
    with (
        _workspace(root) as ws,
        ws.open(relative.split("/"), kind="file", raw=path, error=_refuse) as found,
    ):
        if found.info.st_size > MAX_READ_FILE_BYTES:
            raise _too_large("file_too_large", path, found.info.st_size, MAX_READ_FILE_BYTES)
        data = _read_all(found.fd, MAX_READ_FILE_BYTES, path)
    text = _decode(data, path)
    lines = text.split("\n")
    tail = lines.pop()  # what follows the last newline: "" when the file ends with one
    lines = [line + "\n" for line in lines] + ([tail] if tail else [])
    total = len(lines)
    first = 1 if start_line is None else start_line
    last = total if end_line is None else min(end_line, total)
    if first < 1 or first > max(total, 1) or (end_line is not None and end_line < first):
        raise _refuse(
            "bad_range",
            path,
            f"文件共 {total} 行；start_line 从 1 起，end_line 不小于 start_line "
            f"(The file has {total} lines; start_line counts from 1, end_line ≥ start_line.)",
            total_lines=total,
        )
    out: list[str] = []
    used = 0
    truncated = False
    for number in range(first, last + 1):
        size = len(lines[number - 1].encode("utf-8"))
        if used + size > max_bytes:
            truncated = True
            if not out:  # one line longer than the budget: give its start rather than nothing
                out.append(lines[number - 1].encode("utf-8")[:max_bytes].decode("utf-8", "ignore"))
                last = number
            else:
                last = number - 1
            break
        out.append(lines[number - 1])
        used += size
    return FileText(relative, "".join(out), first, last, total, len(data), truncated)


def _read_all(fd: int, limit: int, display: str) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while chunk := os.read(fd, 1024 * 1024):
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            raise _too_large("file_too_large", display, size, limit)
    return b"".join(chunks)


def _decode(data: bytes, display: str) -> str:
    if b"\x00" in data:
        raise _refuse(
            "binary_file", display, "这不是文本文件；读别的文件 (Not a text file; read another.)"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        sniff = data[:BINARY_SNIFF_BYTES]
        controls = sum(1 for b in sniff if b < 9 or 13 < b < 32)
        if controls * 10 > len(sniff):  # mostly control bytes: not text in any encoding
            raise _refuse(
                "binary_file",
                display,
                "这不是文本文件；读别的文件 (Not a text file; read another.)",
            ) from None
        raise _refuse(
            "not_utf8",
            display,
            f"第 {exc.start} 字节不是 UTF-8；文件可能是 GBK 或 Latin-1，先用 iconv 转成 UTF-8 "
            f"(Byte {exc.start} is not UTF-8; the file may be GBK or Latin-1: convert it to "
            "UTF-8 first, e.g. with iconv.)",
            offset=exc.start,
        ) from None


def search(
    root: Workspace,
    pattern: str,
    path: str = ".",
    glob: str | None = None,
    limit: int = SEARCH_LIMIT,
    max_file_bytes: int = MAX_SEARCH_FILE_BYTES,
    timeout_secs: float = SEARCH_TIMEOUT_SECS,
) -> SearchResult:
    """Lines matching the regular expression ``pattern`` (the ``regex`` package, ``MULTILINE``:
    ``^``/``$`` are line ends; a match spanning lines is reported at its first line), under
    ``path`` (a folder or one file), in walk order, one hit per line, at most ``limit``.

    ``glob`` narrows the files: with a ``/`` it matches the workspace-relative path, without one
    the file name (``*.py``). Skipped and counted: binary files, files that are not UTF-8, files
    over ``max_file_bytes``. ``.git``, ignored files and symlinks are never opened. The whole
    search stops after ``timeout_secs`` (``timed_out``, with the hits found so far)."""
    _bounded("limit", limit, 1, None)
    _bounded("max_file_bytes", max_file_bytes, 1, None)
    if len(pattern) > MAX_PATTERN_CHARS:
        raise _refuse(
            "bad_regex",
            pattern[:80],
            f"正则太长 (Keep the pattern under {MAX_PATTERN_CHARS} characters.)",
        )
    try:
        compiled = regex.compile(pattern, regex.MULTILINE | regex.VERSION0)
    except (regex.error, ValueError, OverflowError) as exc:
        raise _refuse("bad_regex", pattern[:200], f"{exc} (Fix the regular expression.)") from None
    name_only = glob is not None and "/" not in glob
    matcher = None if glob is None else compile_glob(clean_relative(glob, error=_refuse))
    relative = clean_relative(path, allow_root=True, error=_refuse)
    deadline = time.monotonic() + timeout_secs
    hits: list[Hit] = []
    searched = skipped = 0
    truncated = timed_out = False
    with (
        _workspace(root) as ws,
        ws.open(_parts(relative), kind="any", raw=path, error=_refuse) as found,
        closing(_texts(ws, relative, found, matcher, name_only, max_file_bytes)) as texts,
    ):
        for rel, text in texts:
            if text is None:
                skipped += 1
                continue
            searched += 1
            try:
                for line, content in matching_lines(compiled, text, deadline):
                    if len(hits) >= limit:
                        truncated = True
                        break
                    if len(content) > MAX_HIT_LINE_CHARS:
                        content = content[:MAX_HIT_LINE_CHARS] + "…"
                    hits.append(Hit(shown(rel), line, content))
            except TimeoutError:
                timed_out = truncated = True
            if truncated:
                break
    return SearchResult(pattern, hits, truncated, timed_out, searched, skipped)


def _texts(
    ws: Root,
    relative: str,
    found: Found,
    matcher: re.Pattern[str] | None,
    name_only: bool,
    max_bytes: int,
) -> Generator[tuple[str, str | None], None, None]:
    """``(path, text or None when skipped)`` of each file ``search`` looks at, in walk order:
    read by name in the folder the walk holds, so nothing is opened outside the workspace."""
    if hidden(relative) or hidden("/".join(found.real)):
        return

    def wanted(rel: str) -> bool:
        return matcher is None or bool(matcher.match(rel.rpartition("/")[2] if name_only else rel))

    if not found.is_dir:  # named by itself: searched even where .gitignore would skip it
        if wanted(relative):
            yield relative, text_of(found.fd, max_bytes)
        return
    with closing(walk(found.fd, relative, ignores=ignores_for(ws, relative))) as entries:
        for rel, entry, _, folder in entries:
            # the type from the folder listing: no extra stat
            if entry.is_file(follow_symlinks=False) and wanted(rel):
                yield rel, read_text(folder, entry.name, max_bytes)


# -- writing --------------------------------------------------------------------------------------


def write(
    root: Workspace, path: str, content: str, max_bytes: int = MAX_WRITE_BYTES
) -> WriteResult:
    """Create or replace the regular file ``path`` with ``content`` (UTF-8), creating its
    folders inside the workspace; atomic. Refuses content over ``max_bytes`` before touching
    the disk, and a path that is a folder, a symlink or anything but a regular file."""
    data = _encode(content, path)
    if len(data) > max_bytes:
        raise _too_large("content_too_large", path, len(data), max_bytes)
    relative, parent, name = _target(path)
    with _workspace(root) as ws, _folder(ws, parent, path, create=True) as dir_fd:
        existing = _existing(dir_fd, name, path, must_exist=False)
        _replace(dir_fd, name, data, existing, path)
    return WriteResult(relative, len(data), existing is None)


def edit(
    root: Workspace, path: str, old: str, new: str, max_bytes: int = MAX_WRITE_BYTES
) -> EditResult:
    """Replace the one occurrence of ``old`` in a UTF-8 text file with ``new``; atomic. Refused
    (``edit_no_match`` / ``edit_ambiguous``, ``details.count``) unless ``old`` occurs exactly
    once."""
    return _edit(root, path, [(old, new)], max_bytes, single=True)


def edit_patch(
    root: Workspace,
    path: str,
    hunks: Sequence[Mapping[str, Any]],
    max_bytes: int = MAX_WRITE_BYTES,
) -> EditResult:
    """Apply ``hunks`` (``[{"old": ..., "new": ...}, ...]``, see the module docstring) in order,
    all or nothing; atomic."""
    if not isinstance(hunks, list | tuple) or not hunks:  # what a tool's JSON arguments hold
        raise _refuse(
            "bad_patch",
            path,
            'patch 是 [{"old": …, "new": …}] 列表 (The patch is a non-empty list of {"old", "new"}.)',
        )
    if len(hunks) > MAX_PATCH_HUNKS:
        raise _refuse(
            "bad_patch",
            path,
            f"最多 {MAX_PATCH_HUNKS} 段 (At most {MAX_PATCH_HUNKS} hunks; split the patch.)",
        )
    pairs: list[tuple[str, str]] = []
    for index, hunk in enumerate(hunks):
        old = hunk.get("old") if isinstance(hunk, Mapping) else None
        new = hunk.get("new") if isinstance(hunk, Mapping) else None
        if not isinstance(old, str) or not isinstance(new, str) or set(hunk) - {"old", "new"}:
            raise _refuse(
                "bad_patch",
                path,
                f'第 {index} 段应为 {{"old": 文本, "new": 文本}} (Hunk {index} must be {{"old": str, "new": str}}.)',
                hunk=index,
            )
        pairs.append((old, new))
    return _edit(root, path, pairs, max_bytes, single=False)


def _edit(
    root: Workspace,
    path: str,
    pairs: list[tuple[str, str]],
    max_bytes: int,
    *,
    single: bool,
) -> EditResult:
    relative, parent, name = _target(path)
    with _workspace(root) as ws, _folder(ws, parent, path, create=False) as dir_fd:
        existing = _existing(dir_fd, name, path, must_exist=True)
        assert existing is not None
        if existing.st_size > max_bytes:
            raise _too_large("file_too_large", path, existing.st_size, max_bytes)
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
        except OSError as exc:
            raise _io_error(exc, path) from None
        try:
            text = _decode(_read_all(fd, max_bytes, path), path)
        finally:
            os.close(fd)
        text, lines = _apply(text, pairs, path, single=single)
        data = _encode(text, path)
        if len(data) > max_bytes:
            raise _too_large("content_too_large", path, len(data), max_bytes)
        _replace(dir_fd, name, data, existing, path)
    return EditResult(relative, len(data), lines)


def _apply(
    text: str, pairs: list[tuple[str, str]], display: str, *, single: bool
) -> tuple[str, list[int]]:
    starts: list[int] = []
    for index, (old, new) in enumerate(pairs):
        which = "" if single else f"hunk {index}: "
        if not old:
            raise _refuse(
                "bad_patch" if not single else "bad_argument",
                display,
                f"{which}old 不能为空 (old must not be empty; to write a whole file use write.)",
                **({} if single else {"hunk": index}),
            )
        count = text.count(old)
        if count != 1:
            details: dict[str, Any] = {"count": count}
            if not single:
                details["hunk"] = index
            raise _refuse(
                "edit_no_match" if count == 0 else "edit_ambiguous",
                display,
                f"{which}old 出现 {count} 次，必须恰好 1 次；"
                + ("先读文件，照抄原文（含空白和缩进） " if count == 0 else "加上前后几行让它唯一 ")
                + f"(old occurs {count} times; it must occur exactly once: "
                + (
                    "read the file and copy the text exactly, whitespace included.)"
                    if count == 0
                    else "include surrounding lines to make it unique.)"
                ),
                **details,
            )
        at = text.index(old)
        text = text[:at] + new + text[at + len(old) :]
        starts = [s + len(new) - len(old) if s > at else s for s in starts] + [at]
    return text, [text.count("\n", 0, s) + 1 for s in starts]


def _target(path: str) -> tuple[str, list[str], str]:
    """(relative path, its folder's names, file name) of a file to write. The name itself is not
    resolved, so a symlink there is seen, and refused, rather than followed."""
    relative = clean_relative(path, error=_refuse)
    if ".git" in relative.split("/"):
        raise _git_metadata(path)
    parent, _, name = relative.rpartition("/")
    return relative, _parts(parent or "."), name


def _git_metadata(path: str) -> FileToolError:
    # A repository's configuration and hooks decide what the server's own git runs.
    return _refuse(
        "git_metadata", path, "用 shell 里的 git 命令管理仓库 (Use git commands in shell.)"
    )


@contextmanager
def _folder(ws: Root, parent: list[str], display: str, *, create: bool) -> Iterator[int]:
    """The descriptor of the folder a file is written in, walked to from the workspace's (and
    made on the way when ``create``). A folder that is really inside ``.git`` — reached through
    a symlink — is refused like a path that names it: looked up before any folder is made, and
    checked again on the folder actually opened."""
    if create and ".git" in ws.locate(parent, kind="dir", raw=display, error=_refuse):
        raise _git_metadata(display)
    with ws.folder(parent, create=create, raw=display, error=_refuse) as found:
        if ".git" in found.real:
            raise _git_metadata(display)
        yield found.fd


def _existing(dir_fd: int, name: str, display: str, *, must_exist: bool) -> os.stat_result | None:
    try:
        info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        if must_exist:
            raise _refuse(
                "path_missing", display, "先用 write 创建文件 (Create the file with write first.)"
            ) from None
        return None
    except OSError as exc:
        raise _io_error(exc, display) from None
    if stat.S_ISLNK(info.st_mode):
        raise _refuse(
            "symlink_refused",
            display,
            "这是符号链接；写它指向的路径 (It is a symlink; write to the path it points to.)",
        )
    if stat.S_ISDIR(info.st_mode):
        raise _refuse(
            "is_directory", display, "这是目录；在它里面写文件 (A folder; write a file inside it.)"
        )
    if not stat.S_ISREG(info.st_mode):
        raise _refuse("not_a_file", display, "只写普通文件 (Only regular files are written.)")
    return info


def _replace(
    dir_fd: int, name: str, data: bytes, existing: os.stat_result | None, display: str
) -> None:
    temp = f".{name[:32]}.{secrets.token_hex(6)}.tmp"
    try:
        fd = os.open(
            temp,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
            new_file_mode(),  # as under the operator's umask, like any new file of theirs
            dir_fd=dir_fd,
        )
    except OSError as exc:
        raise _io_error(exc, display) from None
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            if existing is not None:
                os.fchmod(fd, stat.S_IMODE(existing.st_mode))
            os.fsync(fd)
        finally:
            os.close(fd)
        # rename() replaces the name itself: a symlink planted there meanwhile is replaced, not
        # followed, and a folder planted there makes it fail.
        os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException as exc:
        try:
            os.unlink(temp, dir_fd=dir_fd)
        except OSError:
            pass
        if isinstance(exc, IsADirectoryError):
            raise _refuse(
                "is_directory", display, "这是目录 (A folder; write a file inside it.)"
            ) from None
        if isinstance(exc, OSError):
            raise _io_error(exc, display) from None
        raise
    os.fsync(dir_fd)  # the rename itself survives a crash


# -- shared ---------------------------------------------------------------------------------------


def _encode(content: str, display: str) -> bytes:
    if not isinstance(content, str):
        raise _refuse("bad_argument", display, "content 必须是文本 (content must be a string.)")
    try:
        return content.encode("utf-8")
    except UnicodeEncodeError:
        raise _refuse(
            "bad_argument", display, "内容含有无效字符 (The content has invalid characters.)"
        ) from None


def _bounded(name: str, value: int, low: int, high: int | None) -> None:
    if not isinstance(value, int) or value < low or (high is not None and value > high):
        bounds = f"{low}..{high}" if high is not None else f"≥ {low}"
        raise _refuse("bad_argument", name, f"{name} 应在 {bounds} ({name} must be {bounds}.)")


def _too_large(code: str, display: str, size: int, limit: int) -> FileToolError:
    return _refuse(
        code,
        display,
        f"{size} 字节，上限 {limit} 字节 ({size} bytes; the limit is {limit} bytes"
        + (
            "; read a line range or search instead.)"
            if code == "file_too_large"
            else "; write less at a time.)"
        ),
        size_bytes=size,
        limit_bytes=limit,
    )


def _io_error(exc: OSError, display: str) -> FileToolError:
    if isinstance(exc, FileNotFoundError):
        return _refuse("path_missing", display, "它刚刚被删除了 (It was removed meanwhile.)")
    if exc.errno == errno.ELOOP:  # ELOOP: O_NOFOLLOW met a symlink planted meanwhile
        return _refuse(
            "symlink_refused", display, "路径变成了符号链接 (The path became a symlink.)"
        )
    return _refuse(
        "io_error",
        display,
        f"{exc.strerror or exc} (The file system refused; check permissions and free space.)",
    )
