"""Members: the avatar menu (right-click, long-press, keyboard), `@ 他` / `@ 自己`, the member
card with the route's source and the observed route, switching model, pause/resume/stop/leave
and status dots; delivery labels for every ledger state, driven by a real external agent."""

# The fixtures chromium, room_server and owner are imported from tests/support/browser.py and
# used as test arguments, which linters read as unused imports redefined.
# ruff: noqa: F401, F811

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect
from websockets.sync.client import ClientConnection, connect

from room.rules.lifecycle import ActorKind, member_ops
from tests.support.browser import (
    Person,
    RoomServer,
    chromium,
    join,
    owner,
    room_server,
    screenshot,
    sign_in_owner,
)

pytestmark = pytest.mark.browser

TEAM = [
    {"role": "lead", "handle": "lead", "display_name": "负责人"},
    {"role": "frontend", "handle": "fe", "display_name": "前端"},
]


SELF_LABELS = {"pause": "暂停", "resume": "恢复", "stop": "停止当前工作", "leave": "离开项目"}


def menu_items(page: Page) -> list[str]:
    return page.get_by_role("menu").locator(".menu-label").all_inner_texts()


def test_avatar_menu_by_mouse_touch_and_keyboard(owner: Person, room_server: RoomServer) -> None:
    project = room_server.create_project("头像菜单", TEAM)
    room_server.say(project, "@fe 看一下")
    owner.open_project(project)
    page = owner.page
    box = page.locator("#draft")
    box.fill("草稿还在")

    # Right-click the avatar of an AI member's message.
    avatar = page.locator(".msg .avatar[data-member-id]").first
    expect(avatar).to_be_visible()
    avatar.click(button="right")
    assert menu_items(page) == [
        "@ 他",
        "查看成员",
        "查看 / 切换模型",
        "当前任务",
        "暂停",
        "停止当前工作",
        "移出项目",
    ]
    screenshot(page, "members-avatar-menu")
    page.get_by_role("menuitem", name="@ 他").click()
    expect(box).to_have_value("草稿还在 @fe ")  # a chip-backed mention; the draft stays
    expect(page.locator("#recipients .chip-text")).to_have_text(["前端"])
    expect(page.locator(".msg")).to_have_count(2)  # nothing was sent
    assert len(room_server.messages(project)) == 2

    # Keyboard: Shift+F10 on an avatar in the member list; arrows move; Esc returns focus.
    own = page.locator(
        f'#tab-members .avatar[data-member-id="{room_server.members(project)["owner"]["id"]}"]'
    )
    own.focus()
    page.keyboard.press("Shift+F10")
    first = page.get_by_role("menuitem", name="@ 自己")
    expect(first).to_be_focused()
    page.keyboard.press("ArrowDown")
    expect(page.get_by_role("menuitem", name="查看成员")).to_be_focused()
    page.keyboard.press("Escape")
    expect(page.get_by_role("menu")).to_have_count(0)
    expect(own).to_be_focused()
    page.keyboard.press("Enter")  # a plain click/Enter opens it too
    expect(page.get_by_role("menuitem", name="@ 自己")).to_be_focused()
    page.keyboard.press("Enter")
    expect(box).to_have_value("草稿还在 @fe @owner ")
    expect(page.locator("#diagnostics")).to_contain_text("不能提及自己")


def test_long_press_opens_the_menu(chromium: Browser, room_server: RoomServer) -> None:
    project = room_server.create_project("长按", TEAM)
    person = sign_in_owner(
        chromium, room_server, width=600, height=900, has_touch=True, is_mobile=True
    )
    try:
        person.open_project(project)
        page = person.page
        row_avatar = page.locator("#member-stack .avatar").first
        row_avatar.dispatch_event(
            "touchstart", {"touches": [{"identifier": 1, "clientX": 10, "clientY": 10}]}
        )
        page.wait_for_timeout(700)
        expect(page.get_by_role("menu")).to_be_visible()
        person.assert_clean()
    finally:
        person.close()


