"""People in the page (issue 14): quotes read as plain words and forget deleted text, closed
projects offer nothing the server would refuse, errors are translated, presence is real, and
other projects' unread counts and mentions of you arrive by themselves."""

# The fixtures chromium, room_server and owner are imported from tests/support/browser.py and
# used as test arguments, which linters read as unused imports redefined.
# ruff: noqa: F401, F811

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.support.browser import (
    Person,
    RoomServer,
    chromium,
    fulfill_json,
    join,
    owner,
    room_server,
    screenshot,
    sign_in_owner,
)

pytestmark = pytest.mark.browser


def message(page: Page, text: str) -> Any:
    return page.locator(".msg", has_text=text)


def send(page: Page, text: str) -> None:
    page.locator("#draft").fill(text)
    page.locator("#draft").press("Enter")


def test_quotes_are_plain_words_and_a_delete_empties_them(
    chromium: Browser, room_server: RoomServer, owner: Person
) -> None:
    project = room_server.create_project("引用")
    owner.open_project(project)
    bob = join(chromium, room_server, project, "bob", "王小明")
    try:
        bob.open_project(project)
        send(bob.page, "**加粗的话** 和 `代码`\n\n> 引用的一行")
        theirs = message(owner.page, "加粗的话")
        expect(theirs).to_be_visible()
        theirs.hover()
        theirs.get_by_role("button", name="回复").click()
        chip = owner.page.locator("#quote-bar .quote-text")
        expect(chip).to_have_text("加粗的话 和 代码 引用的一行")
        send(owner.page, "好的，收到")
        quote = message(owner.page, "好的，收到").locator(".msg-quote .quote-text")
        expect(quote).to_have_text("加粗的话 和 代码 引用的一行")
        bobs_quote = message(bob.page, "好的，收到").locator(".msg-quote .quote-text")
        expect(bobs_quote).to_have_text("加粗的话 和 代码 引用的一行")
        screenshot(owner.page, "people-quote-plain")

        # Bob deletes his message: the quote forgets its text, live and after a reload.
        mine = bob.page.locator(".msg.mine", has_text="加粗的话")
        mine.hover()
        mine.get_by_role("button", name="删除").click()
        bob.page.locator("dialog").get_by_role("button", name="删除").click()
        expect(quote).to_have_text("原消息已删除")
        expect(bobs_quote).to_have_text("原消息已删除")
        expect(owner.page.locator("#timeline")).not_to_contain_text("加粗的话")
        screenshot(owner.page, "people-quote-deleted")
        owner.page.reload()
        expect(owner.page.locator("#conn-state")).to_have_attribute("data-status", "open")
        expect(message(owner.page, "好的，收到").locator(".msg-quote .quote-text")).to_have_text(
            "原消息已删除"
        )
        expect(owner.page.locator("#timeline")).not_to_contain_text("加粗的话")
        bob.assert_clean()
    finally:
        bob.close()


def test_online_means_a_page_is_open(
    chromium: Browser, room_server: RoomServer, owner: Person
) -> None:
    project = room_server.create_project(
        "在场", agents=[{"handle": "dev", "role": "backend", "display_name": "开发"}]
    )
    room_server.invite_session(project, "carol", "李小红")  # a member who never opens the page
    owner.open_project(project)
    rows = owner.page.locator("#tab-members .member-row")
    carol = rows.filter(has_text="李小红")
    expect(carol.locator(".status-text")).to_have_text("离线")
    expect(rows.filter(has_text="开发").locator(".status-text")).to_have_text("空闲")
    bob = join(chromium, room_server, project, "ming", "王小明")
    bob_row = rows.filter(has_text="王小明")
    try:
        expect(bob_row.locator(".status-text")).to_have_text("在线")
        expect(bob_row.locator(".status-dot")).to_have_class("status-dot presence-online")
        screenshot(owner.page, "people-presence-online")
        bob.assert_clean()
    finally:
        bob.close()  # the browser closes: no goodbye but the socket's end
    expect(bob_row.locator(".status-text")).to_have_text("离线")
    expect(bob_row.locator(".status-dot")).to_have_class("status-dot presence-offline")
    expect(carol.locator(".status-text")).to_have_text("离线")
    screenshot(owner.page, "people-presence-offline")


# A stand-in for the browser's Notification API: records what the page asks and shows.
FAKE_NOTIFICATION = """
(() => {
  window.__notes = [];
  window.__asked = 0;
  class FakeNotification {
    static permission = "default";
    static async requestPermission() {
      window.__asked += 1;
      FakeNotification.permission = "granted";
      return "granted";
    }
    constructor(title, options) {
      window.__notes.push({ title, body: options?.body || "" });
    }
    addEventListener() {}
    close() {}
  }
  window.Notification = FakeNotification;
})();
"""


