"""The agents' work tools end to end: a real server (its sandbox probed at start), a local
OpenAI-compatible server scripting the model's tool calls, and the workspace on disk."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.inproc import App, error, owner_user
from tests.support.live_room import Room, agent_replies, eventually
from tests.support.llm_servers import TEST_API_KEY, Reply, openai_text, openai_tool_calls
from tests.support.processes import running

pytestmark = [pytest.mark.anyio]

WRITE_AND_SHELL = {"fs_write", "fs_edit", "shell"}


def workspace(room: Room) -> Path:
    return room.server.data / "workspaces" / str(room.project)


def results_in(request: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The tool results a chat request carries, by call id: what the model was told."""
    return {
        m["tool_call_id"]: json.loads(m["content"])
        for m in request["messages"]
        if m["role"] == "tool"
    }


def tool_names(request: dict[str, Any]) -> list[str]:
    return [t["function"]["name"] for t in request["tools"]]


def calls(*items: tuple[str, str, dict[str, Any]]) -> Reply:
    return openai_tool_calls(list(items))


def tool_entries(room: Room) -> list[dict[str, Any]]:
    """Every tool call the timeline shows, in order."""
    return [c for m in room.messages() if m["kind"] == "tool" for c in m["meta"]["tool"]["calls"]]


def backend(room: Room, handle: str = "be") -> int:
    member_id = room.add_agent(handle, "backend", "后端")
    room.route(handle)
    return member_id


def patch_settings(room: Room, body: dict[str, Any]) -> dict[str, Any]:
    status, data = room.server.request(
        "PATCH", f"/api/projects/{room.project}/settings", body, headers=room.owner.headers
    )
    assert status == 200, data
    return dict(data["settings"])


async def test_a_backend_agent_writes_edits_searches_runs_and_cites_its_command(
    room: Room,
) -> None:
    backend(room)
    plan = {
        "goal": "加法",
        "items": [{"key": "api", "title": "加法函数", "owner": "be", "acceptance": ["能算 1+1"]}],
        "start": True,
    }

    def submit(request: dict[str, Any]) -> Reply:
        command_id = results_in(request)["c1"]["command_result_id"]
        return calls(
            ("t1", "room_task_update", {"task": "api", "action": "start"}),
            ("t2", "room_task_update", {"task": "api", "action": "submit", "summary": "算出 2",
                                        "commands": [command_id]}),
        )  # fmt: skip

    room.llm.push(
        calls(
            (
                "w1",
                "fs_write",
                {"path": "src/calc.py", "content": "def add(a, b):\n    return a+b\n"},
            ),
            ("r1", "fs_read", {"path": "src/calc.py"}),
        ),
        calls(
            ("e1", "fs_edit", {"path": "src/calc.py", "old": "a+b", "new": "a + b"}),
            ("s1", "fs_search", {"pattern": r"return a \+ b"}),
        ),
        calls(
            ("c1", "shell", {"command": "python3 -c 'print(1+1)'"}),
            ("c2", "shell", {"command": "ls src"}),
        ),
        submit,
        openai_text("做完了，1+1=2"),
    )
    room.post(f"/api/projects/{room.project}/plan", plan, expect=201)
    await eventually(lambda: agent_replies(room, "be"), timeout=30)

    # The file is really in the project's workspace, edited.
    assert (workspace(room) / "src/calc.py").read_text() == "def add(a, b):\n    return a + b\n"
    requests = room.llm.chat_requests
    assert set(tool_names(requests[0])) >= WRITE_AND_SHELL
    seen = results_in(requests[-1])
    assert seen["w1"] == {"ok": True, "path": "src/calc.py", "bytes_written": 30, "created": True}
    assert seen["r1"]["text"] == "def add(a, b):\n    return a+b\n"
    assert seen["e1"]["ok"] is True and seen["e1"]["lines"] == [2]
    assert [(h["path"], h["line"]) for h in seen["s1"]["hits"]] == [("src/calc.py", 2)]
    python, ls = seen["c1"], seen["c2"]
    assert (python["exit_code"], python["output"], python["sandboxed"]) == (0, "2\n", True)
    assert (ls["exit_code"], ls["output"], ls["killed"]) == (0, "calc.py\n", None)

    # The timeline shows the commands with their exit codes, and the file writes.
    entries = {e["name"] + e["arguments"]: e for e in tool_entries(room)}
    shown = [e["command"] for e in entries.values() if "command" in e]
    assert [(c["command"], c["exit_code"], c["output"]) for c in shown] == [
        ("python3 -c 'print(1+1)'", 0, "2\n"),
        ("ls src", 0, "calc.py\n"),
    ]
    assert shown[0]["command_result_id"] == python["command_result_id"]
    files = [e["file"] for e in entries.values() if "file" in e]
    assert files == [{"path": "src/calc.py", "bytes": 30}, {"path": "src/calc.py", "bytes": 32}]
    assert any("exit 0" in m["body"] for m in room.messages() if m["kind"] == "tool")

    # The recorded command was accepted as the submission's evidence.
    assert seen["t2"]["ok"] is True, seen["t2"]
    task = room.get(f"/api/projects/{room.project}/tasks/api")["task"]
    assert task["state"] == "in_review"
    with room.db() as conn:
        row = conn.execute(
            "SELECT command, exit_code, output_tail FROM command_results WHERE id = ?",
            (python["command_result_id"],),
        ).fetchone()
    assert row == ("python3 -c 'print(1+1)'", 0, "2\n")


