"""Memory records through the real actions on a real database: revisions, caps and the archive,
the version and its frame, decisions' new fields, and bad input refused with nothing lost."""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest

from room.actions import decisions as decision_actions
from room.actions import memory as memory_actions
from room.errors import RoomError
from room.store import Tx
from room.store import memory as memory_store
from tests.support.task_world import (
    World,
    world_on_both_stores,  # noqa: F401 (the fixture)
)

pytestmark = pytest.mark.anyio


async def refused(coro: Any) -> RoomError:
    with pytest.raises(RoomError) as caught:
        await coro
    return caught.value


async def version(world: World) -> int:
    return await world.read(lambda c: memory_store.memory_version(c, world.project_id))


async def overview(world: World) -> dict[str, Any]:
    return await world.read(
        lambda c: memory_actions.overview(c, world.project_id, now=0.0, stale_days=14)
    )


async def test_a_person_adds_a_fact_and_subscribers_hear_of_it(world: World) -> None:
    fact = await memory_actions.add_entry(world.core, world["owner"], "fact", {"text": "用 uv"})
    assert fact["rev"] == 1 and fact["body"] == {"text": "用 uv"}
    assert fact["author"]["handle"] == "owner" and fact["author"]["kind"] == "human"
    frames = await world.frames("memory")
    assert frames == [{"type": "memory", "project_id": world.project_id, "version": 1,
                       "kind": "fact", "id": fact["id"]}]  # fmt: skip
    assert (await overview(world))["facts"][0]["id"] == fact["id"]


async def test_bad_input_is_refused_and_nothing_is_lost(world: World) -> None:
    owner = world["owner"]
    kept = await memory_actions.add_entry(world.core, owner, "fact", {"text": "留着"})
    before = await version(world)
    cases: list[tuple[str, dict[str, Any], str, str | None]] = [
        ("progress", {"text": "登录页", "stage": "", "next": "测"}, "empty_field", "stage"),
        ("progress", {"text": "登录页", "stage": "做", "next": " "}, "empty_field", "next"),
        ("fact", {"text": "x" * 1_000_000}, "record_too_large", "text"),
        ("memo", {"text": "x"}, "unknown_kind", None),
        ("summary", {"sections": {}}, "summary_is_single", None),
    ]
    for kind, raw, code, field in cases:
        error = await refused(memory_actions.add_entry(world.core, owner, kind, raw))
        assert (error.code, error.details.get("field")) == (code, field), kind
        assert error.http_status in (400, 404)
    assert await version(world) == before
    assert [f["id"] for f in (await overview(world))["facts"]] == [kept["id"]]
    assert await world.count("memory_entries") == 1


async def test_an_edit_from_a_stale_revision_is_refused_and_history_keeps_every_revision(
    world: World,
) -> None:
    owner, be = world["owner"], world["be"]
    fact = await memory_actions.add_entry(world.core, be, "fact", {"text": "端口 8000"})
    edited = await memory_actions.edit_entry(
        world.core, owner, fact["id"], 1, {"text": "端口 8470"}
    )
    assert edited["rev"] == 2 and edited["updated_by"]["handle"] == "owner"
    stale = await refused(
        memory_actions.edit_entry(world.core, be, fact["id"], 1, {"text": "端口 9000"})
    )
    assert stale.code == "stale_revision" and stale.http_status == 409
    assert stale.details["rev"] == 2
    history = await world.read(lambda c: memory_actions.history(c, owner, fact["id"]))
    assert [(r["rev"], r["body"]["text"], r["author"]["handle"]) for r in history["revisions"]] == [
        (1, "端口 8000", "be"),
        (2, "端口 8470", "owner"),
    ]


async def test_session_entries_are_append_only(world: World) -> None:
    entry = await memory_actions.add_entry(
        world.core, world["be"], "session", {"summary": "修了登录", "verified": "pytest 通过"}
    )
    assert entry["body"]["member_id"] == world["be"].id
    error = await refused(
        memory_actions.edit_entry(world.core, world["owner"], entry["id"], 1, {"summary": "改"})
    )
    assert error.code == "append_only"
    # A person may add one.
    mine = await memory_actions.add_entry(
        world.core, world["owner"], "session", {"summary": "评审"}
    )
    assert [s["id"] for s in (await overview(world))["sessions"]] == [mine["id"], entry["id"]]


