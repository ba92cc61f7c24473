"""The lock order of docs/storage.md ("Lock order: the project first"), checked where it is
kept: the writer refuses a job's seq in a project it did not declare (``check_locks``, on both
stores), and a job found that way, now declaring its project, no longer waits in a cycle with
another node's batch on PostgreSQL."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path
from types import SimpleNamespace

import psycopg
import pytest

from room.actions import brakes as brake_actions
from room.actions import leases as leases_actions
from room.actions.notices import insert_notice
from room.store import Database, Tx
from room.store import brakes as brakes_store
from room.store.db import UndeclaredProjectError
from room.store.migrate import connect, migrate
from room.store.pg import connect as pg_connect
from room.store.pg_migrate import migrate as pg_migrate
from room.store.tasks import next_number
from tests.support.postgres import until_waiting

NOW = 1_800_000_000.0


def _sqlite_project(path: Path) -> int:
    conn = connect(path)
    migrate(conn, path, now=NOW)
    project = conn.execute(
        "INSERT INTO projects (name, created_at, updated_at) VALUES ('p', 0, 0) RETURNING id"
    ).fetchone()[0]
    conn.commit()
    conn.close()
    return int(project)


def _pg_project(pg_dsn: str) -> int:
    pg = pg_connect(pg_dsn)
    pg_migrate(pg, now=NOW)
    pg.close()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        row = conn.execute(
            "INSERT INTO projects (name, created_at, updated_at) VALUES ('p', 0, 0) RETURNING id"
        ).fetchone()
        assert row is not None
        return int(row[0])


def _notice_job(project: int) -> object:
    def post_a_notice(conn: sqlite3.Connection, tx: Tx) -> int:
        return insert_notice(conn, tx, project, "said", {})

    return post_a_notice


async def _undeclared_and_declared(database: Database, project: int) -> None:
    database.start(asyncio.get_running_loop())
    try:
        job = _notice_job(project)
        with pytest.raises(UndeclaredProjectError) as refused:
            await database.write(job)  # type: ignore[arg-type]
        message = str(refused.value)
        assert f"project {project}" in message
        assert "post_a_notice" in message  # the job, by name
        assert f"locks=({project},)" in message
        await database.write(job, locks=(project,))  # type: ignore[arg-type]
        await database.write(job, locks=(project + 1, project))  # type: ignore[arg-type]
        unchecked = Database(database.path, url=database.url, readers=1, clock=lambda: NOW)
        unchecked.start(asyncio.get_running_loop())
        try:
            await unchecked.write(job)  # type: ignore[arg-type]  # production: not checked
        finally:
            await unchecked.close()
        seqs = await database.read(
            lambda conn: [
                int(r[0])
                for r in conn.execute(
                    "SELECT seq FROM messages WHERE project_id = ? ORDER BY seq", (project,)
                )
            ]
        )
        assert seqs == [1, 2, 3]  # the refused one took nothing

        def number_a_task(conn: sqlite3.Connection, tx: Tx) -> int:
            return next_number(conn, "tasks", "position", project)

        with pytest.raises(UndeclaredProjectError, match=f"a number of project {project} "):
            await database.write(number_a_task)
        assert await database.write(number_a_task, locks=(project,)) == 1
    finally:
        await database.close()


@pytest.mark.anyio
async def test_sqlite_refuses_a_seq_in_an_undeclared_project(tmp_path: Path) -> None:
    path = tmp_path / "room.sqlite"
    project = _sqlite_project(path)
    database = Database(path, readers=1, clock=lambda: NOW, check_locks=True)
    await _undeclared_and_declared(database, project)


@pytest.mark.anyio
async def test_postgresql_refuses_a_seq_in_an_undeclared_project(
    tmp_path: Path, pg_dsn: str
) -> None:
    project = _pg_project(pg_dsn)
    database = Database(
        tmp_path / "unused.sqlite", url=pg_dsn, readers=1, clock=lambda: NOW, check_locks=True
    )
    await _undeclared_and_declared(database, project)


@pytest.mark.anyio
async def test_settling_unheard_turns_takes_the_project_first_like_an_adoption(
    tmp_path: Path, pg_dsn: str
) -> None:
    """Node B settles a turn the database says it runs but it never heard of
    (``leases.settle_unheard``): a turn with side effects, so a notice is posted, the project's
    seq taken. Node A meanwhile adopts the project's lease: its batch holds the project (its
    ``locks=``), then locks the turns it settles (``still_running_at``). Before, B's job locked
    the turn's row and then waited for the project's at the notice: A's lock of the turn waited
    for B, a cycle PostgreSQL broke by failing one of the two. B now reads the turn's project
    first and declares it: its batch waits for the project before it touches the turn."""
    project = _pg_project(pg_dsn)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        row = conn.execute(
            "INSERT INTO members (project_id, kind, role, handle, display_name, created_at)"
            " VALUES (%s, 'agent', 'lead', 'lead', 'Lead', 0) RETURNING id",
            (project,),
        ).fetchone()
        assert row is not None
        member = int(row[0])
        row = conn.execute(
            "INSERT INTO turns (project_id, member_id, state, started_at, owner, side_effects)"
            " VALUES (%s, %s, 'running', 0, 'b', 1) RETURNING id",
            (project, member),
        ).fetchone()
        assert row is not None
        turn = int(row[0])
    node_a = pg_connect(pg_dsn)
    node_b = Database(  # unchecked, as in production: the order itself is under test
        tmp_path / "unused.sqlite", url=pg_dsn, readers=1, clock=lambda: NOW, node="b"
    )
    node_b.start(asyncio.get_running_loop())
    try:
        # Node A's adoption: the project's row first (Database._lock_projects) …
        node_a.execute("BEGIN")
        node_a.execute("SELECT id FROM projects WHERE id = ? FOR NO KEY UPDATE", (project,))
        core = SimpleNamespace(db=node_b)
        settled = asyncio.ensure_future(leases_actions.settle_unheard(core, [turn]))  # type: ignore[arg-type]
        await until_waiting(
            pg_dsn, "projects", unless=settled
        )  # node B's write has started, and waits for the project
        assert not settled.done()
        # … then the turns it settles (leases.still_running_at): nothing of B's holds this one.
        node_a.execute("SET LOCAL lock_timeout = '1ms'")
        node_a.execute("SELECT id FROM turns WHERE id = ? FOR NO KEY UPDATE", (turn,))
        node_a.execute("COMMIT")
        assert await asyncio.wait_for(settled, 30) == [member]
        assert node_b.stats.retries == 0
        with psycopg.connect(pg_dsn) as conn:
            row = conn.execute("SELECT state FROM turns WHERE id = %s", (turn,)).fetchone()
            assert row is not None and row[0] == "interrupted"
            row = conn.execute(
                "SELECT p.last_seq, count(m.id) FROM projects p"
                " LEFT JOIN messages m ON m.project_id = p.id WHERE p.id = %s GROUP BY p.id",
                (project,),
            ).fetchone()
            assert row == (1, 1)  # the settling's notice, seq 1
    finally:
        node_a.close()
        await node_b.close()


@pytest.mark.anyio
async def test_tripping_the_brake_takes_the_project_first_like_a_send(
    tmp_path: Path, pg_dsn: str
) -> None:
    """A brake tripped by the runtime (``brakes.trip_brake``: the token budget spent, a loop
    seen) updates the project's brake row and then posts the brake's notice: the project's seq.
    A human's send on another node holds the project (its batch's ``locks=``) and then resets
    that brake row's count. Before, the trip took the brake's row first and the project's at
    the notice: the send's reset waited for it, a cycle. It now declares its project."""
    project = _pg_project(pg_dsn)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(  # a count to reset: the send's UPDATE takes the row
            "INSERT INTO project_brakes (project_id, agent_turns) VALUES (%s, 2)", (project,)
        )
    sender = pg_connect(pg_dsn)
    node_b = Database(
        tmp_path / "unused.sqlite", url=pg_dsn, readers=1, clock=lambda: NOW, node="b"
    )
    node_b.start(asyncio.get_running_loop())
    try:
        # The send's batch on node A: the project's row, as Database._lock_projects …
        sender.execute("BEGIN")
        sender.execute("SELECT id FROM projects WHERE id = ? FOR NO KEY UPDATE", (project,))
        core = SimpleNamespace(db=node_b)
        detail = {"tokens_used": 10, "budget": 5}
        tripped = asyncio.ensure_future(
            brake_actions.trip_brake(core, project, "token_budget", detail)  # type: ignore[arg-type]
        )
        await until_waiting(
            pg_dsn, "projects", unless=tripped
        )  # node B's write has started, and waits for the project
        assert not tripped.done()
        # … then the human message resets the brake's count: nothing of B's holds its row.
        sender.execute("SET LOCAL lock_timeout = '1ms'")
        brakes_store.reset_agent_turns(sender, Tx(now=NOW), project)
        sender.execute("COMMIT")
        await asyncio.wait_for(tripped, 30)
        assert node_b.stats.retries == 0
        with psycopg.connect(pg_dsn) as conn:
            row = conn.execute(
                "SELECT tripped, agent_turns FROM project_brakes WHERE project_id = %s",
                (project,),
            ).fetchone()
            assert row == ("token_budget", 0)
            row = conn.execute("SELECT last_seq FROM projects WHERE id = %s", (project,)).fetchone()
            assert row == (1,)  # the brake's notice
    finally:
        sender.close()
        await node_b.close()
