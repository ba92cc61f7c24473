"""The 记忆 tab and the header search in real Chromium against a real server: Chinese records,
edits with history, a stale revision that keeps the person's text, live refresh, archives,
staleness; search from the header (Ctrl+K, `/`, IME-safe) with a two-character Chinese query,
and a permalink that opens an old message from a fresh page load with the match marked."""

# The fixtures chromium, room_server and owner are imported from tests/support/browser.py and
# used as test arguments, which linters read as unused imports redefined.
# ruff: noqa: F401, F811

from __future__ import annotations

import re
import sqlite3
import urllib.parse
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import Browser, Locator, Page, Request, expect

from tests.support.browser import (
    Person,
    RoomServer,
    chromium,
    layout_problems,
    new_person,
    owner,
    room_server,
    screenshot,
    sign_in_owner,
)

pytestmark = pytest.mark.browser

TEAM = [{"role": "lead", "handle": "lead", "display_name": "负责人"}]
DAY_SECS = 86_400


def call(room_server: RoomServer, method: str, path: str, body: Any, status: int) -> Any:
    code, data = room_server.server.request(method, path, body, headers=room_server.owner.headers)
    assert code == status, (code, data)
    return data


def arrange_memory(room_server: RoomServer, project: int) -> dict[str, Any]:
    """Chinese records of every kind, written over HTTP by the owner."""
    base = f"/api/projects/{project}/memory"
    sections = {
        "what": "团队的设置页迁移项目",
        "run": "scripts/test 跑全部测试",
        "status": "迁移过半",
    }
    call(room_server, "PUT", f"{base}/summary", {"rev": 0, "sections": sections}, 200)
    fact = room_server.post(f"{base}/fact", {"text": "生产环境部署在杭州机房"}, 201)["entry"]
    room_server.post(f"{base}/convention", {"text": "提交信息写清楚为什么改"}, 201)
    progress = {
        "text": "设置页表单已迁移",
        "stage": "评审中",
        "next": "补键盘测试",
        "tags": ["前端", "表单"],
    }
    room_server.post(f"{base}/progress", progress, 201)
    session = {"summary": "迁移了设置页表单", "did": "改了 SettingsForm", "verified": "跑了 12 个用例",
               "next": "处理暗色模式", "blocked": ""}  # fmt: skip
    room_server.post(f"{base}/session", session, 201)
    room_server.post(
        f"{base}/reference",
        {"ref_kind": "dir", "target": "web/settings/", "note": "设置页代码"},
        201,
    )
    decision = {
        "title": "设置页使用新组件库",
        "context": "旧组件库不再维护",
        "decision": "迁移到新组件库",
        "alternatives": [
            {"option": "继续修补旧组件库", "why_rejected": "没有人维护，安全补丁跟不上"}
        ],
        "constraints": "不能改变现有的保存接口",
    }
    room_server.post(f"/api/projects/{project}/decisions", decision, 201)
    return {"fact": fact}


def open_memory(page: Page) -> Locator:
    page.get_by_role("tab", name="记忆").click()
    panel = page.get_by_role("tabpanel", name="记忆")
    expect(panel.locator(".memory")).to_be_visible()
    return panel


def record(panel: Locator, entry_id: int) -> Locator:
    return panel.locator(f'.memory-entry[data-record-id="{entry_id}"]')


