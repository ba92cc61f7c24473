"""SQL of plans, tasks, criteria, verdicts, evidence, command results and task events, and the
digest of a project's task tables (decisions: :mod:`room.store.decisions`; the sync receipts a
decision asks of tasks: :mod:`room.store.sync_requests`).

Plain functions over a connection; the actions layer decides, this module only reads and writes.
Read helpers return small frozen rows or wire-ready dicts (times as ISO 8601 UTC).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from room.rules.entities import iso
from room.rules.tasks import OPEN_STATES, TaskState
from room.store.dialect import Connection
from room.store.projects import lock_project
from room.store.schema_tasks import TASK_TABLES


def insert_row(conn: Connection, table: str, row: dict[str, Any]) -> int:
    """INSERT one row. Table and column names are this module's own literals, never input."""
    columns = ", ".join(row)
    marks = ", ".join(f":{c}" for c in row)
    sql = f"INSERT INTO {table} ({columns}) VALUES ({marks}) RETURNING id"
    return int(conn.execute(sql, row).fetchone()[0])


def next_number(conn: Connection, table: str, column: str, project_id: int) -> int:
    """The next per-project number of ``table`` (a task's position, a decision's number).

    ``max + 1`` is sound while one transaction at a time numbers a project's rows: SQLite's
    whole-file write lock; on PostgreSQL the project's row, locked here until the commit."""
    lock_project(conn, project_id)
    sql = f"SELECT coalesce(max({column}), 0) + 1 FROM {table} WHERE project_id = :p"
    return int(conn.execute(sql, {"p": project_id}).fetchone()[0])


# -- plans --------------------------------------------------------------------------------------


def insert_plan(
    conn: Connection,
    *,
    project_id: int,
    goal: str | None,
    plan: dict[str, Any],
    submitted_by: int,
    started: bool,
    now: float,
) -> tuple[int, int]:
    """Insert a plan with the project's next version; returns (plan id, version)."""
    version = next_number(conn, "plans", "version", project_id)
    plan_json = json.dumps(plan, ensure_ascii=False, sort_keys=True)
    plan_id = insert_row(conn, "plans", {
        "project_id": project_id, "version": version, "goal": goal, "plan_json": plan_json,
        "submitted_by": submitted_by, "created_at": now, "started_at": now if started else None,
        "started_by": submitted_by if started else None,
    })  # fmt: skip
    return plan_id, version


def plans(conn: Connection, project_id: int) -> list[dict[str, Any]]:
    return [
        {"id": r[0], "version": r[1], "goal": r[2], "submitted_by": r[3],
         "created_at": iso(r[4]), "started": r[5] is not None, "started_at": iso(r[5]),
         "started_by": r[6], "tasks": r[7]}
        for r in conn.execute(
            "SELECT p.id, p.version, p.goal, p.submitted_by, p.created_at, p.started_at,"
            " p.started_by, (SELECT count(*) FROM tasks t WHERE t.plan_id = p.id)"
            " FROM plans p WHERE p.project_id = :p ORDER BY p.version",
            {"p": project_id},
        )
    ]  # fmt: skip


def start_plans(
    conn: Connection, project_id: int, plan_id: int | None, by: int, now: float
) -> list[int]:
    """Mark unstarted plans (one, or all of the project) started; returns their ids."""
    rows = conn.execute(
        "UPDATE plans SET started_at = :now, started_by = :by WHERE project_id = :p"
        " AND started_at IS NULL AND (CAST(:plan AS BIGINT) IS NULL OR id = :plan)"
        " RETURNING id",
        {"p": project_id, "plan": plan_id, "by": by, "now": now},
    ).fetchall()
    return sorted(int(r[0]) for r in rows)


# -- tasks --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TaskRow:
    id: int
    project_id: int
    plan_id: int | None
    key: str
    title: str
    position: int
    owner_id: int
    reviewer_id: int | None
    state: TaskState
    revision: int
    sync_prior: TaskState | None
    held: bool
    note: str | None
    assumptions: tuple[str, ...]
    created_at: float
    updated_at: float


