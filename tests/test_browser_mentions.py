"""Mentions that must never quietly reach the wrong member (issue 14), in the page: an unknown
Chinese name is flagged before sending, `@zzz` + Enter with no match does not send, "按纯文本发送"
says where the message goes, a name with a space is suggested, a note to yourself reaches
nobody, and the create dialog refuses two members with one name."""

# The fixtures chromium, room_server and owner are imported from tests/support/browser.py and
# used as test arguments, which linters read as unused imports redefined.
# ruff: noqa: F401, F811

from __future__ import annotations

import time
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.support.browser import Person, RoomServer, chromium, owner, room_server, screenshot

pytestmark = pytest.mark.browser

TEAM = [
    {"role": "lead", "handle": "lead", "display_name": "负责人"},
    {"role": "frontend", "handle": "xiaolin", "display_name": "前端 小林"},
    {"role": "backend", "handle": "backend", "display_name": "后端"},
]


def chats(room_server: RoomServer, project: int) -> list[dict[str, Any]]:
    return [m for m in room_server.messages(project) if m["kind"] == "chat"]


def wait_for_message(room_server: RoomServer, project: int, body: str) -> dict[str, Any]:
    deadline = time.monotonic() + 10
    while not (found := [m for m in chats(room_server, project) if m["body"] == body]):
        assert time.monotonic() < deadline, f"{body!r} never reached the server"
        time.sleep(0.05)
    return found[0]


def delivered_to(room_server: RoomServer, message: dict[str, Any]) -> list[int]:
    detail = room_server.get(f"/api/messages/{message['id']}")
    return [d["recipient_id"] for d in detail["deliveries"]]


def test_an_unknown_chinese_name_is_flagged_before_sending(
    owner: Person, room_server: RoomServer
) -> None:
    project = room_server.create_project("未知名字", TEAM)
    lead = room_server.members(project)["lead"]["id"]
    owner.open_project(project)
    page = owner.page
    box = page.locator("#draft")
    diagnostics = page.locator("#diagnostics")
    box.fill("@张三 看一下")
    expect(diagnostics.locator(".diag.blocking")).to_have_attribute("data-code", "unknown")
    expect(diagnostics).to_contain_text("没有名为 张三 的成员")
    box.press("Enter")  # blocked: nothing is sent, nothing goes to the lead
    expect(page.locator(".msg")).to_have_count(0)
    expect(box).to_have_value("@张三 看一下")
    # Sending it anyway says where it goes.
    plain = diagnostics.get_by_role("button", name="按纯文本发送给 负责人")
    expect(plain).to_be_visible()
    expect(diagnostics).to_contain_text("消息将默认发给负责人 负责人")
    screenshot(page, "mentions-unknown-chinese-name")
    plain.click()
    message = wait_for_message(room_server, project, "@张三 看一下")
    assert delivered_to(room_server, message) == [lead]
    mine = [m for m in chats(room_server, project) if m["author_id"] == message["author_id"]]
    # The blocked Enter sent nothing (ids: the message itself changes when the lead's answer
    # joins its thread).
    assert [m["id"] for m in mine] == [message["id"]]


