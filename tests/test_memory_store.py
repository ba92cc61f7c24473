"""Memory records: the pure rules (room.rules.records) and the SQL (room.store.memory) on a real,
migrated database."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from room.rules import records
from room.rules.records import RecordError
from room.store import memory as memory_store
from room.store.migrate import connect, migrate


@pytest.fixture
def conn(tmp_path: Path) -> sqlite3.Connection:
    path = tmp_path / "room.sqlite"
    found = connect(path)
    migrate(found, path, now=time.time())
    found.execute(
        "INSERT INTO projects (id, name, created_at, updated_at) VALUES (1, '甲', 0, 0),"
        " (2, '乙', 0, 0)"
    )
    return found


def _code(kind: str, raw: dict[str, object]) -> tuple[str, object]:
    with pytest.raises(RecordError) as caught:
        records.validate(kind, raw)
    return caught.value.code, caught.value.details.get("field")


# -- the pure rules -------------------------------------------------------------------------------


def test_each_kind_validates_its_fields_and_trims() -> None:
    assert records.validate("fact", {"text": "  用 uv 装依赖 "}) == {"text": "用 uv 装依赖"}
    assert records.validate(
        "progress", {"text": "登录页", "stage": "实现中", "next": "写测试", "tags": ["ui", "ui"]}
    ) == {"text": "登录页", "stage": "实现中", "next": "写测试", "tags": ["ui"]}
    assert records.validate("session", {"summary": "修好了", "did": "改 a.py"}) == {
        "summary": "修好了", "did": "改 a.py", "verified": "", "next": "", "blocked": "",
    }  # fmt: skip
    assert records.validate("reference", {"ref_kind": "dir", "target": "src/"})["note"] == ""
    assert records.validate("summary", {"sections": {"what": "聊天室"}})["sections"] == {
        "what": "聊天室", "run": "", "where": "", "status": "", "pitfalls": "",
    }  # fmt: skip


def test_bad_records_are_refused_with_the_field() -> None:
    assert _code("progress", {"text": "x", "stage": "  ", "next": "y"}) == ("empty_field", "stage")
    assert _code("progress", {"text": "x", "stage": "s"}) == ("empty_field", "next")
    assert _code("session", {"did": "x"}) == ("empty_field", "summary")
    assert _code("fact", {"text": "汉" * 400_000}) == ("record_too_large", "text")
    assert _code("fact", {"text": "x", "author_id": 3}) == ("unknown_field", "author_id")
    assert _code("reference", {"ref_kind": "disk", "target": "/"}) == ("bad_field", "ref_kind")
    assert _code("fact", {"text": "坏\ud800"}) == ("bad_text", "text")
    assert _code("summary", {"sections": {"how": "x"}}) == ("unknown_field", "sections.how")
    assert _code("summary", {"sections": {"what": "长" * 5000}}) == (
        "record_too_large", "sections.what",
    )  # fmt: skip
    with pytest.raises(RecordError) as caught:
        records.check_kind("memo")
    assert caught.value.code == "unknown_kind"


def test_a_cap_archives_the_oldest_whole_entries_only() -> None:
    assert records.over_cap("fact", [1000] * 24) == 0
    assert records.over_cap("fact", [1000] * 26) == 2  # 24 KiB = 24,576 bytes: 24 fit
    assert records.over_cap("session", [10] * 201) == 1
    assert records.over_cap("progress", [10] * 600) == 88
    assert records.over_cap("reference", [2000] * 100) == 0
    # Two Chinese characters are six bytes: the count is bytes, not characters.
    assert records.size_of("fact", {"text": "汉字"}) == 6


def test_summary_text_labels_every_section_and_empty_ones_read_zanwu() -> None:
    text = records.section_text({"what": "一个聊天室", "run": ""})
    assert text.splitlines() == [
        "这是什么：一个聊天室", "怎么跑和怎么测：暂无", "东西都在哪：暂无", "现状：暂无", "坑：暂无",
    ]  # fmt: skip


def test_references_are_the_same_with_or_without_a_trailing_slash() -> None:
    a = records.reference_key({"ref_kind": "dir", "target": "src/"})
    assert a == records.reference_key({"ref_kind": "dir", "target": "src"})
    assert a != records.reference_key({"ref_kind": "file", "target": "src"})


# -- the SQL ---------------------------------------------------------------------------------------


def _add(
    conn: sqlite3.Connection, kind: str, body: dict[str, object], at: float, p: int = 1
) -> int:
    return memory_store.insert_entry(
        conn, project_id=p, kind=kind, body=body, size=records.size_of(kind, body),
        author_id=None, now=at,
    )  # fmt: skip


def test_entries_revisions_and_archive(conn: sqlite3.Connection) -> None:
    first = _add(conn, "fact", {"text": "一"}, 10.0)
    second = _add(conn, "fact", {"text": "二"}, 11.0)
    _add(conn, "fact", {"text": "别的项目"}, 12.0, p=2)
    memory_store.update_entry(
        conn, entry_id=first, project_id=1, rev=2, body={"text": "一（改）"}, size=12,
        author_id=None, now=13.0,
    )  # fmt: skip
    assert [e["body"]["text"] for e in memory_store.entries(conn, 1, "fact")] == ["二", "一（改）"]
    assert [
        e["id"] for e in memory_store.entries(conn, 1, "fact", newest_first=False, limit=1)
    ] == [first]
    assert [r["body"]["text"] for r in memory_store.revisions(conn, first)] == ["一", "一（改）"]
    found = memory_store.entry(conn, first)
    assert found is not None and found["rev"] == 2 and found["updated_at"] == 13.0
    memory_store.archive(conn, [first], 14.0)
    assert [e["id"] for e in memory_store.entries(conn, 1, "fact")] == [second]
    assert [e["id"] for e in memory_store.entries(conn, 1, "fact", archived=True)] == [first]
    assert memory_store.archived_counts(conn, 1) == {"fact": 1}
    assert memory_store.live_sizes(conn, 1, "fact") == [(second, 3)]


def test_version_summary_and_sessions_since(conn: sqlite3.Connection) -> None:
    assert memory_store.memory_version(conn, 1) == 0
    assert memory_store.bump_version(conn, 1, 1.0) == 1
    assert memory_store.bump_version(conn, 1, 2.0) == 2
    assert memory_store.memory_version(conn, 2) == 0
    assert memory_store.summary(conn, 1) is None
    _add(conn, "summary", {"sections": {"what": "x"}}, 5.0)
    summary = memory_store.summary(conn, 1)
    assert summary is not None and summary["updated_at"] == 5.0
    with pytest.raises(sqlite3.IntegrityError):  # one summary per project
        _add(conn, "summary", {"sections": {}}, 6.0)
    for at in (4.0, 6.0, 7.0):
        _add(conn, "session", {"summary": f"t{at}"}, at)
    assert memory_store.sessions_since(conn, 1, 5.0) == 2
    assert memory_store.sessions_since(conn, 2, 0.0) == 0


def test_delete_project_removes_only_that_project(conn: sqlite3.Connection) -> None:
    _add(conn, "fact", {"text": "一"}, 1.0)
    _add(conn, "fact", {"text": "二"}, 1.0, p=2)
    memory_store.bump_version(conn, 1, 1.0)
    counts = memory_store.delete_project(conn, 1)
    assert counts == {"memory_revisions": 1, "memory_entries": 1, "memory_versions": 1}
    assert memory_store.entries(conn, 2, "fact")[0]["body"] == {"text": "二"}


def test_a_project_trashed_before_0009_still_matches_its_snapshot(tmp_path: Path) -> None:
    """0009 adds columns to decisions; a digest written before it must still match after it."""
    from room.store import tasks as tasks_store
    from room.store.migrate import _split_sql
    from room.store.schema import MIGRATIONS

    path = tmp_path / "old.sqlite"
    conn = connect(path)
    names = [m.name for m in MIGRATIONS]
    for migration in MIGRATIONS[: names.index("0009_memory")]:
        for statement in _split_sql(migration.sql):
            conn.execute(statement)
    conn.execute(f"PRAGMA user_version = {names.index('0009_memory')}")
    conn.execute("INSERT INTO projects (id, name, created_at, updated_at) VALUES (1, '旧', 0, 0)")
    conn.execute(
        "INSERT INTO decisions (id, project_id, number, kind, title, status, created_at,"
        " updated_at) VALUES (1, 1, 1, 'decision', '存储', 'accepted', 0, 0)"
    )
    conn.execute(
        "INSERT INTO decision_revisions (project_id, decision_id, revision, context, decision,"
        " consequences, created_at) VALUES (1, 1, 1, '单机', 'SQLite', '', 0)"
    )
    before = tasks_store.digest_rows(conn, 1)
    assert "0009_memory" in migrate(conn, path, now=time.time())
    assert tasks_store.digest_rows(conn, 1) == before
    conn.execute("UPDATE decision_revisions SET constraints = '一台机器'")
    assert tasks_store.digest_rows(conn, 1)["decision_revisions"] != before["decision_revisions"]
