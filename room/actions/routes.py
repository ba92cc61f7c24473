"""Changing model routes. Every change is stored with a new config version, its reason and its
author, applies from the next request, and is announced in the room; identity, handle, tasks and
session are untouched.
"""

from __future__ import annotations

import json
from typing import Any

from room.actions.notices import insert_notice
from room.errors import BadRequestError, ForbiddenError, NotFoundError
from room.rules.entities import AGENT_ROLES, Member
from room.rules.routing import (
    SOURCE_LABELS,
    Pool,
    PoolPick,
    RouteSource,
    parse_model_id,
    validate_pool_pick,
)
from room.services import Services
from room.store import Tx
from room.store import members as members_store
from room.store import projects as projects_store
from room.store import routes as routes_store
from room.store.dialect import Connection

MAX_REASON_CHARS = 500


def _check_target(conn: Connection, project_id: int, scope: str, target: str) -> str:
    if scope in ("project", "pool"):
        return ""
    if scope == "role":
        if target not in AGENT_ROLES:
            raise BadRequestError(
                f"unknown role {target!r}", code="bad_role", allowed=list(AGENT_ROLES)
            )
        return target
    member_id = projects_store.row_id(target)
    member = members_store.get(conn, member_id) if member_id is not None else None
    if member is None or member.project_id != project_id or member.kind != "agent":
        raise NotFoundError("no such agent member in this project", code="no_member")
    return str(member.id)


def _check_value(scope: str, value: str | None) -> str | None:
    if value is None:
        return None
    if scope == "pool":
        pool = _parse_pool(value)
        return json.dumps({"models": list(pool.models), "enabled": pool.enabled})
    parse_model_id(value)
    return value


def _parse_pool(value: str) -> Pool:
    """``{"models": ["provider/model", …], "enabled": true}``, strictly: anything else is
    ``bad_pool``, never a 500."""
    try:
        data = json.loads(value)
    except (ValueError, RecursionError):
        data = None
    models = data.get("models", []) if isinstance(data, dict) else None
    enabled = data.get("enabled", True) if isinstance(data, dict) else None
    if (
        not isinstance(models, list)
        or not all(isinstance(m, str) for m in models)
        or not isinstance(enabled, bool)
    ):
        raise BadRequestError(
            'a pool is {"models": ["provider/model", …], "enabled": true}', code="bad_pool"
        )
    return Pool(tuple(models), enabled)


async def change_route(
    core: Services,
    actor: Member,
    *,
    scope: str,
    target: str = "",
    value: str | None,
    reason: str,
) -> dict[str, Any]:
    """Set or clear one route setting. Humans with the owner role may change anything; the lead
    agent may only make pool picks, within the pool, never for a locked member."""
    reason = reason.strip()
    if not reason or len(reason) > MAX_REASON_CHARS:
        raise BadRequestError(
            "a route change needs a reason (1–500 characters)", code="reason_required"
        )
    if scope not in routes_store.SCOPES:
        raise BadRequestError(
            f"unknown scope {scope!r}", code="bad_scope", allowed=list(routes_store.SCOPES)
        )
    is_lead_pick = actor.kind == "agent" and actor.role == "lead" and scope == "pool_pick"
    if not (actor.is_owner or is_lead_pick):
        raise ForbiddenError(
            "only a project owner changes routes (the lead may pick within the pool)",
            code="not_owner",
        )
    project_id = actor.project_id
    value = _check_value(scope, value)

    def job(conn: Connection, tx: Tx) -> dict[str, Any]:
        projects_store.require_open(conn, project_id)
        checked_target = _check_target(conn, project_id, scope, target)
        current = routes_store.settings(conn, project_id)
        if scope == "pool_pick" and value is not None:
            pool_raw = current.get(("pool", ""))
            data = json.loads(str(pool_raw["value"])) if pool_raw else None
            pool = Pool(tuple(data["models"]), bool(data["enabled"])) if data else None
            locked = ("member", checked_target) in current
            validate_pool_pick(pool, PoolPick(value, reason), member_locked=locked)
        version = routes_store.change(
            conn,
            project_id=project_id,
            scope=scope,
            target=checked_target,
            value=value,
            reason=reason,
            author_kind=actor.kind,
            author_id=actor.id,
            now=tx.now,
        )
        subject = _subject(conn, scope, checked_target)
        label = SOURCE_LABELS[_SOURCE[scope]].zh
        shown = value if value is not None else "（清除）"
        insert_notice(
            conn,
            tx,
            project_id,
            f"🔀 @{actor.handle} 修改了{subject}的模型路由（{label}）：{shown}。理由：{reason}",
            {
                "route_change": {
                    "scope": scope,
                    "target": checked_target,
                    "value": value,
                    "config_version": version,
                },
                # Worded by the page in the reader's language (web/notices.js).
                "notice": {
                    "code": "route_change",
                    "params": {
                        "actor": actor.handle,
                        "scope": scope,
                        "subject": _subject_key(conn, scope, checked_target),
                        "source": _SOURCE[scope].value,
                        "value": value,
                        "reason": reason,
                    },
                },
            },
        )
        return {"config_version": version, "scope": scope, "target": checked_target, "value": value}

    return await core.db.write(job, locks=(actor.project_id,))


_SOURCE = {
    "project": RouteSource.PROJECT,
    "role": RouteSource.ROLE,
    "member": RouteSource.MEMBER,
    "pool": RouteSource.POOL,
    "pool_pick": RouteSource.POOL,
}


def _subject_key(conn: Connection, scope: str, target: str) -> str:
    """What a route change is about, as data: a role's code, a member's handle, or ''."""
    if scope == "role":
        return target
    if scope in ("member", "pool_pick"):
        member = members_store.get(conn, int(target))
        return member.handle if member else f"#{target}"
    return ""


def _subject(conn: Connection, scope: str, target: str) -> str:
    if scope == "project":
        return "项目默认"
    if scope == "pool":
        return "允许池"
    if scope == "role":
        return f"角色 {target} "
    member = members_store.get(conn, int(target))
    return f" @{member.handle} " if member else f" #{target} "
