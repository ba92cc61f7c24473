"""Issue 17 items 2–5 in real Chromium against a real server: links and highlighted code (with
a copy button that copies), reactions live in a second person's tab, the project switcher and
the shortcuts, mark as unread, and message info (earlier versions, deliveries); screenshots at
1440, 1024 and 600 px, light and dark."""

# The fixtures chromium, room_server and owner are imported from tests/support/browser.py and
# used as test arguments, which linters read as unused imports redefined.
# ruff: noqa: F401, F811

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Browser, Locator, Page, expect

from tests.support.browser import (
    Person,
    RoomServer,
    chromium,
    join,
    layout_problems,
    owner,
    room_server,
    screenshot,
    sign_in_owner,
)

pytestmark = pytest.mark.browser

LEAD = [{"role": "lead", "handle": "lead", "display_name": "负责人"}]
CODE = 'def greet(name):\n    return f"你好，{name}"  # <b>not bold</b>'
RICH = (
    "部署文档见 https://docs.example.com/guide/install?lang=zh ，"
    "另见 [官方说明](https://evil.example/login)。\n\n"
    f"```python\n{CODE}\n```\n\n"
    "| 名称 | 数量 | 价格 |\n|:--|:-:|--:|\n| 苹果 | 3 | 12.50 |\n| 香蕉 | 12 | 3.00 |"
)


def message(page: Page, text: str) -> Locator:
    return page.locator(".msg", has_text=text)


def test_links_code_and_tables_render_and_the_copy_button_copies(
    owner: Person, room_server: RoomServer
) -> None:
    project = room_server.create_project("链接与代码")
    room_server.say(project, RICH)
    page = owner.page
    owner.context.grant_permissions(["clipboard-read", "clipboard-write"])
    owner.open_project(project)
    body = page.locator(".msg-body", has_text="部署文档见")
    bare = body.locator('a[href="https://docs.example.com/guide/install?lang=zh"]')
    expect(bare).to_have_text("docs.example.com/guide/install?lang=zh")
    expect(bare).to_have_attribute("target", "_blank")
    expect(bare).to_have_attribute("rel", "noopener noreferrer nofollow")
    expect(body.locator(".link-host")).to_have_text("evil.example")
    code = body.locator("pre.highlight[data-lang=python] code")
    expect(code.locator("span.k").first).to_have_text("def")
    expect(code.locator("span.nf")).to_have_text("greet")
    # Coloured by web/code.css (a class rule, no inline style): the keyword is not body text.
    colours = code.evaluate(
        "el => [getComputedStyle(el.querySelector('.k')).color, getComputedStyle(el).color]"
    )
    assert colours[0] != colours[1]
    assert body.locator("[style]").count() == 0
    assert body.locator("b").count() == 0  # HTML inside code stays text
    expect(body.locator("td.align-right").first).to_have_css("text-align", "right")
    expect(body.locator("th.align-center")).to_have_css("text-align", "center")
    body.locator(".code-block").hover()
    copy = body.get_by_role("button", name="复制代码")
    copy.click()
    expect(copy).to_have_text("已复制")
    assert page.evaluate("navigator.clipboard.readText()") == CODE + "\n"
    owner.assert_clean()


def test_a_reaction_appears_live_in_a_second_tab(
    chromium: Browser, owner: Person, room_server: RoomServer
) -> None:
    project = room_server.create_project("表情回应")
    sent = room_server.say(project, "今晚八点发布，大家看一下")
    wang = join(chromium, room_server, project, "wang", "小王")
    try:
        owner.open_project(project)
        wang.open_project(project)
        mine = message(owner.page, "今晚八点发布")
        mine.hover()
        mine.get_by_role("button", name="添加表情回应").click()
        owner.page.get_by_role("menuitemradio", name="👍").click()
        theirs = message(wang.page, "今晚八点发布")
        chip = theirs.locator('.reaction[data-emoji="👍"]')
        expect(chip).to_have_text("👍1")
        expect(chip).to_have_attribute("aria-pressed", "false")
        expect(chip).to_have_attribute("title", re.compile("你|我|owner|管理员|.+ 回应了 👍"))
        chip.click()  # the second person adds theirs
        expect(chip).to_have_text("👍2")
        expect(chip).to_have_attribute("aria-pressed", "true")
        expect(mine.locator('.reaction[data-emoji="👍"]')).to_have_text("👍2")
        # Any other single emoji, from the picker's dialog; two are refused before sending.
        theirs.locator(".reaction-add").click()
        wang.page.get_by_role("menuitem", name="其他表情…").click()
        box = wang.page.get_by_role("textbox", name="一个表情")
        box.fill("🚀🚀")
        wang.page.get_by_role("button", name="回应", exact=True).click()
        expect(wang.page.get_by_text("请只输入一个表情")).to_be_visible()
        box.fill("🚀")
        wang.page.get_by_role("button", name="回应", exact=True).click()
        expect(mine.locator('.reaction[data-emoji="🚀"]')).to_have_text("🚀1")
        # Taking one's own back: gone in both tabs.
        chip.click()
        expect(mine.locator('.reaction[data-emoji="👍"]')).to_have_text("👍1")
        stored = next(m for m in room_server.messages(project) if m["id"] == sent["message_id"])
        assert [(r["emoji"], r["count"]) for r in stored["reactions"]] == [("👍", 1), ("🚀", 1)]
        screenshot(owner.page, "chat-reactions")
        wang.assert_clean()
    finally:
        wang.close()


