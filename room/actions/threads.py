"""Threads: a root message and the replies under it (docs/protocol.md, "Threads").

Every reply joins its root's thread (a reply to a reply, the root's). In the send's transaction
(:func:`record_reply`) the thread's count and newest reply are updated, the people who started
it and who reply in it follow it, and the root's stored wire object gets its new ``thread``
summary, published as a sequenced ``message_updated`` event: open pages update the parent's
count live, and a page resuming with ``since`` replays it. A delete recounts
(:func:`after_delete`). Following is a person's choice (:func:`set_following`); an explicit
unfollow is kept until the person replies in the thread again or follows it.
"""

from __future__ import annotations

import json
from typing import Any

from room.errors import BadRequestError, NotFoundError
from room.rules.effects import Publish
from room.rules.entities import Member
from room.services import Services
from room.store import Tx
from room.store import messages as messages_store
from room.store import projects as projects_store
from room.store import threads as threads_store
from room.store.dialect import Connection

MAX_THREAD_PAGE = 200  # replies in one page of a thread


def record_reply(
    conn: Connection,
    tx: Tx,
    *,
    project_id: int,
    root_id: int,
    message_id: int,
    sender: Member,
) -> None:
    """Inside the send's transaction: the reply joins ``root_id``'s thread; its sender (a
    person) follows the thread, and so does the root's author (a person) unless they chose not
    to; the root's wire object carries the new count."""
    # Read first: a statement naming ``messages`` has the batch write the rows it holds back
    # (the reply among them), which the thread's rows refer to.
    root = messages_store.get_row(conn, root_id)
    if root is None:
        return
    summary = threads_store.add_reply(
        conn, project_id=project_id, root_id=root_id, message_id=message_id, now=tx.now
    )
    if sender.kind == "human":
        threads_store.follow(conn, root_id, sender.id, True, tx.now, keep=False)
    author = root["author_id"]
    if author is not None and author != sender.id and _is_person(conn, int(author)):
        threads_store.follow(conn, root_id, int(author), True, tx.now, keep=True)
    _publish_root(conn, tx, project_id, root, summary)


def after_delete(conn: Connection, tx: Tx, project_id: int, message_id: int) -> None:
    """Inside a delete's transaction: a deleted reply leaves its thread's count."""
    root_id = threads_store.thread_of(conn, message_id)
    if root_id is None:
        return
    summary = threads_store.recount(conn, root_id)
    root = messages_store.get_row(conn, root_id)
    if root is not None and summary is not None:
        _publish_root(conn, tx, project_id, root, summary)


def with_thread(frame: str, summary: dict[str, Any]) -> str:
    """A stored wire object with its ``thread`` summary replaced (before ``reactions``, which
    stay last as room.store.messages.message_object writes them)."""
    obj = json.loads(frame)
    reactions = obj.pop("reactions", None)
    obj["thread"] = summary
    if reactions is not None:
        obj["reactions"] = reactions
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def _publish_root(
    conn: Connection,
    tx: Tx,
    project_id: int,
    root: dict[str, Any],
    summary: dict[str, Any],
) -> None:
    obj = with_thread(str(root["frame"]), summary)
    messages_store.set_frame(conn, int(root["id"]), obj)
    seq = projects_store.next_seq(conn, project_id, tx.now, tx.appends)
    messages_store.insert_event(
        conn,
        project_id=project_id,
        seq=seq,
        kind="message_updated",
        message_id=int(root["id"]),
        frame=None,
        now=tx.now,
        appends=tx.appends,
    )
    tx.emit(Publish(project_id, seq, messages_store.update_frame(project_id, seq, obj)))


def _is_person(conn: Connection, member_id: int) -> bool:
    row = conn.execute("SELECT kind FROM members WHERE id = :m", {"m": member_id}).fetchone()
    return bool(row and row[0] == "human")


def _root_row(conn: Connection, member: Member, root_id: int) -> dict[str, Any]:
    row = messages_store.get_row(conn, root_id)
    if row is None or row["project_id"] != member.project_id:
        raise NotFoundError("no such message in this project", code="no_message")
    return row


async def thread_page(
    core: Services, member: Member, message_id: int, before: int | None, limit: int
) -> dict[str, Any]:
    """A page of a thread, oldest first: its root (the thread of ``message_id``, which may be
    a reply in it), the replies with id < ``before`` (None: the newest), whether older replies
    exist, the summary and whether ``member`` follows it."""
    if not 1 <= limit <= MAX_THREAD_PAGE:
        raise BadRequestError(f"limit is 1–{MAX_THREAD_PAGE}", code="bad_query")

    def read(conn: Connection) -> dict[str, Any]:
        _root_row(conn, member, message_id)
        root_id = threads_store.root_of(conn, message_id)
        root = messages_store.get_row(conn, root_id)
        assert root is not None
        frames, has_more = threads_store.page(conn, root_id, before, limit)
        return {
            "root_id": root_id,
            "root": json.loads(root["frame"]),
            "replies": [json.loads(f) for f in frames],
            "has_more": has_more,
            "thread": threads_store.summary(conn, root_id)
            or {"replies": 0, "last_reply_at": None, "last_reply_id": None},
            "following": threads_store.is_following(conn, root_id, member.id),
        }

    result: dict[str, Any] = await core.db.read(read)
    return result


async def set_following(
    core: Services, member: Member, message_id: int, following: bool
) -> dict[str, Any]:
    """Follow (or stop following) the thread of ``message_id`` (its root, or a reply in it).
    A person's choice; an agent is refused. A message nobody replied to yet can be followed:
    its thread starts with its first reply."""
    if member.kind != "human":
        raise BadRequestError("only people follow threads", code="not_a_person")

    def job(conn: Connection, tx: Tx) -> dict[str, Any]:
        row = _root_row(conn, member, message_id)
        root_id = threads_store.root_of(conn, message_id)
        threads_store.ensure(conn, root_id, int(row["project_id"]))
        threads_store.follow(conn, root_id, member.id, following, tx.now, keep=False)
        return {"root_id": root_id, "following": following}

    result: dict[str, Any] = await core.db.write(job)
    return result
