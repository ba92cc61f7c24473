"""A private PostgreSQL for the tests: ``initdb`` into a temporary folder, ``postgres`` on a free
port of 127.0.0.1, stopped when the session ends. Nothing relies on a service already running.

* Binaries: ``$ROOM_PG_BIN`` if set, else the folder of ``initdb`` on ``PATH``, else the newest
  ``/usr/lib/postgresql/<version>/bin`` (where Debian's ``postgresql`` package puts them, off
  ``PATH``). ``./scripts/test`` installs that package when none is found; without it the tests
  that need PostgreSQL *fail* saying so (never a silent skip).
* As root (CI, the developers' machines), PostgreSQL refuses to run: ``initdb`` and ``postgres``
  run as the ``postgres`` account Debian's package creates, or ``nobody``, through
  ``subprocess``'s ``user=``/``group=`` (no ``sudo``, ``runuser`` or ``setpriv`` needed), in a
  folder of ``/tmp`` chowned to that account.
* The server gets ``PR_SET_PDEATHSIG``: if the test process dies (``kill -9``, a timeout), the
  postmaster receives SIGINT (fast shutdown) instead of living on; a later session removes the
  folders that such a death left behind (:func:`_sweep_stale`).
* Under pytest-xdist each worker that runs a PostgreSQL test starts its own cluster (the fixture
  is session-scoped, and a session is one worker), lazily: a worker that receives no such file
  starts none. One cluster shared by every worker would need a cross-process lock and a
  last-one-out shutdown that xdist does not give; a cluster costs about a second. Each test gets
  a fresh database of its own (``pg_database``), dropped after it.
* Speed over durability: ``fsync``, ``synchronous_commit`` and ``full_page_writes`` are off. The
  durability promises are PostgreSQL's own; these tests check the schema and the SQL.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import pwd
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.support.procs import die_with_parent, free_port

log = logging.getLogger(__name__)

READY_TIMEOUT_SECS = 30.0
STOP_TIMEOUT_SECS = 10.0
SUPERUSER = "room"
DIR_PREFIX = "room-pg-"
# Speed over durability (see the module's docstring), and a small footprint per worker.
SERVER_SETTINGS: tuple[str, ...] = (
    "fsync=off",
    "synchronous_commit=off",
    "full_page_writes=off",
    "max_connections=50",
    "shared_buffers=32MB",
)
_ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C"}
MISSING_HINT = (
    "PostgreSQL's server binaries (initdb, postgres) were not found: set ROOM_PG_BIN to their "
    "folder, or install Debian's package `postgresql` (./scripts/test installs it when missing, "
    "as it does chromium). The PostgreSQL tests cannot run without them."
)


class PostgresMissingError(RuntimeError):
    """The server binaries are not installed: the tests that need them fail with this."""


def find_bin_dir(debian_root: Path = Path("/usr/lib/postgresql")) -> Path:
    """The folder holding ``initdb`` and ``postgres``, or :class:`PostgresMissingError`."""
    candidates: list[Path] = []
    if os.environ.get("ROOM_PG_BIN"):
        candidates.append(Path(os.environ["ROOM_PG_BIN"]))
    on_path = shutil.which("initdb")
    if on_path:
        candidates.append(Path(on_path).resolve().parent)

    def version(path: Path) -> tuple[int, ...]:
        return tuple(int(part) for part in re.findall(r"\d+", path.parent.name))

    candidates += sorted(debian_root.glob("*/bin"), key=version, reverse=True)
    for folder in candidates:
        if (folder / "initdb").is_file() and (folder / "postgres").is_file():
            return folder
    raise PostgresMissingError(MISSING_HINT)


@dataclass(frozen=True, slots=True)
class _Account:
    uid: int
    gid: int
    name: str


def _server_account() -> _Account | None:
    """Who runs the server: ``None`` (this process's user) unless we are root."""
    if os.geteuid() != 0:
        return None
    for name in ("postgres", "nobody"):
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            continue
        return _Account(entry.pw_uid, entry.pw_gid, name)
    raise PostgresMissingError(
        "running as root, and neither a postgres nor a nobody account exists"
    )


def _sweep_stale(parent: Path) -> None:
    """Remove the folders of clusters whose test process died without cleaning up."""
    for folder in parent.glob(f"{DIR_PREFIX}*"):
        try:
            owner = int((folder / "owner.pid").read_text())
            os.kill(owner, 0)
        except ProcessLookupError:
            shutil.rmtree(folder, ignore_errors=True)
        except (OSError, ValueError):
            continue


@dataclass(slots=True)
class PostgresCluster:
    """One private cluster; :meth:`start` then :meth:`stop` (or use it as a context manager)."""

    bin_dir: Path
    folder: Path | None = None
    port: int = 0
    version: str = ""
    started_secs: float = 0.0  # initdb + start until ready (reported by the tests' summary)
    _proc: subprocess.Popen[bytes] | None = None
    _names: Iterator[int] = field(default_factory=itertools.count)

    def start(self) -> PostgresCluster:
        began = time.perf_counter()
        account = _server_account()
        parent = Path(tempfile.gettempdir() if account is None else "/tmp")
        _sweep_stale(parent)
        self.folder = Path(tempfile.mkdtemp(prefix=DIR_PREFIX, dir=parent))
        (self.folder / "owner.pid").write_text(str(os.getpid()))
        if account is not None:
            os.chown(self.folder, account.uid, account.gid)
        try:
            self._initdb(account)
            self._launch(account)
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        self.started_secs = time.perf_counter() - began
        return self

    def _initdb(self, account: _Account | None) -> None:
        assert self.folder is not None
        args = [str(self.bin_dir / "initdb"), "--pgdata", str(self.folder / "data")]
        args += ["--auth=trust", f"--username={SUPERUSER}", "--encoding=UTF8", "--locale=C"]
        args += ["--no-sync", "--no-instructions"]
        done = subprocess.run(
            args,
            cwd=self.folder,
            capture_output=True,
            text=True,
            timeout=120,
            env=_ENV,
            check=False,
            user=None if account is None else account.uid,
            group=None if account is None else account.gid,
            extra_groups=None if account is None else [],
        )
        if done.returncode != 0:
            raise RuntimeError(f"initdb failed ({done.returncode}): {done.stderr.strip()[-2000:]}")

    def restart(self) -> None:
        """Stop the server as an operator's restart does (fast shutdown: every connection is
        cut, open transactions roll back) and start it again on the same port and data: a
        PostgreSQL restart under the clients' feet."""
        proc = self._proc
        assert proc is not None and self.folder is not None
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=STOP_TIMEOUT_SECS)
        self._launch(_server_account(), port=self.port)
        self._wait_ready()

    def _launch(self, account: _Account | None, port: int | None = None) -> None:
        assert self.folder is not None
        self.port = port or free_port()
        args = [str(self.bin_dir / "postgres"), "-D", str(self.folder / "data")]
        args += ["-h", "127.0.0.1", "-p", str(self.port), "-k", str(self.folder)]
        for setting in SERVER_SETTINGS:
            args += ["-c", setting]
        with open(self.folder / "server.log", "ab") as logfile:  # the server keeps its own fd
            self._proc = subprocess.Popen(
                args,
                cwd=self.folder,
                stdin=subprocess.DEVNULL,
                stdout=logfile,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=die_with_parent(
                    signal.SIGINT
                ),  # armed after the switch of user (preexec_fn runs after it)
                env=_ENV,
                user=None if account is None else account.uid,
                group=None if account is None else account.gid,
                extra_groups=None if account is None else [],
            )

    def _wait_ready(self) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + READY_TIMEOUT_SECS
        while True:
            if self._proc.poll() is not None:
                raise RuntimeError(
                    f"postgres exited with {self._proc.returncode} while starting:\n{self.log_tail()}"
                )
            try:
                with psycopg.connect(self.dsn("postgres"), connect_timeout=2) as conn:
                    row = conn.execute("SHOW server_version").fetchone()
                    self.version = str(row[0]) if row else ""
                    return
            except psycopg.OperationalError:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"postgres not ready after {READY_TIMEOUT_SECS:.0f} s:\n{self.log_tail()}"
                    ) from None
                time.sleep(0.02)

    def log_tail(self, lines: int = 30) -> str:
        if self.folder is None:
            return ""
        try:
            text = (self.folder / "server.log").read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def dsn(self, dbname: str) -> str:
        """A libpq URL for ``dbname`` on this cluster, over TCP on 127.0.0.1."""
        return f"postgresql://{SUPERUSER}@127.0.0.1:{self.port}/{dbname}"

    def create_database(self, locale: str | None = None) -> str:
        """A new empty database (from ``template0``; in ``locale``, e.g. ``C.UTF-8``, instead
        of the cluster's ``C``); returns its name."""
        name = f"t{os.getpid()}_{next(self._names)}"
        where = "" if locale is None else f" LC_COLLATE '{locale}' LC_CTYPE '{locale}'"
        with psycopg.connect(self.dsn("postgres"), autocommit=True) as conn:
            conn.execute(
                f'CREATE DATABASE "{name}" TEMPLATE template0 STRATEGY file_copy{where}'.encode()
            )
        return name

    def drop_database(self, name: str) -> None:
        with psycopg.connect(self.dsn("postgres"), autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def stop(self) -> None:
        """Fast shutdown (SIGINT: clients cut, a clean checkpoint), SIGKILL to the whole
        process group if it has not exited in time; then the folder goes."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=STOP_TIMEOUT_SECS)
            except subprocess.TimeoutExpired:
                log.warning("postgres did not stop in %.0f s; killing it", STOP_TIMEOUT_SECS)
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=STOP_TIMEOUT_SECS)
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    def __enter__(self) -> PostgresCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[PostgresCluster]:
    """This worker's private PostgreSQL cluster, started on first use, stopped at the end."""
    cluster = PostgresCluster(find_bin_dir())  # PostgresMissingError: the test fails, loudly
    with cluster:
        log.info("private PostgreSQL %s ready in %.2f s", cluster.version, cluster.started_secs)
        yield cluster


@pytest.fixture
def pg_dsn(pg_cluster: PostgresCluster) -> Iterator[str]:
    """A fresh, empty database of the private cluster for one test (dropped after it)."""
    name = pg_cluster.create_database()
    try:
        yield pg_cluster.dsn(name)
    finally:
        pg_cluster.drop_database(name)


def waiting_on(dsn: str, fragment: str) -> bool:
    """Whether a session of the database at ``dsn`` waits for a lock in a statement containing
    ``fragment`` (``pg_stat_activity``): how a two-connection test sees its second side blocked
    before it lets the first go on."""
    with psycopg.connect(dsn) as probe:
        row = probe.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
            " AND query LIKE %s",
            (f"%{fragment}%",),
        ).fetchone()
    return row is not None and row[0] >= 1


async def until_waiting(
    dsn: str, fragment: str, *, unless: asyncio.Future[Any] | None = None
) -> None:
    """Until a session waits for a lock in a statement containing ``fragment``
    (:func:`waiting_on`, read every 50 ms), or ``unless`` (the write expected to wait) is done
    first: the caller then asserts what that means."""
    while unless is None or not unless.done():
        if await asyncio.to_thread(waiting_on, dsn, fragment):
            return
        await asyncio.sleep(0.05)
