"""Migration 0016: deep research runs (docs/research.md).

``research_runs`` holds a run's current revision (question, scope, members, budget and their
digest), its state, the approval (revision, digest and project epoch it binds, who and when,
its expiry), what it has spent and its timeline card. ``research_revisions`` keeps every
revision. ``research_items`` holds what the sessions recorded (hypotheses, experiments,
findings with sources, the report) and, for a finding, its flowback (proposed, accepted,
rejected). Transcript rows and model requests of a research session carry its id. The migration
runner splits on ``;``: no semicolons inside strings or comments here.
"""

from __future__ import annotations

RESEARCH = """
CREATE TABLE research_runs (
    id               INTEGER PRIMARY KEY,
    project_id       INTEGER NOT NULL REFERENCES projects(id),
    state            TEXT NOT NULL,
    rev              INTEGER NOT NULL CHECK (rev >= 1),
    question         TEXT NOT NULL,
    scope_json       TEXT NOT NULL,
    members_json     TEXT NOT NULL,
    budget_json      TEXT NOT NULL,
    digest           TEXT NOT NULL,
    proposer_id      INTEGER REFERENCES members(id),
    card_id          INTEGER,
    approved_rev     INTEGER,
    approved_digest  TEXT,
    approved_epoch   INTEGER,
    approved_by      INTEGER REFERENCES members(id),
    approved_at      REAL,
    expires_at       REAL,
    tokens_used      INTEGER NOT NULL DEFAULT 0,
    requests_used    INTEGER NOT NULL DEFAULT 0,
    steps_used       INTEGER NOT NULL DEFAULT 0,
    run_secs         REAL NOT NULL DEFAULT 0,
    running_since    REAL,
    reserved_tokens  INTEGER NOT NULL DEFAULT 0,
    stop_reason      TEXT,
    created_at       REAL NOT NULL,
    updated_at       REAL NOT NULL
);
CREATE INDEX research_runs_project ON research_runs(project_id, id);

CREATE TABLE research_revisions (
    id            INTEGER PRIMARY KEY,
    project_id    INTEGER NOT NULL REFERENCES projects(id),
    research_id   INTEGER NOT NULL REFERENCES research_runs(id),
    rev           INTEGER NOT NULL,
    question      TEXT NOT NULL,
    scope_json    TEXT NOT NULL,
    members_json  TEXT NOT NULL,
    budget_json   TEXT NOT NULL,
    digest        TEXT NOT NULL,
    author_id     INTEGER REFERENCES members(id),
    at            REAL NOT NULL,
    UNIQUE (research_id, rev)
);

CREATE TABLE research_items (
    id            INTEGER PRIMARY KEY,
    project_id    INTEGER NOT NULL REFERENCES projects(id),
    research_id   INTEGER NOT NULL REFERENCES research_runs(id),
    member_id     INTEGER REFERENCES members(id),
    kind          TEXT NOT NULL CHECK (kind IN ('hypothesis', 'experiment', 'finding', 'report')),
    body          TEXT NOT NULL,
    sources_json  TEXT NOT NULL DEFAULT '[]',
    flow          TEXT CHECK (flow IS NULL OR flow IN ('proposed', 'accepted', 'rejected')),
    flow_by       INTEGER REFERENCES members(id),
    memory_id     INTEGER,
    created_at    REAL NOT NULL
);
CREATE INDEX research_items_run ON research_items(research_id, id);

ALTER TABLE transcript_entries ADD COLUMN research_id INTEGER;
ALTER TABLE model_requests ADD COLUMN research_id INTEGER
"""

# Children first: deleting a project's rows in this order never breaks a foreign key.
RESEARCH_TABLES: tuple[str, ...] = ("research_items", "research_revisions", "research_runs")