def test_the_memory_tab_shows_chinese_records(chromium: Browser, room_server: RoomServer) -> None:
    project = room_server.create_project("记忆页", TEAM)
    arrange_memory(room_server, project)
    for width, scheme in ((1280, "light"), (1280, "dark"), (600, "light"), (600, "dark")):
        person = sign_in_owner(chromium, room_server, width=width, height=860, color_scheme=scheme)
        try:
            page = person.page
            person.open_project(project)
            if width < 1280:
                page.locator("#open-panel").click()
            panel = open_memory(page)
            summary = panel.locator('.memory-section[data-kind="summary"]')
            expect(summary.locator('[data-section="what"]')).to_have_text("团队的设置页迁移项目")
            expect(summary.locator('[data-section="status"]')).to_have_text("迁移过半")
            # Sections never written read 暂无.
            expect(summary.locator('[data-section="where"]')).to_have_text("暂无")
            expect(summary.locator('[data-section="pitfalls"]')).to_have_text("暂无")
            expect(summary.locator("dt")).to_have_text(
                ["这是什么", "怎么跑和怎么测", "东西都在哪", "现状", "坑"]
            )
            expect(panel.locator('[data-kind="fact"] .memory-entry')).to_have_text(
                re.compile("生产环境部署在杭州机房")
            )
            expect(panel.locator('[data-kind="convention"]')).to_contain_text(
                "提交信息写清楚为什么改"
            )
            progress = panel.locator('[data-kind="progress"] .memory-entry')
            expect(progress.locator(".memory-stage")).to_have_text("评审中")
            expect(progress).to_contain_text("下一步：补键盘测试")
            expect(progress.locator(".tool-chip")).to_have_text(["前端", "表单"])
            session = panel.locator('[data-kind="session"] .memory-entry')
            expect(session).to_contain_text("迁移了设置页表单")
            expect(session).to_contain_text("跑了 12 个用例")
            expect(session.get_by_role("button", name="编辑")).to_have_count(0)  # append-only
            reference = panel.locator('[data-kind="reference"] .memory-entry')
            expect(reference.locator(".badge")).to_have_text("目录")
            expect(reference.locator("code")).to_have_text("web/settings/")
            adr = panel.locator('.memory-decision[data-number="ADR-0001"]')
            expect(adr).to_contain_text("旧组件库不再维护")
            expect(adr.locator(".memory-rejected")).to_have_text("继续修补旧组件库")
            expect(adr.locator(".memory-alternatives")).to_contain_text(
                "没有人维护，安全补丁跟不上"
            )
            expect(adr).to_contain_text("不能改变现有的保存接口")
            for text in panel.all_inner_texts():
                assert "undefined" not in text and "null" not in text, text
            assert layout_problems(page) == []
            screenshot(page, f"memory-tab-{width}-{scheme}")
            panel.evaluate("el => { el.scrollTop = el.scrollHeight; }")
            screenshot(page, f"memory-tab-{width}-{scheme}-end")
            person.assert_clean()
        finally:
            person.close()


def test_an_edit_keeps_history_and_a_stale_revision_keeps_the_text(
    owner: Person, room_server: RoomServer
) -> None:
    project = room_server.create_project("记忆编辑", TEAM)
    made = arrange_memory(room_server, project)
    fact_id = made["fact"]["id"]
    page = owner.page
    owner.open_project(project)
    panel = open_memory(page)
    fact = record(panel, fact_id)
    fact.get_by_role("button", name="编辑").click()
    dialog = page.get_by_role("dialog", name="编辑事实")
    dialog.get_by_label("内容").fill("生产环境部署在杭州和上海两个机房")
    # Someone else saves first, from the revision this dialog started from.
    call(
        room_server,
        "PATCH",
        f"/api/memory/{fact_id}",
        {"rev": 1, "text": "生产环境部署在上海机房"},
        200,
    )
    owner.allow("409")
    dialog.get_by_role("button", name="保存").click()
    problem = dialog.get_by_role("alert")
    expect(problem).to_contain_text("刚刚修改了这条记录（现在是第 2 版）")
    expect(problem).to_contain_text("生产环境部署在上海机房")  # the newest version, shown
    expect(dialog.get_by_label("内容")).to_have_value("生产环境部署在杭州和上海两个机房")  # kept
    screenshot(page, "memory-stale-revision")
    dialog.get_by_role("button", name="保存").click()  # on top of revision 2, deliberately
    expect(dialog).to_have_count(0)
    expect(fact).to_contain_text("生产环境部署在杭州和上海两个机房")
    expect(fact).to_have_attribute("data-rev", "3")

    fact.get_by_role("button", name="历史").click()
    history = page.get_by_role("dialog", name="事实的修订历史")
    revisions = history.locator(".memory-history > li")
    expect(revisions).to_have_count(3)
    expect(revisions.nth(0)).to_contain_text("r3")
    expect(revisions.nth(0)).to_contain_text("杭州和上海")
    expect(revisions.nth(1)).to_contain_text("生产环境部署在上海机房")
    expect(revisions.nth(2)).to_contain_text("生产环境部署在杭州机房")
    page.keyboard.press("Escape")

    # The summary: the same, with its five sections.
    panel.locator('.memory-section[data-kind="summary"]').get_by_role("button", name="编辑").click()
    dialog = page.get_by_role("dialog", name="编辑项目概要")
    dialog.get_by_label("坑").fill("IME 输入时回车不能提交")
    dialog.get_by_role("button", name="保存").click()
    expect(panel.locator('[data-section="pitfalls"]')).to_have_text("IME 输入时回车不能提交")
    summary = room_server.get(f"/api/projects/{project}/memory")["summary"]
    assert summary["rev"] == 2 and summary["body"]["sections"]["what"] == "团队的设置页迁移项目"


