"""The search operators in a search of one project (docs/search.md "In one project"): the HTTP
endpoint ``GET /api/projects/{id}/search``, the ``/ws`` ``search`` frame (same action) and the
agents' ``memory_search`` tool. ``from:``, ``has:file``, ``before:``/``after:`` and
``is:mention`` filter; ``in:`` may name only the project searched (another is refused, not
ignored); ``from:`` with the ``by`` field is refused as a conflict. Real app, real SQLite and
its indexer; the ``/ws`` round trip on a real server."""

from __future__ import annotations

import json
import sqlite3
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from room.agents.memory_tools import MEMORY_TOOLS
from room.agents.tools import ToolContext
from room.rules.entities import Member
from room.store import Tx
from tests.support.inproc import App, owner_user, running_app
from tests.support.search import write_message
from tests.support.server import ServerProcess
from tests.support.wsclient import Client


class World:
    """前端项目 with the owner, 小张 and the lead agent, and a second project of the owner's;
    each message below says 部署."""

    def __init__(self, app: App) -> None:
        self.app = app
        owner = owner_user(app)
        zhang, _ = app.new_user("zhang", "小张")
        self.project, members, _ = app.project_with("前端项目", owner, zhang)
        self.other, other_members, _ = app.project_with("别的项目", owner)
        self.owner, self.zhang, self.lead = members["owner"], members["zhang"], members["lead"]
        self.mine = self.say(self.owner, "明天部署前端")
        self.file = self.say(self.zhang, "部署脚本见附件", attach=True)
        self.to_owner = self.say(self.zhang, "@owner 请看部署日志", mention=self.owner)
        self.to_lead = self.say(self.zhang, "@lead 部署好了吗", mention=self.lead)
        self.say(other_members["owner"], "别的项目也要部署", project=self.other)

    def say(
        self, author: Member, body: str, *, attach: bool = False, mention: Member | None = None,
        project: int | None = None,
    ) -> int:  # fmt: skip
        project = project or self.project
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

    def search(self, q: str, **params: Any) -> tuple[int, Any]:
        query = urllib.parse.urlencode({"q": q, **params})
        return self.app.request(
            "GET", f"/api/projects/{self.project}/search?{query}", cookie=self.app.owner_cookie
        )

    def ids(self, q: str, **params: Any) -> set[int]:
        status, body = self.search(q, **params)
        assert status == 200, body
        return {r["message_id"] for r in body["results"] if r["kind"] == "message"}

    def refused(self, q: str, **params: Any) -> tuple[int, str, Any]:
        status, body = self.search(q, **params)
        return status, body["error"]["code"], body["error"].get("details")

    def tool(self, args: dict[str, Any], who: Member | None = None) -> dict[str, Any]:
        context = ToolContext(self.app.core, who or self.lead, None, "call-search", {})
        reply = self.app.call(MEMORY_TOOLS["memory_search"].run, context, args)
        assert isinstance(reply, str)
        return dict(json.loads(reply))


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    with running_app(tmp_path / "data", demo=False) as app:
        yield World(app)


def test_http_search_of_one_project_takes_the_operators(world: World) -> None:
    everything = {world.mine, world.file, world.to_owner, world.to_lead}
    assert world.ids("部署") == everything  # never the other project's
    assert world.ids("部署 from:zhang") == {world.file, world.to_owner, world.to_lead}
    assert world.ids("部署 from:小张") == {world.file, world.to_owner, world.to_lead}
    assert world.ids("from:@owner 部署") == {world.mine}
    assert world.ids("部署 has:file") == {world.file}
    assert world.ids("部署 is:mention") == {world.to_owner}  # the person searching
    assert world.ids("is:mention") == {world.to_owner}  # operators alone: the newest passing
    assert world.ids("部署 after:2000-01-01 before:2999-01-01") == everything
    assert world.ids("部署 before:2000-01-01") == set()
    assert world.ids("部署 after:2999-01-01") == set()
    # before:/after: and the since/until fields both hold.
    assert world.ids("部署 after:2000-01-01", until="2000-06-01") == set()
    # in: naming this project (by name or id) is allowed, and changes nothing.
    assert world.ids("部署 in:前端项目") == everything
    assert world.ids(f"部署 in:{world.project}") == everything
    status, body = world.search("部署 from:zhang has:file")
    assert status == 200, body
    assert body["words"] == "部署" and body["operators"]["from"] == "zhang"
    assert body["operators"]["has"] == "file" and body["operators"]["in"] == []


