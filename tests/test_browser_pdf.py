"""A PDF's preview in real Chromium (issue 30, item 9): dropped on the composer, it shows the
picture of its first page in the tray and, once sent, in another person's timeline with its page
count; the picture opens larger in a dialog; "Open" takes the PDF itself to a tab of its own,
where Chromium's viewer draws it under the sandboxing CSP (no frame of the room page)."""

# The fixtures chromium, room_server and owner are imported from tests/support/browser.py and
# used as test arguments, which linters read as unused imports redefined.
# ruff: noqa: F401, F811

from __future__ import annotations

import io
import shutil

import pytest
from PIL import Image
from playwright.sync_api import Browser, Page, expect

from tests.support import pdfs
from tests.support.browser import (
    ARTIFACTS,
    Person,
    RoomServer,
    chromium,
    join,
    layout_problems,
    owner,
    room_server,
    screenshot,
)
from tests.test_browser_attachments import DROP_JS, b64

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(
        shutil.which("bwrap") is None or shutil.which("pdftoppm") is None,
        reason="needs bubblewrap and poppler-utils; scripts/test installs both",
    ),
]


def blue_pixels(shot: bytes) -> int:
    """The pixels of the report's blue title bar in the top third of a screenshot (every 8th)."""
    image = Image.open(io.BytesIO(shot)).convert("RGB")
    count = 0
    for x in range(0, image.width, 8):
        for y in range(0, image.height // 3, 8):
            pixel = image.getpixel((x, y))
            if isinstance(pixel, tuple) and pixel[2] > 140 and pixel[0] < 70:
                count += 1
    return count


def viewer_drew(tab: Page) -> bool:
    """Whether the viewer draws the page: it does so after the load event, so a few looks."""
    for _ in range(40):
        if blue_pixels(tab.screenshot()) > 50:
            return True
        tab.wait_for_timeout(250)
    return False


LOADED_JS = """
sel => { const i = document.querySelector(sel); return !!i && i.complete && i.naturalWidth > 0; }
"""


def test_a_pdf_shows_its_first_page_and_opens_in_the_browsers_viewer(
    chromium: Browser, owner: Person, room_server: RoomServer
) -> None:
    project = room_server.create_project("PDF 预览")
    guest = join(chromium, room_server, project, "reader", "读者", width=600, height=900)
    english = join(chromium, room_server, project, "anna", "Anna", width=1024, height=800)
    try:
        owner.open_project(project)
        guest.open_project(project)
        english.open_project(project)
        english.page.get_by_role("button", name="English").click()
        page = owner.page
        page.evaluate(DROP_JS, [b64(pdfs.document(pages=3)), "季度报告.pdf", "application/pdf"])
        tray = page.locator(".attach-tray")
        # The tray shows the page as soon as the upload is answered.
        expect(tray.locator(".attach-item:not(.is-uploading) img.attach-thumb")).to_have_count(1)
        page.locator("#draft").fill("三季度的报告")
        page.locator("#draft").press("Enter")
        expect(tray).to_be_hidden()

        for person in (owner, guest):
            message = person.page.locator(".msg", has_text="三季度的报告")
            card = message.locator(".attach-pdf")
            expect(card).to_have_count(1)
            expect(card).to_contain_text("季度报告.pdf")
            expect(card).to_contain_text("PDF · 3 页")
            person.page.wait_for_function(LOADED_JS, arg=".msg .attach-pdf img")
            # The picture is the first page: 679 × 960, drawn by the server.
            assert person.page.evaluate(
                "() => { const i = document.querySelector('.msg .attach-pdf img');"
                " return [i.naturalWidth, i.naturalHeight]; }"
            ) == [679, 960]
        # In English, at 1024 px.
        card_en = english.page.locator(".msg", has_text="三季度的报告").locator(".attach-pdf")
        expect(card_en).to_contain_text("PDF · 3 pages")
        expect(card_en.get_by_role("link", name="Open")).to_have_attribute(
            "title", "Open 季度报告.pdf in a new tab, in the browser's PDF viewer"
        )
        english.page.wait_for_function(LOADED_JS, arg=".msg .attach-pdf img")
        card_en.get_by_role("button", name="First page of 季度报告.pdf").click()
        expect(english.page.locator("dialog.pdf-dialog")).to_contain_text("Page 1 of 3")
        screenshot(english.page, "pdf-preview-dialog-1024-en")
        english.page.keyboard.press("Escape")
        screenshot(english.page, "pdf-preview-1024-en")
        assert layout_problems(english.page) == []
        screenshot(owner.page, "pdf-preview-1440")
        screenshot(guest.page, "pdf-preview-600")
        assert layout_problems(owner.page) == []
        assert layout_problems(guest.page) == []

        # Larger in a dialog, with the page count and both links.
        card = guest.page.locator(".msg .attach-pdf")
        card.get_by_role("button", name="季度报告.pdf 的第一页").click()
        dialog = guest.page.locator("dialog.pdf-dialog")
        expect(dialog.locator("img.pdf-page-full")).to_be_visible()
        guest.page.wait_for_function(LOADED_JS, arg="dialog.pdf-dialog img.pdf-page-full")
        expect(dialog).to_contain_text("第 1 页，共 3 页")
        screenshot(guest.page, "pdf-preview-dialog-600")
        guest.page.keyboard.press("Escape")
        expect(dialog).to_have_count(0)

        # "Open": the PDF in a tab of its own, never opened by (nor able to reach) this page.
        link = card.get_by_role("link", name="打开")
        assert link.get_attribute("target") == "_blank"
        assert link.get_attribute("rel") == "noopener noreferrer"
        with owner.context.expect_page() as opened:
            owner.page.locator(".msg .attach-pdf").get_by_role("link", name="打开").click()
        tab = opened.value
        try:
            tab.wait_for_load_state()
            assert tab.url.endswith("/view/%E5%AD%A3%E5%BA%A6%E6%8A%A5%E5%91%8A.pdf")
            assert tab.evaluate("() => window.opener") is None
            # Chromium's viewer draws it under "default-src 'none'; frame-ancestors 'none';
            # sandbox": the report's blue title bar comes on the screen.
            assert viewer_drew(tab), "the PDF viewer drew nothing"
            ARTIFACTS.mkdir(exist_ok=True)
            tab.screenshot(path=str(ARTIFACTS / "pdf-view-tab.png"))
        finally:
            tab.close()
        owner.assert_clean()
        guest.assert_clean()
        english.assert_clean()
    finally:
        guest.close()
        english.close()
