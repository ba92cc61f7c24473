"""Build the server: ``RoomServer(settings)`` opens the data folder, ``create_app`` the ASGI app.

Start-up order (each phase a line in ``boot-trace.jsonl``): take the data-folder lock → open and
check the database → back up and migrate → seed the owner and the demo project → start the
writer and readers → write ``boot-report.json`` → ``ready``. The lock is taken before the port
is bound, so a second server on the same folder exits at once, naming the holder's pid.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import os
import socket
import sqlite3
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import partial
from typing import Any, cast

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, WebSocketRoute

from room import pages
from room.actions import attachments as attachment_actions
from room.actions import auth as auth_actions
from room.actions import digest as digest_actions
from room.actions import portfolio as portfolio_actions
from room.actions import presence as presence_actions
from room.actions import projects as project_actions
from room.actions import research as research_actions
from room.actions import tenancy, wiring
from room.actions import workspaces as workspace_actions
from room.actions.lifecycle import restart_stops
from room.actions.recovery import reconcile_on_start
from room.actions.relay import Relay
from room.agents import AgentSettings, Scheduler
from room.agents.memory_tools import MEMORY_TOOLS
from room.agents.research_run import ResearchRunner
from room.agents.research_tools import PROPOSE_TOOLS
from room.agents.task_tools import TASK_TOOLS
from room.agents.tools import BUILTIN_TOOLS, Tool
from room.agents.work_tools import WORK_TOOLS
from room.api import endpoints as api_endpoints
from room.auth import credential_rechecks, user_change_watch
from room.errors import RoomError, StorageError
from room.infra import blobs, boot, perms
from room.infra.boot import BootTrace, write_report
from room.infra.bus import Bus, ClusterHub, describe_nodes
from room.infra.git import Git
from room.infra.hub import Hub
from room.infra.pdfpreview import PdfPreviewer
from room.infra.sandbox import Sandbox
from room.infra.sandbox import probe as sandbox_probe
from room.infra.supervise import sweep_orphans
from room.infra.transport import offers_direct_write
from room.mcp_server import MCP_PATH, McpRoom
from room.providers import ProviderRegistry, default_configs
from room.rules.entities import User
from room.rules.protocol import CLIENT_FRAME_TYPES
from room.services import RateLimiter, RosterCache, Services
from room.settings import Settings
from room.store import Database, DataLock, Tx, indexer, pg, pg_migrate, run_write
from room.store import cluster as cluster_store
from room.store import leases as leases_store
from room.store import projects as projects_store
from room.store.migrate import connect, migrate
from room.store.schema import SCHEMA_VERSION
from room.ws import ws_endpoint

log = logging.getLogger(__name__)

GC_GEN0_THRESHOLD = 100_000
# pg_advisory_xact_lock's key for seeding the owner and the demo project on PostgreSQL: "room"
# then "seed" in ASCII (the migrations' lock is "room" "migr").
SEED_LOCK_KEY = 0x726F6F6D_73656564
DEMO_PROJECT = "演示项目"
DEMO_GOAL = "熟悉 Project Room：在时间线里 @ 成员，看看离线回显路由如何回复。"


@dataclass(frozen=True, slots=True)
class Demo:
    """The demo project's words in one language (setting ``lang``)."""

    name: str
    goal: str
    lead: str
    lead_aliases: tuple[str, ...]
    owner: str


#: The demo project and the owner as first made, in the server's language (setting ``lang``):
#: a newcomer reads their own language from the first screen; made once, they are the
#: project's own data (renamed, exported, purged like any other).
DEMOS: Mapping[str, Demo] = {
    "zh": Demo(DEMO_PROJECT, DEMO_GOAL, "负责人", ("队长",), "管理员"),
    "en": Demo(
        "Demo project",
        "Get to know Project Room: @mention a member in the timeline and see how the offline "
        "echo route answers.",
        "Lead",
        ("Captain",),
        "Admin",
    ),
}


@dataclass(frozen=True, slots=True)
class Opened:
    owner: User
    login_secret: str
    demo_project_id: int | None
    migrations: list[str]