async def test_design_and_read_only_roles_lose_write_and_shell_even_when_forced(
    room: Room,
) -> None:
    designer = room.add_agent("ux", "design", "设计")
    room.route("ux")
    room.llm.push(
        calls(("x1", "shell", {"command": "touch forced.txt"}), ("x2", "fs_list", {})),
        openai_text("我不能运行命令"),
    )
    room.say("@ux 运行一下")
    await eventually(lambda: agent_replies(room, "ux"))
    first, second = room.llm.chat_requests
    offered = set(tool_names(first))
    assert {"fs_list", "fs_glob", "fs_read", "fs_search"} <= offered
    assert not offered & WRITE_AND_SHELL
    told = results_in(second)
    assert told["x1"]["error"] == "tool_refused" and told["x2"]["ok"] is True
    assert not (workspace(room) / "forced.txt").exists()
    card = room.get(f"/api/projects/{room.project}/members/{designer}")["member"]
    assert card["read_only"] is True and "shell" not in card["tools"]

    # An owner marks backend read-only: the backend agent loses the same tools.
    be = backend(room)
    assert patch_settings(room, {"read_only_roles": ["backend"]})["read_only_roles"] == ["backend"]
    room.llm.push(
        calls(("y1", "fs_write", {"path": "x.txt", "content": "x"})),
        openai_text("只读"),
    )
    room.say("@be 写个文件")
    await eventually(lambda: agent_replies(room, "be"))
    offered = set(tool_names(room.llm.chat_requests[-2]))
    assert "fs_read" in offered and not offered & WRITE_AND_SHELL
    assert results_in(room.llm.chat_requests[-1])["y1"]["error"] == "tool_refused"
    assert not (workspace(room) / "x.txt").exists()
    detail = room.get(f"/api/projects/{room.project}")
    member = next(m for m in detail["members"] if m["id"] == be)
    assert member["read_only"] is True and member["sandboxed"] is True
    assert detail["project"]["settings"]["read_only_roles"] == ["backend"]


