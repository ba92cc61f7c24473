"""The streamed partial answer on the page (issue 28; docs/protocol.md, "Drafts"): real Chromium,
a real server whose OpenAI-compatible provider is a local server streaming slowly. While the lead
answers, a preview under the timeline grows; when the answer is posted the preview is gone and
the answer is in the timeline once."""

# ruff: noqa: F401, F811

from __future__ import annotations

from collections.abc import Iterator

import pytest
from playwright.sync_api import expect

from tests.support.browser import (
    Person,
    RoomServer,
    chromium,
    owner,
    screenshot,
)
from tests.support.llm_servers import TEST_API_KEY, OpenAIServer, Reply, openai_text
from tests.support.server import start_with_openai

ANSWER = "部署分三步：先备份数据库，再停掉旧服务，最后启动新版本并检查健康接口是否正常。" * 2


@pytest.fixture(scope="module")
def llm() -> Iterator[OpenAIServer]:
    with OpenAIServer(api_key=TEST_API_KEY) as server:
        yield server


@pytest.fixture(scope="module")
def room_server(
    tmp_path_factory: pytest.TempPathFactory, llm: OpenAIServer
) -> Iterator[RoomServer]:
    server = start_with_openai(tmp_path_factory.mktemp("room") / "data", llm)
    try:
        yield RoomServer(server)
    finally:
        server.stop()


def test_the_answer_grows_under_the_timeline_and_is_posted_once(
    owner: Person, room_server: RoomServer, llm: OpenAIServer
) -> None:
    project = room_server.create_project(
        "流式回答", agents=[{"handle": "lead", "role": "lead", "display_name": "负责人"}]
    )
    lead = room_server.members(project)["lead"]
    room_server.post(
        f"/api/projects/{project}/routes",
        {"scope": "member", "target": str(lead["id"]), "value": "openai/gpt-test",
         "reason": "测试使用本地模型"},
    )  # fmt: skip
    owner.open_project(project)
    page = owner.page
    llm.push(Reply(body=openai_text(ANSWER).body, chunk_delay_secs=0.15))
    room_server.say(project, "@lead 写一份部署说明")
    preview = page.locator(f'#drafts .draft[data-member-id="{lead["id"]}"]')
    expect(preview).to_be_visible(timeout=15000)
    expect(preview.locator(".draft-name")).to_have_text("负责人")
    expect(preview.locator(".draft-state")).to_have_text("正在回答…")
    first = preview.locator(".draft-text").inner_text()
    assert first and ANSWER.startswith(first) and first != ANSWER
    # it grows: a longer beginning of the same answer
    page.wait_for_function(
        "n => (document.querySelector('#drafts .draft-text')?.textContent || '').length > n",
        arg=len(first),
    )
    grown = preview.locator(".draft-text").inner_text()
    assert ANSWER.startswith(grown) and len(grown) > len(first)
    screenshot(page, "drafts-streaming")
    # posted: the message is in the timeline once and the preview is gone
    posted = page.locator(".msg-body", has_text=ANSWER[:20])
    expect(posted).to_have_count(1, timeout=20000)
    expect(page.locator("#drafts")).to_be_hidden()
    expect(page.locator("#drafts .draft")).to_have_count(0)
    assert [m["body"] for m in room_server.messages(project) if m["author_id"] == lead["id"]] == [
        ANSWER
    ]
