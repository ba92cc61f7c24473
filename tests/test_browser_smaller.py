"""Issue 30's smaller fixes: a code block's language label is above its first line, not over
it; files dropped anywhere on the timeline are attached; removing a member is apart from pause
and stop; the trash note says what the server does (it never purges on its own)."""

# The fixtures chromium, room_server and owner are imported from tests/support/browser.py and
# used as test arguments, which linters read as unused imports redefined.
# ruff: noqa: F401, F811

from __future__ import annotations

import base64

import pytest
from playwright.sync_api import Browser, expect

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

TEAM = [{"handle": "fe", "role": "frontend", "display_name": "前端"}]
LONG_LINE = "print('这一行很长，语言标签以前会盖住它的结尾部分 ………………………………………………………………')"

DROP_ON_TIMELINE_JS = """
([b64, name, type]) => {
  const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
  const data = new DataTransfer();
  data.items.add(new File([bytes], name, { type }));
  const target = document.querySelector("#timeline .msg") || document.querySelector("#timeline");
  target.dispatchEvent(new DragEvent("dragenter", { dataTransfer: data, bubbles: true, cancelable: true }));
  const shown = document.querySelector(".timeline-wrap").classList.contains("is-dropping");
  for (const kind of ["dragover", "drop"]) {
    target.dispatchEvent(new DragEvent(kind, { dataTransfer: data, bubbles: true, cancelable: true }));
  }
  return shown;
}
"""


@pytest.mark.parametrize("width", [1440, 1024, 600])
def test_the_language_label_does_not_cover_the_code(
    chromium: Browser, room_server: RoomServer, width: int
) -> None:
    project = room_server.create_project(f"代码块 {width}")
    room_server.say(project, f"看这段：\n\n```python\n{LONG_LINE}\nx = 1\n```")
    person = sign_in_owner(chromium, room_server, width=width)
    page = person.page
    try:
        person.open_project(project)
        block = page.locator(".msg-body .code-block")
        expect(block.locator(".code-lang")).to_have_text("python")
        block.hover()
        lang, copy, pre = (
            block.locator(sel).bounding_box() for sel in (".code-lang", ".code-copy", "pre")
        )
        assert lang is not None and copy is not None and pre is not None
        # Both sit above the code: nothing of the first line is under them.
        assert lang["y"] + lang["height"] <= pre["y"] + 0.5, (lang, pre)
        assert copy["y"] + copy["height"] <= pre["y"] + 0.5, (copy, pre)
        screenshot(page, f"smaller-code-block-{width}")
        assert layout_problems(page) == []
        person.assert_clean()
    finally:
        person.close()


def test_a_file_dropped_on_the_timeline_is_attached(owner: Person, room_server: RoomServer) -> None:
    project = room_server.create_project("拖到时间线")
    room_server.say(project, "把文件拖到这里")
    owner.open_project(project)
    page = owner.page
    payload = [base64.b64encode(b"notes").decode(), "笔记.txt", "text/plain"]
    assert page.evaluate(DROP_ON_TIMELINE_JS, payload) is True  # the drop zone showed itself
    expect(page.locator(".timeline-wrap")).not_to_have_class("is-dropping")
    tray = page.locator(".attach-tray")
    expect(tray.locator(".attach-item:not(.is-uploading)")).to_have_count(1)
    expect(tray).to_contain_text("笔记.txt")
    page.locator("#draft").fill("附上笔记")
    page.locator("#draft").press("Enter")
    expect(page.locator(".msg", has_text="附上笔记").locator(".attach-card")).to_contain_text(
        "笔记.txt"
    )


def test_removing_a_member_is_apart_from_pause_and_stop(
    owner: Person, room_server: RoomServer
) -> None:
    project = room_server.create_project("移出按钮", TEAM)
    room_server.say(project, "@fe 看一下")
    owner.open_project(project)
    page = owner.page
    page.locator(".msg .avatar[data-member-id]").first.click()
    # In the menu: after a separator, last.
    menu = page.get_by_role("menu")
    labels = menu.locator(".menu-label").all_inner_texts()
    assert labels[-1] == "移出项目", labels
    assert menu.locator("[role=separator], hr, .menu-sep").count() >= 2
    page.get_by_role("menuitem", name="查看成员").click()
    dialog = page.get_by_role("dialog")
    ops = dialog.locator(".card-ops")
    expect(ops.locator("[data-op=pause]")).to_be_visible()
    expect(ops.locator("[data-op=leave]")).to_have_count(0)
    away = dialog.locator(".card-danger")
    expect(away.locator("[data-op=leave]")).to_have_text("移出项目")
    expect(away).to_contain_text("发言记录会保留")
    pause, leave = (
        ops.locator("[data-op=pause]").bounding_box(),
        away.locator("[data-op=leave]").bounding_box(),
    )
    assert pause is not None and leave is not None
    assert leave["y"] > pause["y"] + pause["height"] + 20, (pause, leave)
    screenshot(page, "smaller-member-card")


def test_the_trash_note_says_it_is_never_purged_on_its_own(
    owner: Person, room_server: RoomServer
) -> None:
    active = room_server.create_project("还在用")
    trashed = room_server.create_project("扔掉的")
    room_server.post(f"/api/projects/{trashed}/lifecycle", {"op": "trash"})
    owner.open_project(active)
    page = owner.page
    trash = page.locator('.project-group[data-group="trash"]')
    trash.locator("summary").click()
    note = trash.locator(".empty-group")
    expect(note).to_contain_text("随时可以恢复")
    expect(note).to_contain_text("从不自动清除")
    expect(note).not_to_contain_text("天内恢复")
    # The server's own notice in the trashed project says the same.
    notices = [m["body"] for m in room_server.messages(trashed) if m["kind"] == "system"]
    assert any("从不自动清除" in body and "天内可恢复" not in body for body in notices), notices


