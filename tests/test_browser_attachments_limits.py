"""An upload past the rate limit in real Chromium (issue 17, item 1): the tray says so on the file,
in the page's language, with the wait the server gave (429 ``rate_limited``)."""

# The fixtures chromium and owner are imported from tests/support/browser.py and used as test
# arguments, which linters read as unused imports redefined.
# ruff: noqa: F401, F811

from __future__ import annotations

import base64
import re
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, expect

from tests.support.browser import Person, RoomServer, chromium, owner
from tests.support.server import ServerProcess

pytestmark = pytest.mark.browser

DROP_JS = """
([b64, name]) => {
  const bytes = Uint8Array.from(atob(b64), (c) => c.charCodeAt(0));
  const data = new DataTransfer();
  data.items.add(new File([bytes], name, { type: "text/plain" }));
  const form = document.querySelector("#composer");
  for (const kind of ["dragenter", "dragover", "drop"]) {
    form.dispatchEvent(new DragEvent(kind, { dataTransfer: data, bubbles: true, cancelable: true }));
  }
}
"""


@pytest.fixture(scope="module")
def room_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RoomServer]:
    # One upload at once, and the next one only after about an hour.
    env = {"ROOM_ATTACHMENT_BURST": "1", "ROOM_ATTACHMENT_RATE_PER_MIN": "0.0167"}
    server = ServerProcess(tmp_path_factory.mktemp("room") / "data", env=env).start()
    try:
        yield RoomServer(server)
    finally:
        server.stop()


def test_an_upload_past_the_rate_limit_says_so_on_the_file(
    chromium: Browser, owner: Person, room_server: RoomServer
) -> None:
    project = room_server.create_project("限速")
    owner.open_project(project)
    page = owner.page
    owner.allow("status of 429")  # the refused upload, as Chromium logs it
    tray = page.locator(".attach-tray")
    page.evaluate(DROP_JS, [base64.b64encode(b"first").decode(), "一.txt"])
    expect(tray.locator(".attach-item:not(.is-uploading):not(.is-error)")).to_have_count(1)
    page.evaluate(DROP_JS, [base64.b64encode(b"second").decode(), "二.txt"])
    refused = tray.locator(".attach-item.is-error")
    expect(refused).to_have_count(1)
    expect(refused).to_contain_text("二.txt")
    expect(refused.locator(".attach-state")).to_have_text(
        # About an hour to wait (a token per 60 / 0.0167 s), in whole seconds.
        re.compile(r"^上传太频繁，请 3\d{3} 秒后再试这个文件$")
    )
