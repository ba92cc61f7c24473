"""Search parity: one corpus (Chinese, Japanese, Korean, English, code identifiers, accents,
full-width text, memory records, another project's text) written into a migrated SQLite
database and a migrated PostgreSQL database (the tests' private cluster), the same queries run
on both through :func:`room.store.search.search`, and the sets of hits compared — before and
after edits and deletes reach the indexer. Ranking may differ (BM25 against ``ts_rank``:
docs/storage.md), the set of results may not. Each query's hits are also checked against
what a person expects, so two backends wrong the same way still fail."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from room.rules.searchtext import index_texts
from room.rules.searchtokens import fts_tokens, index_row
from room.store import indexer, search_pg
from room.store import pg_migrate as pg_migrate_module
from room.store import search as search_store
from room.store.dialect import Connection
from room.store.migrate import connect as sqlite_connect
from room.store.migrate import migrate as sqlite_migrate
from room.store.pg import connect as pg_connect
from room.store.pg_migrate import migrate as pg_migrate
from room.store.schema_pg import PG_MIGRATIONS

NOW = 1_800_000_000.0
ANN, BO, OTHER = 1, 2, 3  # members: two of project 1, one of project 2

CORPUS: dict[int, tuple[int, str]] = {  # message id: (author, body); project 1 unless noted
    1: (ANN, "明天我们需要迁移数据库到新的服务器"),
    2: (ANN, "午饭吃什么"),
    3: (ANN, "the deployment failed on the staging box"),
    4: (BO, "deployment notes: deployment needs a token"),
    5: (ANN, "see room.store.search and room/store/indexer.py for index_step()"),
    6: (BO, "call fetch_history(project_id=3, limit=50) then foo_bar.baz"),
    7: (ANN, "email ann@example.com about v1.2.3 — 3.14 is π"),
    8: (BO, "Café crème à la carte; naïve coöperation; ŒUVRE straße"),
    9: (ANN, "パスワードを変更してください"),
    10: (BO, "한국어 검색 테스트"),
    11: (ANN, "混合 text: 数据库 migration 和 API-key rotation"),
    12: (BO, "机密的密码是蓝色海豚"),
    13: (ANN, "旧的说法：橙色长颈鹿"),
    14: (BO, "deploy-script.sh --dry-run failed: ENOENT"),
    15: (ANN, "ＡＢＣ１２３ full-width and ①②"),
    16: (BO, "emoji ok🥺 and 👍done İstanbul µs ſtraße"),
    17: (BO, "数据 alone, and Ελληνικά ά and привет й"),
    18: (OTHER, "别人的秘密计划 deployment 数据库 room.store.search"),
}
PROJECT_OF = {18: 2}
RECORDS = [  # (record id, project, kind, author, text)
    (1, 1, "fact", ANN, "缓存配置在 settings.py 里"),
    (2, 1, "decision", BO, "we chose PostgreSQL over MySQL for deployment"),
    (3, 2, "fact", OTHER, "别人的秘密事实 deployment"),
]

# query -> the (kind, id) hits a person expects in project 1 (before the edits)
EXPECTED: dict[str, set[tuple[str, int]]] = {
    "数据": {("message", 1), ("message", 11), ("message", 17)},
    "据库": {("message", 1), ("message", 11)},
    "迁移数据库": {("message", 1)},
    "库": {("message", 1), ("message", 11)},
    "服务器 数据": {("message", 1)},
    "数库": set(),
    "deployment": {("message", 3), ("message", 4), ("decision", 2)},
    "deploy*": {("message", 3), ("message", 4), ("message", 14), ("decision", 2)},
    '"deployment failed"': {("message", 3)},
    "deployment -token": {("message", 3), ("decision", 2)},
    "store": {("message", 5)},
    "room.store.search": {("message", 5)},
    "indexer.py": {("message", 5)},
    "index_step": {("message", 5)},
    "fetch_history": {("message", 6)},
    "project_id": {("message", 6)},
    "baz": {("message", 6)},
    "example.com": {("message", 7)},
    "ann": {("message", 7)},
    "v1.2.3": {("message", 7)},
    "3.14": {("message", 7)},
    "14": {("message", 7)},
    "cafe": {("message", 8)},
    "CAFÉ crème": {("message", 8)},
    "naive cooperation": {("message", 8)},
    "œuvre": {("message", 8)},
    "oeuvre": set(),
    "straße": {("message", 8), ("message", 16)},
    "パスワード": {("message", 9)},
    "変更": {("message", 9)},
    "한국어": {("message", 10)},
    "API-key": {("message", 11)},
    "rotation OR 海豚": {("message", 11), ("message", 12)},
    "dry-run": {("message", 14)},
    "enoent": {("message", 14)},
    "ＡＢＣ１２３": {("message", 15)},
    "abc123": {("message", 15)},
    "12": {("message", 15)},  # ①② is 12 (NFKC)
    "1": set(),
    "ok": {("message", 16)},
    "done": {("message", 16)},
    "istanbul": {("message", 16)},
    "μs": {("message", 16)},
    "ελληνικά": {("message", 17)},
    "ά": {("message", 17)},
    "α": set(),
    "ПРИВЕТ": {("message", 17)},
    "长颈鹿": {("message", 13)},
    "企鹅": set(),
    "秘密": set(),
    "计划": set(),
    "缓存": {("fact", 1)},
    "settings.py": {("fact", 1)},
    "postgresql": {("decision", 2)},
    "mysql -deployment": set(),
    "de*": set(),  # shorter than a prefix: a whole word
    "migr*": {("message", 11)},
    '"数据库 migration"': {("message", 11)},
    "蓝": {("message", 12)},
    "说": {("message", 13)},
    '"deployment"*': {("message", 3), ("message", 4), ("decision", 2)},
    "the OR 吃": {("message", 2), ("message", 3)},
}
# after message 12 is deleted and 13 edited to "新的说法：紫色企鹅"
AFTER_EDITS = {"海豚": set(), "企鹅": {("message", 13)}, "说法": {("message", 13)}}


class Side:
    """One backend with the corpus: search it, index it."""

    def __init__(self, conn: Connection, db: Path | str) -> None:
        self.conn, self.db = conn, db

    def write(self, sql: str, params: Any = ()) -> None:
        self.conn.execute("BEGIN")
        self.conn.execute(sql, params)
        self.conn.execute("COMMIT")

    def index(self) -> None:
        indexer.catch_up(self.db)

    def hits(self, q: str, project_id: int = 1, **filters: Any) -> set[tuple[str, int]]:
        body = search_store.search(self.conn, project_id, q, limit=100, **filters)
        return {(r["kind"], r["id"]) for r in body["results"]}


def _fill(conn: Connection) -> None:
    conn.execute("BEGIN")
    for p in (1, 2):
        conn.execute(
            "INSERT INTO projects (id, name, created_at, updated_at) VALUES (?, ?, ?, ?)",
            (p, f"p{p}", NOW, NOW),
        )
    for m, p, handle in ((ANN, 1, "ann"), (BO, 1, "bo"), (OTHER, 2, "other")):
        conn.execute(
            "INSERT INTO members (id, project_id, kind, role, handle, display_name, created_at)"
            " VALUES (?, ?, 'agent', 'member', ?, ?, ?)",
            (m, p, handle, handle, NOW),
        )
    for mid, (author, body) in CORPUS.items():
        conn.execute(
            "INSERT INTO messages (id, project_id, seq, author_id, body, frame, created_at)"
            " VALUES (?, ?, ?, ?, ?, '{}', ?)",
            (mid, PROJECT_OF.get(mid, 1), mid, author, body, NOW + mid),
        )
    for rid, p, kind, author, text in RECORDS:
        search_store.index_record(
            conn, project_id=p, record_id=rid, kind=kind, author_id=author, at=NOW + rid,
            text=text,
        )  # fmt: skip
    conn.execute("COMMIT")


@pytest.fixture
def sides(tmp_path: Path, pg_dsn: str) -> Iterator[tuple[Side, Side]]:
    path = tmp_path / "room.sqlite"
    lite = sqlite_connect(path)
    sqlite_migrate(lite, path, now=NOW)
    _fill(lite)
    indexer.prepare(path)
    search_store.attach_index(lite, path)
    pg = pg_connect(pg_dsn)
    pg_migrate(pg, now=NOW)
    _fill(pg)
    try:
        yield Side(lite, path), Side(pg, pg_dsn)
    finally:
        lite.close()
        pg.close()


def _compare(lite: Side, pg: Side, expected: dict[str, set[tuple[str, int]]]) -> None:
    wrong = {}
    for q, want in expected.items():
        got = (lite.hits(q), pg.hits(q))
        if got != (want, want):
            wrong[q] = {"expected": want, "sqlite": got[0], "postgresql": got[1]}
    assert wrong == {}


def test_the_same_queries_find_the_same_hits_on_both(sides: tuple[Side, Side]) -> None:
    lite, pg = sides
    assert lite.hits("数据") == pg.hits("数据") == set()  # not indexed yet
    lite.index()
    pg.index()
    _compare(lite, pg, EXPECTED)
    # The other project's text is found there, never here.
    for side in sides:
        assert side.hits("秘密", project_id=2) == {("message", 18), ("fact", 3)}
        assert side.hits("room.store.search", project_id=2) == {("message", 18)}


def test_filters_narrow_the_same_way(sides: tuple[Side, Side]) -> None:
    lite, pg = sides
    lite.index()
    pg.index()
    cases: list[tuple[str, dict[str, Any], set[tuple[str, int]]]] = [
        ("deployment", {"author_id": BO}, {("message", 4), ("decision", 2)}),
        ("deployment", {"kinds": ["message"]}, {("message", 3), ("message", 4)}),
        ("deployment", {"kinds": ["decision", "fact"]}, {("decision", 2)}),
        ("数据", {"since": NOW + 11}, {("message", 11), ("message", 17)}),
        ("数据", {"until": NOW + 11}, {("message", 1), ("message", 11)}),
        ("deploy*", {"since": NOW + 3, "until": NOW + 4}, {("message", 3), ("message", 4)}),
        ("deploy*", {"since": NOW + 2, "until": NOW + 2}, {("decision", 2)}),
    ]
    for q, filters, want in cases:
        assert (lite.hits(q, **filters), pg.hits(q, **filters)) == (want, want), (q, filters)


def test_edits_deletes_and_new_messages_the_same_on_both(sides: tuple[Side, Side]) -> None:
    lite, pg = sides
    for side in sides:
        side.index()
        side.write("UPDATE messages SET deleted_at = ? WHERE id = 12", (NOW,))
        side.write(
            "UPDATE messages SET body = '新的说法：紫色企鹅', edited_at = ? WHERE id = 13", (NOW,)
        )
        side.conn.execute("BEGIN")
        for mid in (12, 13):
            search_store.message_changed(side.conn, mid)
        side.conn.execute("COMMIT")
        side.write(
            "INSERT INTO messages (id, project_id, seq, author_id, body, frame, created_at)"
            " VALUES (19, 1, 19, 1, '新来的长颈鹿 deployment', '{}', ?)",
            (NOW + 19,),
        )
    # Queued, not yet re-read: the edited message is left out, the deleted one is gone, the
    # new one is not indexed yet.
    _compare(
        lite,
        pg,
        {"海豚": set(), "长颈鹿": set(), "企鹅": set(), "deployment": EXPECTED["deployment"]},
    )
    for side in sides:
        side.index()
    _compare(lite, pg, AFTER_EDITS | {"deployment": EXPECTED["deployment"] | {("message", 19)}})
    _compare(lite, pg, {"长颈鹿": {("message", 19)}})  # the earlier text of 13: not found
    assert indexer.lag(pg.db) == indexer.lag(lite.db) == {"messages": 0, "changes": 0}


def test_postgresql_stores_the_tokens_fts5_makes(sides: tuple[Side, Side]) -> None:
    """The app-side tokens (room.rules.searchtokens) are the ones SQLite's unicode61 makes of
    each message, and PostgreSQL's ``simple`` configuration reads them back unchanged."""
    lite, pg = sides
    lite.index()
    pg.index()
    vocab = sqlite3.connect(":memory:")
    vocab.execute(
        "CREATE VIRTUAL TABLE t USING fts5(body, uni, tokenize = 'unicode61 remove_diacritics 2')"
    )
    vocab.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, instance)")
    for mid, (_, body) in CORPUS.items():
        vocab.execute(
            "INSERT INTO t (rowid, body, uni) VALUES (?, ?, ?)", (mid, *index_texts(body))
        )
    fts5: dict[int, list[str]] = {}
    for doc, col, term in vocab.execute("SELECT doc, col, term FROM v ORDER BY doc, col, offset"):
        fts5.setdefault(int(doc), []).append(f"{col}:{term}")
    ours = {
        mid: [f"body:{t}" for t in fts_tokens(index_texts(body)[0])]
        + [f"uni:{t}" for t in fts_tokens(index_texts(body)[1])]
        for mid, (_, body) in CORPUS.items()
    }
    assert ours == fts5
    stored = {
        int(r[0]): sorted(r[1])
        for r in pg.conn.execute("SELECT rowid, tsvector_to_array(tsv) FROM message_fts")
    }
    assert stored == {mid: sorted({t.split(":", 1)[1] for t in toks}) for mid, toks in ours.items()}


