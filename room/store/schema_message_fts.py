"""0030: PostgreSQL's message index carries each message's project and keeps its rows in its
heap (docs/storage.md, "Search on PostgreSQL").

``message_fts.project_id``: the project of the message the row indexes (a message never moves
to another project). A search ranks its window of matches from ``message_fts`` alone, without a
probe of ``messages`` and a page of its heap per match; only the best ``limit`` are joined
(:func:`room.store.search_pg.best_messages`). At 1M messages that join was 3 of a 0.1 % word's
10 ms.

``toast_tuple_target`` at its largest (8,160 bytes): a row stays whole in its heap page up to
that size. At the default (~2 kB) the ``tsv`` of a message in Chinese (a bigram per character:
~1.9 kB beside its ~0.7 kB of ``body`` and ``uni``) went to the TOAST table, so every match of
a Chinese word cost a TOAST index probe and another page besides its heap row: a two-character
word in 0.1 % of 1M messages took 20 ms where an English word as common took 4.

The table is built afresh in ``rowid`` order (ids and the heap's order agree, so the newest
matches are the last pages) from the old one joined to ``messages``; a row whose message is
gone is left behind (a purge queued it; the indexer would delete it). Its GIN index is made
after the rows are in (minutes per million messages: the migration's cost). The rows' text
and tokens are unchanged: no message needs indexing again.

On SQLite nothing changes (the migration is empty, kept so that both stores list the same
names): the index is FTS5 in ``search.sqlite``, whose rowid is the message's id and whose join
to ``messages`` is an in-process B-tree lookup, not a page read through a server.
"""

from __future__ import annotations

MESSAGE_FTS_PROJECT = """
-- SQLite: nothing (see room.store.schema_message_fts)
"""

MESSAGE_FTS_PROJECT_PG = """
SET LOCAL maintenance_work_mem = '256MB';
ALTER TABLE message_fts RENAME TO message_fts_0032;
ALTER INDEX message_fts_pkey RENAME TO message_fts_0032_pkey;
DROP INDEX message_fts_tsv;
CREATE TABLE message_fts (
    rowid       bigint PRIMARY KEY,
    project_id  bigint NOT NULL,
    body        text NOT NULL,
    uni         text NOT NULL,
    tsv         tsvector NOT NULL GENERATED ALWAYS AS
        (setweight(to_tsvector('simple', body), 'A') || setweight(to_tsvector('simple', uni), 'B'))
        STORED
) WITH (toast_tuple_target = 8160);
INSERT INTO message_fts (rowid, project_id, body, uni)
    SELECT f.rowid, m.project_id, f.body, f.uni
    FROM message_fts_0032 f JOIN messages m ON m.id = f.rowid
    ORDER BY f.rowid;
DROP TABLE message_fts_0032;
CREATE INDEX message_fts_tsv ON message_fts USING gin (tsv);
ANALYZE message_fts
"""
