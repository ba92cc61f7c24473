"""What must happen after a write commits, as data.

A write job never pushes a frame, wakes an agent or drops a cache itself: it records an effect
on its :class:`room.store.Tx` (``tx.emit(...)``), and after the commit one dispatcher
(:func:`room.actions.effects.apply`) carries the batch's effects out, job by job in commit
order, each job's in the order it recorded them. So nothing is seen before it is durable, a
rolled-back job leaves no trace, and every event source is one ``grep emit`` away
(docs/architecture.md draws the whole path).

Pure: this module only names the effects; it imports nothing that does I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Publish:
    """A committed, sequenced event of a project's stream, for every subscriber."""

    project_id: int
    seq: int
    frame: str


@dataclass(frozen=True, slots=True)
class Broadcast:
    """A frame outside the replayable stream (members, project, tasks, delivery labels …)."""

    project_id: int
    frame: str


@dataclass(frozen=True, slots=True)
class Wake:
    """These agent members have new deliveries: the agents' scheduler looks at their ledger."""

    project_id: int
    member_ids: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class WakeProject:
    """Dispatch may have reopened for a whole project (resumed, brake cleared)."""

    project_id: int


@dataclass(frozen=True, slots=True)
class RosterChanged:
    """A member joined, left, changed a name or a role: the cached roster is stale."""

    project_id: int


@dataclass(frozen=True, slots=True)
class PresenceChanged:
    """Who is here may have changed (the project's state did): subscribers are told."""

    project_id: int


@dataclass(frozen=True, slots=True)
class CutMember:
    """A member left: their live subscriptions to the project end (after the frames above)."""

    project_id: int
    member_id: int


@dataclass(frozen=True, slots=True)
class CloseAgentSockets:
    """An agent's tokens were revoked: the sockets they opened close with ``reason``."""

    member_id: int
    reason: str


@dataclass(frozen=True, slots=True)
class FollowUp:
    """A write to run as its own job once this one has committed (a requirement change after
    the send that carries it). ``job`` has the shape of a write job: ``job(conn, tx)``. If it
    fails, ``on_error(error)`` may give a job that says so (rolled back with it otherwise).
    ``locks``: the projects either job takes a seq in, declared to the writer (room.store.db,
    ``Database.submit``)."""

    label: str
    job: Callable[[Any, Any], Any]
    on_error: Callable[[BaseException], Callable[[Any, Any], Any] | None] | None = None
    locks: tuple[int, ...] = ()


Effect = (
    Publish
    | Broadcast
    | Wake
    | WakeProject
    | RosterChanged
    | PresenceChanged
    | CutMember
    | CloseAgentSockets
    | FollowUp
)