_TASK_COLUMNS = (
    "id, project_id, plan_id, key, title, position, owner_id, reviewer_id, state, revision,"
    " sync_prior, held, note, assumptions_json, created_at, updated_at"
)


def _task(row: Sequence[Any]) -> TaskRow:
    return TaskRow(
        id=int(row[0]), project_id=int(row[1]), plan_id=row[2], key=str(row[3]),
        title=str(row[4]), position=int(row[5]), owner_id=int(row[6]), reviewer_id=row[7],
        state=TaskState(row[8]), revision=int(row[9]),
        sync_prior=TaskState(row[10]) if row[10] else None, held=bool(row[11]), note=row[12],
        assumptions=tuple(json.loads(row[13])), created_at=float(row[14]),
        updated_at=float(row[15]),
    )  # fmt: skip


def insert_task(
    conn: Connection,
    *,
    project_id: int,
    plan_id: int | None,
    key: str,
    title: str,
    owner_id: int,
    reviewer_id: int | None,
    state: TaskState,
    held: bool,
    assumptions: Sequence[str],
    now: float,
) -> int:
    return insert_row(conn, "tasks", {
        "project_id": project_id, "plan_id": plan_id, "key": key, "title": title,
        "position": next_number(conn, "tasks", "position", project_id), "owner_id": owner_id,
        "reviewer_id": reviewer_id, "state": str(state), "held": int(held),
        "assumptions_json": json.dumps(list(assumptions), ensure_ascii=False),
        "created_at": now, "updated_at": now,
    })  # fmt: skip


def insert_criteria(conn: Connection, project_id: int, task_id: int, texts: Sequence[str]) -> None:
    conn.executemany(
        "INSERT INTO task_criteria (project_id, task_id, position, text) VALUES (?, ?, ?, ?)",
        [(project_id, task_id, n, text) for n, text in enumerate(texts, start=1)],
    )


def insert_deps(conn: Connection, project_id: int, task_id: int, depends_on: Iterable[int]) -> None:
    conn.executemany(
        "INSERT OR IGNORE INTO task_deps (project_id, task_id, depends_on_id) VALUES (?, ?, ?)",
        [(project_id, task_id, dep) for dep in depends_on],
    )


def get_task(conn: Connection, task_id: int) -> TaskRow | None:
    row = conn.execute(f"SELECT {_TASK_COLUMNS} FROM tasks WHERE id = :id", {"id": task_id})
    found = row.fetchone()
    return _task(found) if found else None


def task_by_key(conn: Connection, project_id: int, key: str) -> TaskRow | None:
    found = conn.execute(
        f"SELECT {_TASK_COLUMNS} FROM tasks WHERE project_id = :p AND key = :k",
        {"p": project_id, "k": key},
    ).fetchone()
    return _task(found) if found else None


def tasks_of(conn: Connection, project_id: int) -> list[TaskRow]:
    return [
        _task(r)
        for r in conn.execute(
            f"SELECT {_TASK_COLUMNS} FROM tasks WHERE project_id = :p ORDER BY position",
            {"p": project_id},
        )
    ]


def task_keys(conn: Connection, project_id: int) -> dict[str, int]:
    return {
        str(r[0]): int(r[1])
        for r in conn.execute("SELECT key, id FROM tasks WHERE project_id = :p", {"p": project_id})
    }


def open_tasks_of(conn: Connection, project_id: int, owner_id: int) -> list[TaskRow]:
    states = sorted(str(s) for s in OPEN_STATES)
    marks = ",".join("?" * len(states))
    return [
        _task(r)
        for r in conn.execute(
            f"SELECT {_TASK_COLUMNS} FROM tasks WHERE project_id = ? AND owner_id = ?"
            f" AND state IN ({marks}) ORDER BY position",
            [project_id, owner_id, *states],
        )
    ]


