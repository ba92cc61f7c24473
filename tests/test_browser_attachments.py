"""Attachments in real Chromium (issue 17, item 1): an image pasted from the clipboard and a PDF
dropped on the composer upload, can be removed before sending, and arrive in a second person's
tab — the image as a thumbnail that opens full-size, the PDF as a card — and both survive a
server restart."""

# The fixtures chromium, room_server and owner are imported from tests/support/browser.py and
# used as test arguments, which linters read as unused imports redefined.
# ruff: noqa: F401, F811

from __future__ import annotations

import base64
import io

import pytest
from PIL import Image
from playwright.sync_api import Browser, FilePayload, Page, expect

from tests.support.browser import (
    Person,
    RoomServer,
    chromium,
    join,
    layout_problems,
    owner,
    room_server,
    screenshot,
)

pytestmark = pytest.mark.browser

PDF = b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n1 0 obj\n<< /Type /Catalog >>\nendobj\ntrailer\n<<>>\n%%EOF\n"

PASTE_JS = """
([b64, name, type]) => {
  const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
  const data = new DataTransfer();
  data.items.add(new File([bytes], name, { type }));
  const event = new ClipboardEvent("paste", { clipboardData: data, bubbles: true, cancelable: true });
  document.querySelector("#draft").dispatchEvent(event);
  return event.defaultPrevented;
}
"""

DROP_JS = """
([b64, name, type]) => {
  const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
  const data = new DataTransfer();
  data.items.add(new File([bytes], name, { type }));
  const form = document.querySelector("#composer");
  for (const kind of ["dragenter", "dragover", "drop"]) {
    form.dispatchEvent(new DragEvent(kind, { dataTransfer: data, bubbles: true, cancelable: true }));
  }
}
"""


def picture() -> bytes:
    im = Image.new("RGB", (320, 200), "#2457d6")
    for x in range(0, 320, 40):
        for y in range(0, 200, 40):
            if (x + y) // 40 % 2:
                im.paste((250, 200, 40), (x, y, x + 40, y + 40))
    out = io.BytesIO()
    im.save(out, "PNG")
    return out.getvalue()


def b64(content: bytes) -> str:
    return base64.b64encode(content).decode()


def loaded(page: Page, selector: str) -> bool:
    return bool(
        page.evaluate(
            "sel => { const i = document.querySelector(sel); return !!i && i.complete && i.naturalWidth > 0; }",
            selector,
        )
    )


def test_pasted_image_and_dropped_pdf_reach_another_tab_and_survive_a_restart(
    chromium: Browser, owner: Person, room_server: RoomServer
) -> None:
    project = room_server.create_project("附件")
    # The second person reads on a narrow screen in the dark theme.
    guest = join(
        chromium, room_server, project, "guest", "访客", width=600, height=900, color_scheme="dark"
    )
    try:
        owner.open_project(project)
        guest.open_project(project)
        page = owner.page
        # A screenshot pasted from the clipboard: the file is taken, not its name as text.
        assert page.evaluate(PASTE_JS, [b64(picture()), "image.png", "image/png"]) is True
        tray = page.locator(".attach-tray")
        expect(tray.locator(".attach-item:not(.is-uploading) img.attach-thumb")).to_have_count(1)
        # Picked with the attach button.
        with page.expect_file_chooser() as chooser:
            page.get_by_role("button", name="添加附件（也可粘贴或拖入）").click()
        listing: FilePayload = {
            "name": "清单.txt",
            "mimeType": "text/plain",
            "buffer": "一、二、三".encode(),
        }
        chooser.value.set_files(files=[listing])
        expect(tray.locator(".attach-item")).to_have_count(2)
        # Dropped, then removed before sending: it leaves the tray and the message.
        page.evaluate(DROP_JS, [b64(b"scratch notes"), "草稿.txt", "text/plain"])
        expect(tray.locator(".attach-item")).to_have_count(3)
        tray.get_by_role("button", name="移除 草稿.txt").click()
        expect(tray.locator(".attach-item")).to_have_count(2)
        page.evaluate(DROP_JS, [b64(PDF), "季度报告.pdf", "application/pdf"])
        expect(tray.locator(".attach-item:not(.is-uploading)")).to_have_count(3)
        expect(page.locator("#draft")).to_have_value("")
        page.locator("#draft").fill("截图和报告")
        screenshot(page, "attachments-tray-1440")
        page.locator("#draft").press("Enter")
        expect(tray).to_be_hidden()

        message = guest.page.locator(".msg", has_text="截图和报告")
        expect(message.locator(".attach-image img")).to_have_count(1)
        expect(message.locator(".attach-card")).to_have_count(2)
        expect(message.locator(".attach-card").first).to_contain_text("清单.txt")
        expect(message.locator(".attach-card").last).to_contain_text("季度报告.pdf")
        expect(message.locator(".attach-card").last).to_contain_text("PDF")
        guest.page.wait_for_function(
            "() => { const i = document.querySelector('.msg .attach-image img');"
            " return i && i.complete && i.naturalWidth > 0; }"
        )
        assert "草稿.txt" not in message.inner_text()
        screenshot(guest.page, "attachments-guest-600-dark")
        assert layout_problems(guest.page) == []
        # Full size on click.
        message.locator(".attach-image").click()
        expect(guest.page.locator("dialog.image-dialog img.image-full")).to_be_visible()
        guest.page.wait_for_function(
            "() => document.querySelector('img.image-full').naturalWidth === 320"
        )
        screenshot(guest.page, "attachments-full-size")
        guest.page.keyboard.press("Escape")

        # A restart: the files are on disk, the rows in the database. Both pages see the
        # server go away meanwhile (refused connections, on purpose).
        for person in (owner, guest):
            person.allow("ERR_CONNECTION_REFUSED")
        room_server.server.stop()
        room_server.server.start()
        guest.page.reload()
        guest.open_project(project)
        message = guest.page.locator(".msg", has_text="截图和报告")
        expect(message.locator(".attach-image img")).to_have_count(1)
        guest.page.wait_for_function(
            "() => { const i = document.querySelector('.msg .attach-image img');"
            " return i && i.complete && i.naturalWidth > 0; }"
        )
        href = message.locator(".attach-card").last.get_attribute("href")
        status = guest.page.evaluate(
            "async url => { const r = await fetch(url); return [r.status, (await r.text()).slice(0, 8)]; }",
            href,
        )
        assert status == [200, "%PDF-1.4"]
        guest.assert_clean()
    finally:
        guest.close()
