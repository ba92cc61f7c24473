"""Leases on running a project's agent turns, their fencing token, and home nodes
(room.rules.leases, room.store.leases, room.actions.leases; docs/cluster.md "Agents across
nodes"): the pure rules, then two writers (two nodes) on one store, once per backend."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from room.actions import leases as lease_actions
from room.actions.auth import ensure_owner
from room.actions.messages import append_message
from room.actions.projects import AgentSpec, insert_project
from room.agents.leasing import Leasing
from room.errors import LeaseLostError, NotFoundError
from room.rules.leases import (
    Claim,
    Home,
    Lease,
    claim,
    fenced,
    home_of,
    next_token,
    renew_due,
)
from room.services import Services
from room.store import Database, Tx
from room.store import leases as leases_store
from room.store import turns as turns_store
from room.store.db import WriteJob
from room.store.leases import FENCE, Fence
from room.store.migrate import connect as sqlite_connect
from room.store.migrate import migrate as sqlite_migrate
from room.store.pg import connect as pg_connect
from room.store.pg_migrate import migrate as pg_migrate
from tests.support.inproc import App, Team, error

NOW = 1_800_000_000.0
SECS = 15.0

# -- the pure rules ------------------------------------------------------------------------------


def test_a_lease_is_taken_renewed_by_its_holder_and_adopted_only_once_lapsed() -> None:
    held = Lease("a", 3, NOW + SECS)
    assert claim(None, "a", NOW) is Claim.TAKE
    assert claim(held, "a", NOW) is Claim.RENEW
    assert claim(held, "a", NOW + 100) is Claim.RENEW  # lapsed, but nobody adopted it
    assert claim(held, "b", NOW) is Claim.REFUSED
    assert claim(held, "b", NOW + SECS - 0.001) is Claim.REFUSED
    assert claim(held, "b", NOW + SECS) is Claim.ADOPT  # it expires at expires_at exactly
    assert next_token(None, Claim.TAKE) == 1
    assert next_token(held, Claim.RENEW) == 3
    assert next_token(held, Claim.ADOPT) == 4
    with pytest.raises(ValueError):
        next_token(held, Claim.REFUSED)


def test_the_fence_passes_only_the_token_the_lease_holds() -> None:
    lease = Lease("b", 4, NOW)
    assert fenced(lease, 4)
    assert not fenced(lease, 3)  # the node that held token 3 lost it
    assert not fenced(None, 1)


def test_renewal_is_due_once_a_third_of_the_lease_is_spent() -> None:
    expires = NOW + SECS
    assert not renew_due(expires, NOW, SECS)
    assert not renew_due(expires, NOW + 4.9, SECS)
    assert renew_due(expires, NOW + 5.0, SECS)
    assert renew_due(expires, NOW + 20, SECS)


def test_turns_run_on_the_home_node_and_wait_while_it_is_not_heard_from() -> None:
    assert home_of(None, "a", ["b"]) is Home.HERE  # no home named yet
    assert home_of("a", "a", []) is Home.HERE
    assert home_of("b", "a", ["b", "c"]) is Home.ELSEWHERE
    assert home_of("b", "a", ["c"]) is Home.OFFLINE
    assert home_of("b", "a", None) is Home.ELSEWHERE  # no bus: this node cannot tell


# -- two nodes on one store ------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


@pytest.fixture(params=["sqlite", "postgresql"])
async def nodes(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[tuple[Database, Database, Clock]]:
    path = tmp_path / "room.sqlite"
    url = None
    if request.param == "sqlite":
        conn = sqlite_connect(path)
        sqlite_migrate(conn, path, now=NOW)
        conn.close()
    else:
        url = request.getfixturevalue("pg_dsn")
        pg = pg_connect(url)
        pg_migrate(pg, now=NOW)
        pg.close()
    clock = Clock()
    a = Database(path, url=url, readers=1, clock=clock, node="node-a")
    b = Database(path, url=url, readers=1, clock=clock, node="node-b")
    a.start(asyncio.get_running_loop())
    b.start(asyncio.get_running_loop())
    try:
        yield a, b, clock
    finally:
        await a.close()
        await b.close()


async def a_project(db: Database, name: str = "p") -> tuple[int, int]:
    """A project made on ``db``'s node (its home), and its agent."""

    def job(conn: sqlite3.Connection, tx: Tx) -> tuple[int, int]:
        owner = ensure_owner(conn, tx)
        spec = AgentSpec("lead", "lead", "Lead")
        project_id, _ = insert_project(
            conn, tx, owner, name=name, goal="g", workspace=None, agents=[spec]
        )
        row = conn.execute(
            "SELECT id FROM members WHERE project_id = ? AND handle = 'lead'", (project_id,)
        ).fetchone()
        return project_id, int(row[0])

    return await db.write(job)


def open_turn(project_id: int, member_id: int) -> WriteJob[int]:
    def job(conn: sqlite3.Connection, tx: Tx) -> int:
        return turns_store.insert_turn(
            conn, project_id=project_id, member_id=member_id, trigger=None, now=tx.now,
            owner=tx.node,
        )  # fmt: skip

    return job


