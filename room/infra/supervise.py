"""Running a built command line to its end, within bounds: a pids cgroup of its own (made and
removed here; the command line joins it before anything of it can fork, :func:`joining`),
the wall clock and a ``cancel`` event (SIGTERM to every process of the command, SIGKILL after
:data:`KILL_GRACE_SECS`), nothing left behind, and the output captured in bounded memory.

:mod:`room.infra.sandbox` decides what runs and how it is jailed; this module only supervises.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import secrets
import signal
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from room.errors import SandboxSpawnError
from room.infra.perms import workspace_umask

log = logging.getLogger(__name__)

COMMAND_TIMEOUT_SECS = 120.0  # wall clock, from start to the last process gone
CPU_SECS = 60  # RLIMIT_CPU of each process: SIGXCPU when spent
MEMORY_BYTES = 2 * 1024**3  # RLIMIT_AS of each process
PROCESSES = 256  # pids.max of the command's cgroup (RLIMIT_NPROC without one)
FILE_BYTES = 1024**3  # RLIMIT_FSIZE: the largest file a command may write
OUTPUT_BYTES = 64 * 1024  # combined stdout+stderr kept: half head, half tail
TAIL_BYTES = 2 * 1024  # the short tail kept for evidence records
KILL_GRACE_SECS = 0.5  # between SIGTERM and SIGKILL
_DRAIN_SECS = 1.0  # to read what is left in the pipe once every process is gone
_READ_BYTES = 64 * 1024

Killed = Literal["timeout", "stopped"] | str  # or a signal name: "SIGKILL", "SIGXCPU" …


@dataclass(frozen=True, slots=True)
class CommandLimits:
    timeout_secs: float = COMMAND_TIMEOUT_SECS
    cpu_secs: int = CPU_SECS
    memory_bytes: int = MEMORY_BYTES
    processes: int = PROCESSES
    file_bytes: int = FILE_BYTES
    output_bytes: int = OUTPUT_BYTES

    def __post_init__(self) -> None:
        for name in ("timeout_secs", "cpu_secs", "memory_bytes", "processes", "file_bytes"):
            if getattr(self, name) <= 0:
                raise ValueError(f"CommandLimits.{name} must be positive")
        if self.output_bytes < 2:
            raise ValueError("CommandLimits.output_bytes must be at least 2")


@dataclass(frozen=True, slots=True)
class CommandResult:
    """What a command did. ``exit_code`` is None when it was killed (``killed`` says how)."""

    exit_code: int | None
    output: str  # stdout+stderr interleaved; head and tail with a marker when over the cap
    output_bytes: int  # everything the command wrote, kept or not
    truncated_bytes: int
    output_sha256: str  # of everything the command wrote
    tail: str  # the last TAIL_BYTES, for evidence records
    duration_secs: float
    timed_out: bool
    killed: Killed | None
    sandboxed: bool

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


@dataclass(slots=True)
class _Capture:
    """Head, tail, size and SHA-256 of a stream, in bounded memory."""

    cap: int
    head: bytearray = field(default_factory=bytearray)
    tail: deque[bytes] = field(default_factory=deque)
    tail_len: int = 0
    total: int = 0
    digest: hashlib._Hash = field(default_factory=hashlib.sha256)

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        self.digest.update(chunk)
        room_left = self.cap // 2 - len(self.head)
        if room_left > 0:
            self.head += chunk[:room_left]
            chunk = chunk[room_left:]
        if chunk:
            self.tail.append(chunk)
            self.tail_len += len(chunk)
            keep = max(self.cap - self.cap // 2, TAIL_BYTES)
            while self.tail and self.tail_len - len(self.tail[0]) >= keep:
                self.tail_len -= len(self.tail.popleft())

    def render(self) -> tuple[str, int, str]:
        """(output, truncated bytes, evidence tail)."""
        rest = b"".join(self.tail)
        whole = bytes(self.head) + rest
        tail = whole[-TAIL_BYTES:].decode("utf-8", "replace")
        if self.total <= self.cap:
            return whole.decode("utf-8", "replace"), 0, tail
        keep_tail = rest[-(self.cap - self.cap // 2) :]
        dropped = self.total - len(self.head) - len(keep_tail)
        text = (
            self.head.decode("utf-8", "replace")
            + f"\n…[truncated {dropped} bytes]…\n"
            + keep_tail.decode("utf-8", "replace")
        )
        return text, dropped, tail


GROUP_PREFIX = "room-sandbox-"  # + the owning server's pid + "-" + a random tag


def make_group(parent: Path | None, processes: int) -> Path | None:
    if parent is None:
        return None
    group = parent / f"{GROUP_PREFIX}{os.getpid()}-{secrets.token_hex(6)}"
    try:
        group.mkdir()
        (group / "pids.max").write_text(str(processes))
    except OSError as exc:
        with contextlib.suppress(OSError):
            group.rmdir()
        raise SandboxSpawnError(f"could not make the command's cgroup: {exc}") from exc
    return group


_JOIN_FAILED = b"room: could not join the command's cgroup"
_JOIN_EXIT = 125


def joining(group: Path, argv: Sequence[str]) -> list[str]:
    """``argv`` started by a shell that first moves itself into ``group``: bubblewrap, the
    sandbox and everything the command forks are in the group from birth, so a server that dies
    at any instant leaves nothing outside it (:func:`sweep_orphans` finds it at the next start).

    (The join used to run from the server while bubblewrap waited on ``--block-fd``; bubblewrap
    reads that descriptor's end of file as a go, so a server killed before the join let the
    sandbox run outside any group. The join itself takes about 0.1 ms.)"""
    script = (
        f'{{ echo $$ >"$0"; }} 2>/dev/null || {{ echo "{_JOIN_FAILED.decode()}" >&2;'
        f' exit {_JOIN_EXIT}; }}; exec "$@"'
    )
    return ["/bin/sh", "-c", script, str(group / "cgroup.procs"), *argv]


def _group_pids(group: Path) -> list[int]:
    try:
        return [int(x) for x in (group / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def _signal_all(proc: asyncio.subprocess.Process, group: Path | None, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)  # its own session: the command's process group
    for pid in _group_pids(group) if group is not None else ():
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


async def _sweep(proc: asyncio.subprocess.Process, group: Path | None) -> None:
    """Once the command's main process is gone, nothing it started may stay behind."""
    deadline = time.monotonic() + 2.0
    while True:
        _signal_all(proc, group, signal.SIGKILL)
        if group is None or not _group_pids(group) or time.monotonic() > deadline:
            return
        await asyncio.sleep(0.01)


