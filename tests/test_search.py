"""Search over a real app: what is found, what never is (another project's text, a purged
project's, a deleted message, an edited message's earlier text), bad queries, filters, memory
records, the migration's backfill, indexing turned off and back on, and a ``/ws`` round trip
on a real server."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from room.actions import message_edits
from room.rules.entities import Member
from room.services import RateLimiter
from room.store import indexer
from room.store import search as search_store
from room.store.migrate import _split_sql, connect, migrate
from room.store.schema import MIGRATIONS
from tests.support.inproc import App, owner_user, running_app
from tests.support.search import found_ids, search, search_status, write_message
from tests.support.server import ServerProcess
from tests.support.wsclient import Client


def member(app: App, project_id: int, handle: str) -> Member:
    roster = app.call(app.core.rosters.get, project_id)
    found = next(m for m in roster.members.values() if m.handle == handle)
    return found


@pytest.fixture
def owner(app: App, project: tuple[int, int]) -> Member:
    return member(app, project[0], "owner")


def test_two_chinese_characters_find_a_message_inside_a_longer_word(
    app: App, project: tuple[int, int], owner: Member
) -> None:
    project_id, _ = project
    hit = write_message(app, project_id, owner, "明天我们需要迁移数据库到新的服务器")
    write_message(app, project_id, owner, "午饭吃什么")
    for q in ("数据", "据库", "迁移数据库", "库", "服务器 数据"):
        body = search(app, project_id, q=q)
        assert found_ids(body) == [hit], q
    result = search(app, project_id, q="数据")["results"][0]
    assert result["kind"] == "message" and result["message_id"] == hit and result["seq"] >= 1
    assert result["snippet_html"] == "明天我们需要迁移<mark>数据</mark>库到新的服务器"
    assert result["author"] == {
        "id": owner.id,
        "handle": "owner",
        "display_name": owner.display_name,
        "kind": "human",
    }
    assert result["at"].endswith("Z") and isinstance(result["rank"], float)
    assert search(app, project_id, q="数库")["results"] == []


def test_english_words_prefixes_phrases_and_ranking(
    app: App, project: tuple[int, int], owner: Member
) -> None:
    project_id, _ = project
    once = write_message(app, project_id, owner, "the deployment failed on the staging box")
    twice = write_message(app, project_id, owner, "deployment notes: deployment needs a token")
    write_message(app, project_id, owner, "nothing to see <b>here</b>")
    assert found_ids(search(app, project_id, q="deployment")) == [twice, once]  # BM25
    assert set(found_ids(search(app, project_id, q="deploy*"))) == {once, twice}
    assert found_ids(search(app, project_id, q='"deployment failed"')) == [once]
    assert found_ids(search(app, project_id, q="deployment -token")) == [once]
    snippet = search(app, project_id, q="here")["results"][0]["snippet_html"]
    assert snippet == "nothing to see &lt;b&gt;<mark>here</mark>&lt;/b&gt;"


def test_a_sent_message_is_found_and_filters_narrow_it(app: App, project: tuple[int, int]) -> None:
    project_id, _ = project
    status, sent = app.request(
        "POST",
        f"/api/projects/{project_id}/messages",
        {"body": "请检查缓存配置"},
        cookie=app.owner_cookie,
    )
    assert status == 201
    owner_id = sent["message"]["author_id"]
    ours = search(app, project_id, q="缓存", author=owner_id)
    assert found_ids(ours) == [sent["message_id"]]
    assert found_ids(search(app, project_id, q="缓存", author="@owner")) == [sent["message_id"]]
    assert found_ids(search(app, project_id, q="缓存", kind="fact")) == []
    assert found_ids(search(app, project_id, q="缓存", author="owner", until="2000-01-01")) == []
    assert found_ids(search(app, project_id, q="缓存", author="owner", since="2000-01-01")) == [
        sent["message_id"]
    ]
    status, body = search_status(app, project_id, q="缓存", author="nobody")
    assert (status, body["error"]["code"]) == (404, "unknown_author")


@pytest.mark.parametrize(
    ("params", "code", "reason"),
    [
        ({"q": '"*" OR'}, "bad_query", "empty"),
        ({"q": ""}, "bad_query", "empty"),
        ({}, "bad_query", "empty"),
        ({"q": '"'}, "bad_query", "empty"),
        ({"q": "-secret"}, "bad_query", "only_exclusions"),
        ({"q": "x" * 501}, "bad_query", "too_long"),
        ({"q": "ok", "kind": "gossip"}, "unknown_kind", None),
        ({"q": "ok", "limit": "0"}, "bad_limit", None),
        ({"q": "ok", "limit": "many"}, "bad_limit", None),
        ({"q": "ok", "since": "last week"}, "bad_time", None),
    ],
)
def test_bad_queries_are_400_with_a_reason(
    app: App, project: tuple[int, int], params: dict[str, str], code: str, reason: str | None
) -> None:
    status, body = search_status(app, project[0], **params)
    assert status == 400 and body["error"]["code"] == code, body
    if reason is not None:
        assert body["error"]["details"]["reason"] == reason


def test_deleted_and_edited_messages(app: App, project: tuple[int, int], owner: Member) -> None:
    project_id, _ = project
    gone = write_message(app, project_id, owner, "机密的密码是蓝色海豚")
    edited = write_message(app, project_id, owner, "旧的说法：橙色长颈鹿")
    assert found_ids(search(app, project_id, q="海豚")) == [gone]
    app.call(message_edits.delete_message, app.core, owner, gone)
    app.call(message_edits.edit_message, app.core, owner, edited, "新的说法：紫色企鹅")
    assert search(app, project_id, q="海豚")["results"] == []
    assert search(app, project_id, q="长颈鹿")["results"] == []  # the earlier version
    body = search(app, project_id, q="企鹅")
    assert found_ids(body) == [edited]
    assert body["results"][0]["snippet_html"] == "新的说法：紫色<mark>企鹅</mark>"


def test_never_another_projects_text(app: App, project: tuple[int, int], owner: Member) -> None:
    project_id, _ = project
    other_user, other_cookie = app.new_user("li", "小李")
    other_id, other_members, _ = app.project_with("别的项目", other_user)
    write_message(app, other_id, other_members["li"], "别人的秘密计划")
    write_message(app, project_id, owner, "我们的公开计划")
    assert [r["snippet_html"] for r in search(app, project_id, q="计划")["results"]] == [
        "我们的公开<mark>计划</mark>"
    ]
    # The owner is not in the other project: nothing to read there.
    status, body = search_status(app, other_id, q="秘密")
    assert status == 404 and body["error"]["code"] == "not_member"
    status, body = search_status(app, project_id, cookie=other_cookie, q="计划")
    assert status == 404 and body["error"]["code"] == "not_member"
    # Records are per project too.
    app.write(lambda conn, tx: _record(conn, other_id, 900, "fact", "别人的秘密事实"))
    assert search(app, project_id, q="秘密")["results"] == []


def _record(
    conn: sqlite3.Connection, project_id: int, record_id: int, kind: str, text: str
) -> None:
    search_store.index_record(
        conn, project_id=project_id, record_id=record_id, kind=kind, author_id=None, at=1e9,
        text=text,
    )  # fmt: skip


def test_memory_records_including_archived_ones(app: App, project: tuple[int, int]) -> None:
    project_id, _ = project
    app.write(lambda conn, tx: _record(conn, project_id, 7, "fact", "测试用 pytest -q 运行"))
    app.write(lambda conn, tx: _record(conn, project_id, 8, "session", "归档的会话：修好了登录"))
    app.write(lambda conn, tx: _record(conn, project_id, 7, "fact", "测试用 scripts/test 运行"))
    body = search(app, project_id, q="测试")
    assert [(r["kind"], r["record_id"]) for r in body["results"]] == [("fact", 7)]
    assert body["results"][0]["snippet_html"] == "<mark>测试</mark>用 scripts/test 运行"
    assert search(app, project_id, q="pytest")["results"] == []  # replaced, not added
    assert found_ids(search(app, project_id, q="登录", kind="session,fact")) == [8]
    assert found_ids(search(app, project_id, q="登录", kind="message")) == []
    app.write(lambda conn, tx: search_store.unindex_record(conn, 8))
    assert search(app, project_id, q="登录")["results"] == []
    # The Python function the memory_search tool calls.
    with app.db() as conn:
        direct = search_store.search(conn, project_id, "scripts", kinds=["fact"])
    assert [r["record_id"] for r in direct["results"]] == [7]


def test_purged_project_text_is_gone(app: App, project: tuple[int, int], owner: Member) -> None:
    project_id, _ = project
    write_message(app, project_id, owner, "即将清除的内容：火烈鸟")
    app.write(lambda conn, tx: _record(conn, project_id, 11, "fact", "火烈鸟事实"))
    assert len(search(app, project_id, q="火烈鸟")["results"]) == 2
    status, _ = app.request(
        "POST", f"/api/projects/{project_id}/lifecycle", {"op": "trash"}, cookie=app.owner_cookie
    )
    assert status == 200
    assert len(search(app, project_id, q="火烈鸟")["results"]) == 2  # trash keeps it readable
    status, body = app.request(
        "POST",
        f"/api/projects/{project_id}/purge",
        {"confirm_name": "输入", "confirmed": True},
        cookie=app.owner_cookie,
    )
    assert status == 200 and body["state"] == "purged", body
    counts = body["steps"]["search"]
    assert counts["search_records"] == 1 and counts["search_messages"] >= 1  # + system notices
    status, body = search_status(app, project_id, q="火烈鸟")
    assert status in (403, 404)
    assert app.core.search_indexer is not None
    assert app.call(app.core.search_indexer.settle, 10.0)
    with app.db() as conn:
        search_store.attach_index(conn, app.settings.db_path)
        match = "SELECT count(*) FROM {} WHERE {} MATCH '\"火烈\"'"
        left = [
            conn.execute(match.format(*names)).fetchone()[0]
            for names in (("search_fts", "search_fts"), ("ix.message_fts", "message_fts"))
        ]
        records = conn.execute("SELECT count(*) FROM search_records").fetchone()[0]
    assert (left, records) == ([0, 0], 0)


def test_searches_are_rate_limited(app: App, project: tuple[int, int]) -> None:
    app.core.chatter = RateLimiter(4.0, 3, clock=lambda: 100.0)  # a frozen clock: no refill
    for _ in range(3):
        assert search_status(app, project[0], q="anything")[0] == 200
    status, body = search_status(app, project[0], q="anything")
    assert status == 429 and body["error"]["code"] == "rate_limited"
    assert body["error"]["details"]["retry_after_ms"] > 0


def test_existing_messages_are_indexed_after_the_migration(tmp_path: Path) -> None:
    path = tmp_path / "room.sqlite"
    conn = connect(path)
    ours = next(i for i, m in enumerate(MIGRATIONS) if m.name == "0010_search")
    for migration in MIGRATIONS[:ours]:
        for statement in _split_sql(migration.sql):
            conn.execute(statement)
    conn.execute(f"PRAGMA user_version = {ours}")
    conn.execute("INSERT INTO projects (id, name, created_at, updated_at) VALUES (1, 'p', 0, 0)")
    for i, body in enumerate(["早就写好的数据库笔记", "deleted 数据", "another note"], start=1):
        conn.execute(
            "INSERT INTO messages (id, project_id, seq, body, frame, created_at, deleted_at)"
            " VALUES (?, 1, ?, ?, '{}', 0, ?)",
            (i, i, body, 5.0 if i == 2 else None),
        )
    assert "0010_search" in migrate(conn, path, now=0.0)
    indexer.catch_up(path)  # what the server's indexer does first when it starts
    search_store.attach_index(conn, path)
    found = search_store.search(conn, 1, "数据")
    assert [r["message_id"] for r in found["results"]] == [1]
    assert list((tmp_path / "backups").iterdir())  # the data was backed up first
    conn.close()


def test_indexing_off_then_on_catches_up_from_the_watermark(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with running_app(data, search_index_messages=False) as app:
        owner = owner_user(app)
        project_id, members, _ = app.project_with("开关", owner)
        write_message(app, project_id, members["owner"], "关着的时候写的：独角兽")
        assert search(app, project_id, q="独角兽")["results"] == []
        assert indexer.lag(data / "room.sqlite")["messages"] > 0
    with running_app(data) as app:
        assert len(search(app, project_id, q="独角兽")["results"]) == 1
    assert indexer.lag(data / "room.sqlite") == {"messages": 0, "changes": 0}


@pytest.mark.anyio
async def test_ws_search_round_trip(server: ServerProcess, clients: list[Client]) -> None:
    session = server.login()
    project_id = int(server.get_json("/api/me", cookie=session.cookie)["projects"][0]["id"])
    client = await Client.open(server.ws_url, cookie=session.cookie, origin=server.origin)
    await client.wait_for("hello")
    await client.send(
        {"type": "send", "project_id": project_id, "client_txn_id": "t1", "body": "周五发布新版本"}
    )
    ack = await client.wait_for("ack")
    await client.send(
        {"type": "search", "req_id": "s1", "project_id": project_id, "q": "发布", "limit": 5}
    )
    got = await client.wait_for("search_results")
    assert got["req_id"] == "s1" and got["project_id"] == project_id and got["query"] == "发布"
    mine = [r for r in got["results"] if r["message_id"] == ack["message_id"]]
    assert mine and mine[0]["snippet_html"] == "周五<mark>发布</mark>新版本"
    await client.send({"type": "search", "req_id": "s2", "project_id": project_id, "q": '"*" OR'})
    error = await client.wait_for("error")
    assert (error["req_id"], error["code"]) == ("s2", "bad_query")
    await client.send(
        {"type": "search", "req_id": "s3", "project_id": project_id + 1000, "q": "发布"}
    )
    error = await client.wait_for("error")
    assert error["req_id"] == "s3" and error["code"] == "not_member"
    await client.send(
        {"type": "search", "req_id": "s4", "project_id": project_id, "q": "发布", "author": 1}
    )
    error = await client.wait_for("error")
    assert error["code"] == "forged_author"


def test_a_very_common_word_ranks_the_newest_matches(
    app: App, project: tuple[int, int], owner: Member, monkeypatch: pytest.MonkeyPatch
) -> None:
    project_id, _ = project
    ids = [write_message(app, project_id, owner, f"常见词 第{i}条") for i in range(5)]
    assert search(app, project_id, q="常见")["capped"] is False
    monkeypatch.setattr(search_store, "RANK_WINDOW", 3)
    body = search(app, project_id, q="常见")
    assert body["capped"] is True and sorted(found_ids(body)) == ids[-3:]


def test_only_the_best_matches_are_returned_each_with_its_own_row(
    app: App, project: tuple[int, int], owner: Member
) -> None:
    # The window is ranked in SQLite and only the best `limit` rows are read back in full:
    # each result must carry its own message's seq, text and score, best first.
    project_id, _ = project
    bodies = ["rollout once", "rollout rollout rollout", "filler words", "rollout rollout"]
    ids = [write_message(app, project_id, owner, body) for body in bodies]
    body = search(app, project_id, q="rollout", limit=2)
    results = body["results"]
    assert [r["message_id"] for r in results] == [ids[1], ids[3]] and body["capped"] is False
    assert results[0]["rank"] > results[1]["rank"]
    assert [r["snippet_html"].count("<mark>") for r in results] == [3, 2]
    assert results[0]["seq"] != results[1]["seq"]
