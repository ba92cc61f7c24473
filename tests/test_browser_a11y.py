"""An axe-core run (issue 30) in real Chromium against a real server: the login page, the room
with messages, a thread pane, the task board, the notification dialog, the inbox, search results
and /overview, in Chinese and in English (and in Chinese in the dark scheme, whose colours
differ), at 1440 px, and the narrow layout at 600 px (the room, the thread pane over the
timeline, the search box over the header), and the dialogs (the task form, new and edit, a
member's card and the invite, the email digest, the cleanup preview and the purge, a PDF's
preview) and the join page of an invite link, in both languages, each with no ``serious`` or
``critical`` violation.

axe-core comes from the npm registry (package.json's devDependencies; ``./scripts/test``
installs it with ``npm ci``), and is injected into the page as a script tag from the test, not
served by the room (the context bypasses the page's CSP for that). The rules axe runs are its
defaults (WCAG 2 A and AA, and its best practices); a violation is printed with its rule, help
text and the elements it names."""

# The fixtures chromium and room_server are imported from tests/support/browser.py and used as
# test arguments, which linters read as unused imports redefined.
# ruff: noqa: F401, F811

from __future__ import annotations

import re
import shutil
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.support import pdfs
from tests.support.browser import (
    ROOT,
    Person,
    RoomServer,
    chromium,
    new_person,
    room_server,
    screenshot,
)
from tests.test_browser_attachments import DROP_JS, b64

pytestmark = pytest.mark.browser

AXE = ROOT / "node_modules" / "axe-core" / "axe.min.js"
BLOCKING = ("serious", "critical")

# Run axe on the whole document (or one part of it) and keep what a reader needs: the rule,
# its impact, its help and, per element, its selector and the summary of what failed.
RUN_AXE_JS = """
async (within) => {
  const result = await axe.run(within ? document.querySelector(within) : document,
                               { resultTypes: ["violations"] });
  return result.violations.map((v) => ({
    id: v.id, impact: v.impact, help: v.help,
    nodes: v.nodes.map((n) => ({ target: n.target.join(" "), summary: n.failureSummary })),
  }));
}
"""


def axe_source() -> str:
    # ./scripts/test always runs `npm ci`, so a missing file is a broken install, not a skip.
    assert AXE.exists(), f"{AXE} is missing: run `npm ci` (package.json lists axe-core)"
    return AXE.read_text(encoding="utf-8")


def readable(violations: list[dict[str, Any]]) -> str:
    lines = []
    for v in violations:
        lines.append(f"[{v['impact']}] {v['id']}: {v['help']}")
        for node in v["nodes"][:8]:
            summary = " / ".join(str(node["summary"]).splitlines()[1:3]).strip()
            lines.append(f"    {node['target']}  — {summary}")
    return "\n".join(lines)


class Axe:
    """Runs axe on each view and keeps its serious and critical violations; :meth:`assert_none`
    reports every view's at once (one run shows all that is left to fix)."""

    def __init__(self, page: Page, scheme: str) -> None:
        self.page = page
        self.scheme = scheme
        self.found: dict[str, list[dict[str, Any]]] = {}

    def check(self, where: str, within: str | None = None) -> None:
        if not self.page.evaluate("() => typeof window.axe === 'object'"):
            self.page.add_script_tag(content=axe_source())
        violations = self.page.evaluate(RUN_AXE_JS, within)
        blocking = [v for v in violations if v["impact"] in BLOCKING]
        screenshot(self.page, f"a11y-{where}-{self.scheme}")
        if blocking:
            self.found[where] = blocking

    def assert_none(self) -> None:
        report = "\n".join(f"axe on {where}:\n{readable(v)}" for where, v in self.found.items())
        assert self.found == {}, report