async def test_commands_cannot_read_secrets_or_reach_the_network_unless_allowed(
    room: Room, listener: tuple[int, list[int]]
) -> None:
    port, accepted = listener
    backend(room)
    connect = f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), 3)\""
    room.llm.push(
        calls(
            ("a", "shell", {"command": "cat /etc/shadow"}),
            ("b", "shell", {"command": connect}),
            ("c", "shell", {"command": "env"}),
            ("d", "shell", {"command": "ls ../"}),
        ),
        openai_text("看完了"),
    )
    room.say("@be 试试")
    await eventually(lambda: agent_replies(room, "be"))
    told = results_in(room.llm.chat_requests[-1])
    assert told["a"]["exit_code"] != 0 and "No such file" in told["a"]["output"]
    assert told["b"]["exit_code"] == 1 and accepted == []
    assert TEST_API_KEY not in told["c"]["output"] and "PATH=" in told["c"]["output"]
    assert "room.sqlite" not in told["d"]["output"]  # the data folder is hidden

    assert patch_settings(room, {"network": True})["network"] is True
    room.llm.push(calls(("e", "shell", {"command": connect})), openai_text("连上了"))
    room.say("@be 再试")
    await eventually(lambda: len(agent_replies(room, "be")) == 2)
    assert results_in(room.llm.chat_requests[-1])["e"]["exit_code"] == 0
    await eventually(lambda: accepted == [1])


# A duration no other test or process on the machine uses: ``sleep`` takes decimals, so the
# process this test starts is told apart from any other ``sleep 100``.
SLEEP = f"100.{os.getpid()}"


def sleeping() -> bool:
    """This test's ``sleep`` process exists on this machine."""
    return bool(running(f"sleep\x00{SLEEP}\x00"))


async def test_stopping_the_member_kills_its_command_within_two_seconds(room: Room) -> None:
    be = backend(room)
    room.llm.push(calls(("s", "shell", {"command": f"sleep {SLEEP}"})))
    room.say("@be 睡一会")
    card = f"/api/projects/{room.project}/members/{be}"
    await eventually(lambda: room.get(card)["running"] and len(room.llm.chat_requests) == 1)
    await eventually(sleeping)  # the command really runs
    started = time.monotonic()
    result = room.post(f"/api/projects/{room.project}/members/{be}/stop", {})
    assert result["stop_requested"] is True
    command = await eventually(
        lambda: next((e["command"] for e in tool_entries(room) if "command" in e), None)
    )
    assert time.monotonic() - started < 2.0
    assert command["killed"] == "stopped" and command["exit_code"] is None
    assert command["duration_secs"] < 3.0
    assert not sleeping()  # nothing of it is left behind
    await eventually(lambda: not room.get(card)["running"])
    assert len(room.llm.chat_requests) == 1  # the stopped turn asked the model nothing more
    # The server stays up and the member works again.
    room.llm.push(openai_text("我回来了"))
    room.say("@be 还在吗")
    assert (await eventually(lambda: agent_replies(room, "be")))[-1]["body"] == "我回来了"


async def test_bad_inputs_get_clear_errors_and_nothing_is_lost(room: Room) -> None:
    backend(room)
    folder = workspace(room)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "keep.txt").write_text("原样保留\n")
    (folder / "gbk.txt").write_bytes("中文".encode("gbk"))
    room.llm.push(
        calls(
            ("n", "fs_write", {"path": "a\u0000b.txt", "content": "x"}),
            ("big", "fs_write", {"path": "keep.txt", "content": "x" * (10 * 1024 * 1024)}),
            ("g", "fs_read", {"path": "gbk.txt"}),
            ("up", "fs_read", {"path": "../room.sqlite"}),
            ("two", "fs_edit", {"path": "keep.txt", "old": "", "new": "y"}),
        ),
        openai_text("都被拒绝了"),
    )
    room.say("@be 乱来一下")
    await eventually(lambda: agent_replies(room, "be"), timeout=30)
    told = results_in(room.llm.chat_requests[-1])
    codes = {key: told[key].get("error") for key in ("n", "big", "g", "up", "two")}
    assert codes["big"] == "content_too_large" and codes["g"] == "not_utf8"
    assert codes["n"] and codes["up"] and codes["two"] and None not in codes.values()
    assert told["big"]["details"]["limit_bytes"] == 1024 * 1024
    assert (folder / "keep.txt").read_text() == "原样保留\n"
    assert sorted(p.name for p in folder.iterdir()) == ["gbk.txt", "keep.txt"]
    assert all(e["ok"] is False for e in tool_entries(room))


