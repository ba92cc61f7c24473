"""Upgrades keep the data (issue 32; docs/deploy.md, "Upgrading").

An older release — the tree at :data:`OLD_RELEASE`, taken from this repository's history with
``git archive`` — serves a fresh data folder, filled through its HTTP API: projects, people,
messages, a plan's tasks, memory records, an attachment. The current code then starts on that
folder, migrates it, and every table's row count, a sample of the content (every message's
author, seq and body, the task keys, the memory texts, the attachment's bytes) are checked over
the current API. The copy the migration made first (``<data>/backups/room-v<N>-*.sqlite``) is
then put in a new folder and served by the older release again: the way back works.

The older release runs on this checkout's virtualenv: its dependencies are a subset of today's
(it lacked only psycopg and pytest-xdist, which it never imports). A clone without that commit
(a shallow one) cannot run this test and fails saying so; a tree that is not a git checkout
skips it.
"""

from __future__ import annotations

import io
import json
import shutil
import sqlite3
import subprocess
import tarfile
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from room.store.schema import SCHEMA_VERSION
from tests.support.server import ServerProcess, Session

pytestmark = pytest.mark.timeout(180)

ROOT = Path(__file__).resolve().parents[1]
# The last commit before migration 0019_send_rows (2026-12-03): schema 18, with projects, tasks,
# memory, attachments, reactions, research and the search indexer. Migrations 19 to today's run.
OLD_RELEASE = "9c5bd022fea595d66ddd16a53402b1181aa7408f"
OLD_SCHEMA = 18
# Tables that grow by design when a server starts or someone signs in: each start prints a new
# login link and audits its reconciliation, and the test signs in. They keep every old row; every
# other table keeps exactly its rows.
GROWING = {"sessions", "login_links", "audit_events"}


def git(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, timeout=60)


def extract_old_release(into: Path) -> Path:
    if git("rev-parse", "--git-dir").returncode != 0:
        pytest.skip("not a git checkout: the older release is read from this repository's history")
    if git("cat-file", "-e", f"{OLD_RELEASE}^{{commit}}").returncode != 0:
        shallow = git("rev-parse", "--is-shallow-repository").stdout.strip() == b"true"
        pytest.fail(
            f"the upgrade test needs commit {OLD_RELEASE} (the release at schema {OLD_SCHEMA}), "
            + (
                "and this clone is shallow: run `git fetch --unshallow` (CI: clone with full "
                "history, fetch-depth 0)"
                if shallow
                else "which this repository does not have"
            )
        )
    archive = git("archive", "--format=tar", OLD_RELEASE)
    assert archive.returncode == 0, archive.stderr
    into.mkdir()
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(into, filter="data")
    return into


def png(colour: str) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (80, 48), colour).save(out, "PNG")
    return out.getvalue()


