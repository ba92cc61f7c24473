"""The messages' search indexer (room.store.indexer, docs/search.md): the send path writes
nothing for search; the indexer reads committed messages from a watermark into its own file,
applies edits, deletes and purges from the queue, and resumes where it stopped."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from room.actions import message_edits
from room.store import indexer
from room.store import search as search_store
from room.store.migrate import connect, migrate
from tests.support.inproc import owner_user, running_app
from tests.support.search import found_ids, search, write_message


def _database(tmp_path: Path, bodies: list[str]) -> Path:
    path = tmp_path / "room.sqlite"
    conn = connect(path)
    migrate(conn, path, now=0.0)
    conn.execute("INSERT INTO projects (id, name, created_at, updated_at) VALUES (1, 'p', 0, 0)")
    for i, body in enumerate(bodies, start=1):
        _insert(conn, i, body)
    conn.close()
    return path


def _insert(conn: sqlite3.Connection, message_id: int, body: str) -> None:
    conn.execute(
        "INSERT INTO messages (id, project_id, seq, body, frame, created_at)"
        " VALUES (?, 1, ?, ?, '{}', 0)",
        (message_id, message_id, body),
    )


def _indexed(path: Path) -> dict[int, str]:
    conn = indexer.open_index(path)
    try:
        return {int(r[0]): str(r[1]) for r in conn.execute("SELECT rowid, body FROM message_fts")}
    finally:
        conn.close()


def _found(path: Path, q: str) -> list[int]:
    conn = connect(path)
    try:
        search_store.attach_index(conn, path)
        return [r["message_id"] for r in search_store.search(conn, 1, q)["results"]]
    finally:
        conn.close()


def test_a_send_writes_nothing_for_search_the_indexer_reads_it_later(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with running_app(data, search_index_messages=False) as app:  # no indexer running
        owner = owner_user(app)
        project_id, members, _ = app.project_with("索引", owner)
        sent = write_message(app, project_id, members["owner"], "刚发的消息：雪豹出没")
        assert indexer.lag(app.settings.db_path)["messages"] >= 1
        assert search(app, project_id, q="雪豹")["results"] == []
        indexer.catch_up(app.settings.db_path)
        assert found_ids(search(app, project_id, q="雪豹")) == [sent]
        assert indexer.lag(app.settings.db_path) == {"messages": 0, "changes": 0}


def test_an_edited_message_is_left_out_until_reindexed_never_found_by_old_text(
    tmp_path: Path,
) -> None:
    with running_app(tmp_path / "data", search_index_messages=False) as app:
        owner = owner_user(app)
        project_id, members, _ = app.project_with("编辑", owner)
        me = members["owner"]
        edited = write_message(app, project_id, me, "旧的说法：橙色长颈鹿")
        gone = write_message(app, project_id, me, "要删的：蓝色海豚")
        indexer.catch_up(app.settings.db_path)
        assert found_ids(search(app, project_id, q="长颈鹿")) == [edited]
        app.call(message_edits.edit_message, app.core, me, edited, "新的说法：紫色企鹅")
        app.call(message_edits.delete_message, app.core, me, gone)
        # Queued, not yet re-read: neither the earlier nor the new text finds it meanwhile.
        assert indexer.lag(app.settings.db_path)["changes"] == 2
        assert search(app, project_id, q="长颈鹿")["results"] == []
        assert search(app, project_id, q="企鹅")["results"] == []
        assert search(app, project_id, q="海豚")["results"] == []
        indexer.catch_up(app.settings.db_path)
        assert search(app, project_id, q="长颈鹿")["results"] == []
        assert found_ids(search(app, project_id, q="企鹅")) == [edited]
        indexed = _indexed(app.settings.db_path)
        assert gone not in indexed and "企鹅" in indexed[edited]


def test_a_restart_resumes_from_the_watermark(tmp_path: Path) -> None:
    bodies = [f"note {i} about rollout" for i in range(7)]
    path = _database(tmp_path, bodies)
    conn = indexer.open_index(path)
    assert indexer.index_step(conn, limit=3) is False  # more is left
    conn.close()  # stopped here, as a crash or a restart would
    assert sorted(_indexed(path)) == [1, 2, 3]
    assert indexer.lag(path) == {"messages": 4, "changes": 0}
    indexer.catch_up(path)  # the next start
    assert sorted(_indexed(path)) == list(range(1, 8))  # each once: nothing indexed twice
    assert _found(path, "rollout") == list(range(7, 0, -1))


def test_an_unfinished_step_leaves_the_watermark_where_it_was(tmp_path: Path) -> None:
    path = _database(tmp_path, ["第一条", "第二条"])
    conn = indexer.open_index(path)
    conn.execute("BEGIN")
    conn.execute("INSERT INTO message_fts (rowid, body, uni) VALUES (1, '第一 一条 条', '')")
    conn.close()  # the process died inside the step's transaction
    assert _indexed(path) == {}
    indexer.catch_up(path)
    assert sorted(_indexed(path)) == [1, 2]


def test_the_index_drops_what_lies_past_the_newest_message(tmp_path: Path) -> None:
    # The newest messages gone (a purge) and their ids given out again after a restart: the
    # index must not keep the old rows nor skip the new messages below its watermark.
    path = _database(tmp_path, ["keep this", "purged words", "purged more"])
    indexer.catch_up(path)
    conn = connect(path)
    conn.execute("DELETE FROM messages WHERE id > 1")
    conn.close()
    indexer.catch_up(path)
    assert sorted(_indexed(path)) == [1]
    conn = connect(path)
    _insert(conn, 2, "fresh text")
    conn.close()
    indexer.catch_up(path)
    assert _indexed(path) == {1: "keep this", 2: "fresh text"}


def test_chinese_and_english_rows_are_what_index_texts_makes(tmp_path: Path) -> None:
    from room.rules.searchtext import index_texts

    bodies = ["plain ASCII words", "迁移数据库 today", "ＡＢＣ１ café", "ok🥺 fine"]
    path = _database(tmp_path, bodies)
    indexer.catch_up(path)
    conn = indexer.open_index(path)
    rows = {
        int(r[0]): (r[1], r[2]) for r in conn.execute("SELECT rowid, body, uni FROM message_fts")
    }
    conn.close()
    assert rows == {i: index_texts(b) for i, b in enumerate(bodies, start=1)}


def test_another_database_under_the_index_is_indexed_afresh(tmp_path: Path) -> None:
    # A backup restored over room.sqlite: same ids, other messages. The index must not keep
    # the text of messages that are no longer there.
    path = _database(tmp_path, ["old secret one", "old secret two"])
    indexer.catch_up(path)
    conn = connect(path)
    conn.execute("DELETE FROM messages")
    for i, body in enumerate(["restored first", "restored second", "restored third"], start=1):
        conn.execute(
            "INSERT INTO messages (id, project_id, seq, body, frame, created_at)"
            " VALUES (?, 1, ?, ?, '{}', 99)",
            (i, i, body),
        )
    conn.close()
    indexer.catch_up(path)
    assert _indexed(path) == {1: "restored first", 2: "restored second", 3: "restored third"}
    assert _found(path, "secret") == []


def test_applied_changes_are_forgotten_at_start_and_numbers_never_come_again(
    tmp_path: Path,
) -> None:
    path = _database(tmp_path, ["alpha one", "beta two"])
    indexer.catch_up(path)
    conn = connect(path)
    for message_id in (1, 2, 1):
        search_store.message_changed(conn, message_id)
    indexer.catch_up(path)
    assert indexer.forget_applied_changes(conn, path) == 2  # the newest stays
    search_store.message_changed(conn, 2)
    conn.execute("UPDATE messages SET body = 'gamma three' WHERE id = 2")
    seqs = [r[0] for r in conn.execute("SELECT seq FROM search_changes ORDER BY seq")]
    conn.close()
    assert seqs == [3, 4]
    indexer.catch_up(path)
    assert _indexed(path) == {1: "alpha one", 2: "gamma three"}


def test_a_database_from_before_the_index_is_indexed_afresh(tmp_path: Path) -> None:
    # An older backup of the same database restored: the same messages at the same ids up to
    # a point, but a message edited since is back to its earlier text.
    path = _database(tmp_path, ["original words"])
    indexer.catch_up(path)
    conn = connect(path)
    conn.execute("UPDATE messages SET body = 'edited words' WHERE id = 1")
    search_store.message_changed(conn, 1)
    conn.close()
    indexer.catch_up(path)
    assert _indexed(path) == {1: "edited words"}
    conn = connect(path)  # the backup: before the edit
    conn.execute("UPDATE messages SET body = 'original words' WHERE id = 1")
    conn.execute("DELETE FROM search_changes")
    conn.close()
    indexer.catch_up(path)
    assert _indexed(path) == {1: "original words"}
