"""The services: the server's parts wired together (:class:`Services`), built once by
``create_app`` and passed to every handler and action — by convention as ``core``.

No module-level state: tests build as many as they like, each on its own data folder.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Coroutine, Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

from room.infra.git import Git
from room.infra.hub import Hub
from room.infra.pdfpreview import PdfPreviewer
from room.rules.effects import FollowUp
from room.rules.entities import Member
from room.rules.mentions import Roster, RosterMember, Tombstone
from room.settings import Settings
from room.store import Database
from room.store import members as members_store
from room.store import projects as projects_store
from room.store import users as users_store
from room.store.indexer import SearchIndexer


class Waker(Protocol):
    """What actions tell the agents' scheduler (it reads the ledger itself)."""

    def wake(self, project_id: int, member_ids: Iterable[int]) -> None: ...

    def wake_project(self, project_id: int) -> None: ...

    def stop_member(self, member_id: int) -> bool: ...

    async def stop_project(self, project_id: int, wait_secs: float | None = None) -> bool: ...

    def running_members(self, project_id: int) -> list[int]: ...


class ResearchRunner(Protocol):
    """What actions tell the research runner (room.agents.research_run)."""

    def start(self, research_id: int, *, forward: bool = True) -> None: ...

    async def stop(self, research_id: int) -> None: ...

    async def stop_here(self, research_id: int) -> None: ...

    async def stop_project(self, project_id: int) -> None: ...


class NoResearch:
    """No runner (tests of the actions alone): a started run waits in ``running``."""

    def start(self, research_id: int, *, forward: bool = True) -> None:
        return None

    async def stop(self, research_id: int) -> None:
        return None

    async def stop_here(self, research_id: int) -> None:
        return None

    async def stop_project(self, project_id: int) -> None:
        return None


class NoAgents:
    """Before the scheduler starts (and in tests of the store alone): nothing runs."""

    def wake(self, project_id: int, member_ids: Iterable[int]) -> None:
        return None

    def wake_project(self, project_id: int) -> None:
        return None

    def stop_member(self, member_id: int) -> bool:
        return False

    async def stop_project(self, project_id: int, wait_secs: float | None = None) -> bool:
        return True

    def running_members(self, project_id: int) -> list[int]:
        return []


# Offers an external agent's pending deliveries to one of its open sockets (given the member id).
InboxPush = Callable[[int], Coroutine[Any, Any, None]]


class Inboxes:
    """The open sockets of external agents, per member: ``/ws`` registers one when an external
    agent connects, and the agents' external driver pushes its deliveries through them."""

    def __init__(self) -> None:
        self._pushes: dict[int, set[InboxPush]] = {}

    def open(self, member_id: int, push: InboxPush) -> None:
        self._pushes.setdefault(member_id, set()).add(push)

    def close(self, member_id: int, push: InboxPush) -> None:
        pushes = self._pushes.get(member_id)
        if pushes is not None:
            pushes.discard(push)
            if not pushes:
                del self._pushes[member_id]

    def of(self, member_id: int) -> list[InboxPush]:
        return list(self._pushes.get(member_id, ()))

    def members(self) -> list[int]:
        """The external agents with a socket open here."""
        return list(self._pushes)


# Something another part of the server does with a stored message, registered on the services so
# that the send path need not know it (a ``/change`` message revises the requirement). Called
# with the sender and the body before the send is queued (it may refuse the send by raising), it
# returns None or a function making, from the stored message's id, the write that follows the
# send's commit as its own job.
SendHook = Callable[[Member, str], Callable[[int], FollowUp] | None]


@dataclass(slots=True)
class ProjectRoster:
    """A project's members and the resolver's roster, cached until a member changes."""

    members: dict[int, Member]
    roster: Roster
    lead_id: int | None
    # People whose accounts an operator disabled (room users): members still, never mentioned.
    disabled: frozenset[int] = frozenset()
    # projects.roster_version when it was read (None: built without one, never checked). A
    # send checks it under the project's lock: a roster changed by any process since is stale.
    version: int | None = None

    def member(self, member_id: int) -> Member | None:
        return self.members.get(member_id)


