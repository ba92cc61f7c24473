"""The project records section through the real runtime: the in-process app, its scheduler and
sessions, and a local OpenAI-compatible server as the model (the real provider code runs).

What the model receives is read from the requests that server recorded."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from room.actions import decisions as decision_actions
from room.actions import memory as memory_actions
from room.agents import memory as memory_mod
from room.agents.memory_tools import MEMORY_TOOLS, READ_KINDS
from room.agents.task_tools import TASK_TOOLS
from room.agents.tools import BUILTIN_TOOLS, Tool, ToolContext
from room.agents.work_tools import WORK_TOOLS
from room.rules import deltas
from room.rules import injection as inj
from room.rules.entities import Member
from room.store import members as members_store
from tests.support.inproc import App, running_app, wait_until
from tests.support.live_room import Room
from tests.support.llm_servers import (
    TEST_API_KEY,
    AnthropicServer,
    LLMServer,
    OpenAIServer,
    anthropic_text,
    openai_text,
    openai_tool_call,
)
from tests.support.records import prose, records
from tests.support.server import ServerProcess

API_KEY = TEST_API_KEY  # the key the server processes of tests.support.server use
HEADER = f"# {inj.LABEL}\n"
GOLDEN = Path(__file__).parent / "golden" / "injection"


@pytest.fixture
def llm() -> Iterator[OpenAIServer]:
    with OpenAIServer(api_key=API_KEY) as server:
        yield server


@pytest.fixture
def app(tmp_path: Path, llm: OpenAIServer) -> Iterator[App]:
    env = {"OPENAI_BASE_URL": llm.base_url, "OPENAI_API_KEY": API_KEY}
    with running_app(tmp_path / "data", env=env) as handle:
        yield handle


def owner_post(app: App, path: str, body: Any) -> tuple[int, Any]:
    return app.request("POST", path, body, cookie=app.owner_cookie)


def member(app: App, handle: str) -> Member:
    found = app.call(app.core.db.read, lambda conn: members_store.list_for_project(conn, 1))
    return next(m for m in found if m.handle == handle)


def route(app: App, member_id: int) -> None:
    status, _ = owner_post(
        app,
        "/api/projects/1/routes",
        {"scope": "member", "target": str(member_id), "value": "openai/gpt-test", "reason": "测试"},
    )
    assert status == 200


def turn(app: App, llm: OpenAIServer, text: str, *replies: Any) -> list[Any]:
    """Send ``text``, let the member answer with ``replies``; the requests of that turn."""
    before = len(llm.chat_requests)
    llm.push(*replies)
    status, _ = owner_post(app, "/api/projects/1/messages", {"body": text})
    assert status == 201
    wait_until(lambda: llm.remaining == 0 and len(llm.chat_requests) == before + len(replies))
    wait_until(lambda: not app.core.agents.running_members(1))
    return llm.chat_requests[before:]


def records_of(request: Any) -> str:
    found = [m["content"] for m in request["messages"] if str(m["content"]).startswith(HEADER)]
    assert len(found) == 1, "one records section per request"
    return str(found[0])


def set_summary(app: App, what: str) -> None:
    owner = member(app, "owner")
    app.call(memory_actions.set_summary, app.core, owner, None, {"what": what})


def test_the_section_is_built_once_and_a_person_edit_arrives_as_the_changed_record(
    app: App, llm: OpenAIServer
) -> None:
    lead = member(app, "lead")
    route(app, lead.id)
    set_summary(app, "一个自托管的群聊服务器（第一版概要）")
    [first] = turn(app, llm, "@lead 你好", openai_text("好的"))
    section = records_of(first)
    assert "### 这是什么\n  一个自托管的群聊服务器（第一版概要）" in section
    assert "### 坑\n暂无" in section
    assert inj.UPDATED_NOTICE not in section
    # Nothing changed: the next turn starts from the very same bytes.
    [second] = turn(app, llm, "@lead 还在吗", openai_text("在"))
    assert records_of(second) == section
    # A person edits the summary: the next turn gets the same section, then the changed record.
    set_summary(app, "改过的概要：现在支持项目记忆")
    [third] = turn(app, llm, "@lead 概要改了", openai_text("知道了"))
    assert records_of(third) == (
        section
        + "\n\n"
        + deltas.HEADING
        + "\n- 改动的项目概要：这是什么：改过的概要：现在支持项目记忆"
    )
    # The section sits right after the system message.
    assert third["messages"][0]["role"] == "system"
    assert str(third["messages"][1]["content"]).startswith(HEADER)


def test_a_session_restarted_after_an_idle_hour_builds_the_section_again(
    app: App, llm: OpenAIServer
) -> None:
    lead = member(app, "lead")
    route(app, lead.id)
    set_summary(app, "旧概要")
    turn(app, llm, "@lead 一", openai_text("一"))
    set_summary(app, "新概要")
    session = app.core.agents.in_process.sessions[lead.id]  # type: ignore[attr-defined]
    session.memory.last_turn_at -= 3_600  # as if the member had been idle for an hour
    [request] = turn(app, llm, "@lead 二", openai_text("二"))
    section = records_of(request)
    assert "### 这是什么\n  新概要" in section and inj.UPDATED_NOTICE not in section


def test_a_turn_that_wrote_files_and_recorded_nothing_is_reminded_on_the_next_request(
    app: App, llm: OpenAIServer
) -> None:
    status, data = owner_post(
        app,
        "/api/projects/1/members",
        {"role": "backend", "handle": "coder", "display_name": "小码", "driver": "builtin"},
    )
    assert status == 201, data
    coder = int(data["member"]["id"])
    route(app, coder)
    worked = turn(
        app,
        llm,
        "@coder 写个文件",
        openai_tool_call("fs_write", {"path": "notes.txt", "content": "你好"}, call_id="w1"),
        openai_text("写好了"),
    )
    assert len(worked) == 2
    assert "提醒" not in records_of(worked[0])
    # The reminder rides on the next request of the session: no extra model call.
    [next_turn] = turn(
        app,
        llm,
        "@coder 再写一个",
        openai_tool_call("fs_write", {"path": "more.txt", "content": "再见"}, call_id="w2"),
        openai_text("又写好了"),
    )[:1]
    reminded = records_of(next_turn)
    assert reminded.endswith(
        "\n\n提醒：你上一轮写了文件，但没有在项目记忆里留下记录。"
        "如果有值得留下的（做了什么、怎么验证的、下一步），用 memory_checkpoint 记一条会话记录。"
    )
    assert len(llm.chat_requests) == 4  # two turns of two requests each, nothing more
    # Work again within ten minutes: no second reminder yet.
    [third] = turn(app, llm, "@coder 看看", openai_text("看过了"))
    assert "提醒" not in records_of(third)
    # Chatting is not work: a read-only turn earns nothing.
    assert records_of(third) == reminded.split("\n\n提醒：")[0]


def test_memory_that_cannot_be_read_is_said_and_the_agent_still_answers(
    app: App, llm: OpenAIServer
) -> None:
    lead = member(app, "lead")
    route(app, lead.id)
    with app.db() as conn:
        conn.execute("DROP TABLE memory_versions")  # a fault in the memory store
    [request] = turn(app, llm, "@lead 你好", openai_text("好的"))
    assert records_of(request) == memory_mod.UNREADABLE
    assert "项目记录这次没有读出来" in memory_mod.UNREADABLE


def test_the_section_is_read_from_stored_records(app: App, llm: OpenAIServer) -> None:
    """Real records through the real store: the latest session entries by their authors, a
    decision with its rejected alternatives, and a stale summary with the entries since."""
    owner, lead = member(app, "owner"), member(app, "lead")
    set_summary(app, "概要")
    for n in range(1, 21):
        app.call(
            memory_actions.add_entry,
            app.core,
            lead,
            "session",
            {"summary": f"第 {n} 次会话", "did": "改了代码", "next": "写测试"},
        )
    app.call(
        decision_actions.propose_decision,
        app.core,
        owner,
        title="用 SQLite",
        context="单机部署",
        decision="数据放在 SQLite 里",
        alternatives=[{"option": "PostgreSQL", "why_rejected": "太重"}],
        constraints="单写者",
    )
    now = time.time() + 20 * 86_400
    names = {lead.id: "@lead（负责人）", owner.id: "@owner（主人）"}
    records = app.call(
        app.core.db.read,
        lambda conn: memory_mod.read_records(conn, 1, now, names, app.core.settings),
    )
    assert [e.summary for e in records.sessions[:2]] == ["第 20 次会话", "第 19 次会话"]
    assert len(records.sessions) == 15 and records.sessions_total == 20
    assert records.sessions[0].author == "@lead（负责人）" and records.sessions[0].did == "改了代码"
    assert records.summary is not None and records.summary.sections["what"] == "概要"
    assert records.stale == inj.Stale(days=20, entries_since=20)
    [decision] = [d for d in records.decisions if d.title == "用 SQLite"]
    assert decision.alternatives == (inj.Alternative("PostgreSQL", "太重"),)
    assert (decision.constraints, decision.context) == ("单写者", "单机部署")
    text = inj.build(records).text
    assert (
        "- PostgreSQL：太重" in text
        and "⚠️ 这份概要已 20 天没有更新，此后又新增了 20 条会话记录" in text
    )
    assert "### 会话记录 id=" in text and "第 6 次会话" in text and "第 5 次会话" not in text


def add_agent(app: App, handle: str, role: str) -> int:
    status, data = owner_post(
        app,
        "/api/projects/1/members",
        {"role": role, "handle": handle, "display_name": handle, "driver": "builtin"},
    )
    assert status == 201, data
    member_id = int(data["member"]["id"])
    route(app, member_id)
    return member_id


def test_a_turn_that_worked_and_wrote_a_session_entry_is_not_reminded(
    app: App, llm: OpenAIServer
) -> None:
    add_agent(app, "coder", "backend")
    turn(
        app,
        llm,
        "@coder 写个文件并记下来",
        openai_tool_call("fs_write", {"path": "a.txt", "content": "一"}, call_id="w1"),
        openai_tool_call(
            "memory_checkpoint",
            {"kind": "session", "summary": "写了 a.txt", "did": "fs_write", "next": "无"},
            call_id="m1",
        ),
        openai_text("好了"),
    )
    [request] = turn(app, llm, "@coder 下一件", openai_text("好"))
    text = records_of(request)
    assert "提醒" not in text
    assert text.endswith("\n\n" + inj.UPDATED_NOTICE)  # its own entry moved the version


async def _task_changed(ctx: ToolContext, args: dict[str, Any]) -> str:
    return '{"ok": true, "task": "T-1", "state": "in_progress"}'


def test_a_member_that_cannot_write_memory_is_not_reminded(
    tmp_path: Path, llm: OpenAIServer
) -> None:
    """Both change a task (``room_task_update`` answers ok here); the owner made the lead's role
    read-only, so it has no memory_checkpoint and a reminder to use it would be noise."""
    tools = {
        **BUILTIN_TOOLS,
        **TASK_TOOLS,
        **WORK_TOOLS,
        **MEMORY_TOOLS,
        "room_task_update": Tool(
            TASK_TOOLS["room_task_update"].spec, _task_changed, side_effect=True
        ),
    }
    env = {"OPENAI_BASE_URL": llm.base_url, "OPENAI_API_KEY": API_KEY}
    with running_app(tmp_path / "data", env=env, tools=tools) as app:
        status, _ = app.request(
            "PATCH", "/api/projects/1/settings", {"read_only_roles": ["lead"]},
            cookie=app.owner_cookie,
        )  # fmt: skip
        assert status == 200
        route(app, member(app, "lead").id)
        add_agent(app, "coder", "backend")
        for handle in ("lead", "coder"):
            turn(
                app,
                llm,
                f"@{handle} 开始做 T-1",
                openai_tool_call("room_task_update", {"task": "T-1", "action": "start"}),
                openai_text("开始了"),
            )
        [lead_next] = turn(app, llm, "@lead 然后呢", openai_text("好"))
        [coder_next] = turn(app, llm, "@coder 然后呢", openai_text("好"))
        assert "提醒" not in records_of(lead_next)
        assert "提醒：你上一轮改了任务" in records_of(coder_next)


def test_every_memory_read_the_section_names_is_a_kind_the_tool_reads() -> None:
    texts = [p.read_text(encoding="utf-8") for p in (GOLDEN).glob("*.txt")]
    # conventions, progress, facts and references left out and cut: every line they add
    many = replace(records(extras=True), conventions=[prose(3, n) for n in range(30)])
    texts += [inj.build(many, budget_bytes=budget).text for budget in (4_096, 40_000)]
    named = set()
    for text in texts:
        named |= set(re.findall(r'memory_read（kind="(\w+)"）', text))
    assert named == {
        "session",
        "decision",
        "summary",
        "convention",
        "progress",
        "fact",
        "reference",
    }
    assert named <= set(READ_KINDS)


def texts_of(body: Any) -> list[str]:
    """Every text a request carries, for either wire protocol (string or content blocks)."""
    out: list[str] = []
    for message in body["messages"]:
        content = message.get("content")
        if isinstance(content, str):
            out.append(content)
        elif isinstance(content, list):
            out += [b["text"] for b in content if b.get("type") == "text"]
    return out


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_over_http_a_person_edit_of_the_summary_reaches_the_next_turn_as_one_line(
    tmp_path: Path, provider: str
) -> None:
    """A real server process and either provider's wire protocol: the summary written and edited
    with PUT …/memory/summary by the owner, the lead's requests read at the local model server."""
    llm: LLMServer = (
        OpenAIServer(api_key=TEST_API_KEY)
        if provider == "openai"
        else AnthropicServer(api_key=TEST_API_KEY)
    )
    text_reply = openai_text if provider == "openai" else anthropic_text
    prefix = provider.upper()
    with llm:
        env = {f"{prefix}_BASE_URL": llm.base_url, f"{prefix}_API_KEY": TEST_API_KEY}
        server = ServerProcess(tmp_path / "data", env=env).start()
        try:
            room = Room(server, llm)  # type: ignore[arg-type]
            room.route(
                "lead", "openai/gpt-test" if provider == "openai" else "anthropic/claude-test"
            )

            def put_summary(rev: int, what: str) -> None:
                status, data = server.request(
                    "PUT",
                    f"/api/projects/{room.project}/memory/summary",
                    {"rev": rev, "sections": {"what": what}},
                    headers=room.owner.headers,
                )
                assert status == 200, data

            def ask(text: str) -> str:
                before = len(llm.chat_requests)
                llm.push(text_reply(f"收到：{text}"))
                room.say(f"@lead {text}")
                wait_until(lambda: len(llm.chat_requests) == before + 1)
                # The turn answered (its request was not refused).
                wait_until(lambda: [m for m in room.messages() if m["body"] == f"收到：{text}"])
                [section] = [t for t in texts_of(llm.chat_requests[before]) if t.startswith(HEADER)]
                return section

            put_summary(0, "第一版：群聊服务器")
            section = ask("你好")
            assert "### 这是什么\n  第一版：群聊服务器" in section
            put_summary(1, "第二版：加上了项目记忆")
            assert ask("概要改了") == (
                section
                + "\n\n"
                + deltas.HEADING
                + "\n- 改动的项目概要：这是什么：第二版：加上了项目记忆"
            )
        finally:
            server.stop()


