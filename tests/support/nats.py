"""A private ``nats-server`` for the cluster tests: one process on a free port of 127.0.0.1 in a
temporary folder (its log there), stopped when the session ends. Nothing relies on a service
already running (Debian's package enables one on 4222; it is neither used nor needed).

* The binary: ``$ROOM_NATS_SERVER`` if set, else ``nats-server`` on ``PATH``, else
  ``/usr/sbin/nats-server`` (Debian's package). ``./scripts/test`` installs that package when it
  is missing; without it the tests that need it *fail* saying so (never a silent skip).
* NATS core only (no JetStream, nothing on disk): the bus carries hints, the log of record is
  PostgreSQL (docs/cluster.md).
* :meth:`NatsServer.stop_for_now` and :meth:`NatsServer.resume` stop it and start it again on
  the same port: the bus going away under the room servers' feet and coming back.
* The server gets ``PR_SET_PDEATHSIG`` (SIGKILL): it does not outlive a test process that died.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.procs import die_with_parent, free_port

READY_TIMEOUT_SECS = 10.0
STOP_TIMEOUT_SECS = 5.0
MISSING_HINT = (
    "nats-server was not found: set ROOM_NATS_SERVER to it, or install Debian's package "
    "`nats-server` (./scripts/test installs it when missing). The cluster tests cannot run "
    "without it."
)


class NatsMissingError(RuntimeError):
    """The binary is not installed: the tests that need it fail with this."""


def find_binary() -> Path:
    candidates = [os.environ.get("ROOM_NATS_SERVER"), shutil.which("nats-server")]
    candidates.append("/usr/sbin/nats-server")
    for candidate in candidates:
        if candidate and Path(candidate).is_file():
            return Path(candidate)
    raise NatsMissingError(MISSING_HINT)


@dataclass(slots=True)
class NatsServer:
    """One private nats-server; :meth:`start` then :meth:`stop` (or a context manager)."""

    binary: Path
    folder: Path | None = None
    port: int = 0
    version: str = ""
    _proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self) -> NatsServer:
        self.folder = Path(tempfile.mkdtemp(prefix="room-nats-"))
        self.port = free_port()
        try:
            self._launch()
        except BaseException:
            self.stop()
            raise
        return self

    def _launch(self) -> None:
        assert self.folder is not None
        args = [str(self.binary), "-a", "127.0.0.1", "-p", str(self.port)]
        args += ["-l", str(self.folder / "server.log"), "-P", str(self.folder / "server.pid")]
        self._proc = subprocess.Popen(
            args,
            cwd=self.folder,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=die_with_parent(signal.SIGKILL),
        )
        self._wait_ready()

    def _wait_ready(self) -> None:
        """Ready when it greets a client with its ``INFO`` line."""
        assert self._proc is not None
        deadline = time.monotonic() + READY_TIMEOUT_SECS
        while True:
            if self._proc.poll() is not None:
                raise RuntimeError(
                    f"nats-server exited with {self._proc.returncode}:\n{self.log_tail()}"
                )
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as conn:
                    greeting = conn.recv(4096).decode(errors="replace")
                if greeting.startswith("INFO "):
                    marker = '"version":"'
                    at = greeting.find(marker)
                    if at >= 0:
                        self.version = greeting[at + len(marker) :].split('"', 1)[0]
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"nats-server not ready in {READY_TIMEOUT_SECS:.0f} s")
            time.sleep(0.02)

    def log_tail(self, lines: int = 30) -> str:
        if self.folder is None:
            return ""
        try:
            text = (self.folder / "server.log").read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def _halt(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=STOP_TIMEOUT_SECS)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=STOP_TIMEOUT_SECS)

    def stop_for_now(self) -> None:
        """The bus goes away (its clients see their connection drop); :meth:`resume` after."""
        self._halt()

    def resume(self) -> None:
        """Start again on the same port (the clients reconnect on their own)."""
        self._launch()

    def stop(self) -> None:
        self._halt()
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def __enter__(self) -> NatsServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@pytest.fixture
def nats_server() -> Iterator[NatsServer]:
    """A private nats-server for one test (a test may stop and resume it, so none is shared;
    one starts in a few milliseconds)."""
    server = NatsServer(find_binary())  # NatsMissingError: the test fails, loudly
    with server:
        yield server
    with contextlib.suppress(Exception):
        server.stop()
