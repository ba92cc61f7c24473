"""The research card in real Chromium: its state reads clearly for everyone (Chinese and
English), its buttons appear only for an owner and work, and a plain member sees none."""

# The fixtures chromium, room_server and owner are imported from tests/support/browser.py and
# used as test arguments, which linters read as unused imports redefined.
# ruff: noqa: F401, F811

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Browser, expect

from tests.support.browser import (
    Person,
    RoomServer,
    chromium,
    join,
    owner,
    room_server,
    screenshot,
)

pytestmark = pytest.mark.browser

TEAM = [{"role": "lead", "handle": "lead", "display_name": "负责人"}]
PROPOSAL = {"question": "启动为什么慢？", "scope": {"paths": ["docs"]}, "members": ["lead"],
            "budget": {"tokens": 5000, "requests": 10, "seconds": 600, "steps": 10}}  # fmt: skip


def propose(room_server: RoomServer, project: int) -> dict[str, Any]:
    return dict(room_server.post(f"/api/projects/{project}/research", PROPOSAL, 201)["research"])


def test_owner_acts_on_the_card_a_member_only_sees_it(
    owner: Person, room_server: RoomServer, chromium: Browser
) -> None:
    project = room_server.create_project("研究卡片", TEAM)
    run = propose(room_server, project)
    member = join(chromium, room_server, project, "zhang", "小张")
    try:
        owner.open_project(project)
        member.open_project(project)
        card = owner.page.locator(f'.research-card[data-research="{run["id"]}"]')
        seen = member.page.locator(f'.research-card[data-research="{run["id"]}"]')
        expect(card.locator(".research-state")).to_have_text("待批准")
        expect(card.locator(".research-actions button")).to_have_text(
            ["批准", "调整", "拒绝", "取消", "详情"])  # fmt: skip
        expect(seen.locator(".research-state")).to_have_text("待批准")
        expect(seen.locator(".research-actions button")).to_have_text(["详情"])
        expect(card).to_contain_text("启动为什么慢？")
        expect(card.locator(".research-spends")).to_contain_text("tokens 0 / 5000")

        card.get_by_role("button", name="批准").click()
        expect(card.locator(".research-state")).to_have_text("已批准")
        expect(card.locator(".research-approval")).to_contain_text("批准了第 1 版")
        expect(card.locator(".research-actions button")).to_have_text(
            ["开始研究", "调整", "拒绝", "取消", "详情"])  # fmt: skip
        # The member's page is told (message_updated): the state, still no buttons.
        expect(seen.locator(".research-state")).to_have_text("已批准")
        expect(seen.locator(".research-actions button")).to_have_text(["详情"])
        screenshot(owner.page, "research-card-owner")
        screenshot(member.page, "research-card-member")

        # Adjust makes revision 2 and voids the approval.
        card.get_by_role("button", name="调整").click()
        dialog = owner.page.get_by_role("dialog")
        dialog.locator("input[type=number]").first.fill("4000")
        dialog.get_by_role("button", name="保存为新版本").click()
        expect(card.locator(".research-state")).to_have_text("待批准")
        expect(card).to_contain_text("第 2 版")
        expect(card.locator(".research-approval")).to_have_count(0)
        card.get_by_role("button", name="详情").click()
        view = owner.page.get_by_role("dialog", name=f"研究 #{run['id']}")
        expect(view.locator("li", has_text="第 2 版")).to_have_count(1)
        view.get_by_role("button", name="关闭").click()
        card.get_by_role("button", name="取消").click()
        expect(card.locator(".research-state")).to_have_text("已取消")
        expect(card.locator(".research-actions button")).to_have_text(["详情"])
        member.assert_clean()
    finally:
        member.close()


