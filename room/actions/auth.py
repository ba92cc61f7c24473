"""Identity: the owner account, one-time login links, invites, sessions and agent tokens.

Secrets are ``secrets.token_urlsafe(32)`` and stored only as SHA-256 digests. These functions run
inside a writer job (``conn, tx``) so the CLI can run them in its own short transaction too.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from room.actions.members import announce_members
from room.actions.projects import check_display_name, check_handle
from room.errors import AuthError, ConflictError, NotFoundError
from room.rules.effects import CloseAgentSockets
from room.rules.entities import Member, User
from room.store import Tx
from room.store import audit as audit_store
from room.store import auth as auth_store
from room.store import members as members_store
from room.store import messages as messages_store
from room.store import projects as projects_store
from room.store.dialect import Connection

SECONDS_PER_DAY = 86_400


def new_secret() -> str:
    return secrets.token_urlsafe(32)


def ensure_owner(conn: Connection, tx: Tx, display_name: str = "管理员") -> User:
    """The server's first human (its admin); created on first start, named ``display_name``."""
    owner = auth_store.admin_user(conn)
    if owner is not None:
        return owner
    user_id = auth_store.insert_user(
        conn, handle="owner", display_name=display_name, is_admin=True, now=tx.now
    )
    user = auth_store.get_user(conn, user_id)
    assert user is not None
    return user


def create_login_link(
    conn: Connection, tx: Tx, user_id: int, minutes: int, created_by: int | None = None
) -> str:
    secret = new_secret()
    auth_store.insert_link(
        conn,
        secret=secret,
        purpose="login",
        user_id=user_id,
        project_id=None,
        role=None,
        created_by=created_by,
        now=tx.now,
        expires_at=tx.now + minutes * 60,
    )
    return secret


def create_invite(
    conn: Connection, tx: Tx, project_id: int, inviter: Member, role: str, days: int
) -> str:
    if not inviter.is_owner:
        raise ConflictError("only a project owner can invite", code="not_owner")
    projects_store.require_open(conn, project_id)
    secret = new_secret()
    auth_store.insert_link(
        conn,
        secret=secret,
        purpose="invite",
        user_id=None,
        project_id=project_id,
        role=role,
        created_by=inviter.user_id,
        now=tx.now,
        expires_at=tx.now + days * SECONDS_PER_DAY,
    )
    audit_store.record(
        conn,
        now=tx.now,
        actor_kind="human",
        actor_id=inviter.id,
        project_id=project_id,
        action="invite.create",
        outcome="ok",
        detail={"role": role},
    )
    return secret


@dataclass(frozen=True, slots=True)
class NewSession:
    user: User
    secret: str | None  # None: the browser's existing session goes on
    csrf_token: str | None
    project_id: int | None


def link_project(conn: Connection, secret: str) -> int | None:
    """The project a link invites to, read before it is redeemed (to declare it)."""
    return auth_store.link_project(conn, secret)


def redeem_link(
    conn: Connection,
    tx: Tx,
    secret: str,
    session_days: int,
    *,
    handle: str | None = None,
    display_name: str | None = None,
    signed_in: User | None = None,
) -> NewSession:
    """Use a one-time link. A login link signs its user in. An invite makes someone a member of
    its project: the person already signed in in this browser (``signed_in``), who keeps their
    session, or else a new account with the handle and display name given."""
    taken = auth_store.take_link(conn, secret, tx.now)
    if taken is None:
        raise AuthError("this link is unknown, used or expired", code="link_invalid")
    purpose, user_id, project_id, role = taken
    if purpose == "invite":
        # Nobody joins an archived or trashed project; refusing rolls the take back, so the
        # invite of an archived project works again after a restore (trash revokes invites).
        assert project_id is not None
        projects_store.require_open(conn, project_id)
    if purpose == "invite" and signed_in is not None:
        assert project_id is not None
        _join_existing(conn, tx, signed_in, project_id, role or "member")
        auth_store.mark_link_user(conn, secret, signed_in.id)
        return NewSession(signed_in, None, None, project_id)
    if purpose == "invite":
        assert project_id is not None
        if not handle or not display_name:
            raise AuthError("an invite needs a handle and a display name", code="invite_incomplete")
        check_handle(handle)
        if auth_store.user_handle_taken(conn, handle) or members_store.handle_reserved(
            conn, project_id, handle
        ):
            raise ConflictError(f"@{handle} is taken", code="handle_taken", handle=handle)
        user_id = auth_store.insert_user(
            conn,
            handle=handle,
            display_name=check_display_name(display_name),
            is_admin=False,
            now=tx.now,
        )
        _insert_person(
            conn, tx, project_id, user_id, role or "member", handle, display_name.strip()
        )
        auth_store.mark_link_user(conn, secret, user_id)
    assert user_id is not None
    user = auth_store.get_user(conn, user_id)
    if user is None:
        raise AuthError("the account of this link no longer exists", code="link_invalid")
    if user.disabled_at is not None:
        raise AuthError(
            "your account was disabled by the server's operator", code="account_disabled"
        )
    session_secret, csrf = new_secret(), new_secret()
    auth_store.insert_session(
        conn,
        secret=session_secret,
        user_id=user.id,
        csrf_token=csrf,
        now=tx.now,
        expires_at=tx.now + session_days * SECONDS_PER_DAY,
    )
    return NewSession(user, session_secret, csrf, project_id)