def arrange(room_server: RoomServer, name: str, lang: str) -> tuple[int, int]:
    """A project with a conversation, a thread, a mention of the owner and two tasks."""
    project = room_server.create_project(name)
    li = room_server.invite_session(project, f"li{lang}", "李四")
    root = int(room_server.say(project, "发布计划：周五上线 `deploy --canary`")["message_id"])
    room_server.say(project, "我来准备回滚脚本", li, reply_to=root)
    room_server.say(project, "@owner 请看一下 **验收标准**", li)
    for title in ("写接口", "写页面"):
        room_server.post(
            f"/api/projects/{project}/tasks",
            {"title": title, "owner": "owner", "acceptance": ["能用"]},
            201,
        )
    # A mention in a project the owner does not open: unread, so the inbox lists it.
    other = room_server.create_project(f"{name} 收件")
    room_server.say(
        other, "@owner 这里也要看", room_server.invite_session(other, f"wang{lang}", "小王")
    )
    return project, root


@pytest.mark.parametrize(
    ("locale", "scheme"),
    [("zh-CN", "light"), ("en-US", "light"), ("zh-CN", "dark")],
    ids=["zh", "en", "zh-dark"],
)
def test_no_serious_violations(
    chromium: Browser, room_server: RoomServer, locale: str, scheme: str
) -> None:
    lang = locale[:2]
    project, root = arrange(room_server, f"无障碍 {lang} {scheme}", f"{lang}{scheme}")
    # The room's CSP (script-src 'self') would refuse the injected script: this context only.
    context, page, errors = new_person(
        chromium, room_server, locale=locale, color_scheme=scheme, bypass_csp=True
    )
    person = Person(context, page, "owner", errors)
    axe = Axe(page, scheme)
    try:
        page.goto(f"{room_server.origin}/login/{room_server.server.fresh_login_secret()}")
        expect(page.locator("html")).to_have_attribute("lang", "en" if lang == "en" else "zh-CN")
        axe.check(f"login-{lang}")
        page.locator("form button[type=submit], form button").first.click()
        expect(page.locator("#app")).to_be_visible()

        person.open_project(project)
        expect(page.locator("#timeline .msg", has_text="请看一下")).to_be_visible()
        replies = page.locator(f'#timeline .msg[data-id="{root}"] .thread-count')
        expect(replies).to_have_text("1 reply" if lang == "en" else "1 条跟帖")  # not "1 replies"
        axe.check(f"room-{lang}")

        page.locator(f'#timeline .msg[data-id="{root}"] .thread-summary').click()
        expect(page.locator("#thread-pane .msg", has_text="回滚脚本")).to_be_visible()
        axe.check(f"thread-{lang}")
        page.locator("#thread-pane .thread-close").click()
        expect(page.locator("#thread-pane")).to_be_hidden()

        page.get_by_role("tab", name="任务" if lang == "zh" else "Tasks").click()
        panel = page.get_by_role("tabpanel", name="任务" if lang == "zh" else "Tasks")
        expect(panel.locator(".task-card")).to_have_count(2)
        axe.check(f"tasks-{lang}")
        panel.get_by_role("button", name="看板" if lang == "zh" else "Board").click()
        board = page.get_by_role("dialog", name="任务看板" if lang == "zh" else "Task board")
        expect(board.locator(".board-card")).to_have_count(2)
        axe.check(f"board-{lang}")
        page.keyboard.press("Escape")
        expect(board).to_be_hidden()

        page.locator("#notify-level").click()
        expect(page.get_by_role("radio")).to_have_count(3)
        axe.check(f"notify-level-{lang}")
        page.keyboard.press("Escape")
        expect(page.locator("dialog")).to_have_count(0)

        page.locator("#inbox-open").click()
        expect(page.locator(".inbox-item").first).to_be_visible()
        axe.check(f"inbox-{lang}")
        page.keyboard.press("Escape")

        page.keyboard.press("Control+k")
        page.locator("#search-input").fill("回滚")
        expect(page.locator("#search-results [role=option]").first).to_be_visible()
        axe.check(f"search-{lang}")
        page.keyboard.press("Escape")

        page.goto(f"{room_server.origin}/overview")
        expect(page.locator("body")).to_have_attribute("data-ready", "true")
        axe.check(f"overview-{lang}")
        axe.assert_none()
        person.assert_clean()
    finally:
        person.close()