def test_owner_picks_references_in_the_adjust_dialog_and_the_card_shows_them(
    owner: Person, room_server: RoomServer
) -> None:
    project = room_server.create_project("研究参考", TEAM)
    memory = f"/api/projects/{project}/memory/reference"
    specs = room_server.post(memory, {"ref_kind": "dir", "target": "docs/specs/",
                                      "note": "规格说明"}, 201)["entry"]  # fmt: skip
    link = room_server.post(memory, {"ref_kind": "url", "target": "https://example.org/标准",
                                     "note": "外部标准"}, 201)["entry"]  # fmt: skip
    run = propose(room_server, project)
    owner.open_project(project)
    card = owner.page.locator(f'.research-card[data-research="{run["id"]}"]')
    expect(card.locator(".research-scope")).to_have_text("docs")
    expect(card.locator(".research-ref")).to_have_count(0)
    card.get_by_role("button", name="调整").click()
    dialog = owner.page.get_by_role("dialog")
    options = dialog.locator(".research-ref-option")
    expect(options).to_have_count(2)
    expect(dialog.locator(".research-ref-pick legend")).to_contain_text("纳入范围的参考")
    dialog.locator(".research-ref-option", has_text="docs/specs/").locator("input").check()
    dialog.locator(".research-ref-option", has_text="example.org").locator("input").check()
    screenshot(owner.page, "research-adjust-references")
    dialog.get_by_role("button", name="保存为新版本").click()
    expect(card).to_contain_text("第 2 版")
    expect(card.locator(".research-state")).to_have_text("待批准")
    refs = card.locator(".research-ref")
    expect(refs).to_have_count(2)
    folder = card.locator(f'.research-ref[data-ref="{specs["id"]}"]')
    expect(folder).to_contain_text("目录")
    expect(folder).to_contain_text("docs/specs/")
    expect(folder).to_contain_text("规格说明")
    expect(folder.locator(".research-ref-meta")).to_have_count(0)
    url = card.locator(f'.research-ref[data-ref="{link["id"]}"]')
    expect(url).to_contain_text("https://example.org/标准")
    expect(url.locator(".research-ref-meta")).to_contain_text("只作参考，不会被读取或抓取")
    stored = room_server.get(f"/api/research/{run['id']}")["research"]
    assert stored["rev"] == 2 and stored["approval"] is None
    assert [r["id"] for r in stored["scope"]["references"]] == sorted([specs["id"], link["id"]])
    # Opening the dialog again shows them ticked; untick one: revision 3 without it.
    card.get_by_role("button", name="调整").click()
    dialog = owner.page.get_by_role("dialog")
    expect(dialog.locator(".research-ref-pick input:checked")).to_have_count(2)
    dialog.locator(".research-ref-option", has_text="example.org").locator("input").uncheck()
    dialog.get_by_role("button", name="保存为新版本").click()
    expect(card).to_contain_text("第 3 版")
    expect(card.locator(".research-ref")).to_have_count(1)
    screenshot(owner.page, "research-card-references")
    # The same scope in English.
    english = owner.page.evaluate("""async (scope) => {
      const { scopeView } = await import("/static/research.js");
      const i18n = await import("/static/i18n.js");
      i18n.setLang("en");
      const box = document.createElement("div");
      box.append(...scopeView(scope).filter(Boolean));
      i18n.setLang("zh-CN");
      return box.textContent;
    }""", stored["scope"])  # fmt: skip
    assert "Folder docs/specs/ — 规格说明" in english
    assert "URL https://example.org/标准 — 外部标准 (metadata only, never fetched" in english
    owner.assert_clean()


def test_states_read_in_english(chromium: Browser, room_server: RoomServer) -> None:
    from tests.support.browser import sign_in_owner

    project = room_server.create_project("research in english", TEAM)
    run = propose(room_server, project)
    person = sign_in_owner(
        chromium, room_server,
        setup=lambda page: page.add_init_script("localStorage.setItem('room.lang', JSON.stringify('en'))"),
    )  # fmt: skip
    try:
        person.open_project(project)
        card = person.page.locator(f'.research-card[data-research="{run["id"]}"]')
        expect(card.locator(".research-state")).to_have_text("Awaiting approval")
        card.get_by_role("button", name="Approve").click()
        expect(card.locator(".research-state")).to_have_text("Approved")
        expect(card.get_by_role("button", name="Start research")).to_be_visible()
        screenshot(person.page, "research-card-en")
        person.assert_clean()
    finally:
        person.close()