def test_operators_that_cannot_apply_are_refused_with_a_reason(world: World) -> None:
    # in: naming another project is refused, not ignored: its results would be this project's.
    assert world.refused("部署 in:别的项目") == (
        400, "bad_operator", {"operator": "in", "value": "别的项目", "reason": "other_project"})  # fmt: skip
    assert world.refused(f"in:{world.other} 部署")[2]["reason"] == "other_project"
    assert world.refused("部署 from:zhang", author="owner") == (
        400, "bad_operator", {"operator": "from", "value": "zhang", "reason": "conflict"})  # fmt: skip
    assert world.refused("部署 from:nobody")[:2] == (404, "unknown_author")
    assert world.refused("部署 has:picture")[2]["reason"] == "unknown_value"
    assert world.refused("部署 before:yesterday")[2]["reason"] == "bad_time"
    assert world.refused("from:")[2]["reason"] == "empty"
    assert world.refused("")[:2] == (400, "bad_query")  # no words, no operators


def test_snippets_are_rendered_like_the_search_across_projects(world: World) -> None:
    """One project's search answers the snippet /api/search gives for the same message: its
    inline markdown rendered; an agent's tool reads the plain text with its markers."""
    world.say(world.owner, "上线前 `deploy --canary` 要 **小心**，见 [文档](http://x.test)")
    mine = world.search("canary")
    across = world.app.request("GET", "/api/search?q=canary", cookie=world.app.owner_cookie)
    assert mine[0] == across[0] == 200, (mine, across)
    (one,), (all_,) = mine[1]["results"], across[1]["results"]
    assert (
        one["snippet_html"]
        == all_["snippet_html"]
        == ("上线前 <code>deploy --<mark>canary</mark></code> 要 <strong>小心</strong>，见 文档")
    )
    (hit,) = world.tool({"q": "canary"})["results"]
    assert hit["snippet"] == "上线前 `deploy --【canary】` 要 **小心**，见 [文档](http://x.test)"


def test_memory_search_takes_the_operators(world: World) -> None:
    def message_ids(answer: dict[str, Any]) -> set[int]:
        assert answer["ok"] is True, answer
        return {r["message_id"] for r in answer["results"] if r["kind"] == "message"}

    assert message_ids(world.tool({"q": "部署 from:zhang has:file"})) == {world.file}
    # is:mention is the agent's own mentions.
    mentions = world.tool({"q": "部署 is:mention"})
    assert message_ids(mentions) == {world.to_lead}
    assert mentions["operators"] == {"is": "mention"}
    assert message_ids(world.tool({"q": "is:mention"})) == {world.to_lead}
    assert message_ids(world.tool({"q": "部署 before:2000-01-01"})) == set()
    refused = world.tool({"q": "部署 in:别的项目"})
    assert refused["ok"] is False and refused["error"] == "bad_operator"
    assert refused["details"]["reason"] == "other_project"
    unknown = world.tool({"q": "部署 from:nobody"})
    assert (unknown["ok"], unknown["error"]) == (False, "unknown_author")
    # An agent's tool is not rate limited as a person's searches are (20 at once).
    for _ in range(30):
        assert world.tool({"q": "部署"})["ok"] is True


@pytest.mark.anyio
async def test_ws_search_frame_takes_the_operators(
    server: ServerProcess, clients: list[Client]
) -> None:
    session = server.login()
    me = server.get_json("/api/me", cookie=session.cookie)
    project = me["projects"][0]
    client = await Client.open(server.ws_url, cookie=session.cookie, origin=server.origin)
    await client.wait_for("hello")
    for txn, body in (("t1", "周五发布新版本"), ("t2", "发布说明写好了")):
        await client.send(
            {"type": "send", "project_id": project["id"], "client_txn_id": txn, "body": body}
        )
        await client.wait_for("ack")
    frame = {"type": "search", "project_id": project["id"]}
    await client.send({**frame, "req_id": "s1", "q": "发布 from:owner after:2000-01-01"})
    got = await client.wait_for("search_results")
    assert got["req_id"] == "s1" and got["words"] == "发布"
    assert got["operators"]["from"] == "owner" and len(got["results"]) == 2
    await client.send(
        {
            "type": "send",
            "project_id": project["id"],
            "client_txn_id": "t3",
            "body": "`发布` **稳**",
        }
    )
    await client.wait_for("ack")
    await client.send({**frame, "req_id": "s0", "q": "稳"})
    got = await client.wait_for("search_results")
    assert [r["snippet_html"] for r in got["results"]] == [
        "<code>发布</code> <strong><mark>稳</mark></strong>"
    ]
    await client.send({**frame, "req_id": "s2", "q": "发布 is:mention"})
    got = await client.wait_for("search_results")
    assert (got["req_id"], got["results"]) == ("s2", [])  # nobody mentioned the owner
    await client.send({**frame, "req_id": "s3", "q": "发布 in:另一个项目"})
    error = await client.wait_for("error")
    assert (error["req_id"], error["code"]) == ("s3", "bad_operator")
    assert error["details"]["reason"] == "other_project"
    await client.send({**frame, "req_id": "s4", "q": "发布 from:owner", "by": "owner"})
    error = await client.wait_for("error")
    assert (error["req_id"], error["code"], error["details"]["reason"]) == (
        "s4", "bad_operator", "conflict")  # fmt: skip
