"""The tasks & models panel: task cards, the decision log (from the real route), requirement-change
marking on a message, project and role defaults and pool mode."""

# The fixtures chromium, room_server and owner are imported from tests/support/browser.py and
# used as test arguments, which linters read as unused imports redefined.
# ruff: noqa: F401, F811

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from playwright.sync_api import Page, Route, expect

from tests.support.browser import (
    Person,
    RoomServer,
    chromium,
    fulfill_json,
    fulfill_missing,
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


def tasks_shape(members: dict[str, Any]) -> dict[str, Any]:
    """GET /api/projects/{id}/tasks as planned for issue 5."""
    return {
        "tasks": [
            {
                "id": 1, "key": "T-1", "title": "把设置页迁移到新组件库", "owner_id": members["fe"]["id"],
                "state": "in_review", "revision": 3, "waiting_on": [],
                "criteria": [
                    {"id": 1, "text": "所有设置项保存后刷新仍在", "passed": True, "revision": 3},
                    {"id": 2, "text": "键盘可以完成全部操作", "passed": False, "revision": 3},
                    {"id": 3, "text": "中文输入法下回车不误提交", "passed": None, "revision": 3},
                ],
                "evidence": [
                    {"kind": "test", "path": "tests/settings.spec.ts", "sha256": "ab" * 32, "size": 2048,
                     "verified": True, "summary": "12 个用例全部通过"},
                    {"kind": "screenshot", "path": "artifacts/settings.png", "verified": False, "summary": "截图"},
                ],
            },
            {
                "id": 2, "key": "T-2", "title": "补齐端到端测试", "owner_id": members["qa"]["id"],
                "state": "waiting", "revision": 1, "waiting_on": ["T-1"], "criteria": [], "evidence": [],
            },
        ]
    }  # fmt: skip


def open_tab(page: Page, name: str) -> Any:
    page.get_by_role("tab", name=name).click()
    return page.get_by_role("tabpanel", name=name)


def test_task_cards_and_decision_receipts(owner: Person, room_server: RoomServer) -> None:
    project = room_server.create_project("任务卡片", TEAM)
    members = room_server.members(project)
    page = owner.page
    page.route(
        re.compile(rf".*/api/projects/{project}/tasks$"),
        lambda route: fulfill_json(route, tasks_shape(members)),
    )
    owner.open_project(project)

    tasks = open_tab(page, "任务")
    card = tasks.locator('.task-card[data-key="T-1"]')
    expect(card.locator(".state-badge")).to_have_text("审核中")
    expect(card.locator(".task-rev")).to_have_text("r3")
    expect(card.locator(".task-owner")).to_contain_text("前端")
    criteria = card.locator(".task-criteria")
    expect(criteria.locator("summary")).to_have_text("验收标准 1/3")
    expect(criteria).to_have_attribute("open", "")  # in review: the criteria are what matters
    expect(criteria.locator(".criterion.passed")).to_contain_text("所有设置项保存后刷新仍在")
    expect(criteria.locator(".criterion.failed")).to_contain_text("键盘可以完成全部操作")
    expect(criteria.locator(".criterion.open")).to_contain_text("未检查")
    card.locator(".task-evidence summary").click()
    evidence = card.locator(".evidence")
    expect(evidence.first).to_contain_text("tests/settings.spec.ts")
    expect(evidence.first).to_contain_text("已核验")
    expect(evidence.first).to_contain_text("abababababab")
    expect(evidence.nth(1)).to_contain_text("未核验")
    waiting = tasks.locator('.task-card[data-key="T-2"]')
    expect(waiting.locator(".state-badge")).to_have_text("等待依赖")
    expect(waiting.locator(".task-waiting")).to_have_text("等待 T-1")
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
        {"title": "设置页使用新组件库", "context": "旧组件库不再维护", "decision": "迁移"},
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
    target.hover()
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
