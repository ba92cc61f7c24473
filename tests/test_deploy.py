"""docs/deploy.md's nginx and Caddy samples in front of a real ``room serve``: Debian's nginx
and Caddy, each started as a private process (its own configuration, pid, logs, storage and
temporary folders in the test's folder, in the foreground, a free port on 127.0.0.1) with the
configuration read from the doc itself, with TLS from a self-signed certificate made with
``openssl``. Real Chromium opens the login link the server printed (the proxy's https URL, from
``public_url``), signs in, and chats over the proxied WebSocket: the lead agent's answer comes
back on it, and the proxy's access log shows the socket's upgrade (101)."""

# The chromium fixture is imported from tests/support/browser.py and used as a test argument,
# which linters read as an unused import redefined.
# ruff: noqa: F401, F811

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, expect

from room.settings import Settings
from tests.support.browser import EXPECT_TIMEOUT_MS, chromium, screenshot
from tests.support.procs import free_port
from tests.support.server import ServerProcess

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[1]
DEPLOY_DOC = ROOT / "docs" / "deploy.md"
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
CADDY = shutil.which("caddy") or "/usr/bin/caddy"
START_TIMEOUT_SECS = 10

# What the test changes in the doc's site configuration, each of which must be in it (a sample
# that no longer says this fails here, rather than being tested half).
ADDRESSES = {
    "    listen [::]:443 ssl http2;\n": "",  # tests talk to 127.0.0.1 only
    "listen 443 ssl http2;": "listen 127.0.0.1:{proxy_port} ssl http2;",
    "server 127.0.0.1:8470;": "server 127.0.0.1:{room_port};",
    "/etc/letsencrypt/live/room.example.com/": "{certs}/",
}

# The doc's site configuration goes inside this http block. Everything nginx writes is in the
# temporary folder; as root, the workers run as root too (they would be ``nobody``, who cannot
# enter pytest's private temporary folders).
NGINX_CONF = """daemon off;
{user}worker_processes 1;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log info;
events {{ worker_connections 256; }}
http {{
    access_log {tmp}/access.log;
    client_body_temp_path {tmp}/client_body;
    proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi;
    uwsgi_temp_path {tmp}/uwsgi;
    scgi_temp_path {tmp}/scgi;
{site}
}}
"""


# The same for the Caddyfile: the site's address becomes this test's, with the test's certificate
# and bound to 127.0.0.1; an access log is added (the test reads the socket's upgrade there).
CADDY_ADDRESSES = {
    "room.example.com {": "https://127.0.0.1:{proxy_port} {{\n\tbind 127.0.0.1\n"
    "\ttls {certs}/fullchain.pem {certs}/privkey.pem\n"
    "\tlog {{\n\t\toutput file {tmp}/access.log\n\t\tformat json\n\t}}",
    "reverse_proxy 127.0.0.1:8470 {": "reverse_proxy 127.0.0.1:{room_port} {{",
}
# Caddy's global options: no admin endpoint, nothing written outside the test's folder, no
# redirect listener on port 80, no change to the system's trust store.
CADDY_GLOBAL = """{{
\tadmin off
\tstorage file_system {tmp}/storage
\tskip_install_trust
\tauto_https disable_redirects
\thttp_port {http_port}
}}
"""


def blocks(language: str) -> list[str]:
    text = DEPLOY_DOC.read_text(encoding="utf-8")
    return re.findall(rf"```{language}\n(.*?)```", text, re.S)


def nginx_blocks() -> list[str]:
    return blocks("nginx")


def templated(sample: str, addresses: dict[str, str], **values: Any) -> str:
    """A sample of the doc with this test's addresses; each must be in it."""
    for old, new in addresses.items():
        assert old in sample, f"docs/deploy.md's sample no longer has {old!r}"
        sample = sample.replace(old, new.format(**values))
    return sample