def test_the_switcher_and_the_shortcuts(owner: Person, room_server: RoomServer) -> None:
    names = ["前端重构", "后端迁移", "Docs site"]
    ids = [room_server.create_project(name) for name in names]
    page = owner.page
    owner.open_project(ids[2])
    page.keyboard.press("Control+p")
    dialog = page.get_by_role("dialog", name="切换项目")
    expect(dialog).to_be_visible()
    box = dialog.get_by_role("combobox", name="项目名称")
    expect(box).to_be_focused()
    # An IME's Enter confirming a candidate opens nothing.
    box.dispatch_event("compositionstart", {"data": ""})
    box.evaluate(
        "el => { el.value = 'qian'; el.dispatchEvent(new InputEvent('input', {isComposing: true})); }"
    )
    box.evaluate(
        "el => el.dispatchEvent(new KeyboardEvent('keydown', {key: 'Enter', isComposing: true,"
        " keyCode: 229, bubbles: true, cancelable: true}))"
    )
    expect(dialog).to_be_visible()
    box.evaluate("el => { el.value = '前重'; }")
    box.dispatch_event("compositionend", {"data": "前重"})
    expect(dialog.get_by_role("option").first).to_have_text("前端重构")
    screenshot(page, "chat-switcher")
    page.keyboard.press("Enter")
    expect(dialog).to_have_count(0)
    expect(page.locator(f'.project-link[data-project-id="{ids[0]}"]')).to_have_attribute(
        "aria-current", "page"
    )
    # Latin names fuzzily, case-insensitively.
    page.keyboard.press("Control+p")
    page.keyboard.type("dsite")
    expect(page.get_by_role("option").first).to_have_text("Docs site")
    page.keyboard.press("Escape")
    expect(page.get_by_role("dialog", name="切换项目")).to_have_count(0)
    # Alt+↓ / Alt+↑: the next and previous project in the column.
    order = page.locator("#project-groups .project-link").evaluate_all(
        "els => els.map((a) => Number(a.dataset.projectId))"
    )
    at = order.index(ids[0])
    page.locator("#timeline").focus()
    page.keyboard.press("Alt+ArrowDown")
    expect(page.locator(".project-link[aria-current=page]")).to_have_attribute(
        "data-project-id", str(order[(at + 1) % len(order)])
    )
    page.keyboard.press("Alt+ArrowUp")
    expect(page.locator(".project-link[aria-current=page]")).to_have_attribute(
        "data-project-id", str(ids[0])
    )
    # ? lists the shortcuts, naming Ctrl+P for the switcher since search has Ctrl+K.
    page.locator("#timeline").focus()
    page.keyboard.press("?")
    help_dialog = page.get_by_role("dialog", name="键盘快捷键")
    expect(help_dialog).to_contain_text("Ctrl+P")
    expect(help_dialog).to_contain_text("Ctrl+K 已用于搜索")
    screenshot(page, "chat-shortcuts")
    page.keyboard.press("Escape")
    expect(help_dialog).to_have_count(0)
    # ? typed into the composer is text, not the shortcut.
    page.locator("#draft").fill("")
    page.locator("#draft").type("为什么?")
    expect(page.get_by_role("dialog", name="键盘快捷键")).to_have_count(0)
    expect(page.locator("#draft")).to_have_value("为什么?")
    owner.assert_clean()


def test_escape_closes_a_drawer(chromium: Browser, room_server: RoomServer) -> None:
    project = room_server.create_project("抽屉")
    person = sign_in_owner(chromium, room_server, width=600, height=860)
    try:
        page = person.page
        person.open_project(project)
        page.locator("#open-projects").click()
        expect(page.locator("#projects-col")).to_have_class(re.compile("drawer-open"))
        page.keyboard.press("Escape")
        expect(page.locator("#projects-col")).not_to_have_class(re.compile("drawer-open"))
        page.locator("#open-panel").click()
        expect(page.locator("#panel-col")).to_have_class(re.compile("drawer-open"))
        page.keyboard.press("Escape")
        expect(page.locator("#panel-col")).not_to_have_class(re.compile("drawer-open"))
        person.assert_clean()
    finally:
        person.close()


