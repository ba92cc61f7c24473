"""A shared workspaces folder (docs/cluster.md, "A shared workspaces folder"): two room servers
on one private PostgreSQL database and one private nats-server, both naming one temporary
folder as ``ROOM_WORKSPACES_DIR``, a scripted model server, ``ROOM_LEASE_SECS`` = 2.

The project's workspace is in the shared folder, so it needs no home node: its turns run on
whichever node holds its lease. The node that ran the first turn killed, the other adopts the
lease and runs the next turn in the same folder — no move, no ``home_node_offline``. A node
paused mid-turn keeps the workspace's lock: the node that adopted its lease opens no turn there
until the paused one, continued, has ended its own (refused by the fence)."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.support.llm_servers import OpenAIServer, openai_text, openai_tool_call
from tests.support.nats import NatsServer
from tests.support.server import ServerProcess, Session
from tests.test_cluster_leases import counters, node, node_id, rows, say, sign_in, until

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.usefixtures("clients"),
    pytest.mark.timeout(300),  # two nodes, a kill and a pause past the lease, on 2 shared cores
]


def shared_node(data: Path, dsn: str, bus: NatsServer, llm: OpenAIServer, shared: Path) -> Any:
    server = node(data, dsn, bus, llm)
    server.env["ROOM_WORKSPACES_DIR"] = str(shared)
    return server


def developer(server: ServerProcess, owner: Session) -> tuple[int, int]:
    """The demo project and a new backend member (it may write files), on the model server."""
    project = int(server.get_json("/api/me", cookie=owner.cookie)["projects"][0]["id"])
    spec = {"role": "backend", "handle": "dev", "display_name": "开发"}
    status, body = server.request(
        "POST", f"/api/projects/{project}/members", spec, headers=owner.headers
    )
    assert status in (200, 201), body
    members = server.get_json(f"/api/projects/{project}", cookie=owner.cookie)["members"]
    dev = next(m["id"] for m in members if m["handle"] == "dev")
    route = {"scope": "member", "target": str(dev), "value": "openai/gpt-test", "reason": "测试"}
    status, body = server.request(
        "POST", f"/api/projects/{project}/routes", route, headers=owner.headers
    )
    assert status in (200, 201), body
    return project, dev


def turns_of(dsn: str, member: int) -> list[tuple[Any, ...]]:
    found = rows(dsn, "SELECT id, state, owner FROM turns WHERE member_id = %s ORDER BY id", member)
    assert sum(1 for t in found if t[1] == "running") <= 1, found  # one running turn, always
    return found


def tool_results(llm: OpenAIServer) -> list[str]:
    return [
        str(m.get("content"))
        for r in llm.chat_requests
        for m in r["messages"]
        if m.get("role") == "tool"
    ]


async def test_the_other_node_adopts_the_lease_and_works_on_in_the_same_shared_workspace(
    tmp_path: Path, pg_dsn: str, nats_server: NatsServer, llm: OpenAIServer
) -> None:
    shared = tmp_path / "shared"
    a = shared_node(tmp_path / "a", pg_dsn, nats_server, llm, shared)
    b = shared_node(tmp_path / "b", pg_dsn, nats_server, llm, shared)
    a.start()
    servers = {}
    try:
        b.start()
        on = {"a": sign_in(a), "b": sign_in(b)}
        servers = {node_id(a): ("a", a), node_id(b): ("b", b)}
        project, dev = developer(a, on["a"])
        workspace = shared / str(project)

        # The first turn runs on whichever node took the lease, in the shared folder.
        llm.push(
            openai_tool_call("fs_write", {"path": "notes.md", "content": "第一步：读配置"}),
            openai_text("写好了"),
        )
        say(b, on["b"], project, "@dev 记下第一步")
        first = await until(
            lambda: [t for t in turns_of(pg_dsn, dev) if t[1] == "completed"], "the first turn"
        )
        ran_on = str(first[0][2])
        assert (workspace / "notes.md").read_text() == "第一步：读配置"
        assert rows(pg_dsn, "SELECT holder, token FROM leases WHERE project_id = %s", project) == [
            (ran_on, 1)
        ]
        assert (shared / f"{project}.lock").is_file()  # the lock beside the workspace, not in it
        assert not (workspace / f"{project}.lock").exists()

        # That node killed: the other adopts the lapsed lease and runs the next turn there too.
        gone_name, gone = servers[ran_on]
        other_id = next(n for n in servers if n != ran_on)
        other_name, other = servers[other_id]
        gone.kill9()
        llm.push(openai_tool_call("fs_read", {"path": "notes.md"}), openai_text("接着做"))
        message = say(other, on[other_name], project, "@dev 接着做")
        await until(
            lambda: [t for t in turns_of(pg_dsn, dev) if t[1] == "completed" and t[2] == other_id],
            "the next turn on the other node",
        )
        assert rows(pg_dsn, "SELECT holder, token FROM leases WHERE project_id = %s", project) == [
            (other_id, 2)
        ]
        assert any("第一步：读配置" in r for r in tool_results(llm))  # read the same folder
        delivery = rows(
            pg_dsn,
            "SELECT state, coalesce(reason_code, '') FROM deliveries WHERE message_id = %s"
            " AND recipient_id = %s",
            message,
            dev,
        )
        assert delivery == [("consumed", "")]  # never home_node_offline: no home needed
        assert gone_name != other_name
    finally:
        a.stop()
        b.stop()


async def test_a_node_paused_mid_turn_keeps_the_shared_workspace_until_it_ends_its_turn(
    tmp_path: Path, pg_dsn: str, nats_server: NatsServer, llm: OpenAIServer
) -> None:
    shared = tmp_path / "shared"
    a = shared_node(tmp_path / "a", pg_dsn, nats_server, llm, shared)
    b = shared_node(tmp_path / "b", pg_dsn, nats_server, llm, shared)
    a.start()
    paused: ServerProcess | None = None
    try:
        b.start()
        on = {"a": sign_in(a), "b": sign_in(b)}
        servers = {node_id(a): ("a", a), node_id(b): ("b", b)}
        project, dev = developer(a, on["a"])

        llm.push(openai_text("慢慢来", delay_secs=120))  # the first turn's model call hangs
        say(a, on["a"], project, "@dev 第一件事")
        first = await until(
            lambda: [t for t in turns_of(pg_dsn, dev) if t[1] == "running"], "the first turn"
        )
        first_turn, ran_on = int(first[0][0]), str(first[0][2])
        _, holder = servers[ran_on]
        other_id = next(n for n in servers if n != ran_on)
        other_name, other = servers[other_id]
        assert holder.proc is not None
        os.kill(holder.proc.pid, signal.SIGSTOP)
        paused = holder

        # The other node adopts the lapsed lease (settling the paused turn) but opens no turn
        # while the paused node holds the workspace's lock: the message waits, pending.
        llm.push(openai_text("我接手了"))
        message = say(other, on[other_name], project, "@dev 第二件事")
        await until(
            lambda: (
                rows(pg_dsn, "SELECT holder FROM leases WHERE project_id = %s", project)
                == [(other_id,)]
            ),
            "the adoption",
        )
        await until(lambda: "still holds its shared workspace" in other.log, "the lock refused")
        # Counted for its operator, at each try (/metrics).
        refusals = counters(other, on[other_name])["room_workspace_lock_refusals_total"]
        assert refusals >= 1
        settled = [t for t in turns_of(pg_dsn, dev) if t[0] == first_turn]
        assert settled == [(first_turn, "interrupted", ran_on)]
        assert [t for t in turns_of(pg_dsn, dev) if t[2] == other_id] == []
        state = rows(
            pg_dsn,
            "SELECT state FROM deliveries WHERE message_id = %s AND recipient_id = %s",
            message,
            dev,
        )
        assert state == [("pending",)]

        # Continued, the paused node finds its lease lost, ends its turn (its writes refused)
        # and lets the workspace go: the other node's turn runs.
        os.kill(holder.proc.pid, signal.SIGCONT)
        paused = None
        await until(
            lambda: [t for t in turns_of(pg_dsn, dev) if t[1] == "completed" and t[2] == other_id],
            "the turn on the other node",
        )
        assert [t for t in turns_of(pg_dsn, dev) if t[0] == first_turn] == settled
        answers = rows(
            pg_dsn,
            "SELECT m.body FROM messages m JOIN turns t ON t.reply_message_id = m.id"
            " WHERE t.member_id = %s",
            dev,
        )
        assert answers == [("我接手了",)]
        assert json.dumps(answers, ensure_ascii=False).count("慢慢来") == 0
    finally:
        if paused is not None and paused.proc is not None:
            os.kill(paused.proc.pid, signal.SIGCONT)
        a.stop()
        b.stop()
