"""The keyboard in the timeline: one Tab stop for all of it (a roving tabindex), j/k to move,
Enter to reach a message's controls and Esc to leave them, r reply, e edit (my own), + react,
c copy link; Alt+Shift+↓ for the next project with unread messages; all listed under `?`."""

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
    owner,
    room_server,
    screenshot,
    sign_in_owner,
)

pytestmark = pytest.mark.browser

TEAM = [{"handle": "dev", "role": "backend", "display_name": "开发"}]
# Everything in the timeline a Tab could land on.
TAB_STOPS_JS = """() => [...document.querySelectorAll('#timeline *')].filter((el) =>
  el.tabIndex >= 0 && el.getClientRects().length &&
  (el.matches('a[href], button, summary, input, select, textarea') || el.hasAttribute('tabindex'))
).length"""


def focused_text(page: Page) -> str:
    return str(page.evaluate("() => document.activeElement?.innerText ?? ''"))


def test_one_tab_stop_and_keys_on_a_message(owner: Person, room_server: RoomServer) -> None:
    project = room_server.create_project("键盘", TEAM)
    first = room_server.say(project, "第一条 看 https://example.com/docs")
    room_server.say(project, "@dev 第二条", reply_to=first["message_id"])
    room_server.post(f"/api/messages/{first['message_id']}/reactions", {"emoji": "👍"})
    room_server.say(project, "第三条")
    page = owner.page
    owner.context.grant_permissions(["clipboard-read", "clipboard-write"])
    owner.open_project(project)
    last = page.locator(".msg.mine", has_text="第三条")
    expect(last).to_be_visible()
    expect(page.locator(".msg-delivery .delivery-summary").first).to_be_attached()
    # Links, quotes, reactions, avatars, delivery details: none is a Tab stop of its own.
    assert page.evaluate(TAB_STOPS_JS) == 1
    ids = page.locator("#timeline > [data-seq]").evaluate_all("els => els.map((e) => e.dataset.id)")
    at = ids.index(last.get_attribute("data-id"))
    last.focus()
    page.keyboard.press("k")
    assert page.evaluate("document.activeElement.dataset.id") == ids[at - 1]
    page.keyboard.press("k")
    assert page.evaluate("document.activeElement.dataset.id") == ids[at - 2]
    page.keyboard.press("j")
    page.keyboard.press("j")
    expect(last).to_be_focused()
    second_id = page.locator(".msg.mine", has_text="第二条").get_attribute("data-id")
    second = page.locator(f'.msg[data-id="{second_id}"]')
    second.focus()
    assert page.evaluate(TAB_STOPS_JS) == 1  # the roving stop moved with the focus
    # Enter reaches the message's own controls; Tab walks them; Esc goes back to the message.
    page.keyboard.press("Enter")
    expect(second.get_by_role("button", name="回复")).to_be_focused()
    page.keyboard.press("Tab")
    expect(second.get_by_role("button", name="添加表情回应")).to_be_focused()
    assert page.evaluate(TAB_STOPS_JS) > 3
    page.keyboard.press("Escape")
    expect(second).to_be_focused()
    assert page.evaluate(TAB_STOPS_JS) == 1
    # r: reply
    page.keyboard.press("r")
    expect(page.locator("#quote-bar")).to_be_visible()
    expect(page.locator("#quote-bar")).to_contain_text("第二条")
    expect(page.locator("#draft")).to_be_focused()
    page.keyboard.press("Escape")
    expect(page.locator("#quote-bar")).to_be_hidden()
    # c: copy link
    second.focus()
    page.keyboard.press("c")
    expect(page.locator(".toast", has_text="已复制消息链接")).to_be_visible()
    copied = page.evaluate("navigator.clipboard.readText()")
    assert copied.endswith(f"#/p/{project}/m/{second_id}"), copied
    # +: react
    second.focus()
    page.keyboard.press("+")
    menu = page.get_by_role("menu")
    expect(menu.get_by_role("menuitemradio", name="👍")).to_be_visible()
    screenshot(page, "keyboard-react-1440")
    page.keyboard.press("Escape")
    expect(menu).to_have_count(0)
    # e: edit my own message; not someone else's
    second.focus()
    page.keyboard.press("e")
    expect(second.locator("textarea")).to_be_focused()
    page.keyboard.press("Escape")
    expect(second.locator("textarea")).to_have_count(0)
    theirs = page.locator(".msg:not(.mine)").last
    theirs.focus()
    page.keyboard.press("e")
    expect(page.locator(".msg textarea")).to_have_count(0)
    expect(theirs).to_be_focused()


