"""The email digest's address set in the page, and its language the page's (issue 30 item 8), in
real Chromium: an English browser tells the server it reads English, a refused address shows the
server's words under the field, a saved one is the server's, switching the page to Chinese
switches the digest. Screenshots in test-artifacts/."""

# The fixtures chromium and room_server are imported from tests/support/browser.py and used as
# test arguments, which linters read as unused imports redefined.
# ruff: noqa: F401, F811

from __future__ import annotations

import time

import pytest
from playwright.sync_api import Browser, expect

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


def server_lang(room_server: RoomServer, wanted: str) -> None:
    deadline = time.monotonic() + 10
    while (lang := room_server.get("/api/me/digest")["lang"]) != wanted:
        assert time.monotonic() < deadline, lang
        time.sleep(0.05)


@pytest.mark.parametrize("width", [1024, 600])
def test_the_digest_address_and_language_from_the_page(
    chromium: Browser, room_server: RoomServer, width: int
) -> None:
    room_server.server.request(
        "PUT", "/api/me/digest", {"email": None, "lang": "zh"}, headers=room_server.owner.headers
    )
    context, page, errors = new_person(chromium, room_server, locale="en-US", width=width)
    person = Person(context, page, "owner", errors)
    try:
        page.goto(f"{room_server.origin}/login/{room_server.server.fresh_login_secret()}")
        page.get_by_role("button", name="Sign in").click()
        expect(page.locator("#app")).to_be_visible()
        server_lang(room_server, "en")  # the page said which language it shows

        if width < 700:
            page.locator("#open-projects").click()  # the sidebar is a drawer at 600 px
        page.locator("#digest-open").click()
        dialog = page.get_by_role("dialog", name="Email digest")
        expect(dialog).to_contain_text("in this page's language (English)")
        expect(dialog).to_contain_text("no outgoing mail (SMTP)")  # this server has none
        field = dialog.get_by_label("Email address")
        person.allow(r"status of 400 .*/api/me/digest")  # the refused address, as Chromium logs it
        field.fill("not an address")
        dialog.get_by_role("button", name="Save").click()
        expect(dialog.locator("#digest-email-error")).to_have_text("That is not an email address")
        expect(field).to_have_attribute("aria-invalid", "true")
        screenshot(page, f"digest-dialog-error-en-{width}")
        assert layout_problems(page) == []
        field.fill("owner@example.test")
        dialog.get_by_role("button", name="Save").click()
        expect(dialog).to_be_hidden()
        expect(
            page.locator(".toast", has_text="The digest goes to owner@example.test")
        ).to_be_visible()
        assert room_server.get("/api/me/digest")["email"] == "owner@example.test"

        page.locator("#lang-toggle").dispatch_event("click")  # the person switches to Chinese
        server_lang(room_server, "zh")
        page.locator("#digest-open").dispatch_event("click")
        dialog = page.get_by_role("dialog", name="邮件摘要")
        expect(dialog.get_by_label("邮箱地址")).to_have_value("owner@example.test")
        expect(dialog).to_contain_text("用本页的语言（中文）")
        screenshot(page, f"digest-dialog-zh-{width}")
        dialog.get_by_role("button", name="不再发送").click()
        expect(dialog).to_be_hidden()
        assert room_server.get("/api/me/digest") == {"email": None, "lang": "zh", "enabled": False}
        person.assert_clean()
    finally:
        person.close()
