"""People an operator administers: ``room users list|disable|enable|login-link`` (docs/operators.md).

The functions taking ``(conn, tx)`` run inside one write job, so the CLI runs them in its own
short transaction beside a running server. Each change writes a ``user_changes`` row: the server
polls it (:func:`apply_user_changes`, setting ``user_watch_secs``) and then closes the sockets of
sessions that ended and sends the new rosters, as it would for a change it made itself.

A disabled person's sessions end, their unused login links expire, a new sign-in is refused
(``account_disabled``), and in every project they stay a member with their messages and
authorship, shown as disabled in the roster; naming them in a message is a blocking diagnostic
(``disabled``). Every action is audited (``user.disable``, ``user.enable``, ``user.login_link``;
a project creation the setting ``project_creators`` refuses is ``project.create`` refused, in
room.actions.projects).
"""

from __future__ import annotations

from typing import Any

from room.actions.auth import create_login_link
from room.actions.members import announce_members
from room.errors import ConflictError, NotFoundError, RoomError
from room.rules.entities import User, iso
from room.services import Services
from room.store import Tx
from room.store import audit as audit_store
from room.store import members as members_store
from room.store import users as users_store
from room.store.dialect import Connection


def list_users(conn: Connection, now: float) -> list[dict[str, Any]]:
    """Every person, with ``disabled_at``, ``created_at`` and ``last_sign_in`` as ISO times."""
    people = users_store.list_all(conn, now)
    for person in people:
        for key in ("disabled_at", "created_at", "last_sign_in"):
            if person[key] is not None:
                person[key] = iso(person[key])
    return people


def _person(conn: Connection, who: str) -> User:
    user = users_store.find(conn, who)
    if user is None:
        raise NotFoundError(f"no person {who!r} (a handle or an id)", code="no_user", who=who)
    return user


def disable_user(
    conn: Connection, tx: Tx, who: str, *, actor_kind: str = "operator"
) -> dict[str, Any] | RoomError:
    """Disable a person: their sessions end and their login links expire at once; they stay a
    member everywhere (messages and authorship kept). Disabling the server's owner is refused
    (``user_is_owner``: nobody could sign in to administer it); a second disable changes nothing.
    A refusal is returned, not raised, so that its audit record commits; the caller raises it."""
    user = _person(conn, who)
    if user.is_admin:
        _audit(conn, tx, user, "user.disable", "refused", actor_kind, {"reason": "user_is_owner"})
        return ConflictError(
            f"@{user.handle} is the server's owner and cannot be disabled",
            code="user_is_owner",
            handle=user.handle,
        )
    if user.disabled_at is not None:
        return {"user": user.handle, "changed": False, "sessions_ended": 0, "links_voided": 0}
    users_store.set_disabled(conn, user.id, tx.now)
    ended = users_store.end_sessions(conn, user.id, tx.now)
    voided = users_store.void_login_links(conn, user.id, tx.now)
    users_store.record_change(conn, user.id, "disable", tx.now)
    detail = {"sessions_ended": ended, "links_voided": voided}
    _audit(conn, tx, user, "user.disable", "ok", actor_kind, detail)
    _announce(conn, tx, user)
    return {"user": user.handle, "changed": True, **detail}


def enable_user(
    conn: Connection, tx: Tx, who: str, *, actor_kind: str = "operator"
) -> dict[str, Any]:
    """Enable a disabled person again; they sign in with a new login link."""
    user = _person(conn, who)
    if user.disabled_at is None:
        return {"user": user.handle, "changed": False}
    users_store.set_disabled(conn, user.id, None)
    users_store.record_change(conn, user.id, "enable", tx.now)
    _audit(conn, tx, user, "user.enable", "ok", actor_kind, {})
    _announce(conn, tx, user)
    return {"user": user.handle, "changed": True}


def user_login_link(
    conn: Connection, tx: Tx, who: str, minutes: int, *, actor_kind: str = "operator"
) -> str | RoomError:
    """A one-time login link for any person (the secret; the caller makes the URL). Refused for
    a disabled person (``user_disabled``, returned like :func:`disable_user`'s): enable them
    first."""
    user = _person(conn, who)
    if user.disabled_at is not None:
        _audit(conn, tx, user, "user.login_link", "refused", actor_kind, {"reason": "disabled"})
        return ConflictError(
            f"@{user.handle} is disabled; enable them first (room users enable {user.handle})",
            code="user_disabled",
            handle=user.handle,
        )
    secret = create_login_link(conn, tx, user.id, minutes)
    _audit(conn, tx, user, "user.login_link", "ok", actor_kind, {"minutes": minutes})
    return secret


def _audit(
    conn: Connection,
    tx: Tx,
    user: User,
    action: str,
    outcome: str,
    actor_kind: str,
    detail: dict[str, Any],
) -> None:
    audit_store.record(
        conn,
        now=tx.now,
        actor_kind=actor_kind,
        actor_id=user.id if actor_kind == "human" else None,
        project_id=None,
        action=action,
        outcome=outcome,
        detail={"user_id": user.id, "handle": user.handle, **detail},
    )


def _announce(conn: Connection, tx: Tx, user: User) -> None:
    for project_id in members_store.projects_of_user(conn, user.id):
        announce_members(conn, tx, project_id)


# -- the server's side: changes written beside it ------------------------------------------------


async def apply_user_changes(core: Services, after: int) -> tuple[int, list[tuple[int, str]]]:
    """Changes of people made since change ``after`` (by the CLI, beside the server): their
    projects' rosters are dropped and sent again. Returns the last change id seen and the
    (user id, action) of each change."""
    changes = await core.db.read(lambda conn: users_store.changes_since(conn, after))
    if not changes:
        return after, []
    users = {user_id for _, user_id, _ in changes}
    # Their projects read first and declared: the write locks each one's row (its roster
    # version) before any other (docs/storage.md, "Lock order: the project first"). A project
    # one of them joined since announced its roster, this person included, as it was joined.
    projects = await core.db.read(
        lambda conn: tuple(
            sorted({p for u in users for p in members_store.projects_of_user(conn, u)})
        )
    )

    def job(conn: Connection, tx: Tx) -> None:
        for project_id in projects:
            announce_members(conn, tx, project_id)

    await core.db.write(job, locks=projects)
    return changes[-1][0], [(user_id, action) for _, user_id, action in changes]
