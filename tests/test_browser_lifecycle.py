"""The project lifecycle menu: pause/resume, archive, trash, restore, the cleanup preview, purge
with the full name typed and a checkbox, and the 停止未确认 state with retry and cancel."""

# The fixtures chromium, room_server and owner are imported from tests/support/browser.py and
# used as test arguments, which linters read as unused imports redefined.
# ruff: noqa: F401, F811

from __future__ import annotations

import json
import re
import time
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, Route, WebSocketRoute, expect

from room.rules.lifecycle import ActorKind, project_ops, project_ops_by_kind
from tests.support.browser import (
    Person,
    RoomServer,
    chromium,
    fulfill_json,
    join,
    owner,
    room_server,
    screenshot,
    sign_in_owner,
)

pytestmark = pytest.mark.browser

TEAM = [{"role": "lead", "handle": "lead", "display_name": "负责人"}]


def lifecycle_menu(page: Page) -> list[str]:
    page.locator("#lifecycle-menu").click()
    return page.get_by_role("menu", name="项目操作").locator(".menu-label").all_inner_texts()


def expect_menu(page: Page, labels: list[str], timeout_secs: float = 8.0) -> None:
    """The project menu offers ``labels``. The menu is built when it opens, from what the page
    knows then: opened before the project and its members have arrived it lacks entries (a
    member's 发起研究…), so it is opened again until it offers them or the time is up."""
    deadline = time.monotonic() + timeout_secs
    while (found := lifecycle_menu(page)) != labels and time.monotonic() < deadline:
        page.keyboard.press("Escape")
        page.wait_for_timeout(100)
    assert found == labels


def group_of(page: Page, project: int) -> str | None:
    link = page.locator(f'.project-link[data-project-id="{project}"]')
    return (
        link.evaluate("el => el.closest('.project-group').dataset.group") if link.count() else None
    )


def test_pause_archive_trash_restore_and_purge(owner: Person, room_server: RoomServer) -> None:
    name = "生命周期演练：Alpha"
    project = room_server.create_project(name, TEAM)
    owner.open_project(project)
    page = owner.page
    banner = page.locator("#room-banner")
    box = page.locator("#draft")

    expect_menu(
        page,
        [
            "发起研究…",
            "暂停项目",
            "归档",
            "标记完成…",
            "放弃项目…",
            "移到回收站",
        ],
    )
    page.get_by_role("menuitem", name="暂停项目").click()
    page.get_by_role("dialog").locator("#lifecycle-reason").fill("等设计稿")
    page.get_by_role("dialog").get_by_role("button", name="暂停项目").click()
    expect(banner).to_contain_text("项目已暂停")
    expect(banner.locator(".banner-reason")).to_have_text("原因：等设计稿")
    expect(page.locator("#room-state")).to_have_text("已暂停")
    expect(page.locator(f'.project-link[data-project-id="{project}"] .state-badge')).to_have_text(
        "已暂停"
    )
    expect(box).to_be_enabled()  # people may still post in a paused project
    expect(page.locator("#composer-note")).to_contain_text("恢复后再送达")
    banner.get_by_role("button", name="恢复项目").click()
    expect(banner).to_be_hidden()

    lifecycle_menu(page)
    page.get_by_role("menuitem", name="归档").click()
    page.get_by_role("dialog").get_by_role("button", name="归档").click()
    expect(banner).to_have_text(re.compile("项目已归档，只读。"))
    assert group_of(page, project) == "archived"
    expect(box).to_be_disabled()
    expect(page.locator("#composer-note")).to_have_text("项目已归档，只读，不能发送消息。")

    # Restoring lands in paused, with a new epoch: the page resubscribes and keeps working.
    banner.get_by_role("button", name="恢复（进入暂停）").click()
    expect(page.locator("#room-state")).to_have_text("已暂停")
    assert group_of(page, project) == "active"
    box.fill("恢复之后的第一条消息")
    box.press("Enter")
    expect(page.locator(".msg", has_text="恢复之后的第一条消息")).to_have_count(1)
    expect(page.locator(".msg.pending")).to_have_count(0)

    lifecycle_menu(page)
    page.get_by_role("menuitem", name="移到回收站").click()
    page.get_by_role("dialog").get_by_role("button", name="移到回收站").click()
    expect(banner).to_contain_text("项目在回收站中")
    assert group_of(page, project) == "trash"
    expect_menu(page, ["恢复（进入暂停）", "清理预览", "彻底清除…"])
    page.get_by_role("menuitem", name="清理预览").click()
    preview = page.get_by_role("dialog", name=f"清理预览：{name}")
    expect(preview.locator(".preview-delete")).to_contain_text("消息、编辑、提及和已读")
    expect(preview.locator(".preview-keep")).to_contain_text("全部审计记录")
    expect(preview.locator(".preview-keep")).to_contain_text("工作区文件夹和源代码")
    preview.get_by_role("button", name="完成").click()

    banner.get_by_role("button", name="彻底清除…").click()
    purge = page.get_by_role("dialog", name="彻底清除项目")
    submit = purge.get_by_role("button", name="彻底清除")
    typed = purge.get_by_label(re.compile("输入项目全名以确认"))
    expect(submit).to_be_disabled()
    typed.fill(name.replace("Alpha", "alpha"))  # exactly the name: no case folding
    purge.get_by_label("我明白这个操作不能撤销").check()
    expect(submit).to_be_disabled()
    typed.fill(name + " ")  # no trimming either
    expect(submit).to_be_disabled()
    typed.fill(name)
    expect(submit).to_be_enabled()
    purge.get_by_label("我明白这个操作不能撤销").uncheck()
    expect(submit).to_be_disabled()
    purge.get_by_label("我明白这个操作不能撤销").check()
    screenshot(page, "lifecycle-purge")
    submit.click()
    expect(page.locator(".toast").last).to_contain_text("已彻底清除")
    expect(page.locator(f'.project-link[data-project-id="{project}"]')).to_have_count(0)
    assert all(p["id"] != project for p in room_server.get("/api/me")["projects"])


