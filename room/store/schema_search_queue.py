"""0025: the search indexer's queue is commit-ordered on PostgreSQL (docs/storage.md, "Several
writers"; room.store.search_pg).

On PostgreSQL ids come from sequences and several servers write: a message with a lower id can
commit after one with a higher id, so a watermark of ids (SQLite's indexer) can pass over it for
good. There every inserted message is queued in ``search_changes`` by a statement trigger, in
the inserting transaction whatever wrote it (a send, an import, ``room copy``), beside the edits,
deletes and purges the store queues itself; the indexer reads the queue, indexes what it names
and deletes the rows it read, in one transaction, so a row is taken when it becomes visible,
never before and never twice. The migration queues every live message the index lacks (those a
watermark may have passed over included).

On SQLite nothing changes (the migration is empty, kept so that both stores list the same
names): one writer takes ids in its write lock, so they commit in id order and the watermark of
``search.sqlite`` is exact; a queue row per send would cost the send path a write and the
indexer the main database's write lock, which it never takes.
"""

from __future__ import annotations

SEARCH_QUEUE = """
-- SQLite: nothing (its single writer commits ids in order; see room.store.schema_search_queue)
"""

SEARCH_QUEUE_PG = """
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
"""
