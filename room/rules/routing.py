"""Model route resolution (pure: no I/O, no clock); docs/routing.md is its reference.

Which model serves an agent member's next request, and why. From highest to lowest
(:data:`ROUTE_PRECEDENCE`):

1. ``member`` — a route set on the member is a lock; nothing overrides it.
2. ``pool`` — in pool mode the lead may pick a model from the allowed pool, with a public reason.
   A pick that is not valid (see :func:`validate_pool_pick`) is ignored, and the resolved route
   says why in ``pick_refused``.
3. ``role`` — the default of the member's role.
4. ``project`` — the project default.
5. ``fallback`` — the built-in offline route, so the server works without any key.

Configured ids that are malformed raise :class:`InvalidModelIdError` instead of being skipped:
silently falling through to another model would change who answers (and what it costs) without
anyone having chosen it. ``docs/routing.md`` prints these tables; a test keeps them equal.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import NamedTuple

from room.errors import BadRequestError

FALLBACK_MODEL_ID = "builtin/echo"
MAX_MODEL_ID_CHARS = 200
PROVIDER_RE = re.compile(r"[a-z0-9][a-z0-9_-]{0,39}")


class RouteSource(StrEnum):
    MEMBER = "member"
    POOL = "pool"
    ROLE = "role"
    PROJECT = "project"
    FALLBACK = "fallback"


ROUTE_PRECEDENCE: tuple[RouteSource, ...] = tuple(RouteSource)  # highest first


class RouteLabel(NamedTuple):
    zh: str
    en: str


SOURCE_LABELS: Mapping[RouteSource, RouteLabel] = MappingProxyType(
    {
        RouteSource.MEMBER: RouteLabel("成员固定", "Member lock"),
        RouteSource.POOL: RouteLabel("允许池", "Allowed pool"),
        RouteSource.ROLE: RouteLabel("角色默认", "Role default"),
        RouteSource.PROJECT: RouteLabel("项目默认", "Project default"),
        RouteSource.FALLBACK: RouteLabel("内置离线", "Built-in offline"),
    }
)

POOL_PICK_REFUSALS: Mapping[str, str] = MappingProxyType(
    {
        "pool_mode_off": "项目未开启允许池模式 (Pool mode is off for this project.)",
        "locked_member": "该成员的路由已固定，不能由主管选择 (The member's route is locked.)",
        "reason_required": "选择模型需要一个公开理由 (A pool pick needs a public reason.)",
        "outside_pool": "所选模型不在允许池中 (The picked model is not in the allowed pool.)",
    }
)


class InvalidModelIdError(BadRequestError):
    """A model id that is not ``provider/model``."""

    code = "bad_model_id"


class PoolPickError(BadRequestError):
    """The lead's pick cannot be used; ``code`` is one of :data:`POOL_PICK_REFUSALS`."""

    code = "pool_pick_refused"


# Why an id is malformed: code → (中文, English). The code is ``details["why"]``.
MODEL_ID_PROBLEMS: Mapping[str, tuple[str, str]] = MappingProxyType(
    {
        "not_string": ("不是字符串", "not a string"),
        "length": (f"长度须为 1–{MAX_MODEL_ID_CHARS}", f"length must be 1–{MAX_MODEL_ID_CHARS}"),
        "no_provider": ("缺少 provider/ 前缀", "missing the provider/ prefix"),
        "bad_provider": (
            "provider 须为小写字母、数字、- 或 _",
            "the provider must be lowercase letters, digits, - or _",
        ),
        "bad_char": ("含空白或控制字符", "contains whitespace or a control character"),
        "empty_segment": (
            "model 部分为空或有空段",
            "the model part is empty or has an empty segment",
        ),
    }
)


def _bad_id(value: object, why: str) -> InvalidModelIdError:
    zh, en = MODEL_ID_PROBLEMS[why]
    return InvalidModelIdError(
        f"模型 id 无效：{zh}；格式为 provider/model，例如 openai/gpt-4o "
        f"(Invalid model id: {en}; use provider/model, e.g. openai/gpt-4o.)",
        value=value if isinstance(value, str) else repr(value),
        why=why,
    )


