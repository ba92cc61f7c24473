"""Running the ``git`` command line: bounded, non-interactive, and never as a program a
repository could choose.

Whoever can write a repository — an agent's command in its worktree, or in a workspace it turned
into a repository with ``git init`` — controls its configuration, attributes and hooks, and git
runs programs named there (filters, merge drivers, textconv, fsmonitor, hooks, credential
helpers …) and reads files they name (includes, excludes, attributes, mailmap). So the server's
own git treats every repository as attacker input, in three layers:

1. **Isolated** (:class:`Git` with a :class:`Jail`, which :mod:`room.infra.sandbox` provides where
   bubblewrap works): git runs in a sandbox that sees the system's programs read-only and, of
   the host's files, only the folders the operation needs (the work tree, the repository it
   belongs to, a new worktree's folder) — never the data folder, other projects or the
   server's home; no network, no capabilities, a private ``/tmp``, none of the server's
   environment. Whatever a repository makes git run can reach only what the agent that wrote it
   could reach already. Which folders are bound is decided by the caller from the server's own
   records, never read from the repository (a ``.git`` file or symlink pointing elsewhere
   points at nothing inside the sandbox).
2. **Refused** (:func:`check_repository`): a repository whose own configuration sets a key that
   runs a program or includes another file is not run in at all
   (:class:`UnsafeRepositoryError`). The keys are listed with ``--null`` and split on NUL only:
   a subsection may hold spaces, dots and newlines.
3. **Switched off** on every call: ``core.hooksPath=/dev/null`` (no hooks),
   ``core.fsmonitor=false``, ``commit.gpgSign=false``, no colour, no automatic ``gc`` or
   worktree pruning; diff callers add ``--no-ext-diff --no-textconv``. Only the repository's own configuration is read
   (``GIT_CONFIG_NOSYSTEM``, ``GIT_CONFIG_GLOBAL=/dev/null``).

Without a jail (no bubblewrap on this machine) layers 2 and 3 remain. Agents then cannot write
into ``.git`` at all — commands are refused unless a project's owner *and* the operator allowed
unsandboxed execution, which trusts the project's agents with the server's user, and the file
tools never write under ``.git`` — so nothing an agent wrote can name a program for git.

Every call also

* has a timeout (a hung git is killed, and :class:`GitFailedError` says so);
* never prompts: ``GIT_TERMINAL_PROMPT=0``, ``GIT_EDITOR=true``, ``GIT_MERGE_AUTOEDIT=no``, stdin
  closed unless the caller feeds it;
* ignores ``GIT_DIR``, ``GIT_WORK_TREE``, ``GIT_INDEX_FILE`` … inherited from the server's own
  environment, so the folder given is the repository used;
* reads stdout as bytes decoded with ``surrogateescape`` (paths round-trip exactly), stderr with
  ``replace``; the C locale keeps git's messages stable.

The threat model is written out in docs/agents.md ("What an agent can reach"). This module
knows nothing of worktrees or tasks; :mod:`room.infra.worktrees` builds on it.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from room.errors import RoomError
from room.infra.perms import workspace_umask


def printable(path: str) -> str:
    """A path read from git's output as people and JSON can hold it: a name that is not UTF-8
    arrives with lone surrogates (``surrogateescape``), which no JSON text or database row can
    hold; its odd bytes are written ``\\xNN`` (as :func:`room.infra.files.shown` shows them)."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return path.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    return path


GIT_TIMEOUT_SECS = 30.0
STDERR_TAIL_CHARS = 2000

_SAFE_CONFIG = (
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "core.fsmonitor=false",
    "-c",
    "commit.gpgSign=false",
    "-c",
    "color.ui=false",
    # No housekeeping behind a person's back: the isolated git does not see a repository's other
    # worktrees, so an automatic `gc` would take them for gone and prune their records.
    "-c",
    "gc.auto=0",
    "-c",
    "maintenance.auto=false",
    "-c",
    "gc.worktreePruneExpire=never",
)
_FIXED_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,  # the server user's own settings are not the project's
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_EDITOR": "true",
    "GIT_SEQUENCE_EDITOR": "true",
    "GIT_MERGE_AUTOEDIT": "no",
    "GIT_PAGER": "cat",
    "GIT_OPTIONAL_LOCKS": "0",  # status must not fight an agent's git for index.lock
    "LC_ALL": "C",
}