@pytest.mark.parametrize("stale_days", [3, 0])
def test_a_stale_summary_is_said_in_the_section_and_in_the_memory_payload(
    tmp_path: Path, llm: OpenAIServer, stale_days: int
) -> None:
    env = {"OPENAI_BASE_URL": llm.base_url, "OPENAI_API_KEY": API_KEY}
    with running_app(tmp_path / "data", env=env, memory_stale_days=stale_days) as app:
        lead = member(app, "lead")
        route(app, lead.id)
        set_summary(app, "老概要")
        with app.db() as conn:  # the summary was last written five days ago
            conn.execute(
                "UPDATE memory_entries SET updated_at = updated_at - 5 * 86400"
                " WHERE kind = 'summary'"
            )
        for n in (1, 2):
            app.call(memory_actions.add_entry, app.core, lead, "session", {"summary": f"第{n}次"})
        status, view = app.request("GET", "/api/projects/1/memory", cookie=app.owner_cookie)
        assert status == 200
        [request] = turn(app, llm, "@lead 你好", openai_text("好"))
        section = records_of(request)
        if stale_days:
            assert view["stale"] == {"days": 5, "entries_since": 2}
            assert "⚠️ 这份概要已 5 天没有更新，此后又新增了 2 条会话记录" in section
        else:
            assert view["stale"] is None
            assert "没有更新" not in section