# Scope paths and whether the server's check_path calls them outside the workspace.
SCOPE_PATHS = ["docs", "./docs", "docs/../src", "a/b/../../c", "..", "../etc", "docs/../../x",
               "/etc", "C:/x", "c:", "\\\\share", "..\\up", "a/..", "a/./../..", "./../x"]  # fmt: skip


def test_the_research_scope_is_checked_before_sending(
    owner: Person, room_server: RoomServer
) -> None:
    from room.rules.research import ResearchInputError, check_path

    def server_says_outside(path: str) -> bool:
        try:
            check_path(path)
        except ResearchInputError as exc:
            return exc.code == "research_scope_outside"
        return False

    project = room_server.create_project("研究范围", [{"role": "lead", "handle": "lead", "display_name": "负责人"}])  # fmt: skip
    owner.open_project(project)
    page = owner.page
    page_says = page.evaluate(
        "async (paths) => { const { outsideWorkspace } = await import('/static/research.js');"
        " return paths.map(outsideWorkspace); }",
        SCOPE_PATHS,
    )
    assert page_says == [server_says_outside(p) for p in SCOPE_PATHS]
    asked: list[str] = []
    page.on(
        "request",
        lambda r: asked.append(r.url) if r.method == "POST" and "/research" in r.url else None,
    )
    page.locator("#lifecycle-menu").click()
    page.get_by_role("menuitem", name="发起研究…").click()
    dialog = page.get_by_role("dialog", name="发起研究")
    dialog.get_by_label("问题").fill("为什么慢")
    paths = dialog.get_by_label("范围：工作区路径")
    paths.fill("docs, ../etc")
    paths.press("Tab")  # leaving the field checks it: nothing submitted yet
    error = dialog.locator('[data-error-for="paths"]')
    expect(error).to_have_text("研究范围里的路径不能在工作区之外：../etc")
    expect(paths).to_have_attribute("aria-invalid", "true")
    dialog.get_by_role("button", name="提交提案").click()
    expect(error).to_be_visible()
    assert asked == []  # refused in the page: the server was not asked
    paths.fill("docs")
    paths.press("Tab")
    expect(error).to_be_hidden()
    screenshot(page, "smaller-research-scope")


@pytest.mark.parametrize("width", [1440, 600])
def test_overview_bars_dates_and_named_milestones(
    chromium: Browser, room_server: RoomServer, width: int
) -> None:
    from tests.test_browser_portfolio import day, put

    project = room_server.create_project(f"总览细节 {width}")
    put(room_server, f"/api/projects/{project}/timeline", {
        "start": day(-5), "end": day(20),
        "milestones": [{"name": "原型评审", "date": day(2), "status": "pending"}],
    })  # fmt: skip
    plan = {"goal": "试", "items": [
        {"key": "todo", "title": "没排期的任务", "owner": "owner", "acceptance": ["完成"]},
    ]}  # fmt: skip
    room_server.post(f"/api/projects/{project}/plan", plan, 201)
    person = sign_in_owner(chromium, room_server, width=width)
    page = person.page
    try:
        page.goto(f"{room_server.origin}/overview")
        expect(page.locator("body")).to_have_attribute("data-ready", "true")
        row = page.locator(f'#ov-index tr[data-project-id="{project}"]')
        bar = row.locator("progress")
        expect(bar).to_have_attribute("max", "100")
        expect(bar).to_have_accessible_name(f"总览细节 {width} 的进度")
        expect(row.locator(".ov-progress-text")).to_have_text("0%")
        assert "░" not in row.inner_text()
        chart = page.locator(f'#ov-gantt g.gantt-row[data-row-id="p{project}"]')
        expect(chart.locator("text.gantt-ms-label")).to_have_text("原型评审")
        # The task Gantt: the unscheduled task reads 未排期, not "? → ?".
        row.get_by_role("button", name="任务甘特").click()
        task = page.locator('#ov-task-dates li[data-task="todo"]')
        expect(task).to_contain_text("没排期的任务 · 未排期")
        assert "?" not in task.inner_text()
        task.get_by_role("button", name="编辑日期").click()
        expect(page.locator("#task-start")).to_have_attribute("type", "date")
        page.locator("#task-end").fill(day(3))
        page.get_by_role("dialog").get_by_role("button", name="保存").click()
        expect(task).to_contain_text(f"未定开始，{day(3)} 截止")
        page.evaluate("() => window.scrollTo(0, 0)")
        screenshot(page, f"smaller-overview-{width}")
        assert layout_problems(page) == []
        person.assert_clean()
    finally:
        person.close()


@pytest.mark.parametrize("width", [1440, 1024, 600])
def test_the_hover_actions_of_a_short_message_stay_in_the_timeline(
    chromium: Browser, room_server: RoomServer, width: int
) -> None:
    project = room_server.create_project(f"短消息 {width}")
    room_server.say(project, "好")
    bob = room_server.invite_session(project, f"short{width}", "短")
    room_server.say(project, "行", session=bob)
    person = sign_in_owner(chromium, room_server, width=width)
    page = person.page
    try:
        person.open_project(project)
        area = page.locator("#timeline").bounding_box()
        assert area is not None
        for selector in (".msg.mine", ".msg:not(.mine)"):
            entry = page.locator(selector).last
            entry.hover()
            bar = entry.locator(".msg-actions")
            expect(bar).to_have_css("opacity", "1")
            box = bar.bounding_box()
            assert box is not None
            assert area["x"] <= box["x"] and box["x"] + box["width"] <= area["x"] + area["width"], (
                selector, box, area)  # fmt: skip
        screenshot(page, f"smaller-actions-{width}")
        person.assert_clean()
    finally:
        person.close()
