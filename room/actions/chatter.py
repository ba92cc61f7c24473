"""Read cursors and typing: the small, frequent signals a page sends, under the chatter rate
(``core.chatter``). A read cursor is stored (and told to the member's other pages); typing is
never stored."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from room.actions import unread
from room.errors import RateLimitedError
from room.rules.effects import Broadcast
from room.rules.entities import Member
from room.rules.protocol import encode
from room.services import Services
from room.store import Tx
from room.store import members as members_store
from room.store import messages as messages_store
from room.store import projects as projects_store
from room.store.dialect import Connection

log = logging.getLogger(__name__)


async def mark_read(core: Services, member: Member, seq: int) -> int | None:
    """Move ``member``'s read cursor to ``seq`` (never back). Past the chatter rate the write is
    deferred, not refused: the newest cursor of the wait is written when it ends (None now), so
    the last one always lands however many tabs send them."""
    wait_ms = core.chatter.take((member.id, "read"))
    if wait_ms:
        _defer_read(core, member, seq, wait_ms)
        return None
    return await _write_read(core, member, seq)


async def mark_unread(core: Services, member: Member, seq: int) -> int:
    """ "Mark as unread": move ``member``'s read cursor back to ``seq`` (the seq before the first
    message to show as unread). Past the chatter rate it is refused (``rate_limited``), not
    deferred: it is a person's deliberate act. A forward cursor still waiting out the rate is
    pulled back too, so it cannot undo this when it lands."""
    wait_ms = core.chatter.take((member.id, "read"))
    if wait_ms:
        raise RateLimitedError("marking as unread too fast; slow down", retry_after_ms=wait_ms)
    waiting = core.deferred_reads.get(member.id)
    if waiting is not None:
        core.deferred_reads[member.id] = (member, min(seq, waiting[1]))
    return await _write_read(core, member, seq, back=True)


def _defer_read(core: Services, member: Member, seq: int, wait_ms: int) -> None:
    waiting = core.deferred_reads.get(member.id)
    if waiting is not None:
        core.deferred_reads[member.id] = (member, max(seq, waiting[1]))
        return
    core.deferred_reads[member.id] = (member, seq)

    async def later() -> None:
        delay_ms = wait_ms
        while delay_ms:  # the write spends the allowance like any other read
            await asyncio.sleep(delay_ms / 1000)
            delay_ms = core.chatter.take((member.id, "read"))
        member_, seq_ = core.deferred_reads.pop(member.id)
        try:
            await _write_read(core, member_, seq_)
        except Exception:  # the server is stopping, or the project went away meanwhile
            log.debug("deferred read cursor of member %s not written", member.id, exc_info=True)

    task = asyncio.get_running_loop().create_task(later(), name=f"read cursor {member.id}")
    core.background.add(task)
    task.add_done_callback(core.background.discard)


async def _write_read(core: Services, member: Member, seq: int, *, back: bool = False) -> int:
    project_id = member.project_id

    def job(conn: Connection, tx: Tx) -> int:
        # Checked here, not only when the frame came: a deferred cursor may land after its
        # member left or while the project is being purged.
        current = members_store.get(conn, member.id)
        state = projects_store.state_of(conn, project_id)
        if (
            current is None
            or current.status == "left"
            or state in (None, "purge_blocked", "purged")
        ):
            return 0
        head = projects_store.head_seq(conn, project_id)
        cursor = messages_store.set_read_cursor(
            conn,
            member_id=member.id,
            project_id=project_id,
            seq=min(seq, head),
            now=tx.now,
            back=back,
        )
        read = encode(
            {"type": "read", "project_id": project_id, "member_id": member.id, "seq": cursor}
        )
        tx.emit(Broadcast(project_id, read))
        return cursor

    cursor = await core.db.write(job)  # no seq: a read cursor never waits for a send
    unread.schedule(core, project_id, member.id)  # the person's other pages hear of it
    return cursor


def typing(core: Services, member: Member, active: bool, exclude: Any = None) -> None:
    """Ephemeral: never stored, never replayed; past the chatter rate, dropped (a hint only)."""
    if core.chatter.take((member.id, "typing")):
        return
    frame = encode(
        {
            "type": "typing",
            "project_id": member.project_id,
            "member_id": member.id,
            "active": active,
        }
    )
    core.hub.broadcast(member.project_id, frame, exclude=exclude, volatile=True)
