"""The full-text indexes (FTS5, BM25) over messages and memory records; docs/search.md.

Messages are indexed in their own database file, ``search.sqlite`` beside the main one
(:func:`index_path`), by the background indexer (:mod:`room.store.indexer`): ``message_fts`` holds
the normalised text (:func:`room.rules.searchtext.index_texts`) of every live message up to the
indexer's watermark, under the message's id as its rowid, so the send path writes nothing for it.
Edits, deletes and purges queue the message in ``search_changes`` (:func:`message_changed`) in their
own transaction; the indexer re-reads those messages. Readers attach the file as ``ix``
(:func:`attach_index`).

Memory records stay in the main file, written inside the caller's transaction: ``search_fts``
holds each record under the negated id of its ``search_records`` row (which keeps the record's
project, kind, author, time and original text for filters and snippets), written by
:func:`index_record` (called by the memory store); a project's rows are removed by its purge
(:func:`purge_project`).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from room.errors import BadRequestError
from room.rules.entities import iso
from room.rules.searchtext import Query, index_texts, parse_query, snippet_html
from room.rules.searchtokens import tsquery
from room.store import search_pg
from room.store.db import BulkInsert
from room.store.dialect import POSTGRESQL, Connection, dialect_for
from room.store.migrate import attach

FTS_ROWS = BulkInsert("search_fts", ("rowid", "body", "uni"), fts=True)
MESSAGE_ROWS = BulkInsert("message_fts", ("rowid", "body", "uni"))

INDEX_FILE = "search.sqlite"
INDEX_VERSION = 2  # of the index file's schema: another version is built afresh
INDEX_SCHEMA = (
    "CREATE VIRTUAL TABLE IF NOT EXISTS {db}.message_fts USING fts5(body, uni,"
    " tokenize = 'unicode61 remove_diacritics 2')",
    # How far the indexer got: every message with an id up to ``messages_done`` and every
    # change up to ``changes_done`` is reflected, in the same transaction as the rows;
    # ``done_at`` is that message's created_at (another database under the file: rebuilt).
    "CREATE TABLE IF NOT EXISTS {db}.index_state (id INTEGER PRIMARY KEY CHECK (id = 1),"
    " messages_done INTEGER NOT NULL, changes_done INTEGER NOT NULL, done_at REAL)",
    "INSERT OR IGNORE INTO {db}.index_state (id, messages_done, changes_done) VALUES (1, 0, 0)",
)

# What a result's ``kind`` may be: a message, or a memory record of one of these kinds.
RECORD_KINDS = ("summary", "fact", "convention", "decision", "progress", "session", "reference")
KINDS = ("message", *RECORD_KINDS)
DEFAULT_LIMIT = 20
MAX_LIMIT = 100
# Matches ranked per query, newest first: a word in a large share of a big project costs this
# many BM25 scores, not one per match (``capped`` says when more matched; docs/search.md).
RANK_WINDOW = 1_000


# -- messages ---------------------------------------------------------------------------------


def index_path(db_path: Path) -> Path:
    """The messages' index file of the database at ``db_path``."""
    return db_path.with_name(INDEX_FILE)


def create_index(conn: sqlite3.Connection, db: str = "main") -> None:
    """The index file's tables, if missing (``db``: its schema name on ``conn``)."""
    for statement in INDEX_SCHEMA:
        conn.execute(statement.format(db=db))


def attach_index(conn: sqlite3.Connection, db_path: Path) -> None:
    """Attach the messages' index as ``ix`` (made by :func:`room.store.indexer.open_index`):
    what :func:`search` reads. Outside any transaction (the server's readers attach it as
    they open: ``Database(attach=...)``)."""
    attach(conn, "ix", index_path(db_path))


def message_changed(conn: Connection, message_id: int) -> None:
    """An edit, a delete: the indexer re-reads the message (the earlier versions, kept in the
    edit history, are never findable; until it has, a search leaves the message out)."""
    conn.execute("INSERT INTO search_changes (message_id) VALUES (:id)", {"id": message_id})


