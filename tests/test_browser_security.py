"""Security and accessibility: an XSS corpus renders inert under the CSP; every action is
reachable by keyboard, every control is labelled, and focus is visible."""

# The fixtures chromium, room_server and owner are imported from tests/support/browser.py and
# used as test arguments, which linters read as unused imports redefined.
# ruff: noqa: F401, F811

from __future__ import annotations

import re
import urllib.request

import pytest
from playwright.sync_api import Browser, Dialog, Page, expect

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

XSS_CORPUS = [
    "<script>window.__xss = 'script'</script>",
    "<img src=x onerror=\"window.__xss = 'img'\">",
    "[点我](javascript:window.__xss='link')",
    "<a href=\"javascript:window.__xss='a'\">原始链接</a>",
    '<svg onload="window.__xss=\'svg\'"><circle r="10"></circle></svg>',
    "![图片](data:image/svg+xml;base64,PHN2ZyBvbmxvYWQ9ImFsZXJ0KDEpIi8+)",
    "[数据](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)",
    "<iframe src=\"javascript:window.__xss='iframe'\"></iframe>",
    "<details open ontoggle=\"window.__xss='details'\">x</details>",
    '<div style="background:url(javascript:alert(1))">样式</div>',
    "`<script>window.__xss='code'</script>` 和 **<b onmouseover=alert(1)>粗</b>**",
    "[@<img src=x onerror=alert(1)>](https://example.com)",
]
VIOLATIONS_JS = """
window.__violations = [];
document.addEventListener("securitypolicyviolation", (e) => window.__violations.push(e.violatedDirective + " " + e.blockedURI));
"""

AUDIT_JS = r"""
(root) => {
  const scope = root ? document.querySelector(root) : document;
  const named = (el) => {
    if (el.getAttribute("aria-label")?.trim()) return true;
    const by = el.getAttribute("aria-labelledby");
    if (by && by.split(/\s+/).some((id) => document.getElementById(id)?.textContent.trim())) return true;
    if (el.labels && [...el.labels].some((l) => l.textContent.trim())) return true;
    if (el.title?.trim()) return true;
    if (["BUTTON", "A", "SUMMARY"].includes(el.tagName) || /^(tab|menuitem|menuitemradio|option)$/.test(el.getAttribute("role") || "")) {
      return Boolean(el.textContent.trim());
    }
    return false;
  };
  const controls = scope.querySelectorAll("button, a[href], input:not([type=hidden]), select, textarea, summary, [role=tab], [role=menuitem], [role=menuitemradio], [role=option], [tabindex]:not([tabindex='-1'])");
  const problems = [];
  for (const el of controls) {
    if (!el.checkVisibility({ visibilityProperty: true }) || el.closest("[inert]")) continue;
    const interactive = el.matches("button, a[href], input, select, textarea, summary, [role]");
    if (interactive && !named(el)) problems.push(el.outerHTML.slice(0, 120));
  }
  return problems;
}
"""


def xss_flag(page: Page) -> object:
    return page.evaluate("() => [window.__xss, window.__violations]")


