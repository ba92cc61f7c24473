"""Agents receive a message's attachments as references they can read (issue 17, item 1): an
in-process agent sees each file listed in its input with a path its file tools open (a copy in
its working folder under ``.room/attachments/``, which git ignores); an external agent gets them
in its ``inbox`` frame and reads them with its token."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from room.client import AgentClient, Batch
from tests.support.live_room import Room, agent_replies, eventually
from tests.support.llm_servers import openai_text, openai_tool_call
from tests.support.wsclient import Client

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("clients")]

CSV = "城市,人口\n上海,2487\n北京,2189\n".encode()


def upload(room: Room, name: str, content: bytes) -> dict[str, Any]:
    req = urllib.request.Request(
        f"{room.server.origin}/api/projects/{room.project}/attachments?name={name}",
        data=content,
        headers={**room.owner.headers, "Content-Type": "application/octet-stream"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.status == 201
        found: dict[str, Any] = json.loads(r.read())["attachment"]
        return found


async def test_an_in_process_agent_reads_an_attachment_with_its_file_tools(room: Room) -> None:
    room.route("lead")
    item = upload(room, "cities.csv", CSV)
    path = f".room/attachments/{item['id']}-cities.csv"
    room.llm.push(
        openai_tool_call("fs_read", {"path": path}, call_id="r1"),
        openai_text("上海人口最多。"),
    )
    room.say("@lead 看看这个表", attachments=[item["id"]])
    await eventually(lambda: agent_replies(room, "lead"))
    first, second = room.llm.chat_requests
    prompt = first["messages"][-1]["content"]
    assert f"[附件 #{item['id']}] cities.csv (text/plain, {len(CSV)} B)：{path}" in prompt
    read = second["messages"][-1]
    assert read["role"] == "tool" and "上海,2487" in read["content"]
    workspace = room.server.data / "workspaces" / str(room.project)
    assert (workspace / ".room" / ".gitignore").read_text() == "*\n"


async def test_links_planted_in_the_attachments_folder_are_replaced_not_written_through(
    room: Room, tmp_path: Path
) -> None:
    """The working folder is the agents': one may plant symlinks where the server will copy a
    file (or make ``.gitignore``). The server writes beside them and renames over them; nothing
    they point to is written or made."""
    room.route("lead")
    items = [upload(room, "cities.csv", CSV), upload(room, "notes.txt", b"notes\n")]
    names = [f"{items[0]['id']}-cities.csv", f"{items[1]['id']}-notes.txt"]
    workspace = room.server.data / "workspaces" / str(room.project)
    folder = workspace / ".room" / "attachments"
    folder.mkdir(parents=True)
    victims = {tmp_path / "same-size.txt": b"x" * len(CSV), tmp_path / "other.txt": b"keep me"}
    for (victim, content), name in zip(victims.items(), names, strict=True):
        victim.write_bytes(content)  # the same size as the copy, or not
        (folder / name).symlink_to(victim)
    (workspace / ".room" / ".gitignore").symlink_to(tmp_path / "made-by-the-server")
    room.llm.push(
        openai_tool_call("fs_read", {"path": f".room/attachments/{names[0]}"}, call_id="r1"),
        openai_text("读到了。"),
    )
    room.say("@lead 看看这个表", attachments=[item["id"] for item in items])
    await eventually(lambda: agent_replies(room, "lead"))
    assert "上海,2487" in room.llm.chat_requests[1]["messages"][-1]["content"]
    assert {victim: victim.read_bytes() for victim in victims} == victims
    assert not (tmp_path / "made-by-the-server").exists()
    assert files_in(folder) == {names[0]: CSV, names[1]: b"notes\n"}  # no temporary file left
    assert not any((folder / name).is_symlink() for name in names)


async def test_an_external_agent_gets_attachments_in_its_inbox_and_reads_them(
    room: Room,
) -> None:
    server = room.server
    room.add_agent("outside", "backend", "外部", driver="external")
    token = server.agent_token("演示项目", "outside")
    agent = await Client.open(server.ws_url, token=token)
    await agent.wait_for("hello")
    item = upload(room, "cities.csv", CSV)
    room.say("@outside 数据在附件里", attachments=[item["id"]])
    frame = await agent.wait_for("inbox")
    [delivery] = frame["deliveries"]
    [carried] = delivery["attachments"]
    assert (carried["id"], carried["name"], carried["mime"]) == (
        item["id"],
        "cities.csv",
        "text/plain",
    )
    content, disposition = read_as_agent(f"{server.origin}{carried['url']}", token)
    assert content == CSV and disposition.startswith("attachment;")


def read_as_agent(url: str, token: str) -> tuple[bytes, str]:
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(req, timeout=10) as r:
        return r.read(), str(r.headers["Content-Disposition"])


async def test_room_agent_downloads_a_deliverys_files_for_its_command(
    room: Room, tmp_path: Path
) -> None:
    room.add_agent("outside", "backend", "外部", driver="external")
    token = room.server.agent_token("演示项目", "outside")
    seen: list[Batch] = []

    async def handler(batch: Batch) -> str:
        seen.append(batch)
        return "收到"

    folder = tmp_path / "ws" / ".room" / "attachments"
    agent = AgentClient(room.server.origin, token, handler, attachments_dir=folder)
    stop = asyncio.Event()
    running = asyncio.ensure_future(agent.run(stop))
    try:
        await eventually(lambda: agent.members)
        item = upload(room, "cities.csv", CSV)
        room.say("@outside 看附件", attachments=[item["id"]])
        await eventually(lambda: seen)
        [delivery] = seen[0].deliveries
        [carried] = delivery["attachments"]
        assert carried["path"] == str(folder / f"{item['id']}-cities.csv")
        assert files_in(folder) == {f"{item['id']}-cities.csv": CSV}  # and no partial file
    finally:
        stop.set()
        await asyncio.wait_for(running, 10)


def files_in(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in folder.iterdir()}