class RosterCache:
    def __init__(self, db: Database) -> None:
        self._db = db
        self._cache: dict[int, ProjectRoster] = {}
        # Bumped by every invalidation: a read that was in flight across one must not be cached
        # (it may predate the change that invalidated the cache).
        self._generation: dict[int, int] = {}

    async def get(self, project_id: int) -> ProjectRoster:
        cached = self._cache.get(project_id)
        if cached is not None:
            return cached
        generation = self._generation.get(project_id, 0)
        members, names, lead_id, disabled, version = await self._db.read(
            lambda conn: (
                members_store.list_for_project(conn, project_id),
                members_store.names_for_project(conn, project_id),
                projects_store.lead_of(conn, project_id),
                users_store.disabled_members(conn, project_id),
                projects_store.roster_version(conn, project_id),
            )
        )
        built = build_roster(members, names, lead_id, disabled)
        built.version = version
        if self._generation.get(project_id, 0) == generation:
            self._cache[project_id] = built
        return built

    def peek(self, project_id: int) -> ProjectRoster | None:
        return self._cache.get(project_id)

    def invalidate(self, project_id: int) -> None:
        self._cache.pop(project_id, None)
        self._generation[project_id] = self._generation.get(project_id, 0) + 1


def build_roster(
    members: list[Member],
    names: list[tuple[int, str, str, bool]],
    lead_id: int | None,
    disabled: frozenset[int] = frozenset(),
) -> ProjectRoster:
    aliases: dict[int, list[str]] = {}
    tombstones: list[Tombstone] = []
    for member_id, name, kind, tombstoned in names:
        if tombstoned:
            tombstones.append(Tombstone(name=name, member_id=str(member_id)))
        if kind == "alias":
            aliases.setdefault(member_id, []).append(name)
    roster = Roster.build(
        [
            RosterMember(
                id=str(m.id),
                kind=m.kind,
                handle=m.handle,
                display_name=m.display_name,
                aliases=tuple(aliases.get(m.id, ())),
                status=m.status,  # type: ignore[arg-type]
                role=m.role,
            )
            for m in members
        ],
        tombstones,
    )
    return ProjectRoster({m.id: m for m in members}, roster, lead_id, disabled)


@dataclass(slots=True)
class _Bucket:
    tokens: float
    stamp: float


CHATTER_PER_SEC = 4.0
CHATTER_BURST = 20


