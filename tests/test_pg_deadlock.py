"""Deadlocks between two processes' write transactions on PostgreSQL (docs/storage.md, "Several
writers") are a lost race, wherever the writer meets them: the batch runs again, and its jobs
never see the deadlock. Here another connection holds project B's row and then asks for
project A's, while the writer's batch, which declared both, holds A and waits for B (its lock
of the projects at batch start, before any job ran); PostgreSQL breaks the cycle by failing
one of the two (the one waiting longest checks first: the writer)."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import psycopg
import pytest

from room.actions import leases as leases_actions
from room.actions import turns as turn_actions
from room.rules.leases import Claim
from room.rules.ledger import DeliveryState
from room.store import Database, Tx
from room.store import attempts as attempts_store
from room.store import brakes as brakes_store
from room.store import leases as leases_store
from room.store import projects as projects_store
from room.store import turns as turns_store
from room.store.pg import PgConnection
from room.store.pg import connect as pg_connect
from room.store.pg_migrate import migrate as pg_migrate
from tests.support.postgres import until_waiting

NOW = 1_800_000_000.0


@pytest.mark.anyio
async def test_a_deadlock_while_the_batch_locks_its_projects_runs_the_batch_again(
    tmp_path: Path, pg_dsn: str
) -> None:
    pg = pg_connect(pg_dsn)
    pg_migrate(pg, now=NOW)
    pg.close()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        a, b = (
            int(row[0])
            for row in conn.execute(
                "INSERT INTO projects (name, created_at, updated_at)"
                " VALUES ('a', 0, 0), ('b', 0, 0) RETURNING id"
            ).fetchall()
        )
        name = pg_dsn.rsplit("/", 1)[1]
        conn.execute(f"ALTER DATABASE \"{name}\" SET deadlock_timeout = '200ms'")
    database = Database(tmp_path / "unused.sqlite", url=pg_dsn, readers=1, clock=lambda: NOW)
    database.start(asyncio.get_running_loop())
    other = psycopg.connect(pg_dsn)
    try:
        other.execute("SELECT id FROM projects WHERE id = %s FOR UPDATE", (b,))

        def job(conn: sqlite3.Connection, tx: Tx) -> int:
            conn.execute("UPDATE projects SET goal = 'written' WHERE id = ?", (a,))
            return 1

        written = database.submit(job, locks=(a, b))  # holds A, waits for B

        def waiting_for_b() -> bool:
            with psycopg.connect(pg_dsn) as probe:
                row = probe.execute(
                    "SELECT count(*) FROM pg_stat_activity"
                    " WHERE wait_event_type = 'Lock' AND query LIKE '%KEY UPDATE%'"
                ).fetchone()
            return row is not None and row[0] >= 1

        while True:
            if await asyncio.to_thread(waiting_for_b):
                break
            await asyncio.sleep(0.05)

        def close_the_cycle() -> None:  # asks for A: one of the two is failed
            try:
                other.execute("SELECT id FROM projects WHERE id = %s FOR UPDATE", (a,))
            except psycopg.errors.DeadlockDetected:
                pass
            other.rollback()

        closer = threading.Thread(target=close_the_cycle)
        closer.start()
        assert await asyncio.wait_for(written, 30) == 1  # never the deadlock
        await asyncio.to_thread(closer.join, 30)
        with psycopg.connect(pg_dsn) as conn:
            row = conn.execute("SELECT goal FROM projects WHERE id = %s", (a,)).fetchone()
        assert row is not None and row[0] == "written"
    finally:
        other.close()
        await database.close()


def test_a_turn_opening_does_not_block_the_foreign_keys_naming_its_member(pg_dsn: str) -> None:
    """The lock that opens a member's turns one at a time (``lock_member``) lets through the
    foreign-key checks of rows naming the member — a send's delivery to it, on another node —
    so a send holding its project's row never waits for a turn opening that waits for that
    project (they deadlocked across nodes in the three-node soak)."""
    pg = pg_connect(pg_dsn)
    pg_migrate(pg, now=NOW)
    project, member = _project_with_agent(pg_dsn)
    try:
        pg.execute("BEGIN")
        turns_store.lock_member(pg, member)  # a turn opening, its transaction still open
        with psycopg.connect(pg_dsn, autocommit=True) as other:
            # Held locks are not waited out: a wait is an error here, at once.
            other.execute("SET lock_timeout = '1ms'")
            other.execute(
                "INSERT INTO member_names (project_id, member_id, name, name_key, kind)"
                " VALUES (%s, %s, 'lead', 'lead', 'alias')",
                (project, member),
            )  # the foreign key's check of the member's row: FOR KEY SHARE
            with pytest.raises(psycopg.errors.LockNotAvailable):  # a second opening waits
                other.execute("SELECT id FROM members WHERE id = %s FOR NO KEY UPDATE", (member,))
        pg.execute("ROLLBACK")
    finally:
        pg.close()


def _project_with_agent(pg_dsn: str) -> tuple[int, int]:
    """A project and its lead agent, written straight to the database: (project, member)."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        row = conn.execute(
            "INSERT INTO projects (name, created_at, updated_at) VALUES ('p', 0, 0) RETURNING id"
        ).fetchone()
        assert row is not None
        project = int(row[0])
        row = conn.execute(
            "INSERT INTO members (project_id, kind, role, handle, display_name, created_at)"
            " VALUES (%s, 'agent', 'lead', 'lead', 'Lead', 0) RETURNING id",
            (project,),
        ).fetchone()
        assert row is not None
        return project, int(row[0])


