"""Editing and deleting messages, and changing a stored message's wire object (a reaction, a
badge): each change is a sequenced ``message_updated`` event, replayed on resume, and the
replies quoting the message quote what it says now (docs/protocol.md, "Message object").
"""

from __future__ import annotations

import json
from typing import Any

from room.actions import threads as thread_actions
from room.actions.messages import (
    address,
    check_body,
    check_posting,
    excerpt_of,
    initial_state,
    publish_deliveries,
)
from room.errors import ConflictError, ForbiddenError, NotFoundError, RateLimitedError
from room.rules import ledger
from room.rules.effects import Publish, Wake
from room.rules.entities import Member
from room.rules.render import render
from room.services import Services
from room.store import Tx
from room.store import deliveries as deliveries_store
from room.store import messages as messages_store
from room.store import projects as projects_store
from room.store import reactions as reactions_store
from room.store import search as search_store
from room.store.dialect import Connection


async def edit_message(
    core: Services, editor: Member, message_id: int, body: str, *, as_plain_text: bool = False
) -> dict[str, Any]:
    """Edit one's own message. The old text is kept (the original and the latest
    earlier versions, :data:`room.store.messages.MAX_EDIT_VERSIONS` in all); newly mentioned
    agents get deliveries. Edits share the sender's rate limit with sends."""
    check_body(core, body)
    wait_ms = core.limiter.take(editor.id)
    if wait_ms:
        raise RateLimitedError("editing too fast; slow down", retry_after_ms=wait_ms)
    roster = await core.rosters.get(editor.project_id)
    addressing = address(editor, body, [], roster, as_plain_text)
    html = render(body)
    project_id = editor.project_id

    def job(conn: Connection, tx: Tx) -> dict[str, Any]:
        row = _own_message(conn, editor, message_id)
        messages_store.record_edit(
            conn,
            message_id=message_id,
            old_body=row["body"],
            action="edit",
            new_body=body,
            now=tx.now,
        )
        search_store.message_changed(conn, message_id)
        _requote_replies(conn, message_id)
        already = deliveries_store.recipients(conn, message_id)
        new_recipients = [r for r in addressing.recipients if r not in already]
        state = projects_store.state_of(conn, project_id)
        if new_recipients and not addressing.to_lead_by_default:
            deliveries_store.insert_many(
                conn,
                project_id=project_id,
                message_id=message_id,
                recipients=[(r, initial_state(roster, r, state or "")) for r in new_recipients],
                now=tx.now,
            )
            messages_store.insert_mentions(
                conn,
                message_id,
                [(int(m.member_id), m.via) for m in addressing.resolution.mentions],
            )
        old = json.loads(row["frame"])
        obj = messages_store.message_object(
            message_id=message_id,
            project_id=project_id,
            seq=row["seq"],
            author_id=editor.id,
            kind=row["kind"],
            body=body,
            html=html,
            reply_to=row["reply_to"],
            reply_excerpt=old.get("reply_excerpt"),
            mentions=set(old.get("mentions", ())) | set(addressing.mentioned),
            client_txn_id=row["client_txn_id"],
            created_at=row["created_at"],
            edited_at=tx.now,
            meta=old.get("meta"),
            reactions=old.get("reactions"),
            thread=old.get("thread"),
        )
        return publish_update(conn, tx, project_id, message_id, obj, new_recipients)

    return await core.db.write(job, locks=(editor.project_id,))