def test_a_new_entry_an_empty_field_and_live_refresh(
    owner: Person, room_server: RoomServer
) -> None:
    project = room_server.create_project("记忆实时", TEAM)
    page = owner.page
    owner.open_project(project)
    panel = open_memory(page)
    expect(panel.locator('[data-kind="progress"] .memory-empty')).to_be_visible()
    panel.locator('[data-add="progress"]').click()
    dialog = page.get_by_role("dialog", name="添加进度")
    dialog.get_by_label("内容").fill("搜索框已接入")
    dialog.get_by_label("下一步").fill("写浏览器测试")
    owner.allow("400")
    dialog.get_by_role("button", name="保存").click()
    expect(dialog.get_by_role("alert")).to_have_text("阶段不能为空")
    expect(dialog.get_by_label("内容")).to_have_value("搜索框已接入")
    dialog.get_by_label("阶段").fill("开发中")
    dialog.get_by_label("标签").fill("搜索，前端")
    dialog.get_by_role("button", name="保存").click()
    entry = panel.locator('[data-kind="progress"] .memory-entry')
    expect(entry.locator(".tool-chip")).to_have_text(["搜索", "前端"])

    # Written elsewhere: the memory frame brings it in without a reload.
    room_server.post(f"/api/projects/{project}/memory/fact", {"text": "另一个标签页写的事实"}, 201)
    expect(panel.locator('[data-kind="fact"] .memory-entry')).to_contain_text(
        "另一个标签页写的事实"
    )


def test_a_decision_with_the_alternatives_rejected(owner: Person, room_server: RoomServer) -> None:
    project = room_server.create_project("记忆决策", TEAM)
    page = owner.page
    owner.open_project(project)
    panel = open_memory(page)
    panel.locator('[data-add="decision"]').click()
    dialog = page.get_by_role("dialog", name="记录一项决策")
    dialog.get_by_label("标题 *").fill("搜索用 FTS5 的 trigram 分词")
    dialog.get_by_label("背景 *").fill("两个汉字的查询要能找到更长的词")
    dialog.get_by_label("决定 *").fill("消息和记录都进 FTS5 索引")
    dialog.get_by_label("放弃的方案").fill("引入 jieba 分词")
    dialog.get_by_label("为什么放弃").fill("多一个依赖，还要维护词典")
    dialog.get_by_role("button", name="再加一个放弃的方案").click()
    dialog.get_by_label("放弃的方案").nth(1).fill("LIKE 全表扫描")
    dialog.get_by_label("为什么放弃").nth(1).fill("一百万条消息时太慢")
    dialog.get_by_label("约束").fill("不能引入外部服务")
    dialog.get_by_role("button", name="保存").click()
    expect(dialog).to_have_count(0)
    adr = panel.locator('.memory-decision[data-number="ADR-0001"]')
    expect(adr.locator(".memory-rejected")).to_have_text(["引入 jieba 分词", "LIKE 全表扫描"])
    expect(adr).to_contain_text("一百万条消息时太慢")
    expect(adr).to_contain_text("不能引入外部服务")
    [decision] = room_server.get(f"/api/projects/{project}/decisions")["decisions"]
    assert decision["status"] == "accepted"
    assert decision["revisions"][-1]["alternatives"] == [
        {"option": "引入 jieba 分词", "why_rejected": "多一个依赖，还要维护词典"},
        {"option": "LIKE 全表扫描", "why_rejected": "一百万条消息时太慢"},
    ]
    adr.get_by_role("button", name="历史").click()
    history = page.get_by_role("dialog", name="ADR-0001的修订历史")
    expect(history.locator(".memory-history > li")).to_have_count(1)
    expect(history).to_contain_text("两个汉字的查询要能找到更长的词")
    screenshot(page, "memory-decision-history")


