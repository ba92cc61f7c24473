"""The tasks & models panel: task cards from a real plan, the decision log, requirement-change
marking on a message, project and role defaults and pool mode."""

# The fixtures chromium, room_server and owner are imported from tests/support/browser.py and
# used as test arguments, which linters read as unused imports redefined.
# ruff: noqa: F401, F811

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from tests.support.browser import (
    Person,
    RoomServer,
    chromium,
    owner,
    room_server,
    screenshot,
)

pytestmark = pytest.mark.browser

TEAM = [
    {"role": "lead", "handle": "lead", "display_name": "负责人"},
    {"role": "frontend", "handle": "fe", "display_name": "前端"},
    {"role": "tester", "handle": "qa", "display_name": "测试"},
]


def open_tab(page: Page, name: str) -> Any:
    page.get_by_role("tab", name=name).click()
    return page.get_by_role("tabpanel", name=name)


CRITERIA = ["所有设置项保存后刷新仍在", "键盘可以完成全部操作", "中文输入法下回车不误提交"]


def plan_and_review(room_server: RoomServer, project: int, workspace: Path) -> dict[str, Any]:
    """A real plan through the HTTP API: the owner's own task submitted with two files, a message
    and a summary, reviewed (1 passed, 2 failed, 3 not checked: changes requested), and a task of
    the tester's waiting on it. One file changes after the submission. Returns the message cited."""
    base = f"/api/projects/{project}"
    plan = {"goal": "设置页迁移", "items": [
        {"key": "settings", "title": "把设置页迁移到新组件库", "owner": "owner",
         "acceptance": CRITERIA},
        {"key": "e2e", "title": "补齐端到端测试", "owner": "qa", "depends_on": ["settings"],
         "acceptance": ["覆盖设置页的全部保存路径"]},
    ]}  # fmt: skip
    room_server.post(f"{base}/plan", plan, 201)
    room_server.post(f"{base}/tasks/settings/start", {})
    cited = room_server.say(project, "录屏：设置页保存流程")
    submission = {
        "summary": "12 个用例全部通过",
        "artifacts": ["tests/settings.spec.ts", "artifacts/settings.png"],
        "messages": [cited["message_id"]],
    }
    room_server.post(f"{base}/tasks/settings/submit", submission)
    verdicts = [
        {"criterion": 1, "passed": True, "evidence": "刷新后设置仍在"},
        {"criterion": 2, "passed": False, "evidence": "Tab 键跳过了保存按钮"},
    ]
    reviewed = room_server.post(f"{base}/tasks/settings/review", {"results": verdicts})
    assert reviewed["task"]["state"] == "changes_requested", reviewed
    (workspace / "artifacts" / "settings.png").write_bytes(b"a newer screenshot")
    return cited


def test_task_cards_from_the_real_board(
    owner: Person, room_server: RoomServer, tmp_path: Path
) -> None:
    workspace = tmp_path / "workspace"
    (workspace / "tests").mkdir(parents=True)
    (workspace / "artifacts").mkdir()
    spec = workspace / "tests" / "settings.spec.ts"
    spec.write_text("test('设置保存后刷新仍在', () => {});\n", encoding="utf-8")
    (workspace / "artifacts" / "settings.png").write_bytes(b"\x89PNG screenshot")
    project = room_server.create_project("任务卡片", TEAM, workspace=workspace)
    cited = plan_and_review(room_server, project, workspace)
    members = room_server.members(project)
    page = owner.page
    owner.open_project(project)

    tasks = open_tab(page, "任务")
    card = tasks.locator('.task-card[data-key="settings"]')
    expect(card.locator(".state-badge")).to_have_text("需修改")
    expect(card.locator(".task-rev")).to_have_text("r1")
    expect(card.locator(".task-owner")).to_contain_text(members["owner"]["display_name"])
    expect(card.locator(".task-note")).to_have_text("原因：2. Tab 键跳过了保存按钮")
    criteria = card.locator(".task-criteria")
    expect(criteria.locator("summary")).to_have_text("验收标准 1/3")
    expect(criteria).to_have_attribute("open", "")  # sent back: what failed is what matters
    first, second, third = (criteria.locator(f'.criterion[data-n="{n}"]') for n in (1, 2, 3))
    expect(first).to_have_class(re.compile(r"\bpassed\b"))
    expect(first).to_contain_text(f"1.已通过{CRITERIA[0]} r1刷新后设置仍在")
    expect(second).to_have_class(re.compile(r"\bfailed\b"))
    expect(second).to_contain_text(f"2.未通过{CRITERIA[1]} r1Tab 键跳过了保存按钮")
    expect(third).to_have_class(re.compile(r"\bopen\b"))
    expect(third).to_have_text(f"3.未检查{CRITERIA[2]}")  # no verdict: no revision, no note

    card.locator(".task-evidence summary").click()
    expect(card.locator(".task-evidence summary")).to_have_text("证据 4")
    files = card.locator(".evidence-artifact")
    sha = hashlib.sha256(spec.read_bytes()).hexdigest()
    expect(files.nth(0)).to_contain_text("tests/settings.spec.ts")
    expect(files.nth(0).locator(".badge")).to_have_text("文件")
    expect(files.nth(0).locator(".verify")).to_have_text("已核验")
    expect(files.nth(0)).to_contain_text(sha[:12])
    expect(files.nth(1)).to_contain_text("artifacts/settings.png")
    expect(files.nth(1).locator(".verify")).to_have_text("未通过核验（文件已改动）")
    message = card.locator(".evidence-message")
    expect(message.get_by_role("button")).to_have_text(f"消息 #{cited['seq']}")
    expect(card.locator(".evidence-note")).to_contain_text("说明")
    expect(card.locator(".evidence-note .evidence-summary")).to_have_text("12 个用例全部通过")
    for text in card.all_inner_texts():
        assert "null" not in text and "undefined" not in text, text

    waiting = tasks.locator('.task-card[data-key="e2e"]')
    expect(waiting.locator(".state-badge")).to_have_text("等待依赖")
    expect(waiting.locator(".task-waiting")).to_have_text("等待 settings")
    expect(waiting.locator(".task-criteria")).not_to_have_attribute("open", "")
    screenshot(page, "panel-tasks")

    # 当前任务 from a member's menu filters by owner.
    open_tab(page, "成员")
    page.locator(f'#tab-members .avatar[data-member-id="{members["qa"]["id"]}"]').click()
    page.get_by_role("menuitem", name="当前任务").click()
    expect(tasks.locator(".filter-bar")).to_contain_text("只看 测试 的任务")
    expect(tasks.locator(".task-card")).to_have_count(1)
    tasks.get_by_role("button", name="显示全部").click()
    expect(tasks.locator(".task-card")).to_have_count(2)


