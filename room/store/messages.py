"""Messages, their edits, mentions, the per-project event stream and read cursors.

A message's wire object is kept pre-encoded in ``messages.frame`` (updated on edit and delete),
so history pages and resume replays are string joins, never per-row JSON encoding.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import orjson

from room.rules.entities import iso
from room.store.db import Appends, BulkInsert, Sent, chunks
from room.store.dialect import Connection

# The C implementation behind json.dumps(ensure_ascii=False) for one string.
_encode_basestring = json.encoder.encode_basestring
_orjson_dumps = orjson.dumps


def _encode_string(value: str) -> str:
    """``json.dumps(value, ensure_ascii=False)`` of one string. ASCII text (most bodies) goes
    through orjson, several times faster on a message's few hundred characters; other text
    through the standard library's C encoder, as fast there (no UTF-8 round trip) and it takes
    lone surrogates, which orjson refuses."""
    if value.isascii():
        return _orjson_dumps(value).decode()
    return _encode_basestring(value)


# A message's kind as JSON, for the kinds there are (a time, from room.rules.entities.iso, needs no
# escaping either: digits and ``-:.TZ``).
_KINDS = {kind: f'"{kind}"' for kind in ("chat", "system", "tool")}


def message_object(
    *,
    message_id: int,
    project_id: int,
    seq: int,
    author_id: int | None,
    kind: str,
    body: str,
    html: str,
    reply_to: int | None,
    reply_excerpt: dict[str, Any] | None,
    mentions: Iterable[int],
    client_txn_id: str | None,
    created_at: float,
    edited_at: float | None = None,
    deleted: bool = False,
    meta: dict[str, Any] | None = None,
    reactions: list[dict[str, Any]] | None = None,
    thread: dict[str, Any] | None = None,
) -> str:
    """The message's wire object as compact JSON (the key order is part of the format).

    Built by hand on the send path: strings go through :func:`_encode_string`, the rest are
    integers and literals; a test checks it equals ``json.dumps`` of the same dict.
    """
    # A new message (the send path) has no reply, excerpt, mention, edit or deletion: those
    # cost no call here.
    parts = [
        f'{{"id":{message_id},"project_id":{project_id},"seq":{seq},'
        f'"author_id":{_int(author_id)},"kind":{_KINDS.get(kind) or _encode_string(kind)},'
        f'"body":{_encode_string("" if deleted else body)},'
        f'"html":{_encode_string("" if deleted else html)},'
        f'"reply_to":{"null" if reply_to is None else _int(reply_to)},'
        f'"reply_excerpt":{"null" if reply_excerpt is None else _any(reply_excerpt)},'
        f'"mentions":[{",".join(map(str, sorted(mentions))) if mentions else ""}],'
        f'"client_txn_id":{_str(client_txn_id)},"created_at":"{iso(created_at)}",'
        f'"edited_at":{"null" if edited_at is None else _str(iso(edited_at))},'
        f'"deleted":{"true" if deleted else "false"}'
    ]
    if meta:
        parts.append(f',"meta":{_any(meta)}')
    if thread:  # a thread's root: its summary (room.store.threads)
        parts.append(f',"thread":{_any(thread)}')
    if reactions and not deleted:
        parts.append(f',"reactions":{_any(reactions)}')
    parts.append("}")
    return "".join(parts)


def _int(value: int | None) -> str:
    return "null" if value is None else str(int(value))


def _str(value: str | None) -> str:
    return "null" if value is None else _encode_string(value)


def _any(value: Any) -> str:
    if value is None:
        return "null"
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def event_frame(project_id: int, seq: int, message_frame: str) -> str:
    """The live/replay frame of a new message, built around its stored object."""
    return f'{{"type":"message","project_id":{project_id},"seq":{seq},"message":{message_frame}}}'


def update_frame(project_id: int, seq: int, message_frame: str) -> str:
    return (
        f'{{"type":"message_updated","project_id":{project_id},"seq":{seq},'
        f'"message":{message_frame}}}'
    )


def find_txn(conn: Connection, author_id: int, client_txn_id: str) -> Sent | None:
    row = conn.execute(
        "SELECT id, seq, txn_digest, frame FROM messages"
        " WHERE author_id = :a AND client_txn_id = :t",
        {"a": author_id, "t": client_txn_id},
    ).fetchone()
    return (int(row[0]), int(row[1]), row[2], str(row[3])) if row else None


MESSAGES = BulkInsert(
    "messages",
    (
        "id", "project_id", "seq", "author_id", "kind", "body", "reply_to", "client_txn_id",
        "txn_digest", "frame", "created_at",
    ),
)  # fmt: skip
EVENTS = BulkInsert("events", ("project_id", "seq", "kind", "message_id", "frame", "created_at"))
# An event without a frame of its own (every message event): the column is left to its default,
# NULL, which costs the driver more to bind than any other value.
EVENTS_NO_FRAME = BulkInsert("events", ("project_id", "seq", "kind", "message_id", "created_at"))
MENTIONS = BulkInsert("mentions", ("message_id", "member_id", "via"), verb="INSERT OR IGNORE")


def find_txns(conn: Connection, appends: Appends, keys: list[tuple[int, str]]) -> None:
    """:func:`find_txn` for a batch of sends, told to ``appends`` (``remember_sent``): a few
    statements per author instead of one per send."""
    by_author: dict[int, list[str]] = {}
    for author_id, txn in keys:
        by_author.setdefault(author_id, []).append(txn)
        appends.remember_sent(author_id, txn, None)
    for author_id, txns in by_author.items():
        for chunk in chunks(txns):
            marks = ", ".join("?" * len(chunk))
            for row in conn.execute(
                "SELECT client_txn_id, id, seq, txn_digest, frame FROM messages"
                f" WHERE author_id = ? AND client_txn_id IN ({marks})",
                (author_id, *chunk),
            ):
                found = (int(row[1]), int(row[2]), row[3], str(row[4]))
                appends.remember_sent(author_id, str(row[0]), found)


def insert(
    conn: Connection,
    *,
    message_id: int,
    project_id: int,
    seq: int,
    author_id: int | None,
    kind: str,
    body: str,
    reply_to: int | None,
    client_txn_id: str | None,
    txn_digest: str | None,
    frame: str,
    now: float,
    appends: Appends | None = None,
) -> None:
    row = (
        message_id, project_id, seq, author_id, kind, body, reply_to, client_txn_id, txn_digest,
        frame, now,
    )  # fmt: skip
    MESSAGES.write(conn, [row], appends)


def set_frame(conn: Connection, message_id: int, frame: str) -> None:
    conn.execute("UPDATE messages SET frame = :f WHERE id = :id", {"f": frame, "id": message_id})


def insert_mentions(
    conn: Connection,
    message_id: int,
    mentions: Iterable[tuple[int, str]],
    appends: Appends | None = None,
) -> None:
    MENTIONS.write(conn, [(message_id, member_id, via) for member_id, via in mentions], appends)


def insert_event(
    conn: Connection,
    *,
    project_id: int,
    seq: int,
    kind: str,
    message_id: int | None,
    frame: str | None,
    now: float,
    appends: Appends | None = None,
) -> None:
    if frame is None:
        EVENTS_NO_FRAME.write(conn, [(project_id, seq, kind, message_id, now)], appends)
    else:
        EVENTS.write(conn, [(project_id, seq, kind, message_id, frame, now)], appends)


def get_row(conn: Connection, message_id: int) -> dict[str, Any] | None:
    row = conn.execute(
        "SELECT id, project_id, seq, author_id, kind, body, reply_to, client_txn_id, frame,"
        " created_at, edited_at, deleted_at FROM messages WHERE id = :id",
        {"id": message_id},
    ).fetchone()
    if row is None:
        return None
    keys = [
        "id",
        "project_id",
        "seq",
        "author_id",
        "kind",
        "body",
        "reply_to",
        "client_txn_id",
        "frame",
        "created_at",
        "edited_at",
        "deleted_at",
    ]
    return dict(zip(keys, row, strict=True))


def id_at_seq(conn: Connection, project_id: int, seq: int) -> int | None:
    """The id of the project's message at ``seq`` (None: no message there)."""
    row = conn.execute(
        "SELECT id FROM messages WHERE project_id = :p AND seq = :s", {"p": project_id, "s": seq}
    ).fetchone()
    return int(row[0]) if row else None


