"""0023: threads (room.store.threads, docs/protocol.md "Threads").

A thread is a root message and every reply under it: a reply to a reply belongs to its root's
thread. ``threads`` keeps, per root, the reply count (replies not deleted) and the newest reply,
maintained in the transaction of the send (and of a delete), so a page of history reads them from
the root's stored wire object (``thread``) and never counts. ``thread_replies`` says which thread a
reply is in (the thread pane's pages, in id order: ids grow with seq). ``thread_follows``: who
follows a thread — set when a person starts or replies in one, or says so; ``following = 0`` keeps
an explicit unfollow.

Existing replies are put in their threads here; the roots' wire objects get their ``thread``
summary on SQLite (PostgreSQL is not served yet, so its databases hold no messages to update).
"""

from __future__ import annotations

_TABLES = """
CREATE TABLE threads (
    root_id        {id} PRIMARY KEY REFERENCES messages(id),
    project_id     {id} NOT NULL REFERENCES projects(id),
    replies        {id} NOT NULL DEFAULT 0,
    last_reply_id  {id} REFERENCES messages(id),
    last_reply_at  {real}
){without_rowid};
CREATE INDEX threads_project ON threads(project_id);
CREATE TABLE thread_replies (
    message_id  {id} PRIMARY KEY REFERENCES messages(id),
    root_id     {id} NOT NULL REFERENCES threads(root_id)
){without_rowid};
CREATE INDEX thread_replies_root ON thread_replies(root_id, message_id);
CREATE TABLE thread_follows (
    root_id     {id} NOT NULL REFERENCES threads(root_id),
    member_id   {id} NOT NULL REFERENCES members(id),
    following   {id} NOT NULL,
    updated_at  {real} NOT NULL,
    PRIMARY KEY (root_id, member_id)
){without_rowid};
CREATE INDEX thread_follows_member ON thread_follows(member_id) WHERE following = 1;
"""

# Every existing reply, walked down from the roots it hangs under; the counts and the newest
# reply are of the replies not deleted; the people who wrote the root or a reply follow.
_CHAIN = """WITH RECURSIVE chain(id, root_id) AS (
    SELECT id, id FROM messages WHERE reply_to IS NULL
        AND id IN (SELECT reply_to FROM messages WHERE reply_to IS NOT NULL)
    UNION ALL
    SELECT m.id, c.root_id FROM messages m JOIN chain c ON m.reply_to = c.id
)"""

# (The threads first: the replies' rows refer to them.)
_BACKFILL = f"""
{_CHAIN}
INSERT INTO threads (root_id, project_id, replies, last_reply_id, last_reply_at)
    SELECT g.root_id, g.project_id, g.replies, g.last_id, l.created_at FROM (
        SELECT c.root_id AS root_id, root.project_id AS project_id,
            sum(CASE WHEN y.deleted_at IS NULL THEN 1 ELSE 0 END) AS replies,
            max(CASE WHEN y.deleted_at IS NULL THEN y.id END) AS last_id
        FROM chain c JOIN messages root ON root.id = c.root_id
        JOIN messages y ON y.id = c.id
        WHERE c.id != c.root_id
        GROUP BY c.root_id, root.project_id
    ) g LEFT JOIN messages l ON l.id = g.last_id;
{_CHAIN}
INSERT INTO thread_replies (message_id, root_id) SELECT id, root_id FROM chain WHERE id != root_id;
INSERT INTO thread_follows (root_id, member_id, following, updated_at)
    SELECT f.root_id, f.author_id, 1, 0 FROM (
        SELECT t.root_id AS root_id, m.author_id AS author_id
            FROM threads t JOIN messages m ON m.id = t.root_id
        UNION
        SELECT r.root_id, m.author_id FROM thread_replies r JOIN messages m ON m.id = r.message_id
    ) f JOIN members p ON p.id = f.author_id AND p.kind = 'human';
"""

THREADS = (
    _TABLES.format(id="INTEGER", real="REAL", without_rowid=" WITHOUT ROWID")
    + _BACKFILL
    + """
UPDATE messages SET frame = json_set(frame, '$.thread', json_object(
        'replies', (SELECT replies FROM threads WHERE root_id = messages.id),
        -- milliseconds as room.rules.entities.iso makes them (microseconds rounded, then
        -- cut), not strftime's rounding
        'last_reply_at', strftime('%Y-%m-%dT%H:%M:%fZ', (CAST(round(
            (SELECT last_reply_at FROM threads WHERE root_id = messages.id) * 1000000)
            AS INTEGER) / 1000) / 1000.0, 'unixepoch'),
        'last_reply_id', (SELECT last_reply_id FROM threads WHERE root_id = messages.id)))
    WHERE id IN (SELECT root_id FROM threads);
"""
)

THREADS_PG = (
    (_TABLES.format(id="bigint", real="double precision", without_rowid="") + _BACKFILL)
    .rstrip()
    .rstrip(";")
)