class Injector:
    """Routes /ws through Playwright so a test can push a frame to the page."""

    def __init__(self) -> None:
        self.page_side: WebSocketRoute | None = None

    def __call__(self, ws: WebSocketRoute) -> None:
        ws.connect_to_server()
        self.page_side = ws

    def push(self, frame: dict[str, Any]) -> None:
        assert self.page_side is not None
        self.page_side.send(json.dumps(frame, ensure_ascii=False))


def project_frame(project: dict[str, Any]) -> dict[str, Any]:
    """A `project` frame as the server builds it (the ops by viewer kind from its own rules)."""
    bare = {k: v for k, v in project.items() if k != "allowed_ops"}
    return {"type": "project", "project": bare, "allowed_ops": project_ops_by_kind(bare["state"])}


def test_stop_unconfirmed_offers_retry_and_cancel(
    chromium: Browser, room_server: RoomServer
) -> None:
    project = room_server.create_project("停止未确认", TEAM)
    wire = next(p for p in room_server.get("/api/me")["projects"] if p["id"] == project)
    injector = Injector()
    person = sign_in_owner(
        chromium,
        room_server,
        setup=lambda page: page.route_web_socket(re.compile(r".*/ws$"), injector),
    )
    ops: list[str] = []

    # Stubbed on purpose: `stop_unconfirmed` needs a running turn that does not confirm its stop
    # within the server's wait, which a test cannot produce without racing a real turn; so the
    # state is pushed as the server's own `project` frame and retry/cancel are answered here, with
    # the ops the server's rules (room.rules.lifecycle.project_ops) give for the resulting state.
    def lifecycle(route: Route) -> None:
        body = route.request.post_data_json
        assert body is not None
        op = body["op"]
        ops.append(op)
        fulfill_json(
            route,
            {
                "project": {
                    **wire,
                    "state": (state := "active" if op == "cancel_stop" else "archived"),
                    "allowed_ops": project_ops(state, ActorKind.OWNER),
                },
                "outcome": "ok",
            },
        )

    try:
        page = person.page
        page.route(re.compile(rf".*/api/projects/{project}/lifecycle$"), lifecycle)
        person.open_project(project)
        # A stop whose running turns did not confirm (the server announces it with a project frame).
        unconfirmed = {
            **wire,
            "state": "stop_unconfirmed",
            "stop_target": "archived",
            "state_from": "active",
        }
        injector.push(project_frame(unconfirmed))
        banner = page.locator("#room-banner")
        expect(banner).to_contain_text("停止未确认")
        expect(banner).to_contain_text("目标：已归档")
        expect(page.locator("#draft")).to_be_disabled()
        screenshot(page, "lifecycle-stop-unconfirmed")
        expect_menu(page, ["重试检查", "取消，回到原状态"])
        page.keyboard.press("Escape")
        banner.get_by_role("button", name="重试检查").click()
        expect(page.locator("#room-state")).to_have_text("已归档")
        injector.push(project_frame(unconfirmed))
        banner.get_by_role("button", name="取消，回到原状态").click()
        expect(banner).to_be_hidden()
        expect(page.locator("#draft")).to_be_enabled()
        assert ops == ["retry_stop", "cancel_stop"]
        person.assert_clean()
    finally:
        person.close()