async def users_named(db: Database, handle: str) -> int:
    return await db.read(
        lambda conn: conn.execute(
            "SELECT count(*) FROM users WHERE handle = ?", (handle,)
        ).fetchone()[0]
    )


def add_user(handle: str) -> WriteJob[None]:
    def job(conn: sqlite3.Connection, tx: Tx) -> None:
        conn.execute(
            "INSERT INTO users (handle, display_name, created_at) VALUES (?, ?, 0)",
            (handle, handle),
        )

    return job


async def fenced_write(db: Database, fence: Fence, handle: str) -> None:
    """A write as a turn makes it: submitted with the turn's fence in its context."""
    token = FENCE.set(fence)
    try:
        await db.write(add_user(handle))
    finally:
        FENCE.reset(token)


@pytest.mark.anyio
async def test_a_lapsed_lease_is_adopted_and_the_old_holders_writes_are_refused(
    nodes: tuple[Database, Database, Clock],
) -> None:
    a, b, clock = nodes
    project, lead = await a_project(a)
    assert await a.read(lambda c: leases_store.home_of(c, project)) == "node-a"

    def hold(project_id: int) -> WriteJob[tuple[Claim, Lease | None]]:
        return lambda conn, tx: lease_actions.take(conn, tx, project_id, SECS)

    outcome, lease = await a.write(hold(project))
    assert (outcome, lease) == (Claim.TAKE, Lease("node-a", 1, NOW + SECS))
    old = Fence(project, 1)
    turn = await a.write(open_turn(project, lead))
    await fenced_write(a, old, "under-the-lease")
    assert await users_named(a, "under-the-lease") == 1

    # Node B is not the project's home: it may not take the lease, lapsed or not.
    clock.now = NOW + SECS + 1
    assert await b.write(hold(project)) == (Claim.REFUSED, None)
    # The operator moves the home to B; while A's lease runs, B is refused.
    clock.now = NOW + 1
    moved = await b.write(lambda c, tx: lease_actions.move_home(c, tx, str(project), "node-b"))
    assert moved == (project, "node-a")
    audited = await b.read(
        lambda c: c.execute(
            "SELECT actor_kind, detail_json FROM audit_events WHERE action = 'project.move_home'"
        ).fetchall()
    )
    assert [(kind, json.loads(d)) for kind, d in audited] == [
        ("operator", {"node": "node-b", "was": "node-a", "by_user": None})
    ]
    outcome, lease = await b.write(hold(project))
    assert outcome is Claim.REFUSED and lease == Lease("node-a", 1, NOW + SECS)

    # A was paused past its lease: B adopts it (token 2) and settles A's running turn.
    clock.now = NOW + SECS
    outcome, lease = await b.write(hold(project))
    assert (outcome, lease) == (Claim.ADOPT, Lease("node-b", 2, NOW + 2 * SECS))
    state = await b.read(
        lambda c: c.execute("SELECT state, error FROM turns WHERE id = ?", (turn,)).fetchone()
    )
    assert tuple(state) == ("interrupted", lease_actions.LEASE_ADOPTED)
    # One running turn per member: B may open the member's next one now.
    await b.write(open_turn(project, lead))

    # A wakes up and writes under its old token: refused, nothing written.
    with pytest.raises(LeaseLostError) as refused:
        await fenced_write(a, old, "after-the-lease")
    assert refused.value.code == "lease_lost"
    assert refused.value.details["holder"] == "node-b"
    assert refused.value.details["current_token"] == 2
    assert await users_named(a, "after-the-lease") == 0
    assert (a.leases.refused, b.leases.refused) == (1, 0)  # /metrics: room_fence_refusals
    # A's renewal finds the lease gone; B's own writes and renewals go ahead.
    renewed = await a.write(lambda c, tx: leases_store.renew(c, "node-a", [project], tx.now, SECS))
    assert renewed == []
    await fenced_write(b, Fence(project, 2), "new-holder")
    assert await users_named(b, "new-holder") == 1
    outcome, lease = await b.write(hold(project))
    assert (outcome, lease) == (Claim.RENEW, Lease("node-b", 2, NOW + 2 * SECS))


class Turns:
    """What the lease loop asks of a driver (room.agents.leasing.RunningTurns), as a record."""

    def __init__(self) -> None:
        self.leased: dict[int, list[int]] = {}  # members opening or running a turn
        self.stopped: list[int] = []

    def leased_members(self, project_id: int) -> list[int]:
        return self.leased.get(project_id, [])

    def stop_lost(self, project_id: int) -> None:
        self.stopped.append(project_id)

    def wake_here(self, project_id: int, member_id: int) -> None:
        raise AssertionError(f"no work waits here: woke {member_id} of {project_id}")

    def busy(self, member_id: int) -> bool:
        return any(member_id in members for members in self.leased.values())

    def stop_member(self, member_id: int) -> bool:
        raise AssertionError(f"no stop is owed here: stopped member {member_id}")


