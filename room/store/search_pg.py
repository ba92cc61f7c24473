"""Search on PostgreSQL: the same functions as :mod:`room.store.search` and
:mod:`room.store.indexer`, over the baseline's ``message_fts``/``search_fts`` tables and their
``tsv`` GIN indexes (docs/storage.md, "Search on PostgreSQL").

The rows hold app-side tokens (:func:`room.rules.searchtokens.index_row`: FTS5's tokens of
:func:`room.rules.searchtext.index_texts`, joined by spaces), so the ``simple`` configuration
reads back exactly those lexemes; a query is :func:`room.rules.searchtokens.tsquery`, cast to
``tsquery`` (never parsed again). Body tokens carry weight A and the single CJK characters of
the ``uni`` column weight B: a weight stands for FTS5's column. Ranking is ``ts_rank``
(higher is better), not BM25: the set of results within the ranked window is the same, their
order may differ.

The messages' index lives in the same database as the messages: one indexing step is one
transaction reading the queue (``search_changes``: new messages, queued by a trigger, and the
edits, deletes and purges), writing the rows of the messages it names and deleting the queue
rows it read; the tokens are computed in Python (PostgreSQL has no ``room_index_text``). No
watermark of ids, which several writers commit out of order (:func:`index_step`).
``SELECT … FOR UPDATE`` on ``index_state`` makes two indexers (two server processes) take
turns; its watermark columns are SQLite's and unused here.
"""

from __future__ import annotations

import math
import time
import weakref
from dataclasses import dataclass
from typing import Any

from room.rules import searchtokens
from room.rules.searchtext import Query, index_texts
from room.rules.searchtokens import index_row
from room.store.db import chunks
from room.store.dialect import POSTGRESQL, Connection
from room.store.pg import PgConnection

# The author and time filters, typed: PostgreSQL cannot type a bare ``NULL`` parameter.
FILTERS = (
    " AND (CAST(:a AS bigint) IS NULL OR {author} = :a)"
    " AND (CAST(:since AS double precision) IS NULL OR {at} >= :since)"
    " AND (CAST(:until AS double precision) IS NULL OR {at} <= :until)"
)
# has:file and is:mention (room.rules.searchquery), typed the same way; SQLite runs it as written.
MESSAGE_FILTERS = (
    " AND (NOT CAST(:file AS boolean)"
    " OR EXISTS (SELECT 1 FROM attachments a WHERE a.message_id = m.id))"
    " AND (CAST(:me AS bigint) IS NULL OR EXISTS"
    " (SELECT 1 FROM mentions mm WHERE mm.message_id = m.id AND mm.member_id = :me))"
)


def write_record(conn: Connection, rowid: int, text: str) -> None:
    """A memory record's row of ``search_fts`` (replacing the one it had)."""
    conn.execute("DELETE FROM search_fts WHERE rowid = :id", {"id": rowid})
    body, uni = index_row(index_texts(text))
    conn.execute(
        "INSERT INTO search_fts (rowid, body, uni) VALUES (:id, :body, :uni)",
        {"id": rowid, "body": body, "uni": uni},
    )


def _planned_each_time(conn: Connection, sql: str, params: dict[str, Any]) -> list[Any]:
    """Run a ranked query with a plan made for its words. psycopg prepares a statement on its
    fifth run, and PostgreSQL may then keep a generic plan, which cannot know how common
    ``tsv @@ $1`` is: it walked the ``rowid`` index backwards testing every row (60 ms for a
    rare word in 20,000 messages, against 0.5 ms through the GIN index)."""
    if isinstance(conn, PgConnection):
        return conn.raw.execute(POSTGRESQL.adapt(sql), params, prepare=False).fetchall()
    return conn.execute(sql, params).fetchall()


def best_messages(conn: Connection, params: dict[str, Any], query: Query) -> list[Any]:
    """The best ``limit`` among the newest ``window`` matches of the project's live messages
    (as :func:`room.store.search._messages` on SQLite), read in the same statement (a round
    trip saved): ``(id, seq, kind, author_id, created_at, body, score, window size)``.

    The window is ranked from ``message_fts`` alone (its rows carry the message's project since
    ``0030_message_fts_project``) unless a filter needs the message (author, time, has:file,
    is:mention): a match costs its index row, not also a probe of ``messages`` and a page of
    its heap (at 1M messages, 3 of a 0.1 % word's 10 ms). It holds only live messages: the
    indexer deletes a deleted message's row, and until it has, the message is queued in
    ``search_changes`` and left out (:func:`pending_changes`); the outer join checks again.

    A query the index's statistics call common (:func:`recent_span`) is first asked of the
    newest ids alone; when they hold a whole window of matches, those are the newest ``window``
    matches and the answer; otherwise the whole index is asked, as for any other query."""
    span = recent_span(conn, query, int(params["window"]))
    if span is not None:
        rows = _planned_each_time(conn, _best_messages_sql(conn, params, recent=True),
                                  params | {"span": span})  # fmt: skip
        if rows and int(rows[0][-1]) >= int(params["window"]):
            return rows
    return _planned_each_time(conn, _best_messages_sql(conn, params, recent=False), params)