def test_xss_corpus_renders_inert(chromium: Browser, room_server: RoomServer) -> None:
    project = room_server.create_project(
        "<img src=x onerror=alert(1)> 安全检查",
        [
            {
                "role": "lead",
                "handle": "lead",
                "display_name": "<img src=x onerror=window.__xss='name'>",
            }
        ],
        goal="<script>window.__xss='goal'</script>",
    )
    for body in XSS_CORPUS:
        room_server.say(project, body, as_plain_text=True)
    dialogs: list[str] = []
    person = sign_in_owner(
        chromium, room_server, setup=lambda page: page.add_init_script(VIOLATIONS_JS)
    )
    try:
        page = person.page

        def dismiss(dialog: Dialog) -> None:
            dialogs.append(dialog.message)
            dialog.dismiss()

        page.on("dialog", dismiss)
        person.open_project(project)
        # Typed into the composer too, and previewed by the resolver on the way.
        page.locator("#draft").fill("<script>window.__xss='composer'</script> @lead 看看")
        page.locator("#draft").press("Enter")
        expect(page.locator(".msg.mine", has_text="window.__xss='composer'")).to_be_visible()
        expect(page.locator(".msg.pending")).to_have_count(0)  # acked: committed on the server
        me = room_server.members(project)["owner"]["id"]
        mine = [m for m in room_server.messages(project) if m["author_id"] == me]
        assert len(mine) >= len(XSS_CORPUS) + 1
        expect(page.locator(".msg.mine")).to_have_count(len(mine))
        expect(
            page.locator(".msg:not(.mine)").first
        ).to_be_visible()  # the lead echoes (in batches)
        for el in page.locator(".msg .msg-body, .room-goal").all():
            el.hover(force=True)  # an action bar may overlay the next body: hover it anyway
        page.wait_for_timeout(500)

        assert dialogs == []
        assert xss_flag(page) == [None, []]
        dangerous = page.evaluate(
            """() => {
              const found = [];
              for (const el of document.querySelectorAll("#app *")) {
                for (const attr of el.attributes) {
                  const value = attr.value.trim().toLowerCase();
                  if (attr.name.startsWith("on")) found.push(`${el.tagName} ${attr.name}`);
                  if (["href", "src", "action", "formaction", "xlink:href"].includes(attr.name) && /^(javascript|data|vbscript):/.test(value)) found.push(`${el.tagName} ${attr.name}=${value}`);
                  if (attr.name === "style" && el.closest(".msg-body, .notice-body, .tool-body")) found.push(`${el.tagName} style`);
                }
              }
              const bodies = document.querySelectorAll(".msg-body, .notice-body, .tool-body, .room-goal, .author, .room-title");
              for (const body of bodies) for (const bad of body.querySelectorAll("script, img, svg, iframe, object, embed, style, details, form, input")) found.push(bad.tagName);
              return found;
            }"""
        )
        assert dangerous == []
        # What was typed is shown as text, not dropped or run.
        expect(
            page.locator(".msg.mine .msg-body", has_text="<script>window.__xss = 'script'</script>")
        ).to_have_count(1)
        expect(page.locator("#room-title")).to_have_text("<img src=x onerror=alert(1)> 安全检查")
        expect(page.locator(".msg:not(.mine) .author").first).to_have_text(
            "<img src=x onerror=window.__xss='name'>"
        )
        screenshot(page, "security-xss-corpus")
        person.assert_clean()
    finally:
        person.close()


def test_pages_carry_the_csp(room_server: RoomServer) -> None:
    for path in ("/", "/static/app.js", "/static/style.css"):
        with urllib.request.urlopen(room_server.origin + path, timeout=5) as response:
            csp = response.headers["Content-Security-Policy"]
        assert "script-src 'self'" in csp and "default-src 'none'" in csp, (path, csp)
        assert "unsafe-inline" not in csp


def test_every_control_is_labelled(owner: Person, room_server: RoomServer) -> None:
    project = room_server.create_project(
        "无障碍标签", [{"role": "lead", "handle": "lead", "display_name": "负责人"}]
    )
    room_server.say(project, "@lead 看一下")
    owner.open_project(project)
    page = owner.page
    expect(page.locator(".msg")).to_have_count(2)
    assert page.evaluate(AUDIT_JS, None) == []
    for tab in ("任务", "决策", "模型"):
        page.get_by_role("tab", name=tab).click()
        expect(
            page.get_by_role("tabpanel", name=tab).locator(".muted", has_text="加载中")
        ).to_have_count(0)
        assert page.evaluate(AUDIT_JS, "#panel-col") == [], tab
    page.get_by_role("button", name="新建项目").click()
    assert page.evaluate(AUDIT_JS, "dialog") == []
    page.keyboard.press("Escape")
    page.locator("#draft").fill("@")
    assert page.evaluate(AUDIT_JS, "#composer") == []
    page.locator("#draft").fill("")
    page.locator(".msg .avatar").first.click()
    assert page.evaluate(AUDIT_JS, ".menu") == []
    page.keyboard.press("Escape")
    page.get_by_role("menuitem").first.is_visible()


def focused(page: Page) -> str:
    return str(
        page.evaluate(
            "() => { const el = document.activeElement; return el.id || el.dataset.tab || el.dataset.action || el.className || el.tagName; }"
        )
    )


