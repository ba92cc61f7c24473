"""0025: the ``thread`` summary on the stored wire object of roots written before 0023 on
PostgreSQL (docs/storage.md, "The PostgreSQL schema").

``0023_threads`` put earlier replies in their threads on both stores, but wrote the roots'
``thread`` summary (``{"replies", "last_reply_at", "last_reply_id"}``, room.store.threads) into
their frames on SQLite only: PostgreSQL was not served then. A PostgreSQL database migrated
through 0023 with messages in it kept roots whose history frame has no ``thread`` until their
next reply. This puts it there, for every root with a reply in ``thread_replies`` whose frame
lacks it, from the ``threads`` row the live path keeps.

On PostgreSQL the frame is text the server wrote key by key (room.store.messages): the summary
is spliced in as that text, compact and in the live path's key order — before ``reactions``
(always the last key when present, its value an array of objects the server writes, so its
last ``,"reactions":[`` is the key), else before the closing brace — so a backfilled frame is
byte for byte what a reply would have written (``tests/test_thread_frames_pg.py``).
``last_reply_at`` is formatted as ``room.rules.entities.iso`` does (microseconds, then cut to
milliseconds, ``Z``).

On SQLite 0023 did this already: the same guarded update finds no root without its summary and
changes nothing (it would repair one with ``json_set``, as 0023 wrote them).
"""

from __future__ import annotations

# The roots to fill: a thread with a reply (a thread made by a follow before any reply has no
# summary on the live path either).
_ROOTS = "EXISTS (SELECT 1 FROM thread_replies r WHERE r.root_id = t.root_id)"

THREAD_FRAMES = f"""
UPDATE messages SET frame = json_set(frame, '$.thread', json_object(
        'replies', (SELECT replies FROM threads WHERE root_id = messages.id),
        'last_reply_at', strftime('%Y-%m-%dT%H:%M:%fZ', (CAST(round(
            (SELECT last_reply_at FROM threads WHERE root_id = messages.id) * 1000000)
            AS INTEGER) / 1000) / 1000.0, 'unixepoch'),
        'last_reply_id', (SELECT last_reply_id FROM threads WHERE root_id = messages.id)))
    WHERE json_extract(frame, '$.thread') IS NULL
        AND id IN (SELECT t.root_id FROM threads t WHERE {_ROOTS})
"""

THREAD_FRAMES_PG = f"""
UPDATE messages m SET frame = CASE
        WHEN m.frame::jsonb ? 'reactions' THEN
            left(m.frame, length(m.frame) - strpos(reverse(m.frame), reverse(',"reactions":['))
                - length(',"reactions":[') + 1)
            || ',"thread":' || s.summary
            || right(m.frame, strpos(reverse(m.frame), reverse(',"reactions":['))
                + length(',"reactions":[') - 1)
        ELSE left(m.frame, length(m.frame) - 1) || ',"thread":' || s.summary || '}}'
    END
    FROM (
        SELECT t.root_id,
            '{{"replies":' || t.replies
            || ',"last_reply_at":' || coalesce('"' || to_char(
                to_timestamp(t.last_reply_at) AT TIME ZONE 'UTC',
                'YYYY-MM-DD"T"HH24:MI:SS.MS') || 'Z"', 'null')
            || ',"last_reply_id":' || coalesce(t.last_reply_id::text, 'null') || '}}' AS summary
        FROM threads t WHERE {_ROOTS}
    ) s
    WHERE m.id = s.root_id AND NOT (m.frame::jsonb ? 'thread')
"""