def _best_messages_sql(conn: Connection, params: dict[str, Any], *, recent: bool) -> str:
    if _filtered(params):
        window = (
            "SELECT m.id AS id, ts_rank(f.tsv, CAST(:q AS tsquery)) AS score"
            " FROM message_fts AS f JOIN messages m ON m.id = f.rowid"
            " WHERE f.tsv @@ CAST(:q AS tsquery) AND f.project_id = :p AND m.project_id = :p"
            " AND m.deleted_at IS NULL"
            + FILTERS.format(author="m.author_id", at="m.created_at")
            + MESSAGE_FILTERS
        )
    else:
        window = (
            "SELECT f.rowid AS id, ts_rank(f.tsv, CAST(:q AS tsquery)) AS score"
            " FROM message_fts AS f WHERE f.tsv @@ CAST(:q AS tsquery) AND f.project_id = :p"
        )
    if recent:
        # The newest ``:span`` ids of the index: its BRIN index on ``rowid`` (ids and the heap's
        # order agree) narrows the GIN's matches to the last pages before any heap row is read.
        window += " AND f.rowid > (SELECT max(rowid) FROM message_fts) - :span"
    return (
        "SELECT m.id, m.seq, m.kind, m.author_id, m.created_at, m.body, b.score, b.total FROM"
        " (SELECT id, score, count(*) OVER () AS total FROM ("
        + window
        + pending_changes(conn, params)
        # ``f.rowid + 0``, not ``f.rowid``: the newest matches by the GIN index and a top-N
        # sort, never a backward walk of the primary key testing every row (the plan chosen
        # for a common word at 1M messages: 120,000 rows read for 1,000 matches, 2.5x slower).
        + " ORDER BY f.rowid + 0 DESC LIMIT :window) AS ranked ORDER BY score DESC, id DESC"
        " LIMIT :limit) AS b JOIN messages m ON m.id = b.id AND m.deleted_at IS NULL"
        " ORDER BY b.score DESC, b.id DESC"
    )


# A query is asked of the newest ids first when the index's statistics expect it to match at
# least this many windows' worth of rows in the whole index, over a span of ids expected to
# hold ``RECENT_MARGIN`` windows of matches, and only when that span is at most
# ``RECENT_MOST`` of the index (else the whole index costs about the same).
RECENT_MIN_WINDOWS = 4
RECENT_MARGIN = 1.5
RECENT_MOST = 0.5
# How long a connection keeps what it read of the index's statistics (``pg_stats``).
COMMON_TTL_SECS = 600.0


@dataclass(frozen=True)
class _Common:
    """What ``ANALYZE`` last saw of ``message_fts.tsv``: its most common lexemes with the share
    of rows holding each, and the rows of the table."""

    read_at: float
    shares: dict[str, float]
    rows: float


_common: weakref.WeakKeyDictionary[PgConnection, _Common] = weakref.WeakKeyDictionary()


def recent_span(conn: Connection, query: Query, window: int) -> int | None:
    """How many of the newest ids to ask first for ``query`` (``None``: the whole index at
    once). From PostgreSQL's statistics of the index (``most_common_elems`` of ``tsv``, which
    ``ANALYZE`` keeps: the lexemes in ~1 % or more of the rows at 1M messages), read once per
    connection every ``COMMON_TTL_SECS``: a query of common words expects a window of matches
    among the newest ``window / share`` rows, and the GIN's matches there are a few pages,
    where the whole index's are one heap page per match (10,000 for a word in 1 % of 1M).
    The statistics are the whole table's, not the project's: a project that wrote few of the
    newest rows finds fewer than a window there and asks the whole index after (the same
    answer, one more statement). An estimate never changes what is found."""
    if not isinstance(conn, PgConnection):
        return None
    common = _common.get(conn)
    if common is None or time.monotonic() - common.read_at > COMMON_TTL_SECS:
        common = _read_common(conn)
        _common[conn] = common
    if not common.shares or common.rows <= 0:
        return None
    share = searchtokens.share(query, common.shares)
    if share * common.rows < RECENT_MIN_WINDOWS * window:
        return None
    span = math.ceil(window * RECENT_MARGIN / share)
    return span if span <= common.rows * RECENT_MOST else None


def _read_common(conn: PgConnection) -> _Common:
    row = conn.execute(
        "SELECT s.most_common_elems::text::text[], s.most_common_elem_freqs, c.reltuples"
        " FROM pg_class c LEFT JOIN pg_stats s ON s.schemaname = current_schema()"
        " AND s.tablename = 'message_fts' AND s.attname = 'tsv'"
        " WHERE c.oid = to_regclass('message_fts')"
    ).fetchone()
    if row is None or not row[0] or not row[1]:
        return _Common(time.monotonic(), {}, 0.0)
    elems, freqs, rows = row
    # ``most_common_elem_freqs`` holds each lexeme's share, in order, then the least and the
    # greatest of them and the share of empty rows.
    shares = dict(zip(elems, (float(f) for f in freqs), strict=False))
    return _Common(time.monotonic(), shares, float(rows))