# -- the settings endpoint (in-process app) ---------------------------------------------------------


def test_only_owners_change_work_settings_and_bad_values_are_refused(app: App) -> None:
    owner = owner_user(app)
    person, cookie = app.new_user("mia", "Mia")
    project_id, _, token = app.project_with("设置", owner, person)
    path = f"/api/projects/{project_id}/settings"

    def patch(body: Any, **who: Any) -> tuple[int, Any]:
        return app.request("PATCH", path, body, **(who or {"cookie": app.owner_cookie}))

    assert error(patch({"network": True}, token=token)) == (403, "human_only")
    assert error(patch({"network": True}, cookie=cookie)) == (403, "not_owner")
    for bad in (
        {"network": "yes"},
        {"read_only_roles": ["wizard"]},
        {"limits": {"tool_calls_per_turn": 0}},
        {"limits": {"command_timeout_secs": "5"}},
        {"sandbox": True},
        {},
    ):
        assert error(patch(bad)) == (400, "bad_body"), bad
    # A refused value names its field, so the page can say which one in its language.
    _, refused = patch({"limits": {"command_timeout_secs": -5}})
    assert refused["error"]["details"]["field"] == "limits.command_timeout_secs"
    status, data = patch({"unsandboxed": True, "limits": {"command_timeout_secs": 5}})
    assert status == 200
    assert data["settings"]["unsandboxed"] is True
    assert data["settings"]["limits"]["command_timeout_secs"] == 5
    assert data["settings"]["limits"]["tool_calls_per_turn"] == app.settings.tool_calls_per_turn
    assert data["settings"]["limits_set"] == ["command_timeout_secs"]
    assert data["settings"]["limit_defaults"]["command_timeout_secs"] == 120.0
    status, detail = app.request("GET", f"/api/projects/{project_id}", cookie=app.owner_cookie)
    assert detail["project"]["settings"] == data["settings"]
    status, _ = patch({"limits": {"command_timeout_secs": None}})
    _, detail = app.request("GET", f"/api/projects/{project_id}", cookie=app.owner_cookie)
    assert detail["project"]["settings"]["limits"]["command_timeout_secs"] == 120.0
    assert detail["project"]["settings"]["limits_set"] == []
    _, audit = app.request("GET", f"/api/projects/{project_id}/audit", cookie=app.owner_cookie)
    outcomes = [e["outcome"] for e in audit["events"] if e["action"] == "project.settings"]
    assert sorted(outcomes) == ["ok", "ok", "refused", "refused"]


async def test_a_turn_past_its_tool_call_limit_is_braked_with_a_notice(room: Room) -> None:
    backend(room)
    assert patch_settings(room, {"limits": {"tool_calls_per_turn": 2}})["limits"] == {
        "tool_calls_per_turn": 2,
        "command_timeout_secs": 120.0,
        "command_output_bytes": 16 * 1024,
        "command_secs_per_turn": 600.0,
        "workspace_disk_mib": 10 * 1024,
    }
    room.llm.push(
        calls(("a", "fs_list", {}), ("b", "fs_glob", {"pattern": "*"})),
        calls(("c", "shell", {"command": "touch late.txt"})),
        openai_text("不会走到这里"),
    )
    room.say("@be 多做几步")
    notice = await eventually(
        lambda: [m for m in room.messages() if m["kind"] == "system" and "工具制动" in m["body"]]
    )
    assert "调用了 3 次工具（上限 2）" in notice[0]["body"]
    assert room.get(f"/api/projects/{room.project}/brake")["brake"]["tripped"] == "tool_calls"
    assert not (workspace(room) / "late.txt").exists()  # the call past the limit never ran
    assert len(room.llm.chat_requests) == 2 and agent_replies(room, "be") == []
