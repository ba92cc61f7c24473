"""A folder belongs to one project (docs/architecture.md, "Workspaces").

A project's workspace is its stored path, or by default ``<data>/workspaces/<project id>``
(:func:`default_workspace`). A folder given as a workspace or as a research reference must not
equal, lie inside or contain the workspace of another *live* project — every project that is not
purged: a paused, archived or trashed one keeps its folder (it can be restored and must find its
files there); a purged tombstone releases it.

The defaults live under one folder, ``<data>/workspaces`` (:func:`workspaces_folder`), which
therefore belongs to nobody: it contains every default. A sub-folder there named by digits is a
project's default: it belongs to that project while the project is live — also while it works in
another folder, since it may go back to its default at any time — and a name no project has yet
(``<data>/workspaces/42``, or ``007``, which no id is spelled as) is kept for the project that
would get it, so a later project never starts in a folder someone already took. Any other name
under ``<data>/workspaces`` is an ordinary folder.

Folders overlap when they are equal or one is an ancestor of the other, compared by their path
parts (``/srv/a`` and ``/srv/ab`` do not overlap). Paths arrive resolved (symlinks followed, in a
worker thread, by the caller); :func:`ensure_free` reads the database and runs inside the write
transaction that stores the path, so two requests racing for one folder cannot both take it.

The refusal is ``workspace_in_use`` (409). It names the other project (``project_id``,
``project_name``) only to a person who is a member of it: anyone else learns that the folder is
taken, not by whom.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from room.errors import ConflictError
from room.rules.entities import Project
from room.settings import Settings
from room.store import members as members_store
from room.store import projects as projects_store
from room.store.dialect import Connection

WORKSPACES_DIR = "workspaces"  # under the data folder: the default workspaces
MAX_OVERLAPS_REPORTED = 50


def workspaces_folder(settings: Settings) -> Path:
    """``<data>/workspaces`` (or the operator's shared ``workspaces_dir``), symlinks followed
    (a symlinked one must not let its real path escape the defaults' rules). Touches the disk
    only to read symlinks."""
    if settings.workspaces_dir is not None:
        return settings.workspaces_dir.expanduser().resolve()
    return (settings.data.resolve() / WORKSPACES_DIR).resolve()


def default_workspace(settings: Settings, project_id: int) -> Path:
    return workspaces_folder(settings) / str(project_id)


def overlap(a: Path, b: Path) -> bool:
    """Whether two resolved paths are equal or one lies inside the other (by their parts)."""
    return a == b or a in b.parents or b in a.parents


@dataclass(frozen=True, slots=True)
class Holder:
    """Who holds a folder that overlaps a path: a live ``project`` (its workspace or its default
    folder), or nobody yet (``project`` None): ``<data>/workspaces`` itself, or a default folder
    kept for a project id not given yet."""

    project: Project | None


def holder_of(
    conn: Connection, settings: Settings, path: Path, project_id: int | None
) -> Holder | None:
    """Who, besides project ``project_id`` (None: a project being created), holds a folder that
    ``path`` (resolved) equals, lies inside or contains; None when nobody does."""
    slots = workspaces_folder(settings)
    if path == slots or path in slots.parents:
        return Holder(None)
    if slots in path.parents:
        name = path.relative_to(slots).parts[0]
        if name.isascii() and name.isdigit():
            owner = projects_store.row_id(name)
            if owner is None or str(owner) != name:
                return Holder(None)
            if owner != project_id:
                project = projects_store.get(conn, owner)
                if project is None or project.state != "purged":
                    return Holder(project)
    # Every default folder was answered above (a path containing one contains ``slots`` or is
    # one; a path inside one lies under a digits name): what is left are the stored folders.
    for other_id, stored in projects_store.live_workspaces(conn):
        if other_id != project_id and overlap(path, Path(stored)):
            return Holder(projects_store.get(conn, other_id))
    return None


def in_use_error(
    conn: Connection, holder: Holder, path: str, user_id: int | None, **details: Any
) -> ConflictError:
    """The ``workspace_in_use`` refusal; it names the holder only to a person who is one of its
    members (``user_id``; None — an agent, a research session — is never told)."""
    named: dict[str, Any] = {}
    project = holder.project
    if project is not None and user_id is not None:
        member = members_store.for_user(conn, project.id, user_id)
        if member is not None and member.status != "left":
            named = {"project_id": project.id, "project_name": project.name}
    return ConflictError(
        "这个目录已属于另一个项目：与它的工作区相同、在其中或包含它 (This folder belongs to another "
        "project: it is, lies inside or contains that project's workspace.)",
        code="workspace_in_use", path=path[:300], **named, **details,
        hint="选一个不属于其他项目的目录；工作区也可不设置，用默认的 (Pick a folder no other project "
        "holds; a workspace may also be left unset for the default.)",
    )  # fmt: skip


def ensure_free(
    conn: Connection,
    settings: Settings,
    path: str,
    *,
    project_id: int | None,
    user_id: int | None,
    **details: Any,
) -> None:
    """Refuse (``workspace_in_use``) a resolved ``path`` another live project holds. Call it in
    the write transaction that stores the path."""
    holder = holder_of(conn, settings, Path(path), project_id)
    if holder is not None:
        raise in_use_error(conn, holder, path, user_id, **details)


def overlaps(conn: Connection) -> dict[str, Any]:
    """Live projects whose stored workspaces overlap (set before a folder belonged to one
    project), for the operator's boot report: ``{"count", "pairs": [{"projects", "paths"}]}``
    (at most :data:`MAX_OVERLAPS_REPORTED` pairs). Sorted by their parts, a folder comes right
    before the folders inside it, so one pass with a stack of the current ancestors finds them."""
    held = sorted((Path(stored).parts, pid) for pid, stored in projects_store.live_workspaces(conn))
    pairs: list[dict[str, Any]] = []
    count = 0
    stack: list[tuple[tuple[str, ...], int]] = []
    for parts, pid in held:
        while stack and parts[: len(stack[-1][0])] != stack[-1][0]:
            stack.pop()
        for outer, outer_id in stack:
            count += 1
            if len(pairs) < MAX_OVERLAPS_REPORTED:
                pairs.append({"projects": [outer_id, pid],
                              "paths": [str(Path(*outer)), str(Path(*parts))]})  # fmt: skip
        stack.append((parts, pid))
    return {"count": count, "pairs": pairs}
