"""Projects: rows, state, the per-project sequence."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from room.errors import ConflictError
from room.rules.entities import PROJECT_COLUMNS, Project
from room.store.db import UNKNOWN, Appends, check_declared, declare_created
from room.store.dialect import Connection, dialect_for, locks_rows

# SQLite's INTEGER is 64-bit signed: a longer run of digits cannot name a row.
MAX_ROW_ID = 2**63 - 1

# Where a project's data may still change (settings, members, routes, invites): archived,
# trashed and purged projects are read-only, and stops and purges must not be raced.
OPEN_STATES = frozenset({"active", "paused"})
STOPPING_STATES = frozenset({"stopping", "stop_unconfirmed"})
# Member operations also work while a stop is under way: stopping a stuck member is how a
# person gets a stop confirmed.
MEMBER_OPEN_STATES = OPEN_STATES | STOPPING_STATES


def row_id(text: str) -> int | None:
    """``text`` as a row id if it is plain ASCII digits within SQLite's range, else None
    (``str.isdigit`` alone accepts '²' and '①', which ``int`` then refuses)."""
    if not (text.isascii() and text.isdigit()) or len(text) > 19:
        return None
    value = int(text)
    return value if value <= MAX_ROW_ID else None


def insert(
    conn: Connection,
    *,
    name: str,
    goal: str,
    workspace: str | None,
    created_by: int | None,
    now: float,
    settings: dict[str, Any] | None = None,
    home_node: str | None = None,
) -> int:
    cur = conn.execute(
        "INSERT INTO projects (name, goal, workspace, created_by, settings_json, created_at,"
        " updated_at, home_node) VALUES (:name, :goal, :workspace, :created_by, :settings,"
        " :now, :now, :home) RETURNING id",
        {
            "name": name,
            "goal": goal,
            "workspace": workspace,
            "created_by": created_by,
            "settings": json.dumps(settings or {}),
            "now": now,
            "home": home_node,
        },
    )
    project_id = int(cur.fetchone()[0])
    declare_created(conn, project_id)  # its row is the job's: the goal's message takes its seq
    return project_id


def get(conn: Connection, project_id: int) -> Project | None:
    row = conn.execute(
        f"SELECT {PROJECT_COLUMNS} FROM projects WHERE id = :id", {"id": project_id}
    ).fetchone()
    return Project.from_row(row) if row else None


def find(conn: Connection, name_or_id: str) -> Project | None:
    """By id (digits) or by name (case-insensitive), ignoring purged tombstones."""
    as_id = row_id(name_or_id)
    if as_id is not None:
        found = get(conn, as_id)
        if found is not None:
            return found
    row = conn.execute(
        f"SELECT {PROJECT_COLUMNS} FROM projects"
        f" WHERE {dialect_for(conn).nocase_equals('name', ':name')} AND state != 'purged'",
        {"name": name_or_id},
    ).fetchone()
    return Project.from_row(row) if row else None


def name_taken(conn: Connection, name: str) -> bool:
    return (
        conn.execute(
            "SELECT 1 FROM projects"
            f" WHERE {dialect_for(conn).nocase_equals('name', ':name')} AND state != 'purged'",
            {"name": name},
        ).fetchone()
        is not None
    )


def list_for_user(conn: Connection, user_id: int) -> list[Project]:
    rows = conn.execute(
        f"SELECT {', '.join('p.' + c.strip() for c in PROJECT_COLUMNS.split(','))}"
        " FROM projects p JOIN members m ON m.project_id = p.id"
        " WHERE m.user_id = :user_id AND m.status != 'left' AND p.state != 'purged'"
        " ORDER BY p.id",
        {"user_id": user_id},
    ).fetchall()
    return [Project.from_row(r) for r in rows]


def list_all(conn: Connection) -> list[Project]:
    return [
        Project.from_row(r)
        for r in conn.execute(f"SELECT {PROJECT_COLUMNS} FROM projects ORDER BY id").fetchall()
    ]


def live_ids(conn: Connection) -> tuple[int, ...]:
    """Every project not purged, in id order (a start-up's jobs declare them all)."""
    rows = conn.execute("SELECT id FROM projects WHERE state != 'purged' ORDER BY id")
    return tuple(int(r[0]) for r in rows)


def live_workspaces(conn: Connection) -> list[tuple[int, str]]:
    """``(id, workspace)`` of every project not purged that has a workspace set."""
    rows = conn.execute(
        "SELECT id, workspace FROM projects WHERE state != 'purged' AND workspace IS NOT NULL"
        " ORDER BY id"
    )
    return [(int(r[0]), str(r[1])) for r in rows]


def lock_project(conn: Connection, project_id: int) -> None:
    """PostgreSQL: lock the project's row until this transaction ends, so what the caller reads
    and numbers next (``max + 1`` of a per-project number) no other process's transaction can
    number too (docs/storage.md, "Several writers"). SQLite: nothing to do, its write
    transaction holds the whole file.

    ``FOR NO KEY UPDATE``, like the batch's lock of its projects (``Database._lock_projects``):
    it serialises the numbering, and lets the foreign-key checks of rows naming the project
    through. Like :func:`next_seq`, for a job that declared the project (its batch locked the
    row first): refused otherwise where the writer checks."""
    check_declared(conn, project_id, "a number")
    if locks_rows(conn):
        conn.execute(
            "SELECT id FROM projects WHERE id = ? FOR NO KEY UPDATE", (project_id,)
        ).fetchall()


def next_seq(conn: Connection, project_id: int, now: float, appends: Appends | None = None) -> int:
    """Take the next gap-free seq of a project inside the caller's transaction (with
    ``appends``: counted in the batch, written once when it flushes).

    The job must have declared the project (``Database.submit(locks=…)``), so that on
    PostgreSQL its batch locked the project's row before any other: where the writer checks
    (the tests), a seq of an undeclared project is refused (:func:`check_declared`)."""
    check_declared(conn, project_id)
    if appends is None:
        row = conn.execute(
            "UPDATE projects SET last_seq = last_seq + 1, updated_at = :now WHERE id = :id"
            " RETURNING last_seq",
            {"id": project_id, "now": now},
        ).fetchone()
        return int(row[0])
    seq = appends.last_seq(project_id)
    if seq is None:
        # PostgreSQL: the row stays locked to this transaction until it commits, so no other
        # process takes the same seq (the batch usually locked it already at its start).
        lock = " FOR NO KEY UPDATE" if locks_rows(conn) else ""
        row = conn.execute(
            f"SELECT last_seq FROM projects WHERE id = ?{lock}", (project_id,)
        ).fetchone()
        seq = int(row[0])
    seq += 1
    appends.take_seq(project_id, seq, now)
    return int(seq)


def set_lead(conn: Connection, project_id: int, member_id: int) -> None:
    check_declared(conn, project_id, "the row")
    conn.execute(
        "UPDATE projects SET lead_member_id = :member_id WHERE id = :id",
        {"id": project_id, "member_id": member_id},
    )


def set_state(
    conn: Connection,
    project_id: int,
    *,
    state: str,
    state_from: str | None,
    stop_target: str | None,
    now: float,
) -> None:
    check_declared(conn, project_id, "the row")
    conn.execute(
        "UPDATE projects SET state = :state, state_from = :state_from,"
        " stop_target = :stop_target, state_at = :now, updated_at = :now WHERE id = :id",
        {
            "id": project_id,
            "state": state,
            "state_from": state_from,
            "stop_target": stop_target,
            "now": now,
        },
    )


def set_state_reason(conn: Connection, project_id: int, reason: str | None) -> None:
    """The reason shown with the current state (pause, archive, complete, abandon), or None."""
    check_declared(conn, project_id, "the row")
    conn.execute(
        "UPDATE projects SET state_reason = :r WHERE id = :id", {"id": project_id, "r": reason}
    )


def settings(conn: Connection, project_id: int) -> dict[str, Any]:
    row = conn.execute(
        "SELECT settings_json FROM projects WHERE id = :id", {"id": project_id}
    ).fetchone()
    return dict(json.loads(row[0])) if row else {}


def update_settings(
    conn: Connection,
    project_id: int,
    values: dict[str, Any],
    now: float,
    *,
    remove: Iterable[str] = (),
) -> dict[str, Any]:
    """Merge ``values`` into the project's settings; keys in ``remove`` go back to the server's
    defaults."""
    check_declared(conn, project_id, "the row")
    current = settings(conn, project_id)
    current.update(values)
    for key in remove:
        current.pop(key, None)
    conn.execute(
        "UPDATE projects SET settings_json = :s, updated_at = :now WHERE id = :id",
        {"id": project_id, "s": json.dumps(current, sort_keys=True), "now": now},
    )
    return current


def lead_of(conn: Connection, project_id: int) -> int | None:
    row = conn.execute(
        "SELECT lead_member_id FROM projects WHERE id = :id", {"id": project_id}
    ).fetchone()
    return int(row[0]) if row and row[0] is not None else None


def roster_version(conn: Connection, project_id: int, appends: Appends | None = None) -> int:
    """The version of the project's roster, raised by every change to it (:func:`bump_roster`),
    read inside the caller's transaction (with ``appends``: once per batch, like the state).
    -1 for a project that does not exist."""
    if appends is not None:
        known = appends.roster_version(project_id)
        if known is not None:
            return known
    row = conn.execute(
        "SELECT roster_version FROM projects WHERE id = :id", {"id": project_id}
    ).fetchone()
    version = int(row[0]) if row else -1
    if appends is not None:
        appends.remember_roster_version(project_id, version)
    return version


def bump_roster(conn: Connection, project_id: int) -> None:
    """The project's roster changed in this transaction: raise its version (docs/storage.md,
    "Several writers": a roster cached by any process is checked against it under the lock)."""
    check_declared(conn, project_id, "the row")
    conn.execute(
        "UPDATE projects SET roster_version = roster_version + 1 WHERE id = :id", {"id": project_id}
    )


def state_of(conn: Connection, project_id: int, appends: Appends | None = None) -> str | None:
    """The project's state (with ``appends``: read once per batch; only a job outside the
    batch's appends can change it, and the batch flushes before such a job)."""
    if appends is not None:
        known = appends.state(project_id)
        if known is not UNKNOWN:
            return known
    row = conn.execute("SELECT state FROM projects WHERE id = :id", {"id": project_id}).fetchone()
    state = str(row[0]) if row else None
    if appends is not None:
        appends.remember_state(project_id, state)
    return state


def require_open(conn: Connection, project_id: int, allowed: frozenset[str] = OPEN_STATES) -> None:
    """Refuse (409 ``project_closed``) unless the project is in ``allowed`` (active or paused by
    default). Called inside the write job of every change to a project's settings, members,
    routes or invites, so a change can never land after an archive or trash committed (and
    break the restore's snapshot)."""
    state = state_of(conn, project_id) or "purged"
    if state in allowed:
        return
    if state in STOPPING_STATES:
        hint = "项目正在停止，请先重试或取消停止 (A stop is under way: retry or cancel it first.)"
    elif state == "purged":
        hint = "项目已清除 (The project was purged.)"
    else:
        hint = f"项目处于 {state}，请先恢复项目 (The project is {state}; restore it first.)"
    raise ConflictError(hint, code="project_closed", state=state)


def head_seq(conn: Connection, project_id: int) -> int:
    row = conn.execute(
        "SELECT last_seq FROM projects WHERE id = :id", {"id": project_id}
    ).fetchone()
    return int(row[0]) if row else 0


def bump_epoch(conn: Connection, project_id: int) -> int:
    """A new epoch: clients holding a cursor must resync (restore from trash, import)."""
    check_declared(conn, project_id, "the row")
    row = conn.execute(
        "UPDATE projects SET epoch = epoch + 1 WHERE id = :id RETURNING epoch", {"id": project_id}
    ).fetchone()
    return int(row[0])


def state_at(conn: Connection, project_id: int) -> float | None:
    row = conn.execute(
        "SELECT state_at FROM projects WHERE id = :id", {"id": project_id}
    ).fetchone()
    return float(row[0]) if row and row[0] is not None else None


def set_workspace(conn: Connection, project_id: int, workspace: str | None, now: float) -> None:
    check_declared(conn, project_id, "the row")
    conn.execute(
        "UPDATE projects SET workspace = :w, updated_at = :now WHERE id = :id",
        {"id": project_id, "w": workspace, "now": now},
    )