def test_member_card_shows_where_the_route_comes_from(
    owner: Person, room_server: RoomServer
) -> None:
    project = room_server.create_project("模型来源", TEAM)
    fe = room_server.members(project)["fe"]
    owner.open_project(project)
    page = owner.page

    def open_card() -> Any:
        page.locator(f'#tab-members .member-row[data-member-id="{fe["id"]}"] .member-name').click()
        dialog = page.get_by_role("dialog", name="前端")
        expect(dialog.locator(".route-model")).to_be_visible()
        return dialog

    def route(scope: str, target: str, value: str | None) -> None:
        room_server.post(
            f"/api/projects/{project}/routes",
            {"scope": scope, "target": target, "value": value, "reason": "测试来源"},
        )

    dialog = open_card()
    expect(dialog.locator(".source-tag")).to_have_text("内置离线")
    expect(dialog.locator(".observed")).to_have_text("还没有真实请求")
    dialog.get_by_role("button", name="关闭").click()

    route("project", "", "builtin/echo")
    dialog = open_card()
    expect(dialog.locator(".source-tag")).to_have_text("项目默认")
    dialog.get_by_role("button", name="关闭").click()
    route("role", "frontend", "builtin/echo")
    dialog = open_card()
    expect(dialog.locator(".source-tag")).to_have_text("角色默认")
    dialog.get_by_role("button", name="关闭").click()
    route("pool", "", json.dumps({"models": ["builtin/echo"], "enabled": True}))
    route("pool_pick", str(fe["id"]), "builtin/echo")
    dialog = open_card()
    expect(dialog.locator(".source-tag")).to_have_text("允许池")
    expect(dialog).to_contain_text("测试来源")  # the pick's public reason

    # Switch model from the card: a member lock, with a public reason.
    select = dialog.locator(f"#route-member-{fe['id']}")
    select.select_option("builtin/echo")
    dialog.get_by_role("button", name="保存").click()
    expect(dialog.get_by_role("textbox", name="理由")).to_be_focused()  # a reason is required
    dialog.get_by_role("textbox", name="理由").fill("前端固定用回显")
    dialog.get_by_role("button", name="保存").click()
    expect(dialog.locator(".source-tag")).to_have_text("成员固定")
    dialog.get_by_role("button", name="关闭").click()
    expect(page.locator(".notice-route").last).to_contain_text("前端固定用回显")

    # After a real request the observed route is shown.
    page.locator("#draft").fill("@fe 你好")
    page.locator("#draft").press("Enter")
    expect(page.locator(".msg", has_text="收到")).to_be_visible()
    dialog = open_card()
    expect(dialog.locator(".observed")).to_contain_text("builtin/echo")
    expect(dialog.locator("[data-running]")).to_have_text("空闲")
    screenshot(page, "members-card")


def test_member_card_shows_tools_access_and_sandbox_when_the_server_says(
    owner: Person, room_server: RoomServer
) -> None:
    project = room_server.create_project("工具与沙箱", TEAM)
    fe = room_server.members(project)["fe"]
    owner.open_project(project)
    page = owner.page
    row = page.locator(f'#tab-members .member-row[data-member-id="{fe["id"]}"] .member-name')
    row.click()
    dialog = page.get_by_role("dialog", name="前端")
    expect(dialog.locator(".route-model")).to_be_visible()
    # What the server says of a frontend agent on this machine: it may write and run commands,
    # and its commands run in the sandbox (scripts/test installs bubblewrap).
    expect(dialog.locator(".card-tools code", has_text="shell")).to_be_visible()
    expect(dialog.locator(".card-tools code", has_text="fs_write")).to_be_visible()
    expect(dialog.locator(".card-access")).to_have_attribute("data-read-only", "false")
    expect(dialog.locator(".card-sandbox")).to_have_attribute("data-sandboxed", "true")
    dialog.get_by_role("button", name="关闭").click()

    # A read-only member whose commands would not be isolated (real answer, fields changed).
    def with_fields(route: Any) -> None:
        answer = route.fetch().json()
        answer["member"].update(tools=["fs_read", "fs_list"], read_only=True, sandboxed=False)
        route.fulfill(json=answer)

    page.route(re.compile(rf".*/api/projects/{project}/members/{fe['id']}$"), with_fields)
    row.click()
    dialog = page.get_by_role("dialog", name="前端")
    expect(dialog.locator(".card-tools code")).to_have_text(["fs_read", "fs_list"])
    expect(dialog.locator(".card-access")).to_have_text("只读：没有写文件和运行命令的工具")
    expect(dialog.locator(".card-sandbox")).to_have_text("未隔离")
    screenshot(page, "members-card-tools")


