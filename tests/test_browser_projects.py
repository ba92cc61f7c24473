"""The projects column (进行中 / 已归档 / 回收站) and the create-project dialog: name, workspace,
goal, initial members by role and a model for each from the routes the server reports."""

# The fixtures chromium, room_server and owner are imported from tests/support/browser.py and
# used as test arguments, which linters read as unused imports redefined.
# ruff: noqa: F401, F811

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from playwright.sync_api import Browser, expect

from tests.support.browser import (
    Person,
    RoomServer,
    chromium,
    layout_problems,
    owner,
    room_server,
    screenshot,
    sign_in_owner,
)

pytestmark = pytest.mark.browser


def test_projects_are_grouped_by_state(owner: Person, room_server: RoomServer) -> None:
    active = room_server.create_project("进行中的项目")
    archived = room_server.create_project("已经归档的项目")
    trashed = room_server.create_project("放进回收站的项目")
    room_server.post(f"/api/projects/{archived}/lifecycle", {"op": "archive"})
    room_server.post(f"/api/projects/{trashed}/lifecycle", {"op": "trash"})
    owner.open_project(active)
    page = owner.page
    groups = page.locator(".project-group")
    expect(groups.locator("summary")).to_have_text(
        [re.compile("进行中"), re.compile("已归档"), re.compile("回收站")]
    )
    expect(
        page.locator('.project-group[data-group="active"] .project-link', has_text="进行中的项目")
    ).to_be_visible()
    archive = page.locator('.project-group[data-group="archived"]')
    expect(archive).not_to_have_attribute("open", "")  # collapsed unless the open project is in it
    expect(archive.locator(".count")).to_have_text("1")
    archive.locator("summary").click()
    link = archive.locator(".project-link", has_text="已经归档的项目")
    expect(link.locator(".state-badge")).to_have_text("已归档")
    trash = page.locator('.project-group[data-group="trash"]')
    trash.locator("summary").click()
    expect(
        trash.locator(".project-link", has_text="放进回收站的项目").locator(".state-badge")
    ).to_have_text("回收站")
    link.click()
    expect(page.locator("#room-title")).to_have_text("已经归档的项目")
    expect(page.locator("#draft")).to_be_disabled()
    expect(archive).to_have_attribute("open", "")


def test_create_project_with_members_and_models(
    owner: Person, room_server: RoomServer, tmp_path: Path
) -> None:
    workspace = tmp_path / "settings"  # outside the server's data folder
    workspace.mkdir()
    page = owner.page
    page.get_by_role("button", name="新建项目").click()
    dialog = page.get_by_role("dialog", name="新建项目")
    expect(dialog.get_by_label("项目名称")).to_be_focused()
    dialog.get_by_label("项目名称").fill("设置页迁移")
    dialog.get_by_label("工作区文件夹").fill(str(workspace))
    dialog.get_by_label("总体目标").fill("把设置页迁移到新组件库，不改变现有行为。")
    project_model = dialog.get_by_label("项目默认模型")
    expect(project_model.locator("option", has_text="builtin/echo")).to_have_count(1)
    project_model.select_option("builtin/echo")

    expect(dialog.get_by_label("加入负责人")).to_be_checked()
    expect(dialog.get_by_label("前端的模型")).to_be_disabled()  # not included yet
    dialog.get_by_label("加入前端").check()
    dialog.get_by_label("前端的模型").select_option("builtin/echo")
    dialog.get_by_label("加入测试").check()
    dialog.get_by_label("测试的用户名").fill("qa")
    dialog.get_by_label("测试的显示名称").fill("测试同学")
    assert layout_problems(page) == []
    screenshot(page, "projects-create-dialog")
    dialog.get_by_role("button", name="创建项目").click()

    expect(dialog).to_be_hidden()
    expect(page.locator("#room-title")).to_have_text("设置页迁移")
    expect(page.locator("#room-goal")).to_have_text("把设置页迁移到新组件库，不改变现有行为。")
    found = re.search(r"#/p/(\d+)", page.url)
    assert found is not None, page.url
    project = int(found.group(1))
    members = page.locator("#tab-members .member-list[aria-label='AI 成员'] .name")
    expect(members).to_have_text(["负责人", "前端", "测试同学"])

    wire = next(p for p in room_server.get("/api/me")["projects"] if p["id"] == project)
    assert (wire["workspace"]["path"], wire["workspace"]["default"], wire["goal"]) == (
        str(workspace.resolve()),
        False,
        "把设置页迁移到新组件库，不改变现有行为。",
    )
    by_handle = room_server.members(project)
    settings = {
        (s["scope"], s["target"]): s["value"]
        for s in room_server.get(f"/api/projects/{project}/routes")["settings"]
    }
    assert settings == {
        ("project", ""): "builtin/echo",
        ("member", str(by_handle["frontend"]["id"])): "builtin/echo",
    }
    fe = room_server.get(f"/api/projects/{project}/members/{by_handle['frontend']['id']}")
    qa = room_server.get(f"/api/projects/{project}/members/{by_handle['qa']['id']}")
    assert (fe["route"]["label"], qa["route"]["label"]) == ("成员固定", "项目默认")