def test_other_projects_counts_and_mentions_arrive_by_themselves(
    chromium: Browser, room_server: RoomServer
) -> None:
    watched = room_server.create_project("正在看的项目")
    elsewhere = room_server.create_project("别处的项目")
    bob = room_server.invite_session(elsewhere, "lei", "赵磊")
    person = sign_in_owner(
        chromium, room_server, setup=lambda page: page.add_init_script(FAKE_NOTIFICATION)
    )
    try:
        page = person.page
        person.open_project(watched)
        link = page.locator(f'.project-link[data-project-id="{elsewhere}"]')
        expect(link.locator(".unread-badge")).to_have_count(0)
        toggle = page.locator("#notify-toggle")
        expect(toggle).to_have_text("开启提醒")
        assert page.evaluate("window.__asked") == 0  # never asked without a click

        # No reload, no focus change, no timer: the server pushes the counts.
        room_server.say(elsewhere, "大家好", session=bob)
        expect(link.locator(".unread-badge")).to_have_text("1")
        expect(link.locator(".mention-badge")).to_have_count(0)
        expect(page).to_have_title("(1) 正在看的项目 · Project Room")
        assert page.evaluate("window.__notes.length") == 0

        toggle.click()
        expect(toggle).to_have_text("提醒已开启")
        assert page.evaluate("window.__asked") == 1
        room_server.say(elsewhere, "@owner 请看一下这个", session=bob)
        expect(link.locator(".unread-badge")).to_have_text("2")
        expect(link.locator(".mention-badge")).to_have_text("@1")
        expect(page).to_have_title("(2 · @1) 正在看的项目 · Project Room")
        page.wait_for_function("window.__notes.length === 1")
        note = page.evaluate("window.__notes[0]")
        assert note == {"title": "「别处的项目」中有人提到了你", "body": "1 条提到你的消息未读"}
        screenshot(page, "people-unread-pushed")

        # Read it: the counts go away, the title too.
        link.click()
        expect(link.locator(".unread-badge")).to_have_count(0)
        expect(page).to_have_title("别处的项目 · Project Room")
        person.assert_clean()
    finally:
        person.close()


def test_a_closed_project_offers_nothing_the_server_refuses_and_errors_are_translated(
    chromium: Browser, room_server: RoomServer, owner: Person
) -> None:
    project = room_server.create_project(
        "要归档的项目", agents=[{"handle": "ops", "role": "devops", "display_name": "运维"}]
    )
    room_server.say(project, "@owner 归档前写的话")  # to no agent: nobody answers
    owner.open_project(project)
    page = owner.page
    found = page.locator(".msg.mine", has_text="归档前写的话")
    expect(found).to_be_visible()
    mine = page.locator(f'.msg[data-id="{found.get_attribute("data-id")}"]')  # also while edited
    mine.hover()
    for name in ("回复", "编辑", "删除", "标记为需求变更"):
        expect(mine.get_by_role("button", name=name)).to_be_visible()
    page.locator("#panel-col").get_by_role("tab", name="模型").click()
    expect(page.locator("#route-project")).to_be_enabled()

    # An edit started while the project was open, saved after it was archived: the server's
    # refusal is shown from its code, in Chinese, not in the server's English words.
    mine.hover()
    mine.get_by_role("button", name="编辑").click()
    expect(mine.locator(".edit-input")).to_be_visible()
    room_server.post(f"/api/projects/{project}/lifecycle", {"op": "archive"})
    expect(page.locator("#room-state")).to_have_text("已归档")
    editor = mine.locator(".edit-input")
    editor.fill("归档后改的话")
    editor.press("Enter")
    refusal = mine.locator(".edit-error")
    expect(refusal).to_have_text("项目当前状态（已归档）不接受这个操作")
    screenshot(page, "people-archived-edit-refused")
    editor.press("Escape")

    # Now nothing that would be refused is offered: no action that changes the message (only
    # reading ones: the link and the menu with mark-as-unread and message info), read-only
    # models.
    mine.hover()
    for name in ("回复", "编辑", "删除", "标记为需求变更", "添加表情回应"):
        expect(mine.get_by_role("button", name=name)).to_have_count(0)
    expect(mine.get_by_role("button", name="复制链接")).to_have_count(1)
    expect(mine.get_by_role("button", name="更多")).to_have_count(1)
    expect(page.locator("#route-project")).to_be_disabled()
    expect(page.locator("#tab-models .note")).to_contain_text("模型设置只读")
    page.locator("#panel-col").get_by_role("tab", name="成员").click()
    expect(page.get_by_role("button", name="添加 AI 成员")).to_have_count(0)
    screenshot(page, "people-archived-readonly")

    # Any other refusal the page shows is words from its code too, in either language (here
    # the models tab's answer, refused as the server would for a purged project).
    refused = {
        "error": {
            "code": "project_closed",
            "message": "the project is trashed; restore it first",
            "details": {"state": "trashed"},
        }
    }
    page.route(
        f"**/api/projects/{project}/routes",
        lambda route: fulfill_json(route, refused, status=409),
    )
    owner.allow("409")
    models_tab = page.locator("#panel-col").get_by_role("tab", name="模型")
    models_tab.click()
    expect(page.locator("#tab-models .error-text")).to_have_text(
        "项目已关闭（回收站），不能执行此操作"
    )
    page.locator("#lang-toggle").click()
    page.locator("#panel-col").get_by_role("tab", name="Members").click()
    page.locator("#panel-col").get_by_role("tab", name="Models").click()
    expect(page.locator("#tab-models .error-text")).to_have_text(
        "The project is closed (in the trash); this cannot be done now"
    )
    mine.hover()
    for name in ("Reply", "Edit", "Delete"):
        expect(mine.get_by_role("button", name=name)).to_have_count(0)
    page.locator("#lang-toggle").click()  # back to Chinese for the next test's page