def upload(server: ServerProcess, who: Session, project: int, name: str, content: bytes) -> Any:
    req = urllib.request.Request(
        f"{server.origin}/api/projects/{project}/attachments?"
        + urllib.parse.urlencode({"name": name}),
        data=content,
        headers={**who.headers, "Content-Type": "application/octet-stream"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        assert r.status == 201
        return json.loads(r.read())["attachment"]


def fetch_bytes(server: ServerProcess, who: Session, url: str) -> bytes:
    req = urllib.request.Request(
        f"{server.origin}{url}", headers={"Cookie": f"room_session={who.cookie}"}
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        return bytes(r.read())


def post(server: ServerProcess, who: Session, path: str, body: Any, expect: int = 201) -> Any:
    status, answer = server.request("POST", path, body, headers=who.headers)
    assert status == expect, (path, status, answer)
    return answer


def first_login(server: ServerProcess) -> Session:
    """Signed in with the link the server printed (the older release's own, since the current
    ``room login-link`` refuses a database at an older schema)."""
    return server.login(server.login_url.rsplit("/", 1)[-1])


def counts(db: Path) -> dict[str, int]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        tables = [
            str(name)
            for (name,) in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'"
                " AND name NOT LIKE 'sqlite_%' ORDER BY name"
            )
        ]
        return {t: int(conn.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0]) for t in tables}
    finally:
        conn.close()


def rows(db: Path, columns_of: Path | None = None) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every ordinary table, sorted, in the columns the tables have in
    ``columns_of`` (default: ``db`` itself), so an older database's rows compare with a newer
    one's. Full-text index tables are left out (compared by count)."""
    source = sqlite3.connect(f"file:{columns_of or db}?mode=ro", uri=True)
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        tables = [
            str(name)
            for (name, sql) in source.execute(
                "SELECT name, sql FROM sqlite_master WHERE type = 'table'"
                " AND name NOT LIKE 'sqlite_%' ORDER BY name"
            )
            if "VIRTUAL" not in str(sql).upper() and "_fts" not in str(name)
        ]
        found = {}
        for table in tables:
            columns = [str(c[1]) for c in source.execute(f'PRAGMA table_info("{table}")')]
            listed = ", ".join(f'"{c}"' for c in columns)
            found[table] = sorted(
                conn.execute(f'SELECT {listed} FROM "{table}"').fetchall(), key=repr
            )
        return found
    finally:
        conn.close()
        source.close()


def without_thread(row: tuple[Any, ...]) -> tuple[Any, ...]:
    """A messages row with the ``thread`` summary taken out of its stored wire object."""

    def strip(value: Any) -> Any:
        if isinstance(value, str) and value.startswith('{"id":') and '"thread":' in value:
            obj = json.loads(value)
            obj.pop("thread", None)
            return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
        return value

    return tuple(strip(v) for v in row)


def user_version(db: Path) -> int:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return int(conn.execute("PRAGMA user_version").fetchone()[0])
    finally:
        conn.close()


def timeline(server: ServerProcess, who: Session, project: int) -> list[tuple[int, int, str]]:
    """Every message of a project as (seq, author_id, body), oldest first."""
    page = server.get_json(f"/api/projects/{project}/messages?limit=200", cookie=who.cookie)
    assert not page["has_more"]
    return [(m["seq"], m["author_id"], m["body"]) for m in page["messages"]]


def fill(server: ServerProcess) -> dict[str, Any]:
    """Projects, people, messages, tasks, memory and an attachment, through the API."""
    owner = first_login(server)
    me = server.get_json("/api/me", cookie=owner.cookie)
    demo = int(me["projects"][0]["id"])
    second = int(post(server, owner, "/api/projects", {"name": "升级之前", "goal": "保留数据"})
                 ["project"]["id"])  # fmt: skip
    bob = server.invite(owner, second, "bob", "小博")
    for project in (demo, second):
        for i in range(12):
            who = bob if project == second and i % 3 == 0 else owner
            post(server, who, f"/api/projects/{project}/messages",
                 {"body": f"@{who.user['handle']} 升级前的第 {i} 条 message", "client_txn_id": uuid.uuid4().hex})  # fmt: skip
    picture = png("navy")
    attachment = upload(server, owner, second, "架构图.png", picture)
    post(server, owner, f"/api/projects/{second}/messages",
         {"body": "附件：架构图", "attachments": [attachment["id"]]})  # fmt: skip
    items = [
        {"key": "schema", "title": "核对表结构", "owner": "owner", "acceptance": ["行数一致"]},
        {"key": "restore", "title": "回退演练", "owner": "owner", "acceptance": ["旧版能读"]},
    ]
    post(server, owner, f"/api/projects/{second}/plan", {"goal": "升级演练", "items": items})
    for text in ("数据库每晚备份", "升级前先 room backup"):
        post(server, owner, f"/api/projects/{second}/memory/fact", {"text": text})
    return {
        "demo": demo,
        "second": second,
        "picture": picture,
        "timelines": {p: timeline(server, owner, p) for p in (demo, second)},
    }


def memory_text(server: ServerProcess, who: Session, project: int) -> str:
    """The project's facts as the API answers them (JSON text)."""
    found = server.get_json(f"/api/projects/{project}/memory/fact", cookie=who.cookie)
    return json.dumps(found, ensure_ascii=False)


def task_keys(server: ServerProcess, who: Session, project: int) -> set[str]:
    board = server.get_json(f"/api/projects/{project}/tasks", cookie=who.cookie)
    return {str(t["key"]) for t in board["tasks"]}


@pytest.fixture
def old_tree(tmp_path: Path) -> Iterator[Path]:
    yield extract_old_release(tmp_path / "old-release")


def test_an_older_release_s_data_survives_the_upgrade_and_its_backup_restores(
    tmp_path: Path, old_tree: Path
) -> None:
    data = tmp_path / "data"
    old = ServerProcess(data, cwd=old_tree).start()
    try:
        # It really is the older release that runs (today's code would have migrated further).
        assert user_version(data / "room.sqlite") == OLD_SCHEMA
        filled = fill(old)
    finally:
        old.stop()
    assert user_version(data / "room.sqlite") == OLD_SCHEMA
    before = counts(data / "room.sqlite")
    assert before["messages"] >= 25 and before["tasks"] == 2 and before["attachments"] == 1
    assert before["projects"] == 2 and before["users"] == 2

    new = ServerProcess(data).start()
    try:
        assert user_version(data / "room.sqlite") == SCHEMA_VERSION > OLD_SCHEMA
        owner = new.login()  # today's `room login-link`, on the migrated database
        after = counts(data / "room.sqlite")
        [copy] = sorted((data / "backups").glob(f"room-v{OLD_SCHEMA}-*.sqlite"))
        # Every table the old release had keeps its rows, value for value in its old columns.
        assert {t: n for t, n in after.items() if t in before and t not in GROWING} == {
            t: n for t, n in before.items() if t not in GROWING
        }
        old_rows = rows(copy)
        new_rows = rows(data / "room.sqlite", columns_of=copy)
        for table, old_table in old_rows.items():
            if table in GROWING:
                assert set(old_table) <= set(new_rows[table]), table
                assert after[table] > before[table], table
            elif table == "messages":
                # 0023_threads gives each thread's root its reply count (``thread``), nothing else.
                assert sorted(map(without_thread, new_rows[table]), key=repr) == old_table
                assert any('"thread":{"replies":' in str(v) for r in new_rows[table] for v in r)
            else:
                assert new_rows[table] == old_table, table
        for project, lines in filled["timelines"].items():
            assert timeline(new, owner, project) == lines
        second = filled["second"]
        assert task_keys(new, owner, second) == {"schema", "restore"}
        facts = memory_text(new, owner, second)
        assert "数据库每晚备份" in facts and "升级前先 room backup" in facts
        listed = new.get_json(f"/api/projects/{second}/messages?limit=200", cookie=owner.cookie)
        [with_file] = [m for m in listed["messages"] if m["body"] == "附件：架构图"]
        [picture] = with_file["meta"]["attachments"]
        assert fetch_bytes(new, owner, picture["url"]) == filled["picture"]
        # Still works as a server: a new message after the last seq.
        sent = post(new, owner, f"/api/projects/{second}/messages", {"body": "升级之后"})
        assert sent["seq"] == len(filled["timelines"][second]) + 1
    finally:
        new.stop()

    # The copy made before the migration: checked, at the old schema, every row of the old
    # release, and served again by the old release in a folder of its own.
    conn = sqlite3.connect(copy)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        conn.close()
    assert user_version(copy) == OLD_SCHEMA
    assert counts(copy) == before
    back = tmp_path / "rolled-back"
    back.mkdir(mode=0o700)
    shutil.copy2(copy, back / "room.sqlite")
    shutil.copytree(data / "attachments", back / "attachments")
    rolled = ServerProcess(back, cwd=old_tree).start()
    try:
        owner = first_login(rolled)
        for project, lines in filled["timelines"].items():
            assert timeline(rolled, owner, project) == lines
        assert task_keys(rolled, owner, filled["second"]) == {"schema", "restore"}
    finally:
        rolled.stop()
    assert user_version(back / "room.sqlite") == OLD_SCHEMA
