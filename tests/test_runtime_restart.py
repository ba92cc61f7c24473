"""``kill -9`` or a graceful stop mid-turn, then restart: no delivery stuck, none duplicated;
external agents."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path

import anyio
import pytest

from room.client import AgentClient, Batch
from tests.support import processes
from tests.support.live_room import Room, agent_replies, eventually
from tests.support.llm_servers import OpenAIServer, Reply, openai_text, openai_tool_call
from tests.support.server import start_with_openai
from tests.support.wsclient import Client

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("clients")]


def turn_states(data: Path) -> list[str]:
    with sqlite3.connect(data / "room.sqlite") as conn:
        return [r[0] for r in conn.execute("SELECT state FROM turns ORDER BY id")]


async def test_kill_mid_turn_before_any_effect_redispatches_once(
    tmp_path: Path, llm: OpenAIServer
) -> None:
    data = tmp_path / "data"
    server = start_with_openai(data, llm)
    room = Room(server, llm)
    room.route("lead")
    llm.push(Reply(body=openai_text("太慢了").body, delay_secs=30))
    sent = room.say("@lead 做一件事")
    # Killed once the slow request is with the provider: killed before it, the restarted
    # server's request would take the slow reply instead (a race a loaded machine lost).
    await eventually(lambda: turn_states(data) == ["running"] and len(llm.chat_requests) == 1)
    server.kill9()

    llm.push(openai_text("重启后完成"))
    again = start_with_openai(data, llm)
    try:
        room.server = again
        room.owner = again.login()
        replies = await eventually(lambda: agent_replies(room, "lead"))
        await anyio.sleep(0.5)
        assert [r["body"] for r in agent_replies(room, "lead")] == ["重启后完成"]
        assert replies[0]["reply_to"] == sent["message_id"]
        [delivery] = room.deliveries(sent["message_id"])
        assert (delivery["state"], delivery["mode"]) == ("consumed", "queue")
        assert turn_states(data) == ["interrupted", "completed"]
        # The rerun sees its checkpoint (the prompt is the turn's own input) and not the
        # superseded transcript of the turn that had no effect.
        request = "\n".join(m["content"] for m in llm.chat_requests[-1]["messages"])
        assert "（你的任务检查点：第 1 轮，第 0 步，被服务器重启打断）" in request
        assert "被打断时待回答的消息就是这一轮的新消息。" in request
        assert "你自己之前几轮" not in request
        recovery = room.get("/api/recovery")
        assert recovery["turns_interrupted"] == 1 and recovery["redispatched"] == 1
        with room.db() as conn:
            trail = conn.execute(
                "SELECT from_state, to_state FROM reconciliations ORDER BY id"
            ).fetchall()
        assert trail == [("delivered", "unknown"), ("unknown", "pending")]
    finally:
        again.stop()


async def test_kill_after_an_effect_is_not_rerun(tmp_path: Path, llm: OpenAIServer) -> None:
    data = tmp_path / "data"
    server = start_with_openai(data, llm)
    room = Room(server, llm)
    room.route("lead")
    llm.push(
        openai_tool_call("room_send", {"text": "已经开始处理"}),
        Reply(body=openai_text("不会到达").body, delay_secs=30),
    )
    sent = room.say("@lead 发个消息然后卡住")
    await eventually(lambda: agent_replies(room, "lead"))
    await eventually(lambda: len(llm.chat_requests) == 2)
    server.kill9()

    again = start_with_openai(data, llm)
    try:
        room.server = again
        room.owner = again.login()
        notice = await eventually(
            lambda: [m for m in room.messages() if m["kind"] == "system" and "重启" in m["body"]]
        )
        assert "不会自动重跑" in notice[0]["body"]
        await anyio.sleep(0.5)
        assert [r["body"] for r in agent_replies(room, "lead")] == ["已经开始处理"]
        [delivery] = room.deliveries(sent["message_id"])
        assert delivery["state"] == "failed" and "not re-run" in delivery["reason"]
        assert len(llm.chat_requests) == 2
        status = await anyio.run_process(
            [sys.executable, "-m", "room", "doctor", "--data", str(data)], check=False
        )
        assert status.returncode == 0, status.stdout
        assert "healthy" in status.stdout.decode(), status.stdout
    finally:
        again.stop()


async def test_kill_while_a_command_runs_is_not_rerun(tmp_path: Path, llm: OpenAIServer) -> None:
    """The turn's row says it acted before the command runs: a crash during the command never
    lets the restart run the turn (and its command) again."""
    data = tmp_path / "data"
    server = start_with_openai(data, llm)
    room = Room(server, llm)
    room.add_agent("be", "backend", "后端")
    room.route("be")
    mark = f"100.{uuid.uuid4().int % 10_000}"
    llm.push(openai_tool_call("shell", {"command": f"echo start > started.txt; sleep {mark}"}))
    sent = room.say("@be 跑一个很慢的命令")

    def running() -> bool:
        with room.db() as conn:
            row = conn.execute("SELECT side_effects FROM turns WHERE state = 'running'").fetchone()
        return row is not None and row[0] > 0 and len(llm.chat_requests) == 1

    await eventually(running)
    server.kill9()

    again = start_with_openai(data, llm)
    try:
        room.server = again
        room.owner = again.login()
        notice = await eventually(
            lambda: [m for m in room.messages() if m["kind"] == "system" and "重启" in m["body"]]
        )
        assert "不会自动重跑" in notice[0]["body"]
        await anyio.sleep(0.5)
        [delivery] = room.deliveries(sent["message_id"])
        assert delivery["state"] == "failed" and delivery["reason_code"] == "restart_after_effect"
        assert len(llm.chat_requests) == 1  # no second request: the turn was not run again
        with room.db() as conn:
            phase, pending = conn.execute(
                "SELECT phase, pending_tools_json FROM checkpoints ORDER BY id DESC LIMIT 1"
            ).fetchone()
        assert phase == "interrupted"  # and its checkpoint names the command that never finished
        assert [p.split()[0] for p in json.loads(pending)] == ["shell"]
        assert mark in pending
        # Nothing of the command outlives the killed server past the restart (a sandbox a few
        # milliseconds old can outlive it: the new server's start kills what it left).
        assert processes.running(f"sleep\x00{mark}\x00") == []
    finally:
        again.stop()


async def test_external_agent_receives_confirms_and_replies(
    tmp_path: Path, llm: OpenAIServer
) -> None:
    server = start_with_openai(tmp_path / "data", llm)
    try:
        room = Room(server, llm)
        room.add_agent("outside", "backend", "外部", driver="external")
        token = server.agent_token("演示项目", "outside")
        seen: list[Batch] = []

        async def handler(batch: Batch) -> str:
            seen.append(batch)
            return f"外部代理收到 {len(batch.deliveries)} 条"

        stop = asyncio.Event()
        client = AgentClient(server.origin, token, handler)
        async with anyio.create_task_group() as tg:
            tg.start_soon(client.run, stop)
            sent = room.say("@outside 你好")
            replies = await eventually(lambda: agent_replies(room, "outside"))
            stop.set()
        assert replies[0]["body"] == "外部代理收到 1 条"
        assert replies[0]["reply_to"] == sent["message_id"]
        assert seen[0].deliveries[0]["author_handle"] == "owner"
        [delivery] = room.deliveries(sent["message_id"])
        assert (delivery["state"], delivery["mode"]) == ("consumed", "queue")
    finally:
        server.stop()


async def test_lost_socket_leaves_unknown_then_reconciles(
    tmp_path: Path, llm: OpenAIServer
) -> None:
    from tests.support.wsclient import Client

    server = start_with_openai(tmp_path / "data", llm)
    try:
        room = Room(server, llm)
        room.add_agent("outside", "backend", "外部", driver="external")
        token = server.agent_token("演示项目", "outside")
        raw = await Client.open(server.ws_url, token=token)
        await raw.wait_for("hello")
        sent = room.say("@outside 在吗")
        inbox = await raw.wait_for("inbox")
        assert inbox["deliveries"][0]["message_id"] == sent["message_id"]
        await raw.close()  # gone before confirming receipt
        await eventually(lambda: room.deliveries(sent["message_id"])[0]["state"] == "unknown")

        async def handler(batch: Batch) -> str:
            return "补上了"

        stop = asyncio.Event()
        client = AgentClient(server.origin, token, handler)
        async with anyio.create_task_group() as tg:
            tg.start_soon(client.run, stop)
            replies = await eventually(lambda: agent_replies(room, "outside"))
            stop.set()
        assert [r["body"] for r in replies] == ["补上了"]
        [delivery] = room.deliveries(sent["message_id"])
        assert delivery["state"] == "consumed"
    finally:
        server.stop()


async def test_room_agent_command_answers_with_stdout(tmp_path: Path, llm: OpenAIServer) -> None:
    server = start_with_openai(tmp_path / "data", llm)
    proc = None
    try:
        room = Room(server, llm)
        room.add_agent("cli", "backend", "命令行", driver="external")
        token = server.agent_token("演示项目", "cli")
        errors = tmp_path / "agent.err"
        script = (
            "import json, sys; batch = json.load(sys.stdin);"
            " print('命令收到：' + batch['deliveries'][-1]['body'])"
        )
        with errors.open("wb") as log:  # the child keeps its own descriptor
            proc = subprocess.Popen(  # noqa: ASYNC220 - a long-running child, not awaited
                [
                    sys.executable,
                    "-m",
                    "room",
                    "agent",
                    "--url",
                    server.origin,
                    f"--token={token}",  # one argument: a token may start with "-"
                    "--",
                    sys.executable,
                    "-c",
                    script,
                ],
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        room.say(f"@cli 任务 {uuid.uuid4().hex[:6]}")

        def answered() -> list[dict[str, object]]:
            assert proc is not None
            if proc.poll() is not None:
                raise AssertionError(f"room agent exited {proc.returncode}: {errors.read_text()}")
            return agent_replies(room, "cli")

        # The bound is generous: the agent process imports the package and signs in first, which
        # took over 20 s once under the whole suite's load on two cores. A dead agent fails at once.
        replies = await eventually(answered, timeout=60)
        assert replies[0]["body"].startswith("命令收到：@cli 任务")
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=10)
        server.stop()


async def test_after_a_restart_only_active_projects_resume(
    tmp_path: Path, llm: OpenAIServer
) -> None:
    data = tmp_path / "data"
    server = start_with_openai(data, llm)
    room = Room(server, llm)
    room.post(f"/api/projects/{room.project}/lifecycle", {"op": "pause"})
    sent = room.say("暂停时留下的话")
    assert room.deliveries(sent["message_id"])[0]["state"] == "held"
    server.kill9()
    again = start_with_openai(data, llm)
    try:
        room.server = again
        room.owner = again.login()
        await anyio.sleep(1.0)
        assert room.deliveries(sent["message_id"])[0]["state"] == "held"
        assert agent_replies(room, "lead") == []
        room.post(f"/api/projects/{room.project}/lifecycle", {"op": "resume"})
        await eventually(lambda: agent_replies(room, "lead"))
        assert room.deliveries(sent["message_id"])[0]["state"] == "consumed"
    finally:
        again.stop()


async def test_a_graceful_restart_reruns_the_interrupted_turn(
    tmp_path: Path, llm: OpenAIServer
) -> None:
    data = tmp_path / "data"
    server = start_with_openai(data, llm)
    room = Room(server, llm)
    room.route("lead")
    llm.push(Reply(body=openai_text("太慢").body, delay_secs=30))
    sent = room.say("@lead 慢慢来")
    await eventually(lambda: room.deliveries(sent["message_id"])[0]["state"] == "delivered")
    await eventually(lambda: len(llm.chat_requests) == 1)
    server.stop()  # SIGTERM: a normal stop, not a crash
    llm.push(openai_text("重启后完成"))
    again = start_with_openai(data, llm)
    try:
        room.server, room.owner = again, again.login()
        await eventually(lambda: agent_replies(room, "lead"))
        assert [r["body"] for r in agent_replies(room, "lead")] == ["重启后完成"]
        assert room.deliveries(sent["message_id"])[0]["state"] == "consumed"
    finally:
        again.stop()


async def test_two_sockets_of_one_external_agent_never_get_the_same_delivery(room: Room) -> None:
    server = room.server
    room.add_agent("outside", "backend", "外部", driver="external")
    token = server.agent_token("演示项目", "outside")
    a = await Client.open(server.ws_url, token=token)
    b = await Client.open(server.ws_url, token=token)
    await a.wait_for("hello")
    await b.wait_for("hello")
    for i in range(6):
        room.say(f"@outside 第 {i} 件")
    seen: list[int] = []

    async def collect(client: Client) -> None:
        with anyio.move_on_after(2.0):
            while True:
                frame = await client.recv(timeout=3)
                if frame["type"] == "inbox":
                    seen.extend(d["delivery_id"] for d in frame["deliveries"])

    async with anyio.create_task_group() as tg:
        tg.start_soon(collect, a)
        tg.start_soon(collect, b)
    assert len(seen) == len(set(seen)) == 6