class GitFailedError(RoomError):
    """A git command failed or timed out; ``details`` carry the command, exit code, stderr tail."""

    code = "git_failed"
    http_status = 500

    def __init__(self, args: Sequence[str], returncode: int | None, stderr: str) -> None:
        tail = stderr.strip()[-STDERR_TAIL_CHARS:]
        command = " ".join(["git", *args])[:300]
        super().__init__(
            f"git 命令失败 (git failed): {command}: {tail.splitlines()[-1] if tail else returncode}",
            command=command,
            returncode=returncode,
            stderr=tail,
        )
        self.returncode = returncode
        self.stderr = tail


@dataclass(frozen=True, slots=True)
class GitRun:
    returncode: int
    stdout: str
    stderr: str


# What git gets of the server's environment: nothing else (the provider keys and tokens a
# server holds never reach a git process, nor anything a repository's configuration runs).
_PASSED_ENV = ("PATH", "HOME", "USER", "LOGNAME", "TZ", "TMPDIR")

# Configuration that makes git run a program, or read another file as configuration, by
# (section, variable) — the subsection, whatever it holds, does not matter. "*" is every variable
# of the section. Which keys git really runs is decided by the isolation (layer 1); this list
# keeps the server from running git at all in a repository that asks for a program.
_RUNS_PROGRAMS: dict[str, frozenset[str]] = {
    "filter": frozenset({"clean", "smudge", "process"}),
    "merge": frozenset({"driver"}),
    "diff": frozenset({"textconv", "command", "external"}),
    "gpg": frozenset({"program", "defaultkeycommand"}),
    "include": frozenset({"path"}),
    "includeif": frozenset({"path"}),
    "core": frozenset(
        [
            "editor",
            "pager",
            "sshcommand",
            "askpass",
            "gitproxy",
            "alternaterefscommand",
            "fsmonitor",
            "hookspath",
            "worktree",
            "attributesfile",
            "excludesfile",
        ]
    ),
    "sequence": frozenset({"editor"}),
    "credential": frozenset({"*"}),
    "uploadpack": frozenset({"*"}),
    "receive": frozenset({"procreceiverefs"}),
    "pager": frozenset({"*"}),
    "alias": frozenset({"*"}),
    "remote": frozenset({"uploadpack", "receivepack", "vcs"}),
    "mergetool": frozenset({"*"}),
    "difftool": frozenset({"*"}),
    "trace2": frozenset({"*"}),  # writes to a path or socket it names
    "ssh": frozenset({"variant"}),
    "submodule": frozenset({"update"}),  # "!command"
    "mailmap": frozenset({"file", "blob"}),
    "blame": frozenset({"ignorerevsfile"}),
}


def runs_program(key: str) -> bool:
    """Does the configuration key ``key`` (``section[.subsection].variable``, as ``git config
    --null --name-only --list`` gives it) make git run a program or read another file?"""
    section, _, rest = key.partition(".")
    variable = rest.rpartition(".")[2]
    wanted = _RUNS_PROGRAMS.get(section.lower())
    return wanted is not None and ("*" in wanted or variable.lower() in wanted)


class UnsafeRepositoryError(GitFailedError):
    """The repository's own configuration would make git run a program: refused."""

    code = "unsafe_repository"
    http_status = 409

    def __init__(self, keys: Sequence[str]) -> None:
        self.returncode, self.stderr = None, ""
        shown = [printable(k).replace("\n", "\\n")[:200] for k in keys[:20]]
        RoomError.__init__(
            self,
            "仓库配置会让 git 运行外部程序，服务器不在其中运行 git (The repository's configuration "
            f"would make git run a program: {', '.join(shown[:5])}.)",
            keys=shown,
        )


class Jail(Protocol):
    """Wraps a git command line so that it runs isolated (:class:`room.infra.sandbox.GitJail`): of
    the host's files only ``writable`` folders (read-write, ``cwd`` among them) and the system's
    programs (read-only) are visible; no network."""

    def wrap(self, argv: Sequence[str], *, cwd: Path, writable: Sequence[Path]) -> list[str]: ...


def git_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {k: os.environ[k] for k in _PASSED_ENV if k in os.environ}
    env.update(_FIXED_ENV)
    if extra:
        env.update(extra)
    return env


