"""End to end over a real server and real WebSocket clients: the realtime contract of issue 2."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import sqlite3
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus

from room.cli import main as room_main
from room.client import AgentClient, Batch
from tests.support.live_room import Room, eventually
from tests.support.llm_servers import OpenAIServer
from tests.support.server import ServerProcess, start_with_openai
from tests.support.wsclient import Client, Frame
from tests.support.wsclient import subscribed as subscribed_only

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("clients")]


def demo_project(server: ServerProcess, cookie: str) -> int:
    me = server.get_json("/api/me", cookie=cookie)
    return int(me["projects"][0]["id"])


async def subscribed(server: ServerProcess, cookie: str, project_id: int, **sub: Any) -> Client:
    """Subscribed, or told to resync (a resume these tests ask for may be refused)."""
    return await subscribed_only(
        server, cookie, project_id, answers=("subscribed", "resync_required"), **sub
    )


def txn() -> str:
    return uuid.uuid4().hex


async def test_two_clients_see_each_other_live(server: ServerProcess) -> None:
    a = server.login()
    project = demo_project(server, a.cookie)
    b = server.invite(a, project, "wang", "小王")
    ca = await subscribed(server, a.cookie, project)
    cb = await subscribed(server, b.cookie, project)
    await ca.send(
        {"type": "send", "project_id": project, "client_txn_id": txn(), "body": "你好，世界"}
    )
    ack = await ca.wait_for("ack")
    got = await cb.wait_for("message")
    assert got["seq"] == ack["seq"]
    assert got["message"]["body"] == "你好，世界"
    assert got["message"]["html"] == "<p>你好，世界</p>\n"
    await ca.close()
    await cb.close()


async def test_resume_after_disconnect_has_no_gap_and_no_duplicate(server: ServerProcess) -> None:
    s = server.login()
    project = demo_project(server, s.cookie)
    pause_demo_lead(server, s, project)
    writer = await subscribed(server, s.cookie, project)
    reader = await subscribed(server, s.cookie, project, since=0)
    for i in range(5):
        await writer.send(
            {"type": "send", "project_id": project, "client_txn_id": txn(), "body": f"m{i}"}
        )
    for _ in range(5):
        await reader.wait_for("message")
    cursor = reader.messages()[-1]["seq"]
    await reader.close()
    for i in range(5, 300):
        await writer.send(
            {"type": "send", "project_id": project, "client_txn_id": txn(), "body": f"m{i}"}
        )
    # Reconnect while the stream continues.
    resumed = await subscribed(server, s.cookie, project, since=cursor)

    async def keep_sending() -> None:
        for i in range(300, 400):
            await writer.send(
                {"type": "send", "project_id": project, "client_txn_id": txn(), "body": f"m{i}"}
            )

    async with anyio.create_task_group() as tg:
        tg.start_soon(keep_sending)
        while len(resumed.messages()) < 395:
            await resumed.recv()
    seqs = [f["seq"] for f in resumed.messages()]
    assert seqs == list(range(cursor + 1, cursor + 1 + len(seqs)))
    bodies = [f["message"]["body"] for f in resumed.messages()]
    assert bodies == [f"m{i}" for i in range(5, 400)]
    writer.drop()  # its acks and messages were never read: a closing handshake would wait 10 s
    resumed.drop()


async def test_resync_required_for_bad_cursor_or_epoch(server: ServerProcess) -> None:
    s = server.login()
    project = demo_project(server, s.cookie)
    c = await subscribed(server, s.cookie, project, since=10_000)
    assert c.frames[-1]["type"] == "resync_required"
    assert c.frames[-1]["reason"] == "cursor_ahead"
    await c.send({"type": "subscribe", "project_id": project, "since": 0, "epoch": 99})
    frame = await c.wait_for("resync_required")
    assert frame["reason"] == "epoch_changed"
    assert frame["epoch"] == 1


async def test_idempotent_send_under_concurrent_retransmits(server: ServerProcess) -> None:
    s = server.login()
    project = demo_project(server, s.cookie)
    clients = [await subscribed(server, s.cookie, project) for _ in range(10)]
    txn_id = txn()
    frame = {"type": "send", "project_id": project, "client_txn_id": txn_id, "body": "once"}
    async with anyio.create_task_group() as tg:
        for c in clients:
            tg.start_soon(c.send, frame)
    acks = [await c.wait_for("ack") for c in clients]
    assert len({(a["message_id"], a["seq"]) for a in acks}) == 1
    assert sum(not a["duplicate"] for a in acks) == 1
    page = server.get_json(f"/api/projects/{project}/messages?limit=200", cookie=s.cookie)
    assert [m["body"] for m in page["messages"]].count("once") == 1
    # Same id, other body: a conflict, and nothing is stored.
    await clients[0].send({**frame, "body": "changed"})
    err = await clients[0].wait_for("error")
    assert err["code"] == "txn_conflict"
    assert err["details"]["client_txn_id"] == txn_id


def pause_demo_lead(server: ServerProcess, s: Any, project: int) -> None:
    """The demo's echo lead would answer every message in between: pause it, so the timeline
    holds exactly what a test sends."""
    members = server.get_json(f"/api/projects/{project}", cookie=s.cookie)["members"]
    lead = next(m["id"] for m in members if m["handle"] == "lead")
    status, _ = server.request(
        "POST", f"/api/projects/{project}/members/{lead}/pause", {}, headers=s.headers
    )
    assert status == 200


async def test_history_pages_edit_and_delete(server: ServerProcess) -> None:
    s = server.login()
    project = demo_project(server, s.cookie)
    pause_demo_lead(server, s, project)
    c = await subscribed(server, s.cookie, project)
    for i in range(30):
        await c.send(
            {"type": "send", "project_id": project, "client_txn_id": txn(), "body": f"h{i}"}
        )
    acks = [await c.wait_for("ack") for _ in range(30)]
    await c.send({"type": "history", "project_id": project, "limit": 20, "req_id": "p1"})
    first = await c.wait_for("history")
    assert first["req_id"] == "p1" and first["has_more"] is True
    assert [m["body"] for m in first["messages"]] == [f"h{i}" for i in range(10, 30)]
    before = first["messages"][0]["seq"]
    await c.send({"type": "history", "project_id": project, "before": before, "limit": 200})
    second = await c.wait_for("history")
    assert second["has_more"] is False
    chat = [m["body"] for m in second["messages"] if m["kind"] == "chat"]  # after the pause notice
    assert chat == [f"h{i}" for i in range(10)]

    target = acks[3]["message_id"]
    await c.send({"type": "edit", "project_id": project, "message_id": target, "body": "**改过**"})
    updated = await c.wait_for(lambda f: f["type"] in ("message_updated", "error"))
    assert updated["type"] == "message_updated", updated
    assert updated["message"]["body"] == "**改过**"
    assert updated["message"]["html"] == "<p><strong>改过</strong></p>\n"
    assert updated["message"]["edited_at"]
    detail = server.get_json(f"/api/messages/{target}", cookie=s.cookie)
    assert [e["body"] for e in detail["edits"]] == ["h3"]

    await c.send({"type": "delete", "project_id": project, "message_id": target})
    deleted = await c.wait_for(lambda f: f["type"] == "message_updated" and f["message"]["deleted"])
    assert deleted["message"]["body"] == ""

    # Another person may not edit it.
    other = server.invite(s, project, "zhang", "小张")
    oc = await subscribed(server, other.cookie, project)
    await oc.send(
        {"type": "edit", "project_id": project, "message_id": acks[4]["message_id"], "body": "x"}
    )
    err = await oc.wait_for("error")
    assert err["code"] == "not_author"


async def test_reply_to_carries_an_excerpt(server: ServerProcess) -> None:
    s = server.login()
    project = demo_project(server, s.cookie)
    c = await subscribed(server, s.cookie, project)
    await c.send({"type": "send", "project_id": project, "client_txn_id": txn(), "body": "原话"})
    ack = await c.wait_for("ack")
    await c.send(
        {
            "type": "send",
            "project_id": project,
            "client_txn_id": txn(),
            "body": "回复",
            "reply_to": ack["message_id"],
        }
    )
    reply = await c.wait_for(lambda f: f["type"] == "message" and f["message"]["body"] == "回复")
    assert reply["message"]["reply_to"] == ack["message_id"]
    assert reply["message"]["reply_excerpt"]["excerpt"] == "原话"


async def test_typing_and_read_cursor(server: ServerProcess) -> None:
    a = server.login()
    project = demo_project(server, a.cookie)
    b = server.invite(a, project, "li", "小李")
    ca = await subscribed(server, a.cookie, project)
    cb = await subscribed(server, b.cookie, project)
    await ca.send({"type": "typing", "project_id": project})
    typing = await cb.wait_for("typing")
    assert typing["active"] is True
    await ca.send({"type": "send", "project_id": project, "client_txn_id": txn(), "body": "x"})
    ack = await ca.wait_for("ack")
    await cb.send({"type": "read", "project_id": project, "seq": ack["seq"]})
    read = await ca.wait_for("read")
    assert read["seq"] == ack["seq"]


async def test_typing_and_reads_in_a_loop_are_rate_limited(server: ServerProcess) -> None:
    a = server.login()
    project = demo_project(server, a.cookie)
    b = server.invite(a, project, "chatty", "话痨")
    ca = await subscribed(server, a.cookie, project)
    cb = await subscribed(server, b.cookie, project)
    bid = next(f["you"] for f in cb.frames if f["type"] == "subscribed")
    for _ in range(60):
        await cb.send({"type": "typing", "project_id": project})
    await cb.send({"type": "send", "project_id": project, "client_txn_id": txn(), "body": "完"})
    await ca.wait_for(lambda f: f["type"] == "message" and f["message"]["body"] == "完")
    seen = [f for f in ca.frames if f["type"] == "typing"]
    # The burst (20) and what trickles in while 60 frames arrive; never all 60 fanned out.
    assert 20 <= len(seen) < 40
    head = next(
        f["seq"] for f in ca.frames if f["type"] == "message" and f["message"]["body"] == "完"
    )
    for seq in range(head - 59, head + 1):
        await cb.send({"type": "read", "project_id": project, "seq": max(seq, 0)})
    # Past the rate the writes wait and merge instead of failing: the newest cursor still
    # lands, after far fewer writes (each one is announced as a `read` frame).
    final = await ca.wait_for(
        lambda f: f["type"] == "read" and f["member_id"] == bid and f["seq"] == head, timeout=10
    )
    assert final["seq"] == head
    writes = [f for f in ca.frames if f["type"] == "read" and f["member_id"] == bid]
    assert 20 <= len(writes) < 40
    assert not [f for f in cb.frames if f["type"] == "error"]


async def test_unread_counts_per_project_follow_the_read_cursor(server: ServerProcess) -> None:
    a = server.login()
    # No agents: an echo lead would answer, and its answers are unread messages too.
    status, created = server.request(
        "POST", "/api/projects", {"name": "未读计数", "agents": []}, headers=a.headers
    )
    assert status == 201, created
    project = created["project"]["id"]
    b = server.invite(a, project, "unread", "未读")

    def unread() -> int:
        me = server.get_json("/api/me", cookie=a.cookie)
        return int(next(p["unread"] for p in me["projects"] if p["id"] == project))

    ca = await subscribed(server, a.cookie, project)
    await ca.send({"type": "read", "project_id": project, "seq": 1 << 40})  # all read so far
    you = next(f["you"] for f in ca.frames if f["type"] == "subscribed")
    await ca.wait_for(lambda f: f["type"] == "read" and f["member_id"] == you)
    assert unread() == 0
    cb = await subscribed(server, b.cookie, project)
    ids = []
    for text in ("一", "二", "三"):
        await cb.send({"type": "send", "project_id": project, "client_txn_id": txn(), "body": text})
        ids.append((await cb.wait_for("ack"))["message_id"])
    await ca.send({"type": "send", "project_id": project, "client_txn_id": txn(), "body": "我的"})
    mine = await ca.wait_for("ack")
    await cb.send({"type": "delete", "project_id": project, "message_id": ids[0]})
    await cb.wait_for(lambda f: f["type"] == "message_updated")
    assert unread() == 2  # others' messages, not deleted; one's own never count
    await ca.send({"type": "read", "project_id": project, "seq": mine["seq"]})
    await ca.wait_for(lambda f: f["type"] == "read" and f["seq"] == mine["seq"])
    assert unread() == 0


async def test_every_bad_frame_gets_a_structured_error_and_the_socket_stays(
    server: ServerProcess,
) -> None:
    s = server.login()
    project = demo_project(server, s.cookie)
    c = await subscribed(server, s.cookie, project)
    bad: list[Any] = [
        "not json",
        "[]",
        "42",
        json.dumps({"type": "nope"}),
        json.dumps({"type": "send"}),
        json.dumps({"type": "send", "project_id": "x", "client_txn_id": "a", "body": "b"}),
        json.dumps({"type": "history", "project_id": project, "limit": 100000}),
        json.dumps({"type": "send", "project_id": project, "client_txn_id": "a", "body": ""}),
        json.dumps({"type": "subscribe", "project_id": 999999}),
        json.dumps({"type": "edit", "project_id": project, "message_id": 424242, "body": "x"}),
    ]
    count = 1000
    for i in range(count):
        await c.send(bad[i % len(bad)])
    errors = 0
    while errors < count:
        frame = await c.recv()
        if frame["type"] == "error":
            assert frame["code"] and frame["message"]
            errors += 1
    await c.send({"type": "ping", "req_id": "still-here"})
    pong = await c.wait_for("pong")
    assert pong["req_id"] == "still-here"
    status, health = server.request("GET", "/healthz")
    assert status == 200 and health["ok"]


async def test_errors_to_frames_that_failed_to_parse_echo_their_req_id(
    server: ServerProcess,
) -> None:
    s = server.login()
    project = demo_project(server, s.cookie)
    c = await subscribed(server, s.cookie, project)
    bad: dict[str, tuple[dict[str, Any], str]] = {
        "unknown-type": ({"type": "nope"}, "bad_frame"),
        "bad-field": ({"type": "send", "project_id": "x", "client_txn_id": "a"}, "bad_frame"),
        "forged": (
            {
                "type": "send",
                "project_id": project,
                "client_txn_id": txn(),
                "body": "hi",
                "from": 1,
            },
            "forged_author",
        ),
        "zero-cursor": ({"type": "history", "project_id": project, "before": 0}, "bad_frame"),
        "中文-请求": ({"type": "ping", "extra": True}, "bad_frame"),
    }
    for req_id, (frame, _) in bad.items():
        await c.send({**frame, "req_id": req_id})
    for req_id, (_, code) in bad.items():
        err = await c.wait_for("error")
        assert (err["req_id"], err["code"]) == (req_id, code)
    # What cannot be read is not invented: no req_id when it is not a string of ≤ 64 chars.
    for unreadable in ({"type": "nope", "req_id": 5}, {"type": "nope", "req_id": "x" * 65}):
        await c.send(unreadable)
        err = await c.wait_for("error")
        assert "req_id" not in err
    # A req_id that spells a lone surrogate cannot be sent back as UTF-8: it is not echoed, and
    # the socket keeps answering (the error once wedged the connection's outbox).
    for raw in ('{"type": "nope", "req_id": "a\\ud800"}', '{"type": "ping", "req_id": "\\udc00"}'):
        await c.send(raw)
        err = await c.wait_for("error")
        assert err["code"] == "bad_frame" and "req_id" not in err
    await c.send({"type": "ping", "req_id": "after-surrogates"})
    assert (await c.wait_for("pong"))["req_id"] == "after-surrogates"


async def test_forged_author_is_refused(server: ServerProcess) -> None:
    s = server.login()
    project = demo_project(server, s.cookie)
    c = await subscribed(server, s.cookie, project)
    for field in ("author_id", "sender", "from"):
        await c.send(
            {"type": "send", "project_id": project, "client_txn_id": txn(), "body": "hi", field: 1}
        )
        err = await c.wait_for("error")
        assert err["code"] == "forged_author"
    status, body = server.request(
        "POST",
        f"/api/projects/{project}/messages",
        {"body": "hi", "author_id": 2},
        headers={**s.headers, "Origin": server.origin},
    )
    assert status == 400 and body["error"]["code"] == "forged_author"
    page = server.get_json(f"/api/projects/{project}/messages", cookie=s.cookie)
    assert page["messages"] == []


async def test_cross_origin_handshake_is_refused(server: ServerProcess) -> None:
    s = server.login()
    with pytest.raises(InvalidStatus) as info:
        await Client.open(server.ws_url, cookie=s.cookie, origin="http://evil.example")
    assert info.value.response.status_code == 403


async def test_oversize_and_invalid_utf8_close_with_standard_codes(server: ServerProcess) -> None:
    s = server.login()
    project = demo_project(server, s.cookie)
    c = await subscribed(server, s.cookie, project)
    await c.send(
        {"type": "send", "project_id": project, "client_txn_id": txn(), "body": "x" * 70_000}
    )
    with pytest.raises(ConnectionClosed):
        while True:
            await c.recv()
    assert c.ws.close_code == 1009

    c2 = await subscribed(server, s.cookie, project)
    # A text frame whose payload is not UTF-8, written below the client's own checks.
    from websockets.frames import Frame, Opcode

    c2.ws.protocol.send_frame(Frame(Opcode.TEXT, b"\xff\xfe\xfd"))
    c2.ws.send_data()
    with pytest.raises(ConnectionClosed):
        while True:
            await c2.recv()
    assert c2.ws.close_code == 1007


async def test_rate_limited_answers_retry_after(tmp_path: Any) -> None:
    server = ServerProcess(
        tmp_path / "d", env={"ROOM_SEND_RATE_PER_SEC": "1", "ROOM_SEND_BURST": "3"}
    ).start()
    try:
        s = server.login()
        project = demo_project(server, s.cookie)
        c = await subscribed(server, s.cookie, project)
        for i in range(5):
            await c.send(
                {"type": "send", "project_id": project, "client_txn_id": txn(), "body": f"r{i}"}
            )
        err = await c.wait_for("error")
        assert err["code"] == "rate_limited"
        assert 0 < err["details"]["retry_after_ms"] <= 1000
    finally:
        server.stop()


async def _closed_with(client: Client, timeout: float = 5.0) -> int | None:
    """Read until the server closes the socket; its close code (None: still open at timeout)."""
    with anyio.move_on_after(timeout):
        try:
            while True:
                await client.ws.recv()
        except ConnectionClosed:
            return client.ws.close_code
    return None


async def test_sockets_close_when_the_cli_revokes_or_a_session_expires(tmp_path: Path) -> None:
    """The CLI writes the database beside the running server, which never hears of it: the
    periodic re-check closes exactly the sockets whose token or session ended."""
    server = ServerProcess(tmp_path / "data", env={"ROOM_CREDENTIAL_RECHECK_SECS": "0.2"}).start()
    try:
        first = server.agent_token("演示项目", "lead")
        old = await Client.open(server.ws_url, token=first)
        await old.wait_for("hello")
        second = server.agent_token("演示项目", "lead")  # a rotation: `first` is revoked
        new = await Client.open(server.ws_url, token=second)
        await new.wait_for("hello")
        person = server.login()
        browser = await Client.open(server.ws_url, cookie=person.cookie, origin=server.origin)
        await browser.wait_for("hello")

        assert await _closed_with(old) == 4401
        assert await _closed_with(new, timeout=1.0) is None  # five re-checks later, still open
        assert await _closed_with(browser, timeout=0.1) is None

        db = sqlite3.connect(server.data / "room.sqlite")
        with db:
            db.execute("UPDATE sessions SET expires_at = 0")  # every browser session ends
        db.close()
        assert await _closed_with(browser) == 4401
        assert await _closed_with(new, timeout=0.5) is None

        with contextlib.redirect_stdout(io.StringIO()):
            assert (
                room_main(["member", "revoke", "--data", str(server.data), "演示项目", "lead"]) == 0
            )
        assert await _closed_with(new) == 4401
    finally:
        server.stop()


async def test_agent_token_auth_by_header_and_by_first_frame(server: ServerProcess) -> None:
    token = server.agent_token("演示项目", "lead")
    c = await Client.open(server.ws_url, token=token)
    hello = await c.wait_for("hello")
    assert hello["identity"]["kind"] == "agent" and hello["identity"]["handle"] == "lead"
    c2 = await Client.open(server.ws_url)
    await c2.send({"type": "auth", "token": token})
    hello2 = await c2.wait_for("hello")
    assert hello2["identity"]["member_id"] == hello["identity"]["member_id"]
    c3 = await Client.open(server.ws_url)
    await c3.send({"type": "auth", "token": "wrong"})
    err = await c3.wait_for("error")
    assert err["code"] == "bad_token"
    with pytest.raises(ConnectionClosed):
        await c3.recv()
    assert c3.ws.close_code == 4401


async def test_preview_and_unresolved_mentions_need_plain_text(server: ServerProcess) -> None:
    s = server.login()
    project = demo_project(server, s.cookie)
    c = await subscribed(server, s.cookie, project)
    await c.send({"type": "preview", "project_id": project, "body": "@lead你先看看", "req_id": "p"})
    preview = await c.wait_for("preview")
    [diag] = preview["diagnostics"]
    assert diag["code"] == "needs_boundary" and diag["blocking"] is True
    assert "请在名字后加空格或标点" in diag["hint"]
    await c.send({"type": "preview", "project_id": project, "body": "@lead 你先看看"})
    preview = await c.wait_for("preview")
    assert preview["diagnostics"] == [] and preview["agents_reached"] == 1
    lead = preview["mentioned"][0]
    # Sending the unresolved draft is refused, nothing stored; as plain text it goes through
    # (to the lead by the default rule, since the text names nobody).
    await c.send(
        {"type": "send", "project_id": project, "client_txn_id": txn(), "body": "@lead你先看看"}
    )
    err = await c.wait_for("error")
    assert err["code"] == "mentions_unresolved"
    assert err["details"]["diagnostics"][0]["code"] == "needs_boundary"
    await c.send(
        {
            "type": "send",
            "project_id": project,
            "client_txn_id": txn(),
            "body": "@lead你先看看",
            "as_plain_text": True,
        }
    )
    ack = await c.wait_for("ack")
    detail = server.get_json(f"/api/messages/{ack['message_id']}", cookie=s.cookie)
    assert [d["recipient_id"] for d in detail["deliveries"]] == [lead]
    # Chips merge with text mentions and dedupe: one delivery.
    await c.send(
        {
            "type": "send",
            "project_id": project,
            "client_txn_id": txn(),
            "body": "@lead 和 @负责人",
            "chips": [lead],
        }
    )
    ack = await c.wait_for("ack")
    detail = server.get_json(f"/api/messages/{ack['message_id']}", cookie=s.cookie)
    assert [d["recipient_id"] for d in detail["deliveries"]] == [lead]
    # Code and quotes wake nobody: a human message that mentions nobody still goes to the lead,
    # but a message for @humans only never reaches an agent.
    await c.send(
        {"type": "send", "project_id": project, "client_txn_id": txn(), "body": "@humans 午饭"}
    )
    ack = await c.wait_for("ack")
    assert (
        server.get_json(f"/api/messages/{ack['message_id']}", cookie=s.cookie)["deliveries"] == []
    )


async def test_http_mutations_need_the_csrf_token(server: ServerProcess) -> None:
    s = server.login()
    project = demo_project(server, s.cookie)
    status, body = server.request(
        "POST", f"/api/projects/{project}/messages", {"body": "x"}, cookie=s.cookie
    )
    assert status == 403 and body["error"]["code"] == "csrf"
    status, body = server.request(
        "POST",
        f"/api/projects/{project}/messages",
        {"body": "x"},
        headers={**s.headers, "X-CSRF-Token": "wrong"},
    )
    assert status == 403
    status, _ = server.request(
        "POST", f"/api/projects/{project}/messages", {"body": "x"}, headers=s.headers
    )
    assert status == 201


async def test_permessage_deflate_is_off(server: ServerProcess) -> None:
    s = server.login()
    c = await Client.open(server.ws_url, cookie=s.cookie, origin=server.origin)
    assert c.ws.response is not None
    # Our client opened without compression; ask explicitly with a raw offer too.
    from websockets.asyncio.client import connect

    async with connect(
        server.ws_url,
        additional_headers={"Cookie": f"room_session={s.cookie}"},
        origin=server.origin,  # type: ignore[arg-type]
        compression="deflate",
    ) as ws:
        assert ws.response is not None
        assert "Sec-WebSocket-Extensions" not in ws.response.headers


async def test_a_stalled_reader_is_cut_without_slowing_others(tmp_path: Any) -> None:
    # The outbox's frame limit cuts the stalled reader; it resumes reading only after the others
    # are done, so the drop of a reader that reads nothing more (ws_stall_secs after the cut,
    # tests/test_transport_limits.py) is set past this test's length.
    server = ServerProcess(
        tmp_path / "d", env={"ROOM_OUTBOX_FRAMES": "64", "ROOM_WS_STALL_SECS": "300"}
    ).start()
    try:
        s = server.login()
        project = demo_project(server, s.cookie)
        stalled = await subscribed(server, s.cookie, project)
        # Stop reading at the TCP level: the client's receive buffer fills, then the server's.
        stalled.ws.transport.pause_reading()
        reader = await Client.open(
            server.ws_url, cookie=s.cookie, origin=server.origin, max_queue=None
        )
        await reader.send({"type": "subscribe", "project_id": project})
        await reader.wait_for("subscribed")
        writer = await Client.open(
            server.ws_url, cookie=s.cookie, origin=server.origin, max_queue=None
        )
        body = "填" * 20_000  # ~60 KB of UTF-8, under the 64 KiB frame limit
        got = 0

        async def read_all() -> None:
            # A reader that keeps reading gets everything, however stalled its neighbour is.
            nonlocal got
            while got < 300:
                frame = await reader.recv()
                got += frame["type"] == "message" and frame["message"]["author_id"] == 1

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                tg.start_soon(read_all)
                for _ in range(300):
                    # One at a time: the producer is the server's pace, not this loop's.
                    await writer.send(
                        {
                            "type": "send",
                            "project_id": project,
                            "client_txn_id": txn(),
                            "body": body,
                        }
                    )
                    await writer.wait_for("ack", timeout=10)
        assert got == 300
        stalled.ws.transport.resume_reading()
        with pytest.raises(ConnectionClosed):
            while True:
                await stalled.recv()
        assert stalled.ws.close_code == 1013
        assert "resume" in (stalled.ws.close_reason or "")
    finally:
        server.stop()


def _has(ws: Client, check: Callable[[Frame], bool]) -> bool:
    return any(check(f) for f in ws.frames)


async def _until(ws: Client, check: Callable[[Frame], bool]) -> None:
    with anyio.fail_after(10):
        while not _has(ws, check):
            await ws.recv(10)


async def test_a_member_who_leaves_stops_receiving_the_project(
    server: ServerProcess, clients: list[Client]
) -> None:
    owner = server.login()
    project_id = server.get_json("/api/me", cookie=owner.cookie)["projects"][0]["id"]
    bob = server.invite(owner, project_id, "bob", "Bob")
    ws = await Client.open(server.ws_url, cookie=bob.cookie, origin=server.origin)
    await ws.wait_for("hello")
    await ws.send({"type": "subscribe", "project_id": project_id})
    bob_id = (await ws.wait_for("subscribed"))["you"]

    status, _ = server.request(
        "POST", f"/api/projects/{project_id}/members/{bob_id}/leave", {}, headers=owner.headers
    )
    assert status == 200
    await _until(ws, lambda f: f.get("type") == "unsubscribed")
    # The notice and the roster reach whoever left before the cut, so their page can say so.
    types = [f.get("type") for f in ws.frames]
    cut = types.index("unsubscribed")
    assert "members" in types[:cut]
    assert any(
        f.get("type") == "message" and "移出了 @bob" in f["message"]["body"]
        for f in ws.frames[:cut]
    )
    status, _ = server.request(
        "POST",
        f"/api/projects/{project_id}/messages",
        {"body": "bob 走后的秘密"},
        headers=owner.headers,
    )
    assert status == 201  # published before the response: frames pushed to bob would precede
    await ws.send({"type": "ping"})
    await _until(ws, lambda f: f.get("type") == "pong")
    assert not _has(ws, lambda f: f.get("type") == "message" and "秘密" in f["message"]["body"])


async def test_a_member_who_leaves_is_unsubscribed_as_left_and_refused_a_post(room: Room) -> None:
    server = room.server
    bob = server.invite(room.owner, room.project, "bob", "小博")
    client = await Client.open(server.ws_url, cookie=bob.cookie, origin=server.origin)
    await client.send({"type": "subscribe", "project_id": room.project})
    await client.wait_for("subscribed")
    members = room.get(f"/api/projects/{room.project}")["members"]
    bob_id = next(m["id"] for m in members if m["handle"] == "bob")
    room.post(f"/api/projects/{room.project}/members/{bob_id}/leave", {})
    gone = await client.wait_for("unsubscribed")
    assert gone["reason"] == "left"
    room.say("@lead 鲍勃走了之后的消息")
    with pytest.raises(TimeoutError):
        await client.wait_for("message", timeout=1.0)
    status, body = server.request(
        "POST",
        f"/api/projects/{room.project}/messages",
        {"body": "我还在吗"},
        headers=bob.headers,
    )
    assert status == 403 and body["error"]["code"] == "not_member"


async def test_an_agent_that_leaves_has_its_open_sockets_closed(room: Room) -> None:
    server = room.server
    outside = room.add_agent("outside", "backend", "外部", driver="external")
    token = server.agent_token("演示项目", "outside")
    by_header = await Client.open(server.ws_url, token=token)
    await by_header.wait_for("hello")
    by_frame = await Client.open(server.ws_url)  # authenticates with a first `auth` frame
    await by_frame.send({"type": "auth", "token": token})
    await by_frame.wait_for("hello")
    watcher = await Client.open(server.ws_url, cookie=room.owner.cookie, origin=server.origin)
    await watcher.wait_for("hello")

    async def handler(batch: Batch) -> str:
        return "不会收到"

    # room.client, as `room agent` runs it: it reconnects after a lost socket, and stops when
    # its token is refused.
    agent = AgentClient(server.origin, token, handler)
    agent_process = asyncio.ensure_future(agent.run())
    await eventually(lambda: agent.members)  # connected and subscribed
    room.post(f"/api/projects/{room.project}/members/{outside}/leave", {})
    for socket in (by_header, by_frame):
        with pytest.raises(ConnectionClosed) as closed:
            while True:
                await socket.recv(timeout=5)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 4401
        assert "left" in closed.value.rcvd.reason
    # The token is gone too: a new socket with it is refused.
    with pytest.raises(InvalidStatus):
        await Client.open(server.ws_url, token=token)
    with pytest.raises(InvalidStatus):
        await asyncio.wait_for(agent_process, 10)
    await watcher.send({"type": "ping", "req_id": "still-here"})
    await watcher.wait_for(lambda f: f.get("req_id") == "still-here")  # the owner's stays


async def test_a_resume_that_is_never_read_is_cut_not_buffered(
    tmp_path: Path, llm: OpenAIServer
) -> None:
    server = start_with_openai(tmp_path / "data", llm, ROOM_OUTBOX_BYTES="131072")
    try:
        room = Room(server, llm)
        lead = room.members["lead"]["id"]
        room.post(f"/api/projects/{room.project}/members/{lead}/pause", {})
        writer = await Client.open(server.ws_url, cookie=room.owner.cookie, origin=server.origin)
        body = "满" * 10_000
        for i in range(300):
            await writer.send(
                {"type": "send", "project_id": room.project, "client_txn_id": f"r{i}", "body": body}
            )
            await writer.wait_for("ack")
        lazy = await Client.open(server.ws_url, cookie=room.owner.cookie, origin=server.origin)
        lazy.ws.transport.pause_reading()
        await lazy.send({"type": "subscribe", "project_id": room.project, "since": 0})
        await anyio.sleep(3.0)
        lazy.ws.transport.resume_reading()
        with pytest.raises(ConnectionClosed):
            while True:
                await lazy.recv()
        assert lazy.ws.close_code == 1013
    finally:
        server.stop()


async def test_previews_and_edits_are_rate_limited_and_edit_history_is_bounded(
    tmp_path: Path,
) -> None:
    """A member flooding previews (resolved on the event loop) or edits (each kept a version)
    is slowed like a sender; a message keeps its original and the newest earlier versions."""
    server = ServerProcess(
        tmp_path / "data", env={"ROOM_SEND_RATE_PER_SEC": "1", "ROOM_SEND_BURST": "40"}
    ).start()
    try:
        s = server.login()
        project = demo_project(server, s.cookie)
        c = await subscribed(server, s.cookie, project)
        await c.send({"type": "send", "project_id": project, "client_txn_id": txn(), "body": "v0"})
        target = (await c.wait_for("ack"))["message_id"]
        for i in range(1, 46):
            await c.send({"type": "edit", "project_id": project, "message_id": target,
                          "body": f"v{i}", "req_id": f"e{i}"})  # fmt: skip
        answers = [
            await c.wait_for(lambda f: f.get("req_id", "").startswith("e")) for _ in range(45)
        ]
        refused = [a for a in answers if a["type"] == "error"]
        assert refused and all(a["code"] == "rate_limited" for a in refused)
        assert refused[0]["details"]["retry_after_ms"] > 0
        done = len(answers) - len(refused)
        assert 30 <= done < 45
        detail = server.get_json(f"/api/messages/{target}", cookie=s.cookie)
        kept = [e["body"] for e in detail["edits"]]
        # The original, then the newest 19 earlier versions (the current text is the message).
        assert kept == ["v0", *[f"v{i}" for i in range(done - 19, done)]]
        for i in range(30):
            await c.send({"type": "preview", "project_id": project, "body": f"@lead {i}",
                          "req_id": f"p{i}"})  # fmt: skip
        previews = [
            await c.wait_for(lambda f: f.get("req_id", "").startswith("p")) for _ in range(30)
        ]
        slowed = [f for f in previews if f["type"] == "error"]
        assert slowed and all(f["code"] == "rate_limited" for f in slowed)
        assert sum(f["type"] == "preview" for f in previews) >= 20
        await c.close()
    finally:
        server.stop()


def _acked(txn_id: str) -> Callable[[Frame], bool]:
    return lambda f: f.get("type") == "ack" and f.get("client_txn_id") == txn_id


async def test_a_reader_whose_socket_fills_mid_stream_gets_every_seq_once_in_order(
    tmp_path: Any,
) -> None:
    # The reader stops reading while messages (and another person's typing) stream: its socket
    # fills in the middle of a fan-out pass, the rest waits in its transport and outbox. When it
    # reads again it gets every seq once and in order, and the writer, subscribed too, has each
    # message's event before its ack.
    server = ServerProcess(
        tmp_path / "d", env={"ROOM_OUTBOX_FRAMES": "100000", "ROOM_WS_STALL_SECS": "300"}
    ).start()
    try:
        s = server.login()
        project = demo_project(server, s.cookie)
        pause_demo_lead(server, s, project)
        b = server.invite(s, project, "li", "小李")
        reader = await subscribed(server, s.cookie, project)
        reader.ws.transport.pause_reading()
        writer = await subscribed(server, s.cookie, project)
        typist = await subscribed(server, b.cookie, project)
        body = "满" * 3000  # ~9 KB of UTF-8: 200 of them are far more than the socket buffers
        with anyio.fail_after(60):
            for i in range(200):
                if i % 40 == 0:
                    await typist.send({"type": "typing", "project_id": project})
                txn_id = txn()
                await writer.send(
                    {"type": "send", "project_id": project, "client_txn_id": txn_id, "body": body}
                )
                await writer.wait_for(_acked(txn_id))
            reader.ws.transport.resume_reading()
            while len(reader.messages()) < 200:
                await reader.recv()
        seqs = [f["seq"] for f in reader.messages()]
        assert seqs == list(range(seqs[0], seqs[0] + 200))
        assert reader.ws.close_code is None
        order = [
            ("event", f["seq"]) if f["type"] == "message" else ("ack", f["seq"])
            for f in writer.frames
            if f["type"] == "message" or f["type"] == "ack"
        ]
        events = [seq for kind, seq in order if kind == "event"]
        assert events == seqs
        for seq in seqs:
            assert order.index(("event", seq)) < order.index(("ack", seq))
    finally:
        server.stop()
