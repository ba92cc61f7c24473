"""The entities as read from the store — users, projects, members: plain, immutable dataclasses,
with their wire form."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any, Literal

MemberKind = Literal["human", "agent"]

AGENT_ROLES = ("lead", "frontend", "backend", "tester", "devops", "design", "docs")


def iso(ts: float | None) -> str | None:
    """UTC epoch seconds → ``2026-12-02T11:00:00.123Z`` (what every frame carries).

    Same result as ``datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds")`` (a
    test checks it), at a fraction of the cost: it runs for every message sent.
    """
    if ts is None:
        return None
    sec = math.floor(ts)
    micros = round((ts - sec) * 1_000_000)
    if micros >= 1_000_000:
        sec, micros = sec + 1, micros - 1_000_000
    return f"{_iso_second(sec)}.{micros // 1000:03d}Z"


@lru_cache(maxsize=1024)
def _iso_second(sec: int) -> str:
    return datetime.fromtimestamp(sec, UTC).strftime("%Y-%m-%dT%H:%M:%S")


@dataclass(frozen=True, slots=True)
class User:
    id: int
    handle: str
    display_name: str
    is_admin: bool
    disabled_at: float | None = None  # when an operator disabled the person (room users)

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> User:
        return cls(row[0], row[1], row[2], bool(row[3]), row[4])


USER_COLUMNS = "id, handle, display_name, is_admin, disabled_at"


@dataclass(frozen=True, slots=True)
class Project:
    id: int
    name: str
    goal: str
    workspace: str | None
    state: str
    state_from: str | None
    stop_target: str | None
    epoch: int
    last_seq: int
    lead_member_id: int | None
    created_at: float
    state_at: float | None = None
    state_reason: str | None = None  # given with pause, archive, complete or abandon

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> Project:
        return cls(*row)

    def to_wire(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "name": self.name,
            "goal": self.goal,
            "state": self.state,
            "epoch": self.epoch,
            "head_seq": self.last_seq,
            "lead_member_id": self.lead_member_id,
            "created_at": iso(self.created_at),
            "state_at": iso(self.state_at),
            "stop_target": self.stop_target,
            "state_from": self.state_from,
            "state_reason": self.state_reason,
        }


PROJECT_COLUMNS = (
    "id, name, goal, workspace, state, state_from, stop_target, epoch, last_seq, "
    "lead_member_id, created_at, state_at, state_reason"
)


@dataclass(frozen=True, slots=True)
class Member:
    id: int
    project_id: int
    kind: MemberKind
    user_id: int | None
    role: str
    handle: str
    display_name: str
    status: str
    driver: str = "builtin"

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> Member:
        return cls(*row)

    @property
    def is_human(self) -> bool:
        return self.kind == "human"

    @property
    def is_owner(self) -> bool:
        return self.kind == "human" and self.role == "owner"

    def to_wire(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "project_id": self.project_id,
            "kind": self.kind,
            "role": self.role,
            "handle": self.handle,
            "display_name": self.display_name,
            "status": self.status,
            "driver": self.driver if self.kind == "agent" else None,
        }


MEMBER_COLUMNS = "id, project_id, kind, user_id, role, handle, display_name, status, driver"
