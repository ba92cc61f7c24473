"""Who may read the data folder: its owner only.

The data folder holds every conversation, token hash and memory record. The server makes it
0700 and its database 0600, tightens them at start when an older release left them wider, and
``room doctor`` warns when they are wider still; a command of the CLI (``room serve`` included)
runs under umask 077, so everything it creates there is its owner's alone.

What agents and git create in a *workspace* is the project's work, not the server's records:
those processes get the umask the operator started the server with (:func:`workspace_umask`),
as if the operator had run them.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

PRIVATE_UMASK = 0o077
FOLDER_MODE = 0o700
FILE_MODE = 0o600

_operator_umask: int | None = None


def keep_private() -> None:
    """Run this process under umask 077 from here on, remembering the operator's (once)."""
    global _operator_umask
    previous = os.umask(PRIVATE_UMASK)
    if _operator_umask is None:
        _operator_umask = previous


def workspace_umask() -> int:
    """The umask for a process that writes a workspace: the operator's, or -1 (inherit the
    current one, :class:`subprocess.Popen`'s default) when :func:`keep_private` never ran."""
    return -1 if _operator_umask is None else _operator_umask


def new_file_mode() -> int:
    """The mode a new file in a workspace gets, as under the operator's umask."""
    return 0o666 if _operator_umask is None else 0o666 & ~_operator_umask


def private_paths(data: Path) -> list[tuple[Path, int]]:
    """The data folder (0700) and the files directly in it — the database, its journals, the
    search index, the reports — (0600), each with the widest mode it may have. What lies deeper
    is out of reach once the folder is 0700."""
    found: list[tuple[Path, int]] = [(data, FOLDER_MODE)]
    try:
        entries = sorted(data.iterdir())
    except FileNotFoundError:
        return []
    for entry in entries:
        if entry.is_file() and not entry.is_symlink():
            found.append((entry, FILE_MODE))
    return found


def too_wide(path: Path, allowed: int) -> int | None:
    """``path``'s permission bits when they grant more than ``allowed``; None when they do
    not, or when there is no such file. Never follows a symlink."""
    try:
        mode = stat.S_IMODE(os.lstat(path).st_mode)
    except FileNotFoundError:
        return None
    return mode if mode & ~allowed else None


def tighten(paths: list[tuple[Path, int]]) -> list[str]:
    """Narrow each existing path to its allowed mode; what was changed, as ``path 0755 → 0700``
    lines (a symlink is left alone: its mode means nothing)."""
    changed = []
    for path, allowed in paths:
        mode = too_wide(path, allowed)
        if mode is None or path.is_symlink():
            continue
        os.chmod(path, mode & allowed)
        changed.append(f"{path} {mode:04o} → {mode & allowed:04o}")
    return changed
