"""0027: PostgreSQL keeps SQLite's promises with several writers and any locale (docs/storage.md,
"Several writers" and "Case").

**The search indexer's queue is commit-ordered.** On PostgreSQL ids come from sequences and
several servers write: a message with a lower id can commit after one with a higher id, so a
watermark of ids (SQLite's indexer) can pass over it for good. There every inserted message is
queued in ``search_changes`` by a statement trigger, in the inserting transaction whatever wrote
it (a send, an import, ``room copy``), beside the edits, deletes and purges the store queues
itself; the indexer reads the queue, indexes what it names and deletes the rows it read, in one
transaction (room.store.search_pg), so a row is taken once it is visible, never before. The
migration queues every live message the index lacks (those a watermark passed over included).

**Case is ASCII case on both.** SQLite's ``COLLATE NOCASE`` folds A–Z only; PostgreSQL's
``lower`` folds what the database's ``LC_CTYPE`` says (A–Z only under ``C``, all of Unicode
under ``C.UTF-8`` or ``en_US.UTF-8``), so "CAFÉ" and "Café" were one project name on some
PostgreSQL databases and two on SQLite, and "@\\u212abob" (a Kelvin sign) found the person
``kbob``. The two case-insensitive unique indexes (``users.handle``, ``projects.name``) become
indexes on ``room.store.dialect.ASCII_LOWER`` of the column, which folds A–Z whatever the locale, as
``Dialect.nocase_equals`` compares; no two rows can collide under it that did not under
``lower``, so the indexes build on any existing data.

On SQLite nothing changes (the migration is empty, kept so that both stores list the same
names): one writer takes ids in its write lock, so they commit in id order and the watermark of
``search.sqlite`` is exact (a queue row per send would cost the send path a write and the indexer
the main database's write lock, which it never takes), and ``NOCASE`` is already ASCII case.
"""

from __future__ import annotations

from room.store.dialect import ASCII_LOWER

PG_PARITY = """
-- SQLite: nothing (see room.store.schema_pg_parity)
"""

PG_PARITY_PG = f"""
CREATE FUNCTION room_queue_new_messages() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO search_changes (message_id) SELECT id FROM new_messages ORDER BY id;
    RETURN NULL;
END
$$;
CREATE TRIGGER messages_search_queue AFTER INSERT ON messages
    REFERENCING NEW TABLE AS new_messages
    FOR EACH STATEMENT EXECUTE FUNCTION room_queue_new_messages();
INSERT INTO search_changes (message_id)
    SELECT m.id FROM messages m
    WHERE m.deleted_at IS NULL AND NOT EXISTS (SELECT 1 FROM message_fts f WHERE f.rowid = m.id)
    ORDER BY m.id;
DROP INDEX users_handle_key;
CREATE UNIQUE INDEX users_handle_key ON users ({ASCII_LOWER.format("handle")});
DROP INDEX projects_name;
CREATE UNIQUE INDEX projects_name ON projects ({ASCII_LOWER.format("name")})
    WHERE state <> 'purged';
"""