def test_a_convention_written_by_a_person_is_in_the_next_turns_request(
    app: App, llm: OpenAIServer
) -> None:
    """Written over HTTP by a person, with a fact, progress and a reference: all of them reach
    the model in the section of the member's next turn, in the documented order."""
    lead = member(app, "lead")
    route(app, lead.id)
    for kind, body in (
        ("convention", {"text": "每次提交前先运行 pnpm test"}),
        ("fact", {"text": "生产库在 db-1 上，只读副本在 db-2"}),
        ("progress", {"text": "登录页完成", "stage": "实现", "next": "写注册页", "tags": ["前端"]}),
        ("reference", {"ref_kind": "dir", "target": "docs/api", "note": "接口文档"}),
    ):
        status, answer = owner_post(app, f"/api/projects/1/memory/{kind}", body)
        assert status == 201, answer
    [request] = turn(app, llm, "@lead 开始吧", openai_text("好"))
    section = records_of(request)
    assert "## 约定（最新的在前，共 1 条）\n- 每次提交前先运行 pnpm test" in section
    assert "- 生产库在 db-1 上，只读副本在 db-2" in section
    assert "［实现］登录页完成\n  下一步：写注册页 · 标签：前端" in section
    assert "- dir docs/api：接口文档" in section
    order = [
        "## 项目概要",
        "## 约定",
        "## 决策",
        "## 最近的进展",
        "## 最近的会话记录",
        "## 事实",
        "## 参考",
    ]
    assert [section.index(h) for h in order] == sorted(section.index(h) for h in order)
    # A convention added during the session arrives itself, after the section as built.
    status, _ = owner_post(app, "/api/projects/1/memory/convention", {"text": "不要手改生成的文件"})
    assert status == 201
    [later] = turn(app, llm, "@lead 继续", openai_text("好"))
    assert records_of(later) == section + "\n\n" + deltas.HEADING + "\n- 新约定：不要手改生成的文件"
    # and on every later request of the session, with what changed after it, newest first
    status, _ = owner_post(app, "/api/projects/1/memory/fact", {"text": "测试库每晚重置"})
    assert status == 201
    [last] = turn(app, llm, "@lead 再继续", openai_text("好"))
    assert records_of(last) == (
        section
        + "\n\n"
        + deltas.HEADING
        + "\n- 新事实：测试库每晚重置\n- 新约定：不要手改生成的文件"
    )


