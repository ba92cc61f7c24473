"""Unread counts pushed to people wherever they look (docs/protocol.md, "Unread counts").

A page watches one project on its socket; the counts of the others (and of that one while the
page is hidden) come as ``unread`` frames on every socket the person has open: after anything
is published in a project (a message, an edit, a delete) its people with a socket open are
recounted, and after a read cursor moves so is its member. A project is recounted at once and
then at most every ``UNREAD_EVERY_SECS`` however many changes come, and a frame goes out only
when a person's counts changed. Counts are read from the store (``room.store.messages.unread_for_members``); what each
person was last told is memory.
"""

from __future__ import annotations

import asyncio
import logging

from room.rules.protocol import encode
from room.services import Services
from room.store import messages as messages_store

log = logging.getLogger(__name__)


UNREAD_EVERY_SECS = 0.5  # a busy project is recounted at most this often (the last change too)


def schedule(core: Services, project_id: int, member_id: int | None = None) -> None:
    """The counts in ``project_id`` may have changed — for everyone in it (``member_id`` None),
    or for one member (their read cursor moved)."""
    wanted = core.unread_due.get(project_id, set())
    if member_id is None or wanted is None:
        core.unread_due[project_id] = None  # everyone
    else:
        core.unread_due[project_id] = wanted | {member_id}
    if project_id in core.unread_running:
        return  # the running recounter takes it in its next round
    core.unread_running.add(project_id)
    task = asyncio.get_running_loop().create_task(
        _recounter(core, project_id), name=f"unread {project_id}"
    )
    core.background.add(task)
    task.add_done_callback(core.background.discard)


async def _recounter(core: Services, project_id: int) -> None:
    """Recount at once, then at most every ``UNREAD_EVERY_SECS`` while changes keep coming: a
    busy project costs a few reads a second, not one per message."""
    try:
        await asyncio.sleep(0)  # let the commits of this loop turn land first
        while project_id in core.unread_due:
            await _recount(core, project_id, core.unread_due.pop(project_id))
            await asyncio.sleep(UNREAD_EVERY_SECS)
    finally:
        core.unread_running.discard(project_id)


async def _recount(core: Services, project_id: int, only: set[int] | None) -> None:
    try:
        roster = await core.rosters.get(project_id)
    except Exception:
        log.debug("unread counts of project %s not pushed", project_id, exc_info=True)
        return
    people = {
        m.id: m.user_id
        for m in roster.members.values()
        if m.kind == "human"
        and m.status != "left"
        and m.user_id is not None
        and core.hub.presence.person_online(m.user_id)
        and (only is None or m.id in only)
    }
    if not people:
        return
    try:
        counts = await core.db.read(
            lambda conn: messages_store.unread_for_members(conn, list(people))
        )
    except Exception:  # the server is stopping, or the project is being purged
        log.debug("unread counts of project %s not pushed", project_id, exc_info=True)
        return
    for member_id, (unread, mentions) in counts.items():
        user_id = people[member_id]
        key = (user_id, project_id)
        if core.unread_told.get(key) == (unread, mentions):
            continue
        core.unread_told[key] = (unread, mentions)
        frame = {"type": "unread", "project_id": project_id, "unread": unread, "mentions": mentions}
        core.hub.presence.to_person(user_id, encode(frame))


def forget(core: Services, user_id: int) -> None:
    """A person's last socket closed: what they were told no longer matters (a new page reads
    the counts from ``/api/me``)."""
    for key in [k for k in core.unread_told if k[0] == user_id]:
        del core.unread_told[key]
