"""The limits around uploads (issue 17, item 1): two uploads at the same moment cannot both take
the last of a project's quota (the room is reserved before the first byte is read), and a member
uploading in a loop is slowed by a rate limit (``attachment_rate_per_min``,
``attachment_burst``) with a structured 429 in Chinese and English."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from room.actions import attachments as attachment_actions
from room.bodies import BodyInto
from room.errors import PayloadTooLargeError
from room.models import Member
from room.store import members as members_store
from tests.support.inproc import App, running_app

QUOTA = 1024


BURST = 3


@pytest.fixture
def app(tmp_path: Path) -> Iterator[App]:
    with running_app(
        tmp_path / "data",
        attachment_project_bytes=QUOTA,
        attachment_rate_per_min=1,
        attachment_burst=BURST,
    ) as handle:
        yield handle


def owner_of(app: App, project_id: int = 1) -> Member:
    def job(conn: sqlite3.Connection) -> Member:
        people = members_store.list_for_project(conn, project_id)
        return next(m for m in people if m.kind == "human")

    return app.call(app.core.db.read, job)


def test_two_uploads_at_once_cannot_both_take_the_last_of_the_quota(app: App) -> None:
    core, member = app.core, owner_of(app)
    size = 600  # one fits the quota, two do not

    async def race() -> tuple[dict[str, object], BaseException | None]:
        first_reading, go = asyncio.Event(), asyncio.Event()

        def body_of(before: asyncio.Event | None, after: asyncio.Event | None) -> BodyInto:
            sent = False

            async def fill(view: memoryview) -> int:
                nonlocal sent
                if sent:
                    return 0
                if before is not None:
                    before.set()
                if after is not None:
                    await after.wait()
                view[:size] = b"x" * size if after is not None else b"y" * size
                sent = True
                return size

            return fill

        first = asyncio.create_task(
            attachment_actions.upload(
                core, member, name="a.txt", declared=size, body=body_of(first_reading, go)
            )
        )
        await first_reading.wait()  # the first has passed its check and is reading its body
        refused: BaseException | None = None
        try:
            # The second reads its body only if its check let it: it then lets the first go on.
            await attachment_actions.upload(
                core, member, name="b.txt", declared=size, body=body_of(go, None)
            )
        except PayloadTooLargeError as exc:
            refused = exc
        go.set()
        return await first, refused

    stored, refused = app.call(race)
    assert stored["size"] == size
    assert isinstance(refused, PayloadTooLargeError), "both uploads took the same room"
    assert refused.code == "project_quota" and refused.details["used"] == size
    assert app.core.upload_reserved == {}  # every reservation ended with its upload


def test_uploading_in_a_loop_is_slowed_with_a_structured_429(app: App) -> None:
    def post(name: str) -> tuple[int, dict[str, Any]]:
        response = app.client.post(
            f"/api/projects/1/attachments?name={name}",
            content=b"z" * 10,
            headers={
                "Origin": app.settings.origin,
                "Cookie": f"room_session={app.owner_cookie}",
                "X-CSRF-Token": app.csrf[app.owner_cookie],
            },
        )
        return response.status_code, response.json()

    for i in range(BURST):
        status, body = post(f"{i}.txt")
        assert status == 201, body
    status, body = post("one-more.txt")
    assert status == 429, body
    error = body["error"]
    assert error["code"] == "rate_limited"
    assert 0 < error["details"]["retry_after_ms"] <= 60_000
    assert "上传太频繁" in error["message"] and "uploading too fast" in error["message"]
    # Refused before its body was read: nothing was stored for it.
    with app.db() as db:
        (count,) = db.execute("SELECT COUNT(*) FROM attachments").fetchone()
    assert count == BURST
