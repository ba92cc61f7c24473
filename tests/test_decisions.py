"""Decisions and requirement changes through the real actions on a real database."""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest

from room.actions import decisions as decision_actions
from room.actions import task_updates as updates
from room.actions.decisions import ChangeCommand, parse_change_command
from room.actions.messages import append_message
from room.errors import RoomError
from room.rules.render import render
from room.store import Tx
from tests.support.task_world import (
    World,
    item,
    plan,
    review,
    submit,
    world_on_both_stores,  # noqa: F401 (the fixture)
    write_file,
)

pytestmark = pytest.mark.anyio


async def say(world: World, who: str, body: str) -> int:
    """A message appended to the timeline as the send path stores it (no recipients)."""
    member = world[who]

    def job(conn: sqlite3.Connection, tx: Tx) -> int:
        message_id, _, _ = append_message(
            conn,
            tx,
            project_id=world.project_id,
            author_id=member.id,
            kind="chat",
            body=body,
            html=render(body),
        )
        return message_id

    return await world.write(job)


async def change(world: World, message_id: int, who: str = "owner", keys: Any = None) -> Any:
    return await world.write(
        lambda c, tx: decision_actions.requirement_change_from_message(
            c, tx, message_id, world[who], keys
        )
    )


async def decisions(world: World) -> list[dict[str, Any]]:
    return await world.read(lambda c: decision_actions.decision_log(c, world.project_id))


# -- the /change command ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "parsed"),
    [
        ("/change 列表按时间倒序", ChangeCommand(None, "列表按时间倒序")),
        ("/change [api, ui] 改用 v2 路径", ChangeCommand(("api", "ui"), "改用 v2 路径")),
        ("/change[api]改用 v2", ChangeCommand(("api",), "改用 v2")),
        ("  /change\n第一行\n第二行", ChangeCommand(None, "第一行\n第二行")),
        ("/change", ChangeCommand(None, "")),
        ("为什么这样设计？", None),
        ("/changes 不是命令", None),
        ("请看 /change 的用法", None),
        ("`/change` 是什么", None),
    ],
)
def test_only_a_leading_change_command_counts(body: str, parsed: ChangeCommand | None) -> None:
    assert parse_change_command(body) == parsed


# -- decisions ----------------------------------------------------------------------------------


async def test_people_decide_at_once_agents_propose_and_people_accept(world: World) -> None:
    mine = await decision_actions.propose_decision(
        world.core, world["owner"], title="用 SQLite", context="单机部署", decision="只用 SQLite",
        alternatives=[{"option": "PostgreSQL", "why_rejected": "多一个服务"}],
    )  # fmt: skip
    assert (mine["label"], mine["status"], mine["accepted_by"]) == (
        "ADR-0001",
        "accepted",
        world["owner"].id,
    )
    proposal = await decision_actions.propose_decision(
        world.core, world["lead"], title="用 PostgreSQL", context="多机", decision="换 PG",
        consequences="要运维数据库", supersedes=1,
        alternatives=[{"option": "继续用 SQLite", "why_rejected": "多机时写不过来"}],
    )  # fmt: skip
    assert (proposal["label"], proposal["status"], proposal["supersedes"]) == (
        "ADR-0002",
        "proposed",
        "ADR-0001",
    )
    assert (await decisions(world))[0]["status"] == "accepted"  # nothing retired by a proposal
    with pytest.raises(RoomError) as caught:
        await decision_actions.accept_decision(world.core, world["lead"], 2)
    assert caught.value.code == "human_only" and caught.value.http_status == 403
    accepted = await decision_actions.accept_decision(world.core, world["owner"], 2)
    assert accepted["status"] == "accepted" and accepted["accepted_by"] == world["owner"].id
    log = {d["label"]: d for d in await decisions(world)}
    assert log["ADR-0001"]["status"] == "superseded"
    assert log["ADR-0001"]["superseded_by"] == "ADR-0002"
    with pytest.raises(RoomError) as again:
        await decision_actions.accept_decision(world.core, world["owner"], 2)
    assert again.value.code == "decision_not_proposed"
    notices = [m["body"] for m in await world.messages()]
    assert any("提议了决定 ADR-0002" in n and "等待人类接受" in n for n in notices)
    assert any("接受了决定 ADR-0002" in n for n in notices)
    with pytest.raises(RoomError) as empty:
        await decision_actions.propose_decision(
            world.core, world["owner"], title=" ", context="x", decision="y"
        )
    assert empty.value.code == "bad_decision"
    # A decision says what it chose over what: none rejected is refused, nothing stored.
    nothing: tuple[list[dict[str, str]] | None, ...] = (None, [])
    for alternatives in nothing:
        with pytest.raises(RoomError) as bare:
            await decision_actions.propose_decision(
                world.core, world["owner"], title="无备选", context="x", decision="y",
                alternatives=alternatives,
            )  # fmt: skip
        assert (bare.value.code, bare.value.http_status) == ("alternatives_required", 400)
        assert bare.value.details["field"] == "alternatives"
    assert len(await decisions(world)) == 2


