"""Running a built command line to its end, within bounds: a pids cgroup of its own (made,
joined and removed here), bubblewrap held shut until its processes are in it (:class:`Gate`),
the wall clock and a ``cancel`` event (SIGTERM to every process of the command, SIGKILL after
:data:`KILL_GRACE_SECS`), nothing left behind, and the output captured in bounded memory.

:mod:`room.infra.sandbox` decides what runs and how it is jailed; this module only supervises.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
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
_GATE_SECS = 10.0  # for bubblewrap to start the sandbox
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


def make_group(parent: Path | None, processes: int) -> Path | None:
    if parent is None:
        return None
    group = parent / f"room-sandbox-{os.getpid()}-{secrets.token_hex(6)}"
    try:
        group.mkdir()
        (group / "pids.max").write_text(str(processes))
    except OSError as exc:
        with contextlib.suppress(OSError):
            group.rmdir()
        raise SandboxSpawnError(f"could not make the command's cgroup: {exc}") from exc
    return group


class Gate:
    """Keeps bubblewrap's sandbox shut until its processes are in the command's cgroup.

    bwrap gets ``--info-fd`` (it writes the sandbox's first pid there right after ``clone``) and
    ``--block-fd`` (the sandbox waits on it just before ``exec``). Joining a cgroup-v1 group
    waits for an RCU grace period, so the join runs in a thread *while* bwrap sets up its
    namespaces and mounts instead of before it; only then is the sandbox let go. Nothing the
    command runs can fork before that: every process of it descends from the blocked one."""

    def __init__(self, group: Path) -> None:
        self.group = group
        self.info_read, self.info_write = os.pipe()
        self.block_read, self.block_write = os.pipe()
        self._ours = [self.info_read, self.info_write, self.block_read, self.block_write]

    def bwrap_args(self) -> list[str]:
        return ["--info-fd", str(self.info_write), "--block-fd", str(self.block_read)]

    @property
    def pass_fds(self) -> tuple[int, ...]:
        return self.info_write, self.block_read

    def spawned(self) -> None:
        """bwrap has its ends: close ours, so the info pipe ends when bwrap's copies do."""
        self._close(self.info_write)
        self._close(self.block_read)

    async def open(self, pid: int) -> None:
        """Move bwrap (``pid``) and its sandbox into the cgroup, then let the sandbox go on.

        When bwrap has already failed (no sandbox, or a process gone) the sandbox stays shut and
        is killed; bwrap's own exit status and message then tell what happened."""
        joining = asyncio.ensure_future(asyncio.to_thread(_join_group, self.group, pid))
        child: int | None = None
        try:
            child = await self._child_pid()
            gone = not await joining
            if child is None or gone or not await asyncio.to_thread(_join_group, self.group, child):
                self._kill(child)
                return
            os.write(self.block_write, b"x")
        except BaseException:
            self._kill(child)
            joining.cancel()
            raise

    async def _child_pid(self) -> int | None:
        """The sandbox's pid from bwrap's ``--info-fd`` JSON, None when bwrap ended first."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()
        data = bytearray()

        def readable() -> None:
            try:
                chunk = os.read(self.info_read, 4096)
            except BlockingIOError:
                return
            except OSError:
                chunk = b""
            data.extend(chunk)
            if not chunk and not done.done():
                done.set_result(None)

        os.set_blocking(self.info_read, False)
        loop.add_reader(self.info_read, readable)
        try:
            await done
        finally:
            loop.remove_reader(self.info_read)
        try:
            return int(json.loads(data)["child-pid"])
        except (ValueError, KeyError, TypeError):
            return None

    @staticmethod
    def _kill(pid: int | None) -> None:
        if pid is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)

    def _close(self, fd: int) -> None:
        if fd in self._ours:
            self._ours.remove(fd)
            os.close(fd)

    def close(self) -> None:
        for fd in list(self._ours):
            self._close(fd)


def _join_group(group: Path, pid: int) -> bool:
    """Move ``pid`` into ``group`` (blocking: an RCU grace period). False when it is gone."""
    try:
        (group / "cgroup.procs").write_text(str(pid))
    except ProcessLookupError:
        return False
    except OSError as exc:
        raise SandboxSpawnError(f"could not join the command's cgroup: {exc}") from exc
    return True


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
    gate: Gate | None = None,
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
            pass_fds=(*pass_fds, *(gate.pass_fds if gate is not None else ())),
        )
    except OSError as exc:
        raise SandboxSpawnError(f"could not start the command: {exc}", argv0=argv[0]) from exc
    finally:
        if gate is not None:
            gate.spawned()
    assert proc.stdout is not None
    capture = _Capture(limits.output_bytes)
    reader = asyncio.ensure_future(_read(proc.stdout, capture))
    try:
        if gate is not None:
            try:
                await asyncio.wait_for(gate.open(proc.pid), _GATE_SECS)
            except TimeoutError as exc:
                raise SandboxSpawnError("bubblewrap did not start the sandbox in time") from exc
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
