"""Bad input found in review: each is refused with a documented code, never answered with a 500;
limits that can be cleared; the recovery report kept for server admins."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from room.store.projects import MAX_ROW_ID, row_id
from tests.support.inproc import App, owner_user, running_app

HUGE = "9" * 25  # digits beyond SQLite's 64-bit INTEGER


@pytest.fixture
def app(tmp_path: Path) -> Iterator[App]:
    with running_app(tmp_path / "data") as handle:
        yield handle


@pytest.fixture
def project(app: App) -> tuple[int, int]:
    """A project of the owner with a lead agent: (project id, the lead's member id)."""
    project_id, members, _ = app.project_with("输入", owner_user(app))
    return project_id, members["lead"].id


def post(app: App, path: str, body: Any) -> tuple[int, Any]:
    return app.request("POST", path, body, cookie=app.owner_cookie)


def error(result: tuple[int, Any]) -> tuple[int, str]:
    status, body = result
    return status, body["error"]["code"]


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


# -- limits --------------------------------------------------------------------------------------


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


# -- the recovery report -------------------------------------------------------------------------


def test_recovery_is_for_server_admins_only(app: App) -> None:
    bob, bob_cookie = app.new_user("bob", "Bob")
    _, _, token = app.project_with("恢复", owner_user(app), bob)
    assert app.request("GET", "/api/recovery", cookie=app.owner_cookie)[0] == 200
    assert error(app.request("GET", "/api/recovery", cookie=bob_cookie)) == (403, "admin_only")
    assert error(app.request("GET", "/api/recovery", token=token)) == (403, "admin_only")


def members(app: App, project_id: int) -> list[dict[str, Any]]:
    status, body = app.request("GET", f"/api/projects/{project_id}", cookie=app.owner_cookie)
    assert status == 200, body
    return list(body["members"])


def add_agent(app: App, project_id: int, **spec: Any) -> tuple[int, Any]:
    body = {"role": "backend", "handle": "be", "display_name": "后端", **spec}
    return post(app, f"/api/projects/{project_id}/members", body)


@pytest.mark.parametrize(
    ("aliases", "code"),
    [
        ([""], "bad_display_name"),
        (["带@的"], "bad_display_name"),
        (["两\n行"], "bad_display_name"),
        (["x" * 65], "bad_display_name"),
        (["所有人"], "reserved_name"),
        (["Everyone"], "reserved_name"),
        (["用户"], "reserved_name"),
        (["LEAD"], "alias_taken"),  # the lead's handle: a handle always wins, so unreachable
        (["管理员"], "alias_taken"),  # a person's display name: the alias would take it over
    ],
)
def test_bad_aliases_are_refused_and_nothing_is_added(
    app: App, project: tuple[int, int], aliases: list[str], code: str
) -> None:
    project_id, _ = project
    status, body = add_agent(app, project_id, aliases=aliases)
    assert body["error"]["code"] == code and status in (400, 409)
    assert "be" not in {m["handle"] for m in members(app, project_id)}


def test_a_group_word_is_no_display_name(app: App, project: tuple[int, int]) -> None:
    project_id, _ = project
    assert error(add_agent(app, project_id, display_name="所有人")) == (400, "reserved_name")


def test_aliases_are_kept_once_and_reach_the_member(app: App, project: tuple[int, int]) -> None:
    project_id, _ = project
    status, body = add_agent(app, project_id, aliases=["服务端", "服务端", "后端", " 接口 "])
    assert status == 201, body
    member = next(m for m in members(app, project_id) if m["handle"] == "be")
    assert sorted(member["aliases"]) == sorted(["服务端", "接口"])
    status, sent = post(app, f"/api/projects/{project_id}/messages", {"body": "@接口 看看"})
    assert status == 201, sent
    assert sent["message"]["mentions"] == [member["id"]]


def test_a_person_cannot_join_under_an_agents_alias(app: App, project: tuple[int, int]) -> None:
    project_id, lead = project
    # Paused, the lead answers nothing: the only chat message is the one said before the join.
    assert post(app, f"/api/projects/{project_id}/members/{lead}/pause", {})[0] == 200
    assert add_agent(app, project_id, aliases=["小助手"])[0] == 201
    status, invite = post(app, f"/api/projects/{project_id}/invites", {"role": "member"})
    assert status == 201, invite
    secret = invite["url"].rsplit("/", 1)[1]
    form = {"secret": secret, "handle": "helper", "display_name": "小助手"}
    response = app.client.post(
        "/login", data=form, headers={"Origin": app.settings.origin}, follow_redirects=False
    )
    assert response.status_code == 409 and "别名" in response.text
    assert post(app, f"/api/projects/{project_id}/messages", {"body": "加入前的话"})[0] == 201
    # The invite was not used up: the same person joins under another name.
    cookie = app.login(secret, handle="helper", display_name="小帮手")
    status, me = app.request("GET", "/api/me", cookie=cookie)
    project_row = next(p for p in me["projects"] if p["id"] == project_id)
    assert project_row["unread"] == 0  # what was said before they came is history, not unread


def test_a_negative_history_cursor_is_an_empty_page(app: App, project: tuple[int, int]) -> None:
    project_id, _ = project
    path = f"/api/projects/{project_id}/messages?before=-{HUGE}"
    status, page = app.request("GET", path, cookie=app.owner_cookie)
    assert (status, page["messages"]) == (200, [])
