"""``room copy`` (room.actions.store_copy, docs/storage.md "Moving a server between stores"):
a populated SQLite server (a project with something in every part: tests.test_packs.build)
copied to PostgreSQL (the tests' private cluster) and back to a new data folder; every table's
rows compared across the three, ids kept, PostgreSQL's sequences past the copied ids, the
search finding the same on each, each its own cluster id, a non-empty target refused with
nothing written."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from room.actions import message_edits
from room.actions.store_copy import CopyError, Side, columns, copy_store, open_side, tables
from room.cli import EXIT_NOT_EMPTY, EXIT_OK, main
from room.store import cluster as cluster_store
from room.store import search as search_store
from room.store.dialect import Connection
from room.store.migrate import connect as sqlite_connect
from room.store.pg import connect as pg_connect
from tests.support.task_world import World
from tests.test_packs import build

pytestmark = pytest.mark.anyio


def everything(side: Side) -> dict[str, list[tuple[Any, ...]]]:
    """Every copied table's rows, sorted (a float that is whole compared as the integer)."""

    def norm(v: Any) -> Any:
        return int(v) if isinstance(v, float) and v.is_integer() else v

    out = {}
    for table in tables(side):
        names = columns(side, table)
        rows = side.conn.execute(f"SELECT {', '.join(names)} FROM {table}").fetchall()
        out[table] = sorted((tuple(norm(v) for v in r) for r in rows), key=repr)
    return out


def hits(conn: Connection, project_id: int, q: str) -> set[tuple[str, int]]:
    found = search_store.search(conn, project_id, q, limit=100)["results"]
    return {(r["kind"], r["id"]) for r in found}