def test_enter_with_no_matching_member_does_not_send(
    owner: Person, room_server: RoomServer
) -> None:
    project = room_server.create_project("没有匹配", TEAM)
    lead = room_server.members(project)["lead"]["id"]
    owner.open_project(project)
    page = owner.page
    box = page.locator("#draft")
    picker = page.get_by_role("listbox", name="选择要提及的成员")
    # A finished mention followed by punctuation and more words closes the picker: Enter sends.
    box.press_sequentially("@lead，请看")
    expect(picker).to_be_hidden()
    box.press("Enter")
    message = wait_for_message(room_server, project, "@lead，请看")
    assert delivered_to(room_server, message) == [lead]
    box.press_sequentially("@zzz")
    expect(picker).to_contain_text("没有匹配的成员")
    box.press("Enter")
    expect(picker).to_be_hidden()
    page.wait_for_timeout(300)
    assert [
        m["body"] for m in chats(room_server, project) if m["author_id"] == message["author_id"]
    ] == ["@lead，请看"]  # the Enter on "@zzz" sent nothing
    note = page.locator("#diagnostics .diag-unmatched")
    expect(note).to_contain_text("@zzz 不是任何成员")
    expect(note).to_contain_text("这条消息将默认发给负责人 负责人")
    expect(page.locator("#recipients")).to_contain_text("默认发给负责人")
    screenshot(page, "mentions-no-match-enter")
    box.press("Enter")  # now on purpose
    message = wait_for_message(room_server, project, "@zzz")
    assert delivered_to(room_server, message) == [lead]
    expect(note).to_be_hidden()


def test_a_name_with_a_space_is_suggested(owner: Person, room_server: RoomServer) -> None:
    project = room_server.create_project("带空格的名字", TEAM)
    xiaolin = room_server.members(project)["xiaolin"]["id"]
    owner.open_project(project)
    page = owner.page
    box = page.locator("#draft")
    picker = page.get_by_role("listbox", name="选择要提及的成员")
    box.press_sequentially("@前端 小")
    expect(picker.get_by_role("option")).to_have_count(1)
    expect(picker.get_by_role("option").first).to_contain_text("前端 小林")
    box.press("Enter")
    expect(box).to_have_value("@xiaolin ")
    expect(page.locator("#recipients .chip-text")).to_have_text(["前端 小林"])
    # Typed in full without brackets (pasted): the fix offered first is that member, not the
    # near 后端.
    box.fill("@前端 小林 看一下")
    diagnostics = page.locator("#diagnostics")
    expect(diagnostics).to_contain_text("没有名为 前端 的成员")
    fixes = diagnostics.locator("button[data-member-id]")
    expect(fixes.first).to_have_attribute("data-member-id", str(xiaolin))
    fixes.first.click()
    expect(box).to_have_value("@xiaolin 小林 看一下")


def test_a_note_to_yourself_reaches_nobody(owner: Person, room_server: RoomServer) -> None:
    project = room_server.create_project("自己的备注", TEAM)
    me = next(m for m in room_server.members(project).values() if m["role"] == "owner")
    owner.open_project(project)
    page = owner.page
    box = page.locator("#draft")
    box.fill(f"@{me['handle']} 记一下：周五前改完")
    expect(page.locator("#recipients")).to_contain_text("不会通知任何人")
    expect(page.locator("#recipients")).not_to_contain_text("负责人")
    box.press("Enter")
    message = wait_for_message(room_server, project, f"@{me['handle']} 记一下：周五前改完")
    assert delivered_to(room_server, message) == []


def test_the_create_dialog_refuses_two_members_with_one_name(
    owner: Person, room_server: RoomServer
) -> None:
    page = owner.page
    page.get_by_role("button", name="新建项目").click()
    dialog = page.get_by_role("dialog", name="新建项目")
    dialog.get_by_label("项目名称").fill("同名成员")
    dialog.get_by_label("加入前端").check()
    dialog.get_by_label("前端的显示名称").fill("小林")
    dialog.get_by_label("加入后端").check()
    dialog.get_by_label("后端的显示名称").fill("小林")
    dialog.get_by_role("button", name="创建项目").click()
    expect(dialog.get_by_role("alert")).to_have_text(
        "两位成员不能用同一个名字「小林」：提及会有歧义"
    )
    expect(dialog).to_be_visible()
    assert "同名成员" not in {p["name"] for p in room_server.get("/api/me")["projects"]}
    # Fixed, it is created.
    dialog.get_by_label("后端的显示名称").fill("小王")
    dialog.get_by_role("button", name="创建项目").click()
    expect(dialog).to_be_hidden()
    expect(page.locator("#room-title")).to_have_text("同名成员")