def test_everything_is_reachable_by_keyboard_with_visible_focus(
    owner: Person, room_server: RoomServer
) -> None:
    project = room_server.create_project(
        "键盘操作", [{"role": "lead", "handle": "lead", "display_name": "负责人"}]
    )
    room_server.say(project, "第一条")
    room_server.say(project, "第二条")
    owner.open_project(project)
    page = owner.page
    expect(page.locator(".msg")).to_have_count(4)

    # The skip link comes first and lands in the composer.
    page.locator("body").focus()
    page.keyboard.press("Tab")
    expect(page.locator(".skip-link")).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.locator("#draft")).to_be_focused()

    # Focus is visible on every kind of control.
    for selector in ("#new-project", "#text-size", "#lifecycle-menu", "#tabbtn-members", "#send"):
        page.locator(selector).focus()
        page.keyboard.press("Shift+Tab")
        page.keyboard.press("Tab")  # keyboard focus, so :focus-visible applies
        outline = page.locator(selector).evaluate(
            "el => [getComputedStyle(el).outlineStyle, getComputedStyle(el).outlineWidth]"
        )
        assert outline[0] != "none" and outline[1] != "0px", (selector, outline)

    # The timeline's Tab stop redrawn (here a reaction comes in on it) stays the Tab stop.
    stop = page.locator('#timeline > [data-seq][tabindex="0"]')
    expect(stop).to_have_count(1)
    stop_id = stop.get_attribute("data-id")
    room_server.post(f"/api/messages/{stop_id}/reactions", {"emoji": "👍"})
    expect(page.locator(f'.msg[data-id="{stop_id}"]')).to_contain_text("👍")
    expect(stop).to_have_count(1)

    # Tab walks the whole page: projects, header tools, the timeline, the composer, the panel.
    page.locator("#new-project").focus()
    seen = set()
    for _ in range(60):
        page.keyboard.press("Tab")
        seen.add(focused(page))
    assert {
        "draft",
        "send",
        "lifecycle-menu",
        "text-size",
        "members-button",
        "tabbtn-members",
    } <= seen, seen
    assert any("msg" in s for s in seen), seen

    # In the timeline (one Tab stop): arrows move between messages, Enter reaches a message's
    # actions (issue 30: Tab no longer walks every button of every message).
    last = page.locator(".msg").last
    last.focus()
    page.keyboard.press("ArrowUp")
    expect(page.locator(".msg").nth(2)).to_be_focused()
    page.keyboard.press("Home")
    expect(page.locator(".msg").first).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.locator(".msg").first.get_by_role("button", name="回复")).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.locator("#quote-bar")).to_be_visible()
    expect(page.locator("#draft")).to_be_focused()
    page.keyboard.press("Escape")
    expect(page.locator("#quote-bar")).to_be_hidden()

    # Tabs by arrow keys; the lifecycle menu by keyboard; Esc returns focus.
    page.locator("#tabbtn-members").focus()
    page.keyboard.press("ArrowRight")
    expect(page.locator("#tabbtn-tasks")).to_be_focused()
    expect(page.locator("#tab-tasks")).to_be_visible()
    page.locator("#lifecycle-menu").focus()
    page.keyboard.press("Enter")
    expect(page.get_by_role("menuitem", name="发起研究…")).to_be_focused()
    page.keyboard.press("ArrowDown")
    expect(page.get_by_role("menuitem", name="暂停项目")).to_be_focused()
    page.keyboard.press("Escape")
    expect(page.locator("#lifecycle-menu")).to_be_focused()
    expect(page.locator("#lifecycle-menu")).to_have_attribute("aria-expanded", "false")
    assert re.search(r"Project Room", page.title())


def test_signing_out_in_one_tab_signs_out_the_other(
    chromium: Browser, room_server: RoomServer
) -> None:
    person = sign_in_owner(chromium, room_server)
    try:
        first = person.page
        expect(first.locator("#conn-state")).to_have_attribute("data-status", "open")
        second = person.context.new_page()
        second.goto(room_server.origin)
        # The second tab settled (its socket open) before the person signs out there: under a
        # loaded suite the click once came while its start was still under way, and the sign
        # out's navigation never committed in 15 s.
        expect(second.locator("#conn-state")).to_have_attribute("data-status", "open")
        second.get_by_role("button", name="退出").click()
        expect(second.locator("#signed-out")).to_be_visible()
        # The first tab's socket was closed with the session: it says so, without a reload.
        expect(first.locator("#signed-out")).to_be_visible()
        expect(first.locator("#app")).to_be_hidden()
        screenshot(first, "signed-out-elsewhere")
    finally:
        person.close()