def site_config(proxy_port: int, room_port: int, certs: Path) -> str:
    """The doc's first nginx block, with this test's addresses and certificate."""
    return templated(nginx_blocks()[0], ADDRESSES, proxy_port=proxy_port, room_port=room_port,
                     certs=certs)  # fmt: skip


def self_signed(folder: Path) -> None:
    folder.mkdir()
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(folder / "privkey.pem"), "-out", str(folder / "fullchain.pem")],
        check=True, capture_output=True, timeout=30,
    )  # fmt: skip


def listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


@dataclass
class Proxy:
    name: str
    origin: str
    tmp: Path
    server: ServerProcess

    @property
    def access_log(self) -> str:
        return (self.tmp / "access.log").read_text()


def start_nginx(tmp: Path, proxy_port: int, room_port: int) -> subprocess.Popen[bytes]:
    if not Path(NGINX).exists():
        pytest.skip("nginx is not installed (apt-get install nginx; ./scripts/test does)")
    conf = tmp / "nginx.conf"
    conf.write_text(
        NGINX_CONF.format(
            tmp=tmp,
            user="user root;\n" if os.geteuid() == 0 else "",
            site=site_config(proxy_port, room_port, tmp / "certs"),
        )
    )
    command = [NGINX, "-p", f"{tmp}/", "-c", str(conf), "-e", str(tmp / "error.log")]
    check = subprocess.run([*command, "-t"], capture_output=True, text=True, timeout=30)
    assert check.returncode == 0, check.stderr
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def start_caddy(tmp: Path, proxy_port: int, room_port: int) -> subprocess.Popen[bytes]:
    if not Path(CADDY).exists():
        pytest.skip("caddy is not installed (apt-get install caddy; ./scripts/test does)")
    [sample] = blocks("caddy")
    conf = tmp / "Caddyfile"
    conf.write_text(
        CADDY_GLOBAL.format(tmp=tmp, http_port=free_port())
        + templated(
            sample,
            CADDY_ADDRESSES,
            proxy_port=proxy_port,
            room_port=room_port,
            certs=tmp / "certs",
            tmp=tmp,
        )
    )
    # Caddy's own files (autosave, locks) under the test's folder, not the user's home.
    env = {**os.environ, "HOME": str(tmp), "XDG_DATA_HOME": str(tmp), "XDG_CONFIG_HOME": str(tmp)}
    command = [CADDY, "run", "--config", str(conf), "--adapter", "caddyfile"]
    check = subprocess.run(
        [CADDY, "validate", "--config", str(conf), "--adapter", "caddyfile"],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    assert check.returncode == 0, check.stderr
    with (tmp / "error.log").open("wb") as log:
        return subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)


PROXIES = {"nginx": start_nginx, "caddy": start_caddy}


@pytest.fixture(params=sorted(PROXIES))
def proxied(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Proxy]:
    proxy_port = free_port()
    origin = f"https://127.0.0.1:{proxy_port}"
    tmp = tmp_path / "proxy"
    tmp.mkdir()
    self_signed(tmp / "certs")
    server = ServerProcess(tmp_path / "data", env={"ROOM_PUBLIC_URL": origin}).start()
    proxy: subprocess.Popen[bytes] | None = None
    try:
        proxy = PROXIES[request.param](tmp, proxy_port, server.port)
        deadline = time.monotonic() + START_TIMEOUT_SECS
        while not listening(proxy_port):
            assert proxy.poll() is None, (tmp / "error.log").read_text()
            assert time.monotonic() < deadline, f"{request.param} did not listen"
            time.sleep(0.05)
        yield Proxy(request.param, origin, tmp, server)
    finally:
        if proxy is not None:
            # Graceful: nginx's master ends its workers on SIGQUIT, Caddy stops on SIGINT.
            proxy.send_signal(signal.SIGQUIT if request.param == "nginx" else signal.SIGINT)
            try:
                proxy.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proxy.kill()
                proxy.wait()
        server.stop()


