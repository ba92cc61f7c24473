"""Opening a project lands on the newest: at the bottom when all is read, at the first unread
message (under the 新消息 divider) otherwise — on a fresh load, a switch and a reload, with a long
history whose delivery labels and images arrive after the view was placed — and the floating
回到最新 button counts what arrived while the newest was off screen."""

# The fixtures chromium, room_server and owner are imported from tests/support/browser.py and
# used as test arguments, which linters read as unused imports redefined.
# ruff: noqa: F401, F811

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, Route, expect

from tests.support.browser import (
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
from tests.test_browser_attachments import picture

pytestmark = pytest.mark.browser

AGENT = {"handle": "dev", "role": "backend", "display_name": "开发"}
# How far the timeline is from its end, and whether its last entry is inside it.
REST_JS = """() => {
  const el = document.querySelector('#timeline');
  const last = [...el.querySelectorAll(':scope > [data-seq]')].at(-1);
  const box = el.getBoundingClientRect(), lastBox = last.getBoundingClientRect();
  return { rest: el.scrollHeight - el.scrollTop - el.clientHeight,
           lastInside: lastBox.bottom <= box.bottom + 1 && lastBox.top >= box.top - 1 };
}"""


def upload(room_server: RoomServer, project: int, data: bytes, name: str) -> dict[str, Any]:
    owner = room_server.owner
    request = urllib.request.Request(
        f"{room_server.origin}/api/projects/{project}/attachments?name={urllib.parse.quote(name)}",
        data=data,
        headers={**owner.headers, "Cookie": f"room_session={owner.cookie}"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        return dict(json.loads(answer.read())["attachment"])


def wait_for_replies(room_server: RoomServer, project: int, count: int) -> None:
    """The offline echo agent answers each message that names it; wait until it has."""
    agent = room_server.members(project)["dev"]["id"]

    def answered() -> bool:
        replies = [m for m in room_server.messages(project) if m["author_id"] == agent]
        return len(replies) >= count

    wait_until(answered, SERVER_WAIT_SECS)


@pytest.fixture(scope="module")
def long_project(room_server: RoomServer) -> int:
    """80 messages, some to the agent (whose answers and delivery labels come later), a picture
    near the end and a last line."""
    project = room_server.create_project("长历史", agents=[AGENT])
    for i in range(80):
        body = f"第{i:03d}条 @dev 请看" if i % 8 == 0 else f"第{i:03d}条 日常同步"
        room_server.say(project, body)
    picture_id = upload(room_server, project, picture(), "截图.png")["id"]
    room_server.say(project, "截图在这里", attachments=[picture_id])
    room_server.say(project, "@dev 最后一条")
    wait_for_replies(room_server, project, 11)
    return project


def late_pictures(page: Page) -> None:
    """Thumbnails answered late: they arrive after the view was placed."""

    def slow(route: Route) -> None:
        time.sleep(0.4)
        route.continue_()

    page.route("**/attachments/*/thumb/*", slow)


def rest(page: Page) -> dict[str, Any]:
    return dict(page.evaluate(REST_JS))


def settle_labels(page: Page) -> None:
    """Delivery labels (asked when an entry comes into view) and the picture have arrived."""
    expect(page.locator(".msg-delivery:not(:empty)").first).to_be_attached()
    page.wait_for_function(
        "() => [...document.querySelectorAll('.attach-image img')].every((i) => i.complete && i.naturalWidth > 0)"
    )
    page.wait_for_timeout(300)  # a label's answer that is still on its way


def read_all(page: Page, room_server: RoomServer, project: int) -> None:
    """Scroll to the end by hand: the read cursor moves there (stored by the server)."""
    page.locator("#timeline").evaluate("el => { el.scrollTop = el.scrollHeight; }")
    room_server.wait_read(project)


@pytest.mark.parametrize("width", [1440, 1024, 600])
def test_a_read_project_opens_at_the_bottom(
    chromium: Browser, room_server: RoomServer, long_project: int, width: int
) -> None:
    person = sign_in_owner(chromium, room_server, width=width, setup=late_pictures)
    page = person.page
    try:
        person.open_project(long_project)
        read_all(page, room_server, long_project)
        # Reload: the view is placed before the labels and the picture arrive, and stays at
        # the end after they did (it stopped 40–130 px short).
        page.reload()
        person.open_project(long_project)
        expect(page.locator(".unread-marker")).to_have_count(0)
        settle_labels(page)
        assert page.locator(".msg-delivery:not(:empty)").count() >= 2
        where = rest(page)
        assert where["rest"] <= 1 and where["lastInside"], where
        expect(page.locator(".msg", has_text="最后一条").last).to_be_in_viewport()
        expect(page.locator("#jump-latest")).to_be_hidden()
        screenshot(page, f"open-latest-read-{width}")
        # A switch away and back lands at the end too.
        other = room_server.create_project(f"别处 {width}")
        person.open_project(other)
        person.open_project(long_project)
        settle_labels(page)
        where = rest(page)
        assert where["rest"] <= 1 and where["lastInside"], where
        person.assert_clean()
    finally:
        person.close()


@pytest.mark.parametrize(("width", "lang"), [(1440, "zh-CN"), (1024, "en"), (600, "zh-CN")])
def test_unread_opens_at_the_divider_and_the_button_counts(
    chromium: Browser, room_server: RoomServer, width: int, lang: str
) -> None:
    project = room_server.create_project(f"未读 {width}")
    other = room_server.create_project(f"另一个 {width}")
    bob = room_server.invite_session(project, f"bob{width}", "王芳")
    for i in range(30):
        room_server.say(project, f"读过的 {i}")
    person = sign_in_owner(chromium, room_server, width=width, setup=late_pictures)
    page = person.page
    try:
        if lang == "en":
            page.evaluate("() => localStorage.setItem('room.lang', JSON.stringify('en'))")
            page.reload()
        person.open_project(project)
        read_all(page, room_server, project)
        person.open_project(other)
        for i in range(12):
            room_server.say(project, f"新的第{i:02d}条\n\n" + "很长的一段话。" * 12, session=bob)
        person.open_project(project)
        marker = page.locator(".unread-marker")
        expect(marker).to_have_text("New messages" if lang == "en" else "以下为新消息")
        # The divider is at the top of the view, the first unread message right under it.
        page.wait_for_timeout(300)
        top = page.locator("#timeline").bounding_box()
        box = marker.bounding_box()
        assert top is not None and box is not None
        assert abs(box["y"] - top["y"]) < 25, (box, top)
        expect(page.locator(".msg", has_text="新的第00条")).to_be_in_viewport()
        jump = page.locator("#jump-latest")
        expect(jump).to_have_text("Jump to latest (12)" if lang == "en" else "回到最新（12）")
        screenshot(page, f"open-latest-unread-{width}-{lang}")
        jump.click()
        expect(page.locator(".msg", has_text="新的第11条")).to_be_in_viewport()
        expect(jump).to_be_hidden()
        # Scrolled up, two more arrive: the button counts them.
        page.locator("#timeline").evaluate("el => { el.scrollTop = 0; }")
        expect(jump).to_have_text("Jump to latest" if lang == "en" else "回到最新")
        room_server.say(project, "又来一条", session=bob)
        room_server.say(project, "再来一条", session=bob)
        expect(jump).to_have_text("Jump to latest (2)" if lang == "en" else "回到最新（2）")
        screenshot(page, f"open-latest-counted-{width}-{lang}")
        jump.click()
        expect(page.locator(".msg", has_text="再来一条")).to_be_in_viewport()
        # Read now: a reload opens at the bottom without the divider.
        room_server.wait_read(project)
        page.reload()
        person.open_project(project)
        expect(marker).to_have_count(0)
        expect(page.locator(".msg", has_text="再来一条")).to_be_in_viewport()
        person.assert_clean()
    finally:
        person.close()