def update_task(conn: Connection, task_id: int, now: float, **fields: Any) -> None:
    """Set ``fields`` (state, revision, sync_prior, held, note, owner_id, reviewer_id, title)."""
    allowed = {
        "state",
        "revision",
        "sync_prior",
        "held",
        "note",
        "owner_id",
        "reviewer_id",
        "title",
    }
    assert set(fields) <= allowed, fields
    values = {k: (str(v) if isinstance(v, TaskState) else v) for k, v in fields.items()}
    sets = ", ".join(f"{k} = :{k}" for k in values)
    conn.execute(
        f"UPDATE tasks SET {sets}, updated_at = :now WHERE id = :id",
        {**values, "now": now, "id": task_id},
    )


def replace_criteria(conn: Connection, project_id: int, task_id: int, texts: Sequence[str]) -> None:
    """New acceptance criteria for a task nobody has submitted yet (no verdict or evidence
    points at its criteria: ``room.rules.taskedits`` allows this at revision 0 only)."""
    conn.execute("DELETE FROM task_criteria WHERE task_id = :t", {"t": task_id})
    insert_criteria(conn, project_id, task_id, texts)


def replace_deps(
    conn: Connection, project_id: int, task_id: int, depends_on: Iterable[int]
) -> None:
    conn.execute("DELETE FROM task_deps WHERE task_id = :t", {"t": task_id})
    insert_deps(conn, project_id, task_id, depends_on)


def dependency_graph(conn: Connection, project_id: int) -> dict[str, list[str]]:
    """Every task key of the project → the keys it depends on (board order)."""
    graph: dict[str, list[str]] = {key: [] for key in task_keys(conn, project_id)}
    for key, dep in conn.execute(
        "SELECT t.key, d2.key FROM task_deps d JOIN tasks t ON t.id = d.task_id"
        " JOIN tasks d2 ON d2.id = d.depends_on_id WHERE d.project_id = :p"
        " ORDER BY t.position, d2.position",
        {"p": project_id},
    ):
        graph[str(key)].append(str(dep))
    return graph


def set_positions(conn: Connection, task_ids: Sequence[int], now: float) -> None:
    """Board order: the tasks get positions 1, 2, … in the order given."""
    conn.executemany(
        "UPDATE tasks SET position = ?, updated_at = ? WHERE id = ?",
        [(n, now, task_id) for n, task_id in enumerate(task_ids, start=1)],
    )


def clear_reviewer(conn: Connection, project_id: int, member_id: int, now: float) -> None:
    conn.execute(
        "UPDATE tasks SET reviewer_id = NULL, updated_at = :now"
        " WHERE project_id = :p AND reviewer_id = :m",
        {"p": project_id, "m": member_id, "now": now},
    )


def deps_of(conn: Connection, task_id: int) -> list[tuple[str, TaskState]]:
    """(key, state) of the tasks ``task_id`` depends on, in board order."""
    return [
        (str(r[0]), TaskState(r[1]))
        for r in conn.execute(
            "SELECT t.key, t.state FROM task_deps d JOIN tasks t ON t.id = d.depends_on_id"
            " WHERE d.task_id = :id ORDER BY t.position",
            {"id": task_id},
        )
    ]


def dependents_of(conn: Connection, task_id: int) -> list[int]:
    return [
        int(r[0])
        for r in conn.execute(
            "SELECT d.task_id FROM task_deps d JOIN tasks t ON t.id = d.task_id"
            " WHERE d.depends_on_id = :id ORDER BY t.position",
            {"id": task_id},
        )
    ]


def criteria_of(conn: Connection, task_id: int) -> list[tuple[int, int, str]]:
    """(criterion id, 1-based position, text) in order."""
    return [
        (int(r[0]), int(r[1]), str(r[2]))
        for r in conn.execute(
            "SELECT id, position, text FROM task_criteria WHERE task_id = :t ORDER BY position",
            {"t": task_id},
        )
    ]


