"""Migration 0006: task attempts, each in its own git worktree (docs/tasks.md, "Attempts and
worktrees").

A row exists only for a worktree that was made (the worktree is created first, then recorded),
so a row never claims a folder or branch that does not exist. ``state``: ``open`` while the
attempt is being worked on, ``merged`` once a person merged its branch into the base, ``kept``
when its member left or the task was handed off or cancelled (the worktree and the branch stay
on disk: nothing is ever deleted by the server). The migration runner splits on ``;``: no
semicolons inside strings or comments here.
"""

from __future__ import annotations

TASK_ATTEMPTS = """
CREATE TABLE task_attempts (
    id          INTEGER PRIMARY KEY,
    project_id  INTEGER NOT NULL REFERENCES projects(id),
    task_id     INTEGER NOT NULL REFERENCES tasks(id),
    attempt     INTEGER NOT NULL CHECK (attempt >= 1),
    member_id   INTEGER REFERENCES members(id),
    branch      TEXT NOT NULL,
    path        TEXT NOT NULL,
    base        TEXT NOT NULL,
    fork_point  TEXT NOT NULL,
    state       TEXT NOT NULL DEFAULT 'open' CHECK (state IN ('open', 'merged', 'kept')),
    created_at  REAL NOT NULL,
    ended_at    REAL,
    UNIQUE (task_id, attempt)
);
CREATE INDEX task_attempts_project ON task_attempts(project_id, state);
CREATE INDEX task_attempts_member ON task_attempts(member_id, state)
"""

# Purged before the task tables (it references tasks and members).
ATTEMPT_TABLES: tuple[str, ...] = ("task_attempts",)