def test_fifty_decisions_under_a_small_budget_keep_the_newest(
    tmp_path: Path, llm: OpenAIServer
) -> None:
    env = {"OPENAI_BASE_URL": llm.base_url, "OPENAI_API_KEY": API_KEY}
    with running_app(tmp_path / "data", env=env, memory_budget_bytes=20_000) as app:
        lead = member(app, "lead")
        route(app, lead.id)
        sections = {key: prose(40, n)[:2_400] for n, key in enumerate(("what", "run", "where"))}
        status, _ = app.request(
            "PUT", "/api/projects/1/memory/summary", {"rev": 0, "sections": sections},
            cookie=app.owner_cookie,
        )  # fmt: skip
        assert status == 200
        for n in range(1, 51):
            status, answer = owner_post(
                app,
                "/api/projects/1/decisions",
                {
                    "title": f"决定 {n}",
                    "context": prose(1, n),  # 50 stay under the decisions' cap (32 KiB)
                    "decision": f"第 {n} 个决定：{prose(2, n)}",
                    "consequences": prose(1, n),
                    "alternatives": [{"option": "另一种做法", "why_rejected": prose(1, n + 1)}],
                },
            )
            assert status == 201, answer
        [request] = turn(app, llm, "@lead 看看决策", openai_text("好"))
        section = records_of(request)
        assert len(section.encode()) <= 20_000
        kept = [int(n) for n in re.findall(r"^- ADR-(\d{4}) ", section, re.MULTILINE)]
        assert 0 < len(kept) < 50 and kept[0] == 50
        assert kept == list(range(50, 50 - len(kept), -1))  # the newest, newest first
        assert f"决策只列出了 {len(kept)}/50 条的标题行" in section