@dataclass(frozen=True, slots=True)
class Verdict:
    review_id: int
    criterion_id: int
    revision: int
    passed: bool
    note: str
    reviewer_id: int | None
    created_at: float


def latest_verdicts(conn: Connection, task_id: int) -> dict[int, Verdict]:
    """The latest verdict of each criterion of a task."""
    out: dict[int, Verdict] = {}
    for r in conn.execute(
        "SELECT id, criterion_id, revision, passed, note, reviewer_id, created_at"
        " FROM task_reviews WHERE task_id = :t ORDER BY id",
        {"t": task_id},
    ):
        out[int(r[1])] = Verdict(
            int(r[0]), int(r[1]), int(r[2]), bool(r[3]), str(r[4]), r[5], float(r[6])
        )
    return out


def insert_verdict(
    conn: Connection,
    *,
    project_id: int,
    task_id: int,
    criterion_id: int,
    revision: int,
    passed: bool,
    note: str,
    reviewer_id: int,
    now: float,
) -> int:
    return insert_row(conn, "task_reviews", {
        "project_id": project_id, "task_id": task_id, "criterion_id": criterion_id,
        "revision": revision, "passed": int(passed), "note": note, "reviewer_id": reviewer_id,
        "created_at": now,
    })  # fmt: skip


# -- evidence and command results -------------------------------------------------------------


def insert_evidence(
    conn: Connection,
    *,
    project_id: int,
    task_id: int,
    revision: int,
    kind: str,
    added_by: int | None,
    now: float,
    review_id: int | None = None,
    path: str | None = None,
    real_path: str | None = None,
    size: int | None = None,
    sha256: str | None = None,
    command_id: int | None = None,
    message_id: int | None = None,
    note: str | None = None,
) -> int:
    return insert_row(conn, "evidence", {
        "project_id": project_id, "task_id": task_id, "revision": revision,
        "review_id": review_id, "kind": kind, "path": path, "real_path": real_path, "size": size,
        "sha256": sha256, "command_id": command_id, "message_id": message_id, "note": note,
        "added_by": added_by, "created_at": now,
    })  # fmt: skip


def evidence_of(conn: Connection, task_id: int) -> list[dict[str, Any]]:
    out = []
    for r in conn.execute(
        "SELECT e.id, e.revision, e.review_id, e.kind, e.path, e.real_path, e.size, e.sha256,"
        " e.command_id, e.message_id, e.note, e.added_by, e.created_at, m.seq, c.command,"
        " c.exit_code, c.duration_ms, c.output_sha256, c.output_tail, c.member_id,"
        " r.criterion_id FROM evidence e"
        " LEFT JOIN messages m ON m.id = e.message_id"
        " LEFT JOIN command_results c ON c.id = e.command_id"
        " LEFT JOIN task_reviews r ON r.id = e.review_id"
        " WHERE e.task_id = :t ORDER BY e.id",
        {"t": task_id},
    ):
        item: dict[str, Any] = {
            "id": r[0],
            "revision": r[1],
            "review_id": r[2],
            "criterion_id": r[20],
            "kind": r[3],
            "added_by": r[11],
            "created_at": iso(r[12]),
        }
        if r[3] == "artifact":
            item |= {"path": r[4], "real_path": r[5], "size": r[6], "sha256": r[7]}
        elif r[3] == "message":
            item |= {"message_id": r[9], "seq": r[13]}
        elif r[3] == "command":
            item["command"] = {
                "id": r[8],
                "command": r[14],
                "exit_code": r[15],
                "duration_ms": r[16],
                "output_sha256": r[17],
                "output_tail": r[18],
                "recorded_for": r[19],
            }
        else:
            item["note"] = r[10]
        out.append(item)
    return out


