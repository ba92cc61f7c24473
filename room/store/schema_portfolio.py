"""Migration 0015_portfolio: timelines, milestones, dependencies and the risk log
(docs/portfolio.md, "The data model").

* ``projects.state_reason``: the reason given with pause, archive, complete or abandon (shown
  in the banner, STATUS.md and the index); cleared when the project leaves that state.
* ``project_timelines``: one row per project with a timeline or an index summary: the one-line
  ``summary`` (verb + object + purpose), ``start_date`` / ``end_date`` (``YYYY-MM-DD``, the
  estimated end), estimated and actual hours (actual written when the project is marked
  complete).
* ``milestones``: name, date, status (done / in_progress / pending), in the owner's order.
* ``milestone_counts``: the number of milestones after each change that altered it (the scope
  creep rule reads the history).
* ``project_dependencies``: what a project depends on — another project (``target_project_id``)
  or a named skill or external project (``name``, normalised: trimmed, case-folded).
* ``risk_log``: one row per (project, rule) finding while it stands; ``resolved_at`` set when a
  scan no longer finds it. ``scans`` counts the scans that saw it, ``noticed`` whether its 🔴
  notice was posted.
* ``tasks.est_start`` / ``tasks.est_end``: a task's estimated dates.

The migration runner splits on semicolons: none inside strings or comments here.
"""

from __future__ import annotations

PORTFOLIO = """
ALTER TABLE projects ADD COLUMN state_reason TEXT;
ALTER TABLE tasks ADD COLUMN est_start TEXT;
ALTER TABLE tasks ADD COLUMN est_end TEXT;

CREATE TABLE project_timelines (
    project_id       INTEGER PRIMARY KEY REFERENCES projects(id),
    summary          TEXT NOT NULL DEFAULT '',
    start_date       TEXT,
    end_date         TEXT,
    hours_estimated  REAL,
    hours_actual     REAL,
    updated_at       REAL NOT NULL,
    updated_by       INTEGER REFERENCES members(id)
);

CREATE TABLE milestones (
    id          INTEGER PRIMARY KEY,
    project_id  INTEGER NOT NULL REFERENCES projects(id),
    position    INTEGER NOT NULL,
    name        TEXT NOT NULL,
    due         TEXT NOT NULL,
    status      TEXT NOT NULL CHECK (status IN ('done', 'in_progress', 'pending')),
    updated_at  REAL NOT NULL
);
CREATE INDEX milestones_project ON milestones(project_id, position);

CREATE TABLE milestone_counts (
    id          INTEGER PRIMARY KEY,
    project_id  INTEGER NOT NULL REFERENCES projects(id),
    count       INTEGER NOT NULL,
    at          REAL NOT NULL
);
CREATE INDEX milestone_counts_project ON milestone_counts(project_id, id);

CREATE TABLE project_dependencies (
    id                 INTEGER PRIMARY KEY,
    project_id         INTEGER NOT NULL REFERENCES projects(id),
    kind               TEXT NOT NULL CHECK (kind IN ('project', 'skill', 'external')),
    target_project_id  INTEGER REFERENCES projects(id),
    name               TEXT NOT NULL DEFAULT '',
    created_at         REAL NOT NULL,
    CHECK ((kind = 'project') = (target_project_id IS NOT NULL))
);
CREATE UNIQUE INDEX project_dependencies_unique
    ON project_dependencies(project_id, kind, IFNULL(target_project_id, 0), name);

CREATE TABLE risk_log (
    id           INTEGER PRIMARY KEY,
    project_id   INTEGER NOT NULL REFERENCES projects(id),
    rule         TEXT NOT NULL,
    level        TEXT NOT NULL CHECK (level IN ('red', 'yellow')),
    detail       TEXT NOT NULL,
    suggestion   TEXT NOT NULL,
    first_at     REAL NOT NULL,
    last_at      REAL NOT NULL,
    resolved_at  REAL,
    scans        INTEGER NOT NULL DEFAULT 1,
    noticed      INTEGER NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX risk_log_open ON risk_log(project_id, rule) WHERE resolved_at IS NULL;
CREATE INDEX risk_log_project ON risk_log(project_id, id);
"""
