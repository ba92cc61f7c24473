"""Unread counts pushed over the socket, mentions of you counted apart (issue 14, item 12): over a
real server and real WebSocket clients."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tests.support.server import ServerProcess
from tests.support.wsclient import Client, Frame

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("clients")]


def unread_of(client: Client, project: int, unread: int, mentions: int) -> Any:
    return lambda f: (
        f["type"] == "unread"
        and f["project_id"] == project
        and (f["unread"], f["mentions"]) == (unread, mentions)
    )


async def test_other_projects_counts_arrive_by_themselves(server: ServerProcess) -> None:
    owner = server.login()
    me = server.get_json("/api/me", cookie=owner.cookie)
    watched = int(me["projects"][0]["id"])
    status, created = server.request(
        "POST", "/api/projects", {"name": "另一个项目", "agents": []}, headers=owner.headers
    )
    assert status == 201, created
    other = int(created["project"]["id"])
    bob = server.invite(owner, other, "bob", "王小明")

    # The owner's page watches the demo project only.
    page = await Client.open(server.ws_url, cookie=owner.cookie, origin=server.origin)
    await page.wait_for("hello")
    await page.send({"type": "subscribe", "project_id": watched})
    await page.wait_for("subscribed")

    def say(body: str) -> int:
        status, data = server.request(
            "POST",
            f"/api/projects/{other}/messages",
            {"body": body, "client_txn_id": uuid.uuid4().hex},
            headers=bob.headers,
        )
        assert status == 201, data
        return int(data["seq"])

    say("@owner 请看一下")
    await page.wait_for(unread_of(page, other, 1, 1))
    seq = say("顺便说一句")
    await page.wait_for(unread_of(page, other, 2, 1))
    listed = server.get_json("/api/me", cookie=owner.cookie)["projects"]
    counts = {p["id"]: (p["unread"], p["mentions"]) for p in listed}
    assert counts[other] == (2, 1)

    # Read in another tab: this page hears the counts go to zero.
    tab = await Client.open(server.ws_url, cookie=owner.cookie, origin=server.origin)
    await tab.wait_for("hello")
    await tab.send({"type": "read", "project_id": other, "seq": seq})
    frame: Frame = await page.wait_for(unread_of(page, other, 0, 0))
    assert frame["project_id"] == other