def _message_at_the_brakes_cap(pg_dsn: str, project: int, member: int, state: str) -> int:
    """Seq 1 of the project, delivered to ``member`` in ``state``, with the loop brake's count
    at its cap (the next turn trips it); returns the delivery's id."""
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        row = conn.execute(
            "INSERT INTO messages (project_id, seq, author_id, body, frame, created_at)"
            " VALUES (%s, 1, %s, 'hi', '{}', 0) RETURNING id",
            (project, member),
        ).fetchone()
        assert row is not None
        row = conn.execute(
            "INSERT INTO deliveries (project_id, message_id, recipient_id, state, created_at,"
            " updated_at) VALUES (%s, %s, %s, %s, 0, 0) RETURNING id",
            (project, int(row[0]), member, state),
        ).fetchone()
        assert row is not None
        conn.execute("UPDATE projects SET last_seq = 1 WHERE id = %s", (project,))
        conn.execute(  # the cap reached: the next turn trips the brake
            "INSERT INTO project_brakes (project_id, agent_turns) VALUES (%s, 2)", (project,)
        )
        return int(row[0])


@pytest.mark.anyio
async def test_a_batch_holding_its_project_lets_the_foreign_keys_naming_it_through(
    tmp_path: Path, pg_dsn: str
) -> None:
    """The batch's lock of its projects (``locks=``) still takes a project one batch at a
    time, but another node's insert of a row naming the project (its foreign-key check,
    ``FOR KEY SHARE``) does not wait for the batch: with ``FOR UPDATE`` it did."""
    pg = pg_connect(pg_dsn)
    pg_migrate(pg, now=NOW)
    pg.close()
    project, member = _project_with_agent(pg_dsn)
    database = Database(tmp_path / "unused.sqlite", url=pg_dsn, readers=1, clock=lambda: NOW)
    database.start(asyncio.get_running_loop())
    holding, release = threading.Event(), threading.Event()

    def job(conn: sqlite3.Connection, tx: Tx) -> int:
        holding.set()
        assert release.wait(30)
        return 1

    try:
        written = database.submit(job, locks=(project,))
        assert await asyncio.to_thread(holding.wait, 30)
        with psycopg.connect(pg_dsn, autocommit=True) as other:
            other.execute("SET lock_timeout = '1ms'")  # a wait is an error here, at once
            other.execute(
                "INSERT INTO turns (project_id, member_id, state, started_at)"
                " VALUES (%s, %s, 'completed', 0)",
                (project, member),
            )  # the foreign key's check of the project's row: FOR KEY SHARE
            with pytest.raises(psycopg.errors.LockNotAvailable):  # a second batch's lock waits
                other.execute("SELECT id FROM projects WHERE id = %s FOR NO KEY UPDATE", (project,))
            with pytest.raises(psycopg.errors.LockNotAvailable):  # so does a seq's update
                other.execute(
                    "UPDATE projects SET last_seq = last_seq + 1 WHERE id = %s", (project,)
                )
        release.set()
        assert await asyncio.wait_for(written, 30) == 1
    finally:
        release.set()
        await database.close()