def test_pause_resume_stop_leave_and_status_dots(owner: Person, room_server: RoomServer) -> None:
    project = room_server.create_project("成员操作", TEAM)
    fe = room_server.members(project)["fe"]
    owner.open_project(project)
    page = owner.page
    row = page.locator(f'#tab-members .member-row[data-member-id="{fe["id"]}"]')
    dot = row.locator(".status-dot")
    expect(dot).to_have_class(re.compile("presence-idle"))  # here and ready (issue 14)

    def menu(name: str) -> None:
        row.locator(".avatar").click()
        page.get_by_role("menuitem", name=name).click()

    menu("暂停")
    expect(dot).to_have_class(re.compile("presence-paused"))
    expect(row.locator(".status-text")).to_have_text("已暂停")
    expect(page.locator(".notice-member").last).to_contain_text("暂停了 @fe")
    menu("恢复")
    expect(dot).to_have_class(re.compile("presence-idle"))
    menu("停止当前工作")
    page.get_by_role("dialog").get_by_role("button", name="停止当前工作").click()
    expect(page.locator(".notice-member").last).to_contain_text("停止了当前工作")
    menu("移出项目")
    page.get_by_role("dialog").get_by_role("button", name="移出项目").click()
    departed = page.locator("#tab-members .member-list[aria-label=已离开]")
    expect(departed.locator(f'[data-member-id="{fe["id"]}"] .status-text')).to_have_text("已离开")
    expect(departed.locator(".status-dot")).to_have_class(re.compile("presence-left"))
    row.locator(".avatar").click()
    # Nothing is offered on a member who left: the server's allowed_ops are empty.
    expect(page.get_by_role("menuitem", name="@ 他")).to_be_disabled()
    expect(page.get_by_role("menuitem", name="暂停")).to_have_count(0)
    expect(page.get_by_role("menuitem", name="移出项目")).to_have_count(0)


def test_a_person_may_leave_but_not_act_on_others(
    chromium: Browser, room_server: RoomServer
) -> None:
    """A person without the owner role is offered `leave` on themself (with whatever else the
    server's allowed_ops give a person on themself) and nothing on anyone else: an agent's
    pause/resume/stop and removing others are an owner's."""
    project = room_server.create_project("自己的操作", TEAM)
    person = join(chromium, room_server, project, "sunli", "孙立")
    try:
        page = person.page
        expect(page.locator("#room-title")).to_have_text("自己的操作")
        members = room_server.members(project)

        def menu_of(handle: str) -> list[str]:
            page.locator(f'#tab-members .avatar[data-member-id="{members[handle]["id"]}"]').click()
            items = menu_items(page)
            page.keyboard.press("Escape")
            return items

        # Their own row: exactly the server's ops for a person on themself, ending in leave.
        own = member_ops("active", "active", "human", ActorKind.MEMBER, is_self=True)
        assert own[-1] == "leave" and "stop" not in own, own
        assert menu_of("sunli") == ["@ 自己", "查看成员", *(SELF_LABELS[op] for op in own)]
        assert menu_of("fe") == ["@ 他", "查看成员", "查看 / 切换模型", "当前任务"]
        assert menu_of("owner") == ["@ 他", "查看成员"]
        room_server.post(f"/api/projects/{project}/members/{members['fe']['id']}/pause", {})
        row = page.locator(f'#tab-members .member-row[data-member-id="{members["fe"]["id"]}"]')
        expect(row.locator(".status-text")).to_have_text("已暂停")
        assert "恢复" not in menu_of("fe")  # nor resume: pausing is not theirs either

        page.locator(f'#tab-members .avatar[data-member-id="{members["sunli"]["id"]}"]').click()
        page.get_by_role("menuitem", name="离开项目").click()
        page.get_by_role("dialog").get_by_role("button", name="离开项目").click()
        expect(page.locator(".toast", has_text="你已离开项目「自己的操作」")).to_be_visible()
        expect(page.locator(f'.project-link[data-project-id="{project}"]')).to_have_count(0)
        assert room_server.members(project)["sunli"]["status"] == "left"
        person.assert_clean()
    finally:
        person.close()


# -- delivery labels -----------------------------------------------------------------------------


@contextmanager
def agent_socket(
    room_server: RoomServer, project_name: str, handle: str
) -> Iterator[ClientConnection]:
    token = room_server.server.agent_token(project_name, handle)
    with connect(
        room_server.server.ws_url,
        additional_headers={"Authorization": f"Bearer {token}"},
        open_timeout=5,
    ) as ws:
        yield ws


def next_inbox(ws: ClientConnection) -> list[dict[str, Any]]:
    while True:
        frame = json.loads(ws.recv(timeout=5))
        if frame["type"] == "inbox" and frame["deliveries"]:
            return list(frame["deliveries"])


