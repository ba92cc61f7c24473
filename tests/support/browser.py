"""Real headless Chromium (Debian's ``/usr/bin/chromium``) driven by Playwright against a real
server: one browser and one server per test module, a fresh context per person. Test modules
import the fixtures ``chromium``, ``room_server`` and ``owner`` from here.

People sign in the way they do by hand: the owner opens a one-time login link and clicks
登录; a second person opens an invite link, fills in a handle and a name and clicks 加入.
Every page records console errors and uncaught exceptions (a CSP violation is a console error),
and :meth:`Person.assert_clean` fails the test if any appeared.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import (
    Browser,
    BrowserContext,
    ConsoleMessage,
    Page,
    Route,
    expect,
    sync_playwright,
)

from tests.support.inproc import wait_until
from tests.support.server import ServerProcess, Session

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = ROOT / "test-artifacts"
LAUNCH_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]
# An expectation's and an action's wait. Generous: CI runs the whole suite on 2 loaded cores,
# where a form post and the page it leads to once took more than 8 s (a test that passes waits
# only as long as the page needs).
EXPECT_TIMEOUT_MS = 15_000
# What the server does in the background (an agent's turn, a read cursor stored): waited for,
# never assumed done after a fixed pause; generous, as a whole-suite run is slow.
SERVER_WAIT_SECS = 30.0
EXTERNAL_ROUTE_REASON = "browser test"

expect.set_options(timeout=EXPECT_TIMEOUT_MS)


# Module scope: test modules import these fixtures, which makes each module's copy a fixture of
# its own; two sync Playwright instances cannot run at once, so each module starts and stops one.
@pytest.fixture(scope="module")
def chromium() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        pytest.skip(
            "Debian's chromium is not installed at /usr/bin/chromium (apt-get install chromium)"
        )
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=LAUNCH_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@dataclass
class Person:
    """A signed-in browser context with its page, and what the page reported."""

    context: BrowserContext
    page: Page
    handle: str
    errors: list[str] = field(default_factory=list)
    # Console errors a test provokes on purpose (a refused request logs "Failed to load resource").
    allowed: list[re.Pattern[str]] = field(default_factory=list)

    def allow(self, pattern: str) -> None:
        self.allowed.append(re.compile(pattern))

    def assert_clean(self) -> None:
        unexpected = [e for e in self.errors if not any(p.search(e) for p in self.allowed)]
        assert unexpected == [], unexpected

    def close(self) -> None:
        self.context.close()

    def open_project(self, project_id: int) -> None:
        self.page.evaluate("id => { location.hash = `#/p/${id}`; }", project_id)
        expect(
            self.page.locator(f'.project-link[data-project-id="{project_id}"]')
        ).to_have_attribute("aria-current", "page")
        expect(self.page.locator("#conn-state")).to_have_attribute("data-status", "open")
        expect(self.page.locator(".timeline-loading")).to_have_count(0)


class RoomServer:
    """A running server with its owner signed in over HTTP (for arranging test data)."""

    def __init__(self, server: ServerProcess) -> None:
        self.server = server
        self.owner: Session = server.login()
        self._invited: dict[tuple[int, str], Session] = {}

    @property
    def origin(self) -> str:
        return self.server.origin

    # -- HTTP helpers (as the owner unless another session is given) -----------------------------

    def get(self, path: str, session: Session | None = None) -> Any:
        return self.server.get_json(path, cookie=(session or self.owner).cookie)

    def post(
        self, path: str, body: Any, expect_status: int = 200, session: Session | None = None
    ) -> Any:
        status, data = self.server.request(
            "POST", path, body, headers=(session or self.owner).headers
        )
        assert status == expect_status, (status, data)
        return data

    def create_project(
        self,
        name: str,
        agents: list[dict[str, Any]] | None = None,
        goal: str = "",
        workspace: Path | None = None,
    ) -> int:
        """A project of its own per test, so tests sharing a server never see each other."""
        body: dict[str, Any] = {"name": name, "goal": goal, "agents": agents or []}
        if workspace is not None:
            body["workspace"] = str(workspace)
        data = self.post("/api/projects", body, 201)
        return int(data["project"]["id"])

    def members(self, project_id: int) -> dict[str, dict[str, Any]]:
        return {m["handle"]: m for m in self.get(f"/api/projects/{project_id}")["members"]}

    def say(
        self, project_id: int, body: str, session: Session | None = None, **extra: Any
    ) -> dict[str, Any]:
        payload = {"body": body, "client_txn_id": uuid.uuid4().hex, **extra}
        return self.post(f"/api/projects/{project_id}/messages", payload, 201, session)

    def messages(self, project_id: int) -> list[dict[str, Any]]:
        return self.get(f"/api/projects/{project_id}/messages?limit=200")["messages"]

    def wait_read(self, project_id: int, timeout: float = SERVER_WAIT_SECS) -> None:
        """Until the server has the owner's read cursor past every message by others in the
        project (``unread`` 0 in /api/me): what a page sends once it shows the latest (over
        its socket, throttled), stored. A reload before that shows the 新消息 divider again."""

        def read() -> bool:
            projects = self.get("/api/me")["projects"]
            return any(p["id"] == project_id and p["unread"] == 0 for p in projects)

        wait_until(read, timeout)

    def invite_session(self, project_id: int, handle: str, name: str) -> Session:
        """A second person joined over HTTP (for data they post); see :func:`join` for a browser."""
        key = (project_id, handle)
        if key not in self._invited:
            self._invited[key] = self.server.invite(self.owner, project_id, handle, name)
        return self._invited[key]

    def invite_url(self, project_id: int) -> str:
        data = self.post(f"/api/projects/{project_id}/invites", {"role": "member"}, 201)
        return str(data["url"])


@pytest.fixture(scope="module")
def room_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RoomServer]:
    # The tests' workspaces are in their own tmp_path, outside the default roots
    # (<data>/workspaces): the operator's setting allows the session's temporary folder.
    roots = {"ROOM_WORKSPACE_ROOTS": str(tmp_path_factory.getbasetemp())}
    server = ServerProcess(tmp_path_factory.mktemp("room") / "data", env=roots).start()
    try:
        yield RoomServer(server)
    finally:
        server.stop()


def new_person(
    chromium: Browser,
    server: RoomServer,
    *,
    handle: str = "owner",
    width: int = 1440,
    height: int = 900,
    color_scheme: str = "light",
    setup: Callable[[Page], Any] | None = None,
    locale: str = "zh-CN",
    **context_options: Any,
) -> tuple[BrowserContext, Page, list[str]]:
    context = chromium.new_context(
        viewport={"width": width, "height": height},
        color_scheme=color_scheme,  # type: ignore[arg-type]
        locale=locale,  # the browser's language: Accept-Language and navigator.languages
        timezone_id="Asia/Shanghai",
        **context_options,
    )
    context.set_default_timeout(EXPECT_TIMEOUT_MS)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(f"pageerror: {exc}"))

    def console_error(msg: ConsoleMessage) -> None:
        if msg.type == "error":
            errors.append(f"console: {msg.text} @ {msg.location.get('url', '')}")

    page.on("console", console_error)
    if setup is not None:
        setup(page)  # routes and scripts that must be in place before the page loads
    return context, page, errors


def sign_in_owner(chromium: Browser, server: RoomServer, **options: Any) -> Person:
    """The owner opens a fresh one-time login link and clicks 登录."""
    context, page, errors = new_person(chromium, server, **options)
    page.goto(f"{server.origin}/login/{server.server.fresh_login_secret()}")
    page.get_by_role("button", name=re.compile("登录")).click()
    expect(page.locator("#app")).to_be_visible()
    # "load" waits for the stylesheets too: a test that reads computed styles next would
    # otherwise race them.
    page.wait_for_load_state("load")
    return Person(context, page, "owner", errors)


def join(
    chromium: Browser, server: RoomServer, project_id: int, handle: str, name: str, **options: Any
) -> Person:
    """A second person opens an invite link, fills in a handle and a name and clicks 加入."""
    url = server.invite_url(project_id)
    context, page, errors = new_person(chromium, server, handle=handle, **options)
    page.goto(url)
    page.locator("input[name=handle]").fill(handle)
    page.locator("input[name=display_name]").fill(name)
    page.get_by_role("button", name=re.compile("加入")).click()
    expect(page.locator("#app")).to_be_visible()
    page.wait_for_load_state("load")  # the stylesheets too (see sign_in_owner)
    return Person(context, page, handle, errors)


def screenshot(page: Page, name: str) -> Path:
    """Save a full-viewport screenshot to test-artifacts/ (look at it: overflow is a bug)."""
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    settle(page)
    page.screenshot(path=str(path))
    return path


def settle(page: Page) -> None:
    """Wait until no CSS transition or animation is running (drawers slide in)."""
    page.wait_for_function("() => document.getAnimations().every((a) => a.playState !== 'running')")


def fulfill_json(route: Route, data: Any, status: int = 200) -> None:
    route.fulfill(
        status=status, content_type="application/json", body=json.dumps(data, ensure_ascii=False)
    )


@pytest.fixture
def owner(chromium: Browser, room_server: RoomServer) -> Iterator[Person]:
    """The project owner, signed in at 1440×900; the test fails if the page logged errors."""
    person = sign_in_owner(chromium, room_server)
    try:
        yield person
        person.assert_clean()
    finally:
        person.close()


LAYOUT_PROBLEMS_JS = r"""
() => {
  const problems = [];
  const root = document.documentElement;
  if (root.scrollWidth > innerWidth + 1) problems.push(`page scrolls sideways: ${root.scrollWidth} > ${innerWidth}`);
  const cjk = /[\u3400-\u9fff\uff00-\uffef]/;
  const clipOf = (el) => {
    for (let p = el.parentElement; p; p = p.parentElement) {
      const s = getComputedStyle(p);
      if (s.overflowX !== "visible" || p === document.body) return p;
    }
    return document.body;
  };
  for (const el of document.querySelectorAll("body *")) {
    const own = [...el.childNodes].some((n) => n.nodeType === 3 && cjk.test(n.data));
    if (!own || !el.checkVisibility({ visibilityProperty: true, opacityProperty: true })) continue;
    const r = el.getBoundingClientRect();
    if (r.width <= 1 || r.height <= 1) continue; // visually hidden, for screen readers only
    const s = getComputedStyle(el);
    const name = `${el.tagName.toLowerCase()}.${[...el.classList].join(".")} "${el.textContent.trim().slice(0, 24)}"`;
    if (s.textOverflow === "ellipsis" && el.scrollWidth > el.clientWidth) problems.push(`ellipsis cuts ${name}`);
    if (s.overflowX === "hidden" && el.scrollWidth > el.clientWidth + 1) problems.push(`clipped ${name}`);
    const clip = clipOf(el);
    const cs = getComputedStyle(clip);
    if (cs.overflowX === "auto" || cs.overflowX === "scroll") continue; // the reader can scroll it
    const c = clip === document.body ? { left: 0, right: innerWidth } : clip.getBoundingClientRect();
    if (r.width && (r.right > c.right + 1 || r.left < c.left - 1)) problems.push(`sticks out ${name}: ${Math.round(r.left)}–${Math.round(r.right)} outside ${Math.round(c.left)}–${Math.round(c.right)}`);
  }
  return problems;
}
"""


def layout_problems(page: Page) -> list[str]:
    """Sideways scrolling, Chinese text cut by an ellipsis or clipped, or sticking out."""
    return list(page.evaluate(LAYOUT_PROBLEMS_JS))
