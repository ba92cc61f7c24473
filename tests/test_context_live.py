"""What a real server sends a model, captured at a local OpenAI-compatible and a local
Anthropic-compatible server (the real provider code runs): every sender named in the content,
also in merged and steered messages; the agent's own earlier turns; its checkpoint after a stop
and after a restart (``kill -9``), with the prompt the cut-off turn left pending."""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.live_room import Room, agent_replies, eventually
from tests.support.llm_servers import (
    TEST_API_KEY,
    AnthropicServer,
    LLMServer,
    OpenAIServer,
    Reply,
    anthropic_text,
    anthropic_tool_use,
    openai_text,
    openai_tool_call,
)
from tests.support.server import ServerProcess, start_with_openai

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("clients")]

GATE_SECS = 20.0


class Wire:
    """One provider's local server and how to script it."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.server: LLMServer = (
            OpenAIServer(api_key=TEST_API_KEY)
            if kind == "openai"
            else AnthropicServer(api_key=TEST_API_KEY)
        )

    @property
    def model(self) -> str:
        return "openai/gpt-test" if self.kind == "openai" else "anthropic/claude-test"

    def env(self) -> dict[str, str]:
        prefix = "OPENAI" if self.kind == "openai" else "ANTHROPIC"
        return {f"{prefix}_BASE_URL": self.server.base_url, f"{prefix}_API_KEY": TEST_API_KEY}

    def text(self, text: str) -> Reply:
        return openai_text(text) if self.kind == "openai" else anthropic_text(text)

    def tool(self, name: str, args: dict[str, Any], call_id: str) -> Reply:
        if self.kind == "openai":
            return openai_tool_call(name, args, call_id=call_id)
        return anthropic_tool_use(name, args, tool_id=call_id)

    def contents(self, body: Any) -> list[str]:
        """Every text the request carries, in order (system included)."""
        out: list[str] = []
        system = body.get("system")
        if isinstance(system, str):
            out.append(system)
        for message in body["messages"]:
            content = message.get("content")
            if isinstance(content, str):
                out.append(content)
            elif isinstance(content, list):
                for block in content:
                    if block.get("type") == "text":
                        out.append(block["text"])
                    elif block.get("type") == "tool_result":
                        value = block.get("content")
                        out.append(value if isinstance(value, str) else json.dumps(value))
        return out

    def last_user_text(self, body: Any) -> str:
        last = [m for m in body["messages"] if m["role"] == "user"][-1]
        content = last["content"]
        if isinstance(content, str):
            return content
        return "\n".join(b["text"] for b in content if b.get("type") == "text")


def gated(reply: Reply, gate: threading.Event) -> Callable[[Any], Reply]:
    """A reply held back until the test opens ``gate`` (so messages can arrive meanwhile)."""

    def respond(body: Any) -> Reply:
        gate.wait(GATE_SECS)
        return reply

    return respond


@pytest.fixture(params=["openai", "anthropic"])
def wire(request: pytest.FixtureRequest) -> Iterator[Wire]:
    wire = Wire(request.param)
    with wire.server:
        yield wire


def start(data: Path, wire: Wire) -> ServerProcess:
    return ServerProcess(data, env=wire.env()).start()


async def test_every_sender_is_named_in_single_steered_and_merged_messages(
    tmp_path: Path, wire: Wire
) -> None:
    server = start(tmp_path / "data", wire)
    try:
        room = Room(server, wire.server)  # type: ignore[arg-type]
        room.route("lead", wire.model)
        li = server.invite(room.owner, room.project, "li", "李四")
        owner_name = room.members["owner"]["display_name"]

        def li_says(body: str) -> int:
            status, data = server.request(
                "POST",
                f"/api/projects/{room.project}/messages",
                {"body": body, "client_txn_id": f"li-{body}"},
                headers=li.headers,
            )
            assert status == 201, data
            return int(data["seq"])

        def quoting(body: Any) -> Reply:
            # The answer quotes its senders as the context names them: that wakes nobody.
            label = wire.last_user_text(body).split("：")[0].removeprefix("【需要你回答】")
            return wire.text(f"{label} 和大家的事都收到")

        first_gate, second_gate = threading.Event(), threading.Event()
        wire.server.push(
            gated(wire.tool("room_history", {"limit": 3}, "call_1"), first_gate),
            gated(wire.text("第一轮好了"), second_gate),
            quoting,
        )
        one = room.say("@lead 第一件事")["seq"]
        await eventually(lambda: len(wire.server.chat_requests) == 1)
        two = li_says("@lead 插一句：先看日志")  # arrives mid-turn: steered in at the next step
        first_gate.set()
        await eventually(lambda: len(wire.server.chat_requests) == 2)
        three = room.say("@lead 第三件事")["seq"]  # both wait for the next turn: merged
        four = li_says("@lead 第四件事")
        second_gate.set()
        await eventually(lambda: len(agent_replies(room, "lead")) == 2)
        await eventually(lambda: len(wire.server.chat_requests) == 3)

        single, steered, merged = wire.server.chat_requests
        assert wire.last_user_text(single) == (
            f"【需要你回答】#{one} {owner_name}（owner，人类）：@lead 第一件事"
        )
        assert wire.last_user_text(steered).endswith(
            f"（你工作时收到的新消息）\n【需要你回答】#{two} 李四（li，人类）：@lead 插一句：先看日志"
        )
        texts = wire.contents(merged)
        assert f"#{three} {owner_name}（owner，人类）：@lead 第三件事" in "\n".join(texts)
        assert (
            wire.last_user_text(merged) == f"【需要你回答】#{four} 李四（li，人类）：@lead 第四件事"
        )
        # The agent's own earlier turn: its tool call and the result it read, from its transcript.
        [own] = [t for t in texts if t.startswith("（你自己之前几轮")]
        assert "→ room_history" in own and "第一件事" in own and "第一轮好了" in own
        for body in (single, steered, merged):
            for message in body["messages"]:
                assert "name" not in message  # the sender is in the content, nowhere else
        final = agent_replies(room, "lead")[-1]
        assert final["body"] == f"#{four} 李四（li，人类） 和大家的事都收到"
        assert final["mentions"] == []
        # The steer recorded a checkpoint whose pending prompt holds both messages.
        with sqlite3.connect(tmp_path / "data" / "room.sqlite") as conn:
            rows = conn.execute(
                "SELECT phase, prompt_json FROM checkpoints WHERE turn_id = 1 ORDER BY id"
            ).fetchall()
        assert [r[0] for r in rows] == ["start", "step", "step", "steer", "end"]
        assert [p["seq"] for p in json.loads(rows[3][1])] == [one, two]
        assert json.loads(rows[4][1]) == []  # answered
    finally:
        server.stop()


def checkpoint_rows(data: Path) -> list[tuple[int, str, str]]:
    with sqlite3.connect(data / "room.sqlite") as conn:
        return conn.execute("SELECT turn_id, phase, state FROM checkpoints ORDER BY id").fetchall()


async def test_a_stopped_turn_leaves_its_prompt_for_the_next_turn(
    tmp_path: Path, llm: OpenAIServer
) -> None:
    data = tmp_path / "data"
    server = start_with_openai(data, llm)
    try:
        room = Room(server, llm)
        room.route("lead")
        gate = threading.Event()
        llm.push(gated(openai_text("不会用到"), gate), openai_text("接着做完了"))
        room.say("@lead 整理一下发布说明")
        await eventually(lambda: len(llm.chat_requests) == 1)
        assert checkpoint_rows(data) == [(1, "start", "running")]
        lead = room.members["lead"]["id"]
        room.post(f"/api/projects/{room.project}/members/{lead}/stop", {})
        await eventually(lambda: checkpoint_rows(data)[-1][1:] == ("end", "cancelled"))
        gate.set()
        room.say("@lead 继续")
        await eventually(lambda: agent_replies(room, "lead"))
        request = "\n".join(OpenAIWire.contents(llm.chat_requests[-1]))
        assert "（你的任务检查点：第 1 轮，第 1 步，被停止）" in request
        assert "\n受阻：一位成员停止了这一轮\n" in request
        assert "#1 " in request and "（owner，人类）：@lead 整理一下发布说明" in request
        # The reply is posted before the turn's end is recorded (its own write): wait for it.
        await eventually(
            lambda: checkpoint_rows(data)[-2:] == [(2, "start", "running"), (2, "end", "completed")]
        )
    finally:
        server.stop()


async def test_a_restarted_agent_continues_from_its_checkpoint_and_the_interrupted_prompt(
    tmp_path: Path, llm: OpenAIServer
) -> None:
    data = tmp_path / "data"
    server = start_with_openai(data, llm)
    room = Room(server, llm)
    room.route("lead")
    llm.push(
        openai_tool_call("room_send", {"text": "已经开始改了"}, call_id="send_1"),
        Reply(body=openai_text("不会到达").body, delay_secs=30),
    )
    sent = room.say("@lead 把配置改成中文然后汇报")
    await eventually(lambda: len(llm.chat_requests) == 2)
    server.kill9()

    llm.push(openai_text("好的，从检查点继续：配置已改成中文。"))
    again = start_with_openai(data, llm)
    try:
        room.server = again
        room.owner = again.login()
        await eventually(
            lambda: [m for m in room.messages() if m["kind"] == "system" and "重启" in m["body"]]
        )
        assert checkpoint_rows(data)[-1] == (1, "interrupted", "interrupted")
        card = room.get(f"/api/projects/{room.project}/members/{room.members['lead']['id']}")
        assert card["checkpoint"]["state"] == "interrupted"
        assert card["checkpoint"]["pending_prompt"] == [
            {"message_id": sent["message_id"], "seq": sent["seq"]}
        ]
        room.say("@lead 继续")
        replies = await eventually(
            lambda: len(agent_replies(room, "lead")) == 2 and agent_replies(room, "lead")
        )
        assert replies[-1]["body"] == "好的，从检查点继续：配置已改成中文。"
        texts = OpenAIWire.contents(llm.chat_requests[-1])
        [checkpoint] = [t for t in texts if t.startswith("（你的任务检查点")]
        lines = checkpoint.splitlines()
        assert lines[0] == "（你的任务检查点：第 1 轮，第 1 步，被服务器重启打断）"
        assert '  - room_send {"text": "已经开始改了"} ⇒ ' in "\n".join(lines)
        assert "受阻：服务器重启打断了这一轮" in lines
        assert lines[-2:] == [
            "被打断时待回答的消息（请接着处理，除非新消息另有要求）：",
            f"#{sent['seq']} {room.members['owner']['display_name']}（owner，人类）："
            "@lead 把配置改成中文然后汇报",
        ]
        [own] = [t for t in texts if t.startswith("（你自己之前几轮")]
        assert "第 1 轮 · 收到：@lead 把配置改成中文然后汇报" in own
        assert "→ room_send" in own and "（没有最终回答）" in own
        # What it said in the room is in the timeline, labelled as its own (an agent's).
        assert "负责人（lead，AI，就是你）：已经开始改了" in "\n".join(texts)
    finally:
        again.stop()


class OpenAIWire:
    @staticmethod
    def contents(body: Any) -> list[str]:
        return [m["content"] for m in body["messages"] if isinstance(m.get("content"), str)]


async def test_timeline_messages_not_read_are_announced_with_their_count(room: Room) -> None:
    """Only the last 60 timeline messages are read; the request says how many earlier ones it
    leaves out and how to read them, instead of dropping them without a word."""
    room.route("lead")
    room.server.invite(room.owner, room.project, "li", "李四")
    for n in range(70):
        room.say(f"@li 背景消息 {n}")  # for a person: no agent turn
    sent = room.say("@lead 总结一下")
    room.llm.push(openai_text("总结好了"))
    await eventually(lambda: agent_replies(room, "lead"))
    texts = OpenAIWire.contents(room.llm.chat_requests[-1])
    [timeline] = [t for t in texts if t.startswith("（最近的时间线")]
    lines = timeline.splitlines()
    shown = [line for line in lines if line.startswith("#")]
    assert len(shown) == 60 and shown[-1].endswith("：@li 背景消息 69")
    first = int(shown[0].split()[0][1:])
    # 70 chat lines and the route notice before the question, 60 of them read.
    assert first == 12
    assert (
        lines[1] == f"（更早的 11 条消息未放入上下文；需要时用 room_history（before={first}）读取）"
    )
    assert first == sent["seq"] - 60
