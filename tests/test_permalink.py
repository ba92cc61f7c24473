"""Permalinks to old messages: the timeline opens a window around a message (``around``), pages
forward from it (``after``) until it meets the latest, and a message's detail names its seq."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.inproc import App, error, post

HUGE = "9" * 25


def say_many(app: App, project_id: int, n: int) -> list[dict[str, Any]]:
    sent = []
    for i in range(n):
        status, body = post(app, f"/api/projects/{project_id}/messages", {"body": f"第{i}条消息"})
        assert status == 201, body
        sent.append(body["message"])
    return sent


@pytest.fixture
def quiet(app: App) -> int:
    """A project of people only: no agent answers while the test reads the timeline."""
    status, body = post(app, "/api/projects", {"name": "永久链接", "goal": "", "agents": []})
    assert status == 201, body
    return int(body["project"]["id"])


def page(app: App, project_id: int, query: str) -> tuple[int, Any]:
    return app.request(
        "GET", f"/api/projects/{project_id}/messages?{query}", cookie=app.owner_cookie
    )


def bodies(answer: dict[str, Any]) -> list[str]:
    return [m["body"] for m in answer["messages"]]


def test_a_window_around_an_old_message(app: App, quiet: int) -> None:
    project_id = quiet
    sent = say_many(app, project_id, 30)
    _, everything = page(app, project_id, "limit=200")
    seqs = [m["seq"] for m in everything["messages"]]
    at = seqs.index(sent[10]["seq"])
    status, answer = page(app, project_id, f"around={sent[10]['seq']}&limit=6")
    assert status == 200
    # Three before it, the message itself and two after, oldest first.
    assert [m["seq"] for m in answer["messages"]] == seqs[at - 3 : at + 3]
    assert "第10条消息" in bodies(answer)
    assert (answer["has_more"], answer["has_newer"]) == (True, True)
    # Paging forward from the window's end reaches the latest and says so.
    last = answer["messages"][-1]["seq"]
    status, forward = page(app, project_id, f"after={last}&limit=200")
    assert status == 200
    assert [m["seq"] for m in forward["messages"]] == seqs[at + 3 :]
    assert bodies(forward)[-1] == everything["messages"][-1]["body"]
    assert forward["has_newer"] is False
    _, partial = page(app, project_id, f"after={last}&limit=2")
    assert partial["has_newer"] is True


def test_a_window_at_either_end(app: App, quiet: int) -> None:
    project_id = quiet
    sent = say_many(app, project_id, 5)
    _, first = page(app, project_id, f"around={sent[0]['seq']}&limit=4")
    assert "第0条消息" in bodies(first)
    assert (first["has_more"], first["has_newer"]) == (False, True)
    _, last = page(app, project_id, f"around={sent[-1]['seq']}&limit=4")
    assert bodies(last)[-1] == "第4条消息"
    assert (last["has_more"], last["has_newer"]) == (True, False)
    # A seq past every message opens on the latest; a negative one on the first.
    _, past = page(app, project_id, f"around={HUGE}&limit=4")
    assert bodies(past)[-1] == "第4条消息" and past["has_newer"] is False
    _, before = page(app, project_id, f"around=-{HUGE}&limit=2")
    assert bodies(before)[0] == first["messages"][0]["body"] and before["has_more"] is False


def test_the_plain_page_is_unchanged(app: App, quiet: int) -> None:
    project_id = quiet
    say_many(app, project_id, 3)
    status, answer = page(app, project_id, "limit=2")
    assert status == 200
    assert bodies(answer) == ["第1条消息", "第2条消息"]
    assert "has_newer" not in answer


def test_cursors_are_checked(app: App, quiet: int) -> None:
    project_id = quiet
    assert error(page(app, project_id, "around=1&before=3")) == (400, "bad_query")
    assert error(page(app, project_id, "around=abc")) == (400, "bad_query")
    assert error(page(app, project_id, "after=1&limit=0")) == (400, "bad_query")


def test_a_message_detail_names_its_project_and_seq(app: App, quiet: int) -> None:
    project_id = quiet
    [message] = say_many(app, project_id, 1)
    status, detail = app.request("GET", f"/api/messages/{message['id']}", cookie=app.owner_cookie)
    assert status == 200
    assert (detail["project_id"], detail["seq"]) == (project_id, message["seq"])


def test_another_project_cannot_be_read_around(app: App, quiet: int) -> None:
    project_id = quiet
    say_many(app, project_id, 2)
    _, stranger = app.new_user("stranger", "路人")
    status, body = app.request(
        "GET", f"/api/projects/{project_id}/messages?around=1", cookie=stranger
    )
    assert (status, body["error"]["code"]) == (404, "not_member")
