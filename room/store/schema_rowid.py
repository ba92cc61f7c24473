"""Migration 0007: the two link tables rebuilt with their key columns first.

SQLite 3.40's ``PRAGMA quick_check`` and ``integrity_check`` misread a WITHOUT ROWID table whose
NOT NULL non-key column stands before a key column: on a healthy row they report
``NULL value in task_deps.project_id``. ``room doctor`` then called a good database broken, and
the backup check before a migration would have refused to migrate. ``task_deps`` and
``decision_tasks`` had ``project_id`` (not part of the key) first; the same columns in the order
key, key, ``project_id`` check clean on every SQLite. The rows are copied unchanged; the trash
snapshot digest names these tables' columns in their old order, so a snapshot taken before this
migration still verifies. The migration runner splits on ``;``: none inside comments here.
"""

from __future__ import annotations

LINK_TABLES_KEY_FIRST = """
CREATE TABLE task_deps_v2 (
    task_id        INTEGER NOT NULL REFERENCES tasks(id),
    depends_on_id  INTEGER NOT NULL REFERENCES tasks(id),
    project_id     INTEGER NOT NULL REFERENCES projects(id),
    PRIMARY KEY (task_id, depends_on_id)
) WITHOUT ROWID;
INSERT INTO task_deps_v2 (task_id, depends_on_id, project_id)
    SELECT task_id, depends_on_id, project_id FROM task_deps;
DROP TABLE task_deps;
ALTER TABLE task_deps_v2 RENAME TO task_deps;
CREATE INDEX task_deps_reverse ON task_deps(depends_on_id);

CREATE TABLE decision_tasks_v2 (
    decision_id  INTEGER NOT NULL REFERENCES decisions(id),
    task_id      INTEGER NOT NULL REFERENCES tasks(id),
    project_id   INTEGER NOT NULL REFERENCES projects(id),
    PRIMARY KEY (decision_id, task_id)
) WITHOUT ROWID;
INSERT INTO decision_tasks_v2 (decision_id, task_id, project_id)
    SELECT decision_id, task_id, project_id FROM decision_tasks;
DROP TABLE decision_tasks;
ALTER TABLE decision_tasks_v2 RENAME TO decision_tasks
"""
