"""docs/deploy.md's nginx sample in front of a real ``room serve``: Debian's nginx, started as a
private process (its own prefix, configuration, pid, logs and temporary folders, ``daemon off``,
a free port on 127.0.0.1) with the site configuration read from the doc itself, with TLS from a
self-signed certificate made with ``openssl``. Real Chromium opens the login link the server
printed (the proxy's https URL, from ``public_url``), signs in, and chats over the proxied
WebSocket: the lead agent's answer comes back on it."""

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
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.sync_api import Browser, expect

from room.settings import Settings
from tests.support.browser import EXPECT_TIMEOUT_MS, chromium, screenshot
from tests.support.server import ServerProcess, free_port

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[1]
DEPLOY_DOC = ROOT / "docs" / "deploy.md"
NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
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


def nginx_blocks() -> list[str]:
    return re.findall(r"```nginx\n(.*?)```", DEPLOY_DOC.read_text(encoding="utf-8"), re.S)


def site_config(proxy_port: int, room_port: int, certs: Path) -> str:
    """The doc's first nginx block, with this test's addresses and certificate."""
    site = nginx_blocks()[0]
    for old, new in ADDRESSES.items():
        assert old in site, f"docs/deploy.md's nginx sample no longer has {old!r}"
        site = site.replace(old, new.format(proxy_port=proxy_port, room_port=room_port,
                                            certs=certs))  # fmt: skip
    return site


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
    origin: str
    tmp: Path
    server: ServerProcess

    @property
    def access_log(self) -> str:
        return (self.tmp / "access.log").read_text()


@pytest.fixture
def proxied(tmp_path: Path) -> Iterator[Proxy]:
    if not Path(NGINX).exists():
        pytest.skip("nginx is not installed (apt-get install nginx-light; ./scripts/test does)")
    proxy_port = free_port()
    origin = f"https://127.0.0.1:{proxy_port}"
    server = ServerProcess(tmp_path / "data", env={"ROOM_PUBLIC_URL": origin}).start()
    tmp = tmp_path / "nginx"
    tmp.mkdir()
    self_signed(tmp / "certs")
    conf = tmp / "nginx.conf"
    conf.write_text(
        NGINX_CONF.format(
            tmp=tmp,
            user="user root;\n" if os.geteuid() == 0 else "",
            site=site_config(proxy_port, server.port, tmp / "certs"),
        )
    )
    check = subprocess.run(
        [NGINX, "-t", "-p", f"{tmp}/", "-c", str(conf), "-e", str(tmp / "error.log")],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert check.returncode == 0, check.stderr
    nginx = subprocess.Popen(
        [NGINX, "-p", f"{tmp}/", "-c", str(conf), "-e", str(tmp / "error.log")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + START_TIMEOUT_SECS
        while not listening(proxy_port):
            assert nginx.poll() is None, (tmp / "error.log").read_text()
            assert time.monotonic() < deadline, "nginx did not listen"
            time.sleep(0.05)
        yield Proxy(origin, tmp, server)
    finally:
        nginx.send_signal(signal.SIGQUIT)  # graceful: the master ends its workers
        try:
            nginx.wait(timeout=10)
        except subprocess.TimeoutExpired:
            nginx.kill()
            nginx.wait()
        server.stop()


def test_the_doc_s_upload_limit_is_the_server_s() -> None:
    """The sample's client_max_body_size is the default attachment_max_bytes."""
    size = re.search(r"client_max_body_size (\d+)m;", nginx_blocks()[0])
    assert size is not None
    assert int(size.group(1)) * 1024 * 1024 == Settings().attachment_max_bytes
    caddy = re.search(r"max_size (\d+)MB", DEPLOY_DOC.read_text(encoding="utf-8"))
    assert (
        caddy is not None and int(caddy.group(1)) * 1024 * 1024 == Settings().attachment_max_bytes
    )


def test_chromium_signs_in_and_chats_through_nginx(chromium: Browser, proxied: Proxy) -> None:
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
        page.locator("#draft").fill("经过 nginx 的消息")
        page.locator("#draft").press("Enter")
        mine = page.locator(".msg", has_text="经过 nginx 的消息")
        # Ours, and the lead's echo pushed back over the proxied socket.
        expect(mine).to_have_count(2)
        expect(page.locator(".msg", has_text="builtin/echo").last).to_contain_text("经过 nginx")
        screenshot(page, "deploy-through-nginx")
        assert errors == []
    finally:
        context.close()
    # nginx writes an upgraded connection's line when it ends (the context closed it just now).
    upgraded = r'"GET /ws HTTP/1\.1" 101 '
    deadline = time.monotonic() + 10
    while not re.search(upgraded, proxied.access_log) and time.monotonic() < deadline:
        time.sleep(0.1)
    log = proxied.access_log
    assert re.search(upgraded, log), log
    assert re.search(r'"POST /login HTTP/[12](\.\d)?" 303 ', log), log