async def test_a_server_copies_to_postgresql_and_back_with_everything(
    world: World, tmp_path: Path, pg_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    await build(world)
    gone = await world.read(
        lambda c: c.execute("SELECT id FROM messages WHERE body = '收到'").fetchone()[0]
    )
    await message_edits.delete_message(world.core, world["lin"], gone)
    await world.core.search_indexer.settle(5)  # type: ignore[union-attr]
    # Through the command, while the source's server runs (the copy reads one snapshot).
    assert main(["copy", "--from", str(tmp_path), "--to", pg_dsn, "--json"]) == EXIT_OK
    report = json.loads(capsys.readouterr().out)
    back = tmp_path / "back"
    again = copy_store(pg_dsn, str(back)).to_dict()

    source, pg, copy = (
        open_side(str(tmp_path), source=True),
        open_side(pg_dsn, source=True),
        open_side(str(back), source=True),
    )
    try:
        rows = everything(source)
        assert sum(len(r) for r in rows.values()) > 100
        assert {t for t, r in rows.items() if r} >= {
            "users", "projects", "members", "messages", "message_edits", "deliveries",
            "tasks", "decisions", "memory_entries", "search_records", "reactions",
            "attachments", "route_changes", "audit_events",
        }  # fmt: skip
        assert everything(pg) == rows
        assert everything(copy) == rows
        for r in (report, again):
            assert {t: v["rows"] for t, v in r["tables"].items()} == {
                t: len(v) for t, v in rows.items()
            }
            assert all(v["rows"] == v["target_rows"] for v in r["tables"].values())
        assert report["message_bodies_sha256"] == again["message_bodies_sha256"]
        assert report["tables"]["messages"]["sequence"] == max(r[0] for r in rows["messages"])

        # The search finds the same on the three (their indexes rebuilt by the copy).
        search_store.attach_index(source.sqlite, tmp_path / "room.sqlite")
        search_store.attach_index(copy.sqlite, back / "room.sqlite")
        pid = world.project_id
        for q in ("API", "端口", "一个聊天室", "提交前*", "明天见", "收到"):
            expected = hits(source.conn, pid, q)
            assert hits(pg.conn, pid, q) == expected == hits(copy.conn, pid, q), q
        assert hits(pg.conn, pid, "端口") == {("fact", 1)}
        assert hits(pg.conn, pid, "收到") == set()  # the deleted message

        # Each copy is a new log of record, a cluster of its own on the bus: its migration
        # drew its own id, the source's was not copied over it (room.store.schema_cluster).
        ids = [cluster_store.cluster_id(side.conn) for side in (source, pg, copy)]
        assert len(set(ids)) == 3 and all(len(i) == 16 for i in ids), ids
    finally:
        for side in (source, pg, copy):
            side.conn.close()

    # Ids from PostgreSQL's sequences come after the copied ones.
    conn = pg_connect(pg_dsn)
    try:
        new = conn.execute(
            "INSERT INTO users (handle, display_name, created_at) VALUES ('new', 'N', 0)"
            " RETURNING id"
        ).fetchone()[0]
        assert new == max(r[0] for r in rows["users"]) + 1
    finally:
        conn.close()


def test_a_target_that_holds_anything_is_refused_unchanged(
    tmp_path: Path, pg_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "src"
    source.mkdir()
    conn = sqlite_connect(source / "room.sqlite")
    from room.store.migrate import migrate

    migrate(conn, source / "room.sqlite", now=0.0)
    conn.execute("INSERT INTO users (handle, display_name, created_at) VALUES ('a', 'A', 0)")
    conn.close()
    assert copy_store(str(source), pg_dsn).to_dict()["rows"] == 1
    # Again into the same database: refused, exit 7, one JSON line, nothing written.
    assert main(["copy", "--from", str(source), "--to", pg_dsn]) == EXIT_NOT_EMPTY
    refusal = json.loads(capsys.readouterr().err.strip().splitlines()[-1])
    assert (refusal["code"], refusal["exit"], refusal["details"]["tables"]) == (
        "target_not_empty",
        EXIT_NOT_EMPTY,
        {"users": 1},
    )
    pg = pg_connect(pg_dsn)
    try:
        assert pg.execute("SELECT count(*) FROM users").fetchone()[0] == 1
    finally:
        pg.close()
    # A source that is not there, and one at an older schema, are refused too.
    with pytest.raises(CopyError) as missing:
        copy_store(str(tmp_path / "nowhere"), str(tmp_path / "t1"))
    assert missing.value.code == "source_missing"
    old = tmp_path / "old"
    old.mkdir()
    sqlite3.connect(old / "room.sqlite").execute("PRAGMA user_version = 3").connection.close()
    with pytest.raises(CopyError) as stale:
        copy_store(str(old), str(tmp_path / "t2"))
    assert stale.value.code == "source_not_current"


def test_a_copy_that_differs_from_its_source_is_rolled_back(
    tmp_path: Path, pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check before the commit catches a row lost on the way (here: the writer made to
    drop the last message) and nothing of the copy stays."""
    from room.actions import store_copy
    from room.store.migrate import migrate

    source = tmp_path / "src"
    source.mkdir()
    conn = sqlite_connect(source / "room.sqlite")
    migrate(conn, source / "room.sqlite", now=0.0)
    conn.execute("INSERT INTO projects (id, name, created_at, updated_at) VALUES (1, 'p', 0, 0)")
    for i in range(1, 4):
        conn.execute(
            "INSERT INTO messages (id, project_id, seq, body, frame, created_at)"
            " VALUES (?, 1, ?, ?, '{}', 0)",
            (i, i, f"message {i}"),
        )
    conn.close()
    real_write = store_copy._write

    def lossy(target: Side, table: str, names: list[str], rows: Any) -> None:
        got = list(rows)
        real_write(target, table, names, got[:-1] if table == "messages" else got)

    monkeypatch.setattr(store_copy, "_write", lossy)
    with pytest.raises(CopyError) as wrong:
        copy_store(str(source), pg_dsn)
    assert wrong.value.code == "copy_mismatch"
    assert wrong.value.details["tables"] == {
        "messages": {"rows": 3, "target_rows": 2},
        "messages.body": "sha256 differs",
    }
    pg = pg_connect(pg_dsn)
    try:
        counts = [
            pg.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("projects", "messages")
        ]
        assert counts == [0, 0]
    finally:
        pg.close()
