"""Messages selected by search operators alone (``from:``, ``has:file``, ``is:mention``,
``before:``, ``after:`` with no words): newest first, no full-text index involved.

A query of words goes through :func:`room.store.search.search`, which takes the same filters;
this is what is left when there is nothing to rank. Plain SQL on ``messages`` (its project and
id index), so it reads the same on both stores.
"""

from __future__ import annotations

import html
from typing import Any

from room.rules.entities import iso
from room.rules.searchtext import SNIPPET_CHARS
from room.store import search as search_store
from room.store import search_pg
from room.store.dialect import Connection


def _snippet(text: str) -> str:
    flat = " ".join(text.split())
    cut = flat[:SNIPPET_CHARS]
    return html.escape(cut, quote=False) + ("…" if len(flat) > SNIPPET_CHARS else "")


def list_messages(
    conn: Connection,
    project_id: int,
    *,
    author_id: int | None = None,
    since: float | None = None,
    until: float | None = None,
    has_file: bool = False,
    mentioning: int | None = None,
    limit: int = search_store.DEFAULT_LIMIT,
) -> dict[str, Any]:
    """The newest live messages of the project passing the filters, in the shape of
    :func:`room.store.search.search` (``rank`` 0, the snippet the message's start)."""
    limit = max(1, min(int(limit), search_store.MAX_LIMIT))
    params = {
        "p": project_id, "a": author_id, "since": since, "until": until, "file": has_file,
        "me": mentioning, "limit": limit,
    }  # fmt: skip
    rows = conn.execute(
        "SELECT m.id, m.seq, m.kind, m.author_id, m.created_at, m.body FROM messages m"
        " WHERE m.project_id = :p AND m.deleted_at IS NULL"
        # typed for PostgreSQL, which cannot type a bare NULL parameter; SQLite reads them alike
        + search_pg.FILTERS.format(author="m.author_id", at="m.created_at")
        + search_store.MESSAGE_FILTERS
        + " ORDER BY m.id DESC LIMIT :limit",
        params,
    ).fetchall()
    authors = search_store._authors(conn, {int(r[3]) for r in rows if r[3] is not None})
    results = [
        {
            "kind": "message",
            "id": int(r[0]),
            "message_id": int(r[0]),
            "seq": int(r[1]),
            "message_kind": r[2],
            "snippet_html": _snippet(str(r[5])),
            "author": authors.get(r[3]) if r[3] is not None else None,
            "at": iso(float(r[4])),
            "rank": 0.0,
        }
        for r in rows
    ]
    return {"query": "", "results": results, "capped": False}
