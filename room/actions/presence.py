"""Presence: who is here now, told to each project's subscribers (docs/protocol.md, "Presence").

People are here while they have a socket open (``room.infra.presence`` counts them by user);
agents by what their session does (``core.agents.running_members``), their external sockets
(``core.inboxes``), their status and the project's state; the rule is the pure
:func:`room.rules.ops.presence_of`. Whatever may change it calls :func:`schedule`; the subscribers
get a ``presence`` frame with the members whose presence changed since they were last told (the
``subscribed`` frame has the whole map). Nothing is stored: presence is memory, rebuilt by
reconnecting clients. In a cluster a person's connections on the other nodes count too
(room.infra.bus.ClusterPresence: each node's people, external agents' sockets and running
turns on the bus, with a time to live), and :func:`people_changed` / :func:`agents_changed`
are told when the merged sets change.
"""

from __future__ import annotations

import asyncio
import logging

from room.rules.ops import OFFLINE, presence_of
from room.rules.protocol import encode
from room.services import ProjectRoster, Services
from room.store import members as members_store
from room.store import projects as projects_store
from room.store.dialect import Connection

log = logging.getLogger(__name__)


def snapshot(core: Services, project_id: int, roster: ProjectRoster, state: str) -> dict[str, str]:
    """Every current member's presence, by member id (as a string, like other maps on the
    wire)."""
    running = set(core.agents.running_members(project_id))
    here = core.hub.presence
    return {
        str(m.id): presence_of(
            m,
            state,
            connected=here.person_present(m.user_id)
            if m.kind == "human"
            else bool(core.inboxes.of(m.id)) or here.agent_connected_elsewhere(m.id),
            running=m.id in running or here.agent_running_elsewhere(m.id),
        )
        for m in roster.members.values()
        if m.status != "left"
    }


PRESENCE_EVERY_SECS = 0.5  # a project's presence is announced at most this often


def schedule(core: Services, project_id: int) -> None:
    """Presence in ``project_id`` may have changed: tell its subscribers — at once, then at most
    every ``PRESENCE_EVERY_SECS`` while changes keep coming (a thousand people arriving make a
    few frames, not a thousand)."""
    core.hub.presence.local_changed()  # a cluster's other nodes hear this node's sets
    core.presence_due.add(project_id)
    if project_id in core.presence_running:
        return
    core.presence_running.add(project_id)
    task = asyncio.get_running_loop().create_task(
        _announcer(core, project_id), name=f"presence {project_id}"
    )
    core.background.add(task)
    task.add_done_callback(core.background.discard)


async def _announcer(core: Services, project_id: int) -> None:
    try:
        await asyncio.sleep(0)  # let the changes of this loop turn land first
        while project_id in core.presence_due:
            core.presence_due.discard(project_id)
            if await _announce(core, project_id):
                await asyncio.sleep(PRESENCE_EVERY_SECS)
    finally:
        core.presence_running.discard(project_id)


async def _announce(core: Services, project_id: int) -> bool:
    """Send what changed since the subscribers were last told; True if a frame went out."""
    if not core.hub.subscriber_count(project_id):
        core.presence_told.pop(project_id, None)  # the next subscriber gets it whole
        return False
    try:
        roster = await core.rosters.get(project_id)
        state = await core.db.read(lambda conn: projects_store.state_of(conn, project_id))
    except Exception:  # the server is stopping, or the project is being purged
        log.debug("presence of project %s not announced", project_id, exc_info=True)
        return False
    if state is None:
        return False
    now = snapshot(core, project_id, roster, state)
    told = core.presence_told.get(project_id)
    if told is None:
        changed = now
    else:
        changed = {k: v for k, v in now.items() if told.get(k) != v}
        changed |= {k: OFFLINE for k in told if k not in now}  # left meanwhile
    core.presence_told[project_id] = now
    if not changed:
        return False
    frame = {"type": "presence", "project_id": project_id, "presence": changed}
    core.hub.broadcast(project_id, encode(frame))
    return True


async def people_changed(core: Services, user_ids: set[int]) -> None:
    """Other nodes' people came online or went offline (their sets on the bus, or a node that
    stopped saying so): every project of each hears of it."""
    for user_id in sorted(user_ids):
        await person_changed(core, user_id)


async def agents_changed(core: Services, member_ids: set[int]) -> None:
    """Agents' sockets or turns on other nodes came or went: their projects hear of it."""

    def projects(conn: Connection) -> set[int]:
        found = (members_store.get(conn, member_id) for member_id in member_ids)
        return {m.project_id for m in found if m is not None}

    try:
        project_ids = await core.db.read(projects)
    except Exception:
        log.debug("presence of agents %s not announced", member_ids, exc_info=True)
        return
    for project_id in sorted(project_ids):
        schedule(core, project_id)


async def person_changed(core: Services, user_id: int) -> None:
    """A person came online or went offline: every project they are in hears of it."""
    try:
        projects = await core.db.read(lambda conn: members_store.projects_of_user(conn, user_id))
    except Exception:
        log.debug("presence of user %s not announced", user_id, exc_info=True)
        return
    for project_id in projects:
        schedule(core, project_id)