async def test_past_a_cap_the_oldest_move_to_the_archive_whole(world: World) -> None:
    owner = world["owner"]

    def add_facts(conn: sqlite3.Connection, tx: Tx) -> list[int]:
        for n in range(26):  # 1,001 bytes each: 24 fit in 24 KiB
            memory_actions.add_entry_in(conn, tx, owner, "fact", {"text": f"{n:02d}" + "汉" * 333})
        return [e["id"] for e in memory_store.entries(conn, world.project_id, "fact")]

    live = await world.write(add_facts)
    assert len(live) == 24
    view = await overview(world)
    assert view["archived"] == {"fact": 2}
    assert (
        "2 条事实已归档" in view["pointers"]["fact"] and "memory_read" in view["pointers"]["fact"]
    )
    archived = await world.read(
        lambda c: memory_actions.page(
            c, world.project_id, "fact", archived=True, before=None, limit=10
        )
    )
    texts = [e["body"]["text"] for e in archived["entries"]]
    assert texts == ["01" + "汉" * 333, "00" + "汉" * 333]  # whole, newest archived first
    events = await world.read(
        lambda c: c.execute(
            "SELECT count(*) FROM audit_events WHERE action = 'memory.archive'"
        ).fetchone()[0]
    )
    assert events == 2


async def test_the_session_log_keeps_200_entries(world: World) -> None:
    be = world["be"]

    def add(conn: sqlite3.Connection, tx: Tx) -> None:
        for n in range(203):
            memory_actions.add_entry_in(conn, tx, be, "session", {"summary": f"第 {n} 轮"})

    await world.write(add)
    view = await overview(world)
    assert view["archived"] == {"session": 3}
    assert len(view["sessions"]) == 50 and view["sessions"][0]["body"]["summary"] == "第 202 轮"
    page = await world.read(
        lambda c: memory_actions.page(
            c, world.project_id, "session", archived=True, before=None, limit=5
        )
    )
    assert [e["body"]["summary"] for e in page["entries"]] == ["第 2 轮", "第 1 轮", "第 0 轮"]


async def test_references_are_deduplicated(world: World) -> None:
    owner = world["owner"]
    first = await memory_actions.add_entry(
        world.core, owner, "reference", {"ref_kind": "dir", "target": "src/", "note": "源码"}
    )
    again = await memory_actions.add_entry(
        world.core, owner, "reference", {"ref_kind": "dir", "target": "src", "note": "全部源码"}
    )
    assert again["id"] == first["id"] and again["duplicate"] is True
    assert again["rev"] == 2 and again["body"]["note"] == "全部源码"
    assert len((await overview(world))["references"]) == 1
    other = await memory_actions.add_entry(
        world.core, owner, "reference", {"ref_kind": "url", "target": "https://example.org"}
    )
    error = await refused(
        memory_actions.edit_entry(
            world.core, owner, other["id"], 1, {"ref_kind": "dir", "target": "src"}
        )
    )
    assert error.code == "duplicate_reference"


async def test_the_summary_is_edited_section_by_section(world: World) -> None:
    owner, lead = world["owner"], world["lead"]
    made = await memory_actions.set_summary(world.core, owner, 0, {"what": "聊天室", "run": "make"})
    assert made["rev"] == 1 and made["body"]["sections"]["status"] == ""
    edited = await memory_actions.set_summary(world.core, lead, None, {"status": "能跑"})
    assert edited["rev"] == 2
    assert edited["body"]["sections"] == {
        "what": "聊天室", "run": "make", "where": "", "status": "能跑", "pitfalls": "",
    }  # fmt: skip
    stale = await refused(memory_actions.set_summary(world.core, owner, 1, {"what": "x"}))
    assert stale.code == "stale_revision"
    bad = await refused(memory_actions.set_summary(world.core, owner, 2, {"who": "x"}))
    assert (bad.code, bad.details["field"]) == ("unknown_field", "sections.who")
    current = await world.read(lambda c: memory_store.summary(c, world.project_id))
    assert current is not None and current["rev"] == 2


