"""Bad input over HTTP: each is refused with a documented code, never answered with a 500; ids
beyond SQLite's range; project limits that are strict integers and can be cleared."""

from __future__ import annotations

import contextlib
import json
import socket
from typing import Any

import pytest

from room.errors import FrameError
from room.rules.protocol import parse_client_frame
from room.store.projects import MAX_ROW_ID, row_id
from tests.support.inproc import App, error, post
from tests.support.server import ServerProcess

HUGE = "9" * 25  # digits beyond SQLite's 64-bit INTEGER


def test_row_id_takes_plain_ascii_digits_in_range() -> None:
    assert row_id("42") == 42
    assert row_id(str(MAX_ROW_ID)) == MAX_ROW_ID
    for text in ("²", "①", "٣", "", "-1", "4 2", str(MAX_ROW_ID + 1), HUGE):
        assert row_id(text) is None, text


def test_plan_keys_that_are_not_strings_are_reported(app: App, project: tuple[int, int]) -> None:
    project_id, _ = project
    for key in (["a"], {"k": 1}):
        item = {"key": key, "title": "t", "owner": "lead", "acceptance": ["能运行"]}
        status, body = post(app, f"/api/projects/{project_id}/plan", {"goal": "g", "items": [item]})
        assert (status, body["error"]["code"]) == (400, "plan_invalid")
        [problem] = body["error"]["details"]["problems"]
        assert (problem["code"], problem["index"]) == ("bad_item", 0)


@pytest.mark.parametrize("ref", ["%C2%B2", "%E2%91%A0", HUGE])
def test_task_refs_in_unicode_digits_or_out_of_range_are_not_found(
    app: App, project: tuple[int, int], ref: str
) -> None:
    project_id, _ = project
    status, body = app.request(
        "GET", f"/api/projects/{project_id}/tasks/{ref}", cookie=app.owner_cookie
    )
    assert (status, body["error"]["code"]) == (404, "no_task")


@pytest.mark.parametrize("target", ["²", HUGE])
def test_route_targets_that_are_not_ids_are_not_found(
    app: App, project: tuple[int, int], target: str
) -> None:
    project_id, _ = project
    body = {"scope": "member", "target": target, "value": "builtin/echo", "reason": "r"}
    assert error(post(app, f"/api/projects/{project_id}/routes", body)) == (404, "no_member")


@pytest.mark.parametrize(
    "pool",
    [
        '{"models": 5}',
        '{"models": [1]}',
        '{"models": ["builtin/echo"], "enabled": "no"}',
        "[]",
        "{",
    ],
)
def test_malformed_pools_are_bad_pool(app: App, project: tuple[int, int], pool: str) -> None:
    project_id, _ = project
    body = {"scope": "pool", "value": pool, "reason": "r"}
    assert error(post(app, f"/api/projects/{project_id}/routes", body)) == (400, "bad_pool")


def test_a_good_pool_is_stored(app: App, project: tuple[int, int]) -> None:
    project_id, _ = project
    body = {"scope": "pool", "value": '{"models": ["builtin/echo"]}', "reason": "r"}
    status, result = post(app, f"/api/projects/{project_id}/routes", body)
    assert status == 200
    assert result["value"] == '{"models": ["builtin/echo"], "enabled": true}'


