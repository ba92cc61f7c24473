"""Migration ``0025_thread_frames`` (room.store.schema_thread_frames): roots written before
0023 on PostgreSQL get their ``thread`` summary in their stored frame, byte for byte what the
live path writes; on SQLite, where 0023 did it, the migration changes nothing.

The PostgreSQL side runs the real app on the tests' private cluster (tests/support/postgres.py):
threads made by real replies (one root with a reaction, whose ``reactions`` stay the last key;
one reply to a reply; a message followed before any reply), then the roots' summaries taken out
of their frames as a database migrated through 0023 holds them, and 0025 applied again."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest

from room.store import pg_migrate
from room.store.migrate import migrate as sqlite_migrate
from room.store.pg import connect
from room.store.schema import MIGRATIONS
from tests.support.inproc import App, running_app

NAME = "0025_thread_frames"


def post(app: App, path: str, body: dict[str, Any], status: int = 201) -> Any:
    got, answer = app.request("POST", path, body, cookie=app.owner_cookie)
    assert got == status, answer
    return answer


def arrange(app: App) -> dict[str, int]:
    """Two threads (one root with a reaction), a reply to a reply, a followed lone message."""
    project = post(app, "/api/projects", {"name": "旧话题", "agents": []})["project"]["id"]

    def say(body: str, reply_to: int | None = None) -> int:
        sent = post(
            app, f"/api/projects/{project}/messages",
            {"body": body, "client_txn_id": f"t-{body}", "reply_to": reply_to},
        )  # fmt: skip
        return int(sent["message_id"])

    plain = say("根一")
    first = say("回一", plain)
    say("回二", first)  # a reply to a reply joins the root's thread
    liked = say("根二")
    post(app, f"/api/messages/{liked}/reactions", {"emoji": "👍"}, 200)
    say("回三", liked)
    lone = say("没人回")
    status, _ = app.request(
        "PUT", f"/api/messages/{lone}/thread/follow", {"following": True},
        cookie=app.owner_cookie,
    )  # fmt: skip
    assert status == 200
    return {"plain": plain, "liked": liked, "lone": lone}


def without_thread(frame: str) -> str:
    obj = json.loads(frame)
    obj.pop("thread", None)
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def test_postgresql_roots_get_their_thread_summary_back(tmp_path: Path, pg_dsn: str) -> None:
    with running_app(tmp_path / "data", database_url=pg_dsn, demo=False) as app:
        ids = arrange(app)
    conn = connect(pg_dsn)
    try:
        frames = dict(conn.execute("SELECT id, frame FROM messages ORDER BY id").fetchall())
        plain, liked, lone = (json.loads(frames[ids[k]]) for k in ("plain", "liked", "lone"))
        # What the live path wrote: the summaries, thread before reactions, none on the lone one.
        assert plain["thread"]["replies"] == 2 and liked["thread"]["replies"] == 1
        assert list(liked)[-2:] == ["thread", "reactions"]
        assert "thread" not in lone
        # As a database migrated through 0023 before PostgreSQL was served: no summaries.
        for message_id, frame in frames.items():
            conn.execute(
                "UPDATE messages SET frame = ? WHERE id = ?", (without_thread(frame), message_id)
            )
        conn.execute("DELETE FROM schema_migrations WHERE name = ?", (NAME,))
        stripped = json.loads(
            conn.execute("SELECT frame FROM messages WHERE id = ?", (ids["plain"],)).fetchone()[0]
        )
        assert "thread" not in stripped

        assert pg_migrate.migrate(conn) == [NAME]
        after = dict(conn.execute("SELECT id, frame FROM messages ORDER BY id").fetchall())
        assert after == frames  # every frame byte for byte as the live path wrote it
        assert pg_migrate.migrate(conn) == []
    finally:
        conn.close()


def test_sqlite_roots_already_have_it_and_nothing_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    with running_app(data, demo=False) as app:
        ids = arrange(app)
    path = data / "room.sqlite"
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA foreign_keys = ON")
        before = dict(conn.execute("SELECT id, frame FROM messages").fetchall())
        assert json.loads(before[ids["plain"]])["thread"]["replies"] == 2
        index = [m.name for m in MIGRATIONS].index(NAME)
        conn.execute(f"PRAGMA user_version = {index}")
        monkeypatch.setattr("room.store.migrate.MIGRATIONS", MIGRATIONS[: index + 1])
        monkeypatch.setattr("room.store.migrate.SCHEMA_VERSION", index + 1)
        assert sqlite_migrate(conn, path, now=time.time()) == [NAME]
        assert dict(conn.execute("SELECT id, frame FROM messages").fetchall()) == before
        # A root without its summary (none is left by 0023) would be repaired, with json_set.
        conn.execute(
            "UPDATE messages SET frame = json_remove(frame, '$.thread') WHERE id = ?",
            (ids["plain"],),
        )
        conn.execute(f"PRAGMA user_version = {index}")
        assert sqlite_migrate(conn, path, now=time.time()) == [NAME]
        repaired = conn.execute(
            "SELECT frame FROM messages WHERE id = ?", (ids["plain"],)
        ).fetchone()[0]
        assert json.loads(repaired) == json.loads(before[ids["plain"]])
    finally:
        conn.close()
