"""Migration 0004: plans, tasks, acceptance evidence and decisions (docs/tasks.md).

Every table carries ``project_id`` so that a purge deletes a project's rows table by table, in
the order of :data:`TASK_TABLES` (children first). They reference ``members``, ``messages`` and
``turns``, so a purge deletes them before those. The migration runner splits on ``;``: no
semicolons inside strings or comments here.
"""

from __future__ import annotations

TASKS = """
-- A submitted plan. Its items became tasks. started_at is NULL while a plan-first plan waits
-- for a person to start it: its tasks are held (nothing is dispatched).
CREATE TABLE plans (
    id            INTEGER PRIMARY KEY,
    project_id    INTEGER NOT NULL REFERENCES projects(id),
    version       INTEGER NOT NULL,
    goal          TEXT,
    plan_json     TEXT NOT NULL,
    submitted_by  INTEGER REFERENCES members(id),
    created_at    REAL NOT NULL,
    started_at    REAL,
    started_by    INTEGER REFERENCES members(id),
    UNIQUE (project_id, version)
);

CREATE TABLE tasks (
    id            INTEGER PRIMARY KEY,
    project_id    INTEGER NOT NULL REFERENCES projects(id),
    plan_id       INTEGER REFERENCES plans(id),
    key           TEXT NOT NULL,
    title         TEXT NOT NULL,
    position      INTEGER NOT NULL,
    owner_id      INTEGER NOT NULL REFERENCES members(id),
    reviewer_id   INTEGER REFERENCES members(id),
    state         TEXT NOT NULL CHECK (state IN ('waiting', 'ready', 'in_progress', 'in_review',
        'accepted', 'changes_requested', 'needs_sync', 'handoff', 'blocked', 'cancelled')),
    revision      INTEGER NOT NULL DEFAULT 0,
    sync_prior    TEXT,
    held          INTEGER NOT NULL DEFAULT 0,
    note          TEXT,
    assumptions_json TEXT NOT NULL DEFAULT '[]',
    created_at    REAL NOT NULL,
    updated_at    REAL NOT NULL,
    UNIQUE (project_id, key)
);
CREATE INDEX tasks_owner ON tasks(owner_id, state);

CREATE TABLE task_deps (
    project_id     INTEGER NOT NULL REFERENCES projects(id),
    task_id        INTEGER NOT NULL REFERENCES tasks(id),
    depends_on_id  INTEGER NOT NULL REFERENCES tasks(id),
    PRIMARY KEY (task_id, depends_on_id)
) WITHOUT ROWID;
CREATE INDEX task_deps_reverse ON task_deps(depends_on_id);

CREATE TABLE task_criteria (
    id          INTEGER PRIMARY KEY,
    project_id  INTEGER NOT NULL REFERENCES projects(id),
    task_id     INTEGER NOT NULL REFERENCES tasks(id),
    position    INTEGER NOT NULL,
    text        TEXT NOT NULL,
    UNIQUE (task_id, position)
);

-- One row per criterion verdict. The latest row of a criterion counts, and only while the task
-- is still on the revision it was recorded for.
CREATE TABLE task_reviews (
    id            INTEGER PRIMARY KEY,
    project_id    INTEGER NOT NULL REFERENCES projects(id),
    task_id       INTEGER NOT NULL REFERENCES tasks(id),
    criterion_id  INTEGER NOT NULL REFERENCES task_criteria(id),
    revision      INTEGER NOT NULL,
    passed        INTEGER NOT NULL CHECK (passed IN (0, 1)),
    note          TEXT NOT NULL,
    reviewer_id   INTEGER REFERENCES members(id),
    created_at    REAL NOT NULL
);
CREATE INDEX task_reviews_task ON task_reviews(task_id, criterion_id, id);

-- What a command really did, recorded by the runtime that ran it (never claimed by a model).
CREATE TABLE command_results (
    id             INTEGER PRIMARY KEY,
    project_id     INTEGER NOT NULL REFERENCES projects(id),
    member_id      INTEGER REFERENCES members(id),
    turn_id        INTEGER REFERENCES turns(id),
    command        TEXT NOT NULL,
    exit_code      INTEGER NOT NULL,
    duration_ms    INTEGER NOT NULL,
    output_bytes   INTEGER NOT NULL,
    output_sha256  TEXT NOT NULL,
    output_tail    TEXT NOT NULL,
    created_at     REAL NOT NULL
);

-- Evidence of a submission (review_id NULL) or of one criterion verdict (review_id set).
-- artifact: a file in the workspace (size and sha256 taken by the server)
-- command: a command_results row   message: a message of the project   note: the summary text
CREATE TABLE evidence (
    id             INTEGER PRIMARY KEY,
    project_id     INTEGER NOT NULL REFERENCES projects(id),
    task_id        INTEGER NOT NULL REFERENCES tasks(id),
    revision       INTEGER NOT NULL,
    review_id      INTEGER REFERENCES task_reviews(id),
    kind           TEXT NOT NULL CHECK (kind IN ('artifact', 'command', 'message', 'note')),
    path           TEXT,
    real_path      TEXT,
    size           INTEGER,
    sha256         TEXT,
    command_id     INTEGER REFERENCES command_results(id),
    message_id     INTEGER REFERENCES messages(id),
    note           TEXT,
    added_by       INTEGER REFERENCES members(id),
    created_at     REAL NOT NULL,
    CHECK ((kind = 'artifact') = (path IS NOT NULL AND sha256 IS NOT NULL)),
    CHECK ((kind = 'command') = (command_id IS NOT NULL)),
    CHECK ((kind = 'message') = (message_id IS NOT NULL))
);
CREATE INDEX evidence_task ON evidence(task_id, id);

-- Numbered decision records (ADR-0001 …). kind 'requirement' is the project's requirement: a
-- requirement change is a new revision of it.
CREATE TABLE decisions (
    id             INTEGER PRIMARY KEY,
    project_id     INTEGER NOT NULL REFERENCES projects(id),
    number         INTEGER NOT NULL,
    kind           TEXT NOT NULL CHECK (kind IN ('decision', 'requirement')),
    title          TEXT NOT NULL,
    status         TEXT NOT NULL CHECK (status IN ('proposed', 'accepted', 'superseded')),
    revision       INTEGER NOT NULL DEFAULT 1,
    supersedes     INTEGER REFERENCES decisions(id),
    superseded_by  INTEGER REFERENCES decisions(id),
    created_by     INTEGER REFERENCES members(id),
    accepted_by    INTEGER REFERENCES members(id),
    created_at     REAL NOT NULL,
    updated_at     REAL NOT NULL,
    UNIQUE (project_id, number)
);

CREATE TABLE decision_revisions (
    id                 INTEGER PRIMARY KEY,
    project_id         INTEGER NOT NULL REFERENCES projects(id),
    decision_id        INTEGER NOT NULL REFERENCES decisions(id),
    revision           INTEGER NOT NULL,
    context            TEXT NOT NULL,
    decision           TEXT NOT NULL,
    consequences       TEXT NOT NULL,
    original_text      TEXT,
    source_message_id  INTEGER REFERENCES messages(id),
    author_id          INTEGER REFERENCES members(id),
    created_at         REAL NOT NULL,
    UNIQUE (decision_id, revision)
);
CREATE UNIQUE INDEX decision_revisions_source ON decision_revisions(source_message_id)
    WHERE source_message_id IS NOT NULL;

CREATE TABLE decision_tasks (
    project_id   INTEGER NOT NULL REFERENCES projects(id),
    decision_id  INTEGER NOT NULL REFERENCES decisions(id),
    task_id      INTEGER NOT NULL REFERENCES tasks(id),
    PRIMARY KEY (decision_id, task_id)
) WITHOUT ROWID;

-- A requirement change asks each affected task's owner for a receipt. closed is why an unsynced
-- request no longer waits: superseded by a newer revision, or the task was handed off/cancelled.
CREATE TABLE sync_requests (
    id           INTEGER PRIMARY KEY,
    project_id   INTEGER NOT NULL REFERENCES projects(id),
    decision_id  INTEGER NOT NULL REFERENCES decisions(id),
    revision     INTEGER NOT NULL,
    task_id      INTEGER NOT NULL REFERENCES tasks(id),
    owner_id     INTEGER NOT NULL REFERENCES members(id),
    requested_at REAL NOT NULL,
    synced_at    REAL,
    synced_by    INTEGER REFERENCES members(id),
    note         TEXT,
    closed       TEXT,
    UNIQUE (decision_id, revision, task_id)
);
CREATE INDEX sync_requests_task ON sync_requests(task_id, id);

-- Every task transition with its author (the board's history; audit_events keeps the trail).
CREATE TABLE task_events (
    id          INTEGER PRIMARY KEY,
    project_id  INTEGER NOT NULL REFERENCES projects(id),
    task_id     INTEGER NOT NULL REFERENCES tasks(id),
    event       TEXT NOT NULL,
    from_state  TEXT,
    to_state    TEXT NOT NULL,
    revision    INTEGER NOT NULL,
    actor_kind  TEXT NOT NULL CHECK (actor_kind IN ('human', 'agent', 'system')),
    actor_id    INTEGER REFERENCES members(id),
    note        TEXT,
    created_at  REAL NOT NULL
);
CREATE INDEX task_events_task ON task_events(task_id, id);
"""

# Children first: deleting a project's rows in this order never breaks a foreign key.
TASK_TABLES: tuple[str, ...] = (
    "task_events",
    "sync_requests",
    "decision_tasks",
    "decision_revisions",
    "evidence",
    "command_results",
    "task_reviews",
    "task_criteria",
    "task_deps",
    "tasks",
    "plans",
    "decisions",
)
