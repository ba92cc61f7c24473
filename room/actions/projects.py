"""Creating projects and adding members."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import regex

from room.actions import plans as plan_actions
from room.actions import tenancy
from room.actions import workspaces as workspace_actions
from room.errors import BadRequestError, ConflictError, ForbiddenError
from room.rules.entities import AGENT_ROLES, Project, User
from room.rules.mentions import EVERYONE_NAMES, HUMANS_NAMES
from room.services import Services
from room.settings import Settings
from room.store import Tx
from room.store import audit as audit_store
from room.store import members as members_store
from room.store import projects as projects_store
from room.store.dialect import Connection
from room.store.members import name_key

HANDLE_RE = regex.compile(r"[A-Za-z][A-Za-z0-9_-]{0,31}")
RESERVED_HANDLES = frozenset({"all", "everyone", "humans", "here", "channel", "system", "room"})
MAX_NAME_CHARS = 80


@dataclass(frozen=True, slots=True)
class AgentSpec:
    role: str
    handle: str
    display_name: str
    aliases: tuple[str, ...] = ()


def check_handle(handle: str) -> str:
    if not HANDLE_RE.fullmatch(handle):
        raise BadRequestError(
            "a handle is 1–32 ASCII letters, digits, '_' or '-', starting with a letter",
            code="bad_handle",
            handle=handle,
        )
    if handle.lower() in RESERVED_HANDLES:
        raise BadRequestError(f"@{handle} is reserved", code="reserved_handle", handle=handle)
    return handle


# What @all / @所有人 / @humans … mean to the resolver: no member can be called that.
GROUP_NAMES = frozenset(name_key(n) for n in (*EVERYONE_NAMES, *HUMANS_NAMES))


def check_display_name(name: str) -> str:
    name = name.strip()
    if not 1 <= len(name) <= 64 or "@" in name or "＠" in name or "\n" in name:
        raise BadRequestError(
            "a display name is 1–64 characters, one line, without '@'",
            code="bad_display_name",
        )
    if name_key(name) in GROUP_NAMES:
        raise BadRequestError(
            f"「{name}」是群体提及，不能用作名字 (@{name} already means a group.)",
            code="reserved_name",
            name=name,
        )
    return name


def check_aliases(
    conn: Connection,
    project_id: int,
    handle: str,
    display_name: str,
    aliases: Iterable[str],
) -> tuple[str, ...]:
    """Aliases follow the display-name rules, are kept once each (an alias equal to the member's
    own handle or display name is dropped), and never take another member's handle (a handle
    always wins, so the alias could never be reached) or display name (the alias would win and
    take that member's mentions), nor a departed member's name."""
    own = {name_key(handle), name_key(display_name)}
    kept: dict[str, str] = {}
    for raw in aliases:
        try:
            alias = check_display_name(raw)
        except BadRequestError as exc:
            raise BadRequestError(
                f"别名「{raw.strip()}」不可用：{exc.message}", code=exc.code, alias=raw
            ) from None
        key = name_key(alias)
        if key in own or key in kept:
            continue
        # A handle always wins (the alias could never be reached); an alias outranks a display
        # name (it would take that member's mentions); departed names stay reserved.
        if any(
            kind in ("handle", "display_name") or departed
            for kind, departed in members_store.name_holders(conn, project_id, alias)
        ):
            raise ConflictError(
                f"别名「{alias}」已被占用 (It is another member's name or a departed name.)",
                code="alias_taken",
                alias=alias,
            )
        kept[key] = alias
    return tuple(kept.values())


def check_project_name(name: str) -> str:
    name = name.strip()
    if not 1 <= len(name) <= MAX_NAME_CHARS or "\n" in name or "/" in name:
        raise BadRequestError(
            f"a project name is 1–{MAX_NAME_CHARS} characters, one line, without '/'",
            code="bad_project_name",
        )
    return name


def insert_project(
    conn: Connection,
    tx: Tx,
    creator: User,
    *,
    name: str,
    goal: str,
    workspace: str | None,
    agents: list[AgentSpec],
) -> tuple[int, int]:
    """Insert a project with its creator as owner and its agents; returns (project, owner member)."""
    if projects_store.name_taken(conn, name):
        raise ConflictError(f"a project named {name!r} exists", code="project_exists", name=name)
    project_id = projects_store.insert(
        conn,
        name=name,
        goal=goal,
        workspace=workspace,
        created_by=creator.id,
        now=tx.now,
        home_node=tx.node,  # where its workspace is made and its turns run (docs/cluster.md)
    )
    owner_id = members_store.insert(
        conn,
        project_id=project_id,
        kind="human",
        user_id=creator.id,
        role="owner",
        handle=creator.handle,
        display_name=creator.display_name,
        now=tx.now,
    )
    agent_ids = [insert_agent(conn, tx, project_id, spec) for spec in agents]
    leads = [i for i, spec in zip(agent_ids, agents, strict=True) if spec.role == "lead"]
    # The lead answers messages that mention nobody; without a 'lead' role, the first agent does.
    lead_ids = leads or agent_ids
    if lead_ids:
        lead_id = lead_ids[0]
        projects_store.set_lead(conn, project_id, lead_id)
    audit_store.record(
        conn,
        now=tx.now,
        actor_kind="human",
        actor_id=owner_id,
        project_id=project_id,
        action="project.create",
        outcome="ok",
        detail={"name": name, "agents": [a.handle for a in agents]},
    )
    return project_id, owner_id


def insert_agent(conn: Connection, tx: Tx, project_id: int, spec: AgentSpec) -> int:
    check_handle(spec.handle)
    if spec.role not in AGENT_ROLES:
        raise BadRequestError(
            f"unknown agent role {spec.role!r}", code="bad_role", allowed=list(AGENT_ROLES)
        )
    if members_store.handle_reserved(conn, project_id, spec.handle):
        raise ConflictError(
            f"@{spec.handle} is taken in this project (names of departed members stay reserved)",
            code="handle_taken",
            handle=spec.handle,
        )
    display_name = check_display_name(spec.display_name)
    # Two live members answering to one name make every mention of it ambiguous, and a handle
    # or alias outranks a display name (this one could never be reached): refused, as handles
    # are. A departed member's name does not count: a live name beats it (mentions SPEC §5).
    if any(
        not departed for _, departed in members_store.name_holders(conn, project_id, display_name)
    ):
        raise ConflictError(
            f"「{display_name}」已是本项目一位成员的名字，提及会有歧义；请换一个显示名"
            " (Another member already answers to this name; choose another display name.)",
            code="name_taken",
            name=display_name,
        )
    return members_store.insert(
        conn,
        project_id=project_id,
        kind="agent",
        user_id=None,
        role=spec.role,
        handle=spec.handle,
        display_name=display_name,
        aliases=check_aliases(conn, project_id, spec.handle, display_name, spec.aliases),
        now=tx.now,
    )


def may_create_projects(settings: Settings, user: User) -> bool:
    """Setting ``project_creators``: empty, anyone signed in; else the people listed (by handle)
    and the server's owner."""
    if not settings.project_creators or user.is_admin:
        return True
    allowed = {h.strip().lstrip("@").lower() for h in settings.project_creators}
    return user.handle.lower() in allowed


async def check_may_create(core: Services, user: User) -> None:
    """Refuse (403 ``not_a_creator``, audited) a person the setting does not let create."""
    if may_create_projects(core.settings, user):
        return
    await core.db.write(
        lambda conn, tx: audit_store.record(
            conn,
            now=tx.now,
            actor_kind="human",
            actor_id=user.id,
            project_id=None,
            action="project.create",
            outcome="refused",
            detail={"user_id": user.id, "handle": user.handle, "reason": "not_a_creator"},
        )
    )
    raise ForbiddenError(
        "only the people the operator lists may create projects (setting project_creators)",
        code="not_a_creator",
    )


async def create_project(
    core: Services,
    creator: User,
    *,
    name: str,
    goal: str = "",
    workspace: str | None = None,
    agents: list[AgentSpec] | None = None,
    plan_first: bool = False,
) -> Project:
    """Create a project with its creator as owner. A goal is delivered to the lead at once;
    with ``plan_first`` the lead's plan is stored and nothing is dispatched until a person
    starts it. A ``workspace`` another live project holds is refused in the write that creates
    the project (``workspace_in_use``, :mod:`room.actions.tenancy`). Who may create is the
    setting ``project_creators`` (:func:`check_may_create`)."""
    await check_may_create(core, creator)
    name = check_project_name(name)
    workspace = await workspace_actions.checked_workspace(core.settings, workspace)
    specs = agents if agents is not None else [AgentSpec("lead", "lead", "负责人")]

    def job(conn: Connection, tx: Tx) -> Project:
        if workspace is not None:
            tenancy.ensure_free(conn, core.settings, workspace, project_id=None, user_id=creator.id)
        project_id, owner_id = insert_project(
            conn, tx, creator, name=name, goal=goal, workspace=workspace, agents=specs
        )
        if goal.strip() or plan_first:
            plan_actions.deliver_goal(conn, tx, project_id, owner_id, goal, plan_first)
        project = projects_store.get(conn, project_id)
        assert project is not None
        return project

    return await core.db.write(job)