def check_repository(cwd: Path) -> None:
    """Raise :class:`UnsafeRepositoryError` if the repository at ``cwd`` (its own config, and a
    worktree's) sets a key that runs a program (:func:`runs_program`). Outside a repository:
    nothing to check. Listing configuration runs nothing: includes are not followed
    (``--no-includes``), and no key named there is acted on. Only the repository's own scopes
    count (the server's own ``-c`` switches are listed as ``command``)."""
    try:
        proc = subprocess.run(
            ["git", *_SAFE_CONFIG, "config", "--list", "--no-includes", "--show-scope",
             "--null", "--name-only"],
            cwd=cwd,
            env=git_env(),
            capture_output=True,
            timeout=GIT_TIMEOUT_SECS,
            check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return  # the command itself will meet the same problem and say so
    if proc.returncode != 0:
        return  # unreadable: the command itself will say so
    fields = proc.stdout.decode("utf-8", "surrogateescape").split("\0")
    keys: list[str] = []
    for scope, key in zip(fields[0::2], fields[1::2], strict=False):
        if scope in ("local", "worktree") and runs_program(key) and key not in keys:
            keys.append(key)
    if keys:
        raise UnsafeRepositoryError(keys)


def _resolved(paths: Sequence[Path]) -> list[Path]:
    return [Path(p).resolve() for p in paths]


@dataclass(frozen=True, slots=True)
class Git:
    """How the server runs git: through ``jail`` when there is one (see the module docstring),
    else as a plain child process. Built once at start-up and kept on the services; tests build
    their own."""

    jail: Jail | None = None

    @property
    def isolated(self) -> bool:
        return self.jail is not None

    def argv(self, cwd: Path, args: Sequence[str], writable: Sequence[Path]) -> list[str]:
        argv = ["git", *_SAFE_CONFIG, *args]
        if self.jail is None:
            return argv
        cwd = Path(cwd).resolve()
        return self.jail.wrap(argv, cwd=cwd, writable=[cwd, *_resolved(writable)])

    def run(
        self,
        cwd: Path,
        *args: str,
        check: bool = True,
        timeout: float = GIT_TIMEOUT_SECS,
        env: Mapping[str, str] | None = None,
        stdin: str | None = None,
        writable: Sequence[Path] = (),
        checked: bool = False,
    ) -> GitRun:
        """Run ``git <args>`` in ``cwd``, which the jail binds read-write with ``writable``.
        With ``check``, a non-zero exit raises GitFailedError; a timeout or a missing git/cwd
        always does; a repository configured to run programs raises
        :class:`UnsafeRepositoryError` before git runs in it — unless the caller ``checked`` it
        already in this operation (:func:`check_repository`)."""
        if not checked:
            check_repository(cwd)
        try:
            proc = subprocess.run(
                self.argv(cwd, args, writable),
                cwd=cwd,
                env=git_env(env),
                umask=workspace_umask(),
                input=None if stdin is None else stdin.encode("utf-8", "surrogateescape"),
                stdin=subprocess.DEVNULL if stdin is None else None,
                capture_output=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise GitFailedError(args, None, f"timed out after {timeout:g}s") from None
        except OSError as exc:
            raise GitFailedError(args, None, str(exc)) from None
        run = GitRun(
            proc.returncode,
            proc.stdout.decode("utf-8", "surrogateescape"),
            proc.stderr.decode("utf-8", "replace"),
        )
        if check and run.returncode != 0:
            raise GitFailedError(args, run.returncode, run.stderr)
        return run

    def run_capped(
        self,
        cwd: Path,
        *args: str,
        max_bytes: int,
        timeout: float = GIT_TIMEOUT_SECS,
        env: Mapping[str, str] | None = None,
        writable: Sequence[Path] = (),
        checked: bool = False,
    ) -> tuple[bytes, bool]:
        """Run ``git <args>`` and keep at most ``max_bytes`` of stdout; ``(output, truncated)``.

        git is killed as soon as the cap is passed, so a huge output costs neither memory nor
        time."""
        if not checked:
            check_repository(cwd)
        timed_out = threading.Event()
        with tempfile.TemporaryFile() as errfile:
            try:
                proc = subprocess.Popen(
                    self.argv(cwd, args, writable),
                    cwd=cwd,
                    env=git_env(env),
                    umask=workspace_umask(),
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=errfile,
                )
            except OSError as exc:
                raise GitFailedError(args, None, str(exc)) from None

            def expire() -> None:
                timed_out.set()
                proc.kill()

            timer = threading.Timer(timeout, expire)
            timer.start()
            try:
                assert proc.stdout is not None
                data = proc.stdout.read(max_bytes + 1)
                truncated = len(data) > max_bytes
                if truncated:
                    proc.kill()
                returncode = proc.wait()
            finally:
                timer.cancel()
                if proc.stdout is not None:
                    proc.stdout.close()
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
            if timed_out.is_set():
                raise GitFailedError(args, None, f"timed out after {timeout:g}s")
            if not truncated and returncode != 0:
                errfile.seek(0)
                raise GitFailedError(args, returncode, errfile.read().decode("utf-8", "replace"))
        return data[:max_bytes], truncated
