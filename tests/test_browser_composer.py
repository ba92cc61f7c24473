"""The composer: Enter/Shift+Enter, IME composition never sends, the member picker by keyboard,
recipient chips and reach from the JS resolver, diagnostics before sending, the quote bar, drafts
per project, and the resolver's shared vectors run in the page."""

# The fixtures chromium, room_server and owner are imported from tests/support/browser.py and
# used as test arguments, which linters read as unused imports redefined.
# ruff: noqa: F401, F811

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, WebSocketRoute, expect

from tests.support.browser import (
    ROOT,
    SERVER_WAIT_SECS,
    Person,
    RoomServer,
    chromium,
    owner,
    room_server,
    screenshot,
    sign_in_owner,
)
from tests.support.inproc import wait_until

pytestmark = pytest.mark.browser

VECTORS = Path(ROOT / "shared" / "mentions" / "vectors.json")
TEAM = [
    {"role": "lead", "handle": "lead", "display_name": "负责人"},
    {"role": "frontend", "handle": "fe", "display_name": "前端"},
    {"role": "backend", "handle": "be", "display_name": "后端工程师"},
    {"role": "tester", "handle": "qa", "display_name": "测试"},
]


@pytest.fixture(scope="module")
def team(room_server: RoomServer) -> int:
    return room_server.create_project("输入框", TEAM)


def bodies(room_server: RoomServer, project: int) -> list[str]:
    return [m["body"] for m in room_server.messages(project) if m["kind"] == "chat"]


def draft(page: Page) -> object:
    return page.locator("#draft")


def test_enter_sends_and_shift_enter_adds_a_line(owner: Person, room_server: RoomServer) -> None:
    project = room_server.create_project("回车发送")
    owner.open_project(project)
    box = owner.page.locator("#draft")
    box.press_sequentially("第一行")
    box.press("Shift+Enter")
    box.press_sequentially("第二行")
    expect(box).to_have_value("第一行\n第二行")
    box.press("Enter")
    expect(owner.page.locator(".msg .msg-body")).to_have_text("第一行\n第二行")
    expect(box).to_have_value("")
    expect(owner.page.locator(".msg.pending")).to_have_count(0)  # acked: committed on the server
    assert bodies(room_server, project) == ["第一行\n第二行"]


def test_enter_during_ime_composition_never_sends(owner: Person, room_server: RoomServer) -> None:
    project = room_server.create_project("输入法")
    owner.open_project(project)
    page = owner.page
    box = page.locator("#draft")
    box.fill("你好")
    box.focus()
    # A Chinese IME: composition starts, the user confirms a candidate with Enter.
    box.dispatch_event("compositionstart", {"data": ""})
    for init in (
        {"key": "Enter", "isComposing": True},
        {"key": "Enter", "keyCode": 229},
        {"key": "Enter"},
    ):
        prevented = page.evaluate(
            """init => {
              const event = new KeyboardEvent("keydown", { bubbles: true, cancelable: true, ...init });
              return !document.querySelector("#draft").dispatchEvent(event);
            }""",
            init,
        )
        assert prevented is False, init  # the keydown is left to the IME
    box.dispatch_event("compositionend", {"data": "世界"})
    # Safari-style: the confirming Enter arrives after compositionend, marked with keyCode 229.
    page.evaluate(
        """() => document.querySelector("#draft").dispatchEvent(
            new KeyboardEvent("keydown", { bubbles: true, cancelable: true, key: "Enter", keyCode: 229 }))"""
    )
    page.wait_for_timeout(300)
    expect(box).to_have_value("你好")
    expect(page.locator(".msg")).to_have_count(0)
    assert bodies(room_server, project) == []
    # After composition, a real Enter sends.
    box.press("Enter")
    expect(page.locator(".msg .msg-body")).to_have_text("你好")
    expect(page.locator(".msg.pending")).to_have_count(0)  # acked: committed on the server
    assert bodies(room_server, project) == ["你好"]


