"""Notifications in the page (issue 30 item 6) in real Chromium: the notification level chosen
with 本项目通知 changes the projects column's badge and the title (mentions only, then
off), and the inbox lists unread mentions and followed-thread replies across projects and opens
one. Screenshots in test-artifacts/."""

# The fixtures chromium, room_server and owner are imported from tests/support/browser.py and
# used as test arguments, which linters read as unused imports redefined.
# ruff: noqa: F401, F811

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.support.browser import (
    Person,
    RoomServer,
    chromium,
    layout_problems,
    owner,
    room_server,
    screenshot,
)

pytestmark = pytest.mark.browser


def test_levels_and_the_inbox(owner: Person, room_server: RoomServer) -> None:
    quiet = room_server.create_project("安静项目")
    busy = room_server.create_project("热闹项目")
    li = room_server.invite_session(busy, "lisi", "李四")
    page = owner.page
    owner.open_project(quiet)
    root = room_server.say(busy, "我的问题")["message_id"]  # the owner's: followed once answered
    room_server.say(busy, "随便聊聊", li)
    room_server.say(busy, "@owner 请看", li)
    room_server.say(busy, "回答你", li, reply_to=root)
    badge = page.locator(f'.project-link[data-project-id="{busy}"] .unread-badge')
    expect(badge).to_have_text("3")  # level all: every message by others
    mention = page.locator(f'.project-link[data-project-id="{busy}"] .mention-badge')
    expect(mention).to_have_text("@2")  # the mention and the followed thread's reply

    # Mentions only, chosen in the busy project's menu (opening it reads what was there).
    owner.open_project(busy)
    page.locator("#notify-level").click()
    # click, not check: the dialog closes as soon as the server took the level, and check()
    # would then wait for a radio that is gone to read as checked.
    page.get_by_role("radio", name=re.compile("仅提及")).click()
    expect(page.locator("dialog")).to_have_count(0)
    owner.open_project(quiet)
    room_server.say(busy, "又随便聊聊", li)
    room_server.say(busy, "@owner 再请看", li)
    room_server.say(busy, "再回答你", li, reply_to=root)
    expect(badge).to_have_text("2")  # the mention and the thread reply, not the chatter
    expect(page).to_have_title(re.compile(r"^\(2 · @2\)"))

    # The inbox: newest first, across projects; a click opens the message.
    page.locator("#inbox-open").click()
    items = page.locator(".inbox-item")
    expect(items).to_have_count(2)
    expect(items.nth(0).locator(".inbox-text")).to_have_text("再回答你")
    expect(items.nth(0).locator(".inbox-reason")).to_have_text("话题回复")
    expect(items.nth(1).locator(".inbox-reason")).to_have_text("提及你")
    expect(items.nth(1).locator(".inbox-project")).to_have_text("热闹项目")
    assert layout_problems(page) == []
    screenshot(page, "notifications-inbox-1440")
    items.nth(1).click()
    expect(page.locator(f'.project-link[data-project-id="{busy}"]')).to_have_attribute(
        "aria-current", "page"
    )

    # Off: no badge, a muted mark, nothing in the title. The room the inbox opened is loaded
    # before its menu is used (the level belongs to the open room's project).
    expect(page.locator("#conn-state")).to_have_attribute("data-status", "open")
    expect(page.locator(".timeline-loading")).to_have_count(0)
    page.locator("#notify-level").click()
    page.get_by_role("radio", name=re.compile("关闭")).click()
    expect(page.locator("dialog")).to_have_count(0)
    owner.open_project(quiet)
    project_link = page.locator(f'.project-link[data-project-id="{busy}"]')
    expect(project_link.locator(".muted-mark")).to_be_visible()
    expect(project_link.locator(".unread-badge")).to_have_count(0)
    owner.open_project(busy)
    expect(page.locator("#notify-level")).to_have_attribute("data-level", "none")
    owner.open_project(quiet)
    expect(page).not_to_have_title(re.compile(r"^\("))
    levels = {p["id"]: p["notify"] for p in room_server.get("/api/me")["projects"]}
    assert levels[busy] == "none" and levels[quiet] == "all"
    screenshot(page, "notifications-muted-1440")