async def remove_group(group: Path) -> None:
    for _ in range(200):
        for pid in _group_pids(group):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        try:
            os.rmdir(group)  # sysfs: does not block
            return
        except FileNotFoundError:
            return
        except OSError:
            await asyncio.sleep(0.01)
    log.warning("could not remove the command cgroup %s", group)


@dataclass(frozen=True, slots=True)
class Swept:
    groups: int  # command cgroups removed
    processes: int  # processes killed in them


def sweep_orphans(parent: Path | None) -> Swept:
    """Kill what commands of a server that died left running, and remove their cgroups
    (blocking; at start-up, before any command of this process runs).

    bubblewrap's ``--die-with-parent`` takes the sandbox down with a server killed mid-command,
    except in a window of a few milliseconds after the command starts, when the sandbox's first
    process outlives it (bubblewrap sets its parent-death signal late; measured: killed within
    10 ms of the start, 2 of 5 sandboxes lived on). A group whose owning pid is gone is such a
    leftover; a group whose owner lives belongs to a running server (of another data folder, say)
    and is left alone."""
    if parent is None:
        return Swept(0, 0)
    try:
        entries = [e for e in parent.iterdir() if e.name.startswith(GROUP_PREFIX) and e.is_dir()]
    except OSError:
        return Swept(0, 0)
    groups = killed = 0
    for group in entries:
        owner = group.name.removeprefix(GROUP_PREFIX).split("-", 1)[0]
        if not owner.isdigit() or _alive(int(owner)):
            continue
        for _ in range(200):
            pids = _group_pids(group)
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
                    killed += 1
            try:
                os.rmdir(group)
            except FileNotFoundError:
                break
            except OSError:  # still holds processes that are exiting
                time.sleep(0.01)
                continue
            groups += 1
            break
        else:
            log.warning("could not remove the leftover command cgroup %s", group)
    if killed:
        log.warning("killed %d processes that commands of a stopped server left running", killed)
    return Swept(groups, killed)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


