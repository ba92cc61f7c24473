"""The interface language comes from the browser until the person chooses one, and the sign-in
pages (login, join, a refused link) read in both languages."""

# The fixtures chromium and room_server are imported from tests/support/browser.py and used as
# test arguments, which linters read as unused imports redefined.
# ruff: noqa: F401, F811

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Browser, Route, expect

from tests.support.browser import (
    Person,
    RoomServer,
    chromium,
    layout_problems,
    new_person,
    room_server,
    screenshot,
)

pytestmark = pytest.mark.browser


@pytest.mark.parametrize(("locale", "width"), [("en-US", 1440), ("fr-FR", 1024), ("en-GB", 600)])
def test_an_english_browser_signs_in_and_reads_english(
    chromium: Browser, room_server: RoomServer, locale: str, width: int
) -> None:
    context, page, errors = new_person(chromium, room_server, locale=locale, width=width)
    person = Person(context, page, "owner", errors)
    try:
        page.goto(f"{room_server.origin}/login/{room_server.server.fresh_login_secret()}")
        expect(page.locator("html")).to_have_attribute("lang", "en")
        expect(page.locator("h1")).to_have_text("Sign in to Project Room")
        expect(page.get_by_role("link", name="中文")).to_be_visible()
        screenshot(page, f"language-login-{locale}-{width}")
        assert layout_problems(page) == []
        page.get_by_role("button", name="Sign in").click()
        expect(page.locator("#app")).to_be_visible()  # booted: its controls work
        expect(page.locator("html")).to_have_attribute("lang", "en")
        expect(page.locator("#send")).to_have_text("Send")
        # The person's choice wins over the browser's, and is kept.
        page.locator("#lang-toggle").dispatch_event("click")  # in the drawer at 600 px
        expect(page.locator("#send")).to_have_text("发送")
        page.reload()
        expect(page.locator("#send")).to_have_text("发送")
        person.assert_clean()
    finally:
        person.close()


def test_the_room_shows_only_once_it_knows_who_signed_in_whatever_sheet_is_late(
    chromium: Browser, room_server: RoomServer
) -> None:
    """As a whole-suite run found it: with layout.css in and style.css (the page's ``[hidden]``
    rule) still on its way, the app's grid showed before the page's script had run; by the time
    the strings read English the script was waiting for ``/api/me``, and a language switch
    clicked then had no listener yet and was lost. Both answers are held here, and let go in
    that order."""
    held: dict[str, Route] = {}

    def hold(route: Route) -> None:
        held[route.request.url.rsplit("/", 1)[-1]] = route

    context, page, errors = new_person(chromium, room_server, locale="en-US")
    person = Person(context, page, "owner", errors)
    try:
        page.goto(f"{room_server.origin}/login/{room_server.server.fresh_login_secret()}")
        page.route("**/static/style.css", hold)  # the room's, not the sign-in page's
        page.route("**/api/me", hold)
        page.get_by_role("button", name="Sign in").click()
        # polled by timer: no animation frame comes while a stylesheet holds the first paint
        page.wait_for_function(
            "() => [...document.styleSheets].some((sheet) => sheet.href?.endsWith('/layout.css'))",
            polling=100,
        )
        assert sorted(held) == ["style.css"], sorted(held)  # the script waits for it
        expect(page.locator("#app")).to_be_hidden()
        with page.expect_request("**/api/me"):  # the script runs and asks who signed in
            held.pop("style.css").continue_()
        expect(page.locator("#send")).to_have_text("Send")
        expect(page.locator("#app")).to_be_hidden()
        held.pop("me").continue_()
        expect(page.locator("#app")).to_be_visible()
        page.locator("#lang-toggle").dispatch_event("click")
        expect(page.locator("#send")).to_have_text("发送")
        person.assert_clean()
    finally:
        person.close()


