"""Identity over real HTTP: one-time links, cookie flags, invites, login CSRF, logout."""

from __future__ import annotations

import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from email.message import Message

import anyio
import pytest
from websockets.exceptions import ConnectionClosed

from tests.support.server import ServerProcess, _NoRedirect
from tests.support.wsclient import Client


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    """One server for the module: each test signs in afresh with its own link and touches only
    the people and projects it makes (handles differ from test to test)."""
    proc = ServerProcess(tmp_path_factory.mktemp("auth") / "data").start()
    try:
        yield proc
    finally:
        proc.stop()


def post_form(
    server: ServerProcess, path: str, form: dict[str, str], headers: dict[str, str]
) -> tuple[int, Message, str]:
    request = urllib.request.Request(
        f"{server.origin}{path}",
        data=urllib.parse.urlencode(form).encode(),
        headers=headers,
    )
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(request, timeout=10) as response:
            return response.status, response.headers, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, exc.read().decode()


def test_a_login_link_works_once_and_sets_a_strict_cookie(server: ServerProcess) -> None:
    secret = server.fresh_login_secret()
    status, headers, _ = post_form(server, "/login", {"secret": secret}, {"Origin": server.origin})
    assert status == 303
    cookie = headers["Set-Cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie.replace("Strict", "strict")
    again, _, body = post_form(server, "/login", {"secret": secret}, {"Origin": server.origin})
    assert again == 401 and "unknown, used or expired" in body


def test_login_from_another_site_is_refused(server: ServerProcess) -> None:
    secret = server.fresh_login_secret()
    status, headers, _ = post_form(
        server, "/login", {"secret": secret}, {"Origin": "http://evil.example"}
    )
    assert status == 403 and headers.get("Set-Cookie") is None
    # The link was not burnt by the refused attempt.
    status, _, _ = post_form(server, "/login", {"secret": secret}, {"Origin": server.origin})
    assert status == 303


def test_html_pages_carry_a_strict_csp(server: ServerProcess) -> None:
    with urllib.request.urlopen(f"{server.origin}/", timeout=5) as response:
        csp = response.headers["Content-Security-Policy"]
        assert "script-src 'self'" in csp and "default-src 'none'" in csp
        assert "img-src 'self'" in csp and "frame-ancestors 'none'" in csp


def test_invites_make_new_people_and_add_signed_in_people(server: ServerProcess) -> None:
    owner = server.login()
    status, body = server.request(
        "POST", "/api/projects", {"name": "第二个项目"}, headers=owner.headers
    )
    assert status == 201, body
    second = body["project"]["id"]
    bob = server.invite(owner, 1, "bob", "小博")
    assert bob.user["handle"] == "bob"
    # Bob, signed in, opens an invite to the second project: he joins as himself.
    status, url = server.request(
        "POST", f"/api/projects/{second}/invites", {"role": "member"}, headers=owner.headers
    )
    invite = url["url"].rsplit("/", 1)[-1]
    with urllib.request.urlopen(
        urllib.request.Request(
            f"{server.origin}/join/{invite}", headers={"Cookie": f"room_session={bob.cookie}"}
        ),
        timeout=5,
    ) as response:
        assert "@bob" in response.read().decode()
    status, headers, _ = post_form(
        server,
        "/login",
        {"secret": invite},
        {"Origin": server.origin, "Cookie": f"room_session={bob.cookie}"},
    )
    assert status == 303 and headers.get("Set-Cookie") is None
    assert headers["Location"].endswith(f"/#/p/{second}")
    me = server.get_json("/api/me", cookie=bob.cookie)
    assert sorted(p["id"] for p in me["projects"]) == [1, second]


def test_logout_needs_the_csrf_token(server: ServerProcess) -> None:
    session = server.login()
    cookie = {"Cookie": f"room_session={session.cookie}", "Origin": server.origin}
    post_form(server, "/logout", {"csrf_token": "wrong"}, cookie)
    assert server.request("GET", "/api/me", cookie=session.cookie)[0] == 200
    status, _, _ = post_form(server, "/logout", {"csrf_token": session.csrf}, cookie)
    assert status == 303
    assert server.request("GET", "/api/me", cookie=session.cookie)[0] == 401


def test_invite_links_are_for_owners_only(server: ServerProcess) -> None:
    owner = server.login()
    bob = server.invite(owner, 1, "bobby", "Bobby")
    status, body = server.request(
        "POST", "/api/projects/1/invites", {"role": "member"}, headers=bob.headers
    )
    assert status == 403 and body["error"]["code"] == "not_owner"
    assert re.fullmatch(r"[A-Za-z0-9_-]+", owner.cookie)


@pytest.mark.anyio
@pytest.mark.usefixtures("clients")
async def test_signing_out_closes_that_sessions_sockets_only(server: ServerProcess) -> None:
    first, second = server.login(), server.login()
    gone = await Client.open(server.ws_url, cookie=first.cookie, origin=server.origin)
    kept = await Client.open(server.ws_url, cookie=second.cookie, origin=server.origin)
    await gone.wait_for("hello")
    await kept.wait_for("hello")
    cookie = {"Cookie": f"room_session={first.cookie}", "Origin": server.origin}
    status, _, _ = await anyio.to_thread.run_sync(
        lambda: post_form(server, "/logout", {"csrf_token": first.csrf}, cookie)
    )
    assert status == 303
    with pytest.raises(ConnectionClosed):
        await gone.wait_for("never")
    assert gone.ws.close_code == 4401
    await kept.send({"type": "ping", "req_id": "still"})
    assert (await kept.wait_for("pong"))["req_id"] == "still"
