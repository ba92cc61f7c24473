"""0031: the database's own identity, the cluster id (docs/cluster.md, "Subjects").

``cluster_identity``: one row (``id`` = 1) whose ``cluster`` is 16 random hex digits, drawn by
the migration itself, once per database. Every node on the database reads it at its start and
names its NATS subjects with it (``room.<cluster>.p.<project>``, ``room.<cluster>.nodes``,
room.infra.bus), so two clusters on one nats-server (staging beside production) never hear
each other's hints: their databases drew different ids.

It belongs to the database, not to its data: ``room copy`` leaves the table out (a copy is a new
log of record, whose migration draws a new id; room.actions.store_copy), and a pack never
carried it. A file copy of a SQLite database or a ``pg_dump`` restored elsewhere keeps it, as a
restore of the same database should; a clone that is to run beside its original is given a new
one by hand (docs/cluster.md, "Subjects").
"""

from __future__ import annotations

_CLUSTER = """
CREATE TABLE cluster_identity (
    id       {id} PRIMARY KEY CHECK (id = 1),
    cluster  {text} NOT NULL
){rowid};
INSERT INTO cluster_identity (id, cluster) VALUES (1, {random})
"""

# WITHOUT ROWID: its ``id`` is a key, not a number SQLite would draw (as PostgreSQL's isn't).
CLUSTER_ID = _CLUSTER.format(
    id="INTEGER", text="TEXT", rowid=" WITHOUT ROWID", random="lower(hex(randomblob(8)))"
)
CLUSTER_ID_PG = _CLUSTER.format(
    id="bigint",
    text="text",
    rowid="",
    # gen_random_uuid() is core from PostgreSQL 13 (122 random bits, hashed to hex digits).
    random="substr(md5(gen_random_uuid()::text), 1, 16)",
)
