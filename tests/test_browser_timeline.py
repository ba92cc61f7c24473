"""The timeline: two people live, markdown, sides and day separators, replies, hover actions,
edit and delete, tool activity and system notices, scroll-back history, the unread marker, and
resuming after a dropped connection without reload or duplicates."""

# The fixtures chromium, room_server and owner are imported from tests/support/browser.py and
# used as test arguments, which linters read as unused imports redefined.
# ruff: noqa: F401, F811

from __future__ import annotations

import json
import re
import time
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, WebSocketRoute, expect

from tests.support.browser import (
    SERVER_WAIT_SECS,
    Person,
    RoomServer,
    chromium,
    join,
    owner,
    room_server,
    screenshot,
    sign_in_owner,
)
from tests.support.inproc import wait_until

pytestmark = pytest.mark.browser

WS_URL = re.compile(r".*/ws$")


def message(page: Page, text: str) -> Any:
    return page.locator(".msg", has_text=text)


def send(page: Page, text: str) -> None:
    page.locator("#draft").fill(text)
    page.locator("#draft").press("Enter")


def test_two_people_see_each_other_live(
    chromium: Browser, room_server: RoomServer, owner: Person
) -> None:
    project = room_server.create_project("实时协作")
    owner.open_project(project)
    bob = join(chromium, room_server, project, "bob", "王小明")
    try:
        expect(bob.page.locator("#room-title")).to_have_text("实时协作")
        expect(bob.page.locator("#conn-state")).to_have_attribute("data-status", "open")

        send(owner.page, "你好 @bob，请看一下登录页的文案")
        theirs = message(bob.page, "请看一下登录页的文案")
        expect(theirs).to_be_visible()
        expect(theirs).not_to_have_class(re.compile(r"\bmine\b"))
        expect(theirs.locator(".author")).to_have_text("管理员")
        expect(theirs.locator(".mention.mention-me")).to_have_text("@bob")
        mine = message(owner.page, "请看一下登录页的文案")
        expect(mine).to_have_class(re.compile(r"\bmine\b"))

        # Others on the left, own messages on the right.
        def sides(page: Page, el: Any) -> tuple[float, float]:
            box = el.locator(".msg-body").bounding_box()
            area = page.locator("#timeline").bounding_box()
            assert box is not None and area is not None
            return box["x"] - area["x"], area["x"] + area["width"] - (box["x"] + box["width"])

        left_gap, right_gap = sides(bob.page, theirs)
        assert left_gap < right_gap, (left_gap, right_gap)
        left_gap, right_gap = sides(owner.page, mine)
        assert right_gap < left_gap, (left_gap, right_gap)

        # Bob replies with a quote; the owner sees it live, with the quote.
        theirs.hover()
        theirs.get_by_role("button", name="回复").click()
        expect(bob.page.locator("#quote-bar")).to_contain_text("回复 管理员")
        send(bob.page, "收到，我马上看")
        reply = message(owner.page, "收到，我马上看")
        expect(reply.locator(".msg-quote")).to_contain_text("请看一下登录页的文案")
        expect(reply.locator(".author")).to_have_text("王小明")
        expect(bob.page.locator("#quote-bar")).to_be_hidden()

        # Typing is shown live (and never stored).
        bob.page.locator("#draft").fill("我在写")
        expect(owner.page.locator("#typing")).to_have_text("王小明 正在输入…")
        screenshot(owner.page, "timeline-two-people-owner")
        bob.assert_clean()
    finally:
        bob.close()


def test_markdown_sides_and_day_separators(owner: Person, room_server: RoomServer) -> None:
    project = room_server.create_project("格式与日期")
    bob = room_server.invite_session(project, "lihua", "李华")
    room_server.say(project, "**加粗** 和 `行内代码`，还有[链接](https://example.com/doc)")
    room_server.say(project, "```python\nprint('你好')\n```", session=bob)
    owner.open_project(project)
    page = owner.page
    first = message(page, "加粗")
    expect(first.locator(".msg-body strong")).to_have_text("加粗")
    expect(first.locator(".msg-body code")).to_have_text("行内代码")
    link = first.locator(".msg-body a")
    expect(link).to_have_attribute("href", "https://example.com/doc")
    expect(link).to_have_attribute("target", "_blank")
    expect(link).to_have_attribute("rel", re.compile("noopener"))
    code = page.locator(".msg .msg-body pre code")
    expect(code).to_have_text("print('你好')")
    expect(page.locator(".day-sep")).to_have_count(1)
    expect(page.locator(".day-sep")).to_have_text("今天")
    labels = page.evaluate(
        """async () => {
          const { formatDay } = await import("/static/i18n.js");
          const now = new Date(2026, 11, 2, 10, 0);
          return [new Date(2026, 11, 2, 1, 0), new Date(2026, 11, 1, 23, 0), new Date(2026, 10, 20, 9, 0), new Date(2025, 0, 5, 9, 0)]
            .map((d) => formatDay(d.toISOString(), now));
        }"""
    )
    assert labels[:2] == ["今天", "昨天"]
    assert "11月20日" in labels[2] and "星期五" in labels[2], labels
    assert "2025年1月5日" in labels[3], labels


