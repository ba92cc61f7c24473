"""The agents' memory tools on the real actions: checkpoints of every kind, reads with the
archive, refusals the model can act on, and who is granted what."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

import pytest

from room.actions import memory as memory_actions
from room.agents.memory_tools import MEMORY_TOOLS
from room.agents.presets import PRESETS
from room.agents.tools import Toolbox, ToolContext
from room.store import Tx
from room.store import memory as memory_store
from tests.support.task_world import (
    World,
    world_on_both_stores,  # noqa: F401 (the fixture)
)

pytestmark = pytest.mark.anyio


async def tool(world: World, who: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    context = ToolContext(world.core, world[who], 7, f"call-{name}", {})
    reply = await MEMORY_TOOLS[name].run(context, args)
    assert isinstance(reply, str)
    return dict(json.loads(reply))


async def test_a_session_checkpoint_is_read_back_with_its_author_and_turn(world: World) -> None:
    wrote = await tool(
        world, "be", "memory_checkpoint",
        {"kind": "session", "summary": "修好登录", "did": "改了 auth.py", "verified": "pytest",
         "next": "写文档", "text": "not a session field, ignored"},
    )  # fmt: skip
    assert wrote["ok"] is True and wrote["kind"] == "session"
    read = await tool(world, "lead", "memory_read", {"kind": "session"})
    [entry] = read["entries"]
    assert entry["author"] == "@be" and entry["body"]["did"] == "改了 auth.py"
    assert "验证：pytest" in entry["text"]
    stored = await world.read(lambda c: memory_store.entry(c, wrote["id"]))
    assert stored is not None and stored["turn_id"] == 7


async def test_refusals_name_the_problem_and_store_nothing(world: World) -> None:
    cases = [
        ({"kind": "progress", "text": "登录页", "next": "测"}, "empty_field", "stage"),
        ({"kind": "progress", "text": "登录页", "stage": "做", "next": ""}, "empty_field", "next"),
        ({"kind": "fact", "text": "x" * 1_000_000}, "record_too_large", "text"),
        ({"kind": "memo", "text": "x"}, "unknown_kind", None),
        ({"kind": "summary", "sections": "全部"}, "bad_field", "sections"),
        ({"kind": "session", "did": "x"}, "empty_field", "summary"),
    ]
    for args, code, field in cases:
        answer = await tool(world, "be", "memory_checkpoint", args)
        assert answer["ok"] is False and answer["error"] == code, args
        assert answer.get("details", {}).get("field") == field, args
    assert await world.count("memory_entries") == 0


async def test_summary_fact_and_decision_checkpoints(world: World) -> None:
    made = await tool(
        world, "lead", "memory_checkpoint", {"kind": "summary", "sections": {"what": "聊天室"}}
    )
    assert made["ok"] and made["rev"] == 1
    again = await tool(
        world, "be", "memory_checkpoint", {"kind": "summary", "rev": 1, "sections": {"run": "make"}}
    )
    assert again["rev"] == 2
    stale = await tool(
        world, "lead", "memory_checkpoint", {"kind": "summary", "rev": 1, "sections": {"run": "x"}}
    )
    assert stale["error"] == "stale_revision" and stale["details"]["rev"] == 2
    outline = await tool(world, "be", "memory_read", {})
    assert "这是什么：聊天室" in outline["summary"] and "坑：暂无" in outline["summary"]

    fact = await tool(world, "be", "memory_checkpoint", {"kind": "fact", "text": "端口 8000"})
    edited = await tool(
        world, "be", "memory_checkpoint",
        {"kind": "fact", "id": fact["id"], "rev": 1, "text": "端口 8470"},
    )  # fmt: skip
    assert edited["ok"] and edited["rev"] == 2

    decision = await tool(
        world, "lead", "memory_checkpoint",
        {"kind": "decision", "title": "存储", "context": "单机", "decision": "SQLite",
         "alternatives": [{"option": "PostgreSQL", "why_rejected": "多一个服务"}]},
    )  # fmt: skip
    assert decision["ok"] and decision["status"] == "proposed"
    read = await tool(world, "be", "memory_read", {"kind": "decision", "id": decision["id"]})
    assert read["entry"]["alternatives"][0]["option"] == "PostgreSQL"


async def test_archived_entries_are_read_with_archived_true(world: World) -> None:
    be = world["be"]

    def fill(conn: sqlite3.Connection, tx: Tx) -> None:
        for n in range(26):
            memory_actions.add_entry_in(conn, tx, be, "fact", {"text": f"{n:02d}" + "汉" * 333})

    await world.write(fill)
    live = await tool(world, "be", "memory_read", {"kind": "fact", "limit": 50})
    assert len(live["entries"]) == 24 and "memory_read" in live["archived_note"]
    archived = await tool(world, "be", "memory_read", {"kind": "fact", "archived": True})
    assert [e["text"][:2] for e in archived["entries"]] == ["01", "00"]
    assert all(e["archived"] for e in archived["entries"])


async def test_another_projects_record_is_not_found(world: World) -> None:
    def elsewhere(conn: sqlite3.Connection, tx: Tx) -> int:
        conn.execute(
            "INSERT INTO projects (id, name, created_at, updated_at) VALUES (99, '别处', 0, 0)"
        )
        return memory_store.insert_entry(
            conn, project_id=99, kind="fact", body={"text": "别处的秘密"}, size=15,
            author_id=None, now=tx.now,
        )  # fmt: skip

    entry_id = await world.write(elsewhere)
    read = await tool(world, "be", "memory_read", {"id": entry_id})
    assert read["error"] == "not_found" and "秘密" not in json.dumps(read, ensure_ascii=False)
    edit = await tool(
        world, "be", "memory_checkpoint", {"kind": "fact", "id": entry_id, "text": "改"}
    )
    assert edit["error"] == "not_found"


def test_every_role_reads_memory_and_read_only_roles_cannot_write_it() -> None:
    for role in PRESETS:
        box = Toolbox(MEMORY_TOOLS, role)
        assert set(MEMORY_TOOLS) == box.tools.keys(), role
        read_only = Toolbox(MEMORY_TOOLS, role, read_only=True)
        assert read_only.tools.keys() == {"memory_read", "memory_search"}, role


async def test_memory_search_finds_an_archived_entry_and_nothing_of_another_project(
    world: World,
) -> None:
    be = world["be"]

    def fill(conn: sqlite3.Connection, tx: Tx) -> None:
        memory_actions.add_entry_in(conn, tx, be, "fact", {"text": "部署脚本在 ops/deploy.sh"})
        for n in range(25):  # the first fact is the oldest: the cap archives it
            memory_actions.add_entry_in(conn, tx, be, "fact", {"text": f"{n:02d}" + "汉" * 333})
        conn.execute(
            "INSERT INTO projects (id, name, created_at, updated_at) VALUES (99, '别处', 0, 0)"
        )
        memory_store.insert_entry(
            conn, project_id=99, kind="fact", body={"text": "别处的部署脚本"}, size=21,
            author_id=None, now=tx.now,
        )  # fmt: skip

    await world.write(fill)
    oldest = await world.read(
        lambda c: memory_store.entries(c, world.project_id, "fact", archived=True)
    )
    assert [e["body"]["text"] for e in oldest][-1] == "部署脚本在 ops/deploy.sh"
    found = await tool(world, "be", "memory_search", {"q": "部署"})  # two characters, in a word
    assert found["ok"] is True
    [hit] = found["results"]
    assert (hit["kind"], hit["record_id"]) == ("fact", oldest[-1]["id"])
    assert "【部署】" in hit["snippet"] and "别处" not in json.dumps(found, ensure_ascii=False)
    only_messages = await tool(world, "be", "memory_search", {"q": "部署", "kinds": ["message"]})
    assert only_messages["results"] == []
    bad = await tool(world, "be", "memory_search", {"q": '"*" OR'})
    assert bad["ok"] is False and bad["error"] == "bad_query"
    unknown = await tool(world, "be", "memory_search", {"q": "部署", "kinds": ["memo"]})
    assert unknown["error"] == "unknown_kind"


async def test_memory_read_filters_progress_by_stage_tag_since_and_blocked(world: World) -> None:
    for args in (
        {"text": "登录页", "stage": "实现", "next": "写测试", "tags": ["ui"]},
        {"text": "接口评审", "stage": "验证", "next": "合并", "tags": ["api"], "blocked": "等评审"},
        {"text": "接口实现", "stage": "实现", "next": "评审", "tags": ["api"]},
    ):
        wrote = await tool(world, "be", "memory_checkpoint", {"kind": "progress", **args})
        assert wrote["ok"] is True, wrote

    async def texts(**filters: Any) -> list[str]:
        read = await tool(world, "lead", "memory_read", {"kind": "progress", **filters})
        assert read["ok"] is True, read
        return [e["body"]["text"] for e in read["entries"]]

    assert await texts(stage="实现") == ["接口实现", "登录页"]
    assert await texts(tag="API", stage="实现") == ["接口实现"]
    assert await texts(blocked=True) == ["接口评审"]
    assert await texts(since="2999-01-01") == []
    assert await texts(since="2000-01-01") == ["接口实现", "接口评审", "登录页"]
    bad = await tool(world, "lead", "memory_read", {"kind": "progress", "since": "上周"})
    assert (bad["ok"], bad["error"], bad["details"]["field"]) == (False, "bad_query", "since")
    bad = await tool(world, "lead", "memory_read", {"kind": "fact", "stage": "实现"})
    assert (bad["ok"], bad["error"]) == (False, "bad_query")
