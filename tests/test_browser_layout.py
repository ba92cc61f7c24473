"""Layout: three columns collapsing into drawers, the Aa text size, light/dark from the system,
the English toggle; screenshots at 1440, 1024 and 600 saved to test-artifacts/."""

# The fixtures chromium, room_server and owner are imported from tests/support/browser.py and
# used as test arguments, which linters read as unused imports redefined.
# ruff: noqa: F401, F811

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Browser, FloatRect, Page, expect

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

LONG_NAME = "设置页迁移：把旧的设置页面和通知偏好迁移到新的组件库"
GOAL = "把设置页面迁移到新的组件库，保持所有现有行为不变，并补齐键盘可访问性和中文输入法下的测试。"
AGENTS = [
    {"role": "lead", "handle": "lead", "display_name": "负责人"},
    {"role": "frontend", "handle": "fe", "display_name": "前端小助手"},
    {"role": "backend", "handle": "be", "display_name": "后端工程师"},
]


@pytest.fixture(scope="module")
def busy_project(room_server: RoomServer) -> int:
    """A project whose timeline has prose, code, a long Chinese paragraph and replies."""
    project = room_server.create_project(LONG_NAME, AGENTS, goal=GOAL)
    bob = room_server.invite_session(project, "bob", "王小明")
    room_server.say(
        project,
        "大家好，今天开始设置页的迁移。@fe 先看看 `SettingsForm` 组件，**注意**不要改接口。",
    )
    room_server.say(
        project,
        "参考：[组件库文档](https://example.com/ui)\n\n```js\nconst settings = loadSettings({ locale: 'zh-CN', theme: 'system' });\n```",
    )
    room_server.say(
        project,
        "我来负责测试用例，@be 后端的接口文档在哪里？这是一段很长的中文说明，用来检查在窄屏下是否正常换行，"
        "不应该溢出气泡，也不应该被截断或者用省略号隐藏，尤其是在特大字号下也要完整显示。",
        session=bob,
    )
    return project


def column_boxes(page: Page) -> dict[str, FloatRect | None]:
    return {
        name: page.locator(selector).bounding_box() if page.locator(selector).is_visible() else None
        for name, selector in (
            ("projects", "#projects-col"),
            ("timeline", "#timeline"),
            ("panel", "#panel-col"),
        )
    }


def test_three_columns_collapse_into_drawers(owner: Person, busy_project: int) -> None:
    page = owner.page
    owner.open_project(busy_project)
    long_text = page.locator(".msg", has_text="尤其是在特大字号下也要完整显示")
    expect(long_text).to_have_count(2)  # and its echo

    # 1440: projects | timeline | tasks & models, side by side.
    boxes = column_boxes(page)
    assert boxes["projects"] and boxes["timeline"] and boxes["panel"], boxes
    assert boxes["projects"]["x"] + boxes["projects"]["width"] <= boxes["timeline"]["x"] + 1
    assert boxes["timeline"]["x"] + boxes["timeline"]["width"] <= boxes["panel"]["x"] + 1
    assert boxes["timeline"]["width"] >= 700
    assert layout_problems(page) == []
    screenshot(page, "layout-1440")

    # 1024: the panel becomes a drawer; the timeline keeps its width.
    page.set_viewport_size({"width": 1024, "height": 800})
    expect(page.locator("#panel-col")).not_to_be_visible()
    boxes = column_boxes(page)
    assert boxes["timeline"] and boxes["timeline"]["width"] >= 700, boxes
    assert layout_problems(page) == []
    screenshot(page, "layout-1024")
    page.locator("#open-panel").click()
    expect(page.locator("#panel-col")).to_be_visible()
    expect(page.locator("#open-panel")).to_have_attribute("aria-expanded", "true")
    expect(page.locator("#tabbtn-members")).to_be_focused()
    screenshot(page, "layout-1024-panel-drawer")
    page.keyboard.press("Escape")
    expect(page.locator("#panel-col")).not_to_be_visible()
    expect(page.locator("#open-panel")).to_be_focused()

    # 600: both side columns are drawers; the timeline takes the whole width.
    page.set_viewport_size({"width": 600, "height": 900})
    expect(page.locator("#projects-col")).not_to_be_visible()
    boxes = column_boxes(page)
    assert boxes["timeline"] and boxes["timeline"]["width"] >= 590, boxes
    assert layout_problems(page) == []
    screenshot(page, "layout-600")
    page.locator("#open-projects").click()
    expect(page.locator("#projects-col")).to_be_visible()
    expect(page.locator(f'.project-link[data-project-id="{busy_project}"]')).to_be_focused()
    assert layout_problems(page) == []
    screenshot(page, "layout-600-projects-drawer")
    page.locator("#scrim").click(position={"x": 560, "y": 400})
    expect(page.locator("#projects-col")).not_to_be_visible()

    # The largest text size at the narrowest width still wraps instead of cutting text.
    page.locator("#text-size").click()
    page.get_by_role("menuitemradio", name="特大").click()
    assert layout_problems(page) == []
    screenshot(page, "layout-600-xlarge")