@pytest.mark.anyio
async def test_a_turn_opening_and_a_send_on_two_nodes_do_not_deadlock(
    tmp_path: Path, pg_dsn: str
) -> None:
    """A turn opening (``begin_turn``: the member's lock, the loop brake's count — the
    project's ``project_brakes`` row — then the turn's insert, whose foreign key names the
    project) on node B, and a human's send on node A (its batch holds the project, then
    resets the brake's count: that row). With the batch's project lock ``FOR UPDATE`` the
    turn's insert waited for the send and the send for the brake row: a deadlock, the send's
    batch run again. Now the insert passes and neither waits for the other in a cycle."""
    pg = pg_connect(pg_dsn)
    pg_migrate(pg, now=NOW)
    pg.close()
    project, member = _project_with_agent(pg_dsn)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        # An agent turn earlier: the count a human's send resets.
        conn.execute(
            "INSERT INTO project_brakes (project_id, agent_turns) VALUES (%s, 1)", (project,)
        )
        name = pg_dsn.rsplit("/", 1)[1]
        conn.execute(f"ALTER DATABASE \"{name}\" SET deadlock_timeout = '200ms'")
    database = Database(tmp_path / "unused.sqlite", url=pg_dsn, readers=1, clock=lambda: NOW)
    database.start(asyncio.get_running_loop())
    node_b = pg_connect(pg_dsn)
    try:
        # Node B opens a turn, in begin_turn's order, as far as the loop brake's count.
        node_b.execute("BEGIN")
        turns_store.lock_member(node_b, member)
        assert turns_store.running_of(node_b, member) is None
        assert brakes_store.count_agent_turn(node_b, Tx(now=NOW), project, member) == 2

        def send(conn: sqlite3.Connection, tx: Tx) -> int:  # a human's send: the count reset
            brakes_store.reset_agent_turns(conn, tx, project)
            return 1

        sent = database.submit(send, locks=(project,))  # holds the project, waits for the brake
        await until_waiting(pg_dsn, "project_brakes")
        # Node B inserts its turn: the foreign key's check of the project the send holds.
        turn = await asyncio.to_thread(
            turns_store.insert_turn,
            node_b,
            project_id=project,
            member_id=member,
            trigger=None,
            now=NOW,
            owner="b",
        )
        node_b.execute("COMMIT")
        assert await asyncio.wait_for(sent, 30) == 1
        assert database.stats.retries == 0  # the send's batch never met a deadlock
        with psycopg.connect(pg_dsn) as conn:
            row = conn.execute(
                "SELECT agent_turns FROM project_brakes WHERE project_id = %s", (project,)
            ).fetchone()
            assert row is not None and row[0] == 0  # the send came second: its reset stands
            row = conn.execute("SELECT state FROM turns WHERE id = %s", (turn,)).fetchone()
            assert row is not None and row[0] == "running"
    finally:
        node_b.close()
        await database.close()


def _lock_project(conn: PgConnection, ids: dict[str, int]) -> None:
    projects_store.lock_project(conn, ids["project"])


def _lock_task(conn: PgConnection, ids: dict[str, int]) -> None:
    attempts_store.next_number(conn, ids["task"])


def _lock_turn(conn: PgConnection, ids: dict[str, int]) -> None:
    assert leases_store.still_running_at(conn, ids["turn"], "a") is not None