def insert_command_result(
    conn: Connection,
    *,
    project_id: int,
    member_id: int | None,
    turn_id: int | None,
    command: str,
    exit_code: int,
    duration_ms: int,
    output_bytes: int,
    output_sha256: str,
    output_tail: str,
    now: float,
) -> int:
    return insert_row(conn, "command_results", {
        "project_id": project_id, "member_id": member_id, "turn_id": turn_id,
        "command": command, "exit_code": exit_code, "duration_ms": duration_ms,
        "output_bytes": output_bytes, "output_sha256": output_sha256, "output_tail": output_tail,
        "created_at": now,
    })  # fmt: skip


def command_owner(conn: Connection, command_id: int) -> tuple[int, int | None] | None:
    """(project id, member whose runtime recorded it) of a command result."""
    row = conn.execute(
        "SELECT project_id, member_id FROM command_results WHERE id = :id", {"id": command_id}
    ).fetchone()
    return (int(row[0]), row[1]) if row else None


# -- task history -------------------------------------------------------------------------------


def insert_task_event(
    conn: Connection,
    *,
    project_id: int,
    task_id: int,
    event: str,
    from_state: str | None,
    to_state: str,
    revision: int,
    actor_kind: str,
    actor_id: int | None,
    note: str | None,
    now: float,
) -> None:
    insert_row(conn, "task_events", {
        "project_id": project_id, "task_id": task_id, "event": event, "from_state": from_state,
        "to_state": to_state, "revision": revision, "actor_kind": actor_kind,
        "actor_id": actor_id, "note": note, "created_at": now,
    })  # fmt: skip


def task_events(conn: Connection, task_id: int) -> list[dict[str, Any]]:
    return [
        {"event": r[0], "from": r[1], "to": r[2], "revision": r[3], "actor_kind": r[4],
         "actor_id": r[5], "note": r[6], "at": iso(r[7])}
        for r in conn.execute(
            "SELECT event, from_state, to_state, revision, actor_kind, actor_id, note, created_at"
            " FROM task_events WHERE task_id = :t ORDER BY id",
            {"t": task_id},
        )
    ]  # fmt: skip


# -- snapshots ----------------------------------------------------------------------------------

_DIGEST_ORDER = {"task_deps": "task_id, depends_on_id", "decision_tasks": "decision_id, task_id"}
# The link tables' columns in the order a snapshot has always hashed them (migration 0007 moved
# their key columns first; an older trash snapshot must still verify).
_DIGEST_COLUMNS = {
    "task_deps": "project_id, task_id, depends_on_id",
    "decision_tasks": "project_id, decision_id, task_id",
}
# Columns added by later migrations, with their defaults: a value still at its default is left
# out of the digest, so a project trashed before the column existed still restores.
_ADDED_LATER: dict[str, dict[str, Any]] = {
    "decisions": {"archived": 0},
    "decision_revisions": {"alternatives_json": "[]", "constraints": ""},
}


def digest_rows(conn: Connection, project_id: int) -> dict[str, dict[str, Any]]:
    """Row count and SHA-256 of each task table's rows of a project, in a fixed order."""
    out: dict[str, dict[str, Any]] = {}
    for table in TASK_TABLES:
        order = _DIGEST_ORDER.get(table, "id")
        columns = _DIGEST_COLUMNS.get(table, "*")
        later = _ADDED_LATER.get(table, {})
        digest = hashlib.sha256()
        count = 0
        cursor = conn.execute(
            f"SELECT {columns} FROM {table} WHERE project_id = :p ORDER BY {order}",
            {"p": project_id},
        )
        names = [d[0] for d in cursor.description]
        for row in cursor:
            values = [
                v for name, v in zip(names, row, strict=True)
                if name not in later or v != later[name]
            ]  # fmt: skip
            digest.update(json.dumps(values, ensure_ascii=False).encode())
            digest.update(b"\n")
            count += 1
        out[table] = {"count": count, "sha256": digest.hexdigest()}
    return out