async def _wait(
    proc: asyncio.subprocess.Process, timeout_secs: float, cancel: asyncio.Event | None
) -> Killed | None:
    """None when the process ended by itself, else why it must be stopped."""
    waiter = asyncio.ensure_future(proc.wait())
    stopper = asyncio.ensure_future(cancel.wait()) if cancel is not None else None
    tasks = {waiter} if stopper is None else {waiter, stopper}
    try:
        await asyncio.wait(tasks, timeout=timeout_secs, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
    if proc.returncode is not None:
        return None
    return "stopped" if cancel is not None and cancel.is_set() else "timeout"


async def _stop(proc: asyncio.subprocess.Process, group: Path | None) -> None:
    _signal_all(proc, group, signal.SIGTERM)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(proc.wait(), KILL_GRACE_SECS)
    _signal_all(proc, group, signal.SIGKILL)
    await proc.wait()


async def _read(stream: asyncio.StreamReader, capture: _Capture) -> None:
    while chunk := await stream.read(_READ_BYTES):
        capture.add(chunk)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


async def supervise(
    argv: list[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    limits: CommandLimits,
    cancel: asyncio.Event | None,
    group: Path | None,
    sandboxed: bool,
    pass_fds: Sequence[int] = (),
) -> CommandResult:
    started = time.monotonic()
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            cwd=cwd,
            env=dict(env),
            start_new_session=True,
            pass_fds=pass_fds,
            umask=workspace_umask(),  # the workspace's files as the operator would make them
        )
    except OSError as exc:
        raise SandboxSpawnError(f"could not start the command: {exc}", argv0=argv[0]) from exc
    assert proc.stdout is not None
    capture = _Capture(limits.output_bytes)
    reader = asyncio.ensure_future(_read(proc.stdout, capture))
    try:
        killed = await _wait(proc, limits.timeout_secs, cancel)
        if killed is not None:
            await _stop(proc, group)
        await _sweep(proc, group)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(reader), _DRAIN_SECS)
    finally:
        if proc.returncode is None:  # we were cancelled ourselves
            _signal_all(proc, group, signal.SIGKILL)
            await proc.wait()
            await _sweep(proc, group)
        reader.cancel()
    duration = time.monotonic() - started
    code = proc.returncode
    exit_code: int | None = code
    if killed is None and code is not None:
        # a signal kills: directly (<0), or as sh and bwrap report it (128 + signal)
        if code < 0:
            killed = _signal_name(-code)
        elif 128 < code < 128 + signal.NSIG:
            killed = _signal_name(code - 128)
    if killed is not None:
        exit_code = None
    if group is not None and code == _JOIN_EXIT and bytes(capture.head).startswith(_JOIN_FAILED):
        raise SandboxSpawnError("could not join the command's cgroup", argv0=argv[0])
    output, dropped, tail = capture.render()
    return CommandResult(
        exit_code=exit_code,
        output=output,
        output_bytes=capture.total,
        truncated_bytes=dropped,
        output_sha256=capture.digest.hexdigest(),
        tail=tail,
        duration_secs=duration,
        timed_out=killed == "timeout",
        killed=killed,
        sandboxed=sandboxed,
    )
