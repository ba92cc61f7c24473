"""0024: a person's notification level per project (room.store.notifications).

``notification_levels``: one row per member (a person in a project) who chose a level other than
the default ``all``: ``mentions`` (badges and alerts for mentions and followed threads only) or
``none`` (nothing). No row: ``all``.

For the email digest (room.actions.digest): ``users.email`` (where it goes; NULL: none),
``users.lang`` (``zh`` or ``en``, the digest's language) and ``users.digest_at`` (when the last
one was sent: a mention is mailed once).
"""

from __future__ import annotations

_LEVELS = """
CREATE TABLE notification_levels (
    member_id   {id} PRIMARY KEY REFERENCES members(id),
    level       {text} NOT NULL CHECK (level = 'all' OR level = 'mentions' OR level = 'none'),
    updated_at  {real} NOT NULL
){without_rowid};
ALTER TABLE users ADD COLUMN email {text};
ALTER TABLE users ADD COLUMN lang {text} NOT NULL DEFAULT 'zh';
ALTER TABLE users ADD COLUMN digest_at {real}
"""

NOTIFY = _LEVELS.format(id="INTEGER", text="TEXT", real="REAL", without_rowid=" WITHOUT ROWID")
NOTIFY_PG = _LEVELS.format(id="bigint", text="text", real="double precision", without_rowid="")
