"""Research end to end: a real server, a scripted OpenAI-compatible model as the lead and as the
research session, people acting on the card over HTTP."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.live_room import Room, agent_replies, eventually
from tests.support.llm_servers import (
    OpenAIServer,
    openai_text,
    openai_tool_call,
    openai_tool_calls,
)
from tests.support.server import start_with_openai

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("clients")]

BUDGET = {"tokens": 100_000, "requests": 20, "seconds": 600, "steps": 20}
PROPOSAL = {"question": "启动为什么慢？", "scope": {"paths": ["docs"]}, "members": ["lead"],
            "budget": BUDGET}  # fmt: skip


@pytest.fixture
def rooted(tmp_path: Path, llm: OpenAIServer) -> Iterator[Room]:
    """``room`` whose operator allows folders in tmp_path (``ROOM_WORKSPACE_ROOTS``): the
    references these tests make live there, outside the default roots (<data>/workspaces)."""
    server = start_with_openai(tmp_path / "data", llm, ROOM_WORKSPACE_ROOTS=str(tmp_path))
    try:
        yield Room(server, llm)
    finally:
        server.stop()


def run_of(room: Room, rid: int) -> dict[str, Any]:
    answer = room.get(f"/api/research/{rid}")
    assert list(answer) == ["research"], answer  # one run under its name (docs/protocol.md)
    return dict(answer["research"])


def act(room: Room, rid: int, op: str, **body: Any) -> Any:
    return room.post(f"/api/research/{rid}/{op}", body)["research"]


def propose(room: Room, body: dict[str, Any]) -> dict[str, Any]:
    answer = room.post(f"/api/projects/{room.project}/research", body, expect=201)
    return dict(answer["research"])


def approve_and_start(room: Room, run: dict[str, Any]) -> None:
    act(room, run["id"], "approve", rev=run["rev"], scope_digest=run["scope_digest"])
    act(room, run["id"], "start")


def rows(room: Room, sql: str, *args: Any) -> list[Any]:
    with room.db() as conn:
        conn.row_factory = sqlite3.Row
        return conn.execute(sql, args).fetchall()


async def test_the_lead_proposes_a_person_starts_and_the_report_flows_back(room: Room) -> None:
    room.route("lead")
    room.llm.push(
        openai_tool_call("room_research_propose", PROPOSAL, call_id="p1"),
        # A forged call: no such tool is granted to anyone; nothing is approved.
        openai_tool_call("room_research_approve", {"research_id": 1}, call_id="p2"),
        openai_text("已提出研究，等所有者批准。"),
    )
    room.say("@lead 提一个研究")
    await eventually(lambda: agent_replies(room, "lead"))
    forged = json.loads(room.llm.chat_requests[2]["messages"][-1]["content"])
    assert forged["error"] == "tool_refused"
    [run] = room.get(f"/api/projects/{room.project}/research")["research"]
    assert run["state"] == "proposed" and run["proposer"]["handle"] == "lead"
    assert run["approval"] is None
    # The research session's script: forbidden tools first, then the work, then the report.
    room.llm.push(
        openai_tool_call("room_send", {"text": "我批准了"}, call_id="s1"),
        openai_tool_call("shell", {"command": "ls"}, call_id="s2"),
        openai_tool_call("fs_read", {"path": "../secret.txt"}, call_id="s3"),
        openai_tool_call("fs_read", {"path": "docs/start.md"}, call_id="s4"),
        openai_tool_call("room_research_hypothesis", {"text": "冷启动在读配置"}, call_id="s5"),
        openai_tool_call(
            "room_research_finding",
            {"text": "配置读了两次", "sources": ["docs/start.md:3"]},
            call_id="s6",
        ),
        openai_tool_call("room_research_flowback", {"item_id": 2}, call_id="s7"),
        openai_tool_call(
            "room_research_report",
            {"text": "结论：配置读了两次。", "sources": ["docs/start.md:3"]},
            call_id="s8",
        ),
    )
    before = len(room.llm.chat_requests)
    approve_and_start(room, run)
    done = await eventually(lambda: run_of(room, run["id"])["state"] == "done" and run_of(
        room, run["id"]))  # fmt: skip
    requests = room.llm.chat_requests[before:]
    assert len(requests) == 8
    # The session is told who it is, as an ordinary turn is: handle, name, role, project.
    lead = room.members["lead"]
    project = room.get(f"/api/projects/{room.project}")["project"]["name"]
    system = requests[0]["messages"][0]
    assert system["role"] == "system"
    assert system["content"].startswith(
        f"你是 @lead（{lead['display_name']}），项目「{project}」的研究成员（角色 lead）。\n"
        f"你在一个受监督的深入研究会话里（研究 #{run['id']}）"
    )
    offered = {t["function"]["name"] for t in requests[0]["tools"]}
    assert "shell" not in offered and "room_send" not in offered
    assert "fs_write" not in offered and "room_research_propose" not in offered
    assert {"room_research_report", "room_research_get", "fs_read"} <= offered

    def answer(i: int) -> dict[str, Any]:
        return json.loads(requests[i]["messages"][-1]["content"])

    assert answer(1)["error"] == "tool_refused" and answer(2)["error"] == "tool_refused"
    assert answer(3)["error"] == "research_out_of_scope"
    assert answer(4).get("error") != "research_out_of_scope"
    assert [i["kind"] for i in done["items"]] == ["hypothesis", "finding", "report"]
    assert done["spend"]["requests"] == 8 and done["spend"]["tokens"] == 8 * 18
    # Usage and transcript rows carry the research id.
    tagged = rows(room, "SELECT count(*) FROM model_requests WHERE research_id = ?", run["id"])
    assert tagged[0][0] == 8
    transcript = rows(room, "SELECT count(*) FROM transcript_entries WHERE research_id = ?",
                      run["id"])  # fmt: skip
    assert transcript[0][0] >= 16
    # Nobody posted "我批准了": the report is posted as the research's message, with sources.
    bodies = [m["body"] for m in room.messages()]
    assert "我批准了" not in bodies
    [report] = [m for m in room.messages() if (m.get("meta") or {}).get("research_report")]
    assert "配置读了两次" in report["body"] and "docs/start.md:3" in report["body"]
    # The finding flows back only after a person accepts it.
    finding = next(i for i in done["items"] if i["kind"] == "finding")
    assert finding["flow"] == "proposed"
    assert room.get(f"/api/projects/{room.project}/memory")["facts"] == []
    accepted = room.post(f"/api/research/items/{finding['id']}/flowback", {"decision": "accept"})
    assert list(accepted) == ["item"]
    accepted = accepted["item"]
    assert accepted["flow"] == "accepted" and accepted["memory_id"]
    [fact] = room.get(f"/api/projects/{room.project}/memory")["facts"]
    assert "配置读了两次" in fact["body"]["text"] and fact["author"]["kind"] == "human"
    actions = [r[0] for r in rows(room, "SELECT action FROM audit_events WHERE action LIKE"
                                  " 'research_%' ORDER BY id")]  # fmt: skip
    assert actions[:4] == ["research_propose", "research_approve", "research_start",
                           "research_flowback_propose"]  # fmt: skip
    assert "research_finish" in actions and actions[-1] == "research_flowback_accept"


async def test_a_token_budget_stops_the_run_at_most_one_request_over(room: Room) -> None:
    run = propose(room, PROPOSAL | {"budget": BUDGET | {"tokens": 40}})
    room.route("lead")
    room.llm.push(*[openai_tool_call("room_research_hypothesis", {"text": f"假设 {i}"},
                                     call_id=f"h{i}") for i in range(6)])  # fmt: skip
    before = len(room.llm.chat_requests)
    approve_and_start(room, run)
    stopped = await eventually(lambda: (r := run_of(room, run["id"]))["state"] == "stopped" and r)
    # 18 tokens a request: 0, 18, 36 are under 40, so three requests were sent; no fourth.
    assert len(room.llm.chat_requests) - before == 3
    assert stopped["stop_reason"] == "budget_tokens" and stopped["spend"]["tokens"] == 54
    assert stopped["spend"]["tokens"] - 40 < 18
    notices = [m["body"] for m in room.messages() if "token 预算用完" in m["body"]]
    assert notices
    actions = [r[0] for r in rows(room, "SELECT action FROM audit_events WHERE action ="
                                  " 'research_budget_stop'")]  # fmt: skip
    assert actions == ["research_budget_stop"]


async def test_trash_during_a_run_stops_it_and_revokes_the_approval(room: Room) -> None:
    run = propose(room, PROPOSAL)
    room.route("lead")
    room.llm.push(
        openai_tool_call("room_research_hypothesis", {"text": "慢"}, call_id="t1"),
        *[
            openai_tool_calls(
                [(f"t{i}", "room_research_hypothesis", {"text": f"很慢 {i}"})], delay_secs=1.0
            )
            for i in range(2, 8)
        ],
    )
    approve_and_start(room, run)
    await eventually(lambda: run_of(room, run["id"])["spend"]["requests"] >= 1)
    room.post(f"/api/projects/{room.project}/lifecycle", {"op": "trash"})
    after = run_of(room, run["id"])
    assert after["state"] == "revoked" and after["approval"] is None
    assert after["stop_reason"] == "project_closed"
    sent = after["spend"]["requests"]
    # The runner was stopped before the trash finished: nothing more is asked of the model.
    assert run_of(room, run["id"])["spend"]["requests"] == sent


async def test_a_person_pauses_and_resumes_through_the_gate(room: Room) -> None:
    run = propose(room, PROPOSAL)
    room.route("lead")
    room.llm.push(
        *[openai_tool_calls([(f"p{i}", "room_research_hypothesis", {"text": f"假设 {i}"})],
                            delay_secs=0.5) for i in range(3)],
        openai_tool_call("room_research_report", {"text": "报告", "sources": []}, call_id="r"),
    )  # fmt: skip
    approve_and_start(room, run)
    await eventually(lambda: run_of(room, run["id"])["spend"]["requests"] >= 1)
    paused = act(room, run["id"], "pause")
    assert paused["state"] == "paused"
    sent = len(room.llm.chat_requests)
    assert run_of(room, run["id"])["state"] == "paused"
    # While paused nothing is sent; a resume passes the gate again and the run finishes.
    resumed = act(room, run["id"], "resume")
    assert resumed["state"] == "running"
    done = await eventually(lambda: (r := run_of(room, run["id"]))["state"] == "done" and r)
    assert len(room.llm.chat_requests) > sent and done["items"][-1]["kind"] == "report"
    # The resumed session carries on from its transcript: the steps recorded before the pause.
    roles = [m["role"] for m in room.llm.chat_requests[sent]["messages"]]
    assert roles[:2] == ["system", "user"] and "tool" in roles
    actions = [r[0] for r in rows(room, "SELECT action FROM audit_events WHERE action LIKE"
                                  " 'research_%' ORDER BY id")]  # fmt: skip
    assert actions == ["research_propose", "research_approve", "research_start",
                       "research_pause", "research_resume", "research_finish"]  # fmt: skip


@pytest.mark.parametrize("how", ["kill9", "stop"])
async def test_a_run_cut_by_a_restart_waits_in_paused_reconcile(
    tmp_path: Any, llm: Any, how: str
) -> None:
    from tests.support.llm_servers import Reply
    from tests.support.server import start_with_openai

    data = tmp_path / "data"
    server = start_with_openai(data, llm)
    room = Room(server, llm)
    run = propose(room, PROPOSAL)
    room.route("lead")
    llm.push(Reply(body=openai_text("慢").body, delay_secs=30))
    approve_and_start(room, run)
    await eventually(lambda: len(llm.chat_requests) == 1)
    getattr(server, how)()
    again = start_with_openai(data, llm)
    try:
        room.server, room.owner = again, again.login()
        after = run_of(room, run["id"])
        assert after["state"] == "paused_reconcile" and set(after["events"]) == {"resume", "stop"}
        card = next(m for m in room.messages() if m["id"] == after["card_id"])
        assert card["meta"]["research"]["state"] == "paused_reconcile"
        assert any("等待人工查看" in m["body"] for m in room.messages())
        assert len(llm.chat_requests) == 1  # nothing was sent after the restart
        actions = [r[0] for r in rows(room, "SELECT action FROM audit_events WHERE action ="
                                      " 'research_reconcile'")]  # fmt: skip
        assert actions == ["research_reconcile"]
        assert act(room, run["id"], "stop")["state"] == "stopped"
    finally:
        again.stop()


async def test_pausing_the_project_stops_its_running_research_saying_why(room: Room) -> None:
    run = propose(room, PROPOSAL)
    room.route("lead")
    room.llm.push(*[openai_tool_calls([(f"q{i}", "room_research_hypothesis", {"text": f"假设 {i}"})],
                                      delay_secs=0.5) for i in range(6)])  # fmt: skip
    approve_and_start(room, run)
    await eventually(lambda: run_of(room, run["id"])["spend"]["requests"] >= 1)
    room.post(f"/api/projects/{room.project}/lifecycle", {"op": "pause"})
    after = run_of(room, run["id"])
    assert after["state"] == "stopped" and after["stop_reason"] == "project_not_active"
    assert any("项目不在进行中" in m["body"] for m in room.messages())


async def test_a_reference_scoped_run_reads_inside_its_references_and_nothing_else(
    rooted: Room, tmp_path: Path
) -> None:
    room = rooted
    refdocs, swapped, elsewhere = tmp_path / "refdocs", tmp_path / "swapped", tmp_path / "elsewhere"
    for folder in (refdocs, swapped, elsewhere):
        folder.mkdir()
    (refdocs / "notes.md").write_text("启动时读了两次配置\n", encoding="utf-8")
    (swapped / "a.md").write_text("批准时的内容\n", encoding="utf-8")
    (elsewhere / "a.md").write_text("不该读到的内容\n", encoding="utf-8")
    (tmp_path / "secret.txt").write_text("秘密\n", encoding="utf-8")
    (refdocs / "leak.txt").symlink_to(tmp_path / "secret.txt")
    (tmp_path / "via").symlink_to(swapped)
    # A relative reference is a workspace path; a symlink under it leading elsewhere in the
    # workspace is out of scope all the same.
    workspace = room.server.data / "workspaces" / str(room.project)
    (workspace / "notes").mkdir(parents=True, exist_ok=True)
    (workspace / "notes" / "a.md").write_text("工作区里的笔记\n", encoding="utf-8")
    (workspace / "private.md").write_text("私有\n", encoding="utf-8")
    (workspace / "notes" / "leak.md").symlink_to(workspace / "private.md")

    def reference(kind: str, target: str, note: str = "") -> dict[str, Any]:
        return dict(room.post(f"/api/projects/{room.project}/memory/reference",
                              {"ref_kind": kind, "target": target, "note": note},
                              expect=201)["entry"])  # fmt: skip

    docs = reference("dir", str(refdocs), "设计笔记")
    via = reference("dir", str(tmp_path / "via"))
    link = reference("url", "https://example.org/spec", "规范")
    notes = reference("dir", "notes/")
    scope = {"references": [docs["id"], via["id"], link["id"], notes["id"]]}
    run = propose(room, PROPOSAL | {"scope": scope})
    act(room, run["id"], "approve", rev=run["rev"], scope_digest=run["scope_digest"])
    # After the approval: the reference is edited to point elsewhere, and the symlink another
    # reference named is swapped. Neither widens what the approved run reads.
    status, _ = room.server.request("PATCH", f"/api/memory/{docs['id']}",
                                    {"rev": docs["rev"], "target": str(elsewhere)},
                                    headers=room.owner.headers)  # fmt: skip
    assert status == 200
    (tmp_path / "via").unlink()
    (tmp_path / "via").symlink_to(elsewhere)
    room.route("lead")
    calls: list[tuple[str, dict[str, Any]]] = [
        ("room_research_get", {}),
        ("fs_read", {"path": f"{refdocs}/notes.md"}),
        ("fs_list", {"path": str(refdocs)}),
        ("fs_search", {"pattern": "配置", "path": str(refdocs)}),
        ("fs_read", {"path": f"{elsewhere}/a.md"}),  # where the edited reference points now
        ("fs_read", {"path": f"{refdocs}/../secret.txt"}),
        ("fs_read", {"path": f"{refdocs}/leak.txt"}),  # a symlink out of the root
        ("fs_read", {"path": f"{tmp_path}/via/a.md"}),  # the swapped symlink
        ("fs_read", {"path": "private.md"}),  # the workspace outside the relative reference
        ("fs_read", {"path": "notes/a.md"}),
        ("fs_read", {"path": "notes/leak.md"}),
        ("room_research_report", {"text": "配置读了两次。", "sources": [f"{refdocs}/notes.md:1"]}),
    ]
    room.llm.push(*[openai_tool_call(name, args, call_id=f"c{i}")
                    for i, (name, args) in enumerate(calls)])  # fmt: skip
    before = len(room.llm.chat_requests)
    act(room, run["id"], "start")
    await eventually(lambda: run_of(room, run["id"])["state"] == "done")
    requests = room.llm.chat_requests[before:]
    assert len(requests) == len(calls)

    def answer(i: int) -> dict[str, Any]:
        return dict(json.loads(requests[i + 1]["messages"][-1]["content"]))

    charter = requests[0]["messages"][0]["content"]
    assert str(refdocs) in charter and "https://example.org/spec" in charter
    assert str(elsewhere) not in charter and "不会被读取或抓取" in charter
    readable = answer(0)["readable"]
    assert [r["path"] for r in readable["roots"]] == [str(refdocs), str(swapped)]
    assert readable["metadata"] == [{"reference": link["id"], "kind": "url", "note": "规范",
                                     "target": "https://example.org/spec", "fetched": False}]  # fmt: skip
    assert readable["web"] is False and readable["workspace_paths"] == ["notes"]
    read = answer(1)
    assert read["ok"] and read["text"] == "启动时读了两次配置\n"
    assert read["path"] == f"{refdocs}/notes.md"
    assert {e["name"] for e in answer(2)["entries"]} == {"notes.md", "leak.txt"}
    assert [h["path"] for h in answer(3)["hits"]] == [f"{refdocs}/notes.md"]
    assert answer(4)["error"] == "research_out_of_scope"
    assert answer(5)["error"] == "research_out_of_scope"
    assert answer(6)["error"] == "outside_workspace"
    assert answer(7)["error"] == "research_reference_moved"
    assert answer(8)["error"] == "research_out_of_scope"
    assert answer(9)["text"] == "工作区里的笔记\n"
    assert answer(10)["error"] == "research_out_of_scope"
    texts = json.dumps([json.loads(r["messages"][-1]["content"]) for r in requests[1:]],
                       ensure_ascii=False)  # fmt: skip
    assert "秘密" not in texts and "不该读到" not in texts and "私有" not in texts
    starts = rows(room, "SELECT detail_json FROM audit_events WHERE action = 'research_start'")
    assert json.loads(starts[0][0])["scope"] == run["scope"]


async def test_a_reference_folder_another_project_takes_after_the_approval_is_not_read(
    rooted: Room, tmp_path: Path
) -> None:
    """A reference is bound when approved; a folder another live project's workspace comes to
    hold afterwards belongs to that project, and the run reads nothing there (issue 24)."""
    room = rooted
    shared, kept = tmp_path / "shared", tmp_path / "kept"
    for folder in (shared, kept):
        folder.mkdir()
    (shared / "notes.md").write_text("隔壁项目的文件\n", encoding="utf-8")
    (kept / "notes.md").write_text("仍可读的参考\n", encoding="utf-8")
    refs = [room.post(f"/api/projects/{room.project}/memory/reference",
                      {"ref_kind": "dir", "target": str(folder)}, expect=201)["entry"]["id"]
            for folder in (shared, kept)]  # fmt: skip
    run = propose(room, PROPOSAL | {"scope": {"references": refs}})
    act(room, run["id"], "approve", rev=run["rev"], scope_digest=run["scope_digest"])
    # After the approval another project makes the folder its workspace (a reference holds no
    # folder, so this is allowed).
    other = room.post("/api/projects", {"name": "隔壁项目", "workspace": str(shared)}, expect=201)
    assert other["project"]["workspace"]["path"] == str(shared)
    room.route("lead")
    calls: list[tuple[str, dict[str, Any]]] = [
        ("fs_read", {"path": f"{shared}/notes.md"}),
        ("fs_list", {"path": str(shared)}),
        ("fs_read", {"path": f"{kept}/notes.md"}),
        ("room_research_report", {"text": "只读了仍属于本项目的参考。", "sources": []}),
    ]
    room.llm.push(*[openai_tool_call(name, args, call_id=f"c{i}")
                    for i, (name, args) in enumerate(calls)])  # fmt: skip
    before = len(room.llm.chat_requests)
    act(room, run["id"], "start")
    await eventually(lambda: run_of(room, run["id"])["state"] == "done")
    requests = room.llm.chat_requests[before:]
    answers = [json.loads(r["messages"][-1]["content"]) for r in requests[1:]]
    assert [a.get("error") for a in answers[:2]] == ["workspace_in_use", "workspace_in_use"]
    # The session is an agent: the project now holding the folder is not named to it.
    assert "project_name" not in answers[0]["details"]
    assert answers[2]["ok"] and answers[2]["text"] == "仍可读的参考\n"
    texts = json.dumps(answers, ensure_ascii=False)
    assert "隔壁项目的文件" not in texts and "隔壁项目" not in texts
