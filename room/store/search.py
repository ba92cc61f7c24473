"""The full-text index (FTS5, BM25) over messages and memory records; docs/search.md.

One FTS5 table, ``search_fts``, holds the normalised text (:func:`room.searchtext.index_text`)
of every live message under the message's id as its rowid, and of every memory record under
the negated id of its ``search_records`` row (which keeps the record's project, kind, author,
time and original text for filters and snippets). Everything is written inside the caller's
transaction: a message with its append, edit or delete (:mod:`room.store.messages` callers in
``room.actions.messages``), a record with its write (:func:`index_record`, called by the memory
store), and a project's rows are removed by its purge (:func:`purge_project`).
"""

from __future__ import annotations

import sqlite3

from room.searchtext import index_text
from room.store.db import Appends, BulkInsert

FTS_ROWS = BulkInsert("search_fts", ("rowid", "body"))


# -- messages ----------------------------------------------------------------------------------


def index_message(
    conn: sqlite3.Connection, message_id: int, body: str, appends: Appends | None = None
) -> None:
    """Index a new message (its id is the rowid); left to the batch when ``appends`` is given."""
    FTS_ROWS.write(conn, [(message_id, index_text(body))], appends)


def unindex_message(conn: sqlite3.Connection, message_id: int) -> None:
    """A deleted message leaves the index, an edited one before its new text is indexed: the
    earlier versions (kept in the edit history) are never findable."""
    conn.execute("DELETE FROM search_fts WHERE rowid = :id", {"id": message_id})


# -- memory records ----------------------------------------------------------------------------


def index_record(
    conn: sqlite3.Connection,
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
    conn.execute("DELETE FROM search_fts WHERE rowid = :id", {"id": rowid})
    conn.execute(
        "INSERT INTO search_fts (rowid, body) VALUES (:id, :body)",
        {"id": rowid, "body": index_text(text)},
    )


def unindex_record(conn: sqlite3.Connection, record_id: int, *, kind: str | None = None) -> None:
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


def purge_project(conn: sqlite3.Connection, project_id: int) -> dict[str, int]:
    """Remove everything a project has in the index (its messages' rows and its records)."""
    messages = conn.execute(
        "DELETE FROM search_fts WHERE rowid IN (SELECT id FROM messages WHERE project_id = :p)",
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