def test_archived_entries_and_the_staleness_warning(owner: Person, room_server: RoomServer) -> None:
    project = room_server.create_project("记忆归档", TEAM)
    made = arrange_memory(room_server, project)
    fact_id = made["fact"]["id"]
    room_server.post(f"/api/memory/{fact_id}/archive", {}, 200)
    # The summary was written 20 days ago; two session-log entries came after it.
    with sqlite3.connect(room_server.server.data / "room.sqlite") as db:
        db.execute(
            "UPDATE memory_entries SET updated_at = updated_at - :age, created_at = created_at -"
            " :age WHERE project_id = :p AND kind = 'summary'",
            {"age": 20 * DAY_SECS, "p": project},
        )
    room_server.post(f"/api/projects/{project}/memory/session", {"summary": "又一轮"}, 201)
    page = owner.page
    owner.open_project(project)
    panel = open_memory(page)
    expect(panel.locator(".memory-stale")).to_have_text(
        "项目概要已有 20 天没有更新，此后新增了 2 条会话日志。请核对后更新概要。"
    )
    expect(record(panel, fact_id)).to_have_count(0)
    toggle = panel.get_by_role("button", name="已归档 1 条")
    toggle.click()
    archived = record(panel, fact_id)
    expect(archived).to_contain_text("生产环境部署在杭州机房")
    expect(archived.locator(".badge")).to_have_text("已归档")
    expect(archived.get_by_role("button", name="编辑")).to_have_count(0)
    screenshot(page, "memory-archived-stale")
    # 恢复 brings it back to the live facts.
    archived.get_by_role("button", name="恢复").click()
    restored = record(panel, fact_id)
    expect(restored).to_have_count(1)
    expect(restored.locator(".badge")).to_have_count(0)
    expect(restored.get_by_role("button", name="编辑")).to_have_count(1)
    assert room_server.get(f"/api/memory/{fact_id}")["entry"]["archived"] is False


def test_the_memory_status_says_when_memory_last_changed(
    owner: Person, room_server: RoomServer
) -> None:
    project = room_server.create_project("记忆状态", TEAM)
    arrange_memory(room_server, project)
    page = owner.page
    owner.open_project(project)
    panel = open_memory(page)
    status = panel.locator(".memory-status")
    expect(status).to_have_attribute("data-state", "idle")
    expect(status).to_have_text(re.compile(r"^已同步 · (刚刚|\d+ 秒前)$"))
    assert "第 " in (status.get_attribute("title") or "")
    # Someone writes: the page hears of it and says so for a few seconds.
    room_server.post(f"/api/projects/{project}/memory/fact", {"text": "端口 8470"}, 201)
    expect(status).to_have_text("更新完毕 · 刚刚")
    expect(panel.locator('[data-kind="fact"] .memory-entry')).to_have_count(2)
    expect(status).to_have_attribute("data-state", "idle", timeout=12_000)


def test_an_owner_clears_all_memory_in_two_clicks(owner: Person, room_server: RoomServer) -> None:
    project = room_server.create_project("清除记忆", TEAM)
    arrange_memory(room_server, project)
    page = owner.page
    owner.open_project(project)
    panel = open_memory(page)
    button = panel.get_by_role("button", name="清除全部记忆")
    button.click()
    expect(panel.locator(".memory-clear-note")).to_contain_text("不能撤销；决策记录保留")
    assert room_server.get(f"/api/projects/{project}/memory")["facts"]  # the first click only asks
    panel.get_by_role("button", name="确认清除").click()
    expect(panel.locator('[data-kind="fact"] .memory-entry')).to_have_count(0)
    view = room_server.get(f"/api/projects/{project}/memory")
    assert view["summary"] is None and view["facts"] == [] and view["references"] == []
    expect(panel.locator(".memory-decision")).to_have_count(1)  # the decisions stay