def test_a_chinese_browser_reads_chinese_and_may_switch_the_page(
    chromium: Browser, room_server: RoomServer
) -> None:
    context, page, errors = new_person(chromium, room_server, width=600)
    person = Person(context, page, "owner", errors)
    try:
        page.goto(f"{room_server.origin}/login/{room_server.server.fresh_login_secret()}")
        expect(page.locator("html")).to_have_attribute("lang", "zh-CN")
        expect(page.locator("h1")).to_have_text("登录 Project Room")
        expect(page.get_by_role("button", name="登录")).to_be_visible()
        page.get_by_role("link", name="English").click()
        expect(page).to_have_url(re.compile(r"\?lang=en$"))
        expect(page.get_by_role("button", name="Sign in")).to_be_visible()
        page.get_by_role("button", name="Sign in").click()
        expect(page.locator("#app")).to_be_visible()
        expect(page.locator("#send")).to_have_text("发送")  # the room follows the browser
        person.assert_clean()
    finally:
        person.close()


@pytest.mark.parametrize(("locale", "width"), [("en-US", 1024), ("zh-CN", 1440)])
def test_the_join_page_and_a_used_link_in_both_languages(
    chromium: Browser, room_server: RoomServer, locale: str, width: int
) -> None:
    project = room_server.create_project(f"邀请 {locale}")
    url = room_server.invite_url(project)
    context, page, errors = new_person(chromium, room_server, locale=locale, width=width)
    person = Person(context, page, "guest", errors)
    english = locale.startswith("en")
    try:
        page.goto(url)
        expect(page.locator("h1")).to_have_text("Join a project" if english else "加入项目")
        page.get_by_label("Handle (Latin letters" if english else "用户名（英文").fill(
            f"guest{width}"
        )
        page.get_by_label("Display name" if english else "显示名称").fill("访客")
        screenshot(page, f"language-join-{locale}-{width}")
        assert layout_problems(page) == []
        page.get_by_role("button", name="Join" if english else "加入").click()
        expect(page.locator("#app")).to_be_visible()
        # The same link again, signed out: refused, in the visitor's language.
        page.context.clear_cookies()
        page.goto(url)
        page.get_by_label("Display name" if english else "显示名称").fill("又来")
        page.get_by_label("Handle (Latin letters" if english else "用户名（英文").fill("again")
        person.allow("Failed to load resource")
        page.get_by_role("button", name="Join" if english else "加入").click()
        expect(page.locator("h1")).to_have_text("Cannot sign in" if english else "无法登录")
        body = page.locator("main").inner_text()
        if english:
            assert not re.search(r"[\u4e00-\u9fff]", body), body  # no Chinese half
        else:
            assert not re.search(r"Ask the project|[(]", body), body  # no English half
        screenshot(page, f"language-refused-{locale}-{width}")
        person.assert_clean()
    finally:
        person.close()


