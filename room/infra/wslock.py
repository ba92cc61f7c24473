"""The lock a node holds on a project's workspace in a folder the cluster's nodes share
(``workspaces_dir``; docs/cluster.md, "A shared workspaces folder").

The project's lease already lets one node at a time open its turns, and fences their writes
to the database; it does not stop a node paused past its lease from going on in the folder
once it wakes (a command it was waiting on, a file tool between two steps). This lock does:
a node works in a shared workspace only while it holds ``<workspaces_dir>/<project id>.lock``
(``flock``, exclusive, never waited for), taken before a turn or a research run opens and let
go when the node's last one in the project ends. A node that adopted the lease waits (its
work stays ``pending``) while the paused node still holds the lock; the kernel lets go of a
dead process's lock (on NFS, the server once the client's own lease lapses).

The file lies beside the workspace, never in it: no agent of the project can reach it, and it
cannot be taken for a workspace (a workspace is a folder). It is opened without following a
symlink and is closed on exec, so the commands a turn runs never hold it.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from pathlib import Path


def lock_path(folder: Path, project_id: int) -> Path:
    return folder / f"{project_id}.lock"


def try_lock(path: Path) -> int | None:
    """The descriptor holding ``path``'s exclusive lock, or None while another holds it.
    Blocking (a network file system answers in its own time): run it in a worker thread."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return None
        raise
    return fd


def unlock(fd: int) -> None:
    with contextlib.suppress(OSError):
        fcntl.flock(fd, fcntl.LOCK_UN)
    os.close(fd)


class WorkspaceLocks:
    """The shared workspaces' locks one node holds: one descriptor per project, counted, since
    several members' turns of a project (and its research) may run on the node at once."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._held: dict[int, tuple[int, int]] = {}  # project → (descriptor, users)

    def enter(self, project_id: int) -> bool:
        """Hold the project's lock (once more); False when another node holds it."""
        held = self._held.get(project_id)
        if held is not None:
            self._held[project_id] = (held[0], held[1] + 1)
            return True
        fd = try_lock(lock_path(self.folder, project_id))
        if fd is None:
            return False
        self._held[project_id] = (fd, 1)
        return True

    def leave(self, project_id: int) -> None:
        held = self._held.get(project_id)
        if held is None:
            return
        fd, users = held
        if users > 1:
            self._held[project_id] = (fd, users - 1)
            return
        del self._held[project_id]
        unlock(fd)

    def holding(self) -> list[int]:
        return sorted(self._held)

    def close(self) -> None:
        for fd, _ in self._held.values():
            unlock(fd)
        self._held.clear()