STATES_JS = r"""
async () => {
  const { researchCard } = await import("/static/research.js");
  const i18n = await import("/static/i18n.js");
  const base = { id: 9, rev: 1, scope_digest: "ab".repeat(32), question: "q", scope: { paths: ["docs"] },
    members: [], budget: { tokens: 1, requests: 1, seconds: 1, steps: 1 }, spend: {}, events: [], counts: {} };
  const past = new Date(Date.now() - 3600e3).toISOString();
  const runs = {
    proposed: { state: "proposed" },
    approved: { state: "approved", approval: { rev: 1, by: { display_name: "A" }, at: past, expires_at: new Date(Date.now() + 3600e3).toISOString() } },
    expired: { state: "approved", approval: { rev: 1, by: { display_name: "A" }, at: past, expires_at: past } },
    running: { state: "running" },
    paused: { state: "paused" },
    reconcile: { state: "paused_reconcile" },
    done: { state: "done" },
  };
  const read = () => Object.fromEntries(Object.entries(runs).map(([name, over]) => {
    const el = researchCard({ you: null }, { id: 1, seq: 1, meta: { research: { ...base, ...over } } });
    return [name, el.querySelector(".research-state").textContent];
  }));
  const zh = read();
  i18n.setLang("en");
  const en = read();
  i18n.setLang("zh-CN");
  return { zh, en };
}
"""


def test_every_state_reads_clearly_in_chinese_and_english(owner: Person) -> None:
    owner.page.goto(owner.page.url)
    texts = owner.page.evaluate(STATES_JS)
    assert texts["zh"] == {
        "proposed": "待批准", "approved": "已批准", "expired": "批准已过期", "running": "进行中",
        "paused": "已暂停", "reconcile": "重启后待核对", "done": "已完成",
    }  # fmt: skip
    assert texts["en"] == {
        "proposed": "Awaiting approval", "approved": "Approved", "expired": "Approval expired",
        "running": "Running", "paused": "Paused", "reconcile": "Check after restart",
        "done": "Done",
    }  # fmt: skip


WAITING_JS = r"""
async () => {
  const { researchCard } = await import("/static/research.js");
  const i18n = await import("/static/i18n.js");
  const base = { id: 9, rev: 1, scope_digest: "ab".repeat(32), question: "启动为什么慢？", scope: { paths: ["docs"] },
    members: [], budget: { tokens: 1000, requests: 10, seconds: 600, steps: 10 }, events: [], counts: {},
    spend: { tokens: 120, requests: 1, seconds: 3.2, steps: 1 } };
  const card = (over) => researchCard({ you: null }, { id: 1, seq: 1, meta: { research: { ...base, ...over } } });
  const wait = (el) => el.querySelector(".research-wait")?.textContent ?? null;
  const badge = (el) => el.querySelector(".research-state").textContent;
  const waiting = { state: "running", waiting: "home_node_offline" };
  const shown = card(waiting);
  document.querySelector(".timeline, main, body").prepend(shown);
  const zh = { waiting: wait(shown), label: shown.querySelector(".research-wait").previousSibling.textContent,
    plain: wait(card({ state: "running", waiting: null })), paused: wait(card({ state: "paused", waiting: "home_node_offline" })),
    badge: badge(shown), plainBadge: badge(card({ state: "running", waiting: null })) };
  i18n.setLang("en");
  const en = { waiting: wait(card(waiting)), label: card(waiting).querySelector(".research-wait").previousSibling.textContent,
    badge: badge(card(waiting)) };
  i18n.setLang("zh-CN");
  return { zh, en };
}
"""


def test_a_run_waiting_for_its_home_node_says_why_in_both_languages(owner: Person) -> None:
    """A cluster's running run whose home node is not heard (docs/cluster.md): the card and
    its badge say it waits, and why, and that its time is not spent; nothing for a run that
    runs or paused."""
    owner.page.goto(owner.page.url)
    texts = owner.page.evaluate(WAITING_JS)
    assert texts["zh"]["label"] == "等待中"
    assert texts["zh"]["waiting"].startswith("运行本项目智能体的服务器节点离线")
    assert "不计时间预算" in texts["zh"]["waiting"]
    assert texts["zh"]["plain"] is None and texts["zh"]["paused"] is None
    # Its badge says it waits too (a run that runs says it runs).
    assert texts["zh"]["badge"] == "等待中" and texts["zh"]["plainBadge"] == "进行中"
    assert texts["en"]["badge"] == "Waiting"
    assert texts["en"]["label"] == "Waiting"
    assert (
        "offline" in texts["en"]["waiting"] and "time budget is not spent" in texts["en"]["waiting"]
    )
    screenshot(owner.page, "research-card-waiting")
    owner.assert_clean()


