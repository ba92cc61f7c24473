"""A live server wired to a scripted model, with the owner signed in (the ``room`` fixture), and
the waits the live agent tests share."""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Callable
from typing import Any

import anyio

from tests.support.llm_servers import OpenAIServer
from tests.support.server import ServerProcess, Session


class Room:
    """A server wired to a scripted model, with the owner signed in."""

    def __init__(self, server: ServerProcess, llm: OpenAIServer) -> None:
        self.server = server
        self.llm = llm
        self.owner: Session = server.login()
        me = server.get_json("/api/me", cookie=self.owner.cookie)
        self.project = int(me["projects"][0]["id"])
        detail = self.get(f"/api/projects/{self.project}")
        self.members = {m["handle"]: m for m in detail["members"]}

    def get(self, path: str) -> Any:
        return self.server.get_json(path, cookie=self.owner.cookie)

    def post(self, path: str, body: Any, expect: int = 200) -> Any:
        status, data = self.server.request("POST", path, body, headers=self.owner.headers)
        assert status == expect, (status, data)
        return data

    def say(self, body: str, **extra: Any) -> dict[str, Any]:
        return self.post(
            f"/api/projects/{self.project}/messages",
            {"body": body, "client_txn_id": uuid.uuid4().hex, **extra},
            expect=201,
        )

    def add_agent(self, handle: str, role: str, name: str, driver: str = "builtin") -> int:
        data = self.post(
            f"/api/projects/{self.project}/members",
            {"role": role, "handle": handle, "display_name": name, "driver": driver},
            expect=201,
        )
        member_id = int(data["member"]["id"])
        self.members[handle] = data["member"]
        return member_id

    def route(self, member: str, model: str = "openai/gpt-test") -> None:
        self.post(
            f"/api/projects/{self.project}/routes",
            {
                "scope": "member",
                "target": str(self.members[member]["id"]),
                "value": model,
                "reason": "测试使用本地模型",
            },
        )

    def messages(self) -> list[dict[str, Any]]:
        return self.get(f"/api/projects/{self.project}/messages?limit=200")["messages"]

    def deliveries(self, message_id: int) -> list[dict[str, Any]]:
        return self.get(f"/api/messages/{message_id}")["deliveries"]

    def db(self) -> sqlite3.Connection:
        return sqlite3.connect(self.server.data / "room.sqlite")


async def eventually(check: Callable[[], Any], timeout: float = 10.0) -> Any:
    with anyio.fail_after(timeout):
        while True:
            value = check()
            if value:
                return value
            await anyio.sleep(0.05)


def agent_replies(room: Room, handle: str) -> list[dict[str, Any]]:
    author = room.members[handle]["id"]
    return [m for m in room.messages() if m["author_id"] == author and m["kind"] != "tool"]
