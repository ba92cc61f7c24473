"""The single-writer lock: ``fcntl.flock(LOCK_EX | LOCK_NB)`` on ``<data>/room.lock``.

``flock`` (not ``lockf``/``fcntl`` record locks, which any close of the same file by the same
process silently drops) is held for the life of the open file description. The holder's pid is
written into the file so that a refused second server can name it.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

from room.errors import LockHeldError


class DataLock:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd: int | None = None

    def acquire(self, wait_secs: float = 0.0) -> None:
        """Take the lock or raise :class:`LockHeldError` naming the holder's pid."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        deadline = time.monotonic() + wait_secs
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    pid = read_holder_pid(self.path)
                    os.close(fd)
                    who = f"pid {pid}" if pid else "another process"
                    raise LockHeldError(
                        f"{self.path.parent} is in use by {who}; stop it first "
                        "(only one server may write a data folder)",
                        pid=pid,
                    ) from None
                time.sleep(0.05)
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        os.fsync(fd)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    @property
    def held(self) -> bool:
        return self._fd is not None


def read_holder_pid(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def is_locked(path: Path) -> bool:
    """Whether some process holds the lock now (used by CLI commands that must not write)."""
    if not path.exists():
        return False
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    else:
        fcntl.flock(fd, fcntl.LOCK_UN)
        return False
    finally:
        os.close(fd)
