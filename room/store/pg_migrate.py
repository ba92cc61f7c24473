"""Migrations of a PostgreSQL database (docs/storage.md, "The PostgreSQL schema").

:func:`migrate` applies the :data:`~room.store.schema_pg.PG_MIGRATIONS` that
``schema_migrations`` does not list yet, each in its own transaction with its name, under a
session-level advisory lock: of several processes starting on one database, one migrates and
the others wait, then find nothing left to do. A database that lists a migration this code does
not know is newer than the code: refused before anything changes, as on SQLite.
"""

from __future__ import annotations

import logging
import time

from room.errors import SchemaTooNewError
from room.store.pg import PgConnection
from room.store.schema_pg import PG_MIGRATIONS

log = logging.getLogger(__name__)

# pg_advisory_lock's key for migrations: "room" then "migr" in ASCII (any constant would do;
# it only has to differ from the other advisory locks the server takes).
MIGRATION_LOCK_KEY = 0x726F6F6D_6D696772


def applied_migrations(conn: PgConnection) -> list[str]:
    """The names ``schema_migrations`` lists, oldest first ([] on an empty database)."""
    found = conn.execute("SELECT to_regclass('schema_migrations') IS NOT NULL").fetchone()
    if not found or not found[0]:
        return []
    return [name for (name,) in conn.execute("SELECT name FROM schema_migrations ORDER BY name")]


def migration_status(conn: PgConnection) -> dict[str, list[str]]:
    """What ``schema_migrations`` lists and what this code would still apply (reads only)."""
    applied = applied_migrations(conn)
    known = [migration.name for migration in PG_MIGRATIONS]
    return {
        "applied": applied,
        "pending": [name for name in known if name not in applied],
        "unknown": [name for name in applied if name not in known],
    }


def migrate(conn: PgConnection, now: float | None = None) -> list[str]:
    """Apply the migrations this database lacks; returns the names applied (in order)."""
    known = [migration.name for migration in PG_MIGRATIONS]
    conn.execute("SELECT pg_advisory_lock(?)", (MIGRATION_LOCK_KEY,))
    try:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations ("
            " name text PRIMARY KEY, applied_at double precision NOT NULL)"
        )
        done = applied_migrations(conn)
        unknown = [name for name in done if name not in known]
        if unknown:
            raise SchemaTooNewError(
                f"the PostgreSQL database has migrations this Project Room does not know "
                f"({', '.join(unknown)}); upgrade Project Room (the database was not changed)",
                found=done,
                supported=known,
            )
        applied = []
        for migration in PG_MIGRATIONS:
            if migration.name in done:
                continue
            raw = conn.raw
            with raw.transaction():
                # The migration's text as written for PostgreSQL: several statements, no
                # parameters (psycopg sends them in one simple query).
                raw.execute(migration.sql.encode())
                raw.execute(
                    "INSERT INTO schema_migrations (name, applied_at) VALUES (%s, %s)",
                    (migration.name, time.time() if now is None else now),
                )
            applied.append(migration.name)
            log.info("applied PostgreSQL migration %s", migration.name)
        return applied
    finally:
        conn.execute("SELECT pg_advisory_unlock(?)", (MIGRATION_LOCK_KEY,))
