"""Threads in the page (issue 30 item 2) in real Chromium against a real server: the reply
count and last-reply time under the root, live; the thread pane beside the timeline at 1440 px
and over it at 600 px, with its own IME-safe composer whose sends join the thread; follow and
unfollow in the pane. Screenshots in test-artifacts/."""

# The fixtures chromium, room_server and owner are imported from tests/support/browser.py and
# used as test arguments, which linters read as unused imports redefined.
# ruff: noqa: F401, F811

from __future__ import annotations

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.support.browser import (
    Person,
    RoomServer,
    chromium,
    layout_problems,
    owner,
    room_server,
    screenshot,
    sign_in_owner,
)

pytestmark = pytest.mark.browser


def thread_of(room_server: RoomServer, name: str, handle: str) -> tuple[int, int]:
    """A project with a root by the owner and two replies by 小王 (one to the other)."""
    project = room_server.create_project(name)
    wang = room_server.invite_session(project, handle, "小王")
    root = room_server.say(project, "发布计划：周五上线")["message_id"]
    first = room_server.say(project, "我来准备回滚脚本", wang, reply_to=root)["message_id"]
    room_server.say(project, "脚本已写好", wang, reply_to=first)
    return project, int(root)


def ime_enter_sends_nothing(page: Page, selector: str) -> None:
    box = page.locator(selector)
    box.dispatch_event("compositionstart", {"data": ""})
    for init in ({"key": "Enter", "isComposing": True}, {"key": "Enter", "keyCode": 229}):
        prevented = page.evaluate(
            """([sel, init]) => !document.querySelector(sel).dispatchEvent(
                new KeyboardEvent("keydown", { bubbles: true, cancelable: true, ...init }))""",
            [selector, init],
        )
        assert prevented is False, init  # left to the IME
    box.dispatch_event("compositionend", {"data": "回复"})


def test_the_thread_pane_at_1440(owner: Person, room_server: RoomServer) -> None:
    project, root = thread_of(room_server, "话题桌面", "wang")
    page = owner.page
    owner.open_project(project)
    summary = page.locator(f'#timeline .msg[data-id="{root}"] .thread-summary')
    expect(summary.locator(".thread-count")).to_have_text("2 条跟帖")
    expect(summary.locator(".thread-last")).to_contain_text("最新")
    summary.click()
    pane = page.locator("#thread-pane")
    expect(pane).to_be_visible()
    expect(pane.locator(".msg .msg-body")).to_have_text(
        ["发布计划：周五上线", "我来准备回滚脚本", "脚本已写好"]
    )
    follow = pane.locator(".thread-follow")
    expect(follow).to_have_text("取消关注")  # the root's author follows its thread
    # Beside the timeline: the timeline stays fully visible to its left.
    timeline = page.locator("#timeline").bounding_box()
    box = pane.bounding_box()
    assert timeline and box and timeline["x"] + timeline["width"] <= box["x"] + 1
    assert box["width"] < 500

    draft = pane.locator("#thread-draft")
    draft.fill("周五我值班")
    ime_enter_sends_nothing(page, "#thread-draft")
    page.wait_for_timeout(200)
    expect(draft).to_have_value("周五我值班")
    draft.press("Enter")
    expect(pane.locator(".msg .msg-body").last).to_have_text("周五我值班")
    expect(draft).to_have_value("")
    expect(summary.locator(".thread-count")).to_have_text("3 条跟帖")  # live on the parent
    sent = room_server.messages(project)[-1]
    assert sent["body"] == "周五我值班" and sent["reply_to"] == root
    # A reply by someone else arrives in the open pane.
    room_server.say(
        project, "收到", room_server.invite_session(project, "wang", "小王"), reply_to=root
    )
    expect(pane.locator(".msg .msg-body").last).to_have_text("收到")
    expect(summary.locator(".thread-count")).to_have_text("4 条跟帖")

    follow.click()
    expect(follow).to_have_text("关注话题")
    expect(follow).to_have_attribute("aria-pressed", "false")
    assert room_server.get(f"/api/messages/{root}/thread")["following"] is False
    assert layout_problems(page) == []
    screenshot(page, "threads-1440")
    page.keyboard.press("Escape")
    expect(pane).to_be_hidden()


def test_the_thread_pane_at_600(chromium: Browser, room_server: RoomServer) -> None:
    project, root = thread_of(room_server, "话题窄屏", "wang2")
    person = sign_in_owner(chromium, room_server, width=600, height=900)
    try:
        page = person.page
        person.open_project(project)
        page.locator(f'#timeline .msg[data-id="{root}"] .thread-summary').click()
        pane = page.locator("#thread-pane")
        expect(pane.locator(".msg")).to_have_count(3)
        box = pane.bounding_box()
        assert box and box["x"] == 0 and box["width"] == 600  # over the timeline
        expect(pane.locator("#thread-draft")).to_be_visible()
        expect(pane.locator(".thread-close")).to_be_visible()
        assert layout_problems(page) == []
        screenshot(page, "threads-600")
        pane.locator(".thread-close").click()
        expect(pane).to_be_hidden()
        person.assert_clean()
    finally:
        person.close()
