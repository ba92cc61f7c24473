"""How much disk a folder an agent writes in takes (its workspace or its worktree), for the
project's disk budget (``workspace_disk_bytes``, docs/agents.md "Limits").

:func:`disk_usage` walks the folder from a descriptor of it — every folder opened relative to
its parent with ``O_NOFOLLOW``, never by path — so a symlink or a folder swapped meanwhile
cannot send the count elsewhere, and counts what the files really take (``st_blocks``: a sparse
file counts what it holds), each inode once (hard links), ``.git`` included. A walk over a huge
tree stops at its deadline and says so (``complete=False``): what it counted is a lower bound.

:class:`DiskMeter` keeps the last count per folder for a few seconds, so a burst of file-tool
writes does not walk the tree each time; a command's watchdog asks for a fresh count.
"""

from __future__ import annotations

import asyncio
import os
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path

WALK_SECS = 2.0  # the longest one count may take
FRESH_SECS = 10.0  # how long a count is reused by the file tools
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True, slots=True)
class Usage:
    bytes: int
    files: int
    complete: bool  # False: the walk stopped at its deadline; ``bytes`` is a lower bound


def disk_usage(root: Path, *, walk_secs: float = WALK_SECS) -> Usage:
    """Bytes on disk under ``root`` (itself included). A folder that cannot be opened counts as
    empty; a missing ``root`` is 0."""
    deadline = time.monotonic() + walk_secs
    try:
        top = os.open(root, _DIR_FLAGS)
    except OSError:
        return Usage(0, 0, True)
    seen: set[tuple[int, int]] = set()
    total = files = 0
    stack = [top]
    complete = True
    try:
        total += os.fstat(top).st_blocks * 512
        while stack:
            if time.monotonic() > deadline:
                complete = False
                break
            fd = stack.pop()
            try:
                with os.scandir(fd) as entries:
                    for entry in entries:
                        try:
                            info = entry.stat(follow_symlinks=False)
                        except OSError:
                            continue
                        if info.st_nlink > 1 and not stat.S_ISDIR(info.st_mode):
                            key = (info.st_dev, info.st_ino)
                            if key in seen:
                                continue
                            seen.add(key)
                        total += info.st_blocks * 512
                        files += 1
                        if stat.S_ISDIR(info.st_mode):
                            try:
                                stack.append(os.open(entry.name, _DIR_FLAGS, dir_fd=fd))
                            except OSError:
                                continue
            finally:
                os.close(fd)
    finally:
        for fd in stack:
            os.close(fd)
    return Usage(total, files, complete)


@dataclass(slots=True)
class DiskMeter:
    """The last count of each folder, reused for :data:`FRESH_SECS` (built once per server)."""

    counts: dict[Path, tuple[float, int]] = field(default_factory=dict)

    async def used(self, root: Path, *, fresh: bool = False) -> int:
        cached = self.counts.get(root)
        if cached is not None and not fresh and time.monotonic() - cached[0] < FRESH_SECS:
            return cached[1]
        usage = await asyncio.to_thread(disk_usage, root)
        self.counts[root] = (time.monotonic(), usage.bytes)
        return usage.bytes

    def add(self, root: Path, size: int) -> None:
        """A write of ``size`` bytes just landed under ``root`` (until the next count)."""
        cached = self.counts.get(root)
        if cached is not None:
            self.counts[root] = (cached[0], cached[1] + size)
