"""SQL of task attempts (``task_attempts``, migration 0006): one row per worktree made for an
attempt at a task. Plain functions over a connection; the actions decide."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from room.rules.entities import iso
from room.store.dialect import Connection, locks_rows

_COLUMNS = (
    "id, project_id, task_id, attempt, member_id, branch, path, base, fork_point, state, "
    "created_at, ended_at"
)


@dataclass(frozen=True, slots=True)
class AttemptRow:
    id: int
    project_id: int
    task_id: int
    attempt: int
    member_id: int | None
    branch: str
    path: str
    base: str
    fork_point: str
    state: str  # open | merged | kept
    created_at: float
    ended_at: float | None

    def to_wire(self) -> dict[str, Any]:
        """The task object's ``attempt`` (``diff_stat`` is added by the HTTP answers)."""
        return {
            "attempt": self.attempt,
            "branch": self.branch,
            "path": self.path,
            "base": self.base,
            "state": self.state,
            "member_id": self.member_id,
            "created_at": iso(self.created_at),
            "ended_at": iso(self.ended_at),
            "diff_stat": None,
        }


def insert(
    conn: Connection,
    *,
    project_id: int,
    task_id: int,
    attempt: int,
    member_id: int | None,
    branch: str,
    path: str,
    base: str,
    fork_point: str,
    now: float,
) -> int:
    cur = conn.execute(
        "INSERT INTO task_attempts (project_id, task_id, attempt, member_id, branch, path, base,"
        " fork_point, state, created_at) VALUES (:project_id, :task_id, :attempt, :member_id,"
        " :branch, :path, :base, :fork_point, 'open', :now) RETURNING id",
        {"project_id": project_id, "task_id": task_id, "attempt": attempt,
         "member_id": member_id, "branch": branch, "path": path, "base": base,
         "fork_point": fork_point, "now": now},
    )  # fmt: skip
    return int(cur.fetchone()[0])


def latest(conn: Connection, task_id: int) -> AttemptRow | None:
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM task_attempts WHERE task_id = :t ORDER BY attempt DESC LIMIT 1",
        {"t": task_id},
    ).fetchone()
    return AttemptRow(*row) if row else None


def next_number(conn: Connection, task_id: int) -> int:
    """The task's next attempt number: ``max + 1`` under the task's row lock on PostgreSQL
    (SQLite's write transaction holds the whole file). ``FOR NO KEY UPDATE``: two numberings
    wait for each other, the foreign-key checks of rows naming the task (its events, its
    evidence) do not wait for either."""
    if locks_rows(conn):
        conn.execute("SELECT id FROM tasks WHERE id = ? FOR NO KEY UPDATE", (task_id,)).fetchall()
    row = conn.execute(
        "SELECT COALESCE(MAX(attempt), 0) + 1 FROM task_attempts WHERE task_id = :t", {"t": task_id}
    ).fetchone()
    return int(row[0])


def of_project(conn: Connection, project_id: int) -> list[AttemptRow]:
    return [
        AttemptRow(*r)
        for r in conn.execute(
            f"SELECT {_COLUMNS} FROM task_attempts WHERE project_id = :p ORDER BY id",
            {"p": project_id},
        )
    ]


def current_for_member(conn: Connection, member_id: int) -> tuple[AttemptRow, str] | None:
    """The member's latest open attempt of a task it owns that is in progress, with the key."""
    row = conn.execute(
        f"SELECT {', '.join('a.' + c.strip() for c in _COLUMNS.split(','))}, t.key"
        " FROM task_attempts a JOIN tasks t ON t.id = a.task_id"
        " WHERE a.member_id = :m AND a.state = 'open' AND t.state = 'in_progress'"
        " AND t.owner_id = :m ORDER BY a.created_at DESC, a.id DESC LIMIT 1",
        {"m": member_id},
    ).fetchone()
    return (AttemptRow(*row[:-1]), str(row[-1])) if row else None


def end(conn: Connection, attempt_id: int, state: str, now: float) -> None:
    conn.execute(
        "UPDATE task_attempts SET state = :s, ended_at = :now WHERE id = :id",
        {"s": state, "now": now, "id": attempt_id},
    )


def keep_open(
    conn: Connection,
    *,
    task_id: int | None = None,
    member_id: int | None = None,
    now: float,
) -> int:
    """Mark the open attempts of a task (or of a member) ``kept``; returns how many."""
    args: dict[str, Any] = {"x": task_id if task_id is not None else member_id}
    where = "task_id = :x" if task_id is not None else "member_id = :x"
    cur = conn.execute(
        f"UPDATE task_attempts SET state = 'kept', ended_at = :now WHERE state = 'open' AND {where}",
        {**args, "now": now},
    )
    return cur.rowcount


def delete_project(conn: Connection, project_id: int) -> int:
    return conn.execute(
        "DELETE FROM task_attempts WHERE project_id = :p", {"p": project_id}
    ).rowcount
