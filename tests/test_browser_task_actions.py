"""Task cards have actions for people (issue 14): start, submit with evidence, review with a
verdict per criterion (changes requested, then accepted), acceptance progress, the "已同步"
receipt a requirement-change notice points at, reassigning handed-off work, cancelling with a
reason; and a message marked as a requirement change shows its badge. Real server, real board."""

# The fixtures chromium, room_server and owner are imported from tests/support/browser.py and
# used as test arguments, which linters read as unused imports redefined.
# ruff: noqa: F401, F811

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Locator, Page, expect

from tests.support.browser import Person, RoomServer, chromium, owner, room_server, screenshot

pytestmark = pytest.mark.browser

TEAM = [
    {"role": "lead", "handle": "lead", "display_name": "负责人"},
    {"role": "backend", "handle": "be", "display_name": "后端"},
]


def open_tasks(page: Page) -> Locator:
    page.get_by_role("tab", name="任务").click()
    return page.get_by_role("tabpanel", name="任务")


def plan(room_server: RoomServer, project: int, *items: dict[str, Any]) -> None:
    room_server.post(f"/api/projects/{project}/plan", {"goal": "做完", "items": list(items)}, 201)


def task(room_server: RoomServer, project: int, key: str) -> dict[str, Any]:
    return dict(room_server.get(f"/api/projects/{project}/tasks/{key}")["task"])


def test_a_person_works_a_task_through_review_on_its_card(
    owner: Person, room_server: RoomServer, tmp_path: Path
) -> None:
    workspace = tmp_path / "ws"
    (workspace / "src").mkdir(parents=True)
    (workspace / "src" / "api.py").write_text("def api(): ...\n", encoding="utf-8")
    project = room_server.create_project("卡片上的操作", TEAM, workspace=workspace)
    criteria = ["接口返回列表", "错误时返回 400"]
    plan(
        room_server,
        project,
        {"key": "api", "title": "写接口", "owner": "owner", "acceptance": criteria},
    )
    page = owner.page
    owner.open_project(project)
    card = open_tasks(page).locator('.task-card[data-key="api"]')
    actions = card.locator(".task-action-buttons button")
    expect(actions).to_have_text(["开始", "取消任务"])
    expect(card.locator(".task-progress")).to_contain_text("验收进度 0/2")

    card.get_by_role("button", name="开始").click()
    expect(card.locator(".state-badge")).to_have_text("进行中")
    card.get_by_role("button", name="提交评审").click()
    dialog = page.get_by_role("dialog", name="提交评审：任务 api")
    dialog.get_by_role("button", name="提交评审").click()
    expect(dialog.get_by_role("alert")).to_have_text("请写提交说明")  # nothing sent
    dialog.get_by_label("提交说明").fill("接口写好了")
    dialog.get_by_label("证据文件").fill("src/api.py\n")
    dialog.get_by_role("button", name="提交评审").click()
    expect(dialog).to_be_hidden()
    expect(card.locator(".state-badge")).to_have_text("审核中")
    assert [
        e["path"] for e in task(room_server, project, "api")["evidence"] if e["kind"] == "artifact"
    ] == ["src/api.py"]

    # Review: a verdict and its grounds per criterion; one fails, so changes are requested.
    card.get_by_role("button", name="评审", exact=True).click()
    review = page.get_by_role("dialog", name="评审任务 api 第 1 版")
    review.get_by_role("button", name="提交评审结论").click()
    expect(review.get_by_role("alert")).to_have_text("请为每条标准选择结论并写明依据")
    first, second = review.locator('.verdict[data-n="1"]'), review.locator('.verdict[data-n="2"]')
    first.get_by_label("通过", exact=True).check()
    review.get_by_label("标准 1 的依据").fill("curl 返回了列表")
    second.get_by_label("不通过").check()
    review.get_by_label("标准 2 的依据").fill("空参数时返回 500")
    screenshot(page, "task-review-dialog")
    review.get_by_role("button", name="提交评审结论").click()
    expect(review).to_be_hidden()
    expect(card.locator(".state-badge")).to_have_text("需修改")
    expect(card.locator(".task-progress")).to_contain_text("验收进度 1/2")
    expect(card.locator(".task-note")).to_contain_text("空参数时返回 500")
    verdicts = {c["n"]: c["passed"] for c in task(room_server, project, "api")["criteria"]}
    assert verdicts == {1: True, 2: False}

    # Fixed and submitted again: a new revision, every criterion judged again, then accepted.
    card.get_by_role("button", name="提交评审").click()
    dialog = page.get_by_role("dialog", name="提交评审：任务 api")
    dialog.get_by_label("提交说明").fill("修好了 400")
    dialog.get_by_label("证据文件").fill("src/api.py")
    dialog.get_by_role("button", name="提交评审").click()
    expect(card.locator(".task-rev")).to_have_text("r2")
    expect(card.locator(".task-progress")).to_contain_text("验收进度 0/2")
    card.get_by_role("button", name="评审", exact=True).click()
    review = page.get_by_role("dialog", name="评审任务 api 第 2 版")
    for n in (1, 2):
        review.locator(f'.verdict[data-n="{n}"]').get_by_label("通过", exact=True).check()
        review.get_by_label(f"标准 {n} 的依据").fill("复测通过")
    review.get_by_role("button", name="提交评审结论").click()
    expect(card.locator(".state-badge")).to_have_text("已验收")
    expect(card.locator(".task-progress")).to_contain_text("验收进度 2/2")
    expect(card.locator(".task-action-buttons button")).to_have_text(["重新打开"])
    screenshot(page, "task-card-accepted")
    assert task(room_server, project, "api")["state"] == "accepted"