def test_an_empty_summary_asks_the_agent_to_fill_it_unless_read_only_or_switched_off(
    tmp_path: Path, llm: OpenAIServer
) -> None:
    env = {"OPENAI_BASE_URL": llm.base_url, "OPENAI_API_KEY": API_KEY}
    with running_app(tmp_path / "data", env=env) as app:
        status, _ = app.request(
            "PATCH", "/api/projects/1/settings", {"read_only_roles": ["backend"]},
            cookie=app.owner_cookie,
        )  # fmt: skip
        assert status == 200
        route(app, member(app, "lead").id)
        add_agent(app, "coder", "backend")
        [lead] = turn(app, llm, "@lead 你好", openai_text("好"))
        [coder] = turn(app, llm, "@coder 你好", openai_text("好"))
        assert inj.BOOTSTRAP_LINE in records_of(lead)
        assert inj.BOOTSTRAP_LINE not in records_of(coder)  # it has no memory_checkpoint
    with running_app(tmp_path / "off", env=env, memory_bootstrap_when_empty=False) as app:
        route(app, member(app, "lead").id)
        [lead] = turn(app, llm, "@lead 你好", openai_text("好"))
        assert "## 项目概要（还没有人写过）" in records_of(lead)
        assert inj.BOOTSTRAP_LINE not in records_of(lead)