def test_no_serious_violations_at_600_px(chromium: Browser, room_server: RoomServer) -> None:
    """The narrow layout: the room with its drawers closed, the thread pane over the timeline,
    the search box opened over the header."""
    project, root = arrange(room_server, "无障碍 窄屏", "narrow")
    context, page, errors = new_person(
        chromium, room_server, locale="en-US", width=600, bypass_csp=True
    )
    person = Person(context, page, "owner", errors)
    axe = Axe(page, "600")
    try:
        page.goto(f"{room_server.origin}/login/{room_server.server.fresh_login_secret()}")
        axe.check("login-en")
        page.get_by_role("button", name="Sign in").click()
        expect(page.locator("#app")).to_be_visible()
        person.open_project(project)
        expect(page.locator("#timeline .msg", has_text="请看一下")).to_be_visible()
        axe.check("room-en")
        page.locator(f'#timeline .msg[data-id="{root}"] .thread-summary').click()
        expect(page.locator("#thread-pane .msg", has_text="回滚脚本")).to_be_visible()
        axe.check("thread-en")
        page.locator("#thread-pane .thread-close").click()
        expect(page.locator("#thread-pane")).to_be_hidden()
        page.keyboard.press("Control+k")
        page.locator("#search-input").fill("回滚")
        expect(page.locator("#search-results [role=option]").first).to_be_visible()
        axe.check("search-en")
        axe.assert_none()
        person.assert_clean()
    finally:
        person.close()


WORDS = {
    "zh": {"tasks": "任务", "members": "成员", "invite": "邀请", "new": "新建任务", "edit": "编辑",
           "digest": "邮件摘要", "preview": "清理预览", "purge": "彻底清除…", "join": "加入"},
    "en": {"tasks": "Tasks", "members": "Members", "invite": "Invite", "new": "New task",
           "edit": "Edit", "digest": "Email digest", "preview": "Cleanup preview",
           "purge": "Purge…", "join": "Join"},
}  # fmt: skip


def signed_in(
    chromium: Browser, room_server: RoomServer, locale: str, scheme: str = "light"
) -> tuple[Person, Axe]:
    context, page, errors = new_person(
        chromium, room_server, locale=locale, color_scheme=scheme, bypass_csp=True
    )
    page.goto(f"{room_server.origin}/login/{room_server.server.fresh_login_secret()}")
    page.locator("form button[type=submit], form button").first.click()
    expect(page.locator("#app")).to_be_visible()
    return Person(context, page, "owner", errors), Axe(page, "light")