class RateLimiter:
    """A token bucket per member: ``rate`` per second sustained, ``burst`` at once."""

    def __init__(
        self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.rate, self.burst, self.clock = rate, burst, clock
        self._buckets: dict[Hashable, _Bucket] = {}

    def take(self, key: Hashable) -> int:
        """0 when allowed, else how many milliseconds until the next send is."""
        now = self.clock()
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = _Bucket(float(self.burst), now)
        bucket.tokens = min(float(self.burst), bucket.tokens + (now - bucket.stamp) * self.rate)
        bucket.stamp = now
        if bucket.tokens >= 1.0:
            bucket.tokens -= 1.0
            return 0
        return max(1, int((1.0 - bucket.tokens) / self.rate * 1000))


class EventRelay(Protocol):
    """room.actions.relay.Relay, as the services see it."""

    def publish(self, project_id: int, seq: int, frame: str) -> None: ...

    def went_live(self, project_id: int, last_seq: int) -> None: ...

    def began(self, project_id: int) -> int | None: ...

    def roster_changed(self, project_id: int) -> None: ...

    def wake_elsewhere(self, project_id: int, member_ids: list[int]) -> None: ...

    def stop_elsewhere(self, member_id: int) -> None: ...

    def start_research_elsewhere(self, research_id: int) -> None: ...

    def stop_research_elsewhere(self, research_id: int) -> None: ...

    def stop_project_elsewhere(self, project_id: int) -> None: ...

    def live_nodes(self) -> list[str] | None: ...

    def stats(self) -> dict[str, float]: ...

    def lag(self) -> tuple[tuple[float, ...], list[int], float]: ...


@dataclass(slots=True)
class Services:
    """The database, the hub, the caches and rate limits, and the hooks other parts registered:
    everything a request, a socket or a turn needs that outlives it. Handlers and actions take it
    as their first argument, named ``core``."""

    settings: Settings
    db: Database
    hub: Hub
    rosters: RosterCache
    limiter: RateLimiter
    # Typing hints and read cursors, per member and kind: each typing frame fans out to every
    # subscriber and each read is a write, so a client in a loop must not cost more than this.
    chatter: RateLimiter = field(
        default_factory=lambda: RateLimiter(CHATTER_PER_SEC, CHATTER_BURST)
    )
    agents: Waker = field(default_factory=NoAgents)
    research: ResearchRunner = field(default_factory=NoResearch)
    inboxes: Inboxes = field(default_factory=Inboxes)
    clock: Callable[[], float] = time.time
    purging: set[int] = field(default_factory=set)  # projects with a purge under way
    # The messages' search indexer (room.store.indexer); None with search_index_messages off.
    search_indexer: SearchIndexer | None = None
    # Several servers on one PostgreSQL database: the events other servers committed, read back
    # in seq order for this one's sockets (room.actions.relay.Relay); None on SQLite.
    relay: EventRelay | None = None
    # Read cursors waiting out the chatter rate: member id → (member, newest seq).
    deferred_reads: dict[int, tuple[Member, int]] = field(default_factory=dict)
    background: set[asyncio.Task[None]] = field(default_factory=set)  # fire-and-forget tasks
    send_hooks: list[SendHook] = field(default_factory=list)
    # The wire ``workspace`` of each project (git inspected off the loop), dropped on change,
    # and one lock per project serialising its git operations (worktrees, merges).
    workspaces: dict[int, dict[str, Any]] = field(default_factory=dict)
    git_locks: dict[int, asyncio.Lock] = field(default_factory=dict)
    # How the server runs git (room.infra.git): in the sandbox's jail once start-up found
    # bubblewrap, plainly where there is none (agents then cannot write into .git at all).
    git: Git = field(default_factory=Git)
    # Attachment uploads (room.actions.attachments; what they reserved of a project's quota
    # is in the database, ``upload_reservations``, for every node to count).
    uploads: RateLimiter = field(default_factory=lambda: RateLimiter(1.0, 20))  # per member
    # How many uploads may be received at once (attachment_concurrent_uploads), made at first use.
    upload_slots: asyncio.Semaphore | None = None
    # Draws an uploaded PDF's first page in the sandbox (room.infra.pdfpreview); set at start-up,
    # None before (no preview).
    pdfs: PdfPreviewer | None = None
    # Presence (room.actions.presence): the map each project's subscribers were last told, the
    # projects with an announcement due, and those whose announcer runs.
    presence_told: dict[int, dict[str, str]] = field(default_factory=dict)
    presence_due: set[int] = field(default_factory=set)
    presence_running: set[int] = field(default_factory=set)
    # Unread counts (room.actions.unread): the projects with a recount due (None: for everyone
    # in it, else these members), those whose recounter runs, and what each person was told.
    unread_due: dict[int, set[int] | None] = field(default_factory=dict)
    unread_running: set[int] = field(default_factory=set)
    unread_told: dict[tuple[int, int], tuple[int, int]] = field(default_factory=dict)
    # Streamed partial answers (room.agents.drafts): the last ``draft`` frame shown of each
    # running answer, project → member → frame, for a client that subscribes meanwhile.
    drafts: dict[int, dict[int, str]] = field(default_factory=dict)
