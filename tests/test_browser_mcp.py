"""An external coding agent over MCP (issue 31) is shown like any agent: its messages under its
name, its tool calls as tool activity (✓ and ✗), live in a person's page."""

# The fixtures chromium, room_server and owner are imported from tests/support/browser.py and
# used as test arguments, which linters read as unused imports redefined.
# ruff: noqa: F401, F811

from __future__ import annotations

import asyncio
import threading
from typing import Any

import httpx2
import pytest
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from playwright.sync_api import Browser, expect

from tests.support.browser import Person, RoomServer, chromium, owner, room_server, screenshot

pytestmark = pytest.mark.browser


async def _as_the_agent(origin: str, token: str, calls: list[tuple[str, dict[str, Any]]]) -> None:
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}) as http,
        streamable_http_client(f"{origin}/mcp", http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        for name, args in calls:
            await session.call_tool(name, args)


def run_agent(origin: str, token: str, calls: list[tuple[str, dict[str, Any]]]) -> None:
    """The SDK's client in a thread of its own (Playwright's sync API holds this thread's loop)."""
    failures: list[BaseException] = []

    def main() -> None:
        try:
            asyncio.run(_as_the_agent(origin, token, calls))
        except BaseException as exc:  # reported to the test below
            failures.append(exc)

    thread = threading.Thread(target=main)
    thread.start()
    thread.join(timeout=30)
    assert not thread.is_alive() and failures == [], failures


def test_an_mcp_members_messages_and_tool_activity_show_like_any_agents(
    chromium: Browser, room_server: RoomServer, owner: Person
) -> None:
    project = room_server.create_project("MCP 接入")
    room_server.post(
        f"/api/projects/{project}/members",
        {"role": "backend", "handle": "coder", "display_name": "外部编码", "driver": "external"},
        201,
    )
    token = room_server.server.agent_token("MCP 接入", "coder")
    owner.open_project(project)
    run_agent(
        room_server.origin,
        token,
        [
            ("room_send", {"text": "接口已经写好，@owner 请过目"}),
            ("shell", {"command": "rm -rf /"}),  # not granted over MCP: refused, shown ✗
        ],
    )
    page = owner.page
    said = page.locator(".msg", has_text="接口已经写好")
    expect(said).to_be_visible()
    expect(said.locator(".author")).to_have_text("外部编码")
    expect(said.locator(".mention.mention-me")).to_have_text("@owner")
    # Two tool steps in a row fold into one line: who, how many, and that one failed.
    run = page.locator("#timeline > details.tool-run")
    expect(run).to_have_count(1)
    head = run.locator(":scope > summary")
    expect(head.locator(".tool-who")).to_have_text("外部编码")
    expect(head).to_contain_text("连续 2 次工具活动")
    expect(head.locator(".badge-warn")).to_be_visible()
    tools = run.locator(".tool-run-body > details.tool")
    expect(tools).to_have_count(2)
    expect(tools.first).to_be_hidden()
    head.click()
    sent, refused = tools.nth(0), tools.nth(1)
    expect(sent.locator(".tool-who")).to_have_text("外部编码")
    expect(sent.locator(".tool-call[data-name=room_send] .call-ok")).to_have_text("✓")
    expect(refused.locator(".badge-warn")).to_be_visible()
    refused.locator(":scope > summary").click()
    expect(refused.locator(".tool-call[data-name=shell] .call-ok")).to_have_text("✗")
    screenshot(page, "mcp-member-activity")