def test_picker_by_keyboard(owner: Person, room_server: RoomServer, team: int) -> None:
    owner.open_project(team)
    page = owner.page
    box = page.locator("#draft")
    picker = page.get_by_role("listbox", name="选择要提及的成员")
    box.press_sequentially("请 @")
    expect(picker).to_be_visible()
    options = picker.get_by_role("option")
    expect(options.first).to_contain_text("所有人")
    expect(options.first).to_contain_text("将触达 4 位 AI 成员")
    expect(options.first).to_have_attribute("aria-selected", "true")
    expect(box).to_have_attribute("aria-activedescendant", "picker-opt-0")
    screenshot(page, "composer-picker")

    box.press("ArrowDown")
    expect(options.nth(1)).to_have_attribute("aria-selected", "true")
    expect(box).to_have_attribute("aria-activedescendant", "picker-opt-1")
    box.press("ArrowUp")
    expect(options.first).to_have_attribute("aria-selected", "true")

    # Filter by display name, pick with Enter: a chip-backed @handle plus a space.
    box.press_sequentially("后端")
    expect(options).to_have_count(1)
    expect(options.first).to_contain_text("后端工程师")
    box.press("Enter")
    expect(picker).to_be_hidden()
    expect(box).to_have_value("请 @be ")
    expect(page.locator("#recipients .chip-text")).to_have_text(["后端工程师"])

    # By role (中文 or the code), pick with Tab; the full-width ＠ opens it too.
    box.press_sequentially("和＠测")
    expect(options.first).to_contain_text("测试")
    box.press("Tab")
    expect(box).to_have_value("请 @be 和 @qa ")
    box.press_sequentially("@front")
    expect(options).to_have_count(1)
    expect(options.first).to_contain_text("前端")
    box.press("Escape")
    expect(picker).to_be_hidden()
    expect(box).to_have_value("请 @be 和 @qa @front")
    # By handle, then the picker closes on a space.
    box.press_sequentially("x @le")
    expect(options.first).to_contain_text("负责人")
    box.press(" ")
    expect(picker).to_be_hidden()
    # Not inside an email or a word.
    box.fill("mail me at a@b")
    expect(picker).to_be_hidden()


def test_recipients_and_reach_before_sending(owner: Person, team: int) -> None:
    owner.open_project(team)
    page = owner.page
    box = page.locator("#draft")
    recipients = page.locator("#recipients")
    reach = page.locator("#recipients .reach-count")

    box.fill("@fe @be 看一下这个接口")
    expect(recipients.locator(".chip-text")).to_have_text(["前端", "后端工程师"])
    expect(reach).to_have_text("将触达 2 位 AI 成员")
    box.fill("没有提到任何人")
    expect(recipients.locator(".chip-text")).to_have_text(["负责人（未 @ 任何人，默认发给负责人）"])
    expect(reach).to_have_text("将触达 1 位 AI 成员")
    box.fill("@所有人 开会了")
    expect(recipients.locator(".chip-text")).to_have_text(["所有人（4 位成员）"])
    expect(reach).to_have_text("将触达 4 位 AI 成员")
    box.fill("`@fe` 在代码里不算")
    expect(reach).to_have_text("将触达 1 位 AI 成员")  # masked: the lead by default
    box.fill("@用户 只通知人")
    expect(recipients).to_contain_text("仅通知人类成员")
    expect(reach).to_have_text("不会触达 AI 成员")
    box.fill("")
    expect(recipients).to_be_hidden()


def test_diagnostics_before_sending(owner: Person, room_server: RoomServer) -> None:
    project = room_server.create_project(
        "诊断",
        [
            {"role": "lead", "handle": "lead", "display_name": "负责人"},
            {"role": "frontend", "handle": "fe", "display_name": "前端"},
            {"role": "design", "handle": "ui1", "display_name": "设计一", "aliases": ["设计"]},
            {"role": "design", "handle": "ui2", "display_name": "设计二", "aliases": ["设计"]},
            {"role": "docs", "handle": "old", "display_name": "老文档"},
        ],
    )
    members = room_server.members(project)
    room_server.post(f"/api/projects/{project}/members/{members['old']['id']}/leave", {})
    owner.open_project(project)
    page = owner.page
    box = page.locator("#draft")
    diagnostics = page.locator("#diagnostics")

    # A known name glued to the next word: the boundary hint, fixed with one click.
    box.fill("@前端你先看看")
    expect(diagnostics.locator(".diag")).to_have_attribute("data-code", "needs_boundary")
    expect(diagnostics).to_contain_text("请在名字后加空格或标点")
    box.press("Enter")  # blocked: nothing is sent
    expect(page.locator(".msg")).to_have_count(0)
    diagnostics.get_by_role("button", name="加空格").click()
    expect(box).to_have_value("@前端 你先看看")
    expect(diagnostics).to_be_hidden()
    expect(page.locator("#recipients .chip-text")).to_have_text(["前端"])

    # Ambiguous: pick one.
    box.fill("@设计 出个图")
    expect(diagnostics).to_contain_text("有 2 位成员都叫 设计")
    diagnostics.get_by_role("button", name="改为 @ui2").click()
    expect(box).to_have_value("@ui2 出个图")
    expect(diagnostics).to_be_hidden()

    # Unknown (a near miss): a suggestion, never a redirect.
    box.fill("@fee 在吗")
    expect(diagnostics).to_contain_text("没有名为 fee 的成员")
    expect(diagnostics.get_by_role("button", name="改为 @fe")).to_be_visible()

    # Departed: fix it, or send as plain text — then it wakes nobody.
    box.fill("@老文档 的说明还在吗")
    expect(diagnostics).to_contain_text("老文档 已离开项目，不会收到这条消息")
    screenshot(page, "composer-diagnostics")
    diagnostics.get_by_role("button", name="按纯文本发送").click()
    sent = page.locator(".msg.mine", has_text="的说明还在吗")
    expect(sent).to_be_visible()
    expect(sent.locator(".mention")).to_have_count(0)
    # The page shows the message at once; the server's copy lands when the send commits.
    [message] = wait_until(
        lambda: [m for m in room_server.messages(project) if m["body"] == "@老文档 的说明还在吗"],
        SERVER_WAIT_SECS,
    )
    assert message["mentions"] == []
    deliveries = room_server.get(f"/api/messages/{message['id']}")["deliveries"]
    assert [d["recipient_id"] for d in deliveries] == [
        members["lead"]["id"]
    ]  # the lead by default only