# -- search ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def history_project(room_server: RoomServer) -> Iterator[dict[str, Any]]:
    """A project whose one message about 部署 is far older than the latest page."""
    project = room_server.create_project("搜索历史", [])
    for i in range(10):
        room_server.say(project, f"更早的闲聊 {i}")
    old = room_server.say(project, "下周三把新版本部署到预发布环境，<b>不是</b>生产")
    for i in range(130):
        room_server.say(project, f"日常同步第 {i} 条")
    fact = room_server.post(
        f"/api/projects/{project}/memory/fact",
        {"text": "回滚脚本在 ops/rollback.sh，部署失败时先跑它"},
        201,
    )["entry"]
    yield {"project": project, "old": old, "fact": fact}


def search_box(page: Page) -> Locator:
    return page.get_by_role("combobox", name="搜索消息和记忆")


def test_search_from_the_header_opens_an_old_message(
    owner: Person, room_server: RoomServer, history_project: dict[str, Any]
) -> None:
    project, old = history_project["project"], history_project["old"]
    page = owner.page
    owner.open_project(project)
    # `/` typed in the composer is text, not the shortcut.
    page.locator("#draft").click()
    page.keyboard.type("/")
    expect(page.locator("#draft")).to_have_value("/")
    expect(search_box(page)).not_to_be_focused()
    page.locator("#draft").fill("")
    page.locator("#timeline").click()
    page.keyboard.press("/")
    expect(search_box(page)).to_be_focused()
    page.keyboard.press("Escape")
    page.keyboard.press("Control+k")
    expect(search_box(page)).to_be_focused()
    search_box(page).fill("部署")
    results = page.get_by_role("listbox", name="搜索结果")
    # Other tests' projects on this server say 部署 too: this project only (all is the default).
    page.get_by_role("button", name="本项目", exact=True).click()
    # Both the message and the fact say 部署; the 消息 filter keeps the messages.
    expect(results.get_by_role("option")).to_have_count(2)
    expect(results.locator('[data-kind="fact"]')).to_contain_text("ops/rollback.sh")
    page.get_by_role("button", name="消息", exact=True).click()
    expect(results.get_by_role("option")).to_have_count(1)
    first = results.get_by_role("option").first
    expect(first).to_contain_text("下周三把新版本部署到预发布环境")
    expect(search_box(page)).to_be_focused()
    # The snippet's markup is text, apart from the marks around the match.
    expect(first.locator(".search-snippet mark").first).to_have_text("部署")
    expect(first.locator(".search-snippet")).to_contain_text("<b>不是</b>")
    expect(first.locator(".search-snippet b")).to_have_count(0)
    screenshot(page, "search-results")
    page.keyboard.press("ArrowDown")
    expect(first).to_have_attribute("aria-selected", "true")
    page.keyboard.press("Enter")
    message = page.locator(f'.msg[data-id="{old["message_id"]}"]')
    expect(message).to_be_in_viewport()
    expect(message.locator("mark.hit")).to_have_text("部署")
    query = urllib.parse.quote("部署")
    assert page.evaluate("location.hash") == f"#/p/{project}/m/{old['message_id']}?q={query}"
    # The window around it does not reach the latest; the jump button goes back there.
    page.locator("#jump-latest").click()
    expect(page.locator(".msg", has_text="日常同步第 129 条")).to_be_in_viewport()
    expect(message).to_have_count(0)
    assert page.evaluate("location.hash") == f"#/p/{project}"  # a reload stays at the latest


