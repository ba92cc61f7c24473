"""0028: the leases under which nodes run projects' agent turns, and each project's home node
(room.store.leases, docs/cluster.md "Agents across nodes").

``leases``: at most one row per project — the node holding it (``holder``), the fencing
``token`` (1 when first taken, one more at each adoption by another node; never lower) and when
it lapses (``expires_at``, the holder's clock; a node adopts it only once lapsed by its own).
No foreign key: a purge deletes the row with the project's other settings.

``projects.home_node``: the node whose disk holds the project's workspace and where its agent
turns run (set at creation to the creating node; ``room cluster move`` changes it). NULL: no
node named (a project created before this migration, or outside a server): its turns run where
they are woken, as before.
"""

from __future__ import annotations

_LEASES = """
CREATE TABLE leases (
    project_id  {id} PRIMARY KEY,
    holder      {text} NOT NULL,
    token       {id} NOT NULL,
    expires_at  {real} NOT NULL,
    taken_at    {real} NOT NULL
){without_rowid};
ALTER TABLE projects ADD COLUMN home_node {text}
"""

LEASES = _LEASES.format(id="INTEGER", text="TEXT", real="REAL", without_rowid=" WITHOUT ROWID")
LEASES_PG = _LEASES.format(id="bigint", text="text", real="double precision", without_rowid="")