def test_quote_bar_and_drafts_per_project(owner: Person, room_server: RoomServer) -> None:
    first = room_server.create_project("草稿一")
    second = room_server.create_project("草稿二")
    room_server.say(first, "需要回复的消息")
    owner.open_project(first)
    page = owner.page
    box = page.locator("#draft")
    quoted = page.locator(".msg", has_text="需要回复的消息")
    quoted.hover()
    quoted.get_by_role("button", name="回复").click()
    bar = page.locator("#quote-bar")
    expect(bar).to_be_visible()
    expect(bar.locator(".quote-text")).to_have_text("需要回复的消息")
    expect(box).to_be_focused()
    box.press("Escape")
    expect(bar).to_be_hidden()
    quoted.hover()
    quoted.get_by_role("button", name="回复").click()
    box.press_sequentially("项目一的草稿")

    owner.open_project(second)
    expect(box).to_have_value("")
    expect(bar).to_be_hidden()
    box.fill("项目二的草稿")
    owner.open_project(first)
    expect(box).to_have_value("项目一的草稿")
    expect(bar).to_be_visible()
    page.reload()
    owner.open_project(first)
    expect(box).to_have_value("项目一的草稿")
    expect(bar.locator(".quote-text")).to_have_text("需要回复的消息")
    box.press("Enter")
    reply = page.locator(".msg.mine", has_text="项目一的草稿")
    expect(reply.locator(".msg-quote")).to_contain_text("需要回复的消息")
    owner.open_project(second)
    expect(box).to_have_value("项目二的草稿")


def test_resolver_vectors_run_in_the_page(owner: Person) -> None:
    doc = json.loads(VECTORS.read_text(encoding="utf-8"))
    result = owner.page.evaluate(
        """async (doc) => {
          const { buildRoster, resolve } = await import("/static/mentions.js");
          const named = Object.fromEntries(Object.entries(doc.rosters).map(([k, r]) => [k, buildRoster(r)]));
          const failures = [];
          let passed = 0;
          for (const c of doc.cases) {
            const roster = typeof c.roster === "string" ? named[c.roster] : buildRoster(c.roster);
            const got = resolve(c.text, roster, c.sender, c.chips || []);
            const actual = JSON.stringify({ m: got.mentioned, d: got.diagnostics.map((d) => [d.code, d.name]) });
            const expected = JSON.stringify({ m: c.expect.mentioned, d: c.expect.diagnostics.map((d) => [d.code, d.name]) });
            if (actual === expected) passed += 1; else failures.push({ name: c.name, actual, expected });
          }
          return { passed, failures };
        }""",
        doc,
    )
    assert result["failures"] == []
    assert result["passed"] == len(doc["cases"]) > 100


def test_a_blocked_draft_shows_the_servers_diagnostic_and_is_not_sent(
    owner: Person, room_server: RoomServer
) -> None:
    # `@张三` names nobody and the server's resolver says nothing of it (plain text); an
    # ambiguous name is what it blocks.
    project = room_server.create_project(
        "被拦下的草稿",
        [
            {"role": "lead", "handle": "lead", "display_name": "负责人"},
            {"role": "design", "handle": "ui1", "display_name": "设计一", "aliases": ["设计"]},
            {"role": "design", "handle": "ui2", "display_name": "设计二", "aliases": ["设计"]},
        ],
    )
    owner.open_project(project)
    page = owner.page
    box = page.locator("#draft")
    box.fill("@设计 看一下")
    blocking = page.locator("#diagnostics .diag.blocking")
    expect(blocking).to_have_attribute("data-code", "ambiguous")
    expect(blocking).to_contain_text("设计")
    screenshot(page, "composer-blocked")
    box.press("Enter")
    page.locator("#send").click()
    expect(box).to_have_value("@设计 看一下")  # kept: nothing was sent
    assert not any("看一下" in m["body"] for m in room_server.messages(project))


