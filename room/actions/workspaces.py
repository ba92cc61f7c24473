"""A project's workspace, and where in it each member works (docs/architecture.md, "Workspaces").

A project's workspace is the folder its members' file tools and commands work in: the one set
for the project, or by default ``<data>/workspaces/<project id>``, made on first use. Where a
member works inside it is a :class:`WorkDir`: its own git worktree while it works on a task
attempt, or the workspace itself, one writer at a time ("serial", with the reason).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from room.core import Core
from room.errors import NotFoundError
from room.models import Member, Project
from room.settings import Settings
from room.store import projects as projects_store

WORKSPACES_DIR = "workspaces"  # under the data folder: the default workspaces


@dataclass(frozen=True, slots=True)
class WorkDir:
    """Where one member's file tools and commands run now."""

    path: Path  # the folder its tools and commands see as their root
    workspace: Path  # the project's workspace
    mode: Literal["worktree", "serial"]
    reason: str | None = None  # why not a worktree (serial mode), in the people's words
    task_key: str | None = None  # the task attempt the worktree belongs to
    branch: str | None = None


def workspace_of(settings: Settings, project: Project) -> Path:
    """The project's workspace folder (the default one under the data folder when none is set)."""
    if project.workspace:
        return Path(project.workspace)
    return settings.data.resolve() / WORKSPACES_DIR / str(project.id)


async def work_dir(core: Core, member: Member) -> WorkDir:
    """Where ``member`` works now; the default workspace is made on first use."""
    project = await core.db.read(lambda conn: projects_store.get(conn, member.project_id))
    if project is None:
        raise NotFoundError("no such project", code="no_project")
    workspace = workspace_of(core.settings, project)
    if not project.workspace:
        await asyncio.to_thread(workspace.mkdir, parents=True, exist_ok=True)
    return WorkDir(
        path=workspace,
        workspace=workspace,
        mode="serial",
        reason="尚未按任务尝试分配工作树 (No worktree per task attempt yet.)",
    )
