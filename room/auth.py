"""Who is on the other end of a request or socket: a human session or an agent token.

Humans carry a session cookie (HttpOnly, SameSite=Strict) and, for HTTP mutations, the session's
CSRF token in ``X-CSRF-Token``. Agents carry ``Authorization: Bearer <token>`` (or send an
``auth`` frame first on ``/ws``). Nothing a client sends can choose the author: it is this.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from room.core import Core
from room.errors import AuthError, ForbiddenError
from room.models import Member, User
from room.store import auth as auth_store

SESSION_COOKIE = "room_session"
CSRF_HEADER = "x-csrf-token"


@dataclass(frozen=True, slots=True)
class Identity:
    user: User | None = None
    agent: Member | None = None
    csrf_token: str | None = None

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


async def authenticate_token(core: Core, token: str) -> Identity:
    member = await core.db.read(lambda conn: auth_store.token_member(conn, token))
    if member is None:
        raise AuthError("this token is unknown or revoked", code="bad_token")
    return Identity(agent=member)


async def authenticate_session(core: Core, secret: str) -> Identity:
    now = core.clock()
    found = await core.db.read(lambda conn: auth_store.session_user(conn, secret, now))
    if found is None:
        raise AuthError("your session expired; sign in again", code="session_expired")
    user, csrf = found
    return Identity(user=user, csrf_token=csrf)


async def identity_from_headers(
    core: Core, headers: Mapping[str, str], cookies: Mapping[str, str]
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