def test_decision_log_from_the_server(owner: Person, room_server: RoomServer) -> None:
    project = room_server.create_project("决策记录", TEAM)
    room_server.post(
        f"/api/projects/{project}/decisions",
        {
            "title": "设置页使用新组件库",
            "context": "旧组件库不再维护",
            "decision": "迁移",
            "alternatives": [{"option": "继续修补", "why_rejected": "没人维护"}],
        },
        expect_status=201,
    )
    owner.open_project(project)
    decisions = open_tab(owner.page, "决策")
    adr = decisions.locator('.decision-card[data-number="ADR-0001"]')
    expect(adr.locator(".task-key")).to_have_text("ADR-0001")
    expect(adr.locator(".state-badge")).to_have_text("已采纳")
    expect(adr.locator(".task-title")).to_have_text("设置页使用新组件库")
    screenshot(owner.page, "panel-decisions")


def test_requirement_change_marking(owner: Person, room_server: RoomServer) -> None:
    project = room_server.create_project("需求变更", TEAM)
    room_server.say(project, "@lead 需求改了：设置页也要支持暗色")
    page = owner.page
    owner.open_project(project)
    target = page.locator(".msg.mine", has_text="需求改了")
    # Focus, not hover, shows the message's bar: a notice arriving meanwhile may shift the
    # timeline from under a resting mouse (then the bar hides and another message is clicked).
    target.focus()
    target.get_by_role("button", name="标记为需求变更").click()
    expect(page.locator(".toast").last).to_contain_text("已标记为需求变更")


def test_project_and_role_defaults_and_pool_mode(owner: Person, room_server: RoomServer) -> None:
    project = room_server.create_project("模型设置", TEAM)
    owner.open_project(project)
    page = owner.page
    models = open_tab(page, "模型")
    expect(models.locator(".brake-status")).to_have_text("未触发：派发正常")

    form = models.locator('form[data-route="route-project"]')
    form.locator("select").select_option("builtin/echo")
    form.get_by_role("textbox", name="理由").fill("全项目先用离线回显")
    form.get_by_role("button", name="保存").click()
    expect(models.locator(".route-history li").first).to_contain_text("全项目先用离线回显")

    models.get_by_role("combobox", name="角色", exact=True).select_option("tester")
    role = models.locator('form[data-route="route-role"]')
    role.get_by_label("测试的默认模型").select_option("builtin/echo")
    role.get_by_role("textbox", name="理由").fill("测试角色固定")
    role.get_by_role("button", name="保存").click()
    expect(models.locator(".route-history li").first).to_contain_text("测试角色固定")
    expect(models.locator('.role-defaults li[data-role="tester"]')).to_contain_text("builtin/echo")

    pool = models.locator(".pool-form")
    pool.get_by_label(re.compile("开启允许池模式")).check()
    pool.get_by_label("builtin/echo").check()
    pool.get_by_role("textbox", name="理由").fill("负责人可在池内挑选")
    pool.get_by_role("button", name="保存").click()
    expect(models.locator(".route-history li").first).to_contain_text("负责人可在池内挑选")
    expect(models.locator(".pool-form input#pool-enabled")).to_be_checked()

    settings = {
        (s["scope"], s["target"]): s["value"]
        for s in room_server.get(f"/api/projects/{project}/routes")["settings"]
    }
    assert settings[("project", "")] == "builtin/echo"
    assert settings[("role", "tester")] == "builtin/echo"
    assert json.loads(settings[("pool", "")]) == {"models": ["builtin/echo"], "enabled": True}
    expect(page.locator(".notice-route")).to_have_count(3)  # every change is announced

    limits = models.locator(".limits-form")
    limits.locator("input[name=agent_turn_cap]").fill("5")
    limits.get_by_role("button", name="保存限额").click()
    expect(models.locator(".brake-stats dd").first).to_have_text(re.compile(r"/ 5$"))
    screenshot(page, "panel-models")
