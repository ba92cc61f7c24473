"""The streamed partial answer (issue 28; docs/protocol.md, "Drafts"), end to end: a real server,
a local OpenAI-compatible server streaming slowly, real WebSocket clients. The answer is seen
growing over ``/ws`` in ``draft`` frames, posted once, and never stored as a draft; a client that
subscribes meanwhile gets the current draft, and one that subscribes after gets the message
alone."""

from __future__ import annotations

import sqlite3
from itertools import pairwise
from pathlib import Path
from typing import Any

import pytest

from tests.support.live_room import Room, agent_replies
from tests.support.llm_servers import (
    OpenAIServer,
    Reply,
    openai_events,
    openai_text,
    openai_tool_calls,
)
from tests.support.server import start_with_openai
from tests.support.wsclient import Client, Frame, subscribed

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("clients")]

ANSWER = "部署分三步：先备份数据库，再停掉旧服务，最后启动新版本并检查健康接口。" * 2


def slowly(reply: Reply, secs: float = 0.1) -> Reply:
    return Reply(body=reply.body, chunk_delay_secs=secs)


def drafts(client: Client, member_id: int) -> list[Frame]:
    return [f for f in client.frames if f.get("type") == "draft" and f["member_id"] == member_id]


async def watcher(room: Room, **sub: Any) -> Client:
    return await subscribed(room.server, room.owner.cookie, room.project, **sub)


async def settle(client: Client) -> None:
    """Every frame the server sent before it answers a ping has been received."""
    await client.send({"type": "ping"})
    await client.wait_for("pong")


async def test_a_streamed_answer_is_seen_growing_and_posted_once(room: Room) -> None:
    room.route("lead")
    lead = int(room.members["lead"]["id"])
    client = await watcher(room)
    room.llm.push(slowly(openai_text(ANSWER)))
    room.say("@lead 写一份部署说明")
    posted = await client.wait_for(
        lambda f: f.get("type") == "message" and f["message"]["author_id"] == lead, timeout=20
    )
    done = await client.wait_for(lambda f: f.get("type") == "draft" and f["done"], timeout=5)
    growing = [f for f in drafts(client, lead) if not f["done"]]
    # seen growing: several drafts, each a longer beginning of the answer that was posted
    assert len(growing) >= 3, [f["text"] for f in growing]
    texts = [f["text"] for f in growing]
    assert all(len(a) < len(b) for a, b in pairwise(texts))
    assert all(ANSWER.startswith(t) for t in texts) and texts[0] != ANSWER
    assert {f["turn_id"] for f in growing} == {posted["message"]["meta"]["turn_id"]}
    assert all(f["omitted"] == 0 for f in growing)
    # finalised: the draft ends naming the message that replaces it; nothing after it
    assert (
        done["message_id"] == posted["message"]["id"] and done["turn_id"] == growing[0]["turn_id"]
    )
    await settle(client)
    assert drafts(client, lead)[-1] is done
    # posted once, and nothing of the draft stored
    assert [r["body"] for r in agent_replies(room, "lead")] == [ANSWER]
    with sqlite3.connect(room.server.data / "room.sqlite") as db:
        kinds = {r[0] for r in db.execute("SELECT DISTINCT kind FROM events")}
        states = db.execute(
            "SELECT state FROM deliveries WHERE recipient_id = ?", (lead,)
        ).fetchall()
    assert "draft" not in kinds and states == [("consumed",)]


async def test_a_client_arriving_midstream_gets_the_draft_and_one_arriving_after_does_not(
    room: Room,
) -> None:
    room.route("lead")
    lead = int(room.members["lead"]["id"])
    first = await watcher(room)
    room.llm.push(slowly(openai_text(ANSWER), 0.15))
    room.say("@lead 写一份部署说明")
    shown = await first.wait_for(lambda f: f.get("type") == "draft" and not f["done"], timeout=20)
    # a client resuming from the start while the answer streams: replay, then the current draft
    late = await watcher(room, since=0)
    current = await late.wait_for("draft")
    assert current["done"] is False and current["turn_id"] == shown["turn_id"]
    assert ANSWER.startswith(current["text"]) and len(current["text"]) >= len(shown["text"])
    posted = await late.wait_for(
        lambda f: f.get("type") == "message" and f["message"]["author_id"] == lead, timeout=20
    )
    assert posted["message"]["body"] == ANSWER
    # a client resuming after the answer was posted: the message in its replay, no draft
    after = await watcher(room, since=0)
    await settle(after)
    replayed = [m for m in after.messages() if m["message"]["author_id"] == lead]
    assert [m["message"]["body"] for m in replayed] == [ANSWER]
    assert drafts(after, lead) == []


async def test_text_before_tool_calls_gives_way_to_the_tools(room: Room) -> None:
    room.route("lead")
    lead = int(room.members["lead"]["id"])
    client = await watcher(room)
    before = "我先看一下任务板，然后再回答你的问题，请稍等片刻。"
    room.llm.push(
        slowly(openai_tool_calls([("c1", "room_members", {})], text=before)),
        openai_text("任务板是空的。"),
    )
    room.say("@lead 任务板上有什么？")
    posted = await client.wait_for(
        lambda f: (
            f.get("type") == "message"
            and f["message"]["author_id"] == lead
            and f["message"]["kind"] == "chat"
        ),
        timeout=20,
    )
    await settle(client)
    seen = drafts(client, lead)
    first_end = next(i for i, f in enumerate(seen) if f["done"])
    shown = seen[:first_end]
    assert shown and all(before.startswith(f["text"]) for f in shown)
    # the preview of the text before the tool call ended with no message; the final answer's
    # draft (if one went out) ended with the message
    assert seen[first_end]["message_id"] is None
    assert seen[-1]["done"] and seen[-1]["message_id"] == posted["message"]["id"]
    assert posted["message"]["body"] == "任务板是空的。"
    assert [r["body"] for r in agent_replies(room, "lead") if r["kind"] == "chat"] == [
        "任务板是空的。"
    ]


async def test_a_stalled_answer_shows_its_draft_to_a_late_client_then_ends_with_no_message(
    tmp_path: Path, llm: OpenAIServer
) -> None:
    # 2 s of silence ends the answer (provider_timeout); the model sends a third of the answer
    # and falls silent, so no further draft goes out: what the late client gets is the one kept.
    server = start_with_openai(tmp_path / "data", llm, ROOM_PROVIDER_IDLE_TIMEOUT_SECS="2")
    try:
        room = Room(server, llm)
        room.route("lead")
        lead = int(room.members["lead"]["id"])
        first = await watcher(room)
        body = openai_text(ANSWER).body
        llm.push(Reply(body=body, stall_after=8))
        sent = "".join(
            str(e[1]["choices"][0]["delta"].get("content") or "")
            for e in openai_events(body, include_usage=False)[:8]
        )
        assert sent and ANSWER.startswith(sent) and sent != ANSWER
        room.say("@lead 写一份部署说明")
        shown = await first.wait_for(
            lambda f: f.get("type") == "draft" and not f["done"] and f["text"] == sent, timeout=20
        )
        late = await watcher(room, since=0)
        current = await late.wait_for("draft")
        assert current == shown  # the draft kept for a client that arrives meanwhile
        end = await late.wait_for("draft", timeout=20)
        assert end["done"] is True and end["message_id"] is None
        assert agent_replies(room, "lead") == [] or all(
            r["kind"] != "chat" for r in agent_replies(room, "lead")
        )
        after = await watcher(room, since=0)
        await settle(after)
        assert drafts(after, lead) == []
    finally:
        server.stop()