@pytest.mark.anyio
async def test_the_lease_of_a_turn_being_opened_is_renewed_and_its_loss_stops_the_turn(
    nodes: tuple[Database, Database, Clock],
) -> None:
    """As a paused-node cluster test found it: a tick that came after the fence was taken and
    before the turn's row was written saw nothing running and dropped the lease, which then
    lapsed under the turn; the node never renewed it nor noticed it adopted. The driver counts
    a turn from its fence on (room.agents.drivers.Session.slot)."""
    a, b, clock = nodes
    project, lead = await a_project(a)
    leasing = Leasing(
        cast(
            Services,
            SimpleNamespace(db=a, relay=None, settings=SimpleNamespace(workspaces_dir=None)),
        ),
        "node-a",
        SECS,
    )
    turns = Turns()

    def lease() -> Any:
        return a.read(lambda c: leases_store.lease_of(c, project))

    assert await leasing.fence(project) == Fence(project, 1)
    turns.leased[project] = [lead]  # its session opens the turn: no row yet
    clock.now = NOW + SECS / 3
    await leasing.tick(turns)
    assert project in leasing.held
    assert await lease() == Lease("node-a", 1, clock.now + SECS)  # renewed
    # Moved to B, and lapsed (A was paused): B adopts it. A's next tick stops the turn.
    await b.write(lambda c, tx: lease_actions.move_home(c, tx, str(project), "node-b"))
    clock.now += SECS
    assert (await b.write(lambda c, tx: lease_actions.take(c, tx, project, SECS)))[0] is Claim.ADOPT
    await leasing.tick(turns)
    assert (turns.stopped, project in leasing.held, a.leases.lost) == ([project], False, 1)
    # A project with no turn being opened or run here is left to lapse, not renewed.
    other, _ = await a_project(a, "q")
    assert await leasing.fence(other) == Fence(other, 1)
    await leasing.tick(turns)
    assert other not in leasing.held and turns.stopped == [project]


@pytest.mark.anyio
async def test_a_refused_write_fails_alone_in_its_batch(
    nodes: tuple[Database, Database, Clock],
) -> None:
    a, _, _ = nodes
    project, _ = await a_project(a)
    await a.write(lambda c, tx: lease_actions.take(c, tx, project, SECS))
    stale = FENCE.set(Fence(project, 7))  # a token this lease never had
    try:
        refused = a.submit(add_user("stale"))
    finally:
        FENCE.reset(stale)
    plain = a.submit(add_user("plain"))
    results = await asyncio.gather(refused, plain, return_exceptions=True)
    assert isinstance(results[0], LeaseLostError) and results[1] is None
    # Counted once, though a batch that met it runs again job by job.
    assert a.leases.refused == 1
    assert await users_named(a, "stale") == 0
    assert await users_named(a, "plain") == 1


@pytest.mark.anyio
async def test_pending_deliveries_say_their_home_node_is_offline_and_moving_needs_a_project(
    nodes: tuple[Database, Database, Clock],
) -> None:
    a, b, _ = nodes
    project, lead = await a_project(a)

    def pend(conn: sqlite3.Connection, tx: Tx) -> None:
        owner = conn.execute(
            "SELECT id FROM members WHERE project_id = ? AND role = 'owner'", (project,)
        ).fetchone()[0]
        msg, _, _ = append_message(
            conn, tx, project_id=project, author_id=owner, kind="chat", body="hi", html="hi"
        )
        conn.execute(
            "INSERT INTO deliveries (project_id, message_id, recipient_id, state, created_at,"
            " updated_at) VALUES (?, ?, ?, 'pending', 0, 0)",
            (project, msg, lead),
        )

    await a.write(pend)
    work = await b.read(leases_store.waiting_work)
    assert work == [(project, lead, "node-a", False)]
    assert await b.write(lambda c, tx: lease_actions.mark_home_offline(c, tx, project)) == 1
    row = await b.read(lambda c: c.execute("SELECT state, reason_code FROM deliveries").fetchone())
    assert tuple(row) == ("pending", "home_node_offline")
    assert await b.read(leases_store.waiting_work) == [(project, lead, "node-a", True)]
    assert await b.write(lambda c, tx: lease_actions.mark_home_offline(c, tx, project)) == 0

    def trip(conn: sqlite3.Connection, tx: Tx) -> None:
        conn.execute(
            "INSERT INTO project_brakes (project_id, tripped) VALUES (?, 'loop')"
            " ON CONFLICT (project_id) DO UPDATE SET tripped = 'loop'",
            (project,),
        )

    await a.write(trip)
    assert await b.read(leases_store.waiting_work) == []  # a person clears the brake first
    with pytest.raises(NotFoundError):
        await b.write(lambda c, tx: lease_actions.move_home(c, tx, "no-such-project", "node-b"))


def test_moving_a_home_over_http_is_a_cluster_admins(app: App) -> None:
    team = Team(app, "搬家")
    path = f"/api/projects/{team.id}/home"
    # A plain member may not; a server admin may, but a SQLite server has no homes to move.
    assert error(team.member("PUT", path, {"node": "node-b"})) == (403, "admin_only")
    assert error(team.owner("PUT", path, {"node": "a node"})) == (400, "bad_body")
    assert error(team.owner("PUT", path, {"node": "node-b"})) == (409, "not_a_cluster")
