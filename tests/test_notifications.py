"""Notifications (issue 30 item 6) over a real server: a person's level per project (all /
mentions / none) in /api/me and set by PUT; followed-thread replies count like mentions in the
unread counts; the inbox lists a person's unread mentions and followed-thread replies across
their projects, newest first, and forgets what they read."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tests.support.live_room import eventually
from tests.support.server import ServerProcess
from tests.support.wsclient import Client, subscribed

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("clients")]


async def send(client: Client, project: int, body: str, **extra: Any) -> int:
    txn = uuid.uuid4().hex
    await client.send(
        {"type": "send", "project_id": project, "client_txn_id": txn, "body": body, **extra}
    )
    ack = await client.wait_for(lambda f: f.get("client_txn_id") == txn)
    assert ack["type"] == "ack", ack
    return int(ack["message_id"])


def headers_of(server: ServerProcess, cookie: str) -> dict[str, str]:
    me = server.get_json("/api/me", cookie=cookie)
    return {"Cookie": f"room_session={cookie}", "X-CSRF-Token": me["csrf_token"]}


def quiet(server: ServerProcess, cookie: str, project: int) -> None:
    members = server.get_json(f"/api/projects/{project}", cookie=cookie)["members"]
    lead = next(m["id"] for m in members if m["handle"] == "lead")
    status, _ = server.request(
        "POST",
        f"/api/projects/{project}/members/{lead}/pause",
        {},
        headers=headers_of(server, cookie),
    )
    assert status == 200


def project_entry(server: ServerProcess, cookie: str, project: int) -> dict[str, Any]:
    me = server.get_json("/api/me", cookie=cookie)
    return next(p for p in me["projects"] if p["id"] == project)


async def test_levels_inbox_and_followed_threads(server: ServerProcess) -> None:
    owner = server.login()
    project = int(server.get_json("/api/me", cookie=owner.cookie)["projects"][0]["id"])
    quiet(server, owner.cookie, project)
    wang = server.invite(owner, project, "wang", "小王")
    wang_headers = headers_of(server, wang.cookie)
    assert project_entry(server, wang.cookie, project)["notify"] == "all"  # the default

    status, body = server.request(
        "PUT", f"/api/projects/{project}/notifications", {"level": "mentions"}, headers=wang_headers
    )
    assert status == 200 and body == {"project_id": project, "level": "mentions"}
    assert project_entry(server, wang.cookie, project)["notify"] == "mentions"
    assert project_entry(server, owner.cookie, project)["notify"] == "all"  # per person
    status, body = server.request(
        "PUT", f"/api/projects/{project}/notifications", {"level": "loud"}, headers=wang_headers
    )
    assert status == 400 and body["error"]["code"] == "bad_level"

    co = await subscribed(server, owner.cookie, project)
    cw = await subscribed(server, wang.cookie, project)
    root = await send(cw, project, "小王的问题")
    await send(co, project, "随便说一句")  # neither a mention nor in a followed thread
    mention = await send(co, project, "@wang 看一下这个")
    answer = await send(co, project, "回答你的问题", reply_to=root)  # wang follows his thread
    inbox = server.get_json("/api/inbox", cookie=wang.cookie)["items"]
    assert [(i["message"]["id"], i["reason"]) for i in inbox] == [
        (answer, "thread"),
        (mention, "mention"),
    ]
    assert inbox[0]["project_name"] and inbox[0]["project_id"] == project
    # The unread counts: three messages by others, two of them "mentions" (one a thread reply).
    assert (project_entry(server, wang.cookie, project)["unread"],
            project_entry(server, wang.cookie, project)["mentions"]) == (3, 2)  # fmt: skip
    assert server.get_json("/api/inbox", cookie=owner.cookie)["items"] == []

    # Unfollowed: the thread's replies leave the inbox, and the next one does not come.
    status, _ = server.request(
        "PUT", f"/api/messages/{root}/thread/follow", {"following": False}, headers=wang_headers
    )
    assert status == 200
    await send(co, project, "再补充一点", reply_to=root)
    items = server.get_json("/api/inbox", cookie=wang.cookie)["items"]
    assert [i["message"]["id"] for i in items] == [mention]

    # Read: gone from the inbox.
    head = server.get_json(f"/api/projects/{project}/messages", cookie=wang.cookie)["messages"]
    await cw.send({"type": "read", "project_id": project, "seq": head[-1]["seq"]})
    await eventually(lambda: server.get_json("/api/inbox", cookie=wang.cookie)["items"] == [])
    status, body = server.request("GET", "/api/inbox?limit=0", headers=wang_headers)
    assert status == 400 and body["error"]["code"] == "bad_query"

    # Purging the project takes its threads, follows and levels with it (they refer to its
    # messages and members).
    owner_headers = headers_of(server, owner.cookie)
    name = project_entry(server, owner.cookie, project)["name"]
    status, body = server.request(
        "POST", f"/api/projects/{project}/lifecycle", {"op": "trash"}, headers=owner_headers
    )
    assert status in (200, 202), body
    await eventually(lambda: project_entry(server, owner.cookie, project)["state"] == "trashed")
    status, body = server.request(
        "POST",
        f"/api/projects/{project}/purge",
        {"confirm_name": name, "confirmed": True},
        headers=owner_headers,
    )
    assert status == 200, body
    assert project not in {
        p["id"] for p in server.get_json("/api/me", cookie=wang.cookie)["projects"]
    }