class HeldPreviews:
    """Routes /ws through Playwright and holds the server's `preview` answers until the test lets
    each one through, so a test decides the order in which answers reach the page."""

    def __init__(self) -> None:
        self.page_side: WebSocketRoute | None = None
        self.asked: dict[str, str] = {}  # req_id → the draft's body
        self.held: dict[str, str | bytes] = {}  # req_id → the raw answer
        self.holding = True

    def __call__(self, ws: WebSocketRoute) -> None:
        server = ws.connect_to_server()
        self.page_side = ws

        def to_server(raw: str | bytes) -> None:
            frame = json.loads(raw)
            if frame.get("type") == "preview":
                self.asked[frame["req_id"]] = frame["body"]
            server.send(raw)

        def to_page(raw: str | bytes) -> None:
            frame = json.loads(raw)
            if (
                self.holding
                and frame.get("type") == "preview"
                and frame.get("req_id") in self.asked
            ):
                self.held[frame["req_id"]] = raw
            else:
                ws.send(raw)

        ws.on_message(to_server)
        server.on_message(to_page)

    def answer_for(self, page: Page, body: str) -> str:
        """The req_id of the held answer to `body` (waits for the server's answer to arrive)."""
        deadline = time.monotonic() + 8
        while True:
            found = [r for r, b in self.asked.items() if b == body and r in self.held]
            if found:
                return found[-1]
            assert time.monotonic() < deadline, f"no preview answer for {body!r}: {self.asked}"
            page.wait_for_timeout(20)  # lets Playwright dispatch the socket's messages

    def release(self, req_id: str) -> None:
        assert self.page_side is not None
        self.page_side.send(self.held.pop(req_id))

    def push(self, frame: dict[str, Any]) -> None:
        assert self.page_side is not None
        self.page_side.send(json.dumps(frame, ensure_ascii=False))


def test_a_stale_preview_answer_is_ignored(chromium: Browser, room_server: RoomServer) -> None:
    """The answer for an earlier draft arrives after the answer for the current one: the page
    keeps showing what the server said of the current draft, and sends it."""
    project = room_server.create_project(
        "过期的预览",
        [
            {"role": "lead", "handle": "lead", "display_name": "负责人"},
            {"role": "design", "handle": "ui1", "display_name": "设计一", "aliases": ["设计"]},
            {"role": "design", "handle": "ui2", "display_name": "设计二", "aliases": ["设计"]},
        ],
    )
    lead = room_server.members(project)["lead"]["id"]
    socket = HeldPreviews()
    person = sign_in_owner(
        chromium,
        room_server,
        setup=lambda page: page.route_web_socket(re.compile(r".*/ws$"), socket),
    )
    try:
        person.open_project(project)
        page = person.page
        box = page.locator("#draft")
        recipients = page.locator("#recipients")
        diagnostics = page.locator("#diagnostics")

        box.fill("@设计 看一下")  # the server blocks this one: the name is ambiguous
        stale = socket.answer_for(page, "@设计 看一下")
        box.fill("@lead 看一下")
        fresh = socket.answer_for(page, "@lead 看一下")

        socket.release(fresh)
        expect(recipients.locator(".chip-text")).to_have_text(["负责人"])
        expect(diagnostics).to_be_hidden()
        socket.release(stale)
        # A frame sent after the stale answer: once the page shows it, the page has handled the
        # stale answer too (frames of one socket are handled in order).
        socket.push({"type": "typing", "project_id": project, "member_id": lead, "active": True})
        expect(page.locator("#typing")).to_have_text("负责人 正在输入…")
        expect(diagnostics).to_be_hidden()
        expect(diagnostics.locator(".diag")).to_have_count(0)
        expect(recipients.locator(".chip-text")).to_have_text(["负责人"])
        expect(recipients).not_to_have_class(re.compile("is-stale"))

        socket.holding = False
        box.press("Enter")
        expect(page.locator(".msg.mine", has_text="看一下")).to_have_count(1)
        expect(box).to_have_value("")
        # Sent on the answer already shown: the stale one did not displace it.
        assert list(socket.asked.values()) == ["@设计 看一下", "@lead 看一下"], socket.asked
        person.assert_clean()
    finally:
        person.close()
