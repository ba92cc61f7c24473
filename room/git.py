"""Running the ``git`` command line: bounded, non-interactive, with no hooks.

Every call goes through :func:`run_git`, which

* has a timeout (a hung git is killed, and :class:`GitFailedError` says so);
* never prompts: ``GIT_TERMINAL_PROMPT=0``, ``GIT_EDITOR=true``, ``GIT_MERGE_AUTOEDIT=no``, stdin
  closed unless the caller feeds it;
* runs no repository-controlled programs we can switch off: ``core.hooksPath=/dev/null`` (no
  hooks), ``core.fsmonitor=false``, no signing prompts (``commit.gpgSign=false``), no colour; diff
  callers add ``--no-ext-diff --no-textconv``. Clean/smudge filters named in ``.gitattributes``
  still run, as they would for the person's own ``git add``;
* ignores ``GIT_DIR``, ``GIT_WORK_TREE``, ``GIT_INDEX_FILE`` … inherited from the server's own
  environment, so the folder given is the repository used;
* reads stdout as bytes decoded with ``surrogateescape`` (paths round-trip exactly), stderr with
  ``replace``; the C locale keeps git's messages stable.

This module knows nothing of worktrees or tasks; :mod:`room.worktrees` builds on it.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from room.errors import RoomError


def printable(path: str) -> str:
    """A path read from git's output as people and JSON can hold it: a name that is not UTF-8
    arrives with lone surrogates (``surrogateescape``), which no JSON text or database row can
    hold; its odd bytes are written ``\\xNN`` (as :func:`room.files.shown` shows them)."""
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
)
# Variables that would point git at another repository, index or object store than the folder.
_LOCATION_VARS = frozenset(
    {
        "GIT_DIR",
        "GIT_WORK_TREE",
        "GIT_INDEX_FILE",
        "GIT_COMMON_DIR",
        "GIT_OBJECT_DIRECTORY",
        "GIT_ALTERNATE_OBJECT_DIRECTORIES",
        "GIT_NAMESPACE",
        "GIT_PREFIX",
    }
)
_FIXED_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
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

# Repository configuration that makes git run a program. Whoever can write a repository (an
# agent's command in its worktree or in a serial workspace) could set one; the server's own git
# refuses to run in such a repository (:class:`UnsafeRepositoryError`) instead of running it.
_RUNS_PROGRAMS = re.compile(
    r"(?:filter\..*\.(?:clean|smudge|process)|merge\..*\.driver|diff\..*\.(?:textconv|command)"
    r"|diff\.external|gpg(?:\..*)?\.program|include(?:if\..*)?\.path"
    r"|core\.(?:editor|pager|sshcommand|askpass|gitproxy|alternaterefscommand|fsmonitor"
    r"|hookspath|worktree)|sequence\.editor|credential\..*|uploadpack\..*|pager\..*|alias\..*"
    r"|remote\..*\.(?:uploadpack|receivepack|vcs)|(?:merge|diff)tool\..*)",
    re.IGNORECASE,
)


class UnsafeRepositoryError(GitFailedError):
    """The repository's own configuration would make git run a program: refused."""

    code = "unsafe_repository"
    http_status = 409

    def __init__(self, keys: Sequence[str]) -> None:
        self.returncode, self.stderr = None, ""
        RoomError.__init__(
            self,
            "仓库配置会让 git 运行外部程序，服务器不在其中运行 git (The repository's configuration "
            f"would make git run a program: {', '.join(keys[:5])}.)",
            keys=list(keys[:20]),
        )


def git_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {k: os.environ[k] for k in _PASSED_ENV if k in os.environ}
    env.update(_FIXED_ENV)
    if extra:
        env.update(extra)
    return env


def check_repository(cwd: Path) -> None:
    """Raise :class:`UnsafeRepositoryError` if the repository at ``cwd`` (its own config, and a
    worktree's) sets a key that runs a program. Outside a repository: nothing to check."""
    keys: list[str] = []
    for scope in ("--local", "--worktree"):
        try:
            proc = subprocess.run(
                ["git", *_SAFE_CONFIG, "config", scope, "--name-only", "--list"],
                cwd=cwd,
                env=git_env(),
                capture_output=True,
                timeout=GIT_TIMEOUT_SECS,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            return  # the command itself will meet the same problem and say so
        if proc.returncode != 0:
            continue  # not a repository, or no worktree config
        names = proc.stdout.decode("utf-8", "replace").split()
        keys += [k for k in names if _RUNS_PROGRAMS.fullmatch(k) and k not in keys]
    if keys:
        raise UnsafeRepositoryError(keys)


def run_git(
    cwd: Path,
    *args: str,
    check: bool = True,
    timeout: float = GIT_TIMEOUT_SECS,
    env: Mapping[str, str] | None = None,
    stdin: str | None = None,
) -> GitRun:
    """Run ``git <args>`` in ``cwd``. With ``check``, a non-zero exit raises GitFailedError;
    a timeout or a missing git/cwd always does; a repository configured to run programs raises
    :class:`UnsafeRepositoryError` before git runs in it."""
    check_repository(cwd)
    argv = ["git", *_SAFE_CONFIG, *args]
    try:
        proc = subprocess.run(
            argv,
            cwd=cwd,
            env=git_env(env),
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


def run_git_capped(
    cwd: Path,
    *args: str,
    max_bytes: int,
    timeout: float = GIT_TIMEOUT_SECS,
    env: Mapping[str, str] | None = None,
) -> tuple[bytes, bool]:
    """Run ``git <args>`` and keep at most ``max_bytes`` of stdout; ``(output, truncated)``.

    git is killed as soon as the cap is passed, so a huge output costs neither memory nor time.
    """
    check_repository(cwd)
    argv = ["git", *_SAFE_CONFIG, *args]
    timed_out = threading.Event()
    with tempfile.TemporaryFile() as errfile:
        try:
            proc = subprocess.Popen(
                argv,
                cwd=cwd,
                env=git_env(env),
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