def test_the_indexer_thread_and_its_housekeeping_on_postgresql(sides: tuple[Side, Side]) -> None:
    """The server's indexing thread given a postgresql:// URL (as a server on PostgreSQL
    will run it), and the start-up clean-up of applied changes."""
    _, pg = sides

    async def index_in_the_thread() -> bool:
        thread = indexer.SearchIndexer(pg.db)
        thread.start(asyncio.get_running_loop())
        try:
            return await thread.settle(10)
        finally:
            await thread.close()

    assert indexer.lag(pg.db) == {"messages": len(CORPUS), "changes": 0}
    assert asyncio.run(index_in_the_thread())
    assert indexer.lag(pg.db) == {"messages": 0, "changes": 0}
    assert pg.hits("数据") == EXPECTED["数据"]
    pg.conn.execute("BEGIN")
    for mid in (1, 2, 3):
        search_store.message_changed(pg.conn, mid)
    pg.conn.execute("COMMIT")
    assert indexer.lag(pg.db) == {"messages": 0, "changes": 3}
    pg.index()
    # The queue is consumed (a step deletes what it applied): nothing left to forget.
    assert pg.conn.execute("SELECT count(*) FROM search_changes").fetchone()[0] == 0
    assert indexer.forget_applied_changes(pg.conn, Path("unused")) == 0


