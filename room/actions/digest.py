"""The email digest of unread mentions (docs/protocol.md, "Notifications"; settings
``digest_*``, off unless ``digest_smtp_host`` is set).

Every ``digest_every_secs`` the server looks for people who have an email address and have been
away (no read cursor moved, no message written, in any project) ``digest_away_secs`` or longer,
and mails each of them their unread mentions that arrived since they left or since their last
digest, in their language (``users.lang``: zh or en, the language their page shows — the page
sends it, ``PUT /api/me/lang``; text in room.rules.digest), through the
operator's SMTP server. A mention is mailed once: ``users.digest_at`` moves to the send time.
"""

from __future__ import annotations

import asyncio
import json
import logging
import smtplib
from datetime import datetime
from email.message import EmailMessage
from typing import Any

from room.errors import BadRequestError
from room.rules.digest import Mention, render_digest
from room.rules.render import plain_text
from room.services import Services
from room.settings import Settings
from room.store import Tx
from room.store import members as members_store
from room.store import notifications as notifications_store
from room.store import projects as projects_store
from room.store.dialect import Connection

log = logging.getLogger(__name__)

LANGS = ("zh", "en")
MAX_EMAIL_CHARS = 254
SMTP_TIMEOUT_SECS = 20.0


def _check_lang(lang: str) -> None:
    if lang not in LANGS:
        raise BadRequestError("lang is zh or en", code="bad_lang", allowed=list(LANGS))


async def contact(core: Services, user_id: int) -> dict[str, Any]:
    """A person's digest address and language, and whether this server sends digests at all
    (``enabled``: setting ``digest_smtp_host``)."""
    found = await core.db.read(lambda conn: notifications_store.contact(conn, user_id))
    return {**found, "enabled": core.settings.digest_smtp_host is not None}


async def set_lang(core: Services, user_id: int, lang: str) -> dict[str, Any]:
    """The language a person reads (the page's choice, sent by the page): their digest's."""
    _check_lang(lang)

    def job(conn: Connection, tx: Tx) -> None:
        notifications_store.set_lang(conn, user_id, lang)

    await core.db.write(job)
    return {"lang": lang}


async def set_contact(
    core: Services, user_id: int, email: str | None, lang: str | None = None
) -> dict[str, Any]:
    """A person's digest address (None: no digest) and language (None: as it was)."""
    if lang is not None:
        _check_lang(lang)
    if email is not None:
        email = email.strip()
        if not email:
            email = None
        elif (
            len(email) > MAX_EMAIL_CHARS or email.count("@") != 1 or any(c.isspace() for c in email)
        ):
            raise BadRequestError("not an email address", code="bad_email")

    def job(conn: Connection, tx: Tx) -> dict[str, Any]:
        notifications_store.set_contact(conn, user_id, email, lang)
        return {"email": email, "lang": notifications_store.contact(conn, user_id)["lang"]}

    result: dict[str, Any] = await core.db.write(job)
    return result


def _epoch(iso: str) -> float:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def collect(conn: Connection, now: float, away_secs: float) -> list[dict[str, Any]]:
    """Who is due a digest now, with their new mentions (people with none are left out)."""
    out = []
    for person in notifications_store.digest_due(conn, now, away_secs):
        names = {p.id: p.name for p in projects_store.list_for_user(conn, person["user_id"])}
        mentions = []
        for item in notifications_store.inbox(conn, person["user_id"], 200):
            if item["reason"] != "mention" or item["project_id"] not in names:
                continue
            message = json.loads(item["message"])
            if _epoch(message["created_at"]) <= person["since"]:
                continue
            author = members_store.get(conn, message["author_id"]) if message["author_id"] else None
            mentions.append(
                Mention(
                    project_id=item["project_id"],
                    project_name=names[item["project_id"]],
                    message_id=int(message["id"]),
                    author=author.display_name if author else "—",
                    text=plain_text(message["body"]),
                    at=str(message["created_at"]),
                )
            )
        if mentions:
            out.append({**person, "mentions": mentions})
    return out


def send_mail(settings: Settings, to: str, subject: str, body: str) -> None:
    """One plain-text email through the operator's SMTP server (blocking: run in a thread)."""
    assert settings.digest_smtp_host is not None
    mail = EmailMessage()
    mail["From"] = settings.digest_from
    mail["To"] = to
    mail["Subject"] = subject
    mail.set_content(body)
    with smtplib.SMTP(
        settings.digest_smtp_host, settings.digest_smtp_port, timeout=SMTP_TIMEOUT_SECS
    ) as smtp:
        if settings.digest_smtp_starttls:
            smtp.starttls()
        if settings.digest_smtp_user:
            smtp.login(settings.digest_smtp_user, settings.digest_smtp_password or "")
        smtp.send_message(mail)


async def send_due(core: Services, now: float) -> int:
    """Mail everyone due a digest now; returns how many were sent. A failed send is logged and
    tried again next round (``digest_at`` is moved only after the server took the mail)."""
    settings = core.settings
    due = await core.db.read(lambda conn: collect(conn, now, settings.digest_away_secs))
    sent = 0
    for person in due:
        subject, body = render_digest(
            person["lang"], person["name"], person["mentions"], settings.origin
        )
        try:
            await asyncio.to_thread(send_mail, settings, person["email"], subject, body)
        except (OSError, smtplib.SMTPException) as exc:
            log.warning("digest for user %s not sent: %s", person["user_id"], type(exc).__name__)
            continue
        user_id = person["user_id"]

        def mark(conn: Connection, tx: Tx, user_id: int = user_id) -> None:
            notifications_store.mark_digest(conn, user_id, now)

        await core.db.write(mark)
        sent += 1
    return sent


async def digest_loop(core: Services) -> None:
    """The loop behind the ``digest_*`` settings (started only with ``digest_smtp_host``)."""
    while True:
        await asyncio.sleep(core.settings.digest_every_secs)
        try:
            await send_due(core, core.clock())
        except Exception:  # pragma: no cover - a failed round must not end the loop
            log.exception("digest round failed")