# -- requirement changes ------------------------------------------------------------------------


async def test_a_requirement_change_invalidates_a_pass_and_requires_receipts(world: World) -> None:
    await plan(world, item("api", "be", criteria=2), item("doc", "owner"), item("ui", "fe", "api"))
    await updates.change_task(world.core, world["be"], "api", "start")
    await submit(world, "be", "api", write_file(world, "api.py", "v1"))
    task = await review(world, "lead", "api", (1, True))
    assert task["criteria"][0]["passed"] and task["state"] == "in_review"
    before = len(await world.deliveries("be"))

    question = await say(world, "owner", "为什么这样设计？")
    assert parse_change_command("为什么这样设计？") is None
    assert (await world.task("api"))["state"] == "in_review"  # a question changes nothing

    words = "/change 接口路径改为 /v2/items，并且返回总数"
    message_id = await say(world, "owner", words)
    result = await change(world, message_id)
    assert result == {"decision": "ADR-0001", "number": 1, "revision": 2,
                      "affected": ["api", "doc", "ui"], "skipped": [], "duplicate": False}  # fmt: skip
    assert (await change(world, message_id))["duplicate"] is True  # once per message
    board = {t["key"]: t for t in (await world.board())["tasks"]}
    assert {k: t["state"] for k, t in board.items()} == {
        "api": "needs_sync",
        "doc": "needs_sync",
        "ui": "needs_sync",
    }
    assert board["api"]["sync_prior"] == "in_review"
    assert [c["passed"] for c in board["api"]["criteria"]] == [None, None]
    assert board["api"]["sync"][0]["decision"] == "ADR-0001"
    [requirement] = await decisions(world)
    latest = requirement["revisions"][-1]
    assert latest["original_text"] == words and latest["decision"].startswith("接口路径改为")
    assert latest["source_message_id"] == message_id
    assert [(s["task"], s["synced"]) for s in latest["sync"]] == [
        ("api", False),
        ("doc", False),
        ("ui", False),
    ]
    notice = (await world.deliveries("be"))[before:]
    assert len(notice) == 1 and "需求变更 ADR-0001 第 2 版" in notice[0][0]
    assert "`api` @be" in notice[0][0] and "`doc` @owner" in notice[0][0]
    # People read where to click; the owner agent alone gets the tool call (issue 14).
    assert "「已同步」" in notice[0][0] and "room_task_update" not in notice[0][0]
    assert "needs_sync" not in notice[0][0]
    [agent_text] = (await world.agent_texts("be"))[before:]
    assert 'action="sync"' in agent_text
    # The marked message itself carries the mark: the page shows a badge on it.
    [marked] = [m for m in await world.messages() if m["id"] == message_id]
    assert marked["meta"]["requirement_change"] == {"decision": "ADR-0001", "revision": 2}
    assert marked["body"] == words and marked["edited_at"] is None
    [reply] = [m for m in await world.messages() if m.get("reply_to") == message_id]
    assert reply["kind"] == "system" and set(reply["mentions"]) == {
        world["be"].id, world["owner"].id, world["fe"].id,
    }  # fmt: skip
    with pytest.raises(RoomError):
        await review(world, "lead", "api", (2, True))  # not in review any more

    # receipts: only the owner, and each one clears its task
    with pytest.raises(RoomError):
        await updates.change_task(world.core, world["fe"], "api", "sync")
    api = await updates.change_task(world.core, world["be"], "api", "sync", note="已读，改路径")
    assert api["state"] == "in_progress" and api["sync"] == []
    doc = await updates.change_task(world.core, world["owner"], "doc", "sync_receipt")
    assert doc["state"] == "ready"
    [requirement] = await decisions(world)
    synced = {
        s["task"]: (s["synced"], s["synced_by"]) for s in requirement["revisions"][-1]["sync"]
    }
    assert synced == {
        "api": (True, world["be"].id),
        "doc": (True, world["owner"].id),
        "ui": (False, None),
    }
    assert [(r["task"], r["member_id"], r["synced"]) for r in requirement["receipts"]] == [
        ("api", world["be"].id, True),
        ("doc", world["owner"].id, True),
        ("ui", world["fe"].id, False),
    ]
    timeline = [m["body"] for m in await world.messages()]
    assert any(b.startswith("✅ @be 已同步 ADR-0001 第 2 版（任务 `api`）") for b in timeline)

    # the old pass no longer counts: a new revision must pass every criterion again
    api = await submit(world, "be", "api", write_file(world, "api.py", "v2"))
    assert api["revision"] == 2 and api["missing"] == [1, 2]
    api = await review(world, "lead", "api", (2, True))
    assert api["state"] == "in_review"
    api = await review(world, "lead", "api", (1, True))
    assert api["state"] == "accepted"
    assert question  # the question stayed an ordinary message


