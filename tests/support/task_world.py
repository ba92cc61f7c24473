"""A project driven through the real actions on a real (migrated) database, with no HTTP and
no model: the runtime records wake-ups (:class:`WakeRecorder`), so a test sees exactly who was
asked to act, and a frame sink stands in for a socket. The ``world`` fixture (conftest) makes
one with a lead and three engineers; the helpers below submit plans, evidence and reviews.
A module imports :func:`world_on_both_stores` to run its ``world`` tests on SQLite and on
PostgreSQL (``[sqlite]``, ``[postgresql]``).
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar, cast

import pytest

from room.actions import auth as auth_actions
from room.actions import plans as plan_actions
from room.actions import projects as project_actions
from room.actions import task_updates as updates
from room.actions import tasks as task_actions
from room.actions import wiring
from room.actions.task_updates import CriterionVerdict, EvidenceInput
from room.agents.context import Line
from room.infra.hub import Hub
from room.infra.outbox import Outbox
from room.rules.entities import Member
from room.services import NoAgents, RateLimiter, RosterCache, Services
from room.settings import Settings
from room.store import Database, Tx, indexer, run_write
from room.store import deliveries as deliveries_store
from room.store import members as members_store
from room.store.migrate import connect, migrate
from room.store.pg import connect as pg_connect
from room.store.pg_migrate import migrate as pg_migrate

R = TypeVar("R")


class WakeRecorder(NoAgents):
    def __init__(self) -> None:
        self.woken: list[int] = []

    def wake(self, project_id: int, member_ids: Iterable[int]) -> None:
        self.woken.extend(member_ids)


class FrameSink:
    """Stands in for a live socket: keeps every frame the hub writes to its outbox."""

    def __init__(self) -> None:
        self.frames: list[dict[str, Any]] = []

    def outbox(self, hub: Hub) -> Outbox:
        return Outbox(_never, _never, limit=100_000, direct=self._take, flusher=hub.flusher)

    def _take(self, wire: bytes) -> bool:
        """The socket took ``wire``: one or more unmasked RFC 6455 text frames."""
        at = 0
        while at < len(wire):
            size, at = wire[at + 1] & 0x7F, at + 2
            if size == 126:
                size, at = int.from_bytes(wire[at : at + 2]), at + 2
            elif size == 127:
                size, at = int.from_bytes(wire[at : at + 8]), at + 8
            self.frames.append(json.loads(wire[at : at + size]))
            at += size
        return True


async def _never(*_: object) -> None:
    raise AssertionError("the sink takes every frame directly")


@dataclass
class World:
    core: Services
    runtime: WakeRecorder
    project_id: int
    workspace: Path
    members: dict[str, Member] = field(default_factory=dict)
    sink: FrameSink = field(default_factory=FrameSink)

    def __getitem__(self, handle: str) -> Member:
        return self.members[handle]

    async def read(self, fn: Callable[[sqlite3.Connection], R]) -> R:
        return await self.core.db.read(fn)

    async def write(self, fn: Callable[[sqlite3.Connection, Tx], R]) -> R:
        return await self.core.db.write(fn)

    async def board(self) -> dict[str, Any]:
        return await task_actions.read_board(self.core, self.project_id)

    async def task(self, key: str) -> dict[str, Any]:
        board = await self.board()
        return next(t for t in board["tasks"] if t["key"] == key)

    async def messages(self) -> list[dict[str, Any]]:
        rows = await self.read(
            lambda c: c.execute(
                "SELECT id, author_id, kind, body, frame FROM messages WHERE project_id = ?"
                " ORDER BY seq",
                (self.project_id,),
            ).fetchall()
        )
        return [
            {"id": r[0], "author_id": r[1], "kind": r[2], "body": r[3], **json.loads(r[4])}
            for r in rows
        ]

    async def deliveries(self, handle: str) -> list[tuple[str, str]]:
        """(message body, delivery state) of every delivery to ``handle``, oldest first."""
        member_id = self[handle].id
        rows = await self.read(
            lambda c: c.execute(
                "SELECT m.body, d.state FROM deliveries d JOIN messages m ON m.id = d.message_id"
                " WHERE d.recipient_id = ? ORDER BY d.id",
                (member_id,),
            ).fetchall()
        )
        return [(str(r[0]), str(r[1])) for r in rows]

    async def agent_texts(self, handle: str) -> list[str]:
        """What the agent ``handle`` reads of each of its deliveries, oldest first: the
        messages as its session takes them in (the store's inbound rows, the context's lines)."""
        member_id = self[handle].id

        def read(c: sqlite3.Connection) -> list[deliveries_store.Inbound]:
            ids = [
                int(r[0])
                for r in c.execute(
                    "SELECT id FROM deliveries WHERE recipient_id = ? ORDER BY id", (member_id,)
                )
            ]
            return deliveries_store.inbound_by_ids(c, ids)

        return [
            Line(i.seq, i.author_id, i.body, for_agents=i.for_agents).text
            for i in await self.read(read)
        ]

    async def count(self, table: str) -> int:
        return int(
            await self.read(
                lambda c: c.execute(
                    f"SELECT count(*) FROM {table} WHERE project_id = ?", (self.project_id,)
                ).fetchone()[0]
            )
        )

    async def refresh(self) -> None:
        members = await self.read(lambda c: members_store.list_for_project(c, self.project_id))
        self.members = {m.handle: m for m in members}
        self.core.rosters.invalidate(self.project_id)

    async def frames(self, kind: str) -> list[dict[str, Any]]:
        """The frames of ``kind`` written so far (after the loop turn's fan-out)."""
        await asyncio.sleep(0)
        return [f for f in self.sink.frames if f["type"] == kind]


async def make_world(tmp_path: Path, url: str | None = None) -> AsyncIterator[World]:
    """The world of the ``world`` fixture, closed when the iteration ends; on the PostgreSQL
    database ``url`` when given (its search index in that database: docs/storage.md)."""
    path = tmp_path / "room.sqlite"
    search_indexer = None
    if url is None:
        conn = connect(path)
        migrate(conn, path, now=time.time())
        owner = run_write(conn, auth_actions.ensure_owner)
        conn.close()
        db = Database(path, attach=indexer.prepare(path))
        db.start(asyncio.get_running_loop())
        search_indexer = indexer.SearchIndexer(path)  # as the server runs it
        search_indexer.start(asyncio.get_running_loop())
    else:
        pg = pg_connect(url)
        pg_migrate(pg, now=time.time())
        owner = run_write(cast(sqlite3.Connection, pg), auth_actions.ensure_owner)
        pg.close()
        db = Database(path, url=url)
        db.start(asyncio.get_running_loop())
        search_indexer = indexer.SearchIndexer(url)  # the index is in the database
        search_indexer.start(asyncio.get_running_loop())
    runtime = WakeRecorder()
    core = Services(
        # The workspace (tmp_path/ws) is outside the default roots (<data>/workspaces).
        settings=Settings(data=tmp_path / "data", workspace_roots=(str(tmp_path),)),
        db=db,
        hub=Hub(),
        rosters=RosterCache(db),
        limiter=RateLimiter(1000.0, 1000),
        agents=runtime,
        search_indexer=search_indexer,
    )
    wiring.install(core)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    try:
        project = await project_actions.create_project(
            core,
            owner,
            name="任务项目",
            workspace=str(workspace),
            agents=[
                project_actions.AgentSpec("lead", "lead", "负责人"),
                project_actions.AgentSpec("backend", "be", "后端"),
                project_actions.AgentSpec("frontend", "fe", "前端"),
                project_actions.AgentSpec("tester", "qa", "测试"),
            ],
        )
        found = World(core, runtime, project.id, workspace)
        await found.refresh()
        sub = core.hub.subscribe(project.id, found.sink.outbox(core.hub), found["owner"].id)
        core.hub.go_live(sub, 0)
        yield found
    finally:
        if search_indexer is not None:
            await search_indexer.close()
        await db.close()


def item(key: str, owner: str, *deps: str, criteria: int = 1, **extra: Any) -> dict[str, Any]:
    return {
        "key": key,
        "title": f"做 {key}",
        "owner": owner,
        "depends_on": list(deps),
        "acceptance": [f"{key} 标准 {n}" for n in range(1, criteria + 1)],
        **extra,
    }


async def plan(world: World, *items: dict[str, Any], by: str = "lead") -> dict[str, Any]:
    return await plan_actions.submit_plan(
        world.core, world[by], {"goal": "做完", "items": list(items)}
    )


def write_file(world: World, name: str, text: str) -> str:
    path = world.workspace / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return name


async def submit(world: World, who: str, key: str, *files: str, summary: str = "完成") -> Any:
    evidence = EvidenceInput(summary, tuple(files))
    return await updates.change_task(world.core, world[who], key, "submit", evidence=evidence)


async def review(world: World, who: str, key: str, *verdicts: tuple[int, bool]) -> Any:
    results = [CriterionVerdict(n, ok, f"检查了第 {n} 条") for n, ok in verdicts]
    return await updates.review_task(world.core, world[who], key, results)


@pytest.fixture(name="world", params=["sqlite", "postgresql"])
async def world_on_both_stores(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[World]:
    """conftest's ``world`` on each store (``[postgresql]``: a fresh database of the tests'
    private cluster); a module that imports it runs every ``world`` test on both."""
    url = None if request.param == "sqlite" else str(request.getfixturevalue("pg_dsn"))
    async for found in make_world(tmp_path, url):
        yield found