def test_reply_hover_actions_edit_and_delete(owner: Person, room_server: RoomServer) -> None:
    project = room_server.create_project("回复与编辑")
    bob = room_server.invite_session(project, "zhangwei", "张伟")
    room_server.say(project, "登录按钮的文案要改成「登录 / Sign in」", session=bob)
    owner.open_project(project)
    page = owner.page

    theirs = page.locator(".msg:not(.mine)", has_text="登录按钮的文案")
    actions = theirs.locator(".msg-actions")
    expect(actions).to_have_css("opacity", "0")
    theirs.hover()
    expect(actions).to_have_css("opacity", "1")
    expect(theirs.get_by_role("button", name="编辑")).to_have_count(0)  # not mine
    theirs.get_by_role("button", name="@ 作者").click()
    expect(page.locator("#draft")).to_have_value("@zhangwei ")
    page.locator("#draft").fill("")

    theirs.hover()
    theirs.get_by_role("button", name="回复").click()
    send(page, "好的，我来改")
    mine = message(page, "好的，我来改")
    expect(mine.locator(".msg-quote")).to_contain_text("张伟")
    mine.locator(".msg-quote").click()
    expect(theirs).to_have_class(re.compile(r"\bflash\b"))

    # Edit my message in place: Enter saves, and it says so.
    mine = page.locator(f'.msg[data-id="{mine.get_attribute("data-id")}"]')
    mine.hover()
    mine.get_by_role("button", name="编辑").click()
    editor = mine.locator("textarea.edit-input")
    expect(editor).to_be_focused()
    editor.fill("好的，我今天下午改完")
    editor.press("Enter")
    edited = message(page, "我今天下午改完")
    expect(edited.locator(".edited")).to_have_text("已编辑")
    assert any(m["body"] == "好的，我今天下午改完" for m in room_server.messages(project))

    # ↑ in the empty composer edits my last message; Esc leaves it as it was.
    edited = page.locator(f'.msg[data-id="{edited.get_attribute("data-id")}"]')
    page.locator("#draft").focus()
    page.keyboard.press("ArrowUp")
    expect(edited.locator("textarea.edit-input")).to_be_focused()
    page.keyboard.press("Escape")
    expect(edited.locator("textarea.edit-input")).to_have_count(0)
    expect(edited.locator(".msg-body")).to_have_text("好的，我今天下午改完")

    # Delete it (after confirming); the text leaves the timeline.
    edited.hover()
    edited.get_by_role("button", name="删除").click()
    dialog = page.get_by_role("dialog", name="删除这条消息？")
    dialog.get_by_role("button", name="删除").click()
    expect(page.locator(".msg.deleted .msg-body")).to_have_text("此消息已删除")
    expect(page.get_by_text("我今天下午改完")).to_have_count(0)


def _inject_tool_message(ws: WebSocketRoute) -> None:
    """One tool message added to history pages on the way to the page, to check how a lone one is
    shown without running an agent (a real agent's, folded, are in test_browser_mcp)."""
    server = ws.connect_to_server()

    def to_page(raw: str | bytes) -> None:
        frame = json.loads(raw)
        if frame.get("type") == "history" and frame["messages"]:
            first = frame["messages"][0]
            tool = {
                **first, "id": 10_000_000, "seq": first["seq"] + 0.5, "kind": "tool", "author_id": first["author_id"],
                "body": "room_history(limit=5) → 5 条消息", "html": "<p>room_history(limit=5) → 5 条消息</p>",
                "reply_to": None, "reply_excerpt": None, "mentions": [], "meta": {"tool": "room_history"},
            }  # fmt: skip
            frame["messages"].insert(1, tool)
            raw = json.dumps(frame, ensure_ascii=False)
        ws.send(raw)

    server.on_message(to_page)


