"""Threads (issue 30 item 2) over a real server and real sockets: a reply joins its root's
thread (a reply to a reply too), the root's count and newest reply are live and replayed, the
thread is paged, the people who start or reply in a thread follow it, following is a person's
choice, and the migration puts earlier replies in their threads."""

from __future__ import annotations

import json
import sqlite3
import time
import uuid
from typing import Any

import pytest

from room.store.migrate import migrate
from room.store.schema import MIGRATIONS
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


def quiet_project(server: ServerProcess, cookie: str) -> tuple[int, dict[str, str]]:
    """The demo project with its echo lead paused (it would answer every message)."""
    me = server.get_json("/api/me", cookie=cookie)
    headers = {"Cookie": f"room_session={cookie}", "X-CSRF-Token": me["csrf_token"]}
    project = int(me["projects"][0]["id"])
    members = server.get_json(f"/api/projects/{project}", cookie=cookie)["members"]
    lead = next(m["id"] for m in members if m["handle"] == "lead")
    status, _ = server.request(
        "POST", f"/api/projects/{project}/members/{lead}/pause", {}, headers=headers
    )
    assert status == 200
    return project, headers


async def root_update(client: Client, root: int, replies: int) -> dict[str, Any]:
    """The root's ``message_updated`` with this count, live or in a replayed batch."""

    def check(f: dict[str, Any]) -> bool:
        return (
            f.get("type") == "message_updated"
            and f["message"]["id"] == root
            and f["message"].get("thread", {}).get("replies") == replies
        )

    while True:
        for frame in client.frames:
            if check(frame):
                return dict(frame["message"])
        await client.recv()


async def test_a_thread_counts_pages_and_follows(server: ServerProcess) -> None:
    owner = server.login()
    project, owner_headers = quiet_project(server, owner.cookie)
    wang = server.invite(owner, project, "wang", "小王")
    co = await subscribed(server, owner.cookie, project)
    cw = await subscribed(server, wang.cookie, project)
    root = await send(co, project, "发布计划在这里")
    first = await send(cw, project, "我看一下", reply_to=root)
    seen = await root_update(co, root, 1)
    assert seen["thread"]["last_reply_id"] == first
    assert seen["body"] == "发布计划在这里" and seen["edited_at"] is None  # no edit
    # A reply to a reply is in the root's thread.
    second = await send(co, project, "好的", reply_to=first)
    seen = await root_update(cw, root, 2)
    assert seen["thread"]["last_reply_id"] == second

    # The history page carries the count on the root (its stored object); replies are not roots.
    page = server.get_json(f"/api/projects/{project}/messages?limit=10", cookie=wang.cookie)
    by_id = {m["id"]: m for m in page["messages"]}
    assert by_id[root]["thread"]["replies"] == 2
    assert "thread" not in by_id[first] and by_id[second]["reply_to"] == first

    # The thread, from its root or from a reply in it, oldest first; paged by message id.
    whole = server.get_json(f"/api/messages/{second}/thread", cookie=wang.cookie)
    assert whole["root_id"] == root and whole["root"]["body"] == "发布计划在这里"
    assert [m["id"] for m in whole["replies"]] == [first, second]
    assert whole["has_more"] is False and whole["following"] is True  # wang replied
    newest = server.get_json(f"/api/messages/{root}/thread?limit=1", cookie=wang.cookie)
    assert [m["id"] for m in newest["replies"]] == [second] and newest["has_more"] is True
    older = server.get_json(
        f"/api/messages/{root}/thread?limit=1&before={second}", cookie=wang.cookie
    )
    assert [m["id"] for m in older["replies"]] == [first] and older["has_more"] is False

    # The root's author follows it; an explicit unfollow is kept when someone else replies.
    assert server.get_json(f"/api/messages/{root}/thread", cookie=owner.cookie)["following"]
    status, body = server.request(
        "PUT", f"/api/messages/{first}/thread/follow", {"following": False}, headers=owner_headers
    )
    assert status == 200 and body == {"root_id": root, "following": False}
    await send(cw, project, "还有一点", reply_to=root)
    await root_update(co, root, 3)
    assert not server.get_json(f"/api/messages/{root}/thread", cookie=owner.cookie)["following"]
    # Replying again follows again.
    await send(co, project, "收到", reply_to=root)
    await root_update(cw, root, 4)
    assert server.get_json(f"/api/messages/{root}/thread", cookie=owner.cookie)["following"]

    # A deleted reply leaves the count, live; the edit of the root keeps its thread.
    co.frames.clear()
    await cw.send({"type": "delete", "project_id": project, "message_id": first, "req_id": "d"})
    await cw.wait_for(lambda f: f.get("req_id") == "d")
    await root_update(co, root, 3)
    await co.send(
        {
            "type": "edit",
            "project_id": project,
            "message_id": root,
            "body": "发布计划（改）",
            "req_id": "e",
        }
    )
    edited = await cw.wait_for(
        lambda f: f["type"] == "message_updated" and f["message"]["body"] == "发布计划（改）"
    )
    assert edited["message"]["thread"]["replies"] == 3


