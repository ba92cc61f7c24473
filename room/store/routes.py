"""Route configuration: current settings and the append-only history of changes."""

from __future__ import annotations

from typing import Any

from room.rules.entities import iso
from room.store.dialect import Connection

SCOPES = ("project", "role", "member", "pool", "pool_pick")


def settings(conn: Connection, project_id: int) -> dict[tuple[str, str], dict[str, Any]]:
    return {
        (str(r[0]), str(r[1])): {"value": r[2], "reason": r[3], "config_version": r[4]}
        for r in conn.execute(
            "SELECT scope, target, value, reason, config_version FROM route_settings"
            " WHERE project_id = :p",
            {"p": project_id},
        )
    }


def config_version(conn: Connection, project_id: int) -> int:
    row = conn.execute(
        "SELECT config_version FROM projects WHERE id = :p", {"p": project_id}
    ).fetchone()
    return int(row[0]) if row else 0


def change(
    conn: Connection,
    *,
    project_id: int,
    scope: str,
    target: str,
    value: str | None,
    reason: str,
    author_kind: str,
    author_id: int | None,
    now: float,
) -> int:
    """Set (or clear, with ``value=None``) one setting; returns the new config version."""
    assert scope in SCOPES, scope
    old = conn.execute(
        "SELECT value FROM route_settings WHERE project_id = :p AND scope = :s AND target = :t",
        {"p": project_id, "s": scope, "t": target},
    ).fetchone()
    version = int(
        conn.execute(
            "UPDATE projects SET config_version = config_version + 1 WHERE id = :p"
            " RETURNING config_version",
            {"p": project_id},
        ).fetchone()[0]
    )
    if value is None:
        conn.execute(
            "DELETE FROM route_settings WHERE project_id = :p AND scope = :s AND target = :t",
            {"p": project_id, "s": scope, "t": target},
        )
    else:
        conn.execute(
            "INSERT INTO route_settings (project_id, scope, target, value, reason,"
            " config_version, updated_at) VALUES (:p, :s, :t, :v, :r, :ver, :now)"
            " ON CONFLICT (project_id, scope, target) DO UPDATE SET value = excluded.value,"
            " reason = excluded.reason, config_version = excluded.config_version,"
            " updated_at = excluded.updated_at",
            {
                "p": project_id,
                "s": scope,
                "t": target,
                "v": value,
                "r": reason,
                "ver": version,
                "now": now,
            },
        )
    conn.execute(
        "INSERT INTO route_changes (project_id, scope, target, old_value, new_value, reason,"
        " author_kind, author_id, config_version, created_at) VALUES (:p, :s, :t, :old, :new,"
        " :r, :ak, :aid, :ver, :now)",
        {
            "p": project_id,
            "s": scope,
            "t": target,
            "old": old[0] if old else None,
            "new": value,
            "r": reason,
            "ak": author_kind,
            "aid": author_id,
            "ver": version,
            "now": now,
        },
    )
    return version


def history(conn: Connection, project_id: int, limit: int = 100) -> list[dict[str, Any]]:
    return [
        {
            "id": r[0],
            "scope": r[1],
            "target": r[2],
            "old_value": r[3],
            "new_value": r[4],
            "reason": r[5],
            "author_kind": r[6],
            "author_id": r[7],
            "config_version": r[8],
            "at": iso(r[9]),
        }
        for r in conn.execute(
            "SELECT id, scope, target, old_value, new_value, reason, author_kind, author_id,"
            " config_version, created_at FROM route_changes WHERE project_id = :p"
            " ORDER BY id DESC LIMIT :limit",
            {"p": project_id, "limit": limit},
        )
    ]