def _inject_tool_calls(author_id: int, calls: list[dict[str, Any]]) -> Any:
    """Like :func:`_inject_tool_message`, with the shape the server gives a step's tool calls
    (``meta.tool.calls``, each shell call with its ``command``, each file write with ``file``)."""

    def handler(ws: WebSocketRoute) -> None:
        server = ws.connect_to_server()

        def to_page(raw: str | bytes) -> None:
            frame = json.loads(raw)
            if frame.get("type") == "history" and frame["messages"]:
                first = frame["messages"][0]
                lines = "\n".join(f"🔧 `{c['name']}`" for c in calls)
                tool = {
                    **first, "id": 10_000_001, "seq": first["seq"] + 0.5, "kind": "tool", "author_id": author_id,
                    "body": lines, "html": f"<p>{lines}</p>", "reply_to": None, "reply_excerpt": None,
                    "mentions": [], "meta": {"tool": {"calls": calls, "turn_id": 1, "step": 1}},
                }  # fmt: skip
                frame["messages"].insert(1, tool)
                raw = json.dumps(frame, ensure_ascii=False)
            ws.send(raw)

        server.on_message(to_page)

    return handler


SHELL_CALLS = [
    {"name": "shell", "arguments": '{"command": "python -m pytest -q"}', "ok": True, "command": {
        "command": "python -m pytest -q", "exit_code": 1, "duration_secs": 2.25,
        "output": "FAILED test_x.py::test_a\n<script>alert(1)</script>\n1 failed", "truncated": True,
        "sandboxed": False, "killed": False, "command_result_id": 7}},
    {"name": "shell", "arguments": '{"command": "node --version"}', "ok": True, "command": {
        "command": "node --version", "exit_code": 0, "duration_secs": 0.031, "output": "v20.11.0\n",
        "truncated": False, "sandboxed": True, "killed": False, "command_result_id": 8}},
    {"name": "shell", "arguments": '{"command": "sleep 100"}', "ok": False, "command": {
        "command": "sleep 100", "exit_code": None, "duration_secs": 30.0, "output": "",
        "truncated": False, "sandboxed": True, "killed": True, "command_result_id": 9}},
    {"name": "fs_write", "arguments": '{"path": "src/设置.ts"}', "ok": True,
     "file": {"path": "src/设置.ts", "bytes": 2048}},
]  # fmt: skip


def test_shell_commands_and_file_writes_in_tool_activity(
    chromium: Browser, room_server: RoomServer
) -> None:
    project = room_server.create_project(
        "命令记录", [{"role": "backend", "handle": "be", "display_name": "后端"}]
    )
    room_server.say(project, "开始干活")
    room_server.say(project, "第二条")
    agent = room_server.members(project)["be"]["id"]
    person = sign_in_owner(
        chromium,
        room_server,
        setup=lambda page: page.route_web_socket(WS_URL, _inject_tool_calls(agent, SHELL_CALLS)),
    )
    try:
        person.open_project(project)
        page = person.page
        tool = page.locator("details.tool")
        expect(tool).to_have_count(1)
        head = tool.locator(":scope > summary")
        expect(head).to_contain_text("后端使用了 shell、fs_write")
        expect(head.locator(".badge-warn")).to_have_text("有失败")
        head.click()
        runs = tool.locator(".tool-command")
        expect(runs).to_have_count(3)
        failed, ok, killed = runs.nth(0), runs.nth(1), runs.nth(2)
        expect(failed.locator(".command-line")).to_have_text("$ python -m pytest -q")
        assert failed.locator(".command-line").evaluate("el => getComputedStyle(el).fontFamily")
        expect(failed.locator(".command-exit")).to_have_text("✗ 1")
        expect(failed.locator(".command-duration")).to_have_text("2.3 s")
        expect(failed.locator(".command-unsandboxed")).to_have_text("未隔离")
        expect(ok.locator(".command-exit")).to_have_text("✓ 0")
        expect(ok.locator(".command-duration")).to_have_text("31 ms")
        expect(ok.locator(".command-unsandboxed")).to_have_count(0)
        expect(killed.locator(".command-exit")).to_have_text("已终止")
        expect(killed.locator(".command-output")).to_have_text("没有输出")

        # Output is collapsed, then shown as text: the markup in it is not markup.
        output = failed.locator(".command-output")
        expect(output.locator("summary")).to_have_text("输出（已截断）")
        expect(output.locator("pre")).to_be_hidden()
        output.locator("summary").click()
        expect(output.locator("pre")).to_have_text(
            "FAILED test_x.py::test_a\n<script>alert(1)</script>\n1 failed"
        )
        expect(tool.locator("script")).to_have_count(0)
        expect(ok.locator(".command-output pre")).to_be_hidden()

        write = tool.locator('.tool-call[data-name="fs_write"]')
        expect(write.locator(".file-path")).to_have_text("src/设置.ts")
        expect(write.locator(".file-size")).to_have_text("2.0 KB")
        tool.scroll_into_view_if_needed()
        screenshot(page, "timeline-tool-commands")
        person.assert_clean()
    finally:
        person.close()


