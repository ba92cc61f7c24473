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

from room.services import Services
from room.store.dialect import Connection

POLL_SECS = 0.1  # how often the rows are read again while waiting
CONFIRM_LATER_SECS = 600.0  # how long an unconfirmed member stop waits to post its notice
CONFIRM_LATER_POLL_SECS = 1.0  # and how often it reads the row meanwhile


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