# -- memory records ----------------------------------------------------------------------------


def index_record(
    conn: Connection,
    *,
    project_id: int,
    record_id: int,
    kind: str,
    author_id: int | None,
    at: float,
    text: str,
) -> None:
    """Index a memory record's current text (insert, or replace what (kind, record_id) had).

    Called by the memory store inside the transaction of the record's write; archived records
    stay indexed (they remain searchable). ``text`` is what a search should find and show."""
    row = conn.execute(
        "INSERT INTO search_records (project_id, kind, record_id, author_id, at, body)"
        " VALUES (:p, :kind, :r, :a, :at, :body)"
        " ON CONFLICT (kind, record_id) DO UPDATE SET project_id = excluded.project_id,"
        " author_id = excluded.author_id, at = excluded.at, body = excluded.body"
        " RETURNING id",
        {"p": project_id, "kind": kind, "r": record_id, "a": author_id, "at": at, "body": text},
    ).fetchone()
    rowid = -int(row[0])
    if dialect_for(conn) is POSTGRESQL:
        search_pg.write_record(conn, rowid, text)
        return
    conn.execute("DELETE FROM search_fts WHERE rowid = :id", {"id": rowid})
    FTS_ROWS.write(conn, [(rowid, *index_texts(text))], None)


def unindex_record(conn: Connection, record_id: int, *, kind: str | None = None) -> None:
    """Remove a record from the index. Without ``kind``, every kind's record of that id (ids
    of one records table are unique; pass ``kind`` when another table's ids may collide)."""
    where = "record_id = :r" + ("" if kind is None else " AND kind = :kind")
    params = {"r": record_id, "kind": kind}
    conn.execute(
        f"DELETE FROM search_fts WHERE rowid IN (SELECT -id FROM search_records WHERE {where})",
        params,
    )
    conn.execute(f"DELETE FROM search_records WHERE {where}", params)


# -- projects ----------------------------------------------------------------------------------


def purge_project(conn: Connection, project_id: int) -> dict[str, int]:
    """Remove a project's records from the index, and queue its messages for the indexer to
    remove (before the purge deletes them; searches never return them: they join the live
    messages)."""
    messages = conn.execute(
        "INSERT INTO search_changes (message_id) SELECT id FROM messages WHERE project_id = :p",
        {"p": project_id},
    ).rowcount
    conn.execute(
        "DELETE FROM search_fts WHERE rowid IN"
        " (SELECT -id FROM search_records WHERE project_id = :p)",
        {"p": project_id},
    )
    records = conn.execute(
        "DELETE FROM search_records WHERE project_id = :p", {"p": project_id}
    ).rowcount
    return {"search_messages": messages, "search_records": records}


# -- queries -----------------------------------------------------------------------------------


