"""Agents doing real work through a server subprocess: per-agent model scripts behind one local
OpenAI-compatible server (:class:`Scripts`), real git repositories, and the requests a person
makes along the way. Shared by the modules that drive whole tasks (test_real_work and the
attack tests built on it).

Their fixtures are conftest's: ``scripts``, ``scripted_llm`` (a module makes it the ``room``
fixture's ``llm``), and ``hermetic_git`` and ``workspace_roots``, which a module asks for in its
``pytestmark`` (``usefixtures`` fixtures are set up before ``room`` starts the server, which
inherits their environment)."""

from __future__ import annotations

import collections
import json
import re
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.support.live_room import Room
from tests.support.llm_servers import (
    Reply,
    openai_text,
    openai_tool_calls,
)

Step = Reply | Callable[[dict[str, Any]], Reply]


# An agent's module and the command that runs it, as the real-work tests write them.
PYTHON = "python3 -c \"import sys; sys.path.insert(0, 'src'); import calc; print(calc.add(1, 1))\""
CALC = "def add(a, b):\n    return a + b\n"


class Scripts:
    """Per-agent scripts behind one model server, and what each agent was shown."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._steps: dict[str, collections.deque[Step]] = collections.defaultdict(collections.deque)
        self.seen: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
        self.errors: list[str] = []  # a step that raised: checked when the test ends

    def push(self, handle: str, *steps: Step) -> None:
        with self._lock:
            self._steps[handle].extend(steps)

    def answer(self, body: dict[str, Any]) -> Reply:
        found = re.search(r"你是 @([\w.-]+)", str(body["messages"][0]["content"]))
        handle = found.group(1) if found else "?"
        with self._lock:
            self.seen[handle].append(body)
            step = self._steps[handle].popleft() if self._steps[handle] else None
        if step is None:
            return openai_text("好的。")  # an unscripted turn (a notice, say) ends quietly
        if isinstance(step, Reply):
            return step
        try:
            return step(body)
        except Exception as exc:  # the client would retry and take the next step: say so
            self.errors.append(f"{handle}: {exc!r}")
            raise

    def told(self, handle: str) -> dict[str, dict[str, Any]]:
        """Every tool result ``handle``'s model was told in its latest turn, by call id."""
        return results_in(self.seen[handle][-1])


def results_in(request: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        m["tool_call_id"]: json.loads(m["content"])
        for m in request["messages"]
        if m["role"] == "tool"
    }


def calls(*items: tuple[str, str, dict[str, Any]]) -> Reply:
    return openai_tool_calls(list(items))


def git(cwd: Path, *args: str) -> str:
    run = subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True, timeout=20
    )
    return run.stdout.strip()


def git_workspace(room: Room, tmp_path: Path) -> Path:
    """A repository with one commit on ``main``, made the project's workspace by its owner."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "README.md").write_text("# app\n")
    git(repo, "add", "README.md")
    git(repo, "-c", "user.name=Owner", "-c", "user.email=owner@example.com",
        "commit", "-q", "-m", "start")  # fmt: skip
    status, data = room.server.request(
        "PUT", f"/api/projects/{room.project}/workspace", {"path": str(repo)},
        headers=room.owner.headers,
    )  # fmt: skip
    assert status == 200, data
    assert (data["workspace"]["git"], data["workspace"]["mode"]) == (True, "worktrees")
    return repo


def agent(room: Room, handle: str, role: str = "backend") -> int:
    member_id = room.add_agent(handle, role, handle.upper())
    room.route(handle)
    return member_id


def plan(room: Room, *items: tuple[str, str]) -> None:
    """Tasks (key, owner), each with one criterion, started at once: owners get a delivery."""
    body = {
        "goal": "做完",
        "items": [
            {"key": key, "title": f"做 {key}", "owner": owner, "acceptance": [f"{key} 能用"]}
            for key, owner in items
        ],
        "start": True,
    }
    room.post(f"/api/projects/{room.project}/plan", body, expect=201)


def task(room: Room, key: str) -> dict[str, Any]:
    return dict(room.get(f"/api/projects/{room.project}/tasks/{key}")["task"])


def start(key: str) -> Reply:
    return calls(("start", "room_task_update", {"task": key, "action": "start"}))


def request(room: Room, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    return room.server.request(method, path, body, headers=room.owner.headers)


def patch_settings(room: Room, body: dict[str, Any]) -> None:
    status, data = request(room, "PATCH", f"/api/projects/{room.project}/settings", body)
    assert status == 200, data


def review(room: Room, key: str) -> tuple[int, Any]:
    body = {"results": [{"criterion": 1, "passed": True, "evidence": "看过文件和命令输出"}]}
    return request(room, "POST", f"/api/projects/{room.project}/tasks/{key}/review", body)


def worktree_of(room: Room, key: str = "api") -> Path:
    return Path(task(room, key)["attempt"]["path"])


def server_answers(room: Room) -> None:
    """The server is up and serves a person's request."""
    assert room.get(f"/api/projects/{room.project}")["project"]["id"] == room.project
