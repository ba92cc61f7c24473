"""Agent members over HTTP: display names and aliases that are refused, aliases kept once and
reachable by mention, and people joining under a name an agent already answers to."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.inproc import App, error, post


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