class RoomServer:
    """Owns the data folder for the life of the process. ``ws_protocol`` is the websocket
    protocol the HTTP server runs (uvicorn's ``ws`` option; ``room serve`` configures uvicorn
    from it), so the boot report can say whether fan-out writes straight to the sockets."""

    def __init__(self, settings: Settings, *, ws_protocol: type[Any] | str = "auto") -> None:
        self.settings = settings
        self.ws_protocol = ws_protocol
        self.lock = DataLock(settings.lock_path)
        self.trace: BootTrace | None = None
        self.opened: Opened | None = None

    def open(self) -> Opened:
        if self.opened is not None:
            return self.opened
        data = self.settings.data
        data.mkdir(mode=perms.FOLDER_MODE, parents=True, exist_ok=True)
        # Older releases left the folder 0755 and the database 0644: its owner's alone now.
        tightened = perms.tighten(perms.private_paths(data))
        self.trace = trace = BootTrace(data)
        if tightened:  # said once, in the trace of the start that did it
            trace.phase("start", data=str(data.resolve()), tightened=tightened)
        else:
            trace.phase("start", data=str(data.resolve()))
        try:
            self.lock.acquire(wait_secs=self.settings.lock_wait_secs)
        except RoomError as exc:
            trace.phase("lock", ok=False, error=exc.message)
            raise
        trace.phase("lock")
        try:
            self.opened = self._open_database(trace)
        except Exception as exc:
            trace.phase("failed", ok=False, error=str(exc))
            self.lock.release()
            raise
        return self.opened

    def _open_database(self, trace: BootTrace) -> Opened:
        if self.settings.database_url is not None:
            return self._open_postgres(trace, self.settings.database_url)
        conn = connect(self.settings.db_path, synchronous=self.settings.synchronous)
        try:
            trace.phase("database", path=str(self.settings.db_path))
            applied = migrate(conn, self.settings.db_path, now=_now())
            return self._finish_open(conn, trace, applied, self._search_index, self._seed)
        finally:
            conn.close()

    def _open_postgres(self, trace: BootTrace, url: str) -> Opened:
        """The PostgreSQL store (docs/storage.md): reached (exit 5 when it cannot be), migrated
        under the advisory lock (several processes may start together), seeded. The messages'
        search index lives in the same database (room.store.search_pg)."""
        conn = pg.connect(url, statement_timeout_ms=self.settings.database_statement_timeout_ms)
        try:
            trace.phase(
                "database",
                backend="postgresql",
                url=pg.redact(url),
                version=pg.server_version(conn),
            )
            applied = pg_migrate.migrate(conn, now=_now())

            def seed(c: sqlite3.Connection, tx: Tx) -> tuple[User, int | None]:
                # Servers starting together seed one at a time: the second finds the owner
                # and the demo project the first made (held until this transaction ends).
                c.execute("SELECT pg_advisory_xact_lock(?)", (SEED_LOCK_KEY,))
                return self._seed(c, tx)

            typed = cast(sqlite3.Connection, conn)  # the store's functions run on both
            return self._finish_open(typed, trace, applied, lambda: indexer.lag(url), seed)
        finally:
            conn.close()

    def _finish_open(
        self,
        conn: sqlite3.Connection,
        trace: BootTrace,
        applied: list[str],
        search_lag: Callable[[], dict[str, int]],
        seed: Callable[[sqlite3.Connection, Tx], tuple[User, int | None]],
    ) -> Opened:
        """What both stores do once migrated: the search index's state in the trace, the owner
        and the demo project seeded, and the owner's first login link."""
        trace.phase("migrate", applied=applied, schema_version=SCHEMA_VERSION)
        behind = search_lag()
        forgotten = run_write(
            conn, lambda c, tx: indexer.forget_applied_changes(c, self.settings.db_path)
        )
        trace.phase(
            "search_index",
            behind=behind["messages"],
            changes=behind["changes"],
            changes_forgotten=forgotten,
        )
        owner, demo_id = run_write(conn, seed)
        secret = run_write(
            conn,
            lambda c, tx: auth_actions.create_login_link(
                c, tx, owner.id, self.settings.login_link_minutes
            ),
        )
        trace.phase("seed", demo_project_id=demo_id)
        return Opened(owner, secret, demo_id, applied)

    def _search_index(self) -> dict[str, int]:
        """The messages' index file, made if missing; what it has still to index (the indexer
        catches up in the background once the server runs: docs/search.md)."""
        indexer.prepare(self.settings.db_path)
        return indexer.lag(self.settings.db_path)

    def _seed(self, conn: sqlite3.Connection, tx: Tx) -> tuple[User, int | None]:
        tx.node = tx.node or boot.node_id(self.settings.data)  # the demo project's home
        demo = DEMOS[self.settings.lang]
        owner = auth_actions.ensure_owner(conn, tx, demo.owner)
        if not self.settings.demo or projects_store.list_all(conn):
            return owner, None
        project_id, _ = project_actions.insert_project(
            conn,
            tx,
            owner,
            name=demo.name,
            goal=demo.goal,
            workspace=None,
            agents=[project_actions.AgentSpec("lead", "lead", demo.lead, demo.lead_aliases)],
        )
        return owner, project_id

    def login_url(self) -> str:
        assert self.opened is not None
        return f"{self.settings.origin}/login/{self.opened.login_secret}"

    def close(self) -> None:
        self.lock.release()


