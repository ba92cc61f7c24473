"""Writes of the leases under which nodes run projects' agent turns, and of projects' home
nodes (room.rules.leases, room.store.leases; docs/cluster.md "Agents across nodes").

Adopting another node's lapsed lease settles, in the same transaction, the turns that node left
``running`` in the project (as a restart settles a crashed server's: from each session's own
record), so the member may run again at once; whatever that node still tries to write for them
is refused by the fence.
"""

from __future__ import annotations

from room.actions import research as research_actions
from room.actions.deliveries import set_deliveries
from room.actions.recovery import Report, settle_turn
from room.errors import NotFoundError
from room.rules.leases import Claim, Lease
from room.rules.ledger import DeliveryState, Reason
from room.services import Services
from room.store import Tx
from room.store import audit as audit_store
from room.store import leases as leases_store
from room.store import projects as projects_store
from room.store.dialect import Connection

LEASE_ADOPTED = "the node running it lost the project's lease"
TURN_UNHEARD = "the node opening it lost the database before it heard the turn was opened"


def take(
    conn: Connection,
    tx: Tx,
    project_id: int,
    lease_secs: float,
    *,
    floating: bool = False,
) -> tuple[Claim, Lease | None]:
    """Take, renew or adopt the project's lease for this node (``tx.node``). Refused with no
    lease when another node is the project's home (turns never start elsewhere); a project that
    names no home gets this node as its home. A ``floating`` project (its workspace in the
    folder the nodes share, room.actions.workspaces.floating) has no home: the lease alone
    says which node works in it."""
    assert tx.node is not None, "a lease is a node's"
    if not floating:
        home = leases_store.home_of(conn, project_id)
        if home is None:
            leases_store.set_home(conn, project_id, tx.node)
        elif home != tx.node:
            return Claim.REFUSED, None
    outcome, lease = leases_store.acquire(conn, project_id, tx.node, tx.now, lease_secs)
    if outcome is Claim.ADOPT:
        report = Report()
        for turn_id, project, member_id, side_effects in _others_running(conn, project_id, tx.node):
            settle_turn(
                conn, tx, report, turn_id, project, member_id, side_effects, error=LEASE_ADOPTED
            )
        # Research runs the old holder ran wait for a person, as after its restart.
        research_actions.settle_adopted(conn, tx, project_id, tx.node)
    return outcome, lease


def _others_running(
    conn: Connection, project_id: int, node: str
) -> list[tuple[int, int, int, int]]:
    return [
        (int(r[0]), int(r[1]), int(r[2]), int(r[3]))
        for r in conn.execute(
            "SELECT id, project_id, member_id, side_effects FROM turns WHERE state = 'running'"
            " AND project_id = ? AND (owner IS NULL OR owner != ?) ORDER BY id",
            (project_id, node),
        )
    ]


async def settle_unheard(core: Services, turn_ids: list[int]) -> list[int]:
    """Settle turns the database says run on this node, which it does not run: it lost the
    database after the commit that opened them and before it heard of it (the opening failed
    for it, "the write may not have been saved"). Settled as a restart settles a crashed
    node's (``interrupted``, their deliveries ``pending`` again), each only if it is still
    ``running`` here. Returns the members whose turns were settled.

    The turns' projects are read first and declared (a turn's project never changes): the
    batch locks their rows before the job locks a turn's (``still_running_at``) and posts the
    settling's notice, in the order of a lease's adoption (``hold``: the project, then the
    turns it settles). Undeclared, the job took the turn's row, then the project's at the
    notice's seq, and deadlocked with an adoption on another node."""
    projects = await core.db.read(lambda conn: leases_store.projects_of_turns(conn, turn_ids))

    def job(conn: Connection, tx: Tx) -> list[int]:
        assert tx.node is not None
        report = Report()
        members: list[int] = []
        for turn_id in turn_ids:
            found = leases_store.still_running_at(conn, turn_id, tx.node)
            if found is None:  # ended meanwhile
                continue
            turn, project, member_id, side_effects = found
            settle_turn(
                conn, tx, report, turn, project, member_id, side_effects, error=TURN_UNHEARD
            )
            members.append(member_id)
        return members

    return await core.db.write(job, locks=projects)


async def hold(
    core: Services, project_id: int, lease_secs: float, *, floating: bool = False
) -> tuple[Claim, Lease | None]:
    # The project declared: the batch locks its row before the lease's (take), the order of a
    # turn's fenced write (the batch's project lock, then check_fence). Taking the lease's row
    # first and the project's at the adoption's notice (its seq) deadlocked with such a write.
    return await core.db.submit(
        lambda conn, tx: take(conn, tx, project_id, lease_secs, floating=floating),
        locks=(project_id,),
    )


async def renew(core: Services, project_ids: list[int], lease_secs: float) -> list[int]:
    """Renew this node's leases of these projects; returns those it still holds."""

    def job(conn: Connection, tx: Tx) -> list[int]:
        assert tx.node is not None
        return leases_store.renew(conn, tx.node, project_ids, tx.now, lease_secs)

    return await core.db.write(job)


def mark_home_offline(conn: Connection, tx: Tx, project_id: int) -> int:
    """The project's home node is not heard from: its in-process agents' pending deliveries
    say so (``home_node_offline``; they stay ``pending``). Returns how many rows changed."""
    ids = [
        int(r[0])
        for r in conn.execute(
            "SELECT d.id FROM deliveries d JOIN members m ON m.id = d.recipient_id"
            " WHERE d.project_id = ? AND d.state = 'pending' AND m.kind = 'agent'"
            " AND m.driver = 'builtin'"
            " AND (d.reason_code IS NULL OR d.reason_code != 'home_node_offline')",
            (project_id,),
        )
    ]
    set_deliveries(
        conn,
        tx,
        ids,
        DeliveryState.PENDING,
        code=Reason.HOME_NODE_OFFLINE,
        allowed_from=(DeliveryState.PENDING,),
    )
    return len(ids)


async def home_offline(core: Services, project_id: int) -> int:
    return await core.db.write(
        lambda conn, tx: mark_home_offline(conn, tx, project_id), locks=(project_id,)
    )


def move_home(
    conn: Connection, tx: Tx, project: str, node: str, *, by: int | None = None
) -> tuple[int, str | None]:
    """Name ``node`` the home of ``project`` (its id or name); returns the project's id and the
    home it had, and audits the move (``by``: the server admin's user id; None: the CLI). The
    new home's next sweep (room.agents.leasing) dispatches the project's waiting deliveries;
    the old home finishes the turn it runs and opens no other, and the new home adopts the
    lease once it lapses (the fence then refuses whatever the old one still writes)."""
    found = projects_store.find(conn, project)
    if found is None:
        raise NotFoundError(f"no project {project!r}", code="no_project")
    before = leases_store.home_of(conn, found.id)
    leases_store.set_home(conn, found.id, node)
    audit_store.record(
        conn, now=tx.now, actor_kind="operator", actor_id=None, project_id=found.id,
        action="project.move_home", outcome="ok",
        detail={"node": node, "was": before, "by_user": by},
    )  # fmt: skip
    return found.id, before
