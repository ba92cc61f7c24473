"""Migration 0009: project memory records (docs/memory.md, "Records").

``memory_entries`` holds every record but decisions (which stay in ``decisions``): its current
body (JSON), revision number, author, and ``archived`` once a cap moved it out of the live set.
``memory_revisions`` keeps every revision's body (rev 1 is the first), so nothing is lost by an
edit. ``memory_versions`` is a counter per project, bumped by every write, so a running agent
knows memory changed. Decisions gain ``alternatives_json`` (the options rejected, each with why)
and ``constraints`` per revision, and ``archived``. The migration runner splits on ``;``: no
semicolons inside strings or comments here.
"""

from __future__ import annotations

MEMORY = """
CREATE TABLE memory_entries (
    id           INTEGER PRIMARY KEY,
    project_id   INTEGER NOT NULL REFERENCES projects(id),
    kind         TEXT NOT NULL CHECK (kind IN
                     ('summary', 'fact', 'convention', 'progress', 'session', 'reference')),
    rev          INTEGER NOT NULL DEFAULT 1 CHECK (rev >= 1),
    body_json    TEXT NOT NULL,
    size         INTEGER NOT NULL,
    author_id    INTEGER REFERENCES members(id),
    turn_id      INTEGER,
    ref_key      TEXT,
    archived     INTEGER NOT NULL DEFAULT 0 CHECK (archived IN (0, 1)),
    archived_at  REAL,
    created_at   REAL NOT NULL,
    updated_at   REAL NOT NULL,
    updated_by   INTEGER REFERENCES members(id)
);
CREATE INDEX memory_entries_kind ON memory_entries(project_id, kind, archived, id);
CREATE INDEX memory_entries_session_time ON memory_entries(project_id, created_at)
    WHERE kind = 'session';
CREATE UNIQUE INDEX memory_entries_summary ON memory_entries(project_id) WHERE kind = 'summary';
CREATE UNIQUE INDEX memory_entries_reference ON memory_entries(project_id, ref_key)
    WHERE kind = 'reference';

CREATE TABLE memory_revisions (
    id          INTEGER PRIMARY KEY,
    project_id  INTEGER NOT NULL REFERENCES projects(id),
    entry_id    INTEGER NOT NULL REFERENCES memory_entries(id),
    rev         INTEGER NOT NULL,
    body_json   TEXT NOT NULL,
    author_id   INTEGER REFERENCES members(id),
    at          REAL NOT NULL,
    UNIQUE (entry_id, rev)
);

CREATE TABLE memory_versions (
    project_id  INTEGER PRIMARY KEY REFERENCES projects(id),
    version     INTEGER NOT NULL,
    updated_at  REAL NOT NULL
);

ALTER TABLE decision_revisions ADD COLUMN alternatives_json TEXT NOT NULL DEFAULT '[]';
ALTER TABLE decision_revisions ADD COLUMN constraints TEXT NOT NULL DEFAULT '';
ALTER TABLE decisions ADD COLUMN archived INTEGER NOT NULL DEFAULT 0
"""

# Children first: deleting a project's rows in this order never breaks a foreign key.
MEMORY_TABLES: tuple[str, ...] = ("memory_revisions", "memory_entries", "memory_versions")
