"""Search across a person's projects with operators (docs/search.md "Across projects"), on the
real app (in-process, real SQLite and its indexer): every operator, the permission boundary (a
project the person never joined or left is never searched), snippets with inline markdown."""

from __future__ import annotations

import sqlite3
import time
import urllib.parse
from pathlib import Path
from typing import Any

import pytest

from room.rules.entities import Member
from room.store import Tx
from tests.support.inproc import App, owner_user, running_app
from tests.support.search import write_message


class World:
    """The owner in 前端项目 and «Project Room 网站» (with 小张), a project they left, and one
    they never joined (小张's own); every project has a message saying 部署."""

    def __init__(self, app: App) -> None:
        self.app = app
        owner = owner_user(app)
        zhang, self.zhang_cookie = app.new_user("zhang", "小张")
        self.a, self.a_members, self.token = app.project_with("前端项目", owner, zhang)
        self.b, self.b_members, _ = app.project_with("Project Room 网站", owner, zhang)
        self.left, left_members, _ = app.project_with("离开的项目", owner, zhang)
        self.other, other_members, _ = app.project_with("别人的项目", zhang)
        me_a = self.a_members["owner"]
        zhang_a, zhang_b = self.a_members["zhang"], self.b_members["zhang"]
        self.a_deploy = self.say(self.a, me_a, "明天部署前端，用 `deploy` 命令 **小心**")
        self.b_deploy = self.say(self.b, zhang_b, "网站部署好了")
        self.a_file = self.say(self.a, zhang_a, "部署脚本见附件", attach=True)
        self.a_mention = self.say(self.a, zhang_a, "@owner 请看部署日志", mention=me_a)
        self.say(self.left, left_members["owner"], "离开前说的部署")
        self.say(self.other, other_members["zhang"], "别人的部署计划")

        def leave(conn: sqlite3.Connection, tx: Tx) -> None:
            conn.execute(
                "UPDATE members SET status = 'left' WHERE id = ?", (left_members["owner"].id,)
            )

        app.write(leave)  # (the search reads memberships from the database, not the roster)

    def say(
        self, project: int, author: Member, body: str, *, attach: bool = False,
        mention: Member | None = None,
    ) -> int:  # fmt: skip
        message_id = write_message(self.app, project, author, body)

        def job(conn: sqlite3.Connection, tx: Tx) -> None:
            if attach:
                conn.execute(
                    "INSERT INTO attachments (project_id, uploader_id, sha256, size, name, mime,"
                    " kind, message_id, created_at) VALUES (?, ?, ?, 3, 'a.txt', 'text/plain',"
                    " 'file', ?, ?)",
                    (project, author.id, "0" * 64, message_id, tx.now),
                )
            if mention is not None:
                conn.execute(
                    "INSERT INTO mentions (message_id, member_id, via) VALUES (?, ?, 'handle')",
                    (message_id, mention.id),
                )

        self.app.write(job)
        return message_id

    def search(self, q: str, cookie: str | None = None, **params: Any) -> tuple[int, Any]:
        query = urllib.parse.urlencode({"q": q, **params}, doseq=True)
        return self.app.request(
            "GET", f"/api/search?{query}", cookie=cookie or self.app.owner_cookie
        )

    def ids(self, q: str, **params: Any) -> set[int]:
        status, body = self.search(q, **params)
        assert status == 200, body
        return {r["message_id"] for r in body["results"] if r["kind"] == "message"}

    def refused(self, q: str, **params: Any) -> tuple[int, str, Any]:
        status, body = self.search(q, **params)
        return status, body["error"]["code"], body["error"].get("details")


@pytest.fixture
def world(tmp_path: Path) -> Any:
    with running_app(tmp_path / "data", demo=False) as app:
        yield World(app)


