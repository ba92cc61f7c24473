"""Members of a project, their names, aliases and tombstones."""

from __future__ import annotations

import unicodedata

from room.rules.entities import MEMBER_COLUMNS, Member
from room.store import users as users_store
from room.store.dialect import Connection, dialect_for


def name_key(name: str) -> str:
    """How names compare for uniqueness and reservation: NFC, then case-folded."""
    return unicodedata.normalize("NFC", name).casefold()


def insert(
    conn: Connection,
    *,
    project_id: int,
    kind: str,
    user_id: int | None,
    role: str,
    handle: str,
    display_name: str,
    aliases: tuple[str, ...] = (),
    now: float,
) -> int:
    cur = conn.execute(
        "INSERT INTO members (project_id, kind, user_id, role, handle, display_name, created_at)"
        " VALUES (:project_id, :kind, :user_id, :role, :handle, :display_name, :now) RETURNING id",
        {
            "project_id": project_id,
            "kind": kind,
            "user_id": user_id,
            "role": role,
            "handle": handle,
            "display_name": display_name,
            "now": now,
        },
    )
    member_id = int(cur.fetchone()[0])
    names = [(handle, "handle"), (display_name, "display_name")]
    names += [(alias, "alias") for alias in aliases]
    conn.executemany(
        "INSERT OR IGNORE INTO member_names (project_id, member_id, name, name_key, kind)"
        " VALUES (:project_id, :member_id, :name, :key, :kind)",
        [
            {
                "project_id": project_id,
                "member_id": member_id,
                "name": name,
                "key": name_key(name),
                "kind": kind_,
            }
            for name, kind_ in names
        ],
    )
    return member_id


def get(conn: Connection, member_id: int) -> Member | None:
    row = conn.execute(
        f"SELECT {MEMBER_COLUMNS} FROM members WHERE id = :id", {"id": member_id}
    ).fetchone()
    return Member.from_row(row) if row else None


def for_user(conn: Connection, project_id: int, user_id: int) -> Member | None:
    row = conn.execute(
        f"SELECT {MEMBER_COLUMNS} FROM members WHERE project_id = :p AND user_id = :u",
        {"p": project_id, "u": user_id},
    ).fetchone()
    return Member.from_row(row) if row else None


def by_handle(conn: Connection, project_id: int, handle: str) -> Member | None:
    row = conn.execute(
        f"SELECT {MEMBER_COLUMNS} FROM members WHERE project_id = :p"
        f" AND {dialect_for(conn).nocase_equals('handle', ':h')}"
        " ORDER BY status = 'left', id LIMIT 1",
        {"p": project_id, "h": handle},
    ).fetchone()
    return Member.from_row(row) if row else None


def list_for_project(conn: Connection, project_id: int) -> list[Member]:
    rows = conn.execute(
        f"SELECT {MEMBER_COLUMNS} FROM members WHERE project_id = :p ORDER BY id",
        {"p": project_id},
    ).fetchall()
    return [Member.from_row(r) for r in rows]


def name_holders(conn: Connection, project_id: int, name: str) -> list[tuple[str, bool]]:
    """(kind, departed) for every member name in the project equal to ``name`` (by
    ``name_key``): what a new handle, display name or alias would collide with."""
    return [
        (str(r[0]), bool(r[1]))
        for r in conn.execute(
            "SELECT kind, tombstoned FROM member_names WHERE project_id = :p AND name_key = :k",
            {"p": project_id, "k": name_key(name)},
        )
    ]


def handle_reserved(conn: Connection, project_id: int, handle: str) -> bool:
    """Taken by a member, alive or departed (tombstones keep their names)."""
    return bool(name_holders(conn, project_id, handle))


def names_for_project(conn: Connection, project_id: int) -> list[tuple[int, str, str, bool]]:
    """(member_id, name, kind, tombstoned) for every name ever held in the project."""
    return [
        (int(r[0]), str(r[1]), str(r[2]), bool(r[3]))
        for r in conn.execute(
            "SELECT member_id, name, kind, tombstoned FROM member_names WHERE project_id = :p",
            {"p": project_id},
        )
    ]


def aliases_for_project(conn: Connection, project_id: int) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for member_id, name in conn.execute(
        "SELECT member_id, name FROM member_names WHERE project_id = :p AND kind = 'alias'"
        " ORDER BY member_id, name",
        {"p": project_id},
    ):
        out.setdefault(int(member_id), []).append(str(name))
    return out


def wire_list(conn: Connection, project_id: int) -> list[dict[str, object]]:
    """The members as every frame and endpoint sends them, with their aliases (the browser's
    mention resolver needs them to give the same answer as the server's) and ``disabled: true``
    for a person whose account an operator disabled (``room users disable``)."""
    aliases = aliases_for_project(conn, project_id)
    disabled = users_store.disabled_members(conn, project_id)
    return [
        {
            **m.to_wire(),
            "aliases": aliases.get(m.id, []),
            **({"disabled": True} if m.id in disabled else {}),
        }
        for m in list_for_project(conn, project_id)
    ]


def projects_of_user(conn: Connection, user_id: int) -> list[int]:
    """The projects in which this person is a member (and has not left)."""
    rows = conn.execute(
        "SELECT project_id FROM members WHERE user_id = :u AND status != 'left'", {"u": user_id}
    )
    return [int(r[0]) for r in rows]


def owned_projects(conn: Connection, user_id: int) -> set[int]:
    """The projects in which this person is a member with the owner role."""
    rows = conn.execute(
        "SELECT project_id FROM members"
        " WHERE user_id = :u AND kind = 'human' AND role = 'owner' AND status != 'left'",
        {"u": user_id},
    )
    return {int(r[0]) for r in rows}


def set_status(conn: Connection, member_id: int, status: str, now: float) -> None:
    conn.execute(
        "UPDATE members SET status = :status,"
        " left_at = CASE WHEN :status = 'left' THEN :now ELSE left_at END WHERE id = :id",
        {"id": member_id, "status": status, "now": now},
    )
    if status == "left":
        conn.execute(
            "UPDATE member_names SET tombstoned = 1 WHERE member_id = :id", {"id": member_id}
        )