def test_with_injection_switched_off_no_records_section_is_sent(
    tmp_path: Path, llm: OpenAIServer
) -> None:
    env = {"OPENAI_BASE_URL": llm.base_url, "OPENAI_API_KEY": API_KEY}
    with running_app(tmp_path / "data", env=env, memory_inject=False) as app:
        route(app, member(app, "lead").id)
        status, _ = owner_post(app, "/api/projects/1/memory/convention", {"text": "提交前跑测试"})
        assert status == 201
        [request] = turn(app, llm, "@lead 你好", openai_text("好"))
        texts = [str(m["content"]) for m in request["messages"]]
        assert not any(t.startswith(HEADER) for t in texts)
        assert "提交前跑测试" not in str(request["messages"])
        assert "memory_read" in str(request["tools"])  # the tools still reach the memory


def test_reminders_switched_off_by_the_setting(tmp_path: Path, llm: OpenAIServer) -> None:
    tools = {
        **BUILTIN_TOOLS, **TASK_TOOLS, **WORK_TOOLS, **MEMORY_TOOLS,
        "room_task_update": Tool(TASK_TOOLS["room_task_update"].spec, _task_changed, side_effect=True),
    }  # fmt: skip
    env = {"OPENAI_BASE_URL": llm.base_url, "OPENAI_API_KEY": API_KEY}
    with running_app(tmp_path / "data", env=env, tools=tools, memory_reminder_max=0) as app:
        route(app, member(app, "lead").id)
        turn(
            app,
            llm,
            "@lead 开始做 T-1",
            openai_tool_call("room_task_update", {"task": "T-1", "action": "start"}),
            openai_text("开始了"),
        )
        [after] = turn(app, llm, "@lead 然后呢", openai_text("好"))
        assert "提醒" not in records_of(after)


def test_changes_mid_session_stay_within_the_records_budget(
    tmp_path: Path, llm: OpenAIServer
) -> None:
    env = {"OPENAI_BASE_URL": llm.base_url, "OPENAI_API_KEY": API_KEY}
    with running_app(tmp_path / "data", env=env, memory_budget_bytes=4096) as app:
        lead = member(app, "lead")
        route(app, lead.id)
        [first] = turn(app, llm, "@lead 你好", openai_text("好"))
        section = records_of(first)
        for n in range(20):
            body = {"text": f"约定{n:02d}：" + "提交前先跑完整的测试并写清楚改了什么" * 4}
            status, answer = owner_post(app, "/api/projects/1/memory/convention", body)
            assert status == 201, answer
        # another agent's decision, recorded after the conventions: the newest change
        add_agent(app, "coder", "backend")
        app.call(
            decision_actions.propose_decision,
            app.core,
            member(app, "coder"),
            title="接口用 JSON",
            context="前后端分开",
            decision="所有接口都返回 JSON 对象",
            alternatives=[{"option": "XML", "why_rejected": "太啰嗦"}],
        )
        [later] = turn(app, llm, "@lead 继续", openai_text("好"))
        text = records_of(later)
        assert text.startswith(section + "\n\n" + deltas.HEADING + "\n")
        assert len(text.encode()) <= 4096
        lines = text[len(section) + 2 :].splitlines()
        assert lines[1] == "- 新决定 ADR-0001：接口用 JSON［提议中］：所有接口都返回 JSON 对象"
        assert lines[2].startswith("- 新约定：约定19：")
        shown = len(lines) - 3
        # 21 changes in all: the decision, the conventions shown, the count of the rest
        assert 0 < shown < 20 and lines[-1] == deltas.MORE_LINE.format(n=20 - shown)