def test_deeply_nested_json_is_bad_json(app: App, project: tuple[int, int]) -> None:
    project_id, _ = project
    response = app.client.post(
        f"/api/projects/{project_id}/messages",
        content=b"[" * 100_000 + b"]" * 100_000,
        headers={
            "Origin": app.settings.origin,
            "Cookie": f"room_session={app.owner_cookie}",
            "X-CSRF-Token": app.csrf[app.owner_cookie],
            "Content-Type": "application/json",
        },
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "bad_json"


def test_ids_beyond_sqlite_are_refused_not_overflowed(app: App, project: tuple[int, int]) -> None:
    project_id, _ = project
    cookie = app.owner_cookie
    for path in (f"/api/projects/{HUGE}", f"/api/messages/{HUGE}"):
        assert error(app.request("GET", path, cookie=cookie)) == (404, "not_found"), path
    for path in (
        f"/api/projects/{project_id}/members/{HUGE}/role",
        f"/api/projects/{project_id}/decisions/{HUGE}/accept",
    ):
        assert error(post(app, path, {"role": "owner"} if "role" in path else {}))[0] == 404
    messages = f"/api/projects/{project_id}/messages"
    for body in ({"body": "x", "reply_to": 10**20}, {"body": "x", "chips": [10**20]}):
        assert error(post(app, messages, body)) == (400, "bad_body")
    decision = {"title": "t", "context": "c", "decision": "d", "supersedes": 10**20}
    assert error(post(app, f"/api/projects/{project_id}/decisions", decision)) == (400, "bad_body")
    assert app.request("GET", f"/api/projects/{project_id}", cookie=cookie)[0] == 200
    # A cursor past every seq pages from the latest message, however large.
    assert post(app, messages, {"body": "有一条"})[0] == 201
    status, page = app.request("GET", f"{messages}?before={HUGE}", cookie=cookie)
    assert status == 200 and page["messages"], page


@pytest.mark.parametrize("before", ["0", "-5", f"-{HUGE}"])
def test_a_history_cursor_below_one_is_refused_as_over_ws(
    app: App, project: tuple[int, int], before: str
) -> None:
    project_id, _ = project
    path = f"/api/projects/{project_id}/messages?before={before}"
    status, body = app.request("GET", path, cookie=app.owner_cookie)
    assert (status, body["error"]["code"]) == (400, "bad_query")
    frame = {"type": "history", "project_id": project_id, "before": int(before)}
    with pytest.raises(FrameError):  # the same rule as the ``history`` frame
        parse_client_frame(json.dumps(frame))


def test_a_null_limit_goes_back_to_the_server_default(app: App, project: tuple[int, int]) -> None:
    project_id, _ = project
    limits = f"/api/projects/{project_id}/limits"
    assert post(app, limits, {"agent_turn_cap": 3, "max_steps": 5}) == (
        200,
        {"limits": {"agent_turn_cap": 3, "max_steps": 5}},
    )
    assert post(app, limits, {"agent_turn_cap": None}) == (200, {"limits": {"max_steps": 5}})
    status, brake = app.request("GET", f"/api/projects/{project_id}/brake", cookie=app.owner_cookie)
    assert status == 200
    assert brake["brake"]["limits"]["agent_turn_cap"] == app.settings.agent_turn_cap
    assert brake["brake"]["limits"]["max_steps"] == 5


@pytest.mark.parametrize("value", ["5", 5.0, True, 0, 10_001])
def test_limits_are_strict_integers_in_range(
    app: App, project: tuple[int, int], value: Any
) -> None:
    project_id, _ = project
    result = post(app, f"/api/projects/{project_id}/limits", {"agent_turn_cap": value})
    assert error(result) == (400, "bad_body")


# -- bodies are refused as they pass the limit; text that cannot be stored (issue 14, 18 and 21) --


def _raw_post(server: ServerProcess, path: str, headers: str, chunks: list[bytes]) -> str:
    """POST over a raw socket; returns the status line. The server may answer before taking the
    whole body (that is the point), so a reset while sending is expected."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: {server.origin}\r\n"
            f"Content-Type: application/x-www-form-urlencoded\r\n{headers}\r\n".encode()
        )
        with contextlib.suppress(OSError):
            for chunk in chunks:
                sock.sendall(chunk)
        return sock.recv(4096).decode("latin-1").split("\r\n", 1)[0]


def test_a_declared_oversized_body_is_refused_before_it_is_sent(server: ServerProcess) -> None:
    # 200 MiB declared, nothing sent: the answer comes at once (before: the server waited to read
    # it all into memory, on /login before sign-in).
    status = _raw_post(server, "/login", f"Content-Length: {200 << 20}\r\n", [])
    assert status == "HTTP/1.1 413 Request Entity Too Large"


def test_a_streamed_body_is_cut_as_it_passes_the_limit(server: ServerProcess) -> None:
    chunk = b"a" * 65536
    framed = f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n"
    status = _raw_post(server, "/login", "Transfer-Encoding: chunked\r\n", [framed] * 64)
    assert status == "HTTP/1.1 413 Request Entity Too Large"


def test_an_oversized_json_body_is_a_structured_413(app: App) -> None:
    status, body = post(app, "/api/projects", {"name": "x" * (300 * 1024)})
    assert status == 413 and body["error"]["code"] == "too_large"
    assert body["error"]["details"]["limit"] == 256 * 1024


@pytest.mark.parametrize(
    "body",
    [
        '{"name": "\\ud800项目"}',
        '{"name": "项目", "agents": [{"role": "lead", "handle": "a\\udfff", "display_name": "x"}]}',
        '{"\\ud83d": 1}',
    ],
)
def test_lone_surrogates_are_a_structured_400(app: App, body: str) -> None:
    response = app.client.post(
        "/api/projects",
        content=body.encode(),
        headers={
            "Origin": app.settings.origin,
            "Content-Type": "application/json",
            "Cookie": f"room_session={app.owner_cookie}",
            "X-CSRF-Token": app.csrf[app.owner_cookie],
        },
    )
    assert response.status_code == 400, response.text
    assert response.json()["error"]["code"] == "bad_text"


def test_a_non_ascii_csrf_token_is_refused_not_a_500(app: App) -> None:
    response = app.client.post(
        "/api/projects",
        json={"name": "p"},
        headers={
            b"Origin": app.settings.origin.encode(),
            b"Cookie": f"room_session={app.owner_cookie}".encode(),
            b"X-CSRF-Token": "tökén".encode(),
        },
    )
    assert response.status_code == 403 and response.json()["error"]["code"] == "csrf"