def test_tool_activity_and_system_notices(chromium: Browser, room_server: RoomServer) -> None:
    project = room_server.create_project(
        "通知与工具",
        [
            {"role": "lead", "handle": "alpha", "display_name": "阿尔法"},
            {"role": "backend", "handle": "beta", "display_name": "贝塔"},
        ],
    )
    room_server.post(f"/api/projects/{project}/limits", {"agent_turn_cap": 1})
    room_server.say(project, "@alpha @beta 开始")  # two agent turns: the second trips the brake
    # Pause beta only once both turns were tried: a pause first would hold its delivery.
    wait_until(
        lambda: room_server.get(f"/api/projects/{project}/brake")["brake"]["tripped"],
        SERVER_WAIT_SECS,
    )
    members = room_server.members(project)
    room_server.post(f"/api/projects/{project}/members/{members['beta']['id']}/pause", {})
    person = sign_in_owner(
        chromium,
        room_server,
        setup=lambda page: page.route_web_socket(WS_URL, _inject_tool_message),
    )
    try:
        person.open_project(project)
        page = person.page
        brake = page.locator(".notice-brake")
        expect(brake).to_contain_text("循环制动")
        expect(page.locator(".notice-member")).to_contain_text("暂停了 @beta")

        tool = page.locator("details.tool")
        expect(tool).to_have_count(1)
        expect(tool).not_to_have_attribute("open", "")
        expect(tool.locator("summary")).to_contain_text("使用了 room_history")
        expect(tool.locator(".tool-body")).to_be_hidden()
        assert tool.evaluate("el => !el.closest('.msg') && !el.classList.contains('msg')")
        tool.locator("summary").click()
        expect(tool.locator(".tool-body")).to_contain_text("room_history(limit=5)")

        # A person clears the brake from the notice; the clearing is announced.
        brake.get_by_role("button", name="解除制动").click()
        expect(page.locator(".notice-ok")).to_contain_text("制动已由人类解除")
        room_server.post(
            f"/api/projects/{project}/routes",
            {"scope": "role", "target": "backend", "value": "builtin/echo", "reason": "统一回显"},
        )
        expect(page.locator(".notice-route")).to_contain_text("理由：统一回显")
        screenshot(page, "timeline-notices")
        person.assert_clean()
    finally:
        person.close()


def test_scrolling_back_loads_older_history(owner: Person, room_server: RoomServer) -> None:
    project = room_server.create_project("长历史")
    total = 130
    for i in range(1, total + 1):
        room_server.say(project, f"历史消息 第{i:03d}条")
    owner.open_project(project)
    page = owner.page
    expect(message(page, "第130条")).to_be_visible()
    loaded = page.locator(".msg").count()
    assert 50 <= loaded < total, loaded
    timeline = page.locator("#timeline")
    while page.locator(".msg").count() < total:
        before = page.locator(".msg").count()
        oldest = page.locator(".msg").first.inner_text()
        timeline.evaluate("el => { el.scrollTop = 0; }")
        expect(page.locator(".msg")).not_to_have_count(before)
        # The message that was at the top stays in view: the page does not jump.
        anchor = page.locator(".msg", has_text=oldest.split("\n")[-1]).first
        box, area = anchor.bounding_box(), timeline.bounding_box()
        assert box is not None and area is not None
        assert area["y"] - 5 <= box["y"] <= area["y"] + area["height"], (box, area)
    expect(page.locator(".history-edge")).to_have_text("这是项目的第一条消息")
    texts = page.locator(".msg .msg-body").all_inner_texts()
    assert texts == [f"历史消息 第{i:03d}条" for i in range(1, total + 1)]


def test_unread_marker(owner: Person, room_server: RoomServer) -> None:
    project = room_server.create_project("未读标记")
    other = room_server.create_project("另一个项目")
    bob = room_server.invite_session(project, "wangfang", "王芳")
    room_server.say(project, "我已经看过的消息")
    owner.open_project(project)
    expect(owner.page.locator(".unread-marker")).to_have_count(0)
    owner.open_project(other)
    for text in ("新消息一", "新消息二", "新消息三"):
        room_server.say(project, text, session=bob)
    owner.open_project(project)
    page = owner.page
    marker = page.locator(".unread-marker")
    expect(marker).to_have_text("以下为新消息")
    following = marker.evaluate("el => el.nextElementSibling.innerText")
    assert "新消息一" in following
    assert page.evaluate(
        "() => document.querySelector('.unread-marker').compareDocumentPosition(document.querySelector('.msg')) & Node.DOCUMENT_POSITION_PRECEDING"
    )
    # Having seen them (at the bottom, focused), the read cursor moved: no marker next time.
    room_server.wait_read(project)
    page.reload()
    owner.open_project(project)
    expect(message(page, "新消息三")).to_be_visible()
    expect(page.locator(".unread-marker")).to_have_count(0)