def label(page: Page, text: str) -> Any:
    return page.locator(".msg.mine", has_text=text).locator(".delivery-summary .delivery-state")


def test_delivery_labels_follow_the_ledger(owner: Person, room_server: RoomServer) -> None:
    name = "送达标签"
    project = room_server.create_project(name, TEAM)
    room_server.post(
        f"/api/projects/{project}/members",
        {"role": "backend", "handle": "ext", "display_name": "外部助手", "driver": "external"},
        201,
    )
    members = room_server.members(project)
    owner.open_project(project)
    page = owner.page

    def say(text: str) -> None:
        page.locator("#draft").fill(text)
        page.locator("#draft").press("Enter")
        expect(page.locator(".msg.mine", has_text=text)).not_to_have_class(re.compile("pending"))

    say("@ext 第一件事")
    expect(label(page, "第一件事")).to_have_text("排队中，尚未送达")
    with agent_socket(room_server, name, "ext") as ws:
        [first] = next_inbox(ws)
        ws.send(json.dumps({"type": "received", "delivery_ids": [first["delivery_id"]]}))
        expect(label(page, "第一件事")).to_have_text("已送达，尚未确认取用")
        ws.send(
            json.dumps({"type": "consume", "delivery_ids": [first["delivery_id"]], "mode": "queue"})
        )
        expect(label(page, "第一件事")).to_have_text("对方本轮已取用")
        say("@ext 第二件事")
        next_inbox(ws)  # handed to this socket, which closes before confirming
    expect(label(page, "第二件事")).to_have_text("无法确认是否送达，正在核对")

    room_server.post(f"/api/projects/{project}/members/{members['ext']['id']}/pause", {})
    say("@ext 第三件事")
    expect(label(page, "第三件事")).to_have_text("暂停中，恢复后送达")
    room_server.post(
        f"/api/projects/{project}/routes",
        {
            "scope": "member",
            "target": str(members["fe"]["id"]),
            "value": "openai/missing",
            "reason": "无此提供方",
        },
    )
    say("@fe 第四件事")
    # provider_error, with what the provider said (which model) after the translation
    expect(label(page, "第四件事")).to_have_text(re.compile(r"^未能送达：模型服务出错（.*openai"))

    # Two recipients: one line each; the details list every row.
    say("@lead @fe 第五件事")
    states = page.locator(".msg.mine", has_text="第五件事").locator(
        ".delivery-summary .delivery-item"
    )
    expect(states).to_have_count(2)
    expect(
        page.locator(".msg.mine", has_text="第五件事")
        .locator(".delivery-item[data-recipient]")
        .first
    ).to_contain_text("@lead")

    # Deleting cancels what was not handed over yet.
    third = page.locator(".msg.mine", has_text="第三件事")
    third.hover()
    third.get_by_role("button", name="删除").click()
    page.get_by_role("dialog").get_by_role("button", name="删除").click()
    # The row's reason_code (message_deleted) in the interface language, not the server's words.
    expect(page.locator(".msg.deleted .delivery-summary .delivery-state")).to_have_text(
        "已取消：消息已删除"
    )
    screenshot(page, "members-delivery-labels")


def test_a_cancelled_delivery_says_why_in_the_interface_language(
    owner: Person, room_server: RoomServer
) -> None:
    """A real cancellation: a message to a paused agent is held, the agent is removed, and the
    row is cancelled with reason_code ``recipient_left``. The label is the page's translation of
    the code (web/strings-zh.js, web/strings-en.js); without it the page would show the server's
    free text ("recipient left") instead."""
    project = room_server.create_project("取消原因", TEAM)
    fe = room_server.members(project)["fe"]["id"]
    room_server.post(f"/api/projects/{project}/members/{fe}/pause", {})
    sent = room_server.say(project, "@fe 这件事先放着")
    owner.open_project(project)
    page = owner.page
    state = page.locator(".msg", has_text="这件事先放着").locator(
        ".delivery-summary .delivery-state"
    )
    expect(state).to_have_text("暂停中，恢复后送达")
    room_server.post(f"/api/projects/{project}/members/{fe}/leave", {})
    [row] = room_server.get(f"/api/messages/{sent['message_id']}")["deliveries"]
    assert (row["state"], row["reason_code"]) == ("cancelled", "recipient_left"), row
    expect(state).to_have_text("已取消：对方已离开项目")
    screenshot(page, "members-delivery-cancelled")
    page.locator("#lang-toggle").click()
    expect(state).to_have_text("Cancelled: the recipient left")