async def test_threads_replay_and_bad_requests(server: ServerProcess) -> None:
    owner = server.login()
    project, headers = quiet_project(server, owner.cookie)
    c = await subscribed(server, owner.cookie, project)
    root = await send(c, project, "问题")
    cursor = int(server.get_json(f"/api/projects/{project}/messages", cookie=owner.cookie)
                 ["messages"][-1]["seq"])  # fmt: skip
    await c.close()
    other = await subscribed(server, owner.cookie, project)
    await send(other, project, "回答", reply_to=root)
    resumed = await subscribed(server, owner.cookie, project, since=cursor)
    await root_update(resumed, root, 1)  # a page that was away replays the new count

    for path, code in (
        (f"/api/messages/{root}/thread?limit=0", "bad_query"),
        (f"/api/messages/{root}/thread?limit=x", "bad_query"),
        ("/api/messages/999999/thread", "no_message"),
    ):
        status, body = server.request("GET", path, headers=headers)
        assert status in (400, 404) and body["error"]["code"] == code, (path, body)
    status, body = server.request(
        "PUT", f"/api/messages/{root}/thread/follow", {"following": "maybe"}, headers=headers
    )
    assert status == 400
    # A message nobody replied to yet can be followed (and unfollowed).
    lone = await send(resumed, project, "独立消息")
    status, body = server.request(
        "PUT", f"/api/messages/{lone}/thread/follow", {"following": True}, headers=headers
    )
    assert status == 200 and body == {"root_id": lone, "following": True}
    assert server.get_json(f"/api/messages/{lone}/thread", cookie=owner.cookie)["replies"] == []


async def test_the_migration_puts_earlier_replies_in_threads(
    server: ServerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    owner = server.login()
    project, _ = quiet_project(server, owner.cookie)
    wang = server.invite(owner, project, "wang", "小王")
    co = await subscribed(server, owner.cookie, project)
    cw = await subscribed(server, wang.cookie, project)
    root = await send(co, project, "根")
    a = await send(cw, project, "一", reply_to=root)
    b = await send(co, project, "二", reply_to=a)
    gone = await send(cw, project, "三", reply_to=b)
    await cw.send({"type": "delete", "project_id": project, "message_id": gone, "req_id": "d"})
    await cw.wait_for(lambda f: f.get("req_id") == "d")
    await co.close()
    await cw.close()
    server.stop()

    path = server.data / "room.sqlite"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA foreign_keys = ON")  # as the server migrates
    before = json.loads(
        conn.execute("SELECT frame FROM messages WHERE id = ?", (root,)).fetchone()[0]
    )
    # As a database written before 0023_threads: no thread tables, no summary on the root.
    for table in ("thread_follows", "thread_replies", "threads"):
        conn.execute(f"DROP TABLE {table}")
    conn.execute("UPDATE messages SET frame = json_remove(frame, '$.thread')")
    index = [m.name for m in MIGRATIONS].index("0023_threads")
    conn.execute(f"PRAGMA user_version = {index}")
    monkeypatch.setattr("room.store.migrate.MIGRATIONS", MIGRATIONS[: index + 1])
    monkeypatch.setattr("room.store.migrate.SCHEMA_VERSION", index + 1)

    assert "0023_threads" in migrate(conn, path, now=time.time())
    after = json.loads(
        conn.execute("SELECT frame FROM messages WHERE id = ?", (root,)).fetchone()[0]
    )
    assert (
        after["thread"]
        == before["thread"]
        == {
            "replies": 2,
            "last_reply_at": after["thread"]["last_reply_at"],
            "last_reply_id": b,
        }
    )
    assert after["thread"]["last_reply_at"] == before["thread"]["last_reply_at"]
    replies = conn.execute(
        "SELECT message_id FROM thread_replies WHERE root_id = ? ORDER BY message_id", (root,)
    ).fetchall()
    assert [r[0] for r in replies] == [a, b, gone]
    followers = conn.execute(
        "SELECT count(*) FROM thread_follows WHERE root_id = ? AND following = 1", (root,)
    ).fetchone()[0]
    assert followers == 2
    conn.close()