def test_create_project_errors_stay_in_the_dialog(
    chromium: Browser, room_server: RoomServer
) -> None:
    room_server.create_project("已经存在的名字")
    person = sign_in_owner(chromium, room_server, width=600, height=900)
    try:
        page = person.page
        person.allow(r"Failed to load resource: .* 409")
        page.locator("#open-projects").click()
        page.get_by_role("button", name="新建项目").click()
        dialog = page.get_by_role("dialog", name="新建项目")
        dialog.get_by_role("button", name="创建项目").click()
        expect(dialog.get_by_role("alert")).to_have_text("请填写项目名称")
        dialog.get_by_label("项目名称").fill("已经存在的名字")
        dialog.get_by_role("button", name="创建项目").click()
        expect(dialog.get_by_role("alert")).to_have_text("已经有一个名为「已经存在的名字」的项目")
        # A refused workspace: the server's code, in the interface language.
        person.allow(r"Failed to load resource: .* 400")
        dialog.get_by_label("项目名称").fill("工作区被拒绝")
        dialog.get_by_label("工作区文件夹").fill("work/app")
        dialog.get_by_role("button", name="创建项目").click()
        expect(dialog.get_by_role("alert")).to_have_text("工作区须是绝对路径，例如 /srv/work/app")
        dialog.get_by_label("工作区文件夹").fill("/no/such/folder")
        dialog.get_by_role("button", name="创建项目").click()
        expect(dialog.get_by_role("alert")).to_have_text("工作区目录不存在：/no/such/folder")
        assert "工作区被拒绝" not in [p["name"] for p in room_server.get("/api/me")["projects"]]
        dialog.get_by_label("工作区文件夹").fill("")
        dialog.get_by_label("项目名称").fill("已经存在的名字")
        assert layout_problems(page) == []
        screenshot(page, "projects-create-dialog-600")
        page.keyboard.press("Escape")
        expect(dialog).to_be_hidden()
        person.assert_clean()
    finally:
        person.close()


def test_other_projects_show_their_unread_count(owner: Person, room_server: RoomServer) -> None:
    here = room_server.create_project("正在看的项目")
    there = room_server.create_project("有新消息的项目")
    bob = room_server.invite_session(there, "zhaolei", "赵磊")
    owner.open_project(here)
    page = owner.page
    badge = page.locator(f'.project-link[data-project-id="{there}"] .unread-badge')
    expect(badge).to_have_count(0)
    for text in ("第一条", "第二条", "第三条"):
        room_server.say(there, text, session=bob)
    page.evaluate("() => window.dispatchEvent(new Event('focus'))")  # as when coming back
    expect(badge).to_have_text("3")
    expect(badge).to_have_attribute("aria-label", "3 条未读消息")
    screenshot(page, "projects-unread")
    owner.open_project(there)
    expect(badge).to_have_count(0)
    # Having read them, the count stays at zero for the next look too.
    expect(page.locator(".msg", has_text="第三条")).to_be_visible()
    deadline = time.monotonic() + 10
    while True:  # the page sends its read cursor (at most every 250 ms)
        me = room_server.get("/api/me")
        if next(p["unread"] for p in me["projects"] if p["id"] == there) == 0:
            break
        assert time.monotonic() < deadline, "the read cursor never reached the server"
        time.sleep(0.05)
    owner.open_project(here)
    page.evaluate("() => window.dispatchEvent(new Event('focus'))")
    expect(page.locator(f'.project-link[data-project-id="{there}"]')).to_be_visible()
    expect(badge).to_have_count(0)