def open_propose(person: Person) -> Any:
    person.page.locator("#lifecycle-menu").click()
    person.page.get_by_role("menuitem", name="发起研究…").click()
    return person.page.get_by_role("dialog", name="发起研究")


def test_a_person_proposes_research_from_the_room_and_everyone_sees_the_card(
    owner: Person, room_server: RoomServer, chromium: Browser
) -> None:
    team = [*TEAM, {"role": "tester", "handle": "scout", "display_name": "侦察员"}]
    project = room_server.create_project("发起研究", team)
    memory = f"/api/projects/{project}/memory/reference"
    specs = room_server.post(memory, {"ref_kind": "dir", "target": "docs/specs/",
                                      "note": "规格说明"}, 201)["entry"]  # fmt: skip
    members = room_server.members(project)
    member = join(chromium, room_server, project, "wang", "小王", width=600, height=900)
    try:
        owner.open_project(project)
        member.open_project(project)
        owner.allow("Failed to load resource.*400")
        dialog = open_propose(owner)
        # The suggested budget is the server's, the lead is preselected, the other agent not.
        budget = dialog.locator(".research-budget input")
        assert [budget.nth(i).input_value() for i in range(4)] == ["200000", "60", "1800", "60"]
        lead = dialog.locator(f'input[data-member="{members["lead"]["id"]}"]')
        scout = dialog.locator(f'input[data-member="{members["scout"]["id"]}"]')
        expect(lead).to_be_checked()
        expect(scout).not_to_be_checked()
        expect(dialog.locator(".research-member-pick")).to_contain_text("负责人")

        # Nothing typed: the page says so under the question, nothing is sent.
        dialog.get_by_role("button", name="提交提案").click()
        expect(dialog.locator('[data-error-for="question"]')).to_have_text("请写下要研究的问题")

        question = dialog.get_by_label("问题")
        paths = dialog.get_by_label("范围：工作区路径")
        question.fill("启动为什么这么慢？冷启动要 8 秒")
        paths.fill("docs, ../etc")
        dialog.get_by_role("button", name="提交提案").click()
        error = dialog.locator('[data-error-for="paths"]')
        expect(error).to_have_text("研究范围里的路径不能在工作区之外：../etc")
        expect(paths).to_have_attribute("aria-invalid", "true")
        expect(dialog.locator('[data-error-for="question"]')).to_be_hidden()
        expect(question).to_have_value("启动为什么这么慢？冷启动要 8 秒")
        expect(paths).to_have_value("docs, ../etc")
        screenshot(owner.page, "research-propose-error")

        # Fixed; a budget of -1 is refused under its own field, the rest kept.
        paths.fill("docs")
        tokens = dialog.get_by_label("tokens")
        tokens.fill("-1")
        dialog.get_by_role("button", name="提交提案").click()
        expect(dialog.locator('[data-error-for="budget.tokens"]')).to_contain_text("正整数")
        expect(error).to_be_hidden()
        expect(question).to_have_value("启动为什么这么慢？冷启动要 8 秒")
        tokens.fill("5000")
        dialog.locator(".research-ref-option", has_text="docs/specs/").locator("input").check()
        scout.check()
        # Dismissed, the dialog keeps what was typed for next time.
        dialog.get_by_role("button", name="取消").click()
        expect(dialog).to_have_count(0)
        dialog = open_propose(owner)
        expect(dialog.get_by_label("问题")).to_have_value("启动为什么这么慢？冷启动要 8 秒")
        expect(dialog.get_by_label("tokens")).to_have_value("5000")
        expect(scout).to_be_checked()
        expect(dialog.locator(".research-ref-option input:checked")).to_have_count(1)
        # An agent picked here leaves meanwhile: refused under the members, by its handle.
        room_server.post(f"/api/projects/{project}/members/{members['scout']['id']}/leave", {})
        dialog.get_by_role("button", name="提交提案").click()
        expect(dialog.locator('[data-error-for="members"]')).to_have_text(
            "没有这个 AI 成员：@scout"
        )
        scout.uncheck()
        dialog.get_by_role("button", name="提交提案").click()
        expect(dialog).to_have_count(0)

        runs = room_server.get(f"/api/projects/{project}/research")["research"]
        assert len(runs) == 1
        run = runs[0]
        assert run["question"] == "启动为什么这么慢？冷启动要 8 秒"
        assert run["scope"]["paths"] == ["docs"]
        assert [r["id"] for r in run["scope"]["references"]] == [specs["id"]]
        assert [m["handle"] for m in run["members"]] == ["lead"]
        assert run["budget"] == {"tokens": 5000, "requests": 60, "seconds": 1800, "steps": 60}
        assert run["proposer"]["handle"] == "owner"
        for person in (owner, member):
            card = person.page.locator(f'.research-card[data-research="{run["id"]}"]')
            expect(card.locator(".research-state")).to_have_text("待批准")
            expect(card).to_contain_text("启动为什么这么慢？")
            expect(card.locator(f'.research-ref[data-ref="{specs["id"]}"]')).to_contain_text(
                "docs/specs/")  # fmt: skip
            expect(card.locator("dd", has_text="@lead")).to_have_text("@lead")
        expect(owner.page.locator(".toast")).to_contain_text(f"研究 #{run['id']} 的提案已发出")
        screenshot(owner.page, "research-proposed-owner")
        screenshot(member.page, "research-proposed-member-600")

        # A plain member may propose too (the server's rule): the dialog at 600 px.
        dialog = open_propose(member)
        expect(dialog.get_by_label("问题")).to_be_visible()
        screenshot(member.page, "research-propose-dialog-600")
        dialog.get_by_role("button", name="取消").click()
        member.assert_clean()
    finally:
        member.close()