def _filtered(params: dict[str, Any]) -> bool:
    """Whether a filter of the query needs the message row (author, time, has:file,
    is:mention)."""
    return any(params.get(k) is not None for k in ("a", "since", "until", "me")) or bool(
        params.get("file")
    )


def pending_changes(conn: Connection, params: dict[str, Any]) -> str:
    """The condition leaving out messages edited since the indexer last looked, or nothing."""
    if conn.execute("SELECT 1 FROM search_changes LIMIT 1").fetchone() is None:
        return ""
    return " AND f.rowid NOT IN (SELECT message_id FROM search_changes)"


def best_records(conn: Connection, params: dict[str, Any], kinds: list[str]) -> list[Any]:
    """The best memory records, read in the same statement: ``(id, kind, record_id,
    author_id, at, body, score, window size)`` (``id`` of ``search_records``)."""
    marks = ", ".join(f":k{i}" for i in range(len(kinds)))
    return _planned_each_time(
        conn,
        "SELECT r.id, r.kind, r.record_id, r.author_id, r.at, r.body, b.score, b.total FROM"
        " (SELECT id, score, at, count(*) OVER () AS total FROM (SELECT r.id AS id, r.at AS at,"
        " ts_rank(f.tsv, CAST(:q AS tsquery)) AS score"
        " FROM search_fts AS f JOIN search_records r ON r.id = -f.rowid"
        " WHERE f.tsv @@ CAST(:q AS tsquery) AND f.rowid < 0"
        f" AND r.project_id = :p AND r.kind IN ({marks})"
        + FILTERS.format(author="r.author_id", at="r.at")
        + " ORDER BY f.rowid LIMIT :window) AS ranked ORDER BY score DESC, at DESC LIMIT :limit)"
        " AS b JOIN search_records r ON r.id = b.id ORDER BY b.score DESC, b.at DESC",
        params | {f"k{i}": k for i, k in enumerate(kinds)},
    )


# -- the indexer -------------------------------------------------------------------------------


def _write_messages(conn: Connection, rows: list[Any]) -> None:
    """The index rows of ``(id, project_id, body)`` rows of messages."""
    values = [(int(r[0]), int(r[1]), *index_row(index_texts(str(r[2])))) for r in rows]
    for part in chunks(values):
        marks = ", ".join(["(?, ?, ?, ?)"] * len(part))
        conn.execute(
            f"INSERT INTO message_fts (rowid, project_id, body, uni) VALUES {marks}",
            [v for row in part for v in row],
        )


def index_step(conn: Connection, limit: int) -> bool:
    """One step of the indexer on PostgreSQL (as :func:`room.store.indexer.index_step`): True
    when nothing is left behind.

    No watermark: ids come from sequences and several servers write, so a lower id may commit
    after a higher one. The step reads the queue (``search_changes``: every inserted message,
    queued by the trigger of migration ``0027_pg_parity``, and every edit, delete and purge),
    writes the rows of the messages it names as they are now, and deletes the queue rows it
    read, in one transaction: a row is taken once it is visible, and stays until a step that
    read it commits. Indexers take turns on ``index_state``'s row: a step's reads start after
    the previous step committed, so a message's row is never written from a body older than
    the one written before it (two steps taking one message's rows side by side could)."""
    conn.execute("BEGIN")
    try:
        conn.execute("SELECT id FROM index_state FOR UPDATE")
        queued = conn.execute(
            "SELECT seq, message_id FROM search_changes ORDER BY seq LIMIT ?", (limit,)
        ).fetchall()
        if queued:
            # One array parameter per statement (PostgreSQL's ``= ANY``), not 64-id chunks: a
            # step of 2,000 new messages is four statements and the 64-row INSERTs.
            ids = sorted({int(m) for _, m in queued})
            conn.execute("DELETE FROM message_fts WHERE rowid = ANY(?)", (ids,))
            _write_messages(
                conn,
                conn.execute(
                    "SELECT id, project_id, body FROM messages WHERE id = ANY(?)"
                    " AND deleted_at IS NULL"
                    " ORDER BY id",
                    (ids,),
                ).fetchall(),
            )
            seqs = [int(seq) for seq, _ in queued]
            conn.execute("DELETE FROM search_changes WHERE seq = ANY(?)", (seqs,))
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return len(queued) < limit


def lag(conn: Connection) -> dict[str, int]:
    """What the queue holds: messages not indexed yet, and changes to indexed ones."""
    row = conn.execute(
        "SELECT count(DISTINCT c.message_id) FILTER (WHERE f.rowid IS NULL),"
        " count(*) FILTER (WHERE f.rowid IS NOT NULL)"
        " FROM search_changes c LEFT JOIN message_fts f ON f.rowid = c.message_id"
    ).fetchone()
    return {"messages": int(row[0]), "changes": int(row[1])}


def forget_applied_changes(conn: Connection) -> int:
    """Nothing to forget: a step deletes the queue rows it applied (0)."""
    return 0
