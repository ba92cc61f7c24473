"""What was deleted or edited stays private (issue 14, item 6), and quotes read as plain words
(item 8): over a real server and real WebSocket clients."""

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
    ack = await client.wait_for(lambda f: f["type"] == "ack" and f["client_txn_id"] == txn)
    return int(ack["message_id"])


async def change(client: Client, frame: dict[str, Any]) -> None:
    await client.send({**frame, "req_id": "c"})
    answer = await client.wait_for(lambda f: f.get("req_id") == "c")
    assert answer["type"] == "ack", answer


def quiet_project(server: ServerProcess, cookie: str) -> int:
    """The demo project with its echo lead paused (it would answer every message)."""
    headers = {"Cookie": f"room_session={cookie}"}
    project = int(server.get_json("/api/me", cookie=cookie)["projects"][0]["id"])
    members = server.get_json(f"/api/projects/{project}", cookie=cookie)["members"]
    lead = next(m["id"] for m in members if m["handle"] == "lead")
    me = server.get_json("/api/me", cookie=cookie)
    status, _ = server.request(
        "POST",
        f"/api/projects/{project}/members/{lead}/pause",
        {},
        headers={**headers, "X-CSRF-Token": me["csrf_token"]},
    )
    assert status == 200
    return project


async def test_a_deleted_message_leaves_its_text_nowhere(server: ServerProcess) -> None:
    owner = server.login()
    project = quiet_project(server, owner.cookie)
    author = server.invite(owner, project, "wang", "小王")
    reader = server.invite(owner, project, "li", "小李")
    ca = await subscribed(server, author.cookie, project)
    cr = await subscribed(server, reader.cookie, project)
    secret = await send(ca, project, "第一版 机密甲")
    reply = await send(cr, project, "收到", reply_to=secret)
    await change(
        ca, {"type": "edit", "project_id": project, "message_id": secret, "body": "第二版 机密乙"}
    )
    quoted = await cr.wait_for(lambda f: f["type"] == "message_updated")
    assert quoted["message"]["body"] == "第二版 机密乙"
    await change(ca, {"type": "delete", "project_id": project, "message_id": secret})
    gone = await cr.wait_for(lambda f: f["type"] == "message_updated" and f["message"]["deleted"])
    assert gone["message"]["id"] == secret and gone["message"]["body"] == ""

    # A new page (reload): the reply's quote says the message was deleted, with no text.
    fresh = await subscribed(server, reader.cookie, project)
    await fresh.send({"type": "history", "project_id": project, "limit": 50, "req_id": "h"})
    page = await fresh.wait_for("history")
    by_id = {m["id"]: m for m in page["messages"]}
    assert by_id[reply]["reply_excerpt"] == {
        "author_id": by_id[secret]["author_id"],
        "seq": by_id[secret]["seq"],
        "excerpt": "",
        "deleted": True,
    }
    # A resume from before it all replays no earlier version either.
    resumed = await subscribed(server, reader.cookie, project, since=0)
    await resumed.send({"type": "ping", "req_id": "p"})
    await resumed.wait_for("pong")
    for raw in [
        json.dumps(page, ensure_ascii=False),
        json.dumps(resumed.frames, ensure_ascii=False),
    ]:
        assert "机密" not in raw
    replayed = [f for f in resumed.frames if f.get("type") == "message_updated"]
    # The reply's thread count on the root, the edit, the delete: each replays the current object.
    assert len(replayed) == 3 and all(f["message"]["deleted"] for f in replayed)
    # Nor does the HTTP history.
    listed = server.get_json(f"/api/projects/{project}/messages", cookie=reader.cookie)
    assert "机密" not in json.dumps(listed, ensure_ascii=False)
    # The reader sees that it was edited and deleted, not what it said.
    detail = server.get_json(f"/api/messages/{secret}", cookie=reader.cookie)
    assert [e["action"] for e in detail["edits"]] == ["edit", "delete"]
    assert "机密" not in json.dumps(detail, ensure_ascii=False)


