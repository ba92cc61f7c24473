"""SQL of project memory records (docs/memory.md): entries, their revisions, the version counter.

Plain functions over a connection; :mod:`room.actions.memory` decides, this module only reads
and writes. An entry is a dict ``{id, project_id, kind, rev, body, author_id, updated_by,
turn_id, archived, created_at, updated_at, archived_at}`` with times as UTC epoch seconds
(floats, so callers can compare them); :func:`room.actions.memory.entry_wire` makes the wire
object. Decisions are read through :mod:`room.store.decisions`.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Callable
from typing import Any

from room.store.dialect import Connection, dialect_for
from room.store.schema_memory import MEMORY_TABLES

_COLUMNS = (
    "id, project_id, kind, rev, body_json, author_id, updated_by, turn_id, archived,"
    " created_at, updated_at, archived_at"
)


def _entry(row: sqlite3.Row | tuple[Any, ...]) -> dict[str, Any]:
    return {
        "id": int(row[0]),
        "project_id": int(row[1]),
        "kind": str(row[2]),
        "rev": int(row[3]),
        "body": json.loads(row[4]),
        "author_id": row[5],
        "updated_by": row[6],
        "turn_id": row[7],
        "archived": bool(row[8]),
        "created_at": float(row[9]),
        "updated_at": float(row[10]),
        "archived_at": row[11],
    }


def _json(body: dict[str, Any]) -> str:
    return json.dumps(body, ensure_ascii=False)


# -- reads the other parts call ------------------------------------------------------------------


def memory_version(conn: Connection, project_id: int) -> int:
    """The project's memory version: 0 before any write, then one more for every write."""
    row = conn.execute(
        "SELECT version FROM memory_versions WHERE project_id = :p", {"p": project_id}
    ).fetchone()
    return int(row[0]) if row else 0


def changed_since(
    conn: Connection, project_id: int, since: float, *, limit: int = 200
) -> list[dict[str, Any]]:
    """Entries written, edited or archived after ``since`` (live and archived ones), the
    newest change first, at most ``limit``."""
    rows = [
        _entry(r)
        for r in conn.execute(
            f"SELECT {_COLUMNS} FROM memory_entries WHERE project_id = :p"
            " AND (updated_at > :s OR archived_at > :s)",
            {"p": project_id, "s": since},
        )
    ]
    rows.sort(key=lambda e: -max(e["updated_at"], e["archived_at"] or 0.0))
    return rows[:limit]


def memory_changed_at(conn: Connection, project_id: int) -> float | None:
    """When the project's memory last changed (its version's time); None before any write."""
    row = conn.execute(
        "SELECT updated_at FROM memory_versions WHERE project_id = :p", {"p": project_id}
    ).fetchone()
    return float(row[0]) if row else None


def summary(conn: Connection, project_id: int) -> dict[str, Any] | None:
    """The project summary entry (``body.sections``, ``updated_at``), or None if never written."""
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM memory_entries WHERE project_id = :p AND kind = 'summary'",
        {"p": project_id},
    ).fetchone()
    return _entry(row) if row else None


def entries(
    conn: Connection,
    project_id: int,
    kind: str,
    *,
    archived: bool = False,
    limit: int | None = None,
    newest_first: bool = True,
    before: int | None = None,
) -> list[dict[str, Any]]:
    """Entries of one kind, live ones (or with ``archived=True`` the archived ones), newest
    first by default; ``before`` an entry id to page back from."""
    order = "DESC" if newest_first else "ASC"
    sql = (
        f"SELECT {_COLUMNS} FROM memory_entries WHERE project_id = :p AND kind = :k"
        " AND archived = :a" + (" AND id < :before" if before is not None else "")
        + f" ORDER BY id {order}" + (" LIMIT :limit" if limit is not None else "")
    )  # fmt: skip
    params = {"p": project_id, "k": kind, "a": int(archived), "before": before, "limit": limit}
    return [_entry(r) for r in conn.execute(sql, params)]


def entries_matching(
    conn: Connection,
    project_id: int,
    kind: str,
    match: Callable[[dict[str, Any]], bool],
    *,
    archived: bool = False,
    limit: int,
    before: int | None = None,
) -> list[dict[str, Any]]:
    """Up to ``limit`` entries of one kind for which ``match`` holds, newest first, read in
    batches from ``before`` back (a filter over the JSON bodies, the same on every store)."""
    out: list[dict[str, Any]] = []
    while len(out) < limit:
        batch = entries(conn, project_id, kind, archived=archived, before=before, limit=200)
        out += [e for e in batch if match(e)]
        if len(batch) < 200:
            break
        before = batch[-1]["id"]
    return out[:limit]