@pytest.mark.parametrize(("locale", "width"), [("en-US", 1440), ("zh-CN", 600)])
def test_the_risk_scan_reads_in_the_readers_language(
    chromium: Browser, room_server: RoomServer, locale: str, width: int
) -> None:
    from tests.test_browser_portfolio import day, put

    project = room_server.create_project(f"逾期 {locale}")
    put(room_server, f"/api/projects/{project}/timeline", {
        "start": day(-20), "end": day(-2),
        "milestones": [{"name": "上线", "date": day(-3), "status": "pending"}],
    })  # fmt: skip
    room_server.post("/api/risk-scan", {})  # posts the 🔴 notice into the project
    english = locale.startswith("en")
    context, page, errors = new_person(chromium, room_server, locale=locale, width=width)
    person = Person(context, page, "owner", errors)
    try:
        page.goto(f"{room_server.origin}/login/{room_server.server.fresh_login_secret()}")
        page.get_by_role("button", name="Sign in" if english else "登录").click()
        expect(page.locator("#app")).to_be_visible()
        person.open_project(project)
        notice = page.locator(".notice", has_text=re.compile("Risk scan|风险扫描"))
        if english:
            expect(notice).to_contain_text("Risk scan: Overdue: past the estimated end")
            expect(notice).to_contain_text(f"estimated end {day(-2)}, 0% done")
        else:
            expect(notice).to_contain_text("风险扫描：已逾期：已过预计结束日期且进度未到 100%")
            expect(notice).not_to_contain_text("(overdue)")
        screenshot(page, f"language-risk-notice-{locale}-{width}")
        page.goto(f"{room_server.origin}/overview")
        expect(page.locator("body")).to_have_attribute("data-ready", "true")
        page.get_by_role("button", name="Run risk scan" if english else "运行风险扫描").click()
        found = page.locator('.ov-scan-group[data-level="red"] li[data-rule="overdue"]').filter(
            has_text=f"逾期 {locale}"
        )
        if english:
            expect(found).to_contain_text("Overdue: past the estimated end and not 100% done")
            expect(found).to_contain_text("Suggestion: Reschedule")
            assert not re.search(
                r"[\u4e00-\u9fff]", found.inner_text().replace(f"逾期 {locale}", "")
            )
        else:
            expect(found).to_contain_text("已逾期")
            expect(found).not_to_contain_text("(overdue)")
        screenshot(page, f"language-risk-overview-{locale}-{width}")
        person.assert_clean()
    finally:
        person.close()


@pytest.mark.parametrize(
    ("locale", "lead", "frontend"), [("en-US", "Lead", "Frontend"), ("zh-CN", "负责人", "前端")]
)
def test_default_member_names_in_the_readers_language(
    chromium: Browser, room_server: RoomServer, locale: str, lead: str, frontend: str
) -> None:
    context, page, errors = new_person(chromium, room_server, locale=locale, width=1024)
    person = Person(context, page, "owner", errors)
    try:
        page.goto(f"{room_server.origin}/login/{room_server.server.fresh_login_secret()}")
        page.locator("form button[type=submit]").click()
        expect(page.locator("#app")).to_be_visible()
        page.locator("#new-project").click()
        expect(page.locator("#create-display-lead")).to_have_value(lead)
        expect(page.locator("#create-display-frontend")).to_have_value(frontend)
        screenshot(page, f"language-create-{locale}-1024")
        person.assert_clean()
    finally:
        person.close()


def test_a_research_notice_reads_in_english(chromium: Browser, room_server: RoomServer) -> None:
    from tests.test_browser_research import TEAM, propose

    project = room_server.create_project("研究通知", TEAM)
    run = propose(room_server, project)
    room_server.post(
        f"/api/research/{run['id']}/approve",
        {"rev": run["rev"], "scope_digest": run["scope_digest"]},
    )
    context, page, errors = new_person(chromium, room_server, locale="en-US", width=1024)
    person = Person(context, page, "owner", errors)
    try:
        page.goto(f"{room_server.origin}/login/{room_server.server.fresh_login_secret()}")
        page.get_by_role("button", name="Sign in").click()
        expect(page.locator("#app")).to_be_visible()
        person.open_project(project)
        notice = page.locator(".notice", has_text="Research approved")
        expect(notice).to_contain_text("Research approved, ready to start (")
        assert "研究已批准" not in notice.inner_text()
        page.locator("#lang-toggle").click()
        expect(page.locator(".notice", has_text="研究已批准，待开始（")).to_be_visible()
        screenshot(page, "language-research-notice-zh-1024")
        person.assert_clean()
    finally:
        person.close()


