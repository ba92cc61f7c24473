"""The draft of a streaming answer (room.agents.drafts) on its own: throttled, each frame the
whole text so far, kept for a late subscriber until it is forgotten, ended once."""

from __future__ import annotations

import asyncio
import json
from typing import Any, cast

import pytest

from room.agents.drafts import DraftStream, current
from room.providers import CallMeter
from room.rules.entities import Member
from room.services import Services

LEAD = Member(7, 3, "agent", None, "lead", "lead", "负责人", "active")


class Hub:
    def __init__(self) -> None:
        self.frames: list[tuple[int, dict[str, Any], bool]] = []

    def broadcast(self, project_id: int, frame: str, *, volatile: bool = False) -> None:
        self.frames.append((project_id, json.loads(frame), volatile))


class Core:
    def __init__(self) -> None:
        self.hub = Hub()
        self.drafts: dict[int, dict[int, str]] = {}


class Clock:
    now = 100.0

    def __call__(self) -> float:
        return self.now


def tick(meter: CallMeter) -> None:
    """An event of the answer arrived (what the provider's read loop does)."""
    assert meter.on_progress is not None
    meter.on_progress()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_a_burst_of_events_makes_one_frame_then_one_with_the_latest_text() -> None:
    core, clock = Core(), Clock()
    stream = DraftStream(cast(Services, core), LEAD, 11, every_secs=0.05, clock=clock)
    text = ""
    meter = stream.watch(CallMeter())
    meter.text = lambda: text
    for piece in ["部署", "分三步", "：先备份", "，再停服"]:
        text += piece
        tick(meter)
    # the first event went out at once; the rest wait for the interval, as one frame
    assert [f["text"] for _, f, _ in core.hub.frames] == ["部署"]
    clock.now += 0.05
    await asyncio.sleep(0.2)  # the pending send runs (its timer is the loop's)
    frames = [f for _, f, _ in core.hub.frames]
    assert [f["text"] for f in frames] == ["部署", "部署分三步：先备份，再停服"]
    assert all(v for _, _, v in core.hub.frames)  # volatile: never queued behind a replay
    assert frames[-1] | {"text": ""} == {
        "type": "draft", "project_id": 3, "member_id": 7, "turn_id": 11, "text": "",
        "omitted": 0, "done": False,
    }  # fmt: skip
    # kept for a client that subscribes now
    assert [json.loads(f)["text"] for f in current(cast(Services, core), 3)] == [text]
    # nothing new: no frame
    clock.now += 1
    tick(meter)
    assert len(core.hub.frames) == 2


@pytest.mark.anyio
async def test_forgotten_before_the_post_and_ended_once_with_the_message() -> None:
    core, clock = Core(), Clock()
    stream = DraftStream(cast(Services, core), LEAD, 12, clock=clock)
    meter = stream.watch(CallMeter())
    meter.text = lambda: "你好"
    tick(meter)
    stream.forget()
    assert current(cast(Services, core), 3) == [] and core.drafts == {}
    assert meter.on_progress is None  # the call is no longer followed
    stream.end(99)
    stream.end(99)
    ends = [f for _, f, _ in core.hub.frames if f["done"]]
    assert ends == [{"type": "draft", "project_id": 3, "member_id": 7, "turn_id": 12,
                     "done": True, "message_id": 99}]  # fmt: skip


@pytest.mark.anyio
async def test_no_text_no_frame_and_a_long_answer_sends_its_end() -> None:
    core, clock = Core(), Clock()
    stream = DraftStream(cast(Services, core), LEAD, 13, clock=clock)
    meter = stream.watch(CallMeter())
    meter.text = lambda: "   "
    tick(meter)
    stream.end()
    assert core.hub.frames == []  # nothing was shown: nothing to end
    long = "长" * 16_005
    stream = DraftStream(cast(Services, core), LEAD, 14, clock=clock)
    meter = stream.watch(CallMeter())
    meter.text = lambda: long
    tick(meter)
    [(_, frame, _)] = core.hub.frames
    assert frame["omitted"] == 5 and frame["text"] == long[5:]
