"""The command runner behind the agents' ``shell`` tool: one shell command, isolated and bounded.

:func:`probe` looks once at what this machine offers and returns a :class:`Sandbox` the caller
keeps (there is no module-level state). :meth:`Sandbox.run` runs ``/bin/sh -c COMMAND``:

* **isolated** with bubblewrap when available: new namespaces for everything (``--unshare-all``;
  the network is shared only when asked), capabilities dropped, a fresh ``/dev``, ``/proc`` and a
  private ``/tmp``. The sandbox does *not* see the host's ``/``: it sees ``/usr`` (and the
  merged-usr links ``/bin``, ``/lib`` …), a short list of harmless ``/etc`` entries
  (:data:`ETC_ENTRIES`; never ``shadow``, ``ssh``, ``sudoers`` or files that may hold tokens such
  as ``npmrc``), the server's Python prefix when it lives outside ``/usr`` (pyenv), any extra
  ``readable`` folders — all read-only — and the working folder plus ``writable`` folders
  read-write. ``hidden`` paths inside any of those are covered by an empty folder (or
  ``/dev/null`` for a file). The sandbox root is then remounted read-only.
* **bounded** by ``prlimit`` (CPU seconds, address space, file size, no core dumps) and, where the
  server may create one, a pids cgroup of its own (``pids.max``): ``RLIMIT_NPROC`` does not
  apply to root and counts every process of the user, so it is used only as a fallback. The
  command line joins the group before bubblewrap starts (:func:`room.infra.supervise.joining`):
  whatever instant the server dies at, nothing of the command runs outside it, and the next
  start kills what is left (:func:`room.infra.supervise.sweep_orphans`). A
  wall-clock timeout and a ``cancel`` event stop the command: SIGTERM to every process of the
  command, SIGKILL after :data:`room.infra.supervise.KILL_GRACE_SECS`. When the command ends its background processes
  end with it (the pid namespace, the cgroup or the process group is emptied).
* **scrubbed**: the command never inherits the server's environment (provider keys, tokens); it
  gets :func:`command_env` plus what the caller passes.

Without bubblewrap :meth:`Sandbox.run` raises :class:`~room.errors.SandboxUnavailableError`
unless ``allow_unsandboxed`` is true; then the command runs plainly (same limits, kill and
environment) and the result says ``sandboxed=False``.

This module finds the machine's means and builds the command line (the jail's layout, the
limits); :mod:`room.infra.supervise` runs it: the cgroup (joined before bubblewrap starts), the wall clock,
the kill and the captured output.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from room.errors import SandboxPathError, SandboxUnavailableError
from room.infra.supervise import (
    CommandLimits,
    CommandResult,
    joining,
    make_group,
    remove_group,
    supervise,
)

log = logging.getLogger(__name__)

TMP_BYTES = 256 * 1024**2  # the size of each of the sandbox's RAM-backed /tmp and /dev/shm
SANDBOX_UID = 65534  # who a command is inside the sandbox when the server runs as root (nobody)
_PROBE_SECS = 10.0  # for a look at a binary

#: ``/etc`` entries bound read-only: the loader, users and groups by name, name resolution, TLS
#: roots, time zone, the Debian alternatives links. Nothing that holds secrets or credentials.
ETC_ENTRIES = (
    "alternatives",
    "ca-certificates",
    "debian_version",
    "gai.conf",
    "group",
    "host.conf",
    "hostname",
    "hosts",
    "inputrc",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "magic",
    "mime.types",
    "nsswitch.conf",
    "os-release",
    "passwd",
    "protocols",
    "python3",
    "resolv.conf",
    "services",
    "ssl",
    "terminfo",
    "timezone",
)
_USR_LINKS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")
_SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin"


@dataclass(frozen=True, slots=True)
class SandboxInfo:
    """What :func:`probe` found. ``reason`` says why isolation is unavailable ('' when it is)."""

    isolated: bool
    reason: str
    bwrap: str | None
    prlimit: str | None
    pids_cgroup: Path | None  # a cgroup folder under which one child per command is made

    @property
    def process_limit(self) -> Literal["cgroup", "rlimit"]:
        return "cgroup" if self.pids_cgroup is not None else "rlimit"


def probe(
    *, bwrap: str = "bwrap", prlimit: str = "prlimit", cgroup_root: Path = Path("/sys/fs/cgroup")
) -> Sandbox:
    """Find out once (blocking, a few tens of ms) what isolation this machine offers."""
    prlimit_path = shutil.which(prlimit)
    bwrap_path = shutil.which(bwrap)
    cgroup = _pids_cgroup(cgroup_root)
    if bwrap_path is None:
        reason = f"no bubblewrap binary ({bwrap}) found"
    elif sys.platform != "linux":
        reason = "bubblewrap needs Linux"
    else:
        reason = _try_bwrap(bwrap_path)
    info = SandboxInfo(
        isolated=not reason,
        reason=reason,
        bwrap=bwrap_path if not reason else None,
        prlimit=prlimit_path,
        pids_cgroup=cgroup,
    )
    if reason:
        log.warning("commands cannot be isolated: %s", reason)
    return Sandbox(info)


def _try_bwrap(bwrap: str) -> str:
    argv = bwrap_argv(bwrap, ["/bin/true"], cwd=None, writable=(), network=False)
    try:
        done = subprocess.run(
            argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=_PROBE_SECS, env={}
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap could not run: {exc}"
    if done.returncode != 0:
        said = done.stderr.decode("utf-8", "replace").strip().splitlines()
        return f"bubblewrap refused (exit {done.returncode}): {said[-1] if said else 'no message'}"
    return ""


def _pids_cgroup(root: Path) -> Path | None:
    """A cgroup folder (v1 ``pids`` controller or v2 with ``pids``) where we may make children."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    candidates = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "pids" in controllers.split(","):
            candidates.append(root / "pids" / path.lstrip("/"))
        elif controllers == "" and (root / "cgroup.controllers").exists():
            candidates.append(root / path.lstrip("/"))
    for parent in candidates:
        child = parent / f"room-sandbox-probe-{os.getpid()}-{secrets.token_hex(4)}"
        try:
            child.mkdir()
        except OSError:
            continue
        try:
            if (child / "pids.max").exists():
                return parent
        finally:
            with contextlib.suppress(OSError):
                child.rmdir()
    return None