def test_text_size_is_saved_locally(owner: Person, busy_project: int) -> None:
    page = owner.page
    owner.open_project(busy_project)
    root_size = "() => getComputedStyle(document.documentElement).fontSize"
    assert page.evaluate(root_size) == "15px"
    page.locator("#text-size").click()
    menu = page.get_by_role("menu", name="文字大小")
    expect(menu.get_by_role("menuitemradio", name="标准")).to_have_attribute("aria-checked", "true")
    menu.get_by_role("menuitemradio", name="大", exact=True).click()
    assert page.evaluate(root_size) == "17px"
    page.reload()
    expect(page.locator("#app")).to_be_visible()
    assert page.evaluate(root_size) == "17px"
    # Keyboard only: open the menu, move to 特大, pick it.
    page.locator("#text-size").focus()
    page.keyboard.press("Enter")
    expect(page.get_by_role("menuitemradio", name="标准")).to_be_focused()
    page.keyboard.press("End")
    page.keyboard.press("Enter")
    assert page.evaluate(root_size) == "19px"
    expect(page.locator("#text-size")).to_be_focused()
    assert layout_problems(page) == []


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_colours_follow_the_system(chromium: Browser, room_server: RoomServer, scheme: str) -> None:
    person = sign_in_owner(chromium, room_server, color_scheme=scheme)
    try:
        # The module script shows #app without waiting for the stylesheets (Chromium runs it
        # once parsed); the page's load event is the one that waits for them.
        person.page.wait_for_load_state("load")
        background = person.page.evaluate("() => getComputedStyle(document.body).backgroundColor")
        channels = [int(c) for c in re.findall(r"\d+", background)[:3]]
        assert (sum(channels) / 3 < 60) if scheme == "dark" else (sum(channels) / 3 > 220), (
            background
        )
        person.assert_clean()
    finally:
        person.close()


def test_english_is_available_and_remembered(owner: Person, busy_project: int) -> None:
    page = owner.page
    owner.open_project(busy_project)
    expect(page.locator("html")).to_have_attribute("lang", "zh-CN")
    expect(page.locator("#send")).to_have_text("发送")
    page.locator("#lang-toggle").click()
    expect(page.locator("html")).to_have_attribute("lang", "en")
    expect(page.locator("#send")).to_have_text("Send")
    expect(page.locator("#tabbtn-tasks")).to_have_text("Tasks")
    expect(page.locator(".project-group[data-group=active] summary")).to_contain_text("In progress")
    expect(page.locator(".day-sep")).to_have_text("Today")
    page.set_viewport_size({"width": 1024, "height": 800})
    page.locator("#open-panel").click()
    page.get_by_role("tab", name="Models").click()
    expect(page.locator("#tab-models h3").first).to_have_text("Project default model")
    assert layout_problems(page) == []
    screenshot(page, "layout-1024-en")
    page.keyboard.press("Escape")
    page.reload()
    expect(page.locator("#send")).to_have_text("Send")
    page.locator("#lang-toggle").click()
    expect(page.locator("#send")).to_have_text("发送")


def test_both_languages_have_every_string(owner: Person) -> None:
    missing = owner.page.evaluate(
        """async () => {
          const { STRINGS_ZH } = await import("/static/strings-zh.js");
          const { STRINGS_EN } = await import("/static/strings-en.js");
          const zh = Object.keys(STRINGS_ZH), en = Object.keys(STRINGS_EN);
          // English plural forms ("<key>.one", web/i18n.js) stand beside a key both tables have.
          const plural = (k) => k.endsWith(".one") && k.slice(0, -4) in STRINGS_ZH;
          return { zhOnly: zh.filter((k) => !(k in STRINGS_EN)), enOnly: en.filter((k) => !(k in STRINGS_ZH) && !plural(k)), n: zh.length };
        }"""
    )
    assert missing["zhOnly"] == [] and missing["enOnly"] == [] and missing["n"] > 300, missing


def test_login_button_in_a_real_browser(chromium: Browser, room_server: RoomServer) -> None:
    context = chromium.new_context()
    try:
        page = context.new_page()
        page.goto(f"{room_server.origin}/login/{room_server.server.fresh_login_secret()}")
        # A context with no locale is Playwright's en-US: the page follows the browser.
        page.get_by_role("button", name=re.compile("登录|Sign in")).click()
        expect(page.locator("#app")).to_be_visible()
    finally:
        context.close()


def test_english_counts_agree_with_their_number(owner: Person) -> None:
    """web/i18n.js's plurals in the page's own modules: "1 reply", "2 replies"; the count is the
    number a word follows (not "v2"), errors worded from their code agree too, Chinese has one
    form."""
    said = owner.page.evaluate(
        """async () => {
          const i18n = await import("/static/i18n.js");
          i18n.setLang("en");
          const en = [
            i18n.t("thread.replies", { n: 1 }), i18n.t("thread.replies", { n: 2 }),
            i18n.t("search.count", { n: 1 }), i18n.t("search.count", { n: 0 }),
            i18n.t("attach.pdfPages", { n: "1" }),
            i18n.t("noticeText.plan_submitted", { by: "Li", version: 1, count: 3 }),
            i18n.t("noticeText.plan_submitted", { by: "Li", version: 2, count: 1 }),
            i18n.errorText({ code: "too_many_attachments", details: { limit: 1 } }),
          ];
          i18n.setLang("zh-CN");
          return { en, zh: i18n.t("thread.replies", { n: 1 }) };
        }"""
    )
    assert said["en"] == [
        "1 reply",
        "2 replies",
        "1 result",
        "0 results",
        "1 page",
        "Li submitted plan v1 (3 tasks):",
        "Li submitted plan v2 (1 task):",
        "A message may carry at most 1 attachment",
    ]
    assert said["zh"] == "1 条跟帖"
