"""Tasks by hand in the page (issue 30, item 4): a person creates a task, sees the server's
refusals under the fields they concern, edits it, sets a dependency (a cycle is refused under
the dependency field), reorders the list, and drags cards on the board — a move the rules allow
and one they refuse, shown in words. At 1440 and 600 px. Real server, real Chromium."""

# The fixtures chromium, room_server and owner are imported from tests/support/browser.py and
# used as test arguments, which linters read as unused imports redefined.
# ruff: noqa: F401, F811

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Locator, Page, expect

from tests.support.browser import (
    Person,
    RoomServer,
    chromium,
    layout_problems,
    owner,
    room_server,
    screenshot,
)

pytestmark = pytest.mark.browser

TEAM = [
    {"role": "lead", "handle": "lead", "display_name": "负责人"},
    {"role": "backend", "handle": "be", "display_name": "后端"},
]


def open_tasks(page: Page) -> Locator:
    page.get_by_role("tab", name="任务").click()
    return page.get_by_role("tabpanel", name="任务")


def task(room_server: RoomServer, project: int, key: str) -> dict[str, Any]:
    return dict(room_server.get(f"/api/projects/{project}/tasks/{key}")["task"])


def test_create_edit_depend_reorder_and_drag_on_the_board(
    owner: Person, room_server: RoomServer
) -> None:
    project = room_server.create_project("手动任务看板", TEAM)
    page = owner.page
    for status in ("400", "403", "409"):  # the refusals this test provokes, as Chromium logs them
        owner.allow(f"status of {status}")
    owner.open_project(project)
    panel = open_tasks(page)

    # Create: the server's problems appear under their fields, nothing is stored.
    panel.get_by_role("button", name="新建任务").click()
    form = page.get_by_role("dialog", name="新建任务")
    form.get_by_label("任务 key（可选）").fill("Bad Key")
    form.get_by_role("button", name="创建").click()
    expect(form.locator('[data-error-for="key"]')).to_be_visible()
    expect(form.locator('[data-error-for="title"]')).to_be_visible()
    expect(form.locator('[data-error-for="acceptance"]')).to_contain_text("验收标准")
    screenshot(page, "task-form-errors-1440")
    form.get_by_label("任务 key（可选）").fill("api")
    form.get_by_label("标题").fill("写接口")
    form.get_by_label("负责人").select_option("owner")
    form.get_by_label("验收标准").fill("返回列表\n错误时返回 400")
    form.get_by_role("button", name="创建").click()
    expect(form).to_be_hidden()
    api = panel.locator('.task-card[data-key="api"]')
    expect(api.locator(".state-badge")).to_have_text("可开始")

    # A second task, depending on the first: it waits.
    panel.get_by_role("button", name="新建任务").click()
    form = page.get_by_role("dialog", name="新建任务")
    form.get_by_label("标题").fill("写页面")
    form.get_by_label("负责人").select_option("be")
    form.get_by_label("验收标准").fill("页面显示列表")
    form.get_by_label("api — 写接口").check()
    form.get_by_role("button", name="创建").click()
    expect(form).to_be_hidden()
    ui = panel.locator('.task-card[data-key="task-2"]')
    expect(ui.locator(".state-badge")).to_have_text("等待依赖")
    assert task(room_server, project, "task-2")["depends_on"] == ["api"]

    # Edit: a cycle is refused under the dependency field; the title change goes through.
    api.get_by_role("button", name="编辑").click()
    form = page.get_by_role("dialog", name="编辑任务 api")
    form.get_by_label("标题").fill("写列表接口")
    form.get_by_label("task-2 — 写页面").check()
    form.get_by_role("button", name="保存").click()
    expect(form.locator('[data-error-for="depends_on"]')).to_contain_text("依赖形成环")
    page.set_viewport_size({"width": 600, "height": 900})
    screenshot(page, "task-form-cycle-600")
    assert layout_problems(page) == []
    page.set_viewport_size({"width": 1440, "height": 900})
    assert task(room_server, project, "api")["title"] == "写接口"  # nothing changed
    form.get_by_label("task-2 — 写页面").uncheck()
    form.get_by_role("button", name="保存").click()
    expect(form).to_be_hidden()
    expect(api.locator(".task-title")).to_have_text("写列表接口")
    # Dates (the owner's), through the same form; shown on the card.
    api.get_by_role("button", name="编辑").click()
    form = page.get_by_role("dialog", name="编辑任务 api")
    form.get_by_label("预计开始").fill("2030-01-02")
    form.get_by_label("预计结束").fill("2030-01-01")
    form.get_by_role("button", name="保存").click()
    expect(form.locator('[data-error-for="est_end"]')).to_contain_text("预计结束早于开始")
    form.get_by_label("预计结束").fill("2030-01-05")
    form.get_by_role("button", name="保存").click()
    expect(form).to_be_hidden()
    expect(api.locator(".task-dates")).to_have_text("预计 2030-01-02 → 2030-01-05")

    # Reorder: task-2 up.
    ui.get_by_role("button", name="把 task-2 上移").click()
    expect(panel.locator(".task-card")).to_have_count(2)
    expect(panel.locator(".task-card").first).to_have_attribute("data-key", "task-2")

    # The board: a column per state; an allowed drag moves, a refused one says why.
    panel.get_by_role("button", name="看板").click()
    board = page.get_by_role("dialog", name="任务看板")
    ready = board.locator('.board-column[data-state="ready"]')
    waiting = board.locator('.board-column[data-state="waiting"]')
    doing = board.locator('.board-column[data-state="in_progress"]')
    expect(ready.locator('.board-card[data-key="api"]')).to_be_visible()
    ready.locator('.board-card[data-key="api"]').drag_to(doing)
    expect(board.locator(".board-ok")).to_have_text("api 已移到「进行中」")
    expect(doing.locator('.board-card[data-key="api"]')).to_be_visible()
    assert task(room_server, project, "api")["state"] == "in_progress"

    waiting.locator('.board-card[data-key="task-2"]').drag_to(doing)
    expect(board.locator(".board-refusal")).to_have_text(
        "task-2 不能从「等待依赖」移到「进行中」；可以移到：已取消"
    )
    assert task(room_server, project, "task-2")["state"] == "waiting"
    expect(board.locator(".board-status")).to_have_text(
        "task-2 不能从「等待依赖」移到「进行中」；可以移到：已取消"
    )  # the refusal and nothing else
    screenshot(page, "task-board-refused-1440")
    assert layout_problems(page) == []

    # Cancelling (with the card's menu, the keyboard's way) asks for a reason first (the
    # server's note_required), then moves.
    board.get_by_label("把 task-2 移到").select_option("cancelled")
    expect(board.locator(".board-refusal")).to_have_text("task-2 移到「已取消」需要填写理由")
    board.get_by_label("理由").fill("先不做页面")
    board.get_by_role("button", name="填写理由后移到「已取消」").click()
    expect(board.locator(".board-ok")).to_have_text("task-2 已移到「已取消」")
    assert task(room_server, project, "task-2")["note"] == "先不做页面"

    # In English the refusal is in English words (the server's codes, the page's labels).
    board.get_by_role("button", name="关闭").click()
    page.get_by_role("button", name="English").click()
    panel = page.get_by_role("tabpanel", name="Tasks")
    panel.get_by_role("button", name="Board").click()
    board = page.get_by_role("dialog", name="Task board")
    doing = board.locator('.board-column[data-state="in_progress"]')
    doing.locator('.board-card[data-key="api"]').drag_to(
        board.locator('.board-column[data-state="ready"]')
    )
    expect(board.locator(".board-refusal")).to_have_text(
        "api cannot move from “In progress” to “Ready”; it can move to: In review, Blocked, Cancelled"
    )
    screenshot(page, "task-board-refused-en-1440")

    # 600 px: the columns scroll inside the dialog; the page itself does not.
    page.set_viewport_size({"width": 600, "height": 900})
    expect(board.locator(".board-column")).to_have_count(10)
    screenshot(page, "task-board-600")
    assert layout_problems(page) == []