def join_as(conn: Connection, tx: Tx, user: User, project_id: int, role: str) -> bool:
    """``user`` joins ``project_id`` with ``role`` (a merge brings its source's people over);
    False when already in. Refused like an invite: ``handle_taken``, ``name_taken``."""
    existing = members_store.for_user(conn, project_id, user.id)
    if existing is not None and existing.status != "left":
        return False
    _join_existing(conn, tx, user, project_id, role)
    return True


def _join_existing(conn: Connection, tx: Tx, user: User, project_id: int, role: str) -> None:
    existing = members_store.for_user(conn, project_id, user.id)
    if existing is not None and existing.status != "left":
        return  # already in: the invite is simply used
    if existing is not None or members_store.handle_reserved(conn, project_id, user.handle):
        raise ConflictError(
            f"@{user.handle} is taken in this project (names of departed members stay reserved);"
            " sign out and join with another handle",
            code="handle_taken",
            handle=user.handle,
        )
    _insert_person(conn, tx, project_id, user.id, role, user.handle, user.display_name)


def _insert_person(
    conn: Connection,
    tx: Tx,
    project_id: int,
    user_id: int,
    role: str,
    handle: str,
    display_name: str,
) -> None:
    """A person joins: their display name may not be an agent's alias (an alias outranks a
    display name, so their mentions would reach the agent), and what was said before they came
    is history, not unread."""
    if any(
        kind == "alias" and not departed
        for kind, departed in members_store.name_holders(conn, project_id, display_name)
    ):
        raise ConflictError(
            f"「{display_name}」是本项目一位成员的别名，提及会被误送；请换一个显示名"
            " (Another member has this name as an alias; choose another display name.)",
            code="name_taken",
            name=display_name,
        )
    member_id = members_store.insert(
        conn,
        project_id=project_id,
        kind="human",
        user_id=user_id,
        role=role,
        handle=handle,
        display_name=display_name,
        now=tx.now,
    )
    messages_store.set_read_cursor(
        conn,
        member_id=member_id,
        project_id=project_id,
        seq=projects_store.head_seq(conn, project_id),
        now=tx.now,
    )
    # Someone joined: everyone watching the project learns the new roster at once.
    announce_members(conn, tx, project_id)


def issue_agent_token(conn: Connection, tx: Tx, project: str, handle: str) -> str:
    """``room member token``: a fresh bearer token for an agent member, by project name or id
    and handle. Its older tokens are revoked (a rotation), so a leaked token ends here."""
    member = _agent_by_handle(conn, project, handle)
    return rotate_agent_token(conn, tx, member, actor_kind="operator", actor_id=None)


def revoke_agent_tokens_by_handle(conn: Connection, tx: Tx, project: str, handle: str) -> int:
    """``room member revoke``: every token of the agent stops working; its handle stays."""
    member = _agent_by_handle(conn, project, handle)
    return revoke_agent_tokens(conn, tx, member, actor_kind="operator", actor_id=None)


def rotate_agent_token(
    conn: Connection, tx: Tx, member: Member, *, actor_kind: str, actor_id: int | None
) -> str:
    """Revoke the agent's tokens and issue one new one, in one transaction. Sockets opened with an
    old token are closed once this commits (when the writer is the server itself)."""
    _require_agent(member)
    revoked = auth_store.revoke_member_tokens(conn, member.id, tx.now)
    secret = new_secret()
    auth_store.insert_agent_token(conn, member_id=member.id, secret=secret, now=tx.now)
    tx.emit(CloseAgentSockets(member.id, "token rotated"))
    _audit_token(conn, tx, member, "member.token", actor_kind, actor_id, revoked)
    return secret


def revoke_agent_tokens(
    conn: Connection, tx: Tx, member: Member, *, actor_kind: str, actor_id: int | None
) -> int:
    _require_agent(member)
    revoked = auth_store.revoke_member_tokens(conn, member.id, tx.now)
    tx.emit(CloseAgentSockets(member.id, "token revoked"))
    _audit_token(conn, tx, member, "member.revoke_tokens", actor_kind, actor_id, revoked)
    return revoked


def _agent_by_handle(conn: Connection, project: str, handle: str) -> Member:
    found = projects_store.find(conn, project)
    if found is None:
        raise NotFoundError(f"no project {project!r}", code="no_project")
    member = members_store.by_handle(conn, found.id, handle.lstrip("@"))
    if member is None or member.status == "left":
        raise NotFoundError(f"no member @{handle} in {found.name}", code="no_member")
    return member


def _require_agent(member: Member) -> None:
    if member.status == "left":
        raise NotFoundError(f"@{member.handle} has left the project", code="no_member")
    if member.kind != "agent":
        raise ConflictError(
            f"@{member.handle} is a human; humans sign in with a login link", code="not_agent"
        )


def _audit_token(
    conn: Connection,
    tx: Tx,
    member: Member,
    action: str,
    actor_kind: str,
    actor_id: int | None,
    revoked: int,
) -> None:
    audit_store.record(
        conn,
        now=tx.now,
        actor_kind=actor_kind,
        actor_id=actor_id,
        project_id=member.project_id,
        action=action,
        outcome="ok",
        detail={"member_id": member.id, "revoked": revoked},
    )
