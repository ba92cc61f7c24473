"""The audit log: every lifecycle or permission-relevant attempt, allowed or refused."""

from __future__ import annotations

import json
from typing import Any

from room.store.dialect import Connection


def record(
    conn: Connection,
    *,
    now: float,
    actor_kind: str,
    actor_id: int | None,
    project_id: int | None,
    action: str,
    outcome: str,
    from_state: str | None = None,
    detail: dict[str, Any] | None = None,
) -> int:
    cur = conn.execute(
        "INSERT INTO audit_events (at, actor_kind, actor_id, project_id, action, from_state,"
        " outcome, detail_json) VALUES (:at, :actor_kind, :actor_id, :project_id, :action,"
        " :from_state, :outcome, :detail) RETURNING id",
        {
            "at": now,
            "actor_kind": actor_kind,
            "actor_id": actor_id,
            "project_id": project_id,
            "action": action,
            "from_state": from_state,
            "outcome": outcome,
            "detail": json.dumps(detail or {}, ensure_ascii=False, sort_keys=True),
        },
    )
    return int(cur.fetchone()[0])


def list_events(
    conn: Connection, project_id: int | None = None, limit: int = 200
) -> list[dict[str, Any]]:
    sql = (
        "SELECT id, at, actor_kind, actor_id, project_id, action, from_state, outcome, detail_json"
        " FROM audit_events"
    )
    params: dict[str, Any] = {"limit": limit}
    if project_id is not None:
        sql += " WHERE project_id = :project_id"
        params["project_id"] = project_id
    sql += " ORDER BY id DESC LIMIT :limit"
    return [
        {
            "id": r[0],
            "at": r[1],
            "actor_kind": r[2],
            "actor_id": r[3],
            "project_id": r[4],
            "action": r[5],
            "from_state": r[6],
            "outcome": r[7],
            "detail": json.loads(r[8]),
        }
        for r in conn.execute(sql, params)
    ]