def keys_in(room_server: RoomServer, project: int) -> list[str]:
    return [t["key"] for t in room_server.get(f"/api/projects/{project}/tasks")["tasks"]]


def test_reorder_within_a_board_column(owner: Person, room_server: RoomServer) -> None:
    """Dropping a card on another card of its column asks the server for the new order; ↑ ↓ on
    the card are the keyboard's way (focus stays on the card); a board that missed a new task
    is refused (bad_order) in words, naming the task, and reloads."""
    project = room_server.create_project("看板排序")
    for title in ("甲", "乙", "丙"):
        room_server.post(
            f"/api/projects/{project}/tasks",
            {"title": title, "owner": "owner", "acceptance": ["能用"]},
            201,
        )
    assert keys_in(room_server, project) == ["task-1", "task-2", "task-3"]
    page = owner.page
    owner.allow("status of 400")  # the refused order, as Chromium logs it
    owner.open_project(project)
    panel = open_tasks(page)
    panel.get_by_role("button", name="看板").click()
    board = page.get_by_role("dialog", name="任务看板")
    ready = board.locator('.board-column[data-state="ready"]')
    cards = ready.locator(".board-card")
    expect(cards).to_have_count(3)

    # Up the column: task-3 takes task-1's place.
    cards.nth(2).drag_to(cards.nth(0))
    expect(board.locator(".board-ok")).to_have_text("task-3 现在是「可开始」的第 1 张（共 3 张）")
    assert keys_in(room_server, project) == ["task-3", "task-1", "task-2"]
    expect(cards.nth(0)).to_have_attribute("data-key", "task-3")
    # Down the column: task-3 takes task-2's place (after it).
    cards.nth(0).drag_to(cards.nth(2))
    expect(board.locator(".board-ok")).to_have_text("task-3 现在是「可开始」的第 3 张（共 3 张）")
    assert keys_in(room_server, project) == ["task-1", "task-2", "task-3"]

    # The keyboard: ↓ on task-1, twice with Enter; the focus stays on task-1's arrows.
    down = board.get_by_role("button", name="把 task-1 下移")
    down.focus()
    page.keyboard.press("Enter")
    expect(board.locator(".board-ok")).to_contain_text("task-1 现在是「可开始」的第 2 张")
    assert keys_in(room_server, project) == ["task-2", "task-1", "task-3"]
    expect(board.get_by_role("button", name="把 task-1 下移")).to_be_focused()
    page.keyboard.press("Enter")
    expect(board.locator(".board-ok")).to_contain_text("task-1 现在是「可开始」的第 3 张")
    expect(board.get_by_role("button", name="把 task-1 上移")).to_be_focused()  # ↓ is off
    expect(board.get_by_role("button", name="把 task-1 下移")).to_be_disabled()
    assert keys_in(room_server, project) == ["task-2", "task-3", "task-1"]

    # Someone adds a task the open board has not seen: the server refuses the order, in words.
    room_server.post(
        f"/api/projects/{project}/tasks",
        {"key": "late", "title": "丁", "owner": "owner", "acceptance": ["能用"]},
        201,
    )
    cards.nth(2).drag_to(cards.nth(0))
    expect(board.locator(".board-refusal")).to_have_text(
        "task-1 没有重新排序：顺序必须恰好列出每个任务一次；看板少了 late（有人刚改过任务，已重新载入）"
    )
    assert keys_in(room_server, project) == ["task-2", "task-3", "task-1", "late"]
    expect(cards).to_have_count(4)  # reloaded: the next try has every task
    cards.nth(3).drag_to(cards.nth(0))
    expect(board.locator(".board-ok")).to_have_text("late 现在是「可开始」的第 1 张（共 4 张）")
    assert keys_in(room_server, project) == ["late", "task-2", "task-3", "task-1"]
    assert layout_problems(page) == []
    screenshot(page, "task-board-reorder-1440")