def test_the_indexer_thread_reconnects_when_postgresql_drops_it(
    sides: tuple[Side, Side], caplog: pytest.LogCaptureFixture
) -> None:
    """Its backend ended (as by a restart of the server): the thread opens a new connection
    and goes on from the watermark in the database."""
    _, pg = sides

    async def scenario() -> tuple[bool, bool]:
        thread = indexer.SearchIndexer(pg.db)
        thread.start(asyncio.get_running_loop())
        try:
            first = await thread.settle(10)
            pg.write(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE application_name = 'room-search-indexer'"
            )
            pg.write(
                "INSERT INTO messages (id, project_id, seq, author_id, body, frame, created_at)"
                " VALUES (20, 1, 20, 1, '断线以后的消息', '{}', ?)",
                (NOW + 20,),
            )
            return first, await thread.settle(15)
        finally:
            await thread.close()

    assert asyncio.run(scenario()) == (True, True)
    assert pg.hits("断线") == {("message", 20)}
    assert "indexing messages for search failed" in caplog.text


def test_0030_carries_the_index_over_with_each_message_project(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A database indexed before ``0030_message_fts_project`` keeps its index rows, each now
    with its message's project (a row whose message is gone is left behind), kept whole in
    their heap pages; its searches find what they found, nothing needs indexing again."""
    conn = pg_connect(pg_dsn)
    try:
        before = [m for m in PG_MIGRATIONS if m.name != "0030_message_fts_project"]
        assert len(before) == len(PG_MIGRATIONS) - 1
        monkeypatch.setattr(pg_migrate_module, "PG_MIGRATIONS", tuple(before))
        pg_migrate(conn, now=NOW)
        _fill(conn)
        conn.execute("BEGIN")
        conn.execute("DELETE FROM search_changes")  # indexed by hand, as 0032's indexer did
        for mid, (_, body) in [*CORPUS.items(), (99, (ANN, "gone deployment"))]:
            conn.execute(
                "INSERT INTO message_fts (rowid, body, uni) VALUES (?, ?, ?)",
                (mid, *index_row(index_texts(body))),
            )
        conn.execute("COMMIT")
        monkeypatch.undo()
        assert pg_migrate(conn, now=NOW) == ["0030_message_fts_project"]
        rows = dict(conn.execute("SELECT rowid, project_id FROM message_fts").fetchall())
        assert rows == {mid: PROJECT_OF.get(mid, 1) for mid in CORPUS}
        (options,) = conn.execute(
            "SELECT reloptions FROM pg_class WHERE relname = 'message_fts'"
        ).fetchone()
        assert options == ["toast_tuple_target=8160"]
        side = Side(conn, pg_dsn)
        assert {q: side.hits(q) for q in EXPECTED} == EXPECTED
        assert side.hits("deployment", project_id=2) == {("message", 18), ("fact", 3)}
        assert indexer.lag(pg_dsn) == {"messages": 0, "changes": 0}
    finally:
        conn.close()


def test_a_common_word_is_first_asked_of_the_newest_ids(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A query the index's statistics call common is asked of the newest ids first
    (``0032_message_fts_recent``); it finds what the whole index finds, ranks and ``capped``
    included: when the newest ids hold a whole window of matches (``alpha``), and when they do
    not and the whole index is asked after (``beta``, common only in the older half), with an
    old message edited so that its row is written again at the heap's end. A rare word
    (``gamma``) asks the whole index at once."""
    monkeypatch.setattr(search_store, "RANK_WINDOW", 40)
    conn = pg_connect(pg_dsn)
    try:
        pg_migrate(conn, now=NOW)
        conn.execute("BEGIN")
        conn.execute(
            "INSERT INTO projects (id, name, created_at, updated_at) VALUES (1, 'p', ?, ?)",
            (NOW, NOW),
        )
        conn.execute(
            "INSERT INTO members (id, project_id, kind, role, handle, display_name, created_at)"
            " VALUES (?, 1, 'agent', 'member', 'ann', 'ann', ?)",
            (ANN, NOW),
        )
        for mid in range(1, 601):
            words = ["alpha"] * (mid % 2 == 0) + ["beta"] * (mid <= 300)
            words += ["gamma"] * (mid % 200 == 0) + ["alpha"] * (mid % 7 == 0) + [f"w{mid}"]
            conn.execute(
                "INSERT INTO messages (id, project_id, seq, author_id, body, frame, created_at)"
                " VALUES (?, 1, ?, ?, ?, '{}', ?)",
                (mid, mid, ANN, " ".join(words), NOW + mid),
            )
        conn.execute("COMMIT")
        indexer.catch_up(pg_dsn)
        conn.execute("BEGIN")
        conn.execute("UPDATE messages SET body = 'beta alpha alpha edited' WHERE id = 3")
        search_store.message_changed(conn, 3)
        conn.execute("COMMIT")
        indexer.catch_up(pg_dsn)
        conn.execute("ANALYZE message_fts")

        statements: list[str] = []
        run = search_pg._planned_each_time

        def catch(conn: Connection, sql: str, params: dict[str, Any]) -> list[Any]:
            statements.append(sql)
            return run(conn, sql, params)

        monkeypatch.setattr(search_pg, "_planned_each_time", catch)

        def search(q: str) -> tuple[dict[str, Any], list[bool]]:
            statements.clear()
            found = search_store.search(conn, 1, q, kinds=["message"], limit=50)
            return found, ["max(rowid)" in sql for sql in statements]

        first = {q: search(q) for q in ("alpha", "beta", "gamma", "alpha beta")}
        assert first["alpha"][1] == [True]  # the newest ids held a window
        assert first["beta"][1] == [True, False]  # they did not: the whole index after
        assert first["gamma"][1] == [False]  # rare: the whole index at once
        assert first["alpha beta"][1] == [True, False]
        monkeypatch.setattr(search_pg, "recent_span", lambda *_: None)
        for q, (found, _) in first.items():
            whole, asked = search(q)
            assert asked == [False]
            assert found == whole, q
        assert first["alpha"][0]["capped"] and first["beta"][0]["capped"]
        alpha = [r["message_id"] for r in first["alpha"][0]["results"]]
        assert len(alpha) == 40 and min(alpha) > 500  # the newest window, best first
        beta = {r["message_id"] for r in first["beta"][0]["results"]}
        assert beta == set(range(261, 301))
    finally:
        conn.close()
