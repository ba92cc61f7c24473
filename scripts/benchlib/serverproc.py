"""Start the real server (or a reference app) in a subprocess pinned to the server core.

A fresh data folder is made first as the server makes one, with the demo project's lead agent
paused (see :func:`benchlib.corpus.make_data_folder`): the workloads measure the messages they
send, not the built-in echo agent's replies.

``python -m room serve --data DIR --port P --log-level warning`` runs with its CPU affinity set
to ``SERVER_CPU`` before ``exec`` (its writer and reader threads inherit it), a raised open-file
limit, and the per-member send rate limiter opened wide so the bench measures the server, not its
throttle. Sign-in is the one a browser does: the one-time link the server prints, ``POST /login``,
the session cookie from the ``303``. Every connection of a workload may share that cookie.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchlib.cores import SERVER_CPU, pin_to, raise_nofile

START_TIMEOUT_SECS = 60.0
PROFILE_ENV = "BENCH_PROFILE_DIR"
WIDE_OPEN_LIMITER = {"ROOM_SEND_RATE_PER_SEC": "10000000", "ROOM_SEND_BURST": "10000000"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Process:
    """A subprocess writing to a log file, stopped with SIGTERM (then SIGKILL)."""

    argv: list[str]
    log_path: Path
    env: dict[str, str] = field(default_factory=dict)
    cwd: Path | None = None
    proc: subprocess.Popen[bytes] | None = None
    pinned: bool = True  # to SERVER_CPU; False: every core (the scheduler places it)

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("wb") as log:
            self.proc = subprocess.Popen(
                self.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **self.env},
                cwd=self.cwd,
                preexec_fn=pin_to(SERVER_CPU) if self.pinned else raise_nofile,
            )

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for_log(self, pattern: str, deadline: float) -> re.Match[str]:
        assert self.proc is not None
        while time.monotonic() < deadline:
            found = re.search(pattern, self.log())
            if found:
                return found
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.argv[:4]} exited during start:\n{self.log()}")
            time.sleep(0.05)
        raise RuntimeError(f"{self.argv[:4]} did not start in time:\n{self.log()}")

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def http_request(
    port: int,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
    timeout: float = 10.0,
) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def wait_http(port: int, path: str, deadline: float) -> None:
    while time.monotonic() < deadline:
        try:
            status, _, _ = http_request(port, "GET", path)
            if status == 200:
                return
        except OSError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"nothing answered on 127.0.0.1:{port}{path}")


def wait_port(port: int, deadline: float) -> None:
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port}")


def start_reference(workdir: Path, module: str) -> tuple[Process, int]:
    """A reference server (``benchlib.refapp`` or ``benchlib.floor``) on the server core."""
    port = free_port()
    scripts = str(Path(__file__).resolve().parent.parent)
    path = os.pathsep.join(p for p in (scripts, os.environ.get("PYTHONPATH", "")) if p)
    process = Process(
        [sys.executable, "-m", module, "--port", str(port)],
        workdir / f"{module.rsplit('.', 1)[-1]}-{port}.log",
        env={"PYTHONPATH": path},
    )
    process.start()
    wait_port(port, time.monotonic() + START_TIMEOUT_SECS)
    return process, port


@dataclass
class RoomServer:
    """The real server on a data folder; ``cookie`` is the owner's session after :meth:`start`."""

    data: Path
    env: dict[str, str] = field(default_factory=dict)
    port: int = field(default_factory=free_port)
    process: Process | None = None
    cookie: str = ""
    profile: Any = None
    pinned: bool = True
    # An empty PostgreSQL database: seeded as the data folder would be, and served from
    # (``--database``; the folder still holds the lock and reports).
    database_url: str = ""

    def start(self) -> RoomServer:
        if self.database_url:
            from benchlib.corpus import make_data_folder  # imports room: only when needed

            make_data_folder(self.data, database_url=self.database_url)
        elif not (self.data / "room.sqlite").exists():
            from benchlib.corpus import make_data_folder  # imports room: only when needed

            make_data_folder(self.data)
        argv = [sys.executable, "-m", "room", "serve", "--data", str(self.data.resolve())]
        if self.database_url:
            argv += ["--database", self.database_url]
        argv += ["--port", str(self.port), "--log-level", "warning"]
        self.process = Process(
            argv,
            self.data.parent / f"{self.data.name}-server.log",
            env={**WIDE_OPEN_LIMITER, "PYTHONUNBUFFERED": "1", **self.env},
            # Not the caller's folder: ``python -m`` puts the working folder first on sys.path,
            # which would shadow the PYTHONPATH that --room-src sets when run from a checkout.
            cwd=self.data.resolve().parent,
            pinned=self.pinned,
        )
        self.process.start()
        deadline = time.monotonic() + START_TIMEOUT_SECS
        link = self.process.wait_for_log(r"http://\S+/login/(\S+)", deadline)
        wait_http(self.port, "/healthz", deadline)
        self.cookie = self.login(link.group(1))
        profile_dir = os.environ.get(PROFILE_ENV)
        if profile_dir:  # sample the whole life of this server (scripts/bench --profile)
            from benchlib.profiler import Profile

            self.profile = Profile(self.pid, Path(profile_dir) / f"{self.data.name}.txt")
            self.profile.__enter__()
        return self

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    @property
    def headers(self) -> dict[str, str]:
        return {"Cookie": f"room_session={self.cookie}"}

    def login(self, secret: str) -> str:
        body = urllib.parse.urlencode({"secret": secret}).encode()
        origin = f"http://127.0.0.1:{self.port}"
        status, headers, raw = http_request(
            self.port,
            "POST",
            "/login",
            body,
            {"Content-Type": "application/x-www-form-urlencoded", "Origin": origin},
        )
        found = re.search(r"room_session=([^;]+)", headers.get("set-cookie", ""))
        if status != 303 or found is None:
            raise RuntimeError(f"login failed: {status} {raw[:200]!r}")
        return found.group(1)

    def healthz(self, timeout: float = 10.0) -> dict[str, Any]:
        status, _, raw = http_request(self.port, "GET", "/healthz", timeout=timeout)
        if status != 200:
            raise RuntimeError(f"/healthz answered {status}")
        data: dict[str, Any] = json.loads(raw)
        return data

    def stop(self) -> None:
        if self.profile is not None:
            self.profile.__exit__()
            self.profile = None
        if self.process is not None:
            self.process.stop()


def cpu_seconds(pid: int) -> dict[str, float]:
    """CPU seconds used so far by a process: ``main`` (the event-loop thread) and ``threads``
    (every other thread, those that have ended included: the process's total less main's)."""
    tick = os.sysconf("SC_CLK_TCK")

    def used(stat: str) -> float:
        try:
            with open(stat) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            return 0.0
        return (int(fields[11]) + int(fields[12])) / tick

    total, main = used(f"/proc/{pid}/stat"), used(f"/proc/{pid}/task/{pid}/stat")
    return {"main": main, "threads": max(0.0, total - main)}
