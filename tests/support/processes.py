"""Finding processes on this machine by their command line (read from /proc), to prove that a
command a test started is gone."""

from __future__ import annotations

import os
from pathlib import Path


def running(marker: str) -> list[int]:
    """Pids of live processes (not zombies, not this one) whose command line holds ``marker``
    (arguments are NUL-separated in /proc: ``"sleep\\x00100.5"`` matches ``sleep 100.5``)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if marker.encode() in cmdline and state != "Z":
            found.append(int(entry.name))
    return found