async def test_earlier_versions_are_for_the_author_and_owners(server: ServerProcess) -> None:
    owner = server.login()
    project = quiet_project(server, owner.cookie)
    author = server.invite(owner, project, "wang", "小王")
    other = server.invite(owner, project, "li", "小李")
    ca = await subscribed(server, author.cookie, project)
    message = await send(ca, project, "原来的话")
    await change(
        ca, {"type": "edit", "project_id": project, "message_id": message, "body": "新的话"}
    )

    def edits(cookie: str) -> list[dict[str, Any]]:
        return list(server.get_json(f"/api/messages/{message}", cookie=cookie)["edits"])

    assert [e.get("body") for e in edits(author.cookie)] == ["原来的话"]
    assert [e.get("body") for e in edits(owner.cookie)] == ["原来的话"]
    seen_by_other = edits(other.cookie)
    assert [e["action"] for e in seen_by_other] == ["edit"]
    assert "body" not in seen_by_other[0]


async def test_an_edit_changes_the_quote_of_its_replies(server: ServerProcess) -> None:
    owner = server.login()
    project = quiet_project(server, owner.cookie)
    c = await subscribed(server, owner.cookie, project)
    first = await send(c, project, "旧说法")
    reply = await send(c, project, "好", reply_to=first)
    await change(c, {"type": "edit", "project_id": project, "message_id": first, "body": "新说法"})
    await c.send({"type": "history", "project_id": project, "limit": 50, "req_id": "h"})
    page = await c.wait_for("history")
    quote = next(m for m in page["messages"] if m["id"] == reply)["reply_excerpt"]
    assert quote["excerpt"] == "新说法"


async def test_a_quote_is_plain_words(server: ServerProcess) -> None:
    owner = server.login()
    project = quiet_project(server, owner.cookie)
    c = await subscribed(server, owner.cookie, project)
    first = await send(c, project, "> 引用的话\n\n**加粗** 和 `代码` <b>x</b>")
    reply = await send(c, project, "回复", reply_to=first)
    live = next(m for m in c.messages() if m["message"]["id"] == reply)
    assert live["message"]["reply_excerpt"]["excerpt"] == "引用的话 加粗 和 代码 <b>x</b>"


async def test_the_migration_forgets_what_earlier_versions_kept(
    server: ServerProcess, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A database written before 0011_message_privacy kept each edit's text in its
    message_updated event and a deleted message's text in its replies' quotes: migrating
    clears both."""
    owner = server.login()
    project = quiet_project(server, owner.cookie)
    c = await subscribed(server, owner.cookie, project)
    first = await send(c, project, "旧的机密")
    reply = await send(c, project, "回复", reply_to=first)
    await change(
        c, {"type": "edit", "project_id": project, "message_id": first, "body": "新的机密"}
    )
    await change(c, {"type": "delete", "project_id": project, "message_id": first})
    await c.close()
    server.stop()

    path = server.data / "room.sqlite"
    conn = sqlite3.connect(path, isolation_level=None)
    # As the code before it wrote them: the text in the update events and in the reply's quote.
    conn.execute(
        "UPDATE events SET frame = :f WHERE kind = 'message_updated' AND message_id = :m",
        {"f": '{"type":"message_updated","message":{"body":"新的机密"}}', "m": first},
    )
    frame = json.loads(
        conn.execute("SELECT frame FROM messages WHERE id = ?", (reply,)).fetchone()[0]
    )
    frame["reply_excerpt"] = {"author_id": frame["author_id"], "seq": 1, "excerpt": "旧的机密"}
    conn.execute(
        "UPDATE messages SET frame = ? WHERE id = ?",
        (json.dumps(frame, ensure_ascii=False, separators=(",", ":")), reply),
    )
    conn.execute("DROP INDEX messages_reply_to")
    index = [m.name for m in MIGRATIONS].index("0011_message_privacy")
    conn.execute(f"PRAGMA user_version = {index}")
    # Only this migration runs again (the later ones are in the schema already).
    monkeypatch.setattr("room.store.migrate.MIGRATIONS", MIGRATIONS[: index + 1])
    monkeypatch.setattr("room.store.migrate.SCHEMA_VERSION", index + 1)

    assert "0011_message_privacy" in migrate(conn, path, now=time.time())
    rows = conn.execute("SELECT frame FROM events WHERE frame IS NOT NULL").fetchall()
    assert not any("机密" in str(r[0]) for r in rows)
    migrated = json.loads(
        conn.execute("SELECT frame FROM messages WHERE id = ?", (reply,)).fetchone()[0]
    )
    assert migrated["reply_excerpt"] == {
        "author_id": frame["author_id"],
        "seq": 1,
        "excerpt": "",
        "deleted": True,
    }
    assert list(migrated) == list(frame)  # the key order of the wire object is kept
    conn.close()
