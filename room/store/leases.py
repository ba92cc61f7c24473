"""SQL of the leases under which nodes run projects' agent turns, the fence every write of a
turn checks, and projects' home nodes (room.rules.leases, docs/cluster.md "Agents across nodes").

The fence rides with the code that writes: a turn runs with :data:`FENCE` set (a context
variable, so the tasks the turn starts carry it too), :meth:`room.store.Database.submit` takes
it with the job, and the writer checks it in the job's own transaction before the job runs
(:func:`check_fence`). On PostgreSQL the check locks the lease row (``FOR SHARE``), so a node
adopting the lease waits for that transaction and a write is never half before, half after an
adoption.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from room.errors import LeaseLostError
from room.rules.leases import Claim, Lease, claim, fenced, next_token
from room.store.dialect import Connection, locks_rows


@dataclass(frozen=True, slots=True)
class Fence:
    """The lease a turn runs under: its project and the token it was opened with."""

    project_id: int
    token: int


@dataclass(slots=True)
class LeaseCounts:
    """A node's lease troubles since its start (``/metrics``, docs/cluster.md): leases it found
    adopted by another node (at a renewal, or when a turn's opening was refused), turns'
    writes the fence refused (``lease_lost``), and the times a turn or a research run could not
    open because another node held its shared workspace's lock (room.infra.wslock)."""

    lost: int = 0
    refused: int = 0
    workspace_refused: int = 0


#: The fence of the turn the current task runs for (None: not a turn's write).
FENCE: ContextVar[Fence | None] = ContextVar("room_fence", default=None)


def lease_of(conn: Connection, project_id: int, *, lock: str = "") -> Lease | None:
    """The project's lease; ``lock`` (``"UPDATE"`` or ``"SHARE"``) locks its row on PostgreSQL
    until the transaction ends (SQLite's write transaction holds the whole file)."""
    suffix = f" FOR {lock}" if lock and locks_rows(conn) else ""
    row = conn.execute(
        "SELECT holder, token, expires_at FROM leases WHERE project_id = ?" + suffix,
        (project_id,),
    ).fetchone()
    return None if row is None else Lease(str(row[0]), int(row[1]), float(row[2]))


def acquire(
    conn: Connection, project_id: int, node: str, now: float, lease_secs: float
) -> tuple[Claim, Lease | None]:
    """Take, renew or adopt the project's lease for ``node`` (room.rules.leases.claim); returns
    what happened and the lease as it now stands (the other node's when refused)."""
    # The row first, so that two nodes taking a new lease meet on its lock, not on the key.
    conn.execute(
        "INSERT INTO leases (project_id, holder, token, expires_at, taken_at)"
        " VALUES (?, ?, 0, 0, ?) ON CONFLICT (project_id) DO NOTHING",
        (project_id, node, now),
    )
    current = lease_of(conn, project_id, lock="UPDATE")
    if current is not None and current.token == 0:
        current = None  # the placeholder just written: nobody held it yet
    outcome = claim(current, node, now)
    if outcome is Claim.REFUSED:
        return outcome, current
    token = next_token(current, outcome)
    if outcome is Claim.RENEW:
        conn.execute(
            "UPDATE leases SET expires_at = ? WHERE project_id = ?", (now + lease_secs, project_id)
        )
    else:
        conn.execute(
            "UPDATE leases SET holder = ?, token = ?, expires_at = ?, taken_at = ?"
            " WHERE project_id = ?",
            (node, token, now + lease_secs, now, project_id),
        )
    return outcome, Lease(node, token, now + lease_secs)


def renew(
    conn: Connection, node: str, project_ids: list[int], now: float, lease_secs: float
) -> list[int]:
    """Push out the expiry of ``node``'s leases of these projects; returns the projects whose
    lease it still holds (one adopted meanwhile is not renewed: it is lost)."""
    held = []
    for project_id in project_ids:
        row = conn.execute(
            "UPDATE leases SET expires_at = :e WHERE project_id = :p AND holder = :n"
            " RETURNING project_id",
            {"e": now + lease_secs, "p": project_id, "n": node},
        ).fetchone()
        if row is not None:
            held.append(project_id)
    return held


def check_fence(conn: Connection, fence: Fence) -> None:
    """Refuse the write (:class:`LeaseLostError`) unless the project's lease still holds the
    token the turn runs under. Called by the writer inside the job's transaction."""
    lease = lease_of(conn, fence.project_id, lock="SHARE")
    if not fenced(lease, fence.token):
        raise LeaseLostError(
            "this node no longer holds the project's lease for agent turns: the write was"
            " refused (another node adopted the lease)",
            project_id=fence.project_id,
            token=fence.token,
            holder=None if lease is None else lease.holder,
            current_token=None if lease is None else lease.token,
        )


def delete(conn: Connection, project_id: int) -> int:
    return int(conn.execute("DELETE FROM leases WHERE project_id = ?", (project_id,)).rowcount)


def home_of(conn: Connection, project_id: int) -> str | None:
    row = conn.execute("SELECT home_node FROM projects WHERE id = ?", (project_id,)).fetchone()
    return None if row is None or row[0] is None else str(row[0])


def set_home(conn: Connection, project_id: int, node: str | None) -> bool:
    """Name the project's home node; False when there is no such project."""
    cur = conn.execute(
        "UPDATE projects SET home_node = ? WHERE id = ? RETURNING id", (node, project_id)
    )
    return cur.fetchone() is not None


def waiting_work(conn: Connection) -> list[tuple[int, int, str | None, bool]]:
    """(project, member, its home node, whether every row already says ``home_node_offline``)
    of the in-process agents with pending deliveries in active projects, not held back by a
    tripped brake (those wait for a person, who wakes them by clearing it)."""
    return [
        (int(r[0]), int(r[1]), None if r[2] is None else str(r[2]), bool(r[3]))
        for r in conn.execute(
            "SELECT d.project_id, d.recipient_id, p.home_node,"
            " min(CASE WHEN d.reason_code = 'home_node_offline' THEN 1 ELSE 0 END)"
            " FROM deliveries d JOIN projects p ON p.id = d.project_id"
            " JOIN members m ON m.id = d.recipient_id"
            " WHERE d.state = 'pending' AND p.state = 'active' AND m.kind = 'agent'"
            " AND m.driver = 'builtin'"
            " AND (d.reason_code IS NULL OR d.reason_code != 'loop_brake')"
            " AND NOT EXISTS (SELECT 1 FROM project_brakes b WHERE b.project_id = d.project_id"
            " AND b.tripped IS NOT NULL)"
            " GROUP BY d.project_id, d.recipient_id, p.home_node"
        )
    ]


def orphaned_at(conn: Connection, node: str) -> list[tuple[int, str | None]]:
    """(project, its home node) of the projects with turns or research running on another node
    than ``node``. Those whose home is ``node`` (moved here while they ran), and those whose
    workspace is shared (any node may adopt): this node adopts their lease once it lapses,
    which settles them."""
    return [
        (int(r[0]), None if r[1] is None else str(r[1]))
        for r in conn.execute(
            "SELECT t.project_id, p.home_node FROM turns t JOIN projects p ON p.id = t.project_id"
            " WHERE t.state = 'running' AND t.owner IS NOT NULL AND t.owner != ?"
            " UNION SELECT r.project_id, p.home_node FROM research_runs r JOIN projects p"
            " ON p.id = r.project_id WHERE r.state = 'running'"
            " AND r.owner IS NOT NULL AND r.owner != ? ORDER BY 1",
            (node, node),
        )
    ]


def homes_by_node(conn: Connection, listed: int = 20) -> dict[str, dict[str, Any]]:
    """The live projects each node is home of (``""``: no home yet): how many, and the first
    ``listed`` of them by id (``{"id", "name"}``), for the operator's reports."""
    found: dict[str, dict[str, Any]] = {}
    for node, count in conn.execute(
        "SELECT coalesce(home_node, ''), count(*) FROM projects WHERE state != 'purged'"
        " GROUP BY home_node ORDER BY 1"
    ):
        found[str(node)] = {"count": int(count), "projects": []}
    for node, project_id, name in conn.execute(
        "SELECT home, id, name FROM (SELECT coalesce(home_node, '') AS home, id, name,"
        " row_number() OVER (PARTITION BY home_node ORDER BY id) AS n FROM projects"
        " WHERE state != 'purged') listed WHERE n <= ? ORDER BY home, id",
        (listed,),
    ):
        found[str(node)]["projects"].append({"id": int(project_id), "name": str(name)})
    return found


def running_by_node(conn: Connection) -> dict[str, int]:
    """Running turns by the node running them (``""``: none named, a SQLite server's)."""
    return {
        str(owner): int(count)
        for owner, count in conn.execute(
            "SELECT coalesce(owner, ''), count(*) FROM turns WHERE state = 'running'"
            " GROUP BY owner ORDER BY 1"
        )
    }


def running_at(conn: Connection, node: str) -> list[tuple[int, int]]:
    """(turn, member) of the turns the database says run on ``node`` (``turns.owner``)."""
    return [
        (int(r[0]), int(r[1]))
        for r in conn.execute(
            "SELECT id, member_id FROM turns WHERE state = 'running' AND owner = ? ORDER BY id",
            (node,),
        )
    ]


def projects_of_turns(conn: Connection, turn_ids: Sequence[int]) -> tuple[int, ...]:
    """The projects of these turns, in id order (to declare them before settling the turns)."""
    found: set[int] = set()
    ids = list(turn_ids)
    for at in range(0, len(ids), 500):
        part = ids[at : at + 500]
        marks = ", ".join("?" * len(part))
        rows = conn.execute(f"SELECT DISTINCT project_id FROM turns WHERE id IN ({marks})", part)
        found.update(int(r[0]) for r in rows)
    return tuple(sorted(found))


def still_running_at(conn: Connection, turn_id: int, node: str) -> tuple[int, int, int, int] | None:
    """(turn, project, member, side effects) of ``turn_id`` if it is still ``running`` on
    ``node``, its row locked on PostgreSQL until the transaction ends; else None.
    ``FOR NO KEY UPDATE``: the settling updates the turn, never deletes it, and rows naming it
    (its checkpoints, its transcript) are not held up at their foreign-key checks."""
    lock = " FOR NO KEY UPDATE" if locks_rows(conn) else ""
    row = conn.execute(
        "SELECT id, project_id, member_id, side_effects FROM turns"
        " WHERE id = ? AND state = 'running' AND owner = ?" + lock,
        (turn_id, node),
    ).fetchone()
    return None if row is None else (int(row[0]), int(row[1]), int(row[2]), int(row[3]))
