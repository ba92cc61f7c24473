"""0032: PostgreSQL's message index gets a BRIN index on ``rowid``, so a common word's newest
matches are read without a heap page per match (docs/storage.md, "Search on PostgreSQL").

A search ranks the newest ``RANK_WINDOW`` matches. The GIN index finds every match in no order;
for a word in 1 % of 1M messages that is ~11,800 rows, each on its own heap page, read before
the newest 1,000 are kept (20 ms where FTS5, walking its doclist newest first, takes 4).
``message_fts``'s ids and its heap's order agree (``0030`` rebuilt it in ``rowid`` order, and
the indexer appends), so a BRIN summary of ``rowid`` per 16 pages tells which pages hold the
newest ids: a query the index's statistics call common is first asked of the newest ids alone,
its GIN bitmap ANDed with the BRIN's, and only the matches there are read
(:func:`room.store.search_pg.recent_span`). Where the order does not hold (a message edited
long after, its row written again elsewhere), the BRIN only lets more pages through: each row
is checked against the range, what is found never changes.

``autosummarize``: autovacuum summarizes each new range of pages once it is full; until then
the range is always let through (it holds the newest ids).

``tsv``'s statistics target 300 (100 by default): ``ANALYZE`` keeps ten times the target of its
most common lexemes, 3,000 instead of 1,000. At 1M messages the list then reaches down to
lexemes in ~0.2 % of the rows, below the ~0.4 % from which a query is asked of the newest ids
first (four windows of matches), where the default's ended at ~0.9 % and left a quarter of
the words in 1 % of the messages to the whole index. ``ANALYZE`` samples 90,000 rows instead
of 30,000 (0.8 s at 1M messages).

On SQLite nothing changes (the migration is empty, kept so that both stores list the same
names): FTS5 reads its doclist newest first and stops at the window.
"""

from __future__ import annotations

FTS_RECENT = """
-- SQLite: nothing (see room.store.schema_fts_recent)
"""

FTS_RECENT_PG = """
CREATE INDEX message_fts_rowid_brin ON message_fts USING brin (rowid)
    WITH (pages_per_range = 16, autosummarize = on);
ALTER TABLE message_fts ALTER COLUMN tsv SET STATISTICS 300;
ANALYZE message_fts
"""
