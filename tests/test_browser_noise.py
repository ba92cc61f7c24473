"""Less noise in the timeline: delivery states as compact icons with the words on hover or
keyboard focus (and always for a screen reader; a failed one keeps its words in sight), a
"people only / everyone" filter, and consecutive tool activity folded into one line."""

# The fixtures chromium, room_server and owner are imported from tests/support/browser.py and
# used as test arguments, which linters read as unused imports redefined.
# ruff: noqa: F401, F811

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from playwright.sync_api import Browser, Locator, Page, WebSocketRoute, expect

from tests.support.browser import (
    EXPECT_TIMEOUT_MS,
    SERVER_WAIT_SECS,
    Person,
    RoomServer,
    chromium,
    layout_problems,
    owner,
    room_server,
    screenshot,
    sign_in_owner,
)
from tests.support.inproc import wait_until

pytestmark = pytest.mark.browser

WS_URL = re.compile(r".*/ws$")
TEAM = [{"handle": "dev", "role": "backend", "display_name": "开发"}]


def width_of(locator: Locator) -> float:
    """The element's width once it is laid out: a timeline that re-renders the message (its
    delivery settled, a notice arrived) may have it detached at the moment of asking."""
    box = wait_until(locator.bounding_box, EXPECT_TIMEOUT_MS / 1000)
    return float(box["width"])


def english(page: Page) -> None:
    page.evaluate("() => localStorage.setItem('room.lang', JSON.stringify('en'))")
    page.reload()


@pytest.mark.parametrize(("width", "lang"), [(1440, "zh-CN"), (1024, "en"), (600, "zh-CN")])
def test_delivery_states_are_icons_with_words_on_hover_and_focus(
    chromium: Browser, room_server: RoomServer, width: int, lang: str
) -> None:
    project = room_server.create_project(f"送达图标 {width}", TEAM)
    room_server.post(
        f"/api/projects/{project}/routes",
        {"scope": "member", "target": str(room_server.members(project)["dev"]["id"]),
         "value": "builtin/echo", "reason": "回显"},
    )  # fmt: skip
    room_server.say(project, "@dev 看一下这个")
    person = sign_in_owner(chromium, room_server, width=width)
    page = person.page
    try:
        if lang == "en":
            english(page)
        person.open_project(project)
        item = page.locator(".msg.mine", has_text="看一下这个").locator(".delivery-item")
        expect(item).to_have_attribute("data-state", "consumed")
        # An icon in sight; the words are there for a screen reader but take no room.
        expect(item.locator("svg.icon-checks")).to_be_visible()
        words = "Taken into their turn" if lang == "en" else "对方本轮已取用"
        state = item.locator(".delivery-state")
        expect(state).to_have_text(words)
        assert width_of(state) <= 1
        assert width_of(item) < 30, width_of(item)
        summary = page.locator(".msg.mine", has_text="看一下这个").locator(".delivery-summary")
        tip = summary.locator(".delivery-tip")
        expect(tip).to_be_hidden()
        # Keyboard focus shows the words …
        page.keyboard.press("Shift")
        summary.focus()
        expect(tip).to_be_visible()
        expect(tip).to_contain_text("@dev")
        assert tip.inner_text().replace("@dev", "").strip().lower() == state.inner_text().lower()
        summary.evaluate("el => el.blur()")
        expect(tip).to_be_hidden()
        # … and so does the pointer.
        summary.hover()
        expect(tip).to_be_visible()
        screenshot(page, f"noise-delivery-tip-{width}-{lang}")
        assert layout_problems(page) == []
        # A click opens every row in words.
        summary.click()
        expect(
            page.locator(".msg.mine", has_text="看一下这个").locator(".delivery-list")
        ).to_contain_text("开发 (@dev)")
        expect(tip).to_be_hidden()
        person.assert_clean()
    finally:
        person.close()


def test_a_failed_delivery_keeps_its_words_in_sight(owner: Person, room_server: RoomServer) -> None:
    project = room_server.create_project("送达失败", TEAM)
    dev = room_server.members(project)["dev"]["id"]
    room_server.post(
        f"/api/projects/{project}/routes",
        {"scope": "member", "target": str(dev), "value": "openai/missing", "reason": "无此提供方"},
    )
    room_server.say(project, "@dev 这条送不到")
    owner.open_project(project)
    item = owner.page.locator(".msg.mine", has_text="这条送不到").locator(".delivery-item")
    expect(item).to_have_attribute("data-state", "failed")
    state = item.locator(".delivery-state")
    expect(state).to_have_text(re.compile(r"^未能送达："))
    assert width_of(state) > 40
    expect(item.locator("svg.icon-alert")).to_be_visible()