def test_a_permalink_opens_the_message_from_a_fresh_page(
    chromium: Browser, room_server: RoomServer, history_project: dict[str, Any]
) -> None:
    project, old = history_project["project"], history_project["old"]
    person = sign_in_owner(chromium, room_server)
    try:
        page = person.page
        link = f"{room_server.origin}/#/p/{project}/m/{old['message_id']}?q={urllib.parse.quote('部署')}"
        page.goto(link)
        message = page.locator(f'.msg[data-id="{old["message_id"]}"]')
        expect(message).to_be_in_viewport()
        expect(message.locator("mark.hit")).to_have_text("部署")
        expect(page.locator("#jump-latest")).to_be_visible()
        # A window around it: the latest messages are not loaded yet.
        expect(page.locator(".msg", has_text="日常同步第 129 条")).to_have_count(0)
        screenshot(page, "search-permalink-fresh")
        # Scrolling down pages forward until the window meets the latest message.
        for _ in range(10):
            page.locator("#timeline").evaluate("el => { el.scrollTop = el.scrollHeight; }")
            page.wait_for_timeout(150)
            if page.locator(".msg", has_text="日常同步第 129 条").count():
                break
        expect(page.locator(".msg", has_text="日常同步第 129 条")).to_have_count(1)
        seqs = page.locator("#timeline > [data-seq]").evaluate_all(
            "els => els.map((el) => Number(el.dataset.seq))"
        )
        assert seqs == sorted(seqs) and len(seqs) == len(set(seqs))
        # Nothing is missing between the old message and the latest.
        assert seqs[-1] - seqs[seqs.index(old["seq"])] == len(seqs) - 1 - seqs.index(old["seq"])
        person.assert_clean()
    finally:
        person.close()


def test_a_record_result_opens_the_memory_tab(
    owner: Person, history_project: dict[str, Any]
) -> None:
    project, fact = history_project["project"], history_project["fact"]
    page = owner.page
    owner.open_project(project)
    page.keyboard.press("Control+k")
    search_box(page).fill("回滚")
    option = page.get_by_role("option").filter(has_text="ops/rollback.sh")
    expect(option.locator(".search-record-badge")).to_have_text("事实")
    option.click()
    panel = page.get_by_role("tabpanel", name="记忆")
    entry = panel.locator(f'.memory-entry[data-record-id="{fact["id"]}"]')
    expect(entry).to_be_in_viewport()
    expect(entry.locator("mark.hit")).to_have_text("回滚")


def test_ime_composition_does_not_search_or_submit(
    owner: Person, history_project: dict[str, Any]
) -> None:
    project = history_project["project"]
    page = owner.page
    owner.open_project(project)
    asked: list[str] = []

    def seen(request: Request) -> None:
        if "/search?" in request.url:
            asked.append(request.url)

    page.on("request", seen)
    box = search_box(page)
    box.focus()
    # Typing 部署 with a pinyin IME: composition events around the candidates, Enter confirms.
    box.dispatch_event("compositionstart", {"data": ""})
    box.evaluate(
        "el => { el.value = 'bu shu'; el.dispatchEvent(new InputEvent('input', {isComposing: true})); }"
    )
    box.evaluate(
        "el => el.dispatchEvent(new KeyboardEvent('keydown', {key: 'Enter', isComposing: true,"
        " keyCode: 229, bubbles: true, cancelable: true}))"
    )
    page.wait_for_timeout(600)
    assert asked == []
    expect(page.get_by_role("listbox", name="搜索结果")).to_be_hidden()
    box.evaluate("el => { el.value = '部署'; }")
    box.dispatch_event("compositionend", {"data": "部署"})
    expect(page.get_by_role("option").first).to_contain_text("部署")
    assert len(asked) == 1 and "q=%E9%83%A8%E7%BD%B2" in asked[0]


def test_snippets_are_built_from_text_and_marks_only(owner: Person) -> None:
    """Whatever a snippet string holds, only <mark> becomes an element; the rest is text."""
    built = owner.page.evaluate(
        """async () => {
          const { snippetNodes, termsOf } = await import("/static/highlight.js");
          const box = document.createElement("p");
          box.append(...snippetNodes('<img src=x onerror="window.hit=1">&lt;b&gt;先<mark>部署</mark>&amp;&#x4e0a;线<MARK>测试</MARK>'));
          return {
            html: box.innerHTML,
            text: box.textContent,
            elements: [...box.querySelectorAll("*")].map((el) => el.tagName),
            terms: termsOf('<mark>部署</mark>和<mark>部署</mark>', ""),
            fromQuery: termsOf("", '"部署" OR 测试*'),
          };
        }"""
    )
    assert built["elements"] == ["MARK", "MARK"]
    assert built["text"] == '<img src=x onerror="window.hit=1"><b>先部署&上线测试'
    assert built["terms"] == ["部署"]
    assert built["fromQuery"] == ["部署", "测试"]
    assert owner.page.evaluate("window.hit") is None


