"""``room_bus_lag_seconds`` (docs/cluster.md, "Operators"): every hint a node publishes is
stamped with the time it went out, and the node hearing it counts the lag in a histogram."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import cast

import orjson
import pytest
from nats.aio.msg import Msg

from room.infra.bus import LAG_BOUNDS, NODES_SUBJECT, PROJECT_SUBJECT, Bus

pytestmark = pytest.mark.anyio


@dataclass
class _Msg:
    subject: str
    data: bytes


def msg(subject: str, hint: dict[str, object]) -> Msg:
    """What nats-py hands the bus's handler: the subject and the bytes."""
    return cast(Msg, _Msg(subject, orjson.dumps(hint)))


def bucket(lag: float) -> int:
    return next(i for i, bound in enumerate((*LAG_BOUNDS, float("inf"))) if lag <= bound)


async def test_a_stamped_hint_is_counted_in_its_lags_bucket() -> None:
    bus = Bus("nats://127.0.0.1:1", "here")
    heard: list[object] = []
    bus.on_hint = lambda project_id, hint: heard.append((project_id, hint["k"]))
    sent = time.time() - 0.03  # published 30 ms ago on another node
    await bus._heard(msg(f"{PROJECT_SUBJECT}7", {"k": "e", "t": sent}))
    counts = [0] * (len(LAG_BOUNDS) + 1)
    counts[bucket(0.03)] = 1
    assert bus.lag_counts == counts and 0.03 <= bus.lag_seconds < 5
    assert heard == [(7, "e")]
    # A heartbeat counts too; an unstamped hint (a node before the stamp) or a malformed
    # stamp is applied and not counted.
    await bus._heard(msg(NODES_SUBJECT, {"k": "hb", "n": "there", "t": time.time()}))
    for stamp in (None, "soon", True):
        hint: dict[str, object] = {"k": "e"} if stamp is None else {"k": "e", "t": stamp}
        await bus._heard(msg(f"{PROJECT_SUBJECT}7", hint))
    assert sum(bus.lag_counts) == 2 and len(heard) == 4


async def test_a_hint_from_the_future_counts_as_no_lag() -> None:
    """A sender whose clock runs ahead: the lag is 0, never negative."""
    bus = Bus("nats://127.0.0.1:1", "here")
    await bus._heard(msg(f"{PROJECT_SUBJECT}1", {"k": "e", "t": time.time() + 60}))
    assert bus.lag_counts[0] == 1 and bus.lag_seconds == 0.0
