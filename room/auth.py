"""Who is on the other end of a request or socket: a human session or an agent token.

Humans carry a session cookie (HttpOnly, SameSite=Strict) and, for HTTP mutations, the session's
CSRF token in ``X-CSRF-Token``. Agents carry ``Authorization: Bearer <token>`` (or send an
``auth`` frame first on ``/ws``). Nothing a client sends can choose the author: it is this.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from room.actions import users as user_actions
from room.errors import AuthError, ForbiddenError
from room.infra.frames import CLOSE_SIGNED_OUT
from room.infra.hub import Hub
from room.rules.entities import Member, User
from room.services import Services
from room.store import auth as auth_store
from room.store import users as users_store

SESSION_COOKIE = "room_session"
CSRF_HEADER = "x-csrf-token"
REVOKED_REASON = "token revoked"

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Identity:
    user: User | None = None
    agent: Member | None = None
    csrf_token: str | None = None
    # The digest of the session secret or token that proved it: what a re-check looks up.
    credential: str | None = None

    @property
    def is_human(self) -> bool:
        return self.user is not None

    def to_wire(self) -> dict[str, Any]:
        if self.user is not None:
            return {
                "kind": "human",
                "user_id": self.user.id,
                "handle": self.user.handle,
                "display_name": self.user.display_name,
            }
        assert self.agent is not None
        return {
            "kind": "agent",
            "member_id": self.agent.id,
            "project_id": self.agent.project_id,
            "handle": self.agent.handle,
            "display_name": self.agent.display_name,
        }


async def authenticate_token(core: Services, token: str) -> Identity:
    member = await core.db.read(lambda conn: auth_store.token_member(conn, token))
    if member is None:
        raise AuthError("this token is unknown or revoked", code="bad_token")
    return Identity(agent=member, credential=auth_store.digest(token))


async def authenticate_session(core: Services, secret: str) -> Identity:
    now = core.clock()
    found = await core.db.read(lambda conn: auth_store.session_user(conn, secret, now))
    if found is None:
        digest = auth_store.digest(secret)
        if await core.db.read(lambda conn: users_store.is_disabled_session(conn, digest)):
            raise AuthError(
                "your account was disabled by the server's operator", code="account_disabled"
            )
        raise AuthError("your session expired; sign in again", code="session_expired")
    user, csrf = found
    return Identity(user=user, csrf_token=csrf, credential=auth_store.digest(secret))


async def identity_from_headers(
    core: Services, headers: Mapping[str, str], cookies: Mapping[str, str]
) -> Identity | None:
    """Bearer first, then the session cookie; None when the request carries neither."""
    authorization = headers.get("authorization", "")
    if authorization:
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise AuthError("use 'Authorization: Bearer <token>'", code="bad_authorization")
        return await authenticate_token(core, token.strip())
    secret = cookies.get(SESSION_COOKIE)
    if secret:
        return await authenticate_session(core, secret)
    return None


def check_csrf(identity: Identity, headers: Mapping[str, str]) -> None:
    """Cookie-authenticated mutations must echo the session's CSRF token; bearer ones need not
    (a bearer token is never sent ambiently by a browser)."""
    if identity.user is None:
        return
    # Header values arrive decoded as latin-1: compared as bytes, a non-ASCII token is simply
    # wrong (``compare_digest`` refuses non-ASCII ``str`` with a TypeError).
    sent = headers.get(CSRF_HEADER, "").encode("latin-1", "replace")
    if not identity.csrf_token or not hmac.compare_digest(sent, identity.csrf_token.encode()):
        raise ForbiddenError("missing or wrong CSRF token", code="csrf")


# -- open sockets outlive nothing that proved them -------------------------------------------------


async def recheck_credentials(core: Services, reason: str = "signed out") -> int:
    """Close every open socket whose session or token has ended since it connected; how many.

    Sign-out, leaving and the owner's rotate/revoke close their sockets at once (an effect).
    What the server never hears of — ``room member token``/``revoke`` from the CLI, which
    writes the database beside it, or a session reaching its expiry — is found here."""
    hub: Hub = core.hub
    sessions, tokens = hub.presence.credentials()
    if not sessions and not tokens:
        return 0
    now = core.clock()
    live_sessions, live_tokens = await core.db.read(
        lambda conn: auth_store.live_credentials(conn, sessions, tokens, now)
    )
    closed = 0
    for session in sessions - live_sessions:
        closed += hub.presence.cut_session(session, reason, CLOSE_SIGNED_OUT)
    for token in tokens - live_tokens:
        closed += hub.presence.cut_session(
            hub.presence.token_session(token), REVOKED_REASON, CLOSE_SIGNED_OUT
        )
    return closed


async def credential_rechecks(core: Services, period: float) -> None:
    """The loop behind setting ``credential_recheck_secs``."""
    while True:
        await asyncio.sleep(period)
        try:
            closed = await recheck_credentials(core)
        except Exception:  # pragma: no cover - a failed check must not end the loop
            log.exception("credential re-check failed")
            continue
        if closed:
            log.info("closed %d socket(s) whose session or token ended", closed)


async def user_change_watch(core: Services, period: float) -> None:
    """The loop behind setting ``user_watch_secs``: a person an operator disabled or enabled
    beside the server (``room users``, which writes the database and a ``user_changes`` row) has
    their ended sessions' sockets closed (4401) and their projects' rosters sent again."""
    seen = await core.db.read(users_store.last_change)
    while True:
        await asyncio.sleep(period)
        try:
            latest = await core.db.read(users_store.last_change)
            if latest == seen:
                continue
            seen, changes = await user_actions.apply_user_changes(core, seen)
            if any(action == "disable" for _, action in changes):
                closed = await recheck_credentials(core, reason="account disabled")
                log.info("closed %d socket(s) of disabled people", closed)
        except Exception:  # pragma: no cover - a failed check must not end the loop
            log.exception("user change watch failed")