@pytest.mark.parametrize("locale", ["zh-CN", "en-US"], ids=["zh", "en"])
def test_dialogs_and_the_join_page_have_no_serious_violations(
    chromium: Browser, room_server: RoomServer, locale: str
) -> None:
    lang = locale[:2]
    words = WORDS[lang]
    project, _ = arrange(room_server, f"对话框 {lang}", f"dlg{lang}")
    doomed = room_server.create_project(f"回收站 {lang}")
    room_server.post(f"/api/projects/{doomed}/lifecycle", {"op": "trash"})
    person, axe = signed_in(chromium, room_server, locale)
    page = person.page
    try:
        person.open_project(project)
        expect(page.locator("#timeline .msg", has_text="请看一下")).to_be_visible()
        page.get_by_role("tab", name=words["tasks"]).click()
        panel = page.get_by_role("tabpanel", name=words["tasks"])
        panel.get_by_role("button", name=words["new"]).click()
        form = page.get_by_role("dialog", name=words["new"])
        expect(form.locator("[data-field=title] input")).to_be_visible()
        axe.check(f"task-new-{lang}")
        page.keyboard.press("Escape")
        expect(form).to_be_hidden()
        panel.locator(".task-card").first.get_by_role("button", name=words["edit"]).click()
        expect(page.locator("dialog [data-field=title] input")).to_have_value("写接口")
        axe.check(f"task-edit-{lang}")
        page.keyboard.press("Escape")
        expect(page.locator("dialog")).to_have_count(0)

        page.get_by_role("tab", name=words["members"]).click()
        page.locator("#tab-members .member-row .member-name", has_text="李四").click()
        expect(page.get_by_role("dialog", name="李四")).to_be_visible()
        axe.check(f"member-card-{lang}")
        page.keyboard.press("Escape")
        expect(page.locator("dialog")).to_have_count(0)
        page.locator("#tab-members").get_by_role("button", name=words["invite"]).click()
        expect(page.locator("dialog #invite-url")).to_have_value(re.compile("/join/"))
        axe.check(f"invite-{lang}")
        page.keyboard.press("Escape")
        expect(page.locator("dialog")).to_have_count(0)

        page.locator("#digest-open").click()
        expect(page.get_by_role("dialog", name=words["digest"])).to_be_visible()
        axe.check(f"digest-{lang}")
        page.keyboard.press("Escape")
        expect(page.locator("dialog")).to_have_count(0)

        person.open_project(doomed)
        banner = page.locator("#room-banner")
        expect(banner.get_by_role("button", name=words["purge"])).to_be_visible()
        page.locator("#lifecycle-menu").click()
        page.get_by_role("menuitem", name=words["preview"]).click()
        expect(page.locator("dialog .preview-keep")).to_be_visible()
        axe.check(f"cleanup-preview-{lang}")
        page.keyboard.press("Escape")
        expect(page.locator("dialog")).to_have_count(0)
        banner.get_by_role("button", name=words["purge"]).click()
        expect(page.locator("dialog.purge-dialog #purge-name")).to_be_visible()
        axe.check(f"purge-{lang}")
        page.keyboard.press("Escape")
        expect(page.locator("dialog")).to_have_count(0)
        axe.assert_none()
        person.assert_clean()
    finally:
        person.close()

    # The join page of an invite link, for someone not signed in.
    context, page, errors = new_person(
        chromium, room_server, handle=f"new{lang}", locale=locale, bypass_csp=True
    )
    guest = Person(context, page, f"new{lang}", errors)
    axe = Axe(page, "light")
    try:
        page.goto(room_server.invite_url(project))
        expect(page.get_by_role("button", name=re.compile(words["join"]))).to_be_visible()
        axe.check(f"join-{lang}")
        axe.assert_none()
        guest.assert_clean()
    finally:
        guest.close()


@pytest.mark.skipif(
    shutil.which("bwrap") is None or shutil.which("pdftoppm") is None,
    reason="needs bubblewrap and poppler-utils; scripts/test installs both",
)
@pytest.mark.parametrize("locale", ["zh-CN", "en-US"], ids=["zh", "en"])
def test_the_pdf_preview_has_no_serious_violations(
    chromium: Browser, room_server: RoomServer, locale: str
) -> None:
    lang = locale[:2]
    project = room_server.create_project(f"PDF 无障碍 {lang}")
    person, axe = signed_in(chromium, room_server, locale)
    page = person.page
    try:
        person.open_project(project)
        page.evaluate(DROP_JS, [b64(pdfs.document(pages=2)), "报告.pdf", "application/pdf"])
        tray = page.locator(".attach-tray")
        expect(tray.locator(".attach-item:not(.is-uploading) img.attach-thumb")).to_have_count(1)
        page.locator("#draft").fill("报告在这里")
        page.locator("#draft").press("Enter")
        card = page.locator(".msg", has_text="报告在这里").locator(".attach-pdf")
        expect(card).to_contain_text("PDF")
        axe.check(f"pdf-card-{lang}")
        card.locator("button").first.click()
        dialog = page.locator("dialog.pdf-dialog")
        expect(dialog.locator("img.pdf-page-full")).to_be_visible()
        axe.check(f"pdf-preview-{lang}")
        page.keyboard.press("Escape")
        expect(dialog).to_have_count(0)
        axe.assert_none()
        person.assert_clean()
    finally:
        person.close()
