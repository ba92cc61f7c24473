"""Stops confirmed from the turns' own rows (docs/cluster.md, "Agents across nodes").

On one server a stop is confirmed by the sessions that ran the turns. In a cluster a turn may
run on another node (the project's home, or whichever holds its lease): the stop request rides
the bus there, and the stop is confirmed here only once the database shows none of the turns
it asked to stop still ``running`` — the row is settled by the node that ran it (its turn
ended), or by the node that adopted the project's lease. Until then the answer says which node
is still running what.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from functools import partial

from room.actions.notices import post_notice
from room.rules import notices
from room.services import Services
from room.store import Tx
from room.store.dialect import Connection

POLL_SECS = 0.1  # how often the rows are read again while waiting
CONFIRM_LATER_SECS = 600.0  # how long the node asked reads an unconfirmed stop's turn itself
CONFIRM_LATER_POLL_SECS = 1.0  # and how often (past that, the leases' sweeps finish it)
STOP_OP = "stop"  # the member operation whose notice a pending stop posts


@dataclass(frozen=True, slots=True)
class StillRunning:
    """A turn the stop asked to end whose row still says ``running``."""

    turn_id: int
    member_id: int
    node: str | None  # the node running it (``turns.owner``)

    def wire(self) -> dict[str, object]:
        return {"turn_id": self.turn_id, "member_id": self.member_id, "node": self.node}


def running_in(
    conn: Connection, project_id: int, member_id: int | None = None
) -> list[StillRunning]:
    """The project's (or one member's) turns whose rows say ``running``, on any node."""
    sql = "SELECT id, member_id, owner FROM turns WHERE project_id = :p AND state = 'running'"
    if member_id is not None:
        sql += " AND member_id = :m"
    return [
        StillRunning(int(r[0]), int(r[1]), None if r[2] is None else str(r[2]))
        for r in conn.execute(sql + " ORDER BY id", {"p": project_id, "m": member_id})
    ]


async def settled(
    core: Services,
    project_id: int,
    member_id: int | None,
    wait_secs: float,
    *,
    poll_secs: float = POLL_SECS,
) -> list[StillRunning]:
    """Wait up to ``wait_secs`` for the project's (or the member's) running turns to be
    settled in the database, wherever they run (read every ``poll_secs``); returns those still
    running then (empty: the stop is confirmed everywhere)."""
    deadline = time.monotonic() + wait_secs
    while True:
        left = await core.db.read(lambda conn: running_in(conn, project_id, member_id))
        if not left or time.monotonic() >= deadline:
            return left
        await asyncio.sleep(min(poll_secs, max(0.0, deadline - time.monotonic())))


# -- member stops not confirmed when answered -------------------------------------------------------


def record_pending(
    conn: Connection, tx: Tx, left: list[StillRunning], *, project_id: int, by: str, handle: str
) -> list[int]:
    """A member's stop answered unconfirmed: its notice is owed once ``left``'s turns are
    settled (:func:`finish_pending`), recorded in the same transaction as the answer's audit.
    Returns the rows' ids."""
    ids = []
    for still in left:
        row = conn.execute(
            "INSERT INTO member_stops (project_id, member_id, turn_id, by_name, handle,"
            " asked_on, asked_at) VALUES (:p, :m, :t, :by, :h, :node, :now) RETURNING id",
            {"p": project_id, "m": still.member_id, "t": still.turn_id, "by": by,
             "h": handle, "node": tx.node, "now": tx.now},
        ).fetchone()  # fmt: skip
        ids.append(int(row[0]))
    return ids


def pending(conn: Connection, stop_ids: list[int]) -> list[int]:
    """Those of ``stop_ids`` whose notices are still owed."""
    if not stop_ids:
        return []
    marks = ", ".join(f":s{i}" for i in range(len(stop_ids)))
    params = {f"s{i}": s for i, s in enumerate(stop_ids)}
    rows = conn.execute(f"SELECT id FROM member_stops WHERE id IN ({marks})", params)
    return sorted(int(r[0]) for r in rows)


def owed_running_at(conn: Connection, node: str) -> list[int]:
    """The members whose stops are owed (answered unconfirmed) while their turns still run on
    ``node``: that node stops them itself (room.agents.leasing), whether or not the hint that
    asked it ever came."""
    rows = conn.execute(
        "SELECT DISTINCT s.member_id FROM member_stops s JOIN turns t ON t.id = s.turn_id"
        " WHERE t.state = 'running' AND t.owner = :node ORDER BY s.member_id",
        {"node": node},
    )
    return [int(r[0]) for r in rows]


def pending_settled(conn: Connection, project_id: int | None = None) -> list[tuple[int, int]]:
    """``(stop, project)`` of the pending member stops whose turns are settled now."""
    sql = (
        "SELECT s.id, s.project_id FROM member_stops s WHERE NOT EXISTS"
        " (SELECT 1 FROM turns t WHERE t.id = s.turn_id AND t.state = 'running')"
    )
    if project_id is not None:
        sql += " AND s.project_id = :p"
    return [(int(r[0]), int(r[1])) for r in conn.execute(sql + " ORDER BY s.id", {"p": project_id})]


def finish_pending(conn: Connection, tx: Tx, stop_id: int) -> bool:
    """Post the notice of the pending stop ``stop_id`` if its turn is settled, deleting its row
    in the same transaction (whoever deletes it posts; another node's attempt finds no row).
    False when it is gone or its turn still runs."""
    row = conn.execute(
        "DELETE FROM member_stops WHERE id = :s AND NOT EXISTS (SELECT 1 FROM turns t"
        " WHERE t.id = member_stops.turn_id AND t.state = 'running')"
        " RETURNING project_id, member_id, turn_id, by_name, handle, asked_on",
        {"s": stop_id},
    ).fetchone()
    if row is None:
        return False
    project_id, member_id, turn_id, by, handle, asked_on = row
    notice = notices.member_op(STOP_OP, str(by), str(handle))
    meta = {"member_op": STOP_OP, "member_id": int(member_id), "confirmed_later": True,
            "turn_id": int(turn_id), "asked_on": asked_on}  # fmt: skip
    post_notice(conn, tx, int(project_id), notice, meta)
    return True


async def finish_settled(core: Services, project_id: int | None = None) -> int:
    """Post the notices of the pending member stops (of one project, or all) whose turns are
    settled; returns how many this node posted."""
    found = await core.db.read(lambda conn: pending_settled(conn, project_id))
    posted = 0
    for stop_id, project in found:
        # The project's row locked first, as every notice's seq is taken.
        if await core.db.submit(partial(_finish, stop_id), locks=(project,)):
            posted += 1
    return posted


def _finish(stop_id: int, conn: Connection, tx: Tx) -> bool:
    return finish_pending(conn, tx, stop_id)