def test_a_focused_message_keeps_the_focus_when_it_is_redrawn(
    owner: Person, room_server: RoomServer
) -> None:
    """A reaction (or an edit, a thread reply) on the message the reader is on redraws it; the
    focus stays on the new entry instead of falling to the page (j/k would then start over)."""
    project = room_server.create_project("重绘", TEAM)
    said = room_server.say(project, "焦点在这条上")["message_id"]
    room_server.say(project, "下一条")
    page = owner.page
    owner.open_project(project)
    target = page.locator(f'.msg[data-id="{said}"]')
    target.focus()
    expect(target).to_be_focused()
    room_server.post(f"/api/messages/{said}/reactions", {"emoji": "👍"})
    expect(target.locator(".reaction-emoji")).to_have_count(1)  # redrawn with its reaction
    expect(page.locator(f'.msg[data-id="{said}"]')).to_be_focused()
    page.keyboard.press("j")
    expect(page.locator(".msg.mine", has_text="下一条")).to_be_focused()


def test_next_unread_project_and_the_help(owner: Person, room_server: RoomServer) -> None:
    here = room_server.create_project("这里")
    quiet = room_server.create_project("没新消息")
    busy = room_server.create_project("有新消息")
    bob = room_server.invite_session(busy, "bobk", "鲍勃")
    room_server.say(quiet, "我自己写的")
    page = owner.page
    owner.open_project(busy)
    owner.open_project(here)
    room_server.say(busy, "你好，有空看看", session=bob)
    link = page.locator(f'.project-link[data-project-id="{busy}"]')
    expect(link.locator(".unread-badge")).to_have_text("1")
    page.locator("#timeline").focus()
    page.keyboard.press("Alt+Shift+ArrowDown")
    expect(link).to_have_attribute("aria-current", "page")
    # Read now: nothing else is unread, the key stays put.
    page.keyboard.press("Alt+Shift+ArrowDown")
    page.wait_for_timeout(300)
    expect(link).to_have_attribute("aria-current", "page")
    page.locator("#timeline").focus()
    page.keyboard.press("?")
    help_table = page.get_by_role("dialog").locator(".shortcut-table")
    for keys in ("j / k", "Alt+Shift+↑ / Alt+Shift+↓", "Enter", "r", "e", "+", "c"):
        expect(help_table.locator("kbd", has_text=keys).first).to_be_visible()
    expect(help_table).to_contain_text("有未读消息的项目")
    expect(help_table).to_contain_text("复制链接")
    screenshot(page, "keyboard-help-1440")


@pytest.mark.parametrize(("width", "lang"), [(1024, "en"), (600, "zh-CN")])
def test_the_help_at_other_widths(
    chromium: Browser, room_server: RoomServer, width: int, lang: str
) -> None:
    person = sign_in_owner(chromium, room_server, width=width)
    page = person.page
    try:
        if lang == "en":
            page.evaluate("() => localStorage.setItem('room.lang', JSON.stringify('en'))")
            page.reload()
        expect(page.locator("#app")).to_be_visible()
        page.locator("body").press("?")
        table = page.get_by_role("dialog").locator(".shortcut-table")
        expect(table).to_contain_text(
            "Previous / next project with unread messages" if lang == "en" else "有未读消息的项目"
        )
        screenshot(page, f"keyboard-help-{width}-{lang}")
        person.assert_clean()
    finally:
        person.close()
