"""Emoji reactions: add or remove one, by any member (person or agent) of the project.

A reaction takes the ledger-free path (docs/protocol.md, "Reactions"): no delivery, no mention,
no wake-up, never a model call. It is rate limited like read cursors (the chatter allowance,
refused past it rather than deferred: a reaction is a person's act, not a cursor that only the
newest value matters of). Unlike a read cursor it is durable and resumable: the message's
stored wire object carries its ``reactions`` and each change is published as a sequenced
``message_updated`` event, so a client resuming with ``since`` replays it.
"""

from __future__ import annotations

import json
from typing import Any

from room.actions.message_edits import publish_update
from room.actions.messages import check_posting
from room.errors import ConflictError, NotFoundError, RateLimitedError
from room.rules.entities import Member
from room.rules.reactions import MAX_KINDS_PER_MESSAGE, check_emoji
from room.services import Services
from room.store import Tx
from room.store import messages as messages_store
from room.store import reactions as reactions_store
from room.store.dialect import Connection

REACTABLE_KINDS = frozenset({"chat", "system"})


async def react(
    core: Services, member: Member, message_id: int, emoji: str, *, remove: bool = False
) -> dict[str, Any]:
    """Add (or remove) ``member``'s ``emoji`` on a message of its project. Returns
    ``{"message_id", "reactions", "changed", "seq"}`` (``seq``: the event's, None if nothing
    changed — adding twice or removing what is not there is not an error)."""
    emoji = check_emoji(emoji)
    wait_ms = core.chatter.take((member.id, "react"))
    if wait_ms:
        raise RateLimitedError("reacting too fast; slow down", retry_after_ms=wait_ms)
    project_id = member.project_id

    def job(conn: Connection, tx: Tx) -> dict[str, Any]:
        row = messages_store.get_row(conn, message_id)
        if row is None or row["project_id"] != project_id:
            raise NotFoundError("no such message in this project", code="no_message")
        if row["deleted_at"] is not None:
            raise ConflictError("this message was deleted", code="message_deleted")
        if row["kind"] not in REACTABLE_KINDS:
            raise ConflictError("this entry takes no reactions", code="not_reactable")
        check_posting(conn, member)
        if remove:
            changed = reactions_store.remove(conn, message_id, emoji, member.id)
        else:
            kinds = reactions_store.kinds(conn, message_id)
            if emoji not in kinds and len(kinds) >= MAX_KINDS_PER_MESSAGE:
                raise ConflictError(
                    f"a message takes at most {MAX_KINDS_PER_MESSAGE} different reactions",
                    code="too_many_reactions",
                )
            changed = reactions_store.add(conn, message_id, emoji, member.id, tx.now)
        reactions = reactions_store.of_message(conn, message_id)
        result: dict[str, Any] = {"message_id": message_id, "reactions": reactions}
        if not changed:
            return {**result, "changed": False, "seq": None}
        obj = json.loads(row["frame"])
        obj.pop("reactions", None)
        if reactions:
            obj["reactions"] = reactions  # last, as messages_store.message_object puts it
        text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
        published = publish_update(conn, tx, project_id, message_id, text, [])
        return {**result, "changed": True, "seq": published["event_seq"]}

    return await core.db.write(job, locks=(member.project_id,))
