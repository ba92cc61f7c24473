"""A real Project Room server in a subprocess, on an ephemeral port, for end-to-end tests."""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from room.cli import main as room_main
from tests.support.llm_servers import TEST_API_KEY, OpenAIServer
from tests.support.procs import die_with_parent, free_port

START_ATTEMPTS = 3  # a port taken between free_port() and the bind: start again
# A bound for a start that fails, not a speed target: a start takes 2-3 s on this machine under
# load, and over 20 s happened when the suite's four workers and other processes held both cores.
START_TIMEOUT_SECS = 60


def _listens(pid: int, port: int) -> bool:
    """Whether process ``pid`` holds a TCP socket listening on ``port`` (Linux's /proc)."""
    inodes = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port and inode in inodes:
                return True
    return False


@dataclass
class Session:
    cookie: str
    csrf: str
    user: dict[str, Any]

    @property
    def headers(self) -> dict[str, str]:
        return {"Cookie": f"room_session={self.cookie}", "X-CSRF-Token": self.csrf}


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


@dataclass
class ServerProcess:
    data: Path
    port: int = field(default_factory=free_port)
    env: dict[str, str] = field(default_factory=dict)
    # Where ``python -m room`` runs: another tree's ``room`` package is imported from there
    # (tests/test_upgrade.py runs an older release so); None is this checkout's.
    cwd: Path | None = None
    proc: subprocess.Popen[bytes] | None = None
    log_path: Path = Path()
    login_url: str = ""

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/ws"

    def start(self) -> ServerProcess:
        """Start the server and wait until it serves on its port. A port found free can be
        taken by another test's process before this server binds it (the server then exits,
        and another server would answer on that port): this one starts again on a new port."""
        for _ in range(START_ATTEMPTS):
            if self._start_once():
                return self
            self.port = free_port()
        raise RuntimeError(f"no free port was still free when the server bound it:\n{self.log}")

    def _start_once(self) -> bool:
        env = {**os.environ, "ROOM_SEND_RATE_PER_SEC": "1000", "ROOM_SEND_BURST": "2000"}
        env.update(self.env)
        self.log_path = self.data.parent / f"server-{self.port}.log"
        self.data.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("w") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "room",
                    "serve",
                    "--data",
                    str(self.data),
                    "--port",
                    str(self.port),
                    "--log-level",
                    "warning",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=self.cwd,
                # A pytest that is killed takes its servers with it. SIGKILL: a server whose
                # bus or database went with the test may not finish a graceful stop (strays
                # from older runs ignored SIGTERM); its commands' sandboxes die with it
                # (bwrap --die-with-parent) and the next start sweeps their groups.
                preexec_fn=die_with_parent(signal.SIGKILL),
            )
        deadline = time.monotonic() + START_TIMEOUT_SECS
        while time.monotonic() < deadline:
            text = self.log_path.read_text()
            found = re.search(r"(https?://\S+/login/\S+)", text)
            if found:
                self.login_url = found.group(1)
                break
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited during start:\n{text}")
            time.sleep(0.05)
        # Listening on the port itself: /healthz alone could be answered by whoever took it.
        while time.monotonic() < deadline and not _listens(self.proc.pid, self.port):
            if self.proc.poll() is not None:
                text = self.log_path.read_text()
                if "address already in use" in text:
                    return False
                raise RuntimeError(f"server exited during start:\n{text}")
            time.sleep(0.05)
        self._wait_healthy(deadline)
        return True

    @property
    def log(self) -> str:
        return self.log_path.read_text()

    def _wait_healthy(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{self.origin}/healthz", timeout=1) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"server did not become healthy:\n{self.log}")

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()

    # -- HTTP helpers ------------------------------------------------------------------------

    def fresh_login_secret(self) -> str:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert room_main(["login-link", "--data", str(self.data)]) == 0
        return out.getvalue().strip().rsplit("/", 1)[-1]

    def login(self, secret: str | None = None, **form: str) -> Session:
        secret = secret or self.fresh_login_secret()
        data = urllib.parse.urlencode({"secret": secret, **form}).encode()
        opener = urllib.request.build_opener(_NoRedirect)
        req = urllib.request.Request(
            f"{self.origin}/login", data=data, headers={"Origin": self.origin}
        )
        try:
            opener.open(req, timeout=5)
        except urllib.error.HTTPError as exc:
            if exc.code != 303:
                raise
            cookie_header = exc.headers.get("set-cookie", "")
        cookie = re.search(r"room_session=([^;]+)", cookie_header)
        assert cookie, cookie_header
        me = self.get_json("/api/me", cookie=cookie.group(1))
        return Session(cookie.group(1), me["csrf_token"], me["identity"])

    def invite(self, owner: Session, project_id: int, handle: str, name: str) -> Session:
        """A second person: the owner invites, the invitee joins with a handle and a name."""
        status, body = self.request(
            "POST", f"/api/projects/{project_id}/invites", {"role": "member"}, headers=owner.headers
        )
        assert status == 201, body
        secret = body["url"].rsplit("/", 1)[-1]
        return self.login(secret, handle=handle, display_name=name)

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        headers: dict[str, str] | None = None,
        cookie: str | None = None,
        timeout: float = 10,
    ) -> tuple[int, Any]:
        hdrs = dict(headers or {})
        if cookie:
            hdrs["Cookie"] = f"room_session={cookie}"
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            hdrs["Content-Type"] = "application/json"
        req = urllib.request.Request(f"{self.origin}{path}", data=data, headers=hdrs, method=method)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                raw = r.read()
                status = r.status
        except urllib.error.HTTPError as exc:
            raw, status = exc.read(), exc.code
        try:
            return status, json.loads(raw)
        except ValueError:
            return status, raw.decode(errors="replace")

    def get_json(self, path: str, cookie: str | None = None, **kw: Any) -> Any:
        status, body = self.request("GET", path, cookie=cookie, **kw)
        assert status == 200, (status, body)
        return body

    def agent_token(self, project: str, handle: str) -> str:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            assert room_main(["member", "token", "--data", str(self.data), project, handle]) == 0
        return out.getvalue().strip()


def start_with_openai(data: Path, llm: OpenAIServer, **env: str) -> ServerProcess:
    """A started server whose OpenAI-compatible provider is ``llm`` (a local server speaking the
    wire protocol), with any further ``ROOM_*`` or provider variables in ``env``."""
    provider = {"OPENAI_BASE_URL": llm.base_url, "OPENAI_API_KEY": TEST_API_KEY}
    return ServerProcess(data, env={**provider, **env}).start()