@pytest.mark.parametrize(("locale", "width"), [("en-US", 1440), ("zh-CN", 600)])
def test_a_submitted_plan_reads_in_the_readers_language(
    chromium: Browser, room_server: RoomServer, locale: str, width: int
) -> None:
    project = room_server.create_project(f"计划通知 {locale}")
    plan = {"goal": "接口", "items": [
        {"key": "schema", "title": "数据结构", "owner": "owner", "acceptance": ["有文档"]},
        {"key": "api", "title": "接口实现", "owner": "owner", "acceptance": ["能调用"],
         "depends_on": ["schema"]},
    ]}  # fmt: skip
    room_server.post(f"/api/projects/{project}/plan", plan, 201)
    english = locale.startswith("en")
    context, page, errors = new_person(chromium, room_server, locale=locale, width=width)
    person = Person(context, page, "owner", errors)
    try:
        page.goto(f"{room_server.origin}/login/{room_server.server.fresh_login_secret()}")
        page.locator("form button[type=submit]").click()
        expect(page.locator("#app")).to_be_visible()
        person.open_project(project)
        notice = page.locator(".notice", has_text=re.compile("submitted plan|提交了计划"))
        if english:
            expect(notice.locator(".notice-body p")).to_have_text([
                "@owner submitted plan v1 (2 tasks):",
                "1. schema 数据结构 — @owner",
                "2. api 接口实现 — @owner (after schema)",
            ])  # fmt: skip
        else:
            expect(notice.locator(".notice-body p")).to_have_text([
                "@owner 提交了计划 v1（2 项）：",
                "1. schema 数据结构 — @owner",
                "2. api 接口实现 — @owner（依赖 schema）",
            ])  # fmt: skip
        ready = page.locator(".notice", has_text=re.compile("is ready|已就绪")).first
        if english:
            expect(ready.locator(".notice-body p")).to_have_text([
                "Task schema is ready — @owner, please start", "数据结构",
                "Acceptance criteria:", "1. 有文档",
                "Next: press Start on the task board; when done, submit it for review with evidence.",
            ])  # fmt: skip
        else:
            expect(ready.locator(".notice-body p")).to_have_text([
                "任务 schema 已就绪 — @owner 请开始", "数据结构", "验收标准：", "1. 有文档",
                "下一步：在任务看板上点「开始」，完成后附证据提交评审。",
            ])  # fmt: skip
        screenshot(page, f"language-plan-notice-{locale}-{width}")
        person.assert_clean()
    finally:
        person.close()


@pytest.mark.parametrize("locale", ["en-US", "zh-CN"])
def test_a_route_change_reads_in_the_readers_language(
    chromium: Browser, room_server: RoomServer, locale: str
) -> None:
    project = room_server.create_project(
        f"路由通知 {locale}", [{"handle": "dev", "role": "backend", "display_name": "开发"}]
    )
    dev = room_server.members(project)["dev"]["id"]
    room_server.post(f"/api/projects/{project}/routes", {
        "scope": "member", "target": str(dev), "value": "builtin/echo", "reason": "回显"})  # fmt: skip
    room_server.post(f"/api/projects/{project}/routes", {
        "scope": "role", "target": "backend", "value": None, "reason": "恢复默认"})  # fmt: skip
    context, page, errors = new_person(chromium, room_server, locale=locale, width=1024)
    person = Person(context, page, "owner", errors)
    try:
        page.goto(f"{room_server.origin}/login/{room_server.server.fresh_login_secret()}")
        page.locator("form button[type=submit]").click()
        expect(page.locator("#app")).to_be_visible()
        person.open_project(project)
        notes = page.locator(".notice-route .notice-body")
        if locale == "en-US":
            expect(notes).to_have_text([
                "@owner changed the model route of @dev (Member lock): builtin/echo. Reason: 回显",
                "@owner changed the model route of the Backend role (Role default): (cleared)."
                " Reason: 恢复默认",
            ])  # fmt: skip
        else:
            expect(notes).to_have_text([
                "@owner 修改了 @dev 的模型路由（成员固定）：builtin/echo。理由：回显",
                "@owner 修改了角色 后端 的模型路由（角色默认）：（清除）。理由：恢复默认",
            ])  # fmt: skip
        person.assert_clean()
    finally:
        person.close()