@pytest.mark.parametrize(
    ("width", "scheme"), [(1280, "light"), (1280, "dark"), (600, "light"), (600, "dark")]
)
def test_search_at_every_width_and_theme(
    chromium: Browser,
    room_server: RoomServer,
    history_project: dict[str, Any],
    width: int,
    scheme: str,
) -> None:
    project, old = history_project["project"], history_project["old"]
    person = sign_in_owner(chromium, room_server, width=width, height=860, color_scheme=scheme)
    try:
        page = person.page
        person.open_project(project)
        if width < 700:  # an icon opens the box over the header
            expect(search_box(page)).to_be_hidden()
            page.get_by_role("button", name="搜索（Ctrl+K）").click()
        else:
            expect(page.locator("#search-keys")).to_have_text("Ctrl K")
            page.keyboard.press("Control+k")
        expect(search_box(page)).to_be_focused()
        page.keyboard.type("部署")
        page.get_by_role("button", name="本项目", exact=True).click()  # not other tests' projects
        search_box(page).focus()
        options = page.get_by_role("listbox", name="搜索结果").get_by_role("option")
        expect(options).to_have_count(2)
        assert layout_problems(page) == []
        screenshot(page, f"search-{width}-{scheme}")
        options.filter(has_text="预发布环境").click()
        message = page.locator(f'.msg[data-id="{old["message_id"]}"]')
        expect(message.locator("mark.hit")).to_have_text("部署")
        expect(message).to_be_in_viewport()
        expect(page.locator("#search-input")).not_to_be_focused()  # the message has focus
        screenshot(page, f"search-opened-{width}-{scheme}")
        person.assert_clean()
    finally:
        person.close()


def test_a_message_link_is_copied_and_opens_it(
    chromium: Browser, room_server: RoomServer, history_project: dict[str, Any]
) -> None:
    project, old = history_project["project"], history_project["old"]
    person = sign_in_owner(chromium, room_server)
    try:
        page = person.page
        person.context.grant_permissions(["clipboard-read", "clipboard-write"])
        person.open_project(project)
        latest = page.locator(".msg", has_text="日常同步第 129 条")
        latest.hover()
        latest.get_by_role("button", name="复制链接").click()
        expect(page.locator(".toast").last).to_have_text("已复制消息链接")
        link = page.evaluate("navigator.clipboard.readText()")
        assert link == f"{room_server.origin}/#/p/{project}/m/{latest.get_attribute('data-id')}"
        # The old message's link, opened in a fresh page, shows it.
        fresh = person.context.new_page()
        fresh.goto(f"{room_server.origin}/#/p/{project}/m/{old['message_id']}")
        expect(fresh.locator(f'.msg[data-id="{old["message_id"]}"]')).to_be_in_viewport()
        fresh.close()
        person.assert_clean()
    finally:
        person.close()


def test_a_permalink_to_a_message_that_is_not_there_says_so(
    chromium: Browser, room_server: RoomServer, history_project: dict[str, Any]
) -> None:
    """A fresh load of a link to a message that does not exist (or was deleted, or is another
    project's) says that, not the reply quote's "not in the loaded history"."""
    project = history_project["project"]
    person = sign_in_owner(chromium, room_server)
    try:
        page = person.page
        page.goto(f"{room_server.origin}/#/p/{project}/m/999999?q={urllib.parse.quote('部署')}")
        expect(
            page.locator(".toast", has_text="这条消息不存在、已删除，或不在这个项目里")
        ).to_be_visible()
        expect(page.locator(".toast", has_text="原消息不在已加载的历史中")).to_have_count(0)
    finally:
        person.close()


def test_a_link_into_a_project_that_is_not_yours_says_so(
    chromium: Browser, room_server: RoomServer, history_project: dict[str, Any]
) -> None:
    """A permalink into a project the person is not in (or that is gone) says so instead of
    silently showing another project under that address."""
    person = sign_in_owner(chromium, room_server)
    try:
        page = person.page
        page.goto(f"{room_server.origin}/#/p/999999/m/1?q={urllib.parse.quote('部署')}")
        expect(
            page.locator(".toast", has_text="链接里的项目不存在，或你不是它的成员")
        ).to_be_visible()
        expect(page.locator("#timeline")).to_be_visible()  # a project of theirs is open instead
    finally:
        person.close()