def create_app(
    settings: Settings,
    server: RoomServer | None = None,
    *,
    env: Mapping[str, str] | None = None,
    tools: Mapping[str, Tool] | None = None,
) -> Starlette:
    """The ASGI app. ``env`` configures model providers (default: the process environment);
    ``tools`` replaces the agents' room tools (tests inject slow or failing ones)."""
    server = server or RoomServer(settings)
    provider_env = os.environ if env is None else env
    agent_tools = (
        {**BUILTIN_TOOLS, **TASK_TOOLS, **WORK_TOOLS, **MEMORY_TOOLS, **PROPOSE_TOOLS}
        if tools is None
        else tools
    )
    # External agents' MCP clients get the same tools as the in-process turns (one source).
    mcp_room = McpRoom(agent_tools)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[dict[str, Any]]:
        server.open()
        trace = server.trace
        assert trace is not None
        await asyncio.to_thread(blobs.sweep_tmp, settings.attachments_root)
        on_postgres = settings.database_url is not None
        db = Database(
            settings.db_path,
            url=settings.database_url,
            synchronous=settings.synchronous,
            max_batch=settings.max_batch,
            readers=settings.reader_threads,
            # SQLite's search index is a file of its own the readers attach; PostgreSQL's is
            # in the same database.
            attach=None if on_postgres else indexer.prepare(settings.db_path),
            statement_timeout_ms=settings.database_statement_timeout_ms,
            node=boot.node_id(settings.data),
            check_locks=settings.database_check_locks,
        )
        db.start(asyncio.get_running_loop())
        search_indexer = None
        if settings.search_index_messages:
            search_indexer = indexer.SearchIndexer(settings.database_url or settings.db_path)
            search_indexer.start(asyncio.get_running_loop())
        bus = None
        # The database's own id, which names its cluster's bus subjects (docs/cluster.md).
        cluster = await db.read(cluster_store.cluster_id) if on_postgres else None
        if cluster is not None and settings.bus_url is not None:  # hints between the nodes
            bus = Bus(settings.bus_url, boot.node_id(settings.data), cluster, _address(settings))
        core = Services(
            settings=settings,
            db=db,
            hub=Hub() if bus is None else ClusterHub(bus),
            rosters=RosterCache(db),
            limiter=RateLimiter(settings.send_rate_per_sec, settings.send_burst),
            uploads=RateLimiter(settings.attachment_rate_per_min / 60, settings.attachment_burst),
            search_indexer=search_indexer,
        )
        relay = None
        if on_postgres:  # other servers may write the same projects: read their events back
            relay = Relay(
                db,
                core.hub,
                bus=bus,
                bus_poll_secs=settings.bus_poll_secs,
                on_roster=partial(_roster_heard, core),
            )
            relay.start()
            core.relay = relay
        wiring.install(core)
        app.state.core = core
        app.state.server = server
        trace.phase("writer")
        configs = default_configs(
            provider_env,
            idle_timeout_secs=settings.provider_idle_timeout_secs,
            first_byte_timeout_secs=settings.provider_first_byte_timeout_secs,
            connect_timeout_secs=settings.provider_connect_timeout_secs,
            max_retries=settings.provider_max_retries,
        )
        registry = ProviderRegistry(configs, env=provider_env)
        # Probed once: what isolation this machine offers. The data folder (database, tokens'
        # hashes, other projects' default workspaces) is hidden from every command; a workspace
        # inside it is bound again, writable, by the sandbox itself.
        found = await asyncio.to_thread(sandbox_probe)
        sandbox = found.configured(
            hidden=[settings.data.resolve()], tmp_bytes=settings.sandbox_tmp_bytes
        )
        core.git = Git(sandbox.git_jail())
        # Uploaded PDFs are parsed only in that sandbox, with poppler when it is installed.
        core.pdfs = PdfPreviewer(sandbox)
        swept = await asyncio.to_thread(sweep_orphans, sandbox.info.pids_cgroup)
        trace.phase(
            "sandbox",
            isolated=sandbox.info.isolated,
            reason=sandbox.info.reason,
            orphans_killed=swept.processes,
            pdf_previews=core.pdfs.reason or "on",
        )
        scheduler = Scheduler(
            core,
            registry,
            AgentSettings(
                max_concurrent_turns=settings.max_concurrent_turns,
                context_tokens=settings.context_tokens,
                stop_confirm_secs=settings.stop_confirm_secs,
            ),
            tools=agent_tools,
            sandbox=sandbox,
        )
        core.agents = scheduler
        if relay is not None:  # wakes and stop requests from the other servers
            relay.handlers.append(partial(_agents_heard, core, scheduler))
            if scheduler.in_process.leasing is not None:  # and the wakes a bus drop lost
                relay.on_rejoin = scheduler.in_process.leasing.sweep_soon
        if isinstance(core.hub, ClusterHub):  # people and agents present through other nodes
            here = core.hub.cluster_presence
            here.on_people = partial(_people_heard, core)
            here.on_agents = partial(_agents_presence_heard, core)
            here.local_agents = partial(_agents_here, core, scheduler)
        unsent = await attachment_actions.sweep_unsent(core)
        trace.phase("attachments", unsent_removed=unsent, folder=str(settings.attachments_root))
        if bus is not None and settings.attachments_dir is None:
            log.warning(
                "attachments go to %s, this node's own folder: the other nodes cannot serve "
                "them; set attachments_dir (ROOM_ATTACHMENTS_DIR) to the folder every node "
                "shares (docs/cluster.md, Attachments)",
                settings.attachments_root,
            )
        research = ResearchRunner(
            core, registry, closing=lambda: scheduler.closing, leasing=scheduler.in_process.leasing
        )
        core.research = research
        # The start-up's settling may post a notice in any project: every live one is declared
        # (docs/storage.md, "Lock order: the project first"), locked in id order as any batch
        # locks its projects; once, before this node serves anything.
        every = await db.read(projects_store.live_ids)
        unconfirmed = await db.write(lambda conn, tx: restart_stops(conn, tx), locks=every)
        # A research run cut by the stop waits for a person (paused_reconcile).
        reconciled = await db.write(research_actions.reconcile_on_start, locks=every)
        recovery = await db.write(reconcile_on_start, locks=every)
        recovery["stops_unconfirmed"] = unconfirmed
        recovery["research_reconciled"] = reconciled
        restored = boot.read_restored(settings.data)
        if restored is not None:  # the first start after `room restore` (docs/backup.md)
            recovery["restored"] = restored
        scheduler.recovery = recovery
        trace.phase("reconcile", **{k: v for k, v in recovery.items() if k != "notices"})
        providers = await _provider_status(registry)
        # Where workspaces may be, and any live projects sharing a folder since before a folder
        # belonged to one project: the operator's to sort out (docs/architecture.md, "Operators").
        workspaces = {
            **workspace_actions.roots_report(settings),
            "overlaps": await db.read(tenancy.overlaps),
        }
        write_report(
            settings.data,
            settings=_public_settings(settings),
            schema_version=SCHEMA_VERSION,
            tools=sorted(scheduler.tools),
            capabilities=_capabilities(app, server, db, sandbox, core.pdfs),
            database=db.info
            if relay is None
            else {  # a cluster's node: its id, its cluster's, and its bus (docs/cluster.md)
                **db.info,
                "node": boot.node_id(settings.data),
                "cluster": cluster,
                "bus": None if settings.bus_url is None else pg.redact(settings.bus_url),
            },
            providers=providers,
            recovery=recovery,
            workspaces=workspaces,
        )
        trace.phase("report")
        if restored is not None:
            boot.clear_restored(settings.data)
        # A cluster's node keeps its view (its bus, the peers it hears) in the report.
        viewing = (
            None
            if bus is None
            else asyncio.create_task(bus.report(partial(_write_view, core)), name="cluster-view")
        )
        await scheduler.start()
        # Everything built so far (modules, validators, endpoints, caches) lives as long as the
        # process: freeze it out of future collections, and collect the young generation less
        # often — a send allocates dozens of containers, and at the default threshold (700) a
        # collection ran every few messages (15–20 % of the loop's CPU in the bench profile).
        # A collection walks every young object still alive, and an overloaded server holds a
        # few thousand sends in flight (~30 containers each): at 20,000 one ran every ~1,500
        # sends and took 20–30 ms, 8–10 µs of loop CPU per send; at 100,000 almost none runs.
        gc.collect()
        gc.freeze()
        gc.set_threshold(GC_GEN0_THRESHOLD, 20, 20)
        daily = (
            asyncio.create_task(portfolio_actions.daily_scans(core), name="risk-scan")
            if settings.risk_scan_daily
            else None
        )
        rechecks = asyncio.create_task(
            credential_rechecks(core, settings.credential_recheck_secs), name="credentials"
        )
        user_watch = asyncio.create_task(
            user_change_watch(core, settings.user_watch_secs), name="user-changes"
        )
        mcp_running = contextlib.AsyncExitStack()
        await mcp_running.enter_async_context(mcp_room.run(core))
        app.state.mcp = mcp_room
        # The email digest of unread mentions: off unless the operator names an SMTP server.
        digests = (
            asyncio.create_task(digest_actions.digest_loop(core), name="digests")
            if settings.digest_smtp_host
            else None
        )
        trace.phase("ready", origin=settings.origin)
        try:
            yield {"core": core}
        finally:
            trace.phase("stopping")
            await mcp_running.aclose()
            for task in (daily, rechecks, user_watch, digests, viewing):
                if task is not None:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
            scheduler.closing = True
            await research.close()
            await scheduler.close()
            if search_indexer is not None:
                await search_indexer.close()
            if relay is not None:
                await relay.close()
            await db.close()
            server.close()
            trace.phase("stopped")

    app = Starlette(
        routes=[
            *pages.endpoints,
            *api_endpoints,
            WebSocketRoute("/ws", ws_endpoint),
            Route(MCP_PATH, mcp_room),
        ],
        lifespan=lifespan,
        exception_handlers={RoomError: _room_error},  # type: ignore[dict-item]
    )
    return app