def search(
    conn: Connection,
    project_id: int,
    q: str,
    *,
    kinds: list[str] | tuple[str, ...] | None = None,
    author_id: int | None = None,
    since: float | None = None,
    until: float | None = None,
    limit: int = DEFAULT_LIMIT,
    has_file: bool = False,
    mentioning: int | None = None,
) -> dict[str, Any]:
    """Search one project's live messages and memory records (archived ones included).

    Returns ``{"query", "results", "capped"}``, best first by BM25 (``rank``: higher is better)
    among the newest ``RANK_WINDOW`` matches of each of messages and records (``capped`` when more
    matched), each result ``{"kind", "id", "seq"/"message_id" or "record_id", "snippet_html",
    "author", "at", "rank"}`` (docs/search.md). ``q`` is a person's query
    (:func:`room.rules.searchtext.parse_query`: :class:`~room.errors.BadQueryError` when there is
    nothing to look for); ``kinds`` limits the kinds (unknown ones are ``unknown_kind``),
    ``author_id`` the author, ``since``/``until`` the time (epoch seconds, inclusive), ``limit`` is
    clamped to 1–``MAX_LIMIT``. ``has_file`` keeps messages with an attachment and
    ``mentioning`` those mentioning that member (the ``has:file`` and ``is:mention`` operators,
    :mod:`room.rules.searchquery`); either leaves memory records out.

    On PostgreSQL (:mod:`room.store.search_pg`) the same results are found; ``rank`` is
    ``ts_rank`` there, so their order may differ (docs/storage.md).
    """
    query = parse_query(q)
    wanted = _kinds(kinds)
    if has_file or mentioning is not None:
        wanted = tuple(k for k in wanted if k == "message")
    limit = max(1, min(int(limit), MAX_LIMIT))
    params: dict[str, Any] = {
        "q": tsquery(query) if dialect_for(conn) is POSTGRESQL else query.fts(),
        "p": project_id,
        "a": author_id,
        "since": since,
        "until": until,
        "limit": limit,
        "window": RANK_WINDOW,
    }
    found: list[dict[str, Any]] = []
    capped = False
    if "message" in wanted:
        rows, capped = _messages(conn, params | {"file": has_file, "me": mentioning}, query)
        found += rows
    records = [k for k in wanted if k != "message"]
    if records:
        rows, more = _records(conn, params, records)
        found += rows
        capped = capped or more
    found.sort(key=lambda r: (-r["rank"], -r["_at"]))
    found = found[:limit]
    authors = _authors(conn, {r["_author"] for r in found if r["_author"] is not None})
    results = []
    for r in found:
        r["author"] = authors.get(r.pop("_author"))
        r["at"] = iso(r.pop("_at"))
        r["snippet_html"] = snippet_html(r.pop("_body"), query)
        results.append(r)
    return {"query": q, "results": results, "capped": capped}


def _kinds(kinds: list[str] | tuple[str, ...] | None) -> tuple[str, ...]:
    if not kinds:
        return KINDS
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        raise BadRequestError(
            f"unknown kind: {', '.join(unknown)} (known: {', '.join(KINDS)})",
            code="unknown_kind",
            kinds=unknown,
        )
    return tuple(k for k in KINDS if k in kinds)


_FILTERS = (
    " AND (:a IS NULL OR {author} = :a)"
    " AND (:since IS NULL OR {at} >= :since) AND (:until IS NULL OR {at} <= :until)"
)


# has:file and is:mention (:file, :me), typed for both stores; shared with
# room.store.search_filters.
MESSAGE_FILTERS = search_pg.MESSAGE_FILTERS


def _messages(
    conn: Connection, params: dict[str, Any], query: Query
) -> tuple[list[dict[str, Any]], bool]:
    if dialect_for(conn) is POSTGRESQL:  # ranked and read in one round trip (or two)
        read = search_pg.best_messages(conn, params, query)
        rows, best = [r[:-1] for r in read], [(r[0], r[-2], r[-1]) for r in read]
    else:
        best = _best_messages(conn, params)
        rows = _read(conn, "SELECT id, seq, kind, author_id, created_at, body FROM messages", best)
    found = [
        {
            "kind": "message",
            "id": int(r[0]),
            "message_id": int(r[0]),
            "seq": int(r[1]),
            "message_kind": r[2],
            "_body": str(r[5]),
            "rank": _rank(conn, r[-1]),
            "_author": r[3],
            "_at": float(r[4]),
        }
        for r in rows
    ]
    return found, _capped(best, params["window"])


def _rank(conn: Connection, score: Any) -> float:
    """Higher is better: minus FTS5's BM25 rank, or PostgreSQL's ``ts_rank`` as it is."""
    return float(score) if dialect_for(conn) is POSTGRESQL else -float(score)


def _best_messages(conn: Connection, params: dict[str, Any]) -> list[Any]:
    # The newest RANK_WINDOW matches are ranked (FTS5 walks the doclist backwards by rowid,
    # which is the message id; BM25 is computed only for rows past the project and filters),
    # the best ``limit`` of them are picked inside SQLite with the window's size (for
    # ``capped``), and only they are read in full: no per-match work in Python.
    return conn.execute(
        "SELECT id, score, count(*) OVER () FROM (SELECT m.id AS id, f.rank AS score"
        " FROM ix.message_fts AS f JOIN messages m ON m.id = f.rowid"
        " WHERE f.message_fts MATCH :q AND m.project_id = :p AND m.deleted_at IS NULL"
        + _FILTERS.format(author="m.author_id", at="m.created_at")
        + MESSAGE_FILTERS
        + _pending_changes(conn, params)
        + " ORDER BY f.rowid DESC LIMIT :window) ORDER BY score, id DESC LIMIT :limit",
        params,
    ).fetchall()