def entry(conn: Connection, entry_id: int) -> dict[str, Any] | None:
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM memory_entries WHERE id = :id", {"id": entry_id}
    ).fetchone()
    return _entry(row) if row else None


def sessions_since(conn: Connection, project_id: int, since_ts: float) -> int:
    """How many session-log entries (archived ones too) were written after ``since_ts``."""
    row = conn.execute(
        "SELECT count(*) FROM memory_entries WHERE project_id = :p AND kind = 'session'"
        " AND created_at > :t",
        {"p": project_id, "t": since_ts},
    ).fetchone()
    return int(row[0])


def live_counts(conn: Connection, project_id: int) -> dict[str, int]:
    """Live (not archived) entries per kind, only the kinds that have some."""
    return {
        str(r[0]): int(r[1])
        for r in conn.execute(
            "SELECT kind, count(*) FROM memory_entries WHERE project_id = :p AND archived = 0"
            " GROUP BY kind",
            {"p": project_id},
        )
    }


def archived_counts(conn: Connection, project_id: int) -> dict[str, int]:
    """Archived entries per kind (decisions included), only the kinds that have some."""
    counts = {
        str(r[0]): int(r[1])
        for r in conn.execute(
            "SELECT kind, count(*) FROM memory_entries WHERE project_id = :p AND archived = 1"
            " GROUP BY kind",
            {"p": project_id},
        )
    }
    decisions = conn.execute(
        "SELECT count(*) FROM decisions WHERE project_id = :p AND archived = 1", {"p": project_id}
    ).fetchone()[0]
    if decisions:
        counts["decision"] = int(decisions)
    return counts


def revisions(conn: Connection, entry_id: int) -> list[dict[str, Any]]:
    """Every revision of an entry, oldest first: ``{rev, body, author_id, at}``."""
    return [
        {"rev": int(r[0]), "body": json.loads(r[1]), "author_id": r[2], "at": float(r[3])}
        for r in conn.execute(
            "SELECT rev, body_json, author_id, at FROM memory_revisions WHERE entry_id = :e"
            " ORDER BY rev",
            {"e": entry_id},
        )
    ]


def reference_by_key(conn: Connection, project_id: int, key: str) -> dict[str, Any] | None:
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM memory_entries WHERE project_id = :p AND kind = 'reference'"
        " AND ref_key = :k",
        {"p": project_id, "k": key},
    ).fetchone()
    return _entry(row) if row else None


def live_sizes(conn: Connection, project_id: int, kind: str) -> list[tuple[int, int]]:
    """(id, size) of the live entries of a kind, oldest first (what the caps look at)."""
    return [
        (int(r[0]), int(r[1]))
        for r in conn.execute(
            "SELECT id, size FROM memory_entries WHERE project_id = :p AND kind = :k"
            " AND archived = 0 ORDER BY id",
            {"p": project_id, "k": kind},
        )
    ]


# The texts of a decision whose bytes count toward the decisions cap.
_DECISION_TEXTS = (
    "d.title", "r.context", "r.decision", "r.consequences", "r.constraints", "r.alternatives_json",
)  # fmt: skip


def decision_sizes(conn: Connection, project_id: int) -> list[tuple[int, int]]:
    """(id, bytes of the current revision's text) of the live decisions (not the requirement),
    oldest first: what the decisions cap looks at."""
    size = " + ".join(map(dialect_for(conn).byte_length, _DECISION_TEXTS))
    return [
        (int(r[0]), int(r[1]))
        for r in conn.execute(
            f"SELECT d.id, {size}"
            " FROM decisions d JOIN decision_revisions r ON r.decision_id = d.id"
            " AND r.revision = d.revision WHERE d.project_id = :p AND d.kind = 'decision'"
            " AND d.archived = 0 ORDER BY d.number",
            {"p": project_id},
        )
    ]


# -- writes ---------------------------------------------------------------------------------------


def bump_version(conn: Connection, project_id: int, now: float) -> int:
    """One more memory version for the project; returns it."""
    row = conn.execute(
        "INSERT INTO memory_versions (project_id, version, updated_at) VALUES (:p, 1, :now)"
        " ON CONFLICT (project_id) DO UPDATE SET version = memory_versions.version + 1,"
        " updated_at = :now"
        " RETURNING version",
        {"p": project_id, "now": now},
    ).fetchone()
    return int(row[0])


