"""SQL of the decision log: decisions, their revisions, the tasks bound to them, and a decision
as the log shows it (with the sync receipts each revision asked for:
:mod:`room.store.sync_requests`).

Plain functions over a connection, like :mod:`room.store.tasks`; times on the wire in ISO 8601
UTC.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from room.rules.entities import iso
from room.store.dialect import Connection
from room.store.sync_requests import sync_requests_of
from room.store.tasks import insert_row, next_number


@dataclass(frozen=True, slots=True)
class DecisionRow:
    id: int
    project_id: int
    number: int
    kind: str
    title: str
    status: str
    revision: int
    supersedes: int | None
    superseded_by: int | None
    created_by: int | None
    accepted_by: int | None
    created_at: float
    updated_at: float
    archived: bool = False

    @property
    def label(self) -> str:
        return f"ADR-{self.number:04d}"


_DECISION_COLUMNS = (
    "id, project_id, number, kind, title, status, revision, supersedes, superseded_by,"
    " created_by,"
    " accepted_by, created_at, updated_at, archived"
)


def insert_decision(
    conn: Connection,
    *,
    project_id: int,
    kind: str,
    title: str,
    status: str,
    created_by: int | None,
    accepted_by: int | None,
    now: float,
    supersedes: int | None = None,
) -> DecisionRow:
    decision_id = insert_row(conn, "decisions", {
        "project_id": project_id, "number": next_number(conn, "decisions", "number", project_id),
        "kind": kind, "title": title, "status": status, "revision": 1, "supersedes": supersedes,
        "created_by": created_by, "accepted_by": accepted_by, "created_at": now,
        "updated_at": now,
    })  # fmt: skip
    row = get_decision(conn, decision_id)
    assert row is not None
    return row


def insert_decision_revision(
    conn: Connection,
    *,
    project_id: int,
    decision_id: int,
    revision: int,
    context: str,
    decision: str,
    consequences: str,
    author_id: int | None,
    now: float,
    original_text: str | None = None,
    source_message_id: int | None = None,
    alternatives: Sequence[dict[str, str]] = (),
    constraints: str = "",
) -> None:
    """Add a revision and make it the decision's current one. ``alternatives`` are the options
    rejected, each ``{option, why_rejected}``."""
    insert_row(conn, "decision_revisions", {
        "project_id": project_id, "decision_id": decision_id, "revision": revision,
        "context": context, "decision": decision, "consequences": consequences,
        "original_text": original_text, "source_message_id": source_message_id,
        "author_id": author_id, "created_at": now,
        "alternatives_json": json.dumps(list(alternatives), ensure_ascii=False),
        "constraints": constraints,
    })  # fmt: skip
    conn.execute(
        "UPDATE decisions SET revision = :r, updated_at = :now WHERE id = :d",
        {"r": revision, "now": now, "d": decision_id},
    )


def get_decision(conn: Connection, decision_id: int) -> DecisionRow | None:
    row = conn.execute(
        f"SELECT {_DECISION_COLUMNS} FROM decisions WHERE id = :id", {"id": decision_id}
    ).fetchone()
    return DecisionRow(*row) if row else None


def decision_by_number(conn: Connection, project_id: int, number: int) -> DecisionRow | None:
    row = conn.execute(
        f"SELECT {_DECISION_COLUMNS} FROM decisions WHERE project_id = :p AND number = :n",
        {"p": project_id, "n": number},
    ).fetchone()
    return DecisionRow(*row) if row else None


def requirement_decision(conn: Connection, project_id: int) -> DecisionRow | None:
    """The project's requirement decision (the earliest one not superseded)."""
    row = conn.execute(
        f"SELECT {_DECISION_COLUMNS} FROM decisions WHERE project_id = :p"
        " AND kind = 'requirement' AND status != 'superseded' ORDER BY number LIMIT 1",
        {"p": project_id},
    ).fetchone()
    return DecisionRow(*row) if row else None


def decisions_of(conn: Connection, project_id: int) -> list[DecisionRow]:
    return [
        DecisionRow(*r)
        for r in conn.execute(
            f"SELECT {_DECISION_COLUMNS} FROM decisions WHERE project_id = :p ORDER BY number",
            {"p": project_id},
        )
    ]


