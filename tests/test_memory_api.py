"""Project memory over HTTP on the real app: people read and edit with history, agents only
read, nobody reaches another project, bad input is refused with nothing lost."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from room.rules.entities import iso
from tests.support.inproc import App, owner_user, running_app


class People:
    def __init__(self, app: App) -> None:
        self.app = app
        member, self.member_cookie = app.new_user("zhang", "小张")
        self.stranger, self.stranger_cookie = app.new_user("wang", "小王")
        self.project_id, self.members, self.token = app.project_with(
            "记忆项目", owner_user(app), member
        )
        self.other_id, _, self.other_token = app.project_with("别的项目", self.stranger)

    def owner(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        return self.app.request(method, path, body, cookie=self.app.owner_cookie)

    def member(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        return self.app.request(method, path, body, cookie=self.member_cookie)

    @property
    def base(self) -> str:
        return f"/api/projects/{self.project_id}/memory"

    def count(self) -> int:
        with self.app.db() as conn:
            return int(conn.execute("SELECT count(*) FROM memory_entries").fetchone()[0])


@pytest.fixture(params=["sqlite", "postgresql"])
def app(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[App]:
    """conftest's app on each store (``[postgresql]``: a fresh database of the tests' cluster)."""
    url = None if request.param == "sqlite" else str(request.getfixturevalue("pg_dsn"))
    with running_app(tmp_path / "data", database_url=url) as handle:
        yield handle


@pytest.fixture
def people(app: App) -> People:
    return People(app)


def code(result: tuple[int, Any]) -> tuple[int, str, Any]:
    status, body = result
    error = body["error"]
    return status, error["code"], (error.get("details") or {}).get("field")


def test_people_add_edit_and_read_the_history(people: People) -> None:
    status, fact = people.owner("POST", f"{people.base}/fact", {"text": "端口是 8470"})
    fact = fact["entry"]
    assert status == 201 and fact["author"]["handle"] == "owner" and fact["rev"] == 1
    status, edited = people.member(
        "PATCH", f"/api/memory/{fact['id']}", {"rev": 1, "text": "端口 9000"}
    )
    edited = edited["entry"]
    assert status == 200 and edited["rev"] == 2 and edited["body"]["text"] == "端口 9000"
    assert code(people.owner("PATCH", f"/api/memory/{fact['id']}", {"rev": 1, "text": "x"})) == (
        409, "stale_revision", None,
    )  # fmt: skip
    status, history = people.owner("GET", f"/api/memory/{fact['id']}/history")
    assert [(r["rev"], r["body"]["text"], r["author"]["handle"]) for r in history["revisions"]] == [
        (1, "端口是 8470", "owner"),
        (2, "端口 9000", "zhang"),
    ]
    status, view = people.member("GET", people.base)
    assert status == 200 and view["version"] == 2
    assert [f["body"]["text"] for f in view["facts"]] == ["端口 9000"]
    assert view["summary"] is None and view["stale"] is None
    with people.app.db() as conn:
        changed = conn.execute("SELECT updated_at FROM memory_versions").fetchone()[0]
    assert view["changed_at"] == iso(changed)  # the memory status: when it last changed
    assert view["caps"]["session"] == {"max_bytes": None, "max_entries": 200}


def test_the_summary_sessions_and_progress(people: People) -> None:
    status, summary = people.owner(
        "PUT", f"{people.base}/summary", {"rev": 0, "sections": {"what": "聊天室"}}
    )
    summary = summary["entry"]
    assert status == 200 and summary["body"]["labels"]["what"] == "这是什么"
    assert list(summary["body"]["sections"]) == ["what", "run", "where", "status", "pitfalls"]
    status, summary = people.member(
        "PUT", f"{people.base}/summary", {"rev": 1, "sections": {"pitfalls": "别用 lockf"}}
    )
    summary = summary["entry"]
    assert status == 200 and summary["body"]["sections"]["what"] == "聊天室"
    assert code(people.owner("PUT", f"{people.base}/summary", {"rev": 1, "sections": {}}))[1] == (
        "stale_revision"
    )
    status, session = people.owner("POST", f"{people.base}/session", {"summary": "评审了 API"})
    session = session["entry"]
    assert status == 201
    assert code(people.owner("PATCH", f"/api/memory/{session['id']}", {"rev": 1, "summary": "x"})) == (
        409, "append_only", None,
    )  # fmt: skip
    body = {"text": "登录页", "stage": "实现中", "next": "写测试", "tags": ["ui"]}
    status, progress = people.member("POST", f"{people.base}/progress", body)
    progress = progress["entry"]
    assert status == 201 and progress["body"]["tags"] == ["ui"]


def test_bad_input_gets_a_clear_error_and_nothing_is_lost(people: People) -> None:
    people.owner("POST", f"{people.base}/fact", {"text": "留着"})
    before = people.count()
    cases = [
        ("fact", {"text": "汉" * 350_000}, (400, "record_too_large", None)),
        ("fact", {"text": "x" * 3000}, (400, "record_too_large", "text")),
        ("progress", {"text": "a", "stage": "", "next": "b"}, (400, "empty_field", "stage")),
        ("progress", {"text": "a", "stage": "s", "next": "  "}, (400, "empty_field", "next")),
        ("memo", {"text": "a"}, (400, "unknown_kind", None)),
        ("fact", {"text": "a", "author_id": 1}, (400, "forged_author", None)),
        ("fact", {"text": "a", "colour": "red"}, (400, "unknown_field", "colour")),
    ]
    for kind, body, expected in cases:
        assert code(people.owner("POST", f"{people.base}/{kind}", body)) == expected, body
    app = people.app
    surrogate = app.client.post(
        f"{people.base}/fact",
        content=b'{"text": "\\ud800"}',
        headers={"Origin": app.settings.origin, "Cookie": f"room_session={app.owner_cookie}",
                 "X-CSRF-Token": app.csrf[app.owner_cookie], "Content-Type": "application/json"},
    )  # fmt: skip
    assert code((surrogate.status_code, surrogate.json())) == (400, "bad_text", "text")
    assert people.count() == before
    assert code(people.owner("GET", f"{people.base}/memo")) == (400, "unknown_kind", None)
    assert code(people.owner("PATCH", "/api/memory/99999", {"rev": 1, "text": "x"}))[:2] == (
        404, "not_found",
    )  # fmt: skip


def test_agents_read_but_write_only_through_tools(people: People) -> None:
    app = people.app
    status, _ = app.request("GET", people.base, token=people.token)
    assert status == 200
    result = app.request("POST", f"{people.base}/fact", {"text": "x"}, token=people.token)
    assert code(result) == (403, "agents_use_tools", None)
    assert people.count() == 0


def test_nobody_reaches_another_projects_memory(people: People) -> None:
    app = people.app
    status, fact = people.owner("POST", f"{people.base}/fact", {"text": "秘密"})
    fact = fact["entry"]
    entry = f"/api/memory/{fact['id']}"
    stranger = people.stranger_cookie
    for method, path, body in [
        ("GET", people.base, None),
        ("GET", f"{people.base}/fact", None),
        ("POST", f"{people.base}/fact", {"text": "x"}),
        ("GET", entry, None),
        ("GET", f"{entry}/history", None),
        ("PATCH", entry, {"rev": 1, "text": "改"}),
        ("POST", f"{entry}/archive", {}),
    ]:
        status, answer = app.request(method, path, body, cookie=stranger)
        assert status in (403, 404), (method, path)
        assert "秘密" not in str(answer)
    status, answer = app.request("GET", entry, token=people.other_token)
    assert status == 404 and "秘密" not in str(answer)
    assert people.owner("GET", entry)[1]["entry"]["body"]["text"] == "秘密"


def test_archived_entries_are_listed_with_archived_1(people: People) -> None:
    status, fact = people.owner("POST", f"{people.base}/fact", {"text": "旧事实"})
    fact = fact["entry"]
    status, archived = people.owner("POST", f"/api/memory/{fact['id']}/archive", {})
    archived = archived["entry"]
    assert status == 200 and archived["archived"] is True
    status, page = people.owner("GET", f"{people.base}/fact")
    assert page["entries"] == [] and "memory_read" in page["pointer"]
    status, page = people.owner("GET", f"{people.base}/fact?archived=1")
    assert [e["body"]["text"] for e in page["entries"]] == ["旧事实"]
    status, view = people.owner("GET", people.base)
    assert view["archived"] == {"fact": 1}
    # A value that is neither yes nor no is refused, not read as "the live ones".
    assert code(people.owner("GET", f"{people.base}/fact?archived=yes")) == (
        400, "bad_query", "archived",
    )  # fmt: skip
    status, page = people.owner("GET", f"{people.base}/fact?archived=false")
    assert status == 200 and page["entries"] == []


def test_decision_endpoints_take_alternatives_and_constraints(people: People) -> None:
    body = {
        "title": "存储", "context": "单机部署", "decision": "SQLite", "constraints": "一台机器",
        "alternatives": [{"option": "PostgreSQL", "why_rejected": "多一个服务"}],
    }  # fmt: skip
    status, made = people.owner("POST", f"/api/projects/{people.project_id}/decisions", body)
    assert status == 201
    assert made["decision"]["revisions"][0]["alternatives"] == body["alternatives"]
    status, log = people.owner("GET", f"/api/projects/{people.project_id}/decisions")
    assert log["decisions"][0]["revisions"][0]["constraints"] == "一台机器"
    bad = {**body, "alternatives": [{"option": "", "why_rejected": "x"}]}
    result = people.owner("POST", f"/api/projects/{people.project_id}/decisions", bad)
    assert code(result) == (400, "empty_field", "alternatives[0].option")
    for bare in (
        {k: v for k, v in body.items() if k != "alternatives"},
        {**body, "alternatives": []},
    ):
        result = people.owner("POST", f"/api/projects/{people.project_id}/decisions", bare)
        assert code(result) == (400, "alternatives_required", "alternatives")
    status, view = people.owner("GET", people.base)
    assert view["version"] == 1


def test_a_purge_removes_the_projects_memory_and_its_index(people: People) -> None:
    app = people.app
    people.owner("POST", f"{people.base}/fact", {"text": "要被清除的事实"})
    people.owner("PUT", f"{people.base}/summary", {"rev": 0, "sections": {"what": "清除"}})
    other = app.request("POST", f"/api/projects/{people.other_id}/memory/fact", {"text": "留下"},
                        cookie=people.stranger_cookie)  # fmt: skip
    assert other[0] == 201
    path = f"/api/projects/{people.project_id}"
    assert people.owner("POST", f"{path}/lifecycle", {"op": "trash"})[0] == 200
    status, body = people.owner(
        "POST", f"{path}/purge", {"confirm_name": "记忆项目", "confirmed": True}
    )
    assert (status, body["state"]) == (200, "purged"), body
    assert body["steps"]["memory"] == {
        "memory_revisions": 2, "memory_entries": 2, "memory_versions": 1,
    }  # fmt: skip
    with app.db() as conn:
        for table in ("memory_entries", "memory_revisions", "memory_versions", "search_records"):
            rows = conn.execute(
                f"SELECT count(*) FROM {table} WHERE project_id = ?", (people.project_id,)
            ).fetchone()[0]
            assert rows == 0, table
        kept = conn.execute("SELECT body FROM search_records").fetchall()
    assert kept == [("留下",)]


def test_trash_snapshots_memory_and_a_restore_checks_it(people: People) -> None:
    app = people.app
    path = f"/api/projects/{people.project_id}"
    people.owner("POST", f"{people.base}/fact", {"text": "快照里的事实"})
    assert people.owner("POST", f"{path}/lifecycle", {"op": "trash"})[0] == 200
    assert code(people.owner("POST", f"{people.base}/fact", {"text": "x"}))[:2] == (
        409, "project_not_accepting",
    )  # fmt: skip
    with app.db() as conn:
        conn.execute('UPDATE memory_entries SET body_json = \'{"text": "被改了"}\'')
    status, body = people.owner("POST", f"{path}/lifecycle", {"op": "restore"})
    assert (status, body["error"]["code"]) == (409, "snapshot_mismatch")
    with app.db() as conn:
        conn.execute('UPDATE memory_entries SET body_json = \'{"text": "快照里的事实"}\'')
    status, body = people.owner("POST", f"{path}/lifecycle", {"op": "restore"})
    assert status == 200 and body["project"]["state"] == "paused"


def test_an_archived_entry_is_restored_by_a_person_and_audited(people: People) -> None:
    status, fact = people.owner("POST", f"{people.base}/fact", {"text": "旧事实"})
    fact = fact["entry"]
    people.owner("POST", f"/api/memory/{fact['id']}/archive", {})
    version = people.owner("GET", people.base)[1]["version"]
    assert code(people.app.request("POST", f"/api/memory/{fact['id']}/restore", {},
                                   token=people.token))[:2] == (403, "agents_use_tools")  # fmt: skip
    status, restored = people.member("POST", f"/api/memory/{fact['id']}/restore", {})
    restored = restored["entry"]
    assert status == 200 and restored["archived"] is False and restored["rev"] == 1
    status, view = people.owner("GET", people.base)
    assert [f["body"]["text"] for f in view["facts"]] == ["旧事实"]
    assert view["archived"] == {} and view["version"] == version + 1
    with people.app.db() as conn:
        actions = [r[0] for r in conn.execute("SELECT action FROM audit_events")]
    assert actions.count("memory.restore") == 1
    # Restoring a live entry changes nothing.
    assert people.owner("POST", f"/api/memory/{fact['id']}/restore", {})[0] == 200
    assert people.owner("GET", people.base)[1]["version"] == version + 1


def test_references_are_capped_at_200_and_a_restored_one_stays_as_the_newest(
    people: People,
) -> None:
    ids = []
    for n in range(201):
        status, ref = people.owner(
            "POST", f"{people.base}/reference", {"ref_kind": "file", "target": f"docs/{n}.md"}
        )
        assert status == 201
        ids.append(ref["entry"]["id"])
    status, view = people.owner("GET", people.base)
    assert view["archived"] == {"reference": 1}
    assert view["caps"]["reference"] == {"max_bytes": None, "max_entries": 200}
    status, page = people.owner("GET", f"{people.base}/reference?archived=1")
    assert [e["id"] for e in page["entries"]] == [ids[0]]  # the oldest
    status, restored = people.owner("POST", f"/api/memory/{ids[0]}/restore", {})
    restored = restored["entry"]
    assert status == 200 and restored["archived"] is False
    status, page = people.owner("GET", f"{people.base}/reference?archived=1")
    assert [e["id"] for e in page["entries"]] == [ids[1]]  # the oldest other one took its place


def test_progress_status_filters(people: People) -> None:
    base = f"{people.base}/progress"
    for body in (
        {"text": "登录页", "stage": "实现", "next": "写测试", "tags": ["ui"]},
        {"text": "接口评审", "stage": "验证", "next": "合并", "tags": ["api"], "blocked": "等评审"},
        {"text": "接口实现", "stage": "实现", "next": "评审", "tags": ["api"]},
    ):
        assert people.owner("POST", base, body)[0] == 201
    with people.app.db() as conn:  # the first one was written in October
        conn.execute(
            "UPDATE memory_entries SET created_at = 1761955200 WHERE body_json LIKE '%登录页%'"
        )

    def texts(query: str) -> list[str]:
        status, page = people.member("GET", f"{base}?{query}")
        assert status == 200, page
        return [e["body"]["text"] for e in page["entries"]]

    assert texts("stage=实现") == ["接口实现", "登录页"]
    assert texts("tag=api") == ["接口实现", "接口评审"]
    assert texts("blocked=1") == ["接口评审"]
    assert texts("stage=实现&tag=api") == ["接口实现"]
    assert texts("since=2025-11-15") == ["接口实现", "接口评审"]
    assert texts("since=2025-10-01T00:00:00Z&limit=1") == ["接口实现"]
    status, page = people.member("GET", f"{base}?stage=实现&limit=1")
    assert status == 200 and page["has_more"] is True
    status, page = people.member("GET", f"{base}?stage=实现&before={page['entries'][0]['id']}")
    assert status == 200 and [e["body"]["text"] for e in page["entries"]] == ["登录页"]
    assert not page["has_more"]
    assert code(people.member("GET", f"{base}?since=上周")) == (400, "bad_query", "since")
    assert code(people.member("GET", f"{base}?blocked=maybe")) == (400, "bad_query", "blocked")
    assert code(people.member("GET", f"{people.base}/fact?tag=api")) == (400, "bad_query", "kind")


def test_an_owner_clears_all_memory_with_a_confirmation_and_it_is_audited(
    people: People,
) -> None:
    base = people.base
    people.owner("PUT", f"{base}/summary", {"rev": 0, "sections": {"what": "记账小程序"}})
    status, fact = people.owner("POST", f"{base}/fact", {"text": "生产库在杭州机房"})
    fact = fact["entry"]
    people.owner("POST", f"/api/memory/{fact['id']}/archive", {})
    people.owner("POST", f"{base}/convention", {"text": "提交前跑测试"})
    people.member("POST", f"{base}/session", {"summary": "写了登录页"})
    decision = {
        "title": "存储", "context": "单机", "decision": "SQLite",
        "alternatives": [{"option": "PostgreSQL", "why_rejected": "多一个服务"}],
    }  # fmt: skip
    assert people.owner("POST", f"/api/projects/{people.project_id}/decisions", decision)[0] == 201
    version = people.owner("GET", base)[1]["version"]
    search = f"/api/projects/{people.project_id}/search?q=杭州机房"
    assert people.owner("GET", search)[1]["results"]  # archived entries are searchable
    clear = f"{base}/clear"
    assert code(people.member("POST", clear, {"confirm": True}))[:2] == (403, "not_owner")
    assert code(people.app.request("POST", clear, {"confirm": True}, token=people.token))[:2] == (
        403,
        "agents_use_tools",
    )
    assert code(people.owner("POST", clear, {})) == (400, "confirm_required", "confirm")
    assert people.count() == 4  # nothing went yet
    status, cleared = people.owner("POST", clear, {"confirm": True})
    assert status == 200 and cleared["version"] == version + 1
    assert cleared["deleted"] == {"summary": 1, "fact": 1, "convention": 1, "session": 1}
    status, view = people.owner("GET", base)
    assert view["summary"] is None and view["facts"] == [] and view["archived"] == {}
    assert view["conventions"] == [] and view["sessions"] == []
    assert people.count() == 0
    with people.app.db() as conn:
        assert conn.execute("SELECT count(*) FROM memory_revisions").fetchone()[0] == 0
        [(detail,)] = conn.execute(
            "SELECT detail_json FROM audit_events WHERE action = 'memory.clear'"
        ).fetchall()
    assert '"fact": 1' in detail
    status, found = people.owner("GET", search)
    assert status == 200 and found["results"] == []
    status, log = people.owner("GET", f"/api/projects/{people.project_id}/decisions")
    assert [d["title"] for d in log["decisions"]] == ["存储"]  # the decision log stays