def insert_entry(
    conn: Connection,
    *,
    project_id: int,
    kind: str,
    body: dict[str, Any],
    size: int,
    author_id: int | None,
    now: float,
    turn_id: int | None = None,
    ref_key: str | None = None,
) -> int:
    """A new entry at rev 1, with its first revision row; returns its id."""
    body_json = _json(body)
    entry_id = int(
        conn.execute(
            "INSERT INTO memory_entries (project_id, kind, rev, body_json, size, author_id,"
            " updated_by, turn_id, ref_key, created_at, updated_at) VALUES (:p, :k, 1, :b, :s,"
            " :a, :a, :t, :r, :now, :now) RETURNING id",
            {"p": project_id, "k": kind, "b": body_json, "s": size, "a": author_id,
             "t": turn_id, "r": ref_key, "now": now},
        ).fetchone()[0]
    )  # fmt: skip
    _revision(conn, project_id, entry_id, 1, body_json, author_id, now)
    return entry_id


def update_entry(
    conn: Connection,
    *,
    entry_id: int,
    project_id: int,
    rev: int,
    body: dict[str, Any],
    size: int,
    author_id: int | None,
    now: float,
    ref_key: str | None = None,
) -> None:
    """Make ``body`` the entry's revision ``rev`` (the caller checked the previous one)."""
    body_json = _json(body)
    conn.execute(
        "UPDATE memory_entries SET rev = :rev, body_json = :b, size = :s, updated_by = :a,"
        " updated_at = :now, ref_key = coalesce(:r, ref_key) WHERE id = :id",
        {"rev": rev, "b": body_json, "s": size, "a": author_id, "now": now, "r": ref_key,
         "id": entry_id},
    )  # fmt: skip
    _revision(conn, project_id, entry_id, rev, body_json, author_id, now)


def _revision(
    conn: Connection,
    project_id: int,
    entry_id: int,
    rev: int,
    body_json: str,
    author_id: int | None,
    now: float,
) -> None:
    conn.execute(
        "INSERT INTO memory_revisions (project_id, entry_id, rev, body_json, author_id, at)"
        " VALUES (:p, :e, :rev, :b, :a, :now)",
        {"p": project_id, "e": entry_id, "rev": rev, "b": body_json, "a": author_id, "now": now},
    )


def archive(conn: Connection, entry_ids: list[int], now: float) -> None:
    conn.executemany(
        "UPDATE memory_entries SET archived = 1, archived_at = ? WHERE id = ? AND archived = 0",
        [(now, i) for i in entry_ids],
    )


def restore(conn: Connection, entry_id: int) -> None:
    conn.execute(
        "UPDATE memory_entries SET archived = 0, archived_at = NULL WHERE id = :id",
        {"id": entry_id},
    )


def archive_decisions(conn: Connection, decision_ids: list[int]) -> None:
    conn.executemany(
        "UPDATE decisions SET archived = 1 WHERE id = ? AND archived = 0",
        [(i,) for i in decision_ids],
    )


def digest_rows(conn: Connection, project_id: int) -> dict[str, dict[str, Any]]:
    """Row count and SHA-256 of the project's memory rows, for the trash snapshot. A table with
    no rows is left out, so a snapshot written before memory existed still matches."""
    out: dict[str, dict[str, Any]] = {}
    for table, sql in (
        ("memory_entries", "SELECT id, kind, rev, body_json, archived FROM memory_entries"
                           " WHERE project_id = :p ORDER BY id"),
        ("memory_revisions", "SELECT entry_id, rev, body_json, author_id FROM memory_revisions"
                             " WHERE project_id = :p ORDER BY id"),
    ):  # fmt: skip
        digest = hashlib.sha256()
        count = 0
        for row in conn.execute(sql, {"p": project_id}):
            digest.update(json.dumps(list(row), ensure_ascii=False).encode())
            digest.update(b"\n")
            count += 1
        if count:
            out[table] = {"count": count, "sha256": digest.hexdigest()}
    return out


def clear_entries(conn: Connection, project_id: int) -> list[tuple[int, str]]:
    """Delete every memory entry of a project, live and archived, with their revisions (the
    version counter stays, so it keeps counting up); returns the ``(id, kind)`` deleted."""
    gone = [
        (int(r[0]), str(r[1]))
        for r in conn.execute(
            "SELECT id, kind FROM memory_entries WHERE project_id = :p ORDER BY id",
            {"p": project_id},
        )
    ]
    conn.execute("DELETE FROM memory_revisions WHERE project_id = :p", {"p": project_id})
    conn.execute("DELETE FROM memory_entries WHERE project_id = :p", {"p": project_id})
    return gone


def delete_project(conn: Connection, project_id: int) -> dict[str, int]:
    """Delete every memory row of a project (the purge); returns the counts per table."""
    return {
        table: conn.execute(
            f"DELETE FROM {table} WHERE project_id = :p", {"p": project_id}
        ).rowcount
        for table in MEMORY_TABLES
    }