def record_edit(
    conn: Connection,
    *,
    message_id: int,
    old_body: str,
    action: str,
    new_body: str,
    now: float,
) -> None:
    conn.execute(
        "INSERT INTO message_edits (message_id, body, edited_at, action)"
        " VALUES (:m, :body, :now, :action)",
        {"m": message_id, "body": old_body, "now": now, "action": action},
    )
    if action == "delete":
        conn.execute(
            "UPDATE messages SET deleted_at = :now WHERE id = :m", {"m": message_id, "now": now}
        )
    else:
        conn.execute(
            "UPDATE messages SET body = :body, edited_at = :now WHERE id = :m",
            {"m": message_id, "body": new_body, "now": now},
        )
        # Bounded history: the original text and the newest earlier versions.
        conn.execute(
            "DELETE FROM message_edits WHERE message_id = :m AND action = 'edit'"
            " AND id != (SELECT min(id) FROM message_edits WHERE message_id = :m)"
            " AND id NOT IN (SELECT id FROM message_edits WHERE message_id = :m"
            "  ORDER BY id DESC LIMIT :keep)",
            {"m": message_id, "keep": MAX_EDIT_VERSIONS - 1},
        )


def replies_to(conn: Connection, message_id: int) -> list[tuple[int, str]]:
    """(id, stored object) of the messages replying to ``message_id``."""
    return [
        (int(r[0]), str(r[1]))
        for r in conn.execute(
            "SELECT id, frame FROM messages WHERE reply_to = :m", {"m": message_id}
        )
    ]