async def _room_error(request: Request, exc: RoomError) -> Response:
    return JSONResponse({"error": exc.to_dict()}, status_code=exc.http_status)


def _capabilities(
    app: Starlette, server: RoomServer, db: Database, sandbox: Sandbox, pdfs: PdfPreviewer
) -> dict[str, Any]:
    """What this process really does, read from the objects that do it."""
    serves_ws = any(
        isinstance(r, WebSocketRoute) and r.path == "/ws" and r.endpoint is ws_endpoint
        for r in app.routes
    )
    return {
        # The writer commits many queued writes in one transaction (one fsync).
        "group_commit": db.max_batch > 1,
        # Fan-out writes pre-framed text straight to each socket (room.infra.transport).
        "direct_fanout": offers_direct_write(server.ws_protocol),
        # /ws takes an agent's token (``auth``); there the runtime hands an external agent its
        # deliveries.
        "external_agents": serves_ws and "auth" in CLIENT_FRAME_TYPES,
        "frame_types": list(CLIENT_FRAME_TYPES),
        # What the agents' shell tool runs in, as the start-up probe found it; without isolation
        # commands run only in projects whose owner turned on unsandboxed execution.
        "sandbox": {
            "isolated": sandbox.info.isolated,
            "reason": sandbox.info.reason or None,
            "process_limit": sandbox.info.process_limit,
        },
        # An uploaded PDF's first page, drawn by poppler in that sandbox (never outside it):
        # "on", or why not ("no_poppler", "no_sandbox").
        "pdf_previews": pdfs.reason or "on",
    }