def parse_model_id(model_id: str) -> tuple[str, str]:
    """Split ``provider/model`` at the first ``/``. The model part may hold ``/`` and ``:``.

    The provider is a lowercase slug (no case folding: ``OpenAI/x`` is refused, not guessed).
    The model is non-empty, has no whitespace or control/format characters (a zero-width space
    would make two ids look equal), and no empty ``/`` segment.
    """
    if not isinstance(model_id, str):
        raise _bad_id(model_id, "not_string")
    if not model_id or len(model_id) > MAX_MODEL_ID_CHARS:
        raise _bad_id(model_id, "length")
    provider, slash, model = model_id.partition("/")
    if not slash:
        raise _bad_id(model_id, "no_provider")
    if not PROVIDER_RE.fullmatch(provider):
        raise _bad_id(model_id, "bad_provider")
    if any(ch.isspace() or unicodedata.category(ch).startswith("C") for ch in model):
        raise _bad_id(model_id, "bad_char")
    if not model or "" in model.split("/"):
        raise _bad_id(model_id, "empty_segment")
    return provider, model


@dataclass(frozen=True, slots=True)
class Pool:
    """The allowed pool of a project; ``enabled`` is pool mode (the list is kept when off)."""

    models: tuple[str, ...]
    enabled: bool = True

    def __post_init__(self) -> None:
        for model_id in self.models:
            parse_model_id(model_id)


@dataclass(frozen=True, slots=True)
class PoolPick:
    """The lead's choice for one member, with the reason shown publicly in the room."""

    model_id: str
    reason: str


@dataclass(frozen=True, slots=True)
class ResolvedRoute:
    model_id: str
    source: RouteSource
    reason: str | None = None  # the public reason of a pool pick
    pick_refused: str | None = None  # why a given pool pick was not used

    @property
    def provider(self) -> str:
        return parse_model_id(self.model_id)[0]

    @property
    def model(self) -> str:
        return parse_model_id(self.model_id)[1]

    @property
    def label(self) -> RouteLabel:
        return SOURCE_LABELS[self.source]


def validate_pool_pick(pool: Pool | None, pick: PoolPick, member_locked: bool) -> None:
    """Raise :class:`PoolPickError` unless the lead may use ``pick`` for this member.

    Checked in this order: pool mode on, member not locked, a public reason, inside the pool.
    Membership is exact string equality with a configured id (no normalisation).
    """
    if pool is None or not pool.enabled:
        code = "pool_mode_off"
    elif member_locked:
        code = "locked_member"
    elif not pick.reason.strip():
        code = "reason_required"
    elif pick.model_id not in pool.models:
        code = "outside_pool"
    else:
        return
    raise PoolPickError(POOL_PICK_REFUSALS[code], code=code, model_id=pick.model_id)


def resolve_route(
    *,
    project_default: str | None,
    role_default: str | None,
    member_route: str | None,
    pool: Pool | None,
    pool_pick: PoolPick | None,
    fallback: str = FALLBACK_MODEL_ID,
) -> ResolvedRoute:
    """The model for a member's next request and the source it came from (see module doc)."""
    for configured in (project_default, role_default, member_route, fallback):
        if configured is not None:
            parse_model_id(configured)

    refused: str | None = None
    if pool_pick is not None:
        try:
            validate_pool_pick(pool, pool_pick, member_locked=member_route is not None)
        except PoolPickError as exc:
            refused = exc.code

    if member_route is not None:
        return ResolvedRoute(member_route, RouteSource.MEMBER, pick_refused=refused)
    if pool_pick is not None and refused is None:
        return ResolvedRoute(pool_pick.model_id, RouteSource.POOL, reason=pool_pick.reason.strip())
    if role_default is not None:
        return ResolvedRoute(role_default, RouteSource.ROLE, pick_refused=refused)
    if project_default is not None:
        return ResolvedRoute(project_default, RouteSource.PROJECT, pick_refused=refused)
    return ResolvedRoute(fallback, RouteSource.FALLBACK, pick_refused=refused)