async def delete_message(core: Services, actor: Member, message_id: int) -> dict[str, Any]:
    """Delete one's own message: the text leaves the timeline (kept in the edit history) and
    deliveries not yet handed over are cancelled."""
    project_id = actor.project_id

    def job(conn: Connection, tx: Tx) -> dict[str, Any]:
        row = _own_message(conn, actor, message_id)
        messages_store.record_edit(
            conn,
            message_id=message_id,
            old_body=row["body"],
            action="delete",
            new_body="",
            now=tx.now,
        )
        search_store.message_changed(conn, message_id)
        _requote_replies(conn, message_id)
        code = ledger.Reason.MESSAGE_DELETED
        cancelled = deliveries_store.cancel_open_for_message(conn, message_id, code, tx.now)
        publish_deliveries(
            tx,
            [(d, project_id, message_id, r) for d, r in cancelled],
            "cancelled",
            reason=ledger.text_of(code),
            reason_code=code,
        )
        old = json.loads(row["frame"])
        obj = messages_store.message_object(
            message_id=message_id,
            project_id=project_id,
            seq=row["seq"],
            author_id=actor.id,
            kind=row["kind"],
            body="",
            html="",
            reply_to=row["reply_to"],
            reply_excerpt=old.get("reply_excerpt"),
            mentions=old.get("mentions", ()),
            client_txn_id=row["client_txn_id"],
            created_at=row["created_at"],
            edited_at=row["edited_at"],
            deleted=True,
            thread=old.get("thread"),  # a deleted root keeps its replies
        )
        reactions_store.delete_for_message(conn, message_id)
        thread_actions.after_delete(conn, tx, project_id, message_id)
        return publish_update(conn, tx, project_id, message_id, obj, [])

    return await core.db.write(job, locks=(actor.project_id,))


def _own_message(conn: Connection, actor: Member, message_id: int) -> dict[str, Any]:
    row = messages_store.get_row(conn, message_id)
    if row is None or row["project_id"] != actor.project_id:
        raise NotFoundError("no such message in this project", code="no_message")
    if row["author_id"] != actor.id:
        raise ForbiddenError("you can only change your own messages", code="not_author")
    if row["deleted_at"] is not None:
        raise ConflictError("this message was deleted", code="message_deleted")
    check_posting(conn, actor)
    return row


def _requote_replies(conn: Connection, message_id: int) -> None:
    """After an edit or a delete, the replies to ``message_id`` quote what it says now: their
    stored objects (history pages, replays) change with it, so no earlier or deleted text stays
    readable in a quote. Clients update the quotes they hold from the ``message_updated`` frame
    of the message itself (docs/protocol.md, "Message object")."""
    row = messages_store.get_row(conn, message_id)
    if row is None:
        return
    excerpt = excerpt_of(row)
    for reply_id, frame in messages_store.replies_to(conn, message_id):
        obj = json.loads(frame)
        obj["reply_excerpt"] = excerpt
        messages_store.set_frame(
            conn, reply_id, json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
        )


def annotate_message(
    conn: Connection, tx: Tx, message_id: int, meta: dict[str, Any]
) -> dict[str, Any]:
    """Add ``meta`` to a stored message's ``meta`` (its text untouched) and publish the change
    as ``message_updated``; call inside a write job. Used to mark a person's message as a
    requirement change, so every page shows its badge."""
    row = messages_store.get_row(conn, message_id)
    if row is None:
        raise NotFoundError("没有这条消息 (No such message.)", code="no_message")
    obj = json.loads(row["frame"])
    obj["meta"] = {**(obj.get("meta") or {}), **meta}
    frame = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    return publish_update(conn, tx, int(row["project_id"]), message_id, frame, [])


def publish_update(
    conn: Connection,
    tx: Tx,
    project_id: int,
    message_id: int,
    obj: str,
    woken: list[int],
) -> dict[str, Any]:
    """Store the message's new wire object and publish it as a sequenced ``message_updated``
    event (replayed on resume); wake ``woken``. Returns the object with its ``event_seq``."""
    messages_store.set_frame(conn, message_id, obj)
    seq = projects_store.next_seq(conn, project_id, tx.now)
    frame_text = messages_store.update_frame(project_id, seq, obj)
    messages_store.insert_event(
        conn,
        project_id=project_id,
        seq=seq,
        kind="message_updated",
        message_id=message_id,
        frame=None,  # replays join the message's current object: no earlier text is kept here
        now=tx.now,
    )
    tx.emit(Publish(project_id, seq, frame_text))
    if woken:
        tx.emit(Wake(project_id, tuple(woken)))
    result: dict[str, Any] = json.loads(obj)
    result["event_seq"] = seq
    return result
