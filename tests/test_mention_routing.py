"""Who a person's message reaches on the server (issue 14): an unknown Chinese name is refused
before sending, never re-routed to the lead; a note to oneself wakes nobody; a departed name
never hides a live member; two agents may not share a display name."""

from __future__ import annotations

from typing import Any

from tests.support.inproc import App, error, post


def send(app: App, project_id: int, body: str, **extra: Any) -> tuple[int, Any]:
    return post(app, f"/api/projects/{project_id}/messages", {"body": body, **extra})


def deliveries(app: App, message_id: int) -> list[int]:
    status, detail = app.request("GET", f"/api/messages/{message_id}", cookie=app.owner_cookie)
    assert status == 200, detail
    return [d["recipient_id"] for d in detail["deliveries"]]


def members(app: App, project_id: int) -> dict[str, dict[str, Any]]:
    status, body = app.request("GET", f"/api/projects/{project_id}", cookie=app.owner_cookie)
    assert status == 200, body
    return {m["handle"]: m for m in body["members"]}


def message_count(app: App, project_id: int) -> int:
    status, body = app.request(
        "GET", f"/api/projects/{project_id}/messages", cookie=app.owner_cookie
    )
    assert status == 200, body
    return len(body["messages"])


def test_an_unknown_chinese_name_is_refused_not_sent_to_the_lead(
    app: App, project: tuple[int, int]
) -> None:
    project_id, lead = project
    before = message_count(app, project_id)
    status, body = send(app, project_id, "@张三 看一下")
    assert (status, body["error"]["code"]) == (400, "mentions_unresolved")
    [diag] = body["error"]["details"]["diagnostics"]
    assert (diag["code"], diag["name"], diag["blocking"]) == ("unknown", "张三", True)
    assert diag["hint"] == "没有名为 张三 的成员"
    assert message_count(app, project_id) == before  # nothing stored
    # Sent as plain text on purpose, it goes where the preview said: to the lead.
    status, sent = send(app, project_id, "@张三 看一下", as_plain_text=True)
    assert status == 201, sent
    assert deliveries(app, sent["message"]["id"]) == [lead]
    # Code-like ASCII words stay silent and still reach the lead by default.
    status, sent = send(app, project_id, "用 @param 标注参数，见 @types/node")
    assert status == 201, sent
    assert deliveries(app, sent["message"]["id"]) == [lead]


def test_a_note_to_yourself_wakes_nobody(app: App, project: tuple[int, int]) -> None:
    project_id, lead = project
    me = next(m for m in members(app, project_id).values() if m["role"] == "owner")
    for body in (f"@{me['handle']} 记一下：周五前改完", f"@「{me['display_name']}」 备忘"):
        status, sent = send(app, project_id, body)
        assert status == 201, sent
        assert sent["message"]["mentions"] == []
        assert deliveries(app, sent["message"]["id"]) == []  # no delivery: no model call
    # A chip of oneself is the same note.
    status, sent = send(app, project_id, "备忘", chips=[me["id"]])
    assert status == 201, sent
    assert deliveries(app, sent["message"]["id"]) == []
    # Naming yourself and someone else reaches the someone else only.
    status, sent = send(app, project_id, f"@{me['handle']} @lead 看看")
    assert deliveries(app, sent["message"]["id"]) == [lead]


def test_a_departed_name_never_hides_a_live_member(app: App, project: tuple[int, int]) -> None:
    project_id, _ = project
    path = f"/api/projects/{project_id}/members"
    status, body = post(app, path, {"role": "tester", "handle": "t1", "display_name": "测试"})
    assert status == 201, body
    old = members(app, project_id)["t1"]["id"]
    status, body = post(app, f"{path}/{old}/leave", {})
    assert status == 200, body
    # The name of a member who left may be taken by a new member, and then reaches them.
    status, body = post(app, path, {"role": "tester", "handle": "t2", "display_name": "测试"})
    assert status == 201, body
    new = members(app, project_id)["t2"]["id"]
    status, sent = send(app, project_id, "@测试 跑一下回归")
    assert status == 201, sent
    assert sent["message"]["mentions"] == [new]
    assert deliveries(app, sent["message"]["id"]) == [new]
    # The departed member's own handle still says they left.
    status, body = send(app, project_id, "@t1 在吗")
    assert body["error"]["details"]["diagnostics"][0]["code"] == "departed"


def test_two_agents_may_not_share_a_display_name(app: App, project: tuple[int, int]) -> None:
    project_id, _ = project
    path = f"/api/projects/{project_id}/members"
    assert error(
        post(app, path, {"role": "backend", "handle": "be", "display_name": "负责人"})
    ) == (
        409,
        "name_taken",
    )
    # Nor another member's handle as a display name: the handle would always win.
    assert error(post(app, path, {"role": "backend", "handle": "be", "display_name": "LEAD"})) == (
        409,
        "name_taken",
    )
    assert "be" not in members(app, project_id)
    # At creation, the whole project is refused and nothing is made.
    spec = {
        "name": "同名",
        "agents": [
            {"role": "frontend", "handle": "fe", "display_name": "小林"},
            {"role": "backend", "handle": "be", "display_name": "小林"},
        ],
    }
    assert error(post(app, "/api/projects", spec)) == (409, "name_taken")
    _, me = app.request("GET", "/api/me", cookie=app.owner_cookie)
    assert "同名" not in {p["name"] for p in me["projects"]}
