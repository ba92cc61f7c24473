"""What an owner may change about how a project's agents work: whether commands may use the
network (``network``), run without a sandbox where none is available (``unsandboxed``), which
roles are read-only (``read_only_roles``), the work limits (``limits``) and which changed files
a merge flags as generated (``merge_ignore``, :mod:`room.rules.merging`; ``null`` goes back to
the default list). Stored in the project's settings; every change, and every refused attempt, is
in the audit log.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from room.actions.attempt_merge import ignore_patterns
from room.actions.turns import WORK_LIMITS, limits_of
from room.errors import BadRequestError, ForbiddenError
from room.rules import merging
from room.rules.entities import Member
from room.services import Services
from room.settings import Settings
from room.store import Tx
from room.store import audit as audit_store
from room.store import projects as projects_store
from room.store.dialect import Connection

SETTING_KEYS = ("network", "unsandboxed", "read_only_roles", "limits", "merge_ignore")


def settings_wire(defaults: Settings, stored: Mapping[str, Any]) -> dict[str, Any]:
    """The project object's ``settings``: what applies now (the server's defaults where the
    project sets nothing), the server's defaults of the limits (``limit_defaults``) and which
    limits the project overrides (``limits_set``)."""
    limits = limits_of(defaults, stored)
    server = limits_of(defaults, {})
    roles = stored.get("read_only_roles")
    given = stored.get("limits")
    given = given if isinstance(given, dict) else {}
    return {
        "network": stored.get("network") is True,
        "unsandboxed": stored.get("unsandboxed") is True,
        "read_only_roles": sorted(r for r in roles if isinstance(r, str))
        if isinstance(roles, list)
        else [],
        "limits": {key: getattr(limits, key) for key in WORK_LIMITS},
        "limit_defaults": {key: getattr(server, key) for key in WORK_LIMITS},
        "limits_set": [key for key in WORK_LIMITS if _usable(given.get(key))],
        "merge_ignore": list(ignore_patterns(stored)),
        "merge_ignore_default": list(merging.DEFAULT_MERGE_IGNORE),
        "merge_ignore_set": isinstance(stored.get("merge_ignore"), list),
    }


def _usable(value: Any) -> bool:
    """A stored limit that applies (as :func:`room.actions.turns.limits_of` reads it)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and value > 0


async def read_settings(core: Services, project_id: int) -> dict[str, Any]:
    stored = await core.db.read(lambda conn: projects_store.settings(conn, project_id))
    return settings_wire(core.settings, stored)


async def change_settings(
    core: Services, actor: Member, changes: Mapping[str, Any]
) -> dict[str, Any]:
    """Apply an owner's ``changes`` (already validated: keys of :data:`SETTING_KEYS`; in
    ``limits`` a ``None`` goes back to the server's default; ``merge_ignore`` is checked here,
    ``None`` goes back to the default list). People only, owners only."""
    project_id = actor.project_id
    if changes.get("merge_ignore") is not None:
        try:
            changes = {
                **changes,
                "merge_ignore": list(merging.check_patterns(changes["merge_ignore"])),
            }
        except BadRequestError:
            await core.db.write(
                lambda conn, tx: _audit(conn, tx, actor, "refused", dict(changes)),
                locks=(actor.project_id,),
            )
            raise
    if actor.kind != "human" or not actor.is_owner:
        await core.db.write(
            lambda conn, tx: _audit(conn, tx, actor, "refused", dict(changes)),
            locks=(actor.project_id,),
        )
        if actor.kind != "human":
            raise ForbiddenError("only a person changes project settings", code="human_only")
        raise ForbiddenError("only a project owner changes project settings", code="not_owner")

    def job(conn: Connection, tx: Tx) -> dict[str, Any]:
        projects_store.require_open(conn, project_id)
        before = projects_store.settings(conn, project_id)
        values = {k: v for k, v in changes.items() if k != "limits"}
        remove = [k for k, v in values.items() if k == "merge_ignore" and v is None]
        for key in remove:
            values.pop(key)
        if "read_only_roles" in values:
            values["read_only_roles"] = sorted(set(values["read_only_roles"]))
        if "limits" in changes:
            merged = dict(before.get("limits") or {})
            for key, value in changes["limits"].items():
                if value is None:
                    merged.pop(key, None)
                else:
                    merged[key] = value
            values["limits"] = merged
        after = projects_store.update_settings(conn, project_id, values, tx.now, remove=remove)
        _audit(conn, tx, actor, "ok", dict(changes))
        return settings_wire(core.settings, after)

    return await core.db.write(job, locks=(actor.project_id,))


def _audit(conn: Connection, tx: Tx, actor: Member, outcome: str, changes: dict[str, Any]) -> None:
    audit_store.record(
        conn,
        now=tx.now,
        actor_kind=actor.kind,
        actor_id=actor.id,
        project_id=actor.project_id,
        action="project.settings",
        outcome=outcome,
        detail={"changes": changes},
    )