def test_mark_as_unread_moves_the_cursor_back(owner: Person, room_server: RoomServer) -> None:
    project = room_server.create_project("未读")
    other = room_server.create_project("别处")
    wang = room_server.invite_session(project, "wang2", "小王")
    for i in range(4):
        room_server.say(project, f"进度第 {i} 条", session=wang)
    page = owner.page
    owner.open_project(project)
    entry = page.locator(f'.project-link[data-project-id="{project}"]')
    expect(entry.locator(".unread-badge")).to_have_count(0)
    second = message(page, "进度第 1 条")
    second.hover()
    second.get_by_role("button", name="更多").click()
    page.get_by_role("menuitem", name="标为未读").click()
    expect(page.locator(".toast").last).to_contain_text("已标为未读")
    # The marker sits above it, and stays there while I look at the bottom.
    marker = page.locator("#timeline > .unread-marker")
    expect(marker).to_be_visible()
    assert page.locator("#timeline > *").evaluate_all(
        "els => { const i = els.findIndex((e) => e.classList.contains('unread-marker'));"
        " return els[i + 1].textContent.includes('进度第 1 条'); }"
    )
    owner.open_project(other)
    expect(entry.locator(".unread-badge")).to_have_text("3")
    me = room_server.get("/api/me")
    assert next(p for p in me["projects"] if p["id"] == project)["unread"] == 3
    # The message's link (its menu's 复制链接), opened on a fresh page, scrolls to it and
    # highlights it.
    owner.context.grant_permissions(["clipboard-read", "clipboard-write"])
    owner.open_project(project)
    second.hover()
    second.get_by_role("button", name="更多").click()
    page.get_by_role("menuitem", name="复制链接").click()
    link = page.evaluate("navigator.clipboard.readText()")
    assert link.endswith(f"#/p/{project}/m/{second.get_attribute('data-id')}")
    fresh = owner.context.new_page()
    fresh.goto(link)
    opened = fresh.locator(f'.msg[data-id="{second.get_attribute("data-id")}"]')
    expect(opened).to_be_in_viewport()
    expect(opened).to_have_class(re.compile("flash"))
    expect(opened).to_be_focused()
    fresh.close()
    owner.assert_clean()


def test_message_info_shows_versions_and_deliveries(owner: Person, room_server: RoomServer) -> None:
    project = room_server.create_project("消息详情", agents=LEAD)
    page = owner.page
    owner.open_project(project)
    draft = page.locator("#draft")
    draft.fill("@lead 请检查发布脚本")
    draft.press("Enter")
    # Its id once the server has acknowledged it (until then it is the pending "p:…" entry).
    acked = page.locator('.msg.mine:not([data-id^="p:"])', has_text="请检查发布脚本")
    expect(acked).to_have_count(1)
    mine_id = acked.get_attribute("data-id")
    mine = page.locator(f'.msg[data-id="{mine_id}"]')  # its text changes while it is edited
    # The echo lead answers: its delivery is consumed.
    expect(page.locator(".msg", has_text="builtin/echo")).to_have_count(1, timeout=15000)
    for text in ("@lead 请检查发布脚本（第二版）", "@lead 请检查发布脚本（第三版）"):
        mine.hover()
        mine.get_by_role("button", name="编辑").click()
        editor = mine.locator("textarea.edit-input")
        editor.fill(text)
        editor.press("Enter")
        expect(mine.locator(".msg-body")).to_contain_text(text.removeprefix("@lead "))
    expect(mine.locator(".edited")).to_be_visible()
    mine.hover()
    mine.get_by_role("button", name="更多").click()
    page.get_by_role("menuitem", name=re.compile("消息详情")).click()
    info = page.get_by_role("dialog", name="消息详情")
    expect(info).to_contain_text("编辑于")
    versions = info.locator(".info-version")
    expect(versions).to_have_count(2)
    expect(versions.first).to_contain_text("原文")
    expect(versions.first.locator(".info-version-body")).to_have_text("@lead 请检查发布脚本")
    expect(versions.nth(1).locator(".info-version-body")).to_have_text(
        "@lead 请检查发布脚本（第二版）"
    )
    row = info.locator(".info-deliveries li")
    expect(row).to_have_count(1)
    expect(row).to_contain_text("@lead")
    expect(row).to_have_attribute("data-state", "consumed")
    screenshot(page, "chat-message-info")
    page.keyboard.press("Escape")
    expect(info).to_have_count(0)
    owner.assert_clean()


@pytest.mark.parametrize("width", [1440, 1024, 600])
@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_chat_at_every_width_and_theme(
    chromium: Browser, room_server: RoomServer, width: int, scheme: str
) -> None:
    project = room_server.create_project(f"排版 {width} {scheme}")
    sent = room_server.say(project, RICH)
    room_server.post(f"/api/messages/{sent['message_id']}/reactions", {"emoji": "👍"})
    room_server.post(f"/api/messages/{sent['message_id']}/reactions", {"emoji": "🎉"})
    person = sign_in_owner(chromium, room_server, width=width, height=860, color_scheme=scheme)
    try:
        page = person.page
        person.open_project(project)
        body = page.locator(".msg", has_text="部署文档见")
        expect(body.locator(".reaction")).to_have_count(3)  # two emoji and the add button
        body.scroll_into_view_if_needed()
        assert layout_problems(page) == []
        screenshot(page, f"chat-{width}-{scheme}")
        body.locator(".code-block").hover()
        page.keyboard.press("Control+p")
        expect(page.get_by_role("dialog", name="切换项目")).to_be_visible()
        screenshot(page, f"chat-switcher-{width}-{scheme}")
        person.assert_clean()
    finally:
        person.close()