def test_the_systemd_unit_verifies(tmp_path: Path) -> None:
    """systemd-analyze verify finds nothing to say about the doc's unit (a misspelt key, a bad
    value or a missing program would be said), run with this venv's ``room`` as its program."""
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed (Debian's systemd package)")
    [unit] = blocks("ini")
    program = Path(sys.executable).with_name("room")
    assert program.exists(), program
    unit = templated(unit, {"/srv/room/venv/bin/room": str(program)})
    (tmp_path / "room.service").write_text(unit)
    done = subprocess.run(
        [analyze, "verify", str(tmp_path / "room.service")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert (done.returncode, done.stdout + done.stderr) == (0, "")
    # The same check speaks up when the unit is wrong.
    (tmp_path / "room.service").write_text(unit.replace("UMask=0077", "UMask=0o77"))
    done = subprocess.run(
        [analyze, "verify", str(tmp_path / "room.service")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert "Failed to parse mode value, ignoring: 0o77" in done.stderr


def test_the_doc_s_upload_limit_is_the_server_s() -> None:
    """The sample's client_max_body_size is the default attachment_max_bytes."""
    size = re.search(r"client_max_body_size (\d+)m;", nginx_blocks()[0])
    assert size is not None
    assert int(size.group(1)) * 1024 * 1024 == Settings().attachment_max_bytes
    caddy = re.search(r"max_size (\d+)MiB", DEPLOY_DOC.read_text(encoding="utf-8"))
    assert (
        caddy is not None and int(caddy.group(1)) * 1024 * 1024 == Settings().attachment_max_bytes
    )


def test_chromium_signs_in_and_chats_through_the_proxy(
    chromium: Browser, proxied: Proxy, request: pytest.FixtureRequest
) -> None:
    server = proxied.server
    # The link the server printed is the proxy's, over TLS.
    assert server.login_url.startswith(f"{proxied.origin}/login/")
    context = chromium.new_context(ignore_https_errors=True, locale="zh-CN")
    context.set_default_timeout(EXPECT_TIMEOUT_MS)
    try:
        page = context.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(server.login_url)
        page.get_by_role("button", name=re.compile("登录")).click()
        expect(page.locator("#app")).to_be_visible()
        assert page.url.startswith(proxied.origin)
        cookie = next(c for c in context.cookies() if c["name"] == "room_session")
        assert cookie["secure"] is True  # public_url is https

        page.locator(".project-link", has_text="演示项目").click()
        expect(page.locator("#conn-state")).to_have_attribute("data-status", "open")
        text = f"经过 {proxied.name} 的消息"
        page.locator("#draft").fill(text)
        page.locator("#draft").press("Enter")
        # Ours, and the lead's echo pushed back over the proxied socket.
        expect(page.locator(".msg", has_text=text)).to_have_count(2)
        expect(page.locator(".msg", has_text="builtin/echo").last).to_contain_text(text)
        screenshot(page, f"deploy-through-{proxied.name}")
        assert errors == []
    finally:
        context.close()
    # A proxy writes an upgraded connection's line when it ends (the context closed it just now):
    # nginx with status 101, Caddy 2.6 with status 0 and the handshake's answer headers.
    upgraded = r'"GET /ws HTTP/1\.1" 101 |"uri":"/ws"(?=.*"Sec-Websocket-Accept")'
    deadline = time.monotonic() + 10
    while not re.search(upgraded, proxied.access_log) and time.monotonic() < deadline:
        time.sleep(0.1)
    log = proxied.access_log
    assert re.search(upgraded, log), [line for line in log.splitlines() if "/ws" in line]
    # (the sign-in form posts to /login?lang=…, the page's language)
    signed_in = (
        r'"POST /login(\?\S*)? HTTP/[12](\.\d)?" 303 |"uri":"/login(\?[^"]*)?".*"status":303'
    )
    assert re.search(signed_in, log)