@pytest.mark.parametrize(
    ("lock", "table", "naming"),
    [
        (  # a task's numbering (lock_project) vs a turn inserted on another node
            _lock_project,
            "projects",
            "INSERT INTO turns (project_id, member_id, state, started_at)"
            " VALUES (%(project)s, %(member)s, 'completed', 0)",
        ),
        (  # an attempt's numbering vs an event of the task
            _lock_task,
            "tasks",
            "INSERT INTO task_events (project_id, task_id, event, to_state, revision,"
            " actor_kind, created_at) VALUES (%(project)s, %(task)s, 'e', 'ready', 0, 'system', 0)",
        ),
        (  # the sweep settling a turn vs a checkpoint of the turn
            _lock_turn,
            "turns",
            "INSERT INTO checkpoints (project_id, member_id, turn_id, phase, state, created_at)"
            " VALUES (%(project)s, %(member)s, %(turn)s, 'step', 'x', 0)",
        ),
    ],
    ids=["lock_project", "attempts.next_number", "leases.still_running_at"],
)
def test_a_row_lock_of_the_store_lets_the_foreign_keys_naming_the_row_through(
    pg_dsn: str, lock: Callable[[PgConnection, dict[str, int]], None], table: str, naming: str
) -> None:
    """Each row lock the store takes to serialise writers across nodes waits for a second of
    its kind, and lets through the foreign-key check (``FOR KEY SHARE``) of a row another
    transaction inserts naming the locked row: none of them deletes the row or changes its
    key, which is all ``FOR UPDATE`` would add."""
    pg = pg_connect(pg_dsn)
    pg_migrate(pg, now=NOW)
    project, member = _project_with_agent(pg_dsn)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        task = conn.execute(
            "INSERT INTO tasks (project_id, key, title, position, owner_id, state, created_at,"
            " updated_at) VALUES (%s, 't1', 'T', 1, %s, 'ready', 0, 0) RETURNING id",
            (project, member),
        ).fetchone()
        turn = conn.execute(
            "INSERT INTO turns (project_id, member_id, state, started_at, owner)"
            " VALUES (%s, %s, 'running', 0, 'a') RETURNING id",
            (project, member),
        ).fetchone()
    assert task is not None and turn is not None
    ids = {"project": project, "member": member, "task": int(task[0]), "turn": int(turn[0])}
    try:
        pg.execute("BEGIN")
        lock(pg, ids)  # held until the transaction ends
        with psycopg.connect(pg_dsn, autocommit=True) as other:
            other.execute("SET lock_timeout = '1ms'")  # a wait is an error here, at once
            other.execute(naming, ids)  # the foreign key's check: FOR KEY SHARE
            with pytest.raises(psycopg.errors.LockNotAvailable):  # a second lock waits
                other.execute(
                    f"SELECT id FROM {table} WHERE id = %s FOR NO KEY UPDATE",
                    (ids[table.rstrip("s")],),
                )
        pg.execute("ROLLBACK")
    finally:
        pg.close()


@pytest.mark.anyio
async def test_a_node_adopting_a_lease_takes_the_project_first_like_the_old_holders_writes(
    tmp_path: Path, pg_dsn: str
) -> None:
    """Node B adopts the lapsed lease of a project moved to it (``leases.hold``), settling the
    turn node A ran — a turn with side effects: a notice posted, the project's seq taken. Node
    A's last write of that turn holds the project (its batch's ``locks=``) and then checks its
    fence (the lease's row, ``FOR SHARE``). Had B taken the lease's row first and the project
    second, each waited for the other. B's write declares the project, so its batch takes the
    project's row before the lease's, as A's does: A's fence check does not wait for B."""
    pg = pg_connect(pg_dsn)
    pg_migrate(pg, now=NOW)
    pg.close()
    project, member = _project_with_agent(pg_dsn)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("UPDATE projects SET home_node = 'b' WHERE id = %s", (project,))
        conn.execute(
            "INSERT INTO leases (project_id, holder, token, expires_at, taken_at)"
            " VALUES (%s, 'a', 1, %s, 0)",
            (project, NOW - 1),
        )  # lapsed: node A stopped renewing
        row = conn.execute(
            "INSERT INTO turns (project_id, member_id, state, started_at, owner, side_effects)"
            " VALUES (%s, %s, 'running', 0, 'a', 1) RETURNING id",
            (project, member),
        ).fetchone()
        assert row is not None
        turn = int(row[0])
    node_a = pg_connect(pg_dsn)
    node_b = Database(
        tmp_path / "unused.sqlite", url=pg_dsn, readers=1, clock=lambda: NOW, node="b"
    )
    node_b.start(asyncio.get_running_loop())
    try:
        # Node A's batch for its turn's write: the project's row, as Database._lock_projects.
        node_a.execute("BEGIN")
        node_a.execute("SELECT id FROM projects WHERE id = ? FOR NO KEY UPDATE", (project,))
        core = SimpleNamespace(db=node_b)
        adopted = asyncio.ensure_future(leases_actions.hold(core, project, 30.0))  # type: ignore[arg-type]
        await until_waiting(pg_dsn, "projects")  # node B's write has started, and waits for a lock
        # Node A checks its fence: the lease is still its own, and nothing holds its row.
        node_a.execute("SET LOCAL lock_timeout = '1ms'")
        leases_store.check_fence(node_a, leases_store.Fence(project, 1))
        node_a.execute("COMMIT")
        outcome, lease = await asyncio.wait_for(adopted, 30)
        assert outcome is Claim.ADOPT and lease is not None and lease.token == 2
        assert node_b.stats.retries == 0
        with psycopg.connect(pg_dsn) as conn:
            row = conn.execute("SELECT state FROM turns WHERE id = %s", (turn,)).fetchone()
            assert row is not None and row[0] == "interrupted"
    finally:
        node_a.close()
        await node_b.close()