def _pending_changes(conn: Connection, params: dict[str, Any]) -> str:
    """The condition leaving out messages edited since the indexer last looked (their indexed
    text may be an earlier version), or nothing when it is up to date (the usual case)."""
    done = conn.execute("SELECT changes_done FROM ix.index_state").fetchone()[0]
    last = conn.execute("SELECT coalesce(max(seq), 0) FROM search_changes").fetchone()[0]
    if last <= done:
        return ""
    params["done"] = done
    return " AND m.id NOT IN (SELECT message_id FROM search_changes WHERE seq > :done)"


def _records(
    conn: Connection, params: dict[str, Any], kinds: list[str]
) -> tuple[list[dict[str, Any]], bool]:
    if dialect_for(conn) is POSTGRESQL:  # ranked and read in one round trip
        read = search_pg.best_records(conn, params, kinds)
        rows, best = [r[:-1] for r in read], [(r[0], r[-2], r[-1]) for r in read]
    else:
        best = _best_records(conn, params, kinds)
        rows = _read(
            conn, "SELECT id, kind, record_id, author_id, at, body FROM search_records", best
        )
    found = [
        {
            "kind": r[1],
            "id": int(r[2]),
            "record_id": int(r[2]),
            "_body": str(r[5]),
            "rank": _rank(conn, r[-1]),
            "_author": r[3],
            "_at": float(r[4]),
        }
        for r in rows
    ]
    return found, _capped(best, params["window"])


def _best_records(conn: Connection, params: dict[str, Any], kinds: list[str]) -> list[Any]:
    marks = ", ".join(f":k{i}" for i in range(len(kinds)))
    # A record's rowid is minus its search_records id: ascending rowid is newest first.
    return conn.execute(
        "SELECT id, score, count(*) OVER () FROM (SELECT r.id AS id, search_fts.rank AS score,"
        " r.at AS at FROM search_fts JOIN search_records r"
        " ON r.id = -search_fts.rowid WHERE search_fts MATCH :q AND search_fts.rowid < 0"
        f" AND r.project_id = :p AND r.kind IN ({marks})"
        + _FILTERS.format(author="r.author_id", at="r.at")
        + " ORDER BY search_fts.rowid LIMIT :window) ORDER BY score, at DESC LIMIT :limit",
        params | {f"k{i}": k for i, k in enumerate(kinds)},
    ).fetchall()


def _capped(best: list[Any], window: int) -> bool:
    """Whether the ranked window was full (more may have matched): the window's size is the
    last column of every row of the best ones."""
    return bool(best) and int(best[0][-1]) >= window


def _read(conn: Connection, select: str, best: list[Any]) -> list[Any]:
    """The full rows of the best ones (``select`` without its WHERE), in their order. Readers
    run in one transaction (:meth:`room.store.db.Database.read`), so both statements see the
    same rows; one that is gone anyway is left out rather than failing the search."""
    if not best:
        return []
    marks = ", ".join("?" * len(best))
    rows = {r[0]: r for r in conn.execute(f"{select} WHERE id IN ({marks})", [b[0] for b in best])}
    return [rows[b[0]] + (b[1],) for b in best if b[0] in rows]


def _authors(conn: Connection, ids: set[int]) -> dict[int, dict[str, Any]]:
    if not ids:
        return {}
    marks = ", ".join("?" * len(ids))
    return {
        int(r[0]): {"id": int(r[0]), "handle": r[1], "display_name": r[2], "kind": r[3]}
        for r in conn.execute(
            f"SELECT id, handle, display_name, kind FROM members WHERE id IN ({marks})",
            tuple(ids),
        )
    }
