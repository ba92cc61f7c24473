"""The email digest of unread mentions (issue 30 item 6): off by default; with the operator's
SMTP server set (a local aiosmtpd here), a person away with an email address gets their unread
mentions once, in their language (zh, en); who is away is decided by their last read or message
(checked on the stored rows with explicit times); bad contact settings are refused."""

from __future__ import annotations

import email
import email.policy
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.controller import Controller

from room.rules.digest import MAX_ITEMS, Mention, render_digest
from room.settings import Settings
from room.store import notifications as notifications_store
from tests.support.live_room import eventually
from tests.support.procs import free_port
from tests.support.server import ServerProcess


class Inbox:
    """An aiosmtpd handler keeping every mail it is given."""

    def __init__(self) -> None:
        self.mails: list[email.message.EmailMessage] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        raw = envelope.content if isinstance(envelope.content, bytes) else envelope.content.encode()
        self.mails.append(email.message_from_bytes(raw, policy=email.policy.default))
        return "250 OK"


@pytest.fixture
def smtp() -> Iterator[tuple[Inbox, int]]:
    inbox = Inbox()
    port = free_port()
    controller = Controller(inbox, hostname="127.0.0.1", port=port)
    controller.start()
    try:
        yield inbox, port
    finally:
        controller.stop()


def test_the_digest_is_off_by_default() -> None:
    assert Settings().digest_smtp_host is None


def test_the_digest_text_in_both_languages() -> None:
    mentions = [
        Mention(1, "发布", n, "小王", f"@li 第 {n} 件事", "2026-12-06T08:00:00.000Z")
        for n in range(MAX_ITEMS + 2)
    ]
    subject, body = render_digest("zh", "李四", mentions, "https://room.example")
    assert subject == f"Project Room：你有 {MAX_ITEMS + 2} 条未读的提及"
    assert body.startswith("李四，你好：\n\n你离开期间，有人在项目里提到了你：\n")
    assert "[发布] 小王 · 2026-12-06 08:00 UTC\n  @li 第 0 件事\n" in body
    assert "打开：https://room.example/#/p/1/m/0" in body
    assert f"第 {MAX_ITEMS} 件事" not in body and "……还有 2 条" in body
    subject, body = render_digest("en", "Li", mentions[:1], "https://room.example")
    assert subject == "Project Room: 1 unread mention(s)"
    assert body.startswith("Hello Li,\n\nWhile you were away, people mentioned you")
    assert "Open: https://room.example/#/p/1/m/0" in body and "more" not in body


@pytest.mark.anyio
async def test_away_people_get_their_mentions_once(tmp_path: Path, smtp: tuple[Inbox, int]) -> None:
    inbox, port = smtp
    server = ServerProcess(
        tmp_path / "data",
        env={
            "ROOM_DIGEST_SMTP_HOST": "127.0.0.1",
            "ROOM_DIGEST_SMTP_PORT": str(port),
            "ROOM_DIGEST_AWAY_SECS": "0",
            "ROOM_DIGEST_EVERY_SECS": "0.2",
            "ROOM_DIGEST_FROM": "room@example.test",
        },
    ).start()
    try:
        owner = server.login()
        me = server.get_json("/api/me", cookie=owner.cookie)
        project = int(me["projects"][0]["id"])
        wang = server.invite(owner, project, "wang", "小王")
        li = server.invite(owner, project, "li", "Li")
        for person, address, lang in (
            (wang, "wang@example.test", "zh"),
            (li, "li@example.test", "en"),
        ):
            status, body = server.request(
                "PUT", "/api/me/digest", {"email": address, "lang": lang}, headers=person.headers
            )
            assert status == 200 and body == {"email": address, "lang": lang}
        for bad, code in (({"email": "not an address"}, "bad_email"), ({"lang": "fr"}, "bad_lang")):
            status, body = server.request("PUT", "/api/me/digest", bad, headers=li.headers)
            assert status == 400 and body["error"]["code"] == code

        def say(text: str) -> None:
            status, _ = server.request(
                "POST",
                f"/api/projects/{project}/messages",
                {"body": text, "client_txn_id": str(time.monotonic_ns())},
                headers=owner.headers,
            )
            assert status == 201

        say("@wang @li 请看发布计划")
        say("大家好")  # mentions nobody: in no digest
        mails = await eventually(lambda: len(inbox.mails) >= 2 and inbox.mails)
        by_to = {str(m["To"]): m for m in mails}
        zh, en = by_to["wang@example.test"], by_to["li@example.test"]
        assert zh["From"] == "room@example.test"
        assert zh["Subject"] == "Project Room：你有 1 条未读的提及"
        zh_body = zh.get_content()
        assert "小王，你好：" in zh_body and "@wang @li 请看发布计划" in zh_body
        assert "大家好" not in zh_body and f"{server.origin}/#/p/{project}/m/" in zh_body
        assert en["Subject"] == "Project Room: 1 unread mention(s)"
        assert "Hello Li," in en.get_content() and "请看发布计划" in en.get_content()

        # Mailed once: the next rounds send nothing new until a new mention comes.
        say("@wang 还有一件事")
        later = await eventually(lambda: len(inbox.mails) >= 3 and inbox.mails)
        assert [str(m["To"]) for m in later[2:]] == ["wang@example.test"]
        assert "还有一件事" in later[2].get_content()
        assert "请看发布计划" not in later[2].get_content()
        assert len(inbox.mails) == 3
    finally:
        server.stop()

    # Who is away, on the stored rows: wang's last activity is now his read cursor.
    conn = sqlite3.connect(server.data / "room.sqlite")
    try:
        wang_id = wang.user["user_id"]
        member = conn.execute(
            "SELECT id FROM members WHERE user_id = ? AND project_id = ?", (wang_id, project)
        ).fetchone()[0]
        conn.execute(
            "INSERT INTO read_cursors (member_id, project_id, seq, updated_at)"
            " VALUES (?, ?, 1, 1000.0) ON CONFLICT (member_id) DO UPDATE SET updated_at = 1000.0",
            (member, project),
        )

        def due(now: float, away: float) -> set[int]:
            return {p["user_id"] for p in notifications_store.digest_due(conn, now, away)}

        assert wang_id in due(1000.0 + 3600, 3600)  # away an hour
        assert wang_id not in due(1000.0 + 3599, 3600)  # back a moment ago
        conn.execute("UPDATE users SET email = NULL WHERE id = ?", (wang_id,))
        assert wang_id not in due(1e12, 3600)  # no address: no digest
    finally:
        conn.close()