def test_lifecycle_member_and_failure_notices_read_in_english(
    chromium: Browser, room_server: RoomServer
) -> None:
    """Issue 30, item 8: the server's notices are stored with a code and worded by the page in
    the reader's language — a pause with its reason, a resume, a member paused, and a delivery
    that failed (its cause, code and next step)."""
    import time

    project = room_server.create_project(
        "通知语言", [{"role": "lead", "handle": "alpha", "display_name": "阿尔法"}]
    )
    alpha = room_server.members(project)["alpha"]["id"]
    room_server.post(
        f"/api/projects/{project}/routes",
        {"scope": "member", "target": str(alpha), "value": "openai/missing", "reason": "test"},
    )
    sent = room_server.say(project, "@alpha hello")
    deadline = time.monotonic() + 10
    while room_server.get(f"/api/messages/{sent['message_id']}")["deliveries"][0]["state"] != (
        "failed"
    ):
        assert time.monotonic() < deadline, "the delivery never failed"
        time.sleep(0.05)
    room_server.post(f"/api/projects/{project}/lifecycle", {"op": "pause", "reason": "lunch"})
    room_server.post(f"/api/projects/{project}/lifecycle", {"op": "resume"})
    room_server.post(f"/api/projects/{project}/members/{alpha}/pause", {})
    decision = {"title": "Use SQLite", "context": "one machine", "decision": "SQLite only",
                "alternatives": [{"option": "PostgreSQL", "why_rejected": "one more service"}]}  # fmt: skip
    room_server.post(f"/api/projects/{project}/decisions", decision, expect_status=201)
    room_server.say(project, "/change dark mode only")
    context, page, errors = new_person(chromium, room_server, locale="en-US", width=1024)
    person = Person(context, page, "owner", errors)
    try:
        page.goto(f"{room_server.origin}/login/{room_server.server.fresh_login_secret()}")
        page.get_by_role("button", name="Sign in").click()
        expect(page.locator("#app")).to_be_visible()
        person.open_project(project)
        failed = page.locator(".notice-error", has_text="could not handle the message")
        expect(failed).to_contain_text(
            "@alpha could not handle the message (model openai/missing): "
        )
        expect(failed).to_contain_text("Next: ")
        expect(failed).to_contain_text("(“Retry” is on this notice).")
        paused = page.locator(".notice-lifecycle", has_text="Project paused")
        expect(paused).to_contain_text(
            "Project paused: nothing is dispatched to AI members; people's messages are kept"
            " and delivered after resume. Reason: lunch ("
        )
        expect(page.locator(".notice-lifecycle", has_text="Project resumed")).to_contain_text(
            "Project resumed; held messages are dispatched in order. ("
        )
        expect(page.locator(".notice-member")).to_contain_text(" paused @alpha")
        expect(page.locator(".notice", has_text="recorded decision")).to_contain_text(
            "@owner recorded decision ADR-0001 “Use SQLite” (accepted)."
        )
        change = page.locator(".notice", has_text="Requirement change")
        expect(change).to_contain_text(
            re.compile(r"Requirement change ADR-\d+ revision 1 \(@owner\):")
        )
        expect(change).to_contain_text("> dark mode only")
        expect(change).to_contain_text("No task needs to sync.")
        timeline = page.locator("#timeline").inner_text()
        for chinese in (
            "处理消息失败",
            "项目已暂停",
            "项目已恢复",
            "暂停了",
            "记录了决定",
            "需求变更",
        ):
            assert chinese not in timeline, chinese
        screenshot(page, "language-notices-en-1024")
        page.locator("#lang-toggle").click()
        expect(page.locator(".notice-error", has_text="处理消息失败")).to_contain_text("下一步：")
        expect(page.locator(".notice-lifecycle", has_text="项目已暂停")).to_contain_text(
            "原因：lunch（"
        )
        expect(page.locator(".notice-member")).to_contain_text("暂停了 @alpha")
        screenshot(page, "language-notices-zh-1024")
        person.assert_clean()
    finally:
        person.close()
