"""The limits around uploads (issue 17, item 1): two uploads at the same moment cannot both take
the last of a project's quota (the room is reserved before the first byte is read), a member
uploading in a loop is slowed by a rate limit (``attachment_rate_per_min``,
``attachment_burst``) with a structured 429 in Chinese and English, and the server receives at
most ``attachment_concurrent_uploads`` at once (the others wait their turn, then get a 503)."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from room.actions import attachments as attachment_actions
from room.errors import BusyError, PayloadTooLargeError
from room.infra.bodies import BodyInto
from room.rules.entities import Member
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


def reservations_left(app: App) -> int:
    """The quota reservations (``upload_reservations``) still in the database."""
    with app.db() as db:
        return int(db.execute("SELECT count(*) FROM upload_reservations").fetchone()[0])


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
    assert reservations_left(app) == 0  # every reservation ended with its upload


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


@pytest.fixture
def one_slot(tmp_path: Path) -> Iterator[App]:
    with running_app(
        tmp_path / "data", attachment_concurrent_uploads=1, attachment_wait_secs=0.3
    ) as handle:
        yield handle


def held_body(size: int, reading: asyncio.Event, go: asyncio.Event) -> BodyInto:
    """A body that says when it is first read and then waits for ``go`` before its bytes."""
    sent = False

    async def fill(view: memoryview) -> int:
        nonlocal sent
        if sent:
            return 0
        reading.set()
        await go.wait()
        view[:size] = b"q" * size
        sent = True
        return size

    return fill


def test_uploads_past_the_servers_bound_wait_their_turn_then_get_a_503(one_slot: App) -> None:
    app = one_slot
    core, member = app.core, owner_of(app)

    async def crowd() -> tuple[dict[str, Any], BaseException | None, bool, dict[str, Any]]:
        first_reading, go = asyncio.Event(), asyncio.Event()
        first = asyncio.create_task(
            attachment_actions.upload(
                core, member, name="a.txt", declared=5, body=held_body(5, first_reading, go)
            )
        )
        await first_reading.wait()  # the first holds the server's only slot
        second_reading = asyncio.Event()
        refused: BaseException | None = None
        try:
            await attachment_actions.upload(
                core, member, name="b.txt", declared=5, body=held_body(5, second_reading, go)
            )
        except BusyError as exc:
            refused = exc
        go.set()
        stored = await first
        third = await attachment_actions.upload(
            core, member, name="c.txt", declared=5, body=held_body(5, asyncio.Event(), go)
        )
        return stored, refused, second_reading.is_set(), third

    stored, refused, second_read, third = app.call(crowd)
    assert stored["size"] == 5 and third["size"] == 5
    assert isinstance(refused, BusyError), "a second upload was received past the bound"
    assert refused.http_status == 503 and refused.code == "uploads_busy"
    assert refused.details["retry_after_ms"] > 0
    assert "请稍后再试" in refused.message and "try again shortly" in refused.message
    assert not second_read, "the refused upload's body was read"
    assert reservations_left(app) == 0  # it reserved nothing of the quota either
    with app.db() as db:
        names = [row[0] for row in db.execute("SELECT name FROM attachments ORDER BY id")]
    assert names == ["a.txt", "c.txt"]


def test_a_waiting_upload_is_received_once_the_one_before_it_ends(tmp_path: Path) -> None:
    with running_app(
        tmp_path / "data", attachment_concurrent_uploads=1, attachment_wait_secs=30
    ) as app:
        core, member = app.core, owner_of(app)

        async def queue() -> tuple[list[str], dict[str, Any]]:
            order: list[str] = []
            first_reading, second_reading, go = asyncio.Event(), asyncio.Event(), asyncio.Event()
            first = asyncio.create_task(
                attachment_actions.upload(
                    core, member, name="a.txt", declared=5, body=held_body(5, first_reading, go)
                )
            )
            await first_reading.wait()
            second = asyncio.create_task(
                attachment_actions.upload(
                    core, member, name="b.txt", declared=5, body=held_body(5, second_reading, go)
                )
            )
            await asyncio.sleep(0.2)
            order.append("second read" if second_reading.is_set() else "second waits")
            go.set()
            await first
            order.append("first stored")
            stored = await second
            return order, stored

        order, stored = app.call(queue)
        assert order == ["second waits", "first stored"]
        assert stored["name"] == "b.txt" and stored["size"] == 5


def test_a_cancelled_waiter_or_a_failed_upload_gives_its_slot_back(tmp_path: Path) -> None:
    # One waiter is cancelled while it waits; another is cancelled in the very step its turn
    # comes (the one before it ends); a third upload fails while it reads. None of them keeps
    # the slot, and the one cancelled as its turn came stores nothing.
    with running_app(
        tmp_path / "data", attachment_concurrent_uploads=1, attachment_wait_secs=30
    ) as app:
        core, member = app.core, owner_of(app)

        async def failing(view: memoryview) -> int:
            raise OSError("the peer went away")

        async def crowd() -> list[str]:
            outcomes: list[str] = []

            async def outcome(task: asyncio.Task[dict[str, Any]]) -> None:
                try:
                    outcomes.append(str((await task)["name"]))
                except asyncio.CancelledError:
                    outcomes.append("cancelled")
                except OSError:
                    outcomes.append("failed")

            def start(name: str, body: BodyInto) -> asyncio.Task[dict[str, Any]]:
                return asyncio.create_task(
                    attachment_actions.upload(core, member, name=name, declared=5, body=body)
                )

            reading, go = asyncio.Event(), asyncio.Event()
            first = start("a.txt", held_body(5, reading, go))
            await reading.wait()
            waiting = start("b.txt", held_body(5, asyncio.Event(), go))
            await asyncio.sleep(0.05)
            waiting.cancel()
            await outcome(waiting)
            next_up = start("c.txt", held_body(5, asyncio.Event(), go))
            await asyncio.sleep(0.05)
            first.add_done_callback(lambda _: next_up.cancel())  # as it hands the slot on
            go.set()
            await outcome(first)
            await outcome(next_up)
            await outcome(start("d.txt", failing))
            await outcome(start("e.txt", held_body(5, asyncio.Event(), go)))
            return outcomes

        assert app.call(crowd) == ["cancelled", "a.txt", "cancelled", "failed", "e.txt"]
        assert core.upload_slots is not None and not core.upload_slots.locked()
        with app.db() as db:
            names = [row[0] for row in db.execute("SELECT name FROM attachments ORDER BY id")]
        assert names == ["a.txt", "e.txt"]