def test_the_menu_offers_what_the_server_allows(
    chromium: Browser, owner: Person, room_server: RoomServer
) -> None:
    project = room_server.create_project("按服务器提供", TEAM)
    page = owner.page
    owner.open_project(project)
    expect_menu(
        page,
        [
            "发起研究…",
            "暂停项目",
            "归档",
            "标记完成…",
            "放弃项目…",
            "移到回收站",
        ],
    )
    page.keyboard.press("Escape")

    member = join(chromium, room_server, project, "zhaolei", "赵磊")
    try:
        expect(member.page.locator("#room-title")).to_have_text("按服务器提供")
        # A person without the owner role is offered no lifecycle operation at all (proposing
        # research is for every person of an active project, docs/research.md).
        expect_menu(member.page, ["发起研究…", "只有项目所有者可以操作"])
        member.page.keyboard.press("Escape")
        room_server.post(f"/api/projects/{project}/lifecycle", {"op": "pause"})
        expect(page.locator("#room-state")).to_have_text("已暂停")
        expect_menu(page, ["恢复项目", "归档", "标记完成…", "放弃项目…", "移到回收站"])
        expect(page.locator("#room-banner").get_by_role("button")).to_have_text(["恢复项目"])
        # Paused: people may still post (the server's "post"), the member's menu stays empty.
        expect(member.page.locator("#room-state")).to_have_text("已暂停")
        expect(member.page.locator("#draft")).to_be_enabled()
        expect(member.page.locator("#room-banner").get_by_role("button")).to_have_count(0)
        expect_menu(member.page, ["只有项目所有者可以操作"])
        member.assert_clean()
    finally:
        member.close()


def test_a_person_removed_from_a_project_sees_it_go(
    chromium: Browser, room_server: RoomServer
) -> None:
    project = room_server.create_project("被移出的项目")
    member = join(chromium, room_server, project, "qianmo", "钱默")
    try:
        page = member.page
        expect(page.locator("#room-title")).to_have_text("被移出的项目")
        expect(page.locator("#conn-state")).to_have_attribute("data-status", "open")
        qianmo = room_server.members(project)["qianmo"]["id"]
        room_server.post(f"/api/projects/{project}/members/{qianmo}/leave", {})
        expect(page.locator(".toast", has_text="你已离开项目「被移出的项目」")).to_be_visible()
        expect(page.locator(f'.project-link[data-project-id="{project}"]')).to_have_count(0)
        expect(page.locator("#no-project")).to_be_visible()  # it was their only project
        expect(page.locator("#room-main")).to_be_hidden()
        expect(page.locator(".toast-error")).to_have_count(0)  # no noise from the page's own hints
        screenshot(page, "lifecycle-removed")
        member.assert_clean()
    finally:
        member.close()