def _address(settings: Settings) -> str | None:
    """Where this node listens, as its heartbeats tell the other nodes (docs/cluster.md)."""
    if settings.port == 0:
        return None
    host = socket.gethostname() if settings.host in ("0.0.0.0", "::", "") else settings.host
    return f"{host}:{settings.port}"


async def _write_view(core: Services, view: dict[str, Any]) -> None:
    """boot-report.json's ``cluster``: the bus's view, and the projects each node is home of."""
    try:
        homes = await core.db.read(leases_store.homes_by_node)
        running = await core.db.read(leases_store.running_by_node)
        view["database_reached"] = True
    except StorageError:  # the bus and the peers are still worth writing down
        homes, running = {}, {}
        view["database_reached"] = False
    node = view["node"]
    view["home_of"] = homes.get(node, {"count": 0, "projects": []})
    view["running_turns"] = running.get(node, 0)
    view["peers"] = describe_nodes(view["peers"], homes, running, skip=node)
    await asyncio.to_thread(boot.update_report, core.settings.data, "cluster", view)


def _public_settings(settings: Settings) -> dict[str, Any]:
    data = settings.model_dump(mode="json")
    if settings.database_url is not None:  # never its password
        data["database_url"] = pg.redact(settings.database_url)
    if settings.bus_url is not None:
        data["bus_url"] = pg.redact(settings.bus_url)
    data["origin"] = settings.origin
    return data