def test_synced_receipt_badge_reassign_and_cancel(owner: Person, room_server: RoomServer) -> None:
    project = room_server.create_project("同步与指派", TEAM)
    plan(
        room_server,
        project,
        {"key": "doc", "title": "写文档", "owner": "owner", "acceptance": ["文档齐全"]},
        {"key": "api", "title": "写接口", "owner": "be", "acceptance": ["能用"]},
        {"key": "ops", "title": "部署", "owner": "owner", "acceptance": ["能访问"]},
    )
    page = owner.page
    owner.open_project(project)
    said = room_server.say(project, "接口要分页，每页 20 条")
    room_server.post(
        f"/api/messages/{said['message_id']}/requirement-change", {"tasks": ["doc"]}, 201
    )
    # The marked message shows its badge, live.
    marked = page.locator(f'.msg[data-id="{said["message_id"]}"]')
    expect(marked.locator(".badge")).to_have_text("需求变更")
    notice = page.locator(".notice", has_text="需求变更 ADR-0001")
    expect(notice).to_contain_text("「已同步」")
    expect(notice).not_to_contain_text("room_task_update")

    tasks = open_tasks(page)
    doc = tasks.locator('.task-card[data-key="doc"]')
    expect(doc.locator(".state-badge")).to_have_text("需同步需求")
    doc.get_by_role("button", name="已同步").click()  # the button the notice points at
    expect(doc.locator(".state-badge")).to_have_text("可开始")
    [requirement] = room_server.get(f"/api/projects/{project}/decisions")["decisions"]
    assert [(r["task"], r["synced"]) for r in requirement["receipts"]] == [("doc", True)]

    # The agent leaves: its task is handed off, and a person reassigns it on the card.
    be = room_server.members(project)["be"]["id"]
    room_server.post(f"/api/projects/{project}/members/{be}/leave", {})
    api = tasks.locator('.task-card[data-key="api"]')
    page.get_by_role("tab", name="成员").click()
    tasks = open_tasks(page)
    expect(api.locator(".state-badge")).to_have_text("待交接")
    api.get_by_role("button", name="重新指派").click()
    dialog = page.get_by_role("dialog", name="重新指派：任务 api")
    dialog.get_by_label("新负责人").select_option("lead")
    dialog.get_by_role("button", name="重新指派").click()
    expect(dialog).to_be_hidden()
    expect(api.locator(".task-owner")).to_contain_text("负责人")
    assert task(room_server, project, "api")["owner"]["handle"] == "lead"

    # Cancelling needs a reason; the server's answer comes back on the card.
    ops = tasks.locator('.task-card[data-key="ops"]')
    ops.get_by_role("button", name="取消任务").click()
    dialog = page.get_by_role("dialog", name="取消任务：任务 ops")
    dialog.get_by_role("button", name="取消任务").click()
    expect(dialog.get_by_role("alert")).to_have_text("请填写理由")
    dialog.get_by_label("理由").fill("不再需要部署")
    dialog.get_by_role("button", name="取消任务").click()
    expect(ops.locator(".state-badge")).to_have_text("已取消")
    expect(ops.locator(".task-action-buttons button")).to_have_text(["重新打开"])
    screenshot(page, "task-cards-actions")


def test_a_plan_first_plan_is_started_from_the_board(
    owner: Person, room_server: RoomServer
) -> None:
    project = room_server.create_project("计划优先", TEAM)
    base = f"/api/projects/{project}"
    items = [{"key": "api", "title": "写接口", "owner": "owner", "acceptance": ["能用"]}]
    room_server.post(f"{base}/plan", {"goal": "做完", "items": items, "start": False}, 201)
    page = owner.page
    owner.open_project(project)
    expect(page.locator(".notice", has_text="计划优先模式")).to_contain_text("任务看板上开始")
    tasks = open_tasks(page)
    card = tasks.locator('.task-card[data-key="api"]')
    expect(card.locator(".task-held")).to_have_text("计划未开始")
    expect(card.locator(".task-action-buttons button")).to_have_text(["取消任务"])  # no 开始 yet
    bar = tasks.locator(".plan-start-bar")
    expect(bar).to_contain_text("计划优先")
    bar.get_by_role("button", name="开始计划").click()  # the button the notice points at
    expect(bar).to_have_count(0)
    expect(card.locator(".task-held")).to_have_count(0)
    expect(card.locator(".task-action-buttons button")).to_have_text(["开始", "取消任务"])
    assert task(room_server, project, "api")["held"] is False