def edit_history(conn: Connection, message_id: int, *, with_bodies: bool) -> list[dict[str, Any]]:
    """When the message was edited or deleted; the earlier bodies only ``with_bodies`` (its
    author and the project's owners may read them, docs/protocol.md)."""
    return [
        {"body": r[0], "edited_at": iso(r[1]), "action": r[2]}
        if with_bodies
        else {"edited_at": iso(r[1]), "action": r[2]}
        for r in conn.execute(
            "SELECT body, edited_at, action FROM message_edits WHERE message_id = :m ORDER BY id",
            {"m": message_id},
        )
    ]


# One backward range scan of ``messages_seq`` (project_id, seq), no sort (scripts/bench times
# its execution on PostgreSQL apart from the round trip: benchlib/pgstore.py).
HISTORY_SQL = (
    "SELECT frame FROM messages WHERE project_id = :p AND seq < :before"
    " ORDER BY seq DESC LIMIT :limit"
)


def history(
    conn: Connection, project_id: int, before: int | None, limit: int
) -> tuple[list[str], bool]:
    """Up to ``limit`` message objects with seq < before, oldest first; keyset, never OFFSET.
    A ``before`` past any seq (even past SQLite's integers) means "the latest"."""
    end = 1 << 62 if before is None else max(0, min(before, 1 << 62))
    rows = conn.execute(
        HISTORY_SQL, {"p": project_id, "before": end, "limit": limit + 1}
    ).fetchall()
    has_more = len(rows) > limit
    frames = [str(r[0]) for r in rows[:limit]]
    frames.reverse()
    return frames, has_more


COUNT_CAP = 10_000


def count_before(conn: Connection, project_id: int, seq: int) -> int:
    """Chat and system messages (not deleted, no tool activity) before ``seq``, counted up to
    :data:`COUNT_CAP` (a bounded read however long the project's history)."""
    row = conn.execute(
        "SELECT count(*) FROM (SELECT 1 FROM messages WHERE project_id = :p AND seq < :s"
        " AND kind != 'tool' AND deleted_at IS NULL LIMIT :cap) AS counted",
        {"p": project_id, "s": seq, "cap": COUNT_CAP},
    ).fetchone()
    return int(row[0])


def newer(conn: Connection, project_id: int, after: int, limit: int) -> tuple[list[str], bool]:
    """Up to ``limit`` message objects with seq > after, oldest first, and whether more follow:
    the page after a window opened around an old message (:func:`around`)."""
    start = max(-1, min(after, 1 << 62))
    rows = conn.execute(
        "SELECT frame FROM messages WHERE project_id = :p AND seq > :after"
        " ORDER BY seq LIMIT :limit",
        {"p": project_id, "after": start, "limit": limit + 1},
    ).fetchall()
    return [str(r[0]) for r in rows[:limit]], len(rows) > limit


def around(conn: Connection, project_id: int, seq: int, limit: int) -> tuple[list[str], bool, bool]:
    """A window of up to ``limit`` messages around ``seq``, oldest first: the message at ``seq``
    (when there is one) and about half the page before it, the rest after. Returns the frames,
    whether older ones exist and whether newer ones exist. A permalink opens here."""
    before_count = limit // 2
    older, has_more = history(conn, project_id, seq, before_count)
    rest, has_newer = newer(conn, project_id, seq - 1, limit - len(older))
    return older + rest, has_more, has_newer


def replay(conn: Connection, project_id: int, after_seq: int, limit: int) -> list[tuple[int, str]]:
    """Events with seq > after_seq in order, as ready wire frames.

    SQLite builds each message event's frame (the same text as :func:`event_frame` or
    :func:`update_frame`; a test checks it) in the reader thread with the GIL released, so a long
    replay does not stall the event loop. A ``message_updated`` event, like a ``message`` event,
    carries the message's current object: an edit or a delete leaves no earlier text in the
    stream.
    """
    return conn.execute(
        'SELECT e.seq, coalesce(e.frame, \'{"type":"\' || e.kind || \'","project_id":\''
        " || e.project_id || ',\"seq\":' || e.seq || ',\"message\":' || m.frame || '}')"
        " FROM events e LEFT JOIN messages m"
        " ON e.kind IN ('message', 'message_updated') AND m.id = e.message_id"
        " WHERE e.project_id = :p AND e.seq > :after ORDER BY e.seq LIMIT :limit",
        {"p": project_id, "after": after_seq, "limit": limit},
    ).fetchall()