_AGENT_HINTS = frozenset({"w", "s", "rs", "rx", "sp"})


def _agents_heard(core: Services, scheduler: Scheduler, project_id: int | None, hint: Any) -> bool:
    """Another server woke agents (the external ones whose sockets are here are pushed; an
    in-process agent runs on its project's home node) or asked a turn to stop (it may run here)."""
    kind = hint.get("k")
    if kind in _AGENT_HINTS and not scheduler.started:
        # Before the start-up reconciliation nothing runs here to stop, and what a hint would
        # start is found in the database by scheduler.start() and the leases' first sweep.
        return True
    if kind == "w":
        # An external agent whose socket is here; an in-process one when this node is the
        # project's home (its session looks before it opens a turn: room.agents.leasing).
        members = [int(m) for m in hint.get("m", ())]
        if scheduler.in_process.leasing is None:
            members = [m for m in members if core.inboxes.of(m)]
        if members:
            scheduler.wake(int(hint["p"]), members)
        return True
    if kind == "s":
        scheduler.stop_member(int(hint["m"]))
        return True
    if kind == "rs":  # a research run started elsewhere, for a project whose work runs here
        core.research.start(int(hint["r"]), forward=False)  # never passed on again
        return True
    if kind == "rx":  # a research run paused or stopped elsewhere: it may run here
        task = asyncio.get_running_loop().create_task(core.research.stop_here(int(hint["r"])))
        core.background.add(task)
        task.add_done_callback(core.background.discard)
        return True
    if kind == "sp":  # not scheduler.stop_project: that would tell the others again
        project = int(hint["p"])

        async def stop() -> None:
            await core.research.stop_project(project)  # its research runs here too
            await scheduler.in_process.stop_project(project, 0)

        task = asyncio.get_running_loop().create_task(stop())
        core.background.add(task)
        task.add_done_callback(core.background.discard)
        return True
    return False


def _people_heard(core: Services, user_ids: set[int]) -> None:
    """People came online or went offline through another node: their projects hear of it."""
    task = asyncio.get_running_loop().create_task(
        presence_actions.people_changed(core, user_ids), name="presence elsewhere"
    )
    core.background.add(task)
    task.add_done_callback(core.background.discard)


def _agents_presence_heard(core: Services, member_ids: set[int]) -> None:
    """Agents' sockets or turns came or went on another node: their projects hear of it."""
    task = asyncio.get_running_loop().create_task(
        presence_actions.agents_changed(core, member_ids), name="agents elsewhere"
    )
    core.background.add(task)
    task.add_done_callback(core.background.discard)


def _agents_here(core: Services, scheduler: Scheduler) -> tuple[list[int], list[int]]:
    """The external agents with a socket open here, and the agents with a turn running here."""
    running = [s.member_id for s in scheduler.in_process.sessions.values() if s.running]
    return sorted(core.inboxes.members()), sorted(running)


def _roster_heard(core: Services, project_id: int) -> None:
    """Another server changed the project's roster: the cached one goes, presence follows."""
    core.rosters.invalidate(project_id)
    presence_actions.schedule(core, project_id)


def _now() -> float:
    return time.time()


PROVIDER_CHECK_SECS = 5.0


async def _provider_status(registry: ProviderRegistry) -> list[dict[str, Any]]:
    try:
        async with asyncio.timeout(PROVIDER_CHECK_SECS):
            return [status.to_dict() for status in await registry.status()]
    except TimeoutError:
        return [
            {"name": name, "available": None, "reason": "check timed out"}
            for name in registry.names()
        ]