async def test_decisions_carry_alternatives_and_constraints_and_bump_the_version(
    world: World,
) -> None:
    before = await version(world)
    made = await decision_actions.propose_decision(
        world.core, world["owner"], title="存储", context="单机", decision="SQLite",
        alternatives=[{"option": "PostgreSQL", "why_rejected": "要多一个服务"}],
        constraints="一台机器",
    )  # fmt: skip
    revision = made["revisions"][0]
    assert revision["alternatives"] == [{"option": "PostgreSQL", "why_rejected": "要多一个服务"}]
    assert revision["constraints"] == "一台机器" and made["archived"] is False
    assert await version(world) == before + 1
    assert (await world.frames("memory"))[-1]["kind"] == "decision"
    error = await refused(
        decision_actions.propose_decision(
            world.core,
            world["owner"],
            title="t",
            context="c",
            decision="d",
            alternatives=[{"option": "Redis", "why_rejected": ""}],
        )
    )
    assert (error.code, error.details["field"]) == ("empty_field", "alternatives[0].why_rejected")


async def test_past_the_decisions_cap_the_oldest_decisions_are_archived(world: World) -> None:
    for n in range(6):  # ~6 KB each: five fit in 32 KiB
        await decision_actions.propose_decision(
            world.core, world["owner"], title=f"决定 {n}", context="背" * 1000,
            decision="定" * 1000, alternatives=[{"option": "不定", "why_rejected": "要有结论"}],
        )  # fmt: skip
    log = await world.read(lambda c: decision_actions.decision_log(c, world.project_id))
    assert [(d["title"], d["archived"]) for d in log][:2] == [("决定 0", True), ("决定 1", False)]
    assert (await overview(world))["archived"] == {"decision": 1}
    page = await world.read(
        lambda c: memory_actions.page(
            c, world.project_id, "decision", archived=True, before=None, limit=10
        )
    )
    assert [d["title"] for d in page["entries"]] == ["决定 0"]


async def test_a_closed_project_refuses_memory_writes(world: World) -> None:
    await world.write(
        lambda c, tx: c.execute(
            "UPDATE projects SET state = 'paused' WHERE id = ?", (world.project_id,)
        )
    )
    error = await refused(memory_actions.add_entry(world.core, world["be"], "fact", {"text": "x"}))
    assert error.code == "project_not_accepting"


async def test_every_record_write_is_indexed_for_search_in_its_transaction(world: World) -> None:

    async def body_of(kind: str, record_id: int) -> list[str]:
        return await world.read(
            lambda c: [
                str(r[0])
                for r in c.execute(
                    "SELECT body FROM search_records WHERE kind = ? AND record_id = ?"
                    " AND project_id = ?",
                    (kind, record_id, world.project_id),
                )
            ]
        )

    owner = world["owner"]
    fact = await memory_actions.add_entry(world.core, owner, "fact", {"text": "部署用 systemd"})
    assert await body_of("fact", fact["id"]) == ["部署用 systemd"]
    await memory_actions.edit_entry(world.core, owner, fact["id"], 1, {"text": "部署用 docker"})
    assert await body_of("fact", fact["id"]) == ["部署用 docker"]
    await memory_actions.archive_entry(world.core, owner, fact["id"])
    assert await body_of("fact", fact["id"]) == ["部署用 docker"]  # the archive stays findable
    summary = await memory_actions.set_summary(world.core, owner, 0, {"pitfalls": "别用 lockf"})
    assert "坑：别用 lockf" in (await body_of("summary", summary["id"]))[0]
    made = await decision_actions.propose_decision(
        world.core,
        owner,
        title="存储",
        context="单机",
        decision="SQLite",
        alternatives=[{"option": "PostgreSQL", "why_rejected": "多一个服务"}],
    )
    [text] = await body_of("decision", made["id"])
    assert "SQLite" in text and "PostgreSQL" in text and "多一个服务" in text
    # A refused write indexes nothing.
    with pytest.raises(RoomError):
        await memory_actions.add_entry(world.core, owner, "fact", {"text": ""})
    assert await world.count("search_records") == 3
