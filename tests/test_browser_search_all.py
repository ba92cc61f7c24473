"""Search across the person's projects in the page (issue 30, item 5): results from every
project with its name, snippets rendered like messages (code, bold — never raw backticks),
operators (`in:`, a refused one said in words), the 本项目 scope, opening a result of another
project, and recent searches. Real server, real Chromium, at 1440 and 600 px."""

# The fixtures chromium, room_server and owner are imported from tests/support/browser.py and
# used as test arguments, which linters read as unused imports redefined.
# ruff: noqa: F401, F811

from __future__ import annotations

import pytest
from playwright.sync_api import Locator, Page, expect

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


def search_box(page: Page) -> Locator:
    return page.get_by_role("combobox", name="搜索消息和记忆")


def test_search_across_projects_with_operators_and_recent_searches(
    owner: Person, room_server: RoomServer
) -> None:
    word = "灰度发布"  # a word no other test of this server writes
    front = room_server.create_project("跨项目前端")
    site = room_server.create_project("跨项目 网站")
    room_server.say(front, f"明天{word}前端，用 `deploy --canary` 命令，**先备份**")
    sent = room_server.say(site, f"网站{word}完成")
    page = owner.page
    owner.allow("status of 400")  # the refused operator, as Chromium logs it
    owner.open_project(front)
    page.keyboard.press("Control+k")
    search_box(page).fill(word)
    results = page.get_by_role("listbox", name="搜索结果")
    options = results.get_by_role("option")
    expect(options).to_have_count(2)
    expect(results.locator(".search-project")).to_have_count(2)
    mine = options.filter(has_text="先备份")
    expect(mine.locator(".search-snippet code")).to_have_text("deploy --canary")
    expect(mine.locator(".search-snippet strong")).to_have_text("先备份")
    expect(mine.locator(".search-snippet mark")).to_have_text(word)
    expect(mine.locator(".search-snippet")).not_to_contain_text("`")
    assert layout_problems(page) == []
    screenshot(page, "search-all-1440")

    # in: narrows to one of my projects; the 本项目 scope to the open one.
    search_box(page).fill(f'in:"跨项目 网站" {word}')
    expect(options).to_have_count(1)
    expect(options.first).to_contain_text("网站")
    search_box(page).fill(word)
    page.get_by_role("button", name="本项目", exact=True).click()
    expect(options).to_have_count(1)
    expect(options.first).to_contain_text("先备份")
    page.get_by_role("button", name="所有项目").click()
    expect(options).to_have_count(2)

    # A refused operator is said in words.
    search_box(page).fill(f"has:picture {word}")
    expect(page.locator("#search-status")).to_have_text(
        "不认识 has:picture（可用 has:file、is:mention）"
    )

    # Opening a result of another project opens that project at the message.
    search_box(page).fill(word)
    expect(options).to_have_count(2)
    options.filter(has_text="网站").click()
    expect(page.locator("#room-title")).to_have_text("跨项目 网站")
    message = page.locator(f'.msg[data-id="{sent["message"]["id"]}"]')
    expect(message.locator("mark.hit")).to_have_text(word)

    # Recent searches: the empty box offers what was searched (kept in this browser).
    page.keyboard.press("Control+k")
    search_box(page).fill("")
    expect(page.locator("#search-status")).to_have_text("最近的搜索")
    recent = results.locator(".search-recent")
    expect(recent.first).to_have_text(word)
    recent.first.click()
    expect(options).to_have_count(2)

    page.set_viewport_size({"width": 600, "height": 900})
    page.keyboard.press("Control+k")  # at 600 px the box opens over the header
    search_box(page).fill(word)
    expect(options).to_have_count(2)
    assert layout_problems(page) == []
    screenshot(page, "search-all-600")
