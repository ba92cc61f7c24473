"""Bad input over HTTP: each is refused with a documented code, never answered with a 500; ids
beyond SQLite's range; project limits that are strict integers and can be cleared."""

from __future__ import annotations

import json
from typing import Any

import pytest

from room.errors import FrameError
from room.protocol import parse_client_frame
from room.store.projects import MAX_ROW_ID, row_id
from tests.support.inproc import App, error, post

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
    assert brake["limits"]["agent_turn_cap"] == app.settings.agent_turn_cap
    assert brake["limits"]["max_steps"] == 5


@pytest.mark.parametrize("value", ["5", 5.0, True, 0, 10_001])
def test_limits_are_strict_integers_in_range(
    app: App, project: tuple[int, int], value: Any
) -> None:
    project_id, _ = project
    result = post(app, f"/api/projects/{project_id}/limits", {"agent_turn_cap": value})
    assert error(result) == (400, "bad_body")