def set_read_cursor(
    conn: Connection,
    *,
    member_id: int,
    project_id: int,
    seq: int,
    now: float,
    back: bool = False,
) -> int:
    """Move a member's read cursor forward only (to exactly ``seq`` with ``back``: "mark as
    unread"); returns the cursor after the update."""
    # (No two-argument max: PostgreSQL spells it greatest. A CASE reads the same on both.)
    keep = (
        "excluded.seq"
        if back
        else "CASE WHEN excluded.seq > read_cursors.seq THEN excluded.seq ELSE read_cursors.seq END"
    )
    row = conn.execute(
        "INSERT INTO read_cursors (member_id, project_id, seq, updated_at)"
        " VALUES (:m, :p, :seq, :now) ON CONFLICT (member_id) DO UPDATE SET"
        f" seq = {keep}, updated_at = excluded.updated_at RETURNING seq",
        {"m": member_id, "p": project_id, "seq": seq, "now": now},
    ).fetchone()
    return int(row[0])


MAX_EDIT_VERSIONS = 20  # earlier versions kept per message: the original and the newest 19
UNREAD_CAP = 100  # counted up to here: past it the badge says "99+"
UNREAD_SCAN = 2_000  # messages looked at after the cursor, at most, per project


# Per member: (chat messages by others after the read cursor, not deleted; how many of those
# mention the member or reply in a thread it follows), over at most UNREAD_SCAN messages after the cursor, each capped.
_UNREAD = (
    "SELECT m.id, m.project_id, (SELECT count(*) FROM (SELECT kind, author_id, deleted_at"
    " FROM messages x WHERE x.project_id = m.project_id AND x.seq > coalesce(rc.seq, 0)"
    " ORDER BY x.seq LIMIT :scan) y WHERE kind = 'chat' AND deleted_at IS NULL"
    " AND (author_id IS NULL OR author_id != m.id)),"
    " (SELECT count(*) FROM (SELECT id, kind, author_id, deleted_at"
    " FROM messages x WHERE x.project_id = m.project_id AND x.seq > coalesce(rc.seq, 0)"
    " ORDER BY x.seq LIMIT :scan) y WHERE kind = 'chat' AND deleted_at IS NULL"
    " AND (author_id IS NULL OR author_id != m.id)"
    " AND (EXISTS (SELECT 1 FROM mentions WHERE message_id = y.id AND member_id = m.id)"
    # A reply in a thread the member follows counts as a mention (docs/protocol.md,
    # "Notifications": followed threads notify like mentions).
    "  OR EXISTS (SELECT 1 FROM thread_replies r JOIN thread_follows f ON f.root_id = r.root_id"
    "   WHERE r.message_id = y.id AND f.member_id = m.id AND f.following = 1)))"
    " FROM members m LEFT JOIN read_cursors rc ON rc.member_id = m.id"
)


def unread_for_user(conn: Connection, user_id: int) -> dict[int, tuple[int, int]]:
    """Per project of ``user_id``: (unread, mentions) — chat messages by others after their read
    cursor, not deleted, up to ``UNREAD_CAP``, and how many of them mention this person. Bounded
    work: a keyset range on ``messages_seq`` over at most the ``UNREAD_SCAN`` messages after the
    cursor (tool and system messages and one's own take room there too, so a long run of those
    can make the counts low, never high)."""
    return {
        int(r[1]): (min(int(r[2]), UNREAD_CAP), min(int(r[3]), UNREAD_CAP))
        for r in conn.execute(
            _UNREAD + " WHERE m.user_id = :u AND m.status != 'left'",
            {"u": user_id, "scan": UNREAD_SCAN},
        )
    }


def unread_for_members(conn: Connection, member_ids: Iterable[int]) -> dict[int, tuple[int, int]]:
    """:func:`unread_for_user`'s counts for these members (people of one project), by member."""
    out: dict[int, tuple[int, int]] = {}
    for chunk in chunks(list(member_ids)):
        marks = ", ".join("?" * len(chunk))
        sql = _UNREAD.replace(":scan", "?") + f" WHERE m.id IN ({marks})"
        for r in conn.execute(sql, (UNREAD_SCAN, UNREAD_SCAN, *chunk)):
            out[int(r[0])] = (min(int(r[2]), UNREAD_CAP), min(int(r[3]), UNREAD_CAP))
    return out


def read_cursors(conn: Connection, project_id: int) -> dict[int, int]:
    return {
        int(r[0]): int(r[1])
        for r in conn.execute(
            "SELECT member_id, seq FROM read_cursors WHERE project_id = :p", {"p": project_id}
        )
    }