class DroppableSocket:
    """Routes /ws through Playwright so a test can cut the connection and hold reconnects."""

    def __init__(self) -> None:
        self.current: WebSocketRoute | None = None
        self.blocked = False
        self.from_page: list[dict[str, Any]] = []

    def __call__(self, ws: WebSocketRoute) -> None:
        if self.blocked:
            ws.close()
            return
        server = ws.connect_to_server()

        def to_server(raw: str | bytes) -> None:
            self.from_page.append(json.loads(raw))
            server.send(raw)

        ws.on_message(to_server)
        self.current = ws

    def drop(self) -> None:
        self.blocked = True
        assert self.current is not None
        self.current.close()

    def subscribes(self) -> list[dict[str, Any]]:
        return [f for f in self.from_page if f.get("type") == "subscribe"]


def test_resume_after_a_dropped_connection(chromium: Browser, room_server: RoomServer) -> None:
    project = room_server.create_project("断线续传")
    socket = DroppableSocket()
    person = sign_in_owner(
        chromium, room_server, setup=lambda page: page.route_web_socket(WS_URL, socket)
    )
    try:
        person.open_project(project)
        page = person.page
        send(page, "断线前的消息")
        expect(message(page, "断线前的消息")).not_to_have_class(re.compile("pending"))
        page.evaluate("() => { window.noReloadMarker = 42; }")
        head = room_server.messages(project)[-1]["seq"]

        socket.drop()
        expect(page.locator("#conn-state")).to_have_attribute("data-status", "reconnecting")
        room_server.say(project, "断线期间一")
        room_server.say(project, "断线期间二")
        send(page, "离线时写的消息")  # kept and retransmitted with the same client_txn_id
        expect(message(page, "离线时写的消息")).to_have_class(re.compile("pending"))

        socket.blocked = False
        expect(page.locator("#conn-state")).to_have_attribute("data-status", "open", timeout=15_000)
        for text in ("断线前的消息", "断线期间一", "断线期间二", "离线时写的消息"):
            expect(message(page, text)).to_have_count(1)
        expect(message(page, "离线时写的消息")).not_to_have_class(re.compile("pending"))
        assert page.evaluate("() => window.noReloadMarker") == 42  # resumed in place
        last = socket.subscribes()[-1]
        assert (last["since"], last["epoch"]) == (head, 1), last
        bodies = [m["body"] for m in room_server.messages(project)]
        assert bodies == ["断线前的消息", "断线期间一", "断线期间二", "离线时写的消息"]
        assert page.locator(".msg").count() == 4
        person.assert_clean()
    finally:
        person.close()


def test_a_failed_delivery_is_retried_from_its_notice(
    chromium: Browser, room_server: RoomServer
) -> None:
    """Issue 28, item 5: the failure notice names the member and the next step, and its 重试
    button asks for the failed delivery again — dispatched once, answered."""
    project = room_server.create_project(
        "重试失败的投递", [{"role": "lead", "handle": "alpha", "display_name": "阿尔法"}]
    )
    alpha = room_server.members(project)["alpha"]["id"]

    def route(value: str) -> None:
        room_server.post(
            f"/api/projects/{project}/routes",
            {"scope": "member", "target": str(alpha), "value": value, "reason": "测试"},
        )

    route("openai/missing")
    sent = room_server.say(project, "@alpha 第一件事")
    person = sign_in_owner(chromium, room_server)
    try:
        person.open_project(project)
        page = person.page
        notice = page.locator(".notice-error", has_text="处理消息失败")
        expect(notice).to_contain_text("@alpha")
        expect(notice).to_contain_text("下一步")
        route("builtin/echo")
        notice.get_by_role("button", name="重试").click()
        expect(page.locator(".toast", has_text="已重新投递")).to_be_visible()

        def consumed() -> dict[str, Any] | None:
            [row] = room_server.get(f"/api/messages/{sent['message_id']}")["deliveries"]
            return row if row["state"] == "consumed" else None

        row = wait_until(consumed, SERVER_WAIT_SECS)
        assert row["retries"] == 1
        person.assert_clean()
    finally:
        person.close()
