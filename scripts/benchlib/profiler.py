"""Optional sampling profile of the server while a workload runs (``scripts/bench --profile``).

``py-spy record --format raw`` attaches to the server's pid (all threads)
for the measured phase and writes collapsed stacks; :func:`summary` turns them into the top
functions by self time and by inclusive time, so the report names hot spots without a viewer.
py-spy is found on ``PATH`` or through ``$PY_SPY``; without it profiling is skipped with a note.
The profiler itself runs on the generator's core.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
from collections import Counter
from pathlib import Path

from benchlib.cores import GENERATOR_CPU

RATE_HZ = 500
_LINE = re.compile(r"^(.*) (\d+)$")
_FRAME = re.compile(r"^(?P<func>.+?) \((?P<file>[^():]+)(?::\d+)?\)$")


def py_spy() -> str | None:
    return os.environ.get("PY_SPY") or shutil.which("py-spy")


class Profile:
    """``with Profile(pid, out):`` records the server while the block runs."""

    def __init__(self, pid: int, out: Path, *, native: bool = False) -> None:
        self.pid, self.out, self.native = pid, out, native
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Profile:
        exe = py_spy()
        if exe is None:
            return self
        self.out.parent.mkdir(parents=True, exist_ok=True)
        argv = [exe, "record", "--pid", str(self.pid), "--rate", str(RATE_HZ), "--format", "raw"]
        argv += ["--output", str(self.out), "--threads"]
        argv += ["--native"] if self.native else ["--nonblocking"]
        self.proc = subprocess.Popen(
            argv,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=lambda: os.sched_setaffinity(0, {GENERATOR_CPU}),
        )
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc is None:
            return
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _short(frame: str) -> str:
    found = _FRAME.match(frame.strip())
    if not found:
        return frame.strip()
    path = found.group("file")
    for marker in ("site-packages/", "/room/", "lib/python3"):
        if marker in path:
            path = path.split(marker, 1)[1]
            break
    return f"{found.group('func')} ({path})"


def summary(path: Path, top: int = 25) -> str:
    """Per thread: the top functions by self and by inclusive share of that thread's samples.

    Idle samples (a thread blocked in ``epoll_wait``, a queue or the GIL) are not recorded by
    py-spy, so a thread's sample count is proportional to the CPU it used.
    """
    if not path.exists():
        return f"(no profile at {path})"
    threads: dict[str, tuple[Counter[str], Counter[str]]] = {}
    totals: Counter[str] = Counter()
    for line in path.read_text(errors="replace").splitlines():
        found = _LINE.match(line)
        if not found:
            continue
        stack, count = found.group(1), int(found.group(2))
        parts = stack.split(";")
        thread = parts[0].split(": ", 1)[-1] if parts[0].startswith("thread ") else "?"
        if thread.startswith("room-reader"):
            thread = "room-reader-*"
        frames = [_short(f) for f in parts[1:] if f and not f.startswith("process ")]
        if not frames:
            continue
        self_time, inclusive = threads.setdefault(thread, (Counter(), Counter()))
        totals[thread] += count
        self_time[frames[-1]] += count
        for frame in set(frames):
            inclusive[frame] += count
    if not totals:
        return "(empty profile)"
    lines = [f"{sum(totals.values())} samples at {RATE_HZ} Hz (busy threads only)"]
    for thread, total in totals.most_common():
        self_time, inclusive = threads[thread]
        lines.append(f"== thread {thread}: {total} samples ({total / RATE_HZ:.1f} CPU-s)")
        lines.append("  self %  function")
        lines += [f"  {100 * n / total:6.1f}  {f}" for f, n in self_time.most_common(top)]
        lines.append("  incl %  function")
        lines += [f"  {100 * n / total:6.1f}  {f}" for f, n in inclusive.most_common(top)]
    return "\n".join(lines)