def test_people_only_hides_agents_and_is_kept(owner: Person, room_server: RoomServer) -> None:
    project = room_server.create_project("只看人", TEAM)
    dev = room_server.members(project)["dev"]["id"]

    def replies() -> int:
        return sum(m["author_id"] == dev for m in room_server.messages(project))

    # One echo per message: the second is sent once the first is answered, or a loaded machine
    # may start @dev's turn after both arrived and answer them in one reply.
    room_server.say(project, "人写的第一条")
    wait_until(lambda: replies() == 1, SERVER_WAIT_SECS)
    room_server.say(project, "@dev 人写的第二条")
    wait_until(lambda: replies() == 2, SERVER_WAIT_SECS)
    page = owner.page
    owner.open_project(project)
    agent_msgs = page.locator(".msg:not(.mine)", has_text="builtin/echo")
    expect(agent_msgs).to_have_count(2)
    toggle = page.locator("#timeline-filter")
    expect(toggle).to_have_attribute("aria-pressed", "false")
    toggle.click()
    expect(toggle).to_have_attribute("aria-pressed", "true")
    expect(agent_msgs).to_have_count(0)
    expect(page.locator(".msg", has_text="人写的第一条")).to_be_visible()
    expect(page.locator(".msg", has_text="人写的第二条")).to_be_visible()
    note = page.locator("#timeline-filter-note")
    expect(note).to_contain_text("只显示人的发言")
    screenshot(page, "noise-people-only-1440")
    # Kept in this browser.
    page.reload()
    owner.open_project(project)
    expect(page.locator(".msg", has_text="人写的第二条")).to_be_visible()
    expect(agent_msgs).to_have_count(0)
    note.get_by_role("button", name="显示全部").click()
    expect(agent_msgs).to_have_count(2)
    expect(note).to_be_hidden()
    expect(toggle).to_have_attribute("aria-pressed", "false")


def _tool(first: dict[str, Any], author: int, n: int, name: str, ok: bool) -> dict[str, Any]:
    call = {"name": name, "arguments": "{}", "ok": ok}
    return {
        **first, "id": 10_000_000 + n, "seq": first["seq"] + n / 10, "kind": "tool",
        "author_id": author, "body": name, "html": f"<p>{name}</p>", "reply_to": None,
        "reply_excerpt": None, "mentions": [], "meta": {"tool": {"calls": [call], "turn_id": 1, "step": n}},
    }  # fmt: skip


def _inject_tool_run(author: int) -> Any:
    """Three tool steps in a row after the first message, as the server sends them."""

    def handler(ws: WebSocketRoute) -> None:
        server = ws.connect_to_server()

        def to_page(raw: str | bytes) -> None:
            frame = json.loads(raw)
            if frame.get("type") == "history" and frame["messages"]:
                first = frame["messages"][0]
                steps = [
                    _tool(first, author, 1, "room_history", True),
                    _tool(first, author, 2, "fs_read", True),
                    _tool(first, author, 3, "shell", False),
                ]
                frame["messages"][1:1] = steps
                raw = json.dumps(frame, ensure_ascii=False)
            ws.send(raw)

        server.on_message(to_page)

    return handler


@pytest.mark.parametrize(("width", "lang"), [(1440, "zh-CN"), (600, "en")])
def test_consecutive_tool_activity_is_one_line(
    chromium: Browser, room_server: RoomServer, width: int, lang: str
) -> None:
    project = room_server.create_project(f"工具折叠 {width}", TEAM)
    room_server.say(project, "开始吧")
    room_server.say(project, "第二条")
    dev = room_server.members(project)["dev"]["id"]
    person = sign_in_owner(
        chromium,
        room_server,
        width=width,
        setup=lambda page: page.route_web_socket(WS_URL, _inject_tool_run(dev)),
    )
    page = person.page
    try:
        if lang == "en":
            english(page)
        person.open_project(project)
        run = page.locator("#timeline > details.tool-run")
        expect(run).to_have_count(1)
        expect(page.locator("#timeline > details.tool")).to_have_count(0)
        head = run.locator(":scope > summary")
        expect(head).to_contain_text("开发")
        expect(head).to_contain_text(
            "3 tool steps in a row" if lang == "en" else "连续 3 次工具活动"
        )
        expect(head.locator(".badge-warn")).to_be_visible()  # one of them failed
        expect(run.locator("details.tool").first).to_be_hidden()
        screenshot(page, f"noise-tool-run-closed-{width}-{lang}")
        head.click()
        steps = run.locator(".tool-run-body > details.tool")
        expect(steps).to_have_count(3)
        expect(steps.nth(0)).to_contain_text("room_history")
        expect(steps.nth(2)).to_contain_text("shell")
        steps.nth(2).locator("summary").click()
        expect(steps.nth(2).locator(".tool-body")).to_contain_text("shell")
        screenshot(page, f"noise-tool-run-open-{width}-{lang}")
        assert layout_problems(page) == []
        person.assert_clean()
    finally:
        person.close()