@pytest.mark.anyio
async def test_a_turn_opening_that_trips_the_brake_takes_the_project_first_like_a_send(
    tmp_path: Path, pg_dsn: str
) -> None:
    """A turn opening past the loop brake's cap (``begin_turn``) counts the turn on the
    project's brake row and then posts the brake's notice: the project's seq. A human's send
    holds the project (its batch's ``locks=``) and then resets that brake row. Had the opening
    taken the brake row first and the project second, each waited for the other. The opening
    declares its project, so its batch takes the project's row first, as the send's does: the
    send's reset does not wait for it."""
    pg = pg_connect(pg_dsn)
    pg_migrate(pg, now=NOW)
    pg.close()
    project, member = _project_with_agent(pg_dsn)
    _message_at_the_brakes_cap(pg_dsn, project, member, "pending")
    sender = pg_connect(pg_dsn)
    node_b = Database(
        tmp_path / "unused.sqlite", url=pg_dsn, readers=1, clock=lambda: NOW, node="b"
    )
    node_b.start(asyncio.get_running_loop())
    try:
        # The send's batch on node A: the project's row, as Database._lock_projects.
        sender.execute("BEGIN")
        sender.execute("SELECT id FROM projects WHERE id = ? FOR NO KEY UPDATE", (project,))
        core = SimpleNamespace(db=node_b)
        opened = asyncio.ensure_future(
            turn_actions.begin_turn(core, member, 2, project_id=project)  # type: ignore[arg-type]
        )
        await until_waiting(pg_dsn, "projects")  # node B's write has started, and waits for a lock
        # The send resets the brake's count: nothing holds the brake's row.
        sender.execute("SET LOCAL lock_timeout = '1ms'")
        brakes_store.reset_agent_turns(sender, Tx(now=NOW), project)
        sender.execute("COMMIT")
        start = await asyncio.wait_for(opened, 30)
        assert start.turn_id is not None  # the count was reset first: no brake, a turn
        assert node_b.stats.retries == 0
    finally:
        sender.close()
        await node_b.close()


@pytest.mark.anyio
async def test_an_external_agents_consume_that_trips_the_brake_takes_the_project_first(
    tmp_path: Path, pg_dsn: str
) -> None:
    """An external agent's ``consume`` (``confirm_external`` with its turn cap) counts its turn
    on the brake's row and, past the cap, posts the brake's notice (the project's seq): like
    a turn opening, it declares the project, so a send holding the project and resetting the
    brake on another node does not wait for it."""
    pg = pg_connect(pg_dsn)
    pg_migrate(pg, now=NOW)
    pg.close()
    project, member = _project_with_agent(pg_dsn)
    delivery = _message_at_the_brakes_cap(pg_dsn, project, member, "delivered")
    sender = pg_connect(pg_dsn)
    node_b = Database(
        tmp_path / "unused.sqlite", url=pg_dsn, readers=1, clock=lambda: NOW, node="b"
    )
    node_b.start(asyncio.get_running_loop())
    try:
        sender.execute("BEGIN")  # the send's batch on node A: the project's row
        sender.execute("SELECT id FROM projects WHERE id = ? FOR NO KEY UPDATE", (project,))
        core = SimpleNamespace(db=node_b)
        consumed = asyncio.ensure_future(
            turn_actions.confirm_external(
                core,  # type: ignore[arg-type]
                member,
                [delivery],
                DeliveryState.CONSUMED,
                "queue",
                turn_cap=2,
                project_id=project,
            )
        )
        await until_waiting(pg_dsn, "projects")  # node B's write has started, and waits for a lock
        sender.execute("SET LOCAL lock_timeout = '1ms'")
        brakes_store.reset_agent_turns(sender, Tx(now=NOW), project)
        sender.execute("COMMIT")
        assert await asyncio.wait_for(consumed, 30) == [delivery]
        assert node_b.stats.retries == 0
        with psycopg.connect(pg_dsn) as conn:
            row = conn.execute(
                "SELECT agent_turns, tripped FROM project_brakes WHERE project_id = %s",
                (project,),
            ).fetchone()
        assert row == (1, None)  # reset first, then counted once: no trip
    finally:
        sender.close()
        await node_b.close()