def test_no_entry_point_where_research_cannot_be_proposed(
    owner: Person, room_server: RoomServer, chromium: Browser
) -> None:
    project = room_server.create_project("暂停的研究", TEAM)
    member = join(chromium, room_server, project, "li", "小李")
    try:
        owner.open_project(project)
        member.open_project(project)
        for person in (owner, member):
            person.page.locator("#lifecycle-menu").click()
            expect(person.page.get_by_role("menuitem", name="发起研究…")).to_be_visible()
            person.page.keyboard.press("Escape")
        room_server.post(f"/api/projects/{project}/lifecycle", {"op": "pause"})
        for person in (owner, member):
            expect(person.page.locator("#room-banner")).to_be_visible()
            person.page.locator("#lifecycle-menu").click()
            menu = person.page.get_by_role("menu")
            expect(menu).to_be_visible()
            expect(menu.get_by_role("menuitem", name="发起研究…")).to_have_count(0)
            person.page.keyboard.press("Escape")
        member.assert_clean()
    finally:
        member.close()


def test_the_proposal_form_reads_in_english(chromium: Browser, room_server: RoomServer) -> None:
    from tests.support.browser import sign_in_owner

    project = room_server.create_project("research form in english", TEAM)
    person = sign_in_owner(
        chromium, room_server,
        setup=lambda page: page.add_init_script("localStorage.setItem('room.lang', JSON.stringify('en'))"),
    )  # fmt: skip
    person.allow("Failed to load resource.*400")
    try:
        person.open_project(project)
        person.page.locator("#lifecycle-menu").click()
        person.page.get_by_role("menuitem", name="Propose research…").click()
        dialog = person.page.get_by_role("dialog", name="Propose research")
        dialog.get_by_label("Question").fill("Why is the cold start slow? 冷启动")
        dialog.get_by_label("Scope: workspace paths").fill("/etc")
        dialog.get_by_label("Model requests").fill("0")
        dialog.get_by_role("button", name="Submit proposal").click()
        expect(dialog.locator('[data-error-for="paths"]')).to_have_text(
            "A research scope path cannot be outside the workspace: /etc")  # fmt: skip
        dialog.get_by_label("Scope: workspace paths").fill("docs")
        dialog.get_by_role("button", name="Submit proposal").click()
        expect(dialog.locator('[data-error-for="budget.requests"]')).to_contain_text(
            "positive integer")  # fmt: skip
        expect(dialog.get_by_label("Question")).to_have_value("Why is the cold start slow? 冷启动")
        screenshot(person.page, "research-propose-en")
        person.assert_clean()
    finally:
        person.close()