async def test_targets_a_second_change_and_what_is_not_interrupted(world: World) -> None:
    await plan(world, item("api", "be"), item("ui", "fe"), item("ops", "be"))
    await updates.change_task(world.core, world["fe"], "ui", "start")
    await submit(world, "fe", "ui", write_file(world, "ui.html", "<p>"))
    await review(world, "lead", "ui", (1, True))
    await updates.change_task(world.core, world["owner"], "ops", "cancel", note="不做了")
    first = await change(world, await say(world, "owner", "/change 所有接口都要鉴权"))
    assert first["affected"] == ["api"]
    assert first["skipped"] == [{"task": "ui", "state": "accepted"},
                                {"task": "ops", "state": "cancelled"}]  # fmt: skip
    second = await change(world, await say(world, "owner", "/change [api] 鉴权用 token"))
    assert (second["revision"], second["affected"]) == (3, ["api"])
    api = await world.task("api")
    assert api["state"] == "needs_sync" and api["sync_prior"] == "ready"
    assert [s["revision"] for s in api["sync"]] == [3]  # the newer request replaces the older
    [requirement] = await decisions(world)
    closed = {(s["revision"], s["task"]): s["closed"] for r in requirement["revisions"]
              for s in r["sync"]}  # fmt: skip
    assert closed == {(2, "api"): "superseded", (3, "api"): None}
    api = await updates.change_task(world.core, world["be"], "api", "sync")
    assert api["state"] == "ready"
    with pytest.raises(RoomError) as unknown:
        await change(world, await say(world, "owner", "/change [nope] x"))
    assert unknown.value.code == "no_task"


async def test_only_people_mark_changes_and_only_of_their_words(world: World) -> None:
    await plan(world, item("api", "be"))
    from_agent = await say(world, "lead", "/change 我觉得应该重写")
    with pytest.raises(RoomError) as not_words:
        await change(world, from_agent)
    assert not_words.value.code == "not_human_words"
    from_person = await say(world, "owner", "/change 加一个导出按钮")
    with pytest.raises(RoomError) as not_person:
        await change(world, from_person, who="lead")
    assert not_person.value.code == "human_only"
    with pytest.raises(RoomError) as empty:
        await change(world, await say(world, "owner", "/change   "))
    assert empty.value.code == "empty_change"
    assert (await world.task("api"))["state"] == "ready"
    [requirement] = await decisions(world)
    assert [r["revision"] for r in requirement["revisions"]] == [1]  # only the goal


async def test_a_change_before_any_plan_is_the_first_requirement(world: World) -> None:
    message_id = await say(world, "owner", "/change 先做移动端")
    result = await change(world, message_id)
    assert (result["revision"], result["affected"]) == (1, [])
    [requirement] = await decisions(world)
    assert (requirement["kind"], requirement["status"]) == ("requirement", "accepted")
    assert requirement["created_by"] == world["owner"].id
    assert [(r["revision"], r["decision"]) for r in requirement["revisions"]] == [(1, "先做移动端")]
    await plan(world, item("app", "fe"))
    [requirement] = await decisions(world)
    assert requirement["tasks"] == ["app"]  # later plans bind to the same requirement
    assert "没有需要同步的任务" in (await world.messages())[1]["body"]