def test_all_my_projects_by_default_and_never_another(world: World) -> None:
    status, body = world.search("部署")
    assert status == 200
    assert {r["message_id"] for r in body["results"]} == {
        world.a_deploy, world.b_deploy, world.a_file, world.a_mention}  # fmt: skip
    assert {p["name"] for p in body["projects"]} == {"前端项目", "Project Room 网站"}
    by_id = {r["message_id"]: r for r in body["results"]}
    assert by_id[world.b_deploy]["project"] == {"id": world.b, "name": "Project Room 网站"}
    # 小张 sees their own project and the two shared ones, not the one the owner left... which
    # 小张 is still in: each person's own membership decides.
    status, theirs = world.search("部署", cookie=world.zhang_cookie)
    assert {p["name"] for p in theirs["projects"]} == {
        "前端项目", "Project Room 网站", "离开的项目", "别人的项目"}  # fmt: skip
    # An agent has no cross-project search.
    status, body = world.app.request("GET", "/api/search?q=x", token=world.token)
    assert (status, body["error"]["code"]) == (403, "human_only")


def test_in_narrows_to_my_projects_by_name_or_id(world: World) -> None:
    assert world.ids('in:"Project Room 网站" 部署') == {world.b_deploy}
    assert world.ids("in:「project room 网站」 部署") == {world.b_deploy}  # case, CJK quotes
    assert world.ids(f"in:{world.a} 部署") == {world.a_deploy, world.a_file, world.a_mention}
    assert world.ids("部署 in：前端项目 in:" + str(world.b)) == {
        world.a_deploy, world.b_deploy, world.a_file, world.a_mention}  # fmt: skip
    assert world.ids("部署", project=str(world.b)) == {world.b_deploy}
    # Projects the person is not in are unknown, whether they exist or not.
    for name in ("别人的项目", "离开的项目", str(world.other), "没有的项目"):
        assert world.refused(f"in:{name} 部署")[:2] == (404, "unknown_project"), name
    assert world.refused("部署", project=str(world.other))[:2] == (404, "not_member")


def test_from_by_handle_or_display_name(world: World) -> None:
    expected = {world.b_deploy, world.a_file, world.a_mention}
    assert world.ids("部署 from:zhang") == expected
    assert world.ids("部署 from:@zhang") == expected
    assert world.ids("部署 FROM:小张") == expected
    assert world.ids("from:owner 部署") == {world.a_deploy}
    assert world.refused("部署 from:nobody")[:2] == (404, "unknown_author")
    assert world.refused("from:a from:b x")[1:] == (
        "bad_operator", {"operator": "from", "value": "b", "reason": "repeated"})  # fmt: skip


def test_has_file_is_mention_and_operators_alone(world: World) -> None:
    assert world.ids("部署 has:file") == {world.a_file}
    assert world.ids("部署 is:mention") == {world.a_mention}
    assert world.ids("has:file") == {world.a_file}  # no words: the newest passing the filters
    assert world.ids("is:mention from:zhang") == {world.a_mention}
    status, body = world.search("is:mention")
    assert status == 200 and body["words"] == "" and body["operators"]["is"] == "mention"
    assert world.refused("has:picture 部署")[1:] == (
        "bad_operator", {"operator": "has", "value": "picture", "reason": "unknown_value"})  # fmt: skip
    assert world.refused("")[:2] == (400, "bad_query")


def test_before_and_after(world: World) -> None:
    def age(conn: sqlite3.Connection, tx: Tx) -> None:
        conn.execute(
            "UPDATE messages SET created_at = ? WHERE id = ?",
            (time.mktime((2025, 3, 10, 12, 0, 0, 0, 0, 0)), world.b_deploy),
        )

    world.app.write(age)
    assert world.ids("部署 before:2025-03-11") == {world.b_deploy}
    assert world.ids("部署 before:2025-03-10") == set()  # strictly before the day
    assert world.ids("部署 after:2025-03-10") == {world.a_deploy, world.a_file, world.a_mention}
    assert world.ids("after:2025-03-01 before:2025-04-01") == {world.b_deploy}
    assert world.refused("部署 before:昨天")[1:] == (
        "bad_operator", {"operator": "before", "value": "昨天", "reason": "bad_time"})  # fmt: skip
    assert world.refused("after:2025-04-01 before:2025-03-01")[2]["reason"] == "before_after"


def test_snippets_render_inline_markdown(world: World) -> None:
    status, body = world.search("in:前端项目 明天")
    assert status == 200
    (hit,) = body["results"]
    assert hit["snippet_html"] == (
        "<mark>明天</mark>部署前端，用 <code>deploy</code> 命令 <strong>小心</strong>"
    )
    # A URL with a colon is words, not an operator.
    assert world.ids("http://example.com") == set()
