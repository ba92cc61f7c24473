"""Plans, tasks and requirement changes end to end: a real server (uvicorn in a thread), real
HTTP and WebSocket clients, and agents driven by a scripted model speaking the OpenAI protocol,
so the real runtime, tools, provider and actions run.

The server is built in-process so that this issue's endpoints and tools are present whether or
not the app has them wired yet (they are added only when missing), and so that hooks the app
calls itself (the goal delivery) can be run on the server's own loop.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import anyio
import pytest
import uvicorn

from room.actions import plans as plan_actions
from room.agents.task_tools import TASK_TOOLS
from room.api import tasks as task_api
from room.app import RoomServer, create_app
from room.infra.transport import RoomWebSocketProtocol
from room.settings import Settings
from room.store import Tx
from tests.support.llm_servers import (
    TEST_API_KEY,
    OpenAIServer,
    Reply,
    openai_text,
    openai_tool_calls,
)
from tests.support.server import ServerProcess, Session
from tests.support.wsclient import Client

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("clients")]

API_KEY = TEST_API_KEY
R = TypeVar("R")


class LiveRoom:
    """An in-process server on an ephemeral port; ``http`` has the HTTP helpers of the
    subprocess harness (login, requests, agent tokens), pointed at it."""

    def __init__(self, data: Path) -> None:
        self.http = ServerProcess(data)
        # The tests' workspaces are beside the data folder, outside the default roots
        # (<data>/workspaces): the operator's setting allows them.
        self.settings = Settings(
            data=data, port=self.http.port, workspace_roots=(str(data.parent),)
        )
        room_server = RoomServer(self.settings, ws_protocol=RoomWebSocketProtocol)
        self.app = create_app(self.settings, room_server)
        self.loop: asyncio.AbstractEventLoop | None = None
        paths = {getattr(r, "path", None) for r in self.app.routes}
        self.app.router.routes.extend(r for r in task_api.endpoints if r.path not in paths)
        inner = self.app.router.lifespan_context

        @asynccontextmanager
        async def lifespan(app: Any) -> AsyncIterator[Any]:
            async with inner(app) as state:
                self.loop = asyncio.get_running_loop()
                tools = app.state.core.agents.tools
                for name, tool in TASK_TOOLS.items():
                    tools.setdefault(name, tool)
                yield state

        self.app.router.lifespan_context = lifespan
        config = uvicorn.Config(
            self.app, host="127.0.0.1", port=self.http.port, ws=room_server.ws_protocol,
            ws_per_message_deflate=False, log_level="warning", lifespan="on",
            timeout_graceful_shutdown=2,
        )  # fmt: skip
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, name="room-live", daemon=True)

    def start(self) -> LiveRoom:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            assert self.thread.is_alive() and time.monotonic() < deadline, "server did not start"
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=15)

    def run(self, job: Callable[[Any, Tx], R]) -> R:
        """Run a write job on the server's own database writer (as the app's hooks do)."""
        assert self.loop is not None
        core = self.app.state.core
        future = asyncio.run_coroutine_threadsafe(core.db.write(job), self.loop)
        return future.result(timeout=10)

    @property
    def core(self) -> Any:
        return self.app.state.core


class Room:
    """A signed-in owner in a fresh project with a workspace, agents on the scripted model."""

    def __init__(self, live: LiveRoom, workspace: Path, agents: list[tuple[str, str]]) -> None:
        self.live = live
        self.workspace = workspace
        self.owner: Session = live.http.login()
        body = {
            "name": "待办应用",
            "workspace": str(workspace),
            "agents": [
                {"role": "lead", "handle": "lead", "display_name": "负责人"},
                *({"role": role, "handle": handle, "display_name": handle.upper()}
                  for handle, role in agents),
            ],
        }  # fmt: skip
        self.project = int(self.post("/api/projects", body, expect=201)["project"]["id"])
        detail = self.get(f"/api/projects/{self.project}")
        self.members = {m["handle"]: m for m in detail["members"]}
        for handle in ["lead", *(h for h, _ in agents)]:
            self.post(
                f"/api/projects/{self.project}/routes",
                {"scope": "member", "target": str(self.members[handle]["id"]),
                 "value": "openai/gpt-test", "reason": "测试使用本地模型"},
            )  # fmt: skip

    @property
    def base(self) -> str:
        return f"/api/projects/{self.project}"

    def get(self, path: str) -> Any:
        return self.live.http.get_json(path, cookie=self.owner.cookie)

    def post(self, path: str, body: Any, expect: int = 200, **kw: Any) -> Any:
        headers = kw.pop("headers", self.owner.headers)
        status, data = self.live.http.request("POST", path, body, headers=headers)
        assert status == expect, (status, data)
        return data

    def say(self, body: str) -> dict[str, Any]:
        return self.post(
            f"{self.base}/messages", {"body": body, "client_txn_id": uuid.uuid4().hex}, expect=201
        )

    def board(self) -> dict[str, Any]:
        return self.get(f"{self.base}/tasks")

    def task(self, key: str) -> dict[str, Any]:
        return next(t for t in self.board()["tasks"] if t["key"] == key)

    def states(self) -> dict[str, str]:
        return {t["key"]: t["state"] for t in self.board()["tasks"]}

    def messages(self) -> list[dict[str, Any]]:
        return self.get(f"{self.base}/messages?limit=200")["messages"]

    def deliveries(self, message_id: int) -> list[dict[str, Any]]:
        return self.get(f"/api/messages/{message_id}")["deliveries"]

    def deliver_goal(self, goal: str, plan_first: bool = False) -> int | None:
        owner = self.members["owner"]["id"]
        return self.live.run(
            lambda c, tx: plan_actions.deliver_goal(c, tx, self.project, owner, goal, plan_first)
        )


async def eventually(check: Callable[[], Any], timeout: float = 15.0) -> Any:
    with anyio.fail_after(timeout):
        while True:
            value = check()
            if value:
                return value
            await anyio.sleep(0.05)


# -- the scripted agents ------------------------------------------------------------------------

PLAN = {
    "goal": "做一个待办应用",
    "items": [
        {"key": "ui", "title": "待办页面", "owner": "fe", "depends_on": ["api"],
         "acceptance": ["页面显示待办列表"]},
        {"key": "api", "title": "待办接口", "owner": "be",
         "acceptance": ["GET /items 返回列表", "有单元测试"], "assumptions": ["用 SQLite"]},
    ],
}  # fmt: skip
CRITERIA = {"api": 2, "ui": 1}
ARTIFACTS = {"api": ["src/api.py", "tests/test_api.py"], "ui": ["web/ui.html"]}


class Script:
    """What each agent does, decided from what it is shown (so turn interleaving is harmless)."""

    def __init__(self) -> None:
        self.n = 0
        self.turns: list[tuple[str, str]] = []  # (agent, what it did)

    def __call__(self, request: dict[str, Any]) -> Reply:
        self.n += 1
        system = request["messages"][0]["content"]
        me = re.search(r"你是 @(\w+)", system)
        who = me.group(1) if me else "?"
        last = request["messages"][-1]
        text = str(last.get("content") or "")
        if last["role"] == "tool":
            return self._after_tool(who, json.loads(text))
        if who == "lead":
            if "项目目标" in text:
                self.turns.append((who, "plan"))
                return openai_tool_calls([("p1", "room_plan_submit", PLAN)])
            found = re.search(r"任务 `(\w+)` 第 \d+ 版已提交评审", text)
            if found:
                key = found.group(1)
                self.turns.append((who, f"review {key}"))
                results = [
                    {"criterion": n, "passed": True, "evidence": f"看了 {key} 的第 {n} 条"}
                    for n in range(1, CRITERIA[key] + 1)
                ]
                return openai_tool_calls([("r1", "room_task_review",
                                           {"task": key, "results": results})])  # fmt: skip
        if who in ("be", "fe"):
            key = "api" if who == "be" else "ui"
            if "需求变更" in text:
                self.turns.append((who, f"sync {key}"))
                return openai_tool_calls([
                    ("s1", "room_task_update", {"task": key, "action": "sync",
                                                "reason": "已读新需求"}),
                    ("s2", "room_task_update", self._submit(key, "按新需求改好了")),
                ])  # fmt: skip
            if f"`{key}` 已就绪" in text:
                self.turns.append((who, f"work {key}"))
                first = (
                    {**self._submit(key, "先交一版"), "artifacts": ["../secret.txt"]}
                    if key == "api"
                    else self._submit(key, "页面做好了")
                )
                return openai_tool_calls([
                    ("w1", "room_task_update", {"task": key, "action": "start"}),
                    ("w2", "room_task_update", first),
                ])  # fmt: skip
        return openai_text(f"{who} 收到（{self.n}）")

    def _submit(self, key: str, summary: str) -> dict[str, Any]:
        return {"task": key, "action": "submit", "summary": summary, "artifacts": ARTIFACTS[key]}

    def _after_tool(self, who: str, result: dict[str, Any]) -> Reply:
        if result.get("error") == "path_escapes":
            self.turns.append((who, "fix path"))
            return openai_tool_calls([("w3", "room_task_update", self._submit("api", "改好路径"))])
        return openai_text(f"{who} 做完了（{self.n}）")


@pytest.fixture
def script() -> Script:
    return Script()


@pytest.fixture
def llm(script: Script) -> Iterator[OpenAIServer]:
    with OpenAIServer(script, api_key=API_KEY) as server:
        yield server


@pytest.fixture
def live(tmp_path: Path, llm: OpenAIServer, monkeypatch: pytest.MonkeyPatch) -> Iterator[LiveRoom]:
    monkeypatch.setenv("OPENAI_BASE_URL", llm.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", API_KEY)
    server = LiveRoom(tmp_path / "data").start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    files = {
        "src/api.py": "def items():\n    return []\n",
        "tests/test_api.py": "def test_items():\n    assert True\n",
        "web/ui.html": "<ul id='items'></ul>\n",
    }
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text, encoding="utf-8")
    (tmp_path / "secret.txt").write_text("outside the workspace\n", encoding="utf-8")
    return root


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


async def subscribed(live: LiveRoom, room: Room) -> Client:
    client = await Client.open(live.http.ws_url, cookie=room.owner.cookie, origin=live.http.origin)
    await client.send({"type": "subscribe", "project_id": room.project})
    await client.wait_for("subscribed")
    return client


async def wait_frame(client: Client, check: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    for frame in client.frames:
        if check(frame):
            return frame
    return await client.wait_for(check, timeout=15)


# -- tests --------------------------------------------------------------------------------------


async def test_goal_to_plan_to_dispatch_in_order_to_evidence_to_acceptance(
    live: LiveRoom, workspace: Path, script: Script, llm: OpenAIServer
) -> None:
    room = Room(live, workspace, [("be", "backend"), ("fe", "frontend")])
    client = await subscribed(live, room)
    goal_id = room.deliver_goal("做一个待办应用：有接口，有页面")

    def accepted() -> bool:
        return room.states() == {"ui": "accepted", "api": "accepted"}

    await eventually(accepted, timeout=30)
    # who did what, in dependency order
    assert script.turns == [
        ("lead", "plan"), ("be", "work api"), ("be", "fix path"), ("lead", "review api"),
        ("fe", "work ui"), ("lead", "review ui"),
    ]  # fmt: skip
    [goal_delivery] = room.deliveries(goal_id or 0)
    assert goal_delivery["recipient_id"] == room.members["lead"]["id"]
    first = llm.chat_requests[0]
    lead_tools = [t["function"]["name"] for t in first["tools"]]
    assert {"room_plan_submit", "room_task_review", "room_task_update"} <= set(lead_tools)

    messages = room.messages()
    bodies = [m["body"] for m in messages]
    plan_at = next(i for i, b in enumerate(bodies) if b.startswith("🗺️ @lead 提交了计划 v1"))
    api_ready = next(i for i, b in enumerate(bodies) if "`api` 已就绪 — @be" in b)
    api_done = next(i for i, b in enumerate(bodies) if "评审任务 `api`" in b and "通过验收" in b)
    ui_ready = next(i for i, b in enumerate(bodies) if "`ui` 已就绪 — @fe" in b)
    assert plan_at < api_ready < api_done < ui_ready
    dispatch = messages[api_ready]
    assert dispatch["kind"] == "system" and dispatch["mentions"] == [room.members["be"]["id"]]
    assert "GET /items 返回列表" in dispatch["body"] and "用 SQLite" in dispatch["body"]
    [delivery] = room.deliveries(dispatch["id"])
    assert (delivery["recipient_id"], delivery["state"]) == (room.members["be"]["id"], "consumed")
    be_tools = next(r for r in llm.chat_requests if "你是 @be" in r["messages"][0]["content"])
    names = {t["function"]["name"] for t in be_tools["tools"]}
    assert "room_task_update" in names and not {"room_task_review", "room_plan_submit"} & names

    # the escaping path was refused by the server; the recorded evidence is what is on disk
    refusals = [
        json.loads(m["content"])
        for r in llm.chat_requests
        for m in r["messages"]
        if m["role"] == "tool" and "path_escapes" in m["content"]
    ]
    assert refusals and refusals[0]["details"]["path"] == "../secret.txt"
    api = room.task("api")
    assert (api["revision"], api["reviewer"]["handle"]) == (1, "lead")
    artifacts = {e["path"]: e for e in api["evidence"] if e["kind"] == "artifact"}
    assert set(artifacts) == {"src/api.py", "tests/test_api.py"}
    for path, item in artifacts.items():
        assert item["sha256"] == sha(workspace / path) and item["verification"] == "ok"
        assert item["verified"] is True
        assert item["size"] == (workspace / path).stat().st_size
    assert all(c["passed"] and c["verdict"]["revision"] == 1 for c in api["criteria"])
    detail = room.get(f"{room.base}/tasks/api")["task"]
    assert [h["event"] for h in detail["history"]] == [
        "created", "deps_accepted", "start", "submit", "accept",
    ]  # fmt: skip
    assert [h["actor_kind"] for h in detail["history"]] == [
        "agent", "system", "agent", "agent", "agent",
    ]  # fmt: skip
    (workspace / "src/api.py").write_text("changed after review\n", encoding="utf-8")
    changed = {e["path"]: e["verification"] for e in room.task("api")["evidence"]
               if e["kind"] == "artifact"}  # fmt: skip
    assert changed == {"src/api.py": "changed", "tests/test_api.py": "ok"}

    frame = await wait_frame(
        client,
        lambda f: (
            f.get("type") == "tasks"
            and any(t["key"] == "ui" and t["state"] == "accepted" for t in f["tasks"])
        ),
    )
    assert frame["project_id"] == room.project
    decisions = room.get(f"{room.base}/decisions")["decisions"]
    assert [(d["label"], d["kind"], d["tasks"]) for d in decisions] == [
        ("ADR-0001", "requirement", ["api", "ui"])
    ]
    status, text = live.http.request("GET", f"/projects/{room.project}/status.md",
                                     cookie=room.owner.cookie)  # fmt: skip
    assert status == 200 and isinstance(text, str)
    assert text.startswith("# STATUS — 待办应用")
    assert "做一个待办应用：有接口，有页面" in text
    assert "- 任务 (tasks)：2/2 已验收 (accepted)" in text
    assert "### 已验收 (accepted) · 2" in text and "ADR-0001" in text


async def test_requirement_change_over_http_invalidates_a_pass_and_needs_receipts(
    live: LiveRoom, workspace: Path, script: Script
) -> None:
    room = Room(live, workspace, [("be", "backend")])
    plan = {"goal": "接口和文档", "items": [
        {"key": "api", "title": "待办接口", "owner": "be",
         "acceptance": ["GET /items 返回列表", "有单元测试"]},
        {"key": "doc", "title": "写文档", "owner": "owner", "acceptance": ["README 说明用法"]},
    ]}  # fmt: skip
    room.post(f"{room.base}/plan", plan, expect=201)
    await eventually(lambda: room.task("api")["state"] == "in_review")
    review = {"results": [{"criterion": 1, "passed": True, "evidence": "curl 看过"}]}
    api = room.post(f"{room.base}/tasks/api/review", review)["task"]
    assert api["state"] == "in_review" and [c["passed"] for c in api["criteria"]] == [True, None]

    before = (room.board(), room.get(f"{room.base}/decisions"))
    question = room.say("为什么这样设计？")
    lead = room.members["lead"]["id"]
    await eventually(
        lambda: [m for m in room.messages()
                 if m["author_id"] == lead and m["reply_to"] == question["message_id"]]
    )  # fmt: skip
    after = (room.board(), room.get(f"{room.base}/decisions"))
    assert [t["state"] for t in after[0]["tasks"]] == [t["state"] for t in before[0]["tasks"]]
    assert after[1] == before[1]  # a question changes nothing
    words = "/change 接口路径改成 /v2/items，并返回总数"
    sent = room.say(words)  # the /change prefix: the send path's hook records it
    await eventually(lambda: room.get(f"{room.base}/decisions")["decisions"][0]["revision"] == 2)
    status, marked = live.http.request(
        "POST", f"/api/messages/{sent['message_id']}/requirement-change", {},
        headers=room.owner.headers,
    )  # fmt: skip
    assert status == 200 and marked["duplicate"] is True, marked  # marking again changes nothing
    assert marked["revision"] == 2 and marked["affected"] == ["api", "doc"]

    await eventually(lambda: room.task("api")["revision"] == 2)  # be synced and resubmitted
    api = room.task("api")
    assert api["state"] == "in_review" and [c["passed"] for c in api["criteria"]] == [None, None]
    assert api["criteria"][0]["verdict"]["counts"] is False
    doc = room.task("doc")
    assert doc["state"] == "needs_sync" and doc["sync"][0]["revision"] == 2
    receipt = room.post(f"{room.base}/tasks/doc/sync-receipt", {"note": "已读"})["task"]
    assert receipt["state"] == "ready" and receipt["sync"] == []

    [requirement] = room.get(f"{room.base}/decisions")["decisions"]
    latest = requirement["revisions"][-1]
    assert latest["original_text"] == words and latest["source_message_id"] == sent["message_id"]
    synced = {s["task"]: (s["synced"], s["synced_by"]) for s in latest["sync"]}
    assert synced == {
        "api": (True, room.members["be"]["id"]),
        "doc": (True, room.members["owner"]["id"]),
    }
    timeline = [m["body"] for m in room.messages()]
    assert any(b.startswith("✅ @be 已同步 ADR-0001 第 2 版") for b in timeline)
    assert any(b.startswith("✅ @owner 已同步 ADR-0001 第 2 版") for b in timeline)

    all_pass = {"results": [{"criterion": n, "passed": True, "evidence": "复查"} for n in (1, 2)]}
    assert room.post(f"{room.base}/tasks/api/review", all_pass)["task"]["state"] == "accepted"


async def test_a_change_sent_over_the_socket_marks_the_bound_tasks_needs_sync(
    live: LiveRoom, workspace: Path
) -> None:
    """The send path's hook, as a person uses it: a ``/change`` message sent over ``/ws`` (also
    with leading spaces) revises the requirement after the send commits, and the tasks bound to
    it wait in ``needs_sync``; a change naming a task that does not exist is answered."""
    room = Room(live, workspace, [])
    plan = {"goal": "文档", "items": [
        {"key": "doc", "title": "写文档", "owner": "owner", "acceptance": ["README 说明用法"]},
        {"key": "faq", "title": "写问答", "owner": "owner", "acceptance": ["列出常见问题"]},
    ]}  # fmt: skip
    room.post(f"{room.base}/plan", plan, expect=201)
    await eventually(lambda: room.states() == {"doc": "ready", "faq": "ready"})
    ws = await Client.open(live.http.ws_url, cookie=room.owner.cookie, origin=live.http.origin)
    await ws.send({"type": "subscribe", "project_id": room.project, "since": 0})
    await ws.wait_for("subscribed")

    async def send(body: str) -> int:
        txn = uuid.uuid4().hex
        await ws.send({"type": "send", "project_id": room.project, "client_txn_id": txn,
                       "body": body, "as_plain_text": True})  # fmt: skip
        ack = await ws.wait_for(lambda f: f.get("client_txn_id") == txn)
        assert ack["type"] == "ack", ack
        return int(ack["message_id"])

    first = await send("/change 文档要中英双语")
    await eventually(lambda: room.states() == {"doc": "needs_sync", "faq": "needs_sync"})
    [requirement] = room.get(f"{room.base}/decisions")["decisions"]
    assert requirement["revisions"][-1]["source_message_id"] == first
    for key in ("doc", "faq"):
        room.post(f"{room.base}/tasks/{key}/sync-receipt", {"note": "已读"})

    second = await send("   /change [faq] 问答也要双语")
    await eventually(lambda: room.states() == {"doc": "ready", "faq": "needs_sync"})
    [requirement] = room.get(f"{room.base}/decisions")["decisions"]
    latest = requirement["revisions"][-1]
    assert (latest["revision"], latest["source_message_id"]) == (3, second)

    third = await send("/change [nope] 改一下")
    await eventually(
        lambda: any(m["reply_to"] == third and "需求变更没有记录" in m["body"]
                    for m in room.messages())
    )  # fmt: skip
    assert any(m["id"] == third for m in room.messages())  # the message itself stands
    [requirement] = room.get(f"{room.base}/decisions")["decisions"]
    assert requirement["revisions"][-1]["revision"] == 3

    txn = uuid.uuid4().hex
    await ws.send({"type": "send", "project_id": room.project, "client_txn_id": txn,
                   "body": "/change   "})  # fmt: skip
    refused = await ws.wait_for(lambda f: f.get("client_txn_id") == txn or f.get("type") == "error")
    assert refused["type"] == "error" and refused["code"] == "empty_change", refused


async def test_http_refusals_plan_paths_permissions_and_plan_first(
    live: LiveRoom, workspace: Path
) -> None:
    room = Room(live, workspace, [("be", "backend")])
    cyclic = {"items": [
        {"key": "a", "title": "A", "owner": "be", "depends_on": ["b"], "acceptance": ["x"]},
        {"key": "b", "title": "B", "owner": "be", "depends_on": ["a"], "acceptance": []},
        {"key": "c", "title": "C", "owner": "ghost", "acceptance": ["x"]},
    ]}  # fmt: skip
    error = room.post(f"{room.base}/plan", cyclic, expect=400)["error"]
    assert error["code"] == "plan_invalid"
    assert [(p["code"], p["item"]) for p in error["details"]["problems"]] == [
        ("missing_criteria", "b"), ("unknown_owner", "c"), ("cycle", "a"),
    ]  # fmt: skip
    assert room.board()["tasks"] == [] and room.board()["plans"] == []

    room.deliver_goal("", plan_first=True)  # plan-first, no goal message
    plan = {"items": [{"key": "doc", "title": "文档", "owner": "owner", "acceptance": ["有"]}]}
    created = room.post(f"{room.base}/plan", plan, expect=201)
    assert created["plan"]["started"] is False and room.task("doc")["held"] is True
    refused = room.post(f"{room.base}/tasks/doc/start", {}, expect=409)["error"]
    assert refused["code"] == "plan_not_started"
    room.post(f"{room.base}/plan/start", {})
    assert room.post(f"{room.base}/tasks/doc/start", {})["task"]["state"] == "in_progress"

    outside = workspace.parent / "secret.txt"
    (workspace / "out.txt").symlink_to(outside)
    for path, code in (("../secret.txt", "path_escapes"), (str(outside), "absolute_path"),
                       ("out.txt", "outside_workspace")):  # fmt: skip
        body = {"summary": "完成", "artifacts": [path]}
        error = room.post(f"{room.base}/tasks/doc/submit", body, expect=400)["error"]
        assert error["code"] == code and error["details"]["hint"]
    assert room.task("doc")["evidence"] == []

    token = live.http.agent_token("待办应用", "be")
    bearer = {"Authorization": f"Bearer {token}"}
    proposal = {
        "title": "用 SQLite", "context": "单机", "decision": "只用 SQLite",
        "alternatives": [{"option": "PostgreSQL", "why_rejected": "多一个服务"}],
    }  # fmt: skip
    made = room.post(f"{room.base}/decisions", proposal, expect=201, headers=bearer)["decision"]
    assert (made["label"], made["status"]) == ("ADR-0002", "proposed")  # 0001: the requirement
    denied = room.post(f"{room.base}/decisions/2/accept", {}, expect=403, headers=bearer)
    assert denied["error"]["code"] == "human_only"
    assert room.post(f"{room.base}/decisions/2/accept", {})["decision"]["status"] == "accepted"
    mine = room.post(f"{room.base}/decisions", {**proposal, "title": "人类决定"}, expect=201)[
        "decision"
    ]
    assert mine["status"] == "accepted"
    no_csrf = live.http.request(
        "POST", f"{room.base}/decisions", proposal, cookie=room.owner.cookie
    )
    assert no_csrf[0] == 403
    status, _ = live.http.request("GET", f"/projects/{room.project}/status.md")
    assert status == 401