def command_env(home: str, path: str = _SYSTEM_PATH) -> dict[str, str]:
    """The whole environment of a command before the caller's additions."""
    return {"PATH": path, "HOME": home, "TMPDIR": "/tmp" if home == "/tmp" else home,
            "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "TERM": "dumb"}  # fmt: skip


def _python_prefix() -> Path | None:
    """The server's Python installation, when ``python3`` there would not be under ``/usr``."""
    prefix = Path(sys.base_prefix).resolve()
    return None if prefix.is_relative_to("/usr") else prefix


def bwrap_argv(
    bwrap: str,
    command: Sequence[str],
    *,
    cwd: Path | None,
    writable: Sequence[Path],
    network: bool,
    readable: Sequence[Path] = (),
    hidden: Sequence[Path] = (),
) -> list[str]:
    """The bubblewrap command line that runs ``command`` in the layout described above.

    Paths must be absolute and resolved. Order matters: later mounts cover earlier ones."""
    return _layout(
        bwrap, command, cwd=cwd, writable=writable, network=network, readable=readable,
        hidden=hidden, etc_copies=None,
    )  # fmt: skip


def _layout(
    bwrap: str,
    command: Sequence[str],
    *,
    cwd: Path | None,
    writable: Sequence[Path],
    network: bool,
    readable: Sequence[Path],
    hidden: Sequence[Path],
    etc_copies: _EtcCopies | None,
    protected: Sequence[Path] = (),
    setenv: Mapping[str, str] | None = None,
    tmp_bytes: int = TMP_BYTES,
    uid: int | None = None,
) -> list[str]:
    """:func:`bwrap_argv`; with ``etc_copies`` the regular files of :data:`ETC_ENTRIES` are
    copied into the sandbox's (read-only) root from open descriptors instead of bind-mounted one
    by one: each mount costs bwrap a few hundred microseconds, a copy of a small file almost
    nothing. The sandbox sees the same entries, as they were when the command started.

    The only writable places are the bound folders and two RAM-backed scratch folders, ``/tmp``
    and ``/dev/shm``, each capped at ``tmp_bytes`` (a write past the cap fails with "No space
    left on device"); ``/dev`` itself is read-only. A bound folder under ``/tmp`` needs its
    parents made in the scratch ``/tmp``: they get a read-only folder of their own, so a write
    next to the workspace fails instead of landing in a scratch copy that vanishes (the model
    would believe it landed). With ``uid`` the command runs as that user (and its group) in a
    user namespace of its own."""
    argv = [bwrap, "--unshare-all", *(["--share-net"] if network else [])]
    if uid is not None:
        argv += ["--unshare-user", "--uid", str(uid), "--gid", str(uid)]
    argv += ["--die-with-parent", "--new-session", "--cap-drop", "ALL", "--ro-bind", "/usr", "/usr"]
    for name in _USR_LINKS:
        link = Path("/") / name
        if link.is_symlink():
            argv += ["--symlink", os.readlink(link), str(link)]
        elif link.is_dir():
            argv += ["--ro-bind", str(link), str(link)]
    for name in ETC_ENTRIES:
        entry = Path("/etc") / name
        if not entry.exists():  # follows the link: /etc/localtime → /usr/share/zoneinfo/…
            continue
        source = entry.resolve()
        fd = etc_copies.open(source) if etc_copies is not None else None
        if fd is None:
            argv += ["--ro-bind", str(source), str(entry)]
        else:
            argv += ["--perms", "0644", "--file", str(fd), str(entry)]
    ro_roots = [p for p in (_python_prefix(), *readable) if p is not None]
    for root in ro_roots:
        argv += ["--ro-bind", str(root), str(root)]
    size = ["--size", str(tmp_bytes)]
    argv += ["--dev", "/dev", *size, "--tmpfs", "/dev/shm", "--remount-ro", "/dev"]
    argv += ["--proc", "/proc", *size, "--tmpfs", "/tmp"]
    rw = sorted({*([cwd] if cwd else []), *writable}, key=lambda p: len(p.parts))
    scratch = _scratch_parents([*ro_roots, *rw])
    for path in scratch:
        argv += ["--tmpfs", str(path)]
    for path in rw:
        argv += ["--bind", str(path), str(path)]
    bound = [Path("/usr"), *ro_roots, *rw]
    masked = [h for h in hidden if any(h.is_relative_to(b) for b in bound)]
    for path in masked:
        if path.is_dir():
            argv += ["--tmpfs", str(path), "--remount-ro", str(path)]
        elif path.exists():
            argv += ["--ro-bind", "/dev/null", str(path)]
    for path in rw:  # a writable folder inside a hidden one stays writable: it was asked for
        if any(path.is_relative_to(h) and path != h for h in masked):
            argv += ["--bind", str(path), str(path)]
    for path in protected:  # read-only inside a writable folder (a repository's .git)
        argv += ["--ro-bind", str(path), str(path)]
    for path in scratch:
        argv += ["--remount-ro", str(path)]
    for name, value in (setenv or {}).items():
        argv += ["--setenv", name, value]
    argv += ["--remount-ro", "/", "--chdir", str(cwd or "/tmp"), "--", *command]
    return argv


_TMP = Path("/tmp")


def _scratch_parents(bound: Sequence[Path]) -> list[Path]:
    """The folders right under ``/tmp`` that hold a bound folder without being one: each gets a
    read-only tmpfs (see :func:`_layout`)."""
    tops = {
        _TMP / p.relative_to(_TMP).parts[0] for p in bound if p.is_relative_to(_TMP) and p != _TMP
    }
    return sorted(top for top in tops if top not in bound)


@dataclass(frozen=True, slots=True)
class GitJail:
    """The server's own git, isolated like an agent's command (:mod:`room.infra.git`, layer 1): the
    layout above with only the folders the operation names bound read-write — no data folder,
    no other project, no home — no network, no capabilities, ``HOME`` and ``TMPDIR`` in the
    private ``/tmp``. Not bounded by ``prlimit`` or a cgroup: git itself runs nothing a
    repository names (:func:`room.infra.git.check_repository` refuses such repositories first), and
    each call has its timeout."""

    bwrap: str

    def wrap(self, argv: Sequence[str], *, cwd: Path, writable: Sequence[Path]) -> list[str]:
        return _layout(
            self.bwrap, argv, cwd=cwd, writable=writable, network=False, readable=(),
            hidden=(), etc_copies=None, setenv={"HOME": "/tmp", "TMPDIR": "/tmp"},
        )  # fmt: skip


class _EtcCopies:
    """Open descriptors of the ``/etc`` files a sandbox gets as copies (see :func:`_layout`)."""

    def __init__(self) -> None:
        self.fds: list[int] = []

    def open(self, source: Path) -> int | None:
        """A descriptor bwrap reads ``source`` from; None for a folder or an unreadable file."""
        if not source.is_file():
            return None
        try:
            fd = os.open(source, os.O_RDONLY | os.O_CLOEXEC | os.O_NOCTTY)
        except OSError:
            return None  # bound instead: the sandbox sees it as unreadable as the server does
        self.fds.append(fd)
        return fd

    def close(self) -> None:
        while self.fds:
            os.close(self.fds.pop())


def _limits_argv(prlimit: str, limits: CommandLimits, *, nproc: bool) -> list[str]:
    # SIGXCPU at the soft limit says why; SIGKILL a second later if it is caught
    argv = [
        prlimit,
        f"--cpu={limits.cpu_secs}:{limits.cpu_secs + 1}",
        f"--as={limits.memory_bytes}",
    ]
    argv += [f"--fsize={limits.file_bytes}", "--core=0"]
    if nproc:
        argv.append(f"--nproc={limits.processes}")
    return [*argv, "--"]


def _resolved_dir(path: Path, what: str) -> Path:
    resolved = Path(path).resolve()
    if not resolved.is_dir():
        raise SandboxPathError(f"{what} is not a folder: {path}", path=str(path))
    return resolved


class Sandbox:
    """The runner as :func:`probe` found this machine; build it once and keep it.

    ``readable`` folders are bound read-only; ``hidden`` paths (the server's data folder, say)
    are covered wherever a bound folder would show them."""

    def __init__(
        self,
        info: SandboxInfo,
        *,
        readable: Sequence[Path] = (),
        hidden: Sequence[Path] = (),
        tmp_bytes: int = TMP_BYTES,
    ) -> None:
        self.info = info
        self.readable = tuple(Path(p).resolve() for p in readable)
        self.hidden = tuple(Path(p).resolve() for p in hidden)
        self.tmp_bytes = tmp_bytes
        # A server running as root runs commands as nobody: in the user namespace the command
        # owns what the server owns (so it can write its workspace), and is root nowhere.
        self.uid = SANDBOX_UID if os.geteuid() == 0 else None

    def configured(
        self,
        *,
        readable: Sequence[Path] = (),
        hidden: Sequence[Path] = (),
        tmp_bytes: int = TMP_BYTES,
    ) -> Sandbox:
        """The same runner with other ``readable`` and ``hidden`` paths and scratch size (no
        new probe)."""
        return Sandbox(self.info, readable=readable, hidden=hidden, tmp_bytes=tmp_bytes)

    def git_jail(self) -> GitJail | None:
        """Where bubblewrap works, the jail the server's own git runs in; None elsewhere."""
        return GitJail(self.info.bwrap) if self.info.isolated and self.info.bwrap else None

    async def run(
        self,
        command: str,
        *,
        cwd: Path,
        writable: Sequence[Path] = (),
        network: bool = False,
        limits: CommandLimits = CommandLimits(),  # frozen, so sharing the default is safe
        cancel: asyncio.Event | None = None,
        allow_unsandboxed: bool = False,
        env: Mapping[str, str] | None = None,
        protected: Sequence[Path] = (),
        pass_fds: Sequence[int] = (),
    ) -> CommandResult:
        """Run ``/bin/sh -c command`` in ``cwd``; see the module docstring for what that means.
        ``protected`` paths are bound read-only last: inside a writable folder they stay
        read-only (a mount point can be neither renamed nor removed), elsewhere they are readable.
        ``pass_fds`` stay open, under the same numbers, in the command: an input it reads by
        descriptor (``/proc/self/fd/N``, or a tool's own ``fd://N``) without its folder bound.
        Pass pipes, not descriptors of files: the command's user owns what the server owns, so
        it may reopen a file's descriptor through ``/proc`` for writing, read-only or not.

        Without isolation this raises :class:`SandboxUnavailableError` unless
        ``allow_unsandboxed``; then ``network`` cannot be withheld and the result says
        ``sandboxed=False``."""
        info = self.info
        if info.prlimit is None:
            raise SandboxUnavailableError(
                "找不到 prlimit，无法限制命令的资源 (prlimit is missing: commands cannot be bounded.)",
                reason="no prlimit binary found (util-linux)",
            )
        if not info.isolated and not allow_unsandboxed:
            raise SandboxUnavailableError(
                f"命令无法隔离运行 (Commands cannot be isolated here: {info.reason}.)",
                reason=info.reason,
            )
        cwd = _resolved_dir(cwd, "the working folder")
        writable = [_resolved_dir(p, "a writable folder") for p in writable]
        protected = [p for p in protected if p.exists() and not p.is_symlink()]
        prefix = _python_prefix()
        path = _SYSTEM_PATH + (f":{prefix / 'bin'}" if prefix else "")
        group = make_group(info.pids_cgroup, limits.processes)
        scratch: str | None = None
        copies: _EtcCopies | None = None
        try:
            inner = [
                *_limits_argv(info.prlimit, limits, nproc=group is None),
                *["/bin/sh", "-c", command],
            ]
            if info.isolated and info.bwrap:
                full_env = command_env("/tmp", path) | dict(env or {})
                copies = _EtcCopies()
                argv = _layout(
                    info.bwrap,
                    inner,
                    cwd=cwd,
                    writable=writable,
                    network=network,
                    readable=self.readable,
                    hidden=self.hidden,
                    etc_copies=copies,
                    protected=protected,
                    tmp_bytes=self.tmp_bytes,
                    uid=self.uid,
                )
            else:
                scratch = tempfile.mkdtemp(prefix="room-command-")
                full_env = command_env(scratch, path) | dict(env or {})
                argv = inner
            if group is not None:  # joined before anything can fork
                argv = joining(group, argv)
            return await supervise(
                argv, cwd=cwd, env=full_env, limits=limits, cancel=cancel, group=group,
                sandboxed=info.isolated, pass_fds=[*(copies.fds if copies else ()), *pass_fds],
            )  # fmt: skip
        finally:
            if copies is not None:
                copies.close()
            if group is not None:
                await remove_group(group)
            if scratch is not None:
                shutil.rmtree(scratch, ignore_errors=True)