def set_decision_status(
    conn: Connection,
    decision_id: int,
    status: str,
    now: float,
    *,
    accepted_by: int | None = None,
    superseded_by: int | None = None,
) -> None:
    conn.execute(
        "UPDATE decisions SET status = :s, accepted_by = coalesce(:acc, accepted_by),"
        " superseded_by = coalesce(:sup, superseded_by), updated_at = :now WHERE id = :id",
        {"s": status, "acc": accepted_by, "sup": superseded_by, "now": now, "id": decision_id},
    )


def revisions_of(conn: Connection, decision_id: int) -> list[dict[str, Any]]:
    return [
        {"revision": r[0], "context": r[1], "decision": r[2], "consequences": r[3],
         "original_text": r[4], "source_message_id": r[5], "author_id": r[6],
         "created_at": iso(r[7]), "alternatives": json.loads(r[8]), "constraints": r[9]}
        for r in conn.execute(
            "SELECT revision, context, decision, consequences, original_text, source_message_id,"
            " author_id, created_at, alternatives_json, constraints FROM decision_revisions"
            " WHERE decision_id = :d"
            " ORDER BY revision",
            {"d": decision_id},
        )
    ]  # fmt: skip


def revision_from_message(conn: Connection, message_id: int) -> tuple[int, int] | None:
    """(decision id, revision) created from a message, if any."""
    row = conn.execute(
        "SELECT decision_id, revision FROM decision_revisions WHERE source_message_id = :m",
        {"m": message_id},
    ).fetchone()
    return (int(row[0]), int(row[1])) if row else None


def bind_tasks(
    conn: Connection, project_id: int, decision_id: int, task_ids: Iterable[int]
) -> None:
    conn.executemany(
        "INSERT OR IGNORE INTO decision_tasks (project_id, decision_id, task_id) VALUES (?, ?, ?)",
        [(project_id, decision_id, t) for t in task_ids],
    )


def bound_tasks(conn: Connection, decision_id: int) -> list[int]:
    return [
        int(r[0])
        for r in conn.execute(
            "SELECT b.task_id FROM decision_tasks b JOIN tasks t ON t.id = b.task_id"
            " WHERE b.decision_id = :d ORDER BY t.position",
            {"d": decision_id},
        )
    ]


def decisions_of_task(conn: Connection, task_id: int) -> list[str]:
    return [
        f"ADR-{int(r[0]):04d}"
        for r in conn.execute(
            "SELECT d.number FROM decision_tasks b JOIN decisions d ON d.id = b.decision_id"
            " WHERE b.task_id = :t ORDER BY d.number",
            {"t": task_id},
        )
    ]


def _label_of(conn: Connection, decision_id: int | None) -> str | None:
    if decision_id is None:
        return None
    row = conn.execute("SELECT number FROM decisions WHERE id = :id", {"id": decision_id})
    found = row.fetchone()
    return f"ADR-{int(found[0]):04d}" if found else None


def decision_object(conn: Connection, row: DecisionRow) -> dict[str, Any]:
    """A decision as the log shows it: every revision, and under each the sync receipts it asked
    for (who synced, when, or why the request closed unanswered)."""
    syncs = sync_requests_of(conn, row.id)
    revisions = revisions_of(conn, row.id)
    for revision in revisions:
        revision["sync"] = [s for s in syncs if s["revision"] == revision["revision"]]
    tasks = [
        str(r[0])
        for r in conn.execute(
            "SELECT t.key FROM decision_tasks b JOIN tasks t ON t.id = b.task_id"
            " WHERE b.decision_id = :d ORDER BY t.position",
            {"d": row.id},
        )
    ]
    return {
        "id": row.id,
        "number": row.number,
        "label": row.label,
        "kind": row.kind,
        "title": row.title,
        "status": row.status,
        "revision": row.revision,
        "supersedes": _label_of(conn, row.supersedes),
        "superseded_by": _label_of(conn, row.superseded_by),
        "created_by": row.created_by,
        "accepted_by": row.accepted_by,
        "created_at": iso(row.created_at),
        "updated_at": iso(row.updated_at),
        "archived": bool(row.archived),
        "tasks": tasks,
        "revisions": revisions,
        # The receipts the current revision asked for (the log's summary line).
        "receipts": [
            {"member_id": s["owner_id"], "task": s["task"], "synced": s["synced"],
             "synced_at": s["synced_at"], "closed": s["closed"]}
            for s in syncs
            if s["revision"] == row.revision
        ],
    }  # fmt: skip
