"""A person an operator disabled (`room users disable`, docs/operators.md) reads 已停用 in the
roster of a page already open, pushed live, in Chinese and in English; the message they wrote
keeps its author, and the page no longer offers to mention them. Their own open page is signed
out at once and says why."""

# The fixtures chromium, room_server and owner are imported from tests/support/browser.py and
# used as test arguments, which linters read as unused imports redefined.
# ruff: noqa: F401, F811

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest
from playwright.sync_api import Browser, expect

from room.cli import main as room_main
from tests.support.browser import (
    Person,
    RoomServer,
    chromium,
    join,
    owner,
    room_server,
    screenshot,
    sign_in_owner,
)
from tests.support.server import ServerProcess

pytestmark = pytest.mark.browser

ENGLISH = "localStorage.setItem('room.lang', JSON.stringify('en'))"


def users(room_server: RoomServer, *argv: str) -> None:
    with contextlib.redirect_stdout(io.StringIO()):
        assert room_main(["users", argv[0], "--data", str(room_server.server.data), *argv[1:]]) == 0


def test_a_disabled_person_reads_disabled_in_the_roster(
    chromium: Browser, owner: Person, room_server: RoomServer
) -> None:
    project = room_server.create_project("停用的人", [{"role": "lead", "handle": "lead",
                                                      "display_name": "负责人"}])  # fmt: skip
    bob = room_server.invite_session(project, "bob", "小博")
    room_server.say(project, "交接文档在 wiki", session=bob)
    bob_id = room_server.members(project)["bob"]["id"]
    owner.open_project(project)
    page = owner.page
    row = page.locator(f'#tab-members .member-row[data-member-id="{bob_id}"]')
    expect(row.locator(".status-text")).not_to_have_text("已停用")

    users(room_server, "disable", "bob")
    expect(row.locator(".status-text")).to_have_text("已停用")  # pushed: no reload
    expect(row).to_have_class(r"member-row is-active is-disabled")
    said = page.locator(f'.msg[data-author="{bob_id}"]')
    expect(said).to_have_count(1)
    expect(said).to_contain_text("交接文档在 wiki")
    expect(said).to_have_attribute("aria-label", re.compile("^小博 "))
    row.locator(".avatar").click()
    expect(page.get_by_role("menuitem", name="@ 他")).to_be_disabled()
    page.keyboard.press("Escape")
    # The @ picker marks them, and sending their mention is refused with the diagnostic.
    draft = page.locator("#draft")
    draft.fill("@小")
    picker = page.get_by_role("listbox", name="选择要提及的成员")
    expect(picker.get_by_role("option", name=re.compile("小博"))).to_contain_text("已停用")
    screenshot(page, "users-disabled-roster-zh")
    draft.fill("")

    english = sign_in_owner(chromium, room_server, setup=lambda p: p.add_init_script(ENGLISH))
    try:
        english.open_project(project)
        en_row = english.page.locator(f'#tab-members .member-row[data-member-id="{bob_id}"]')
        expect(en_row.locator(".status-text")).to_have_text("Disabled")
        screenshot(english.page, "users-disabled-roster-en")
        users(room_server, "enable", "bob")
        expect(en_row.locator(".status-text")).not_to_have_text("Disabled")
        english.assert_clean()
    finally:
        english.close()
    expect(row.locator(".status-text")).not_to_have_text("已停用")


def test_the_disabled_person_s_own_page_says_why_it_signed_out(
    chromium: Browser, room_server: RoomServer
) -> None:
    project = room_server.create_project("被停用者的页面", [])
    carl = join(chromium, room_server, project, "carl", "小卡")
    try:
        carl.open_project(project)
        users(room_server, "disable", "carl")
        card = carl.page.locator("#signed-out")
        expect(card).to_be_visible()  # the socket closed (4401, "account disabled")
        expect(card.locator("h1")).to_have_text("账号已停用")
        expect(card).to_contain_text("你的消息都还在")
        expect(carl.page.locator("#app")).to_be_hidden()
        screenshot(carl.page, "users-disabled-own-page")
        carl.page.reload()  # its next request: 401 account_disabled
        expect(carl.page.locator("#signed-out h1")).to_have_text("账号已停用")
        carl.allow(r"Failed to load resource.*401")
        carl.assert_clean()
    finally:
        carl.close()
        users(room_server, "enable", "carl")


def test_only_listed_people_see_new_project(chromium: Browser, tmp_path: Path) -> None:
    """Setting project_creators: the owner and the people listed see 新建项目; others do not."""
    process = ServerProcess(tmp_path / "data", env={"ROOM_PROJECT_CREATORS": "dana"}).start()
    try:
        server = RoomServer(process)
        project = server.create_project("谁能建项目", [])
        owner_page = sign_in_owner(chromium, server)
        eve = join(chromium, server, project, "eve", "小伊")
        dana = join(chromium, server, project, "dana", "小丹")
        try:
            expect(owner_page.page.locator("#new-project")).to_be_visible()
            expect(dana.page.locator("#new-project")).to_be_visible()
            expect(eve.page.locator("#new-project")).to_be_hidden()
            for person in (owner_page, eve, dana):
                person.assert_clean()
        finally:
            for person in (owner_page, eve, dana):
                person.close()
    finally:
        process.stop()
