"""A project's workspace, and where in it each member works (docs/architecture.md, "Workspaces").

A project's workspace is the folder its members' file tools and commands work in: the one set
for the project, or by default ``<data>/workspaces/<project id>``, made on first use. Where a
member works inside it is a :class:`WorkDir`: its own git worktree while it works on a task
attempt, or the workspace itself, one writer at a time ("serial", with the reason).

Rules for a workspace a person sets (:func:`check_workspace`): an absolute path to an existing
folder, resolved (symlinks followed), inside the operator's roots (:func:`workspace_roots`: by
default ``<data>/workspaces`` only); never the data folder, a folder containing it or one inside
it other than under ``<data>/workspaces`` — so no file tool or command working in the workspace
can reach the database files. And a folder belongs to one project (:mod:`room.actions.tenancy`):
never one that is, lies inside or contains another live project's workspace or default folder,
checked in the write transaction that stores the path.

Git runs in worker threads, never in a write job and never on the send path: the wire
``workspace`` object (:func:`workspace_info`) is computed when a project is answered over HTTP
(or subscribed to) and cached on the services until the workspace, a merge or an attempt changes it.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from room.actions import tenancy
from room.actions.tenancy import default_workspace, workspaces_folder
from room.errors import BadRequestError, ForbiddenError, NotFoundError
from room.infra import worktrees
from room.infra.git import Git
from room.rules.entities import Member, Project
from room.services import Services
from room.settings import Settings
from room.store import Tx
from room.store import attempts as attempts_store
from room.store import audit as audit_store
from room.store import projects as projects_store
from room.store.dialect import Connection

WORKTREES_DIR = "worktrees"  # under the data folder: one folder per attempt
MAX_PATH_CHARS = 4096
NO_ATTEMPT_REASON = (
    "没有进行中的任务尝试：在工作区里一次只允许一个成员写入 "
    "(No task attempt in progress: one writer at a time in the workspace.)"
)


@dataclass(frozen=True, slots=True)
class WorkDir:
    """Where one member's file tools and commands run now."""

    path: Path  # the folder its tools and commands see as their root
    workspace: Path  # the project's workspace
    mode: Literal["worktree", "serial"]
    reason: str | None = None  # why not a worktree (serial mode), in the people's words
    task_key: str | None = None  # the task attempt the worktree belongs to
    branch: str | None = None


def worktrees_root(settings: Settings) -> Path:
    return settings.data.resolve() / WORKTREES_DIR


def workspace_of(settings: Settings, project: Project) -> Path:
    """The project's workspace folder (the default one under the data folder when none is set).

    A stored workspace is checked again on every use (without touching the disk beyond the data
    folder's own path): one set before today's rules, or outside roots the operator has since
    narrowed, is refused with ``workspace_refused`` instead of letting the file tools, commands
    or evidence read there. (Whether it overlaps another project's is checked when it is stored,
    :mod:`room.actions.tenancy`; overlaps stored before that are listed in the boot report.)"""
    if not project.workspace:
        return default_workspace(settings, project.id)
    path = Path(project.workspace)
    data = settings.data.resolve()
    slots = workspaces_folder(settings)
    in_slots = slots in path.parents
    if (
        path in (Path("/"), data, slots)
        or (not in_slots and _within(path, SYSTEM_FOLDERS))
        or (data in path.parents and not in_slots)
        or path in data.parents
        or not _within(path, workspace_roots(settings))
    ):
        raise _refuse("workspace_refused", "这个项目的工作区不再被允许 (This project's workspace is "
                      "no longer allowed here.)", str(path), "请项目所有者重新设置工作区 (The "
                      "project's owner sets a new workspace.)")  # fmt: skip
    return path


def floating(core: Services, conn: Connection, project_id: int) -> bool:
    """Whether the project's agent work may run on any node of a cluster: its workspace is in
    the folder the operator declared shared (``workspaces_dir``), so it needs no home node —
    the project's lease says which node works in it (docs/cluster.md, "A shared workspaces
    folder"). False without that setting, and for a workspace elsewhere (on a node's disk)."""
    if core.settings.workspaces_dir is None:
        return False
    project = projects_store.get(conn, project_id)
    if project is None:
        return False
    try:
        path = workspace_of(core.settings, project)
    except BadRequestError:  # refused: it runs nowhere anyway
        return False
    return workspaces_folder(core.settings) in path.parents


def _refuse(code: str, message: str, path: str, hint: str) -> BadRequestError:
    return BadRequestError(message, code=code, path=path[:300], hint=hint)


# Folders no project works in: the system's own, and a home folder itself or its dot-folders
# (keys, shell and tool configuration). The file tools run in the server's process, so a
# workspace there would show them to every agent of the project.
SYSTEM_FOLDERS = tuple(
    Path(p)
    for p in ("/etc", "/proc", "/sys", "/dev", "/boot", "/usr", "/bin", "/sbin", "/lib",
              "/lib32", "/lib64", "/run", "/var/lib", "/var/run", "/var/log", "/var/spool")
)  # fmt: skip


def _within(path: Path, roots: tuple[Path, ...]) -> bool:
    return any(path == root or root in path.parents for root in roots)


def _system_folder(real: Path) -> bool:
    if real == Path("/") or _within(real, SYSTEM_FOLDERS):
        return True
    homes = {Path.home().resolve(), Path("/root"), *Path("/home").glob("*")}
    for home in homes:
        if real == home:
            return True
        if home in real.parents and real.relative_to(home).parts[0].startswith("."):
            return True
    return False


def workspace_roots(settings: Settings) -> tuple[Path, ...]:
    """Where workspaces (and research references) may be, resolved: the operator's
    ``workspace_roots``, or by default ``<data>/workspaces`` only — on a shared server a wider
    root is the operator's explicit choice. A project's own default is allowed whatever the
    roots."""
    if not settings.workspace_roots:
        return (workspaces_folder(settings),)
    return tuple(Path(root).expanduser().resolve() for root in settings.workspace_roots)


def roots_report(settings: Settings) -> dict[str, Any]:
    """The roots in effect for the boot report, and whether they are the default or the
    operator's ``workspace_roots`` setting."""
    return {
        "roots": [str(root) for root in workspace_roots(settings)],
        "source": "setting" if settings.workspace_roots else "default",
        # Where the default workspaces are, and whether it is the folder a cluster shares.
        "defaults": str(workspaces_folder(settings)),
        "shared": settings.workspaces_dir is not None,
    }


def check_workspace(settings: Settings, raw: str, project_id: int | None = None) -> str:
    """The resolved absolute path of a workspace a person gave, or a structured 400.

    Blocking (stats the path): call it in a worker thread."""
    text = raw.strip()
    if not text or len(text) > MAX_PATH_CHARS or "\0" in text:
        raise _refuse("bad_workspace", "工作区路径无效 (The workspace path is not usable.)",
                      text, "给出一个已有目录的绝对路径 (Give the absolute path of a folder.)")  # fmt: skip
    path = Path(text).expanduser()
    if not path.is_absolute():
        raise _refuse("workspace_not_absolute", "工作区须是绝对路径 (The workspace must be an "
                      "absolute path.)", text, "例如 /srv/work/app (e.g. /srv/work/app)")  # fmt: skip
    try:
        real = path.resolve(strict=True)
    except (OSError, RuntimeError):
        raise _refuse("workspace_missing", "工作区目录不存在 (The workspace folder does not "
                      "exist.)", text, "先创建这个目录 (Create the folder first.)") from None  # fmt: skip
    if not real.is_dir():
        raise _refuse("workspace_not_a_folder", "工作区必须是目录 (The workspace must be a "
                      "folder.)", text, "给出目录，不要给文件 (Name a folder, not a file.)")  # fmt: skip
    own_default = project_id is not None and real == default_workspace(settings, project_id)
    # The data folder's own workspaces folder is the server's to choose (its path may be in
    # /var/lib or a dot-folder of a home): the system rule is for folders outside it.
    in_slots = workspaces_folder(settings) in real.parents
    if _system_folder(real) and not in_slots:
        raise _refuse("workspace_system", "工作区不能是系统目录或主目录本身 (The workspace cannot be a "
                      "system folder, a home folder itself or a dot-folder in it: agents would read "
                      "and change it.)", text, "选一个项目自己的目录 (Pick the project's own folder, "
                      "e.g. /srv/work/app.)")  # fmt: skip
    roots = workspace_roots(settings)
    if not own_default and not _within(real, roots):
        listed = "、".join(str(root) for root in roots)
        raise _refuse("workspace_outside_roots", "工作区须在服务器允许的目录之内 (The workspace must "
                      "be inside a folder this server allows.)", text, f"选 {listed} 之内的目录；"
                      "服务器管理员用 ROOM_WORKSPACE_ROOTS 设置 (Pick a folder inside one of them; "
                      "the operator sets ROOM_WORKSPACE_ROOTS.)")  # fmt: skip
    data = settings.data.resolve()
    if real == data:
        raise _refuse("workspace_is_data", "工作区不能是数据目录 (The workspace cannot be the "
                      "data folder.)", text, "选一个数据目录之外的目录 (Pick a folder outside "
                      f"{data}.)")  # fmt: skip
    # <data>/workspaces itself (it holds every default) is refused as in use, in the write.
    if data in real.parents and not in_slots and real != workspaces_folder(settings):
        raise _refuse("workspace_in_data", "工作区不能在数据目录之内 (The workspace cannot be "
                      "inside the data folder, except under its workspaces folder.)", text,
                      f"选一个 {data} 之外的目录，或不设置以使用默认工作区 (Pick a folder outside "
                      "it, or none for the default.)")  # fmt: skip
    if real in data.parents:
        raise _refuse("workspace_contains_data", "工作区不能包含数据目录 (The workspace cannot "
                      "contain the data folder: the database would be reachable.)", text,
                      f"选一个不包含 {data} 的目录 (Pick a folder that does not contain it.)")  # fmt: skip
    return str(real)


def readable_target(settings: Settings, target: str, kind: str) -> str:
    """The real path of an absolute folder (``kind`` ``dir``) or file (``file``) a research run
    may read outside its workspace (a project reference, docs/research.md), held to the rules of
    a workspace: inside ``workspace_roots``, never a system folder, a home folder itself or a
    dot-folder in it, never the data folder, one containing it or one inside it other than under
    ``<data>/workspaces``. Symlinks are followed here, once: the run binds the real path.
    Blocking (stats the path): call it in a worker thread. Refusals are
    ``research_reference_outside`` / ``research_reference_missing``. Whether another project
    holds the path is the caller's check, in the database
    (:func:`room.actions.tenancy.ensure_free`, ``workspace_in_use``)."""

    def outside(why: str) -> BadRequestError:
        return BadRequestError(
            f"参考的路径不能读：{why} (The reference's path cannot be read by research: {why}.)",
            code="research_reference_outside", field="scope.references", path=target[:300],
        )  # fmt: skip

    path = Path(target)
    if not path.is_absolute() or "\0" in target or len(target) > MAX_PATH_CHARS:
        raise outside("not an absolute path")
    try:
        real = path.resolve(strict=True)
    except (OSError, RuntimeError):
        real = None
    if real is None or not (real.is_dir() if kind == "dir" else real.is_file()):
        raise BadRequestError(
            f"参考的{'目录' if kind == 'dir' else '文件'}不存在 (The reference's "
            f"{'folder' if kind == 'dir' else 'file'} does not exist.)",
            code="research_reference_missing", field="scope.references", path=target[:300],
        )  # fmt: skip
    folder = real if kind == "dir" else real.parent
    slots = workspaces_folder(settings)
    in_slots = real == slots or slots in real.parents
    if _system_folder(folder) and not in_slots:
        raise outside("a system folder, a home folder itself or a dot-folder")
    if not _within(folder, workspace_roots(settings)):
        raise outside("outside the folders this server allows (workspace_roots)")
    data = settings.data.resolve()
    if real == data or real in data.parents or (data in real.parents and not in_slots):
        raise outside("the data folder")
    return str(real)


async def checked_workspace(
    settings: Settings, raw: str | None, project_id: int | None = None
) -> str | None:
    """``raw`` checked off the event loop; None (the default workspace) stays None."""
    if raw is None or not raw.strip():
        return None
    path = await asyncio.to_thread(check_workspace, settings, raw, project_id)
    # The project's own default, named by its path, is the default: stored as a path inside the
    # data folder, every later use would refuse it (workspace_of).
    if project_id is not None and path == str(default_workspace(settings, project_id)):
        return None
    return path


# -- the wire object ----------------------------------------------------------------------------


def _inspect(settings: Settings, git: Git, project: Project) -> dict[str, Any]:
    try:
        path = workspace_of(settings, project)
    except BadRequestError as exc:
        return {"path": project.workspace, "default": False, "git": False, "mode": "refused",
                "reason": exc.message, "reason_code": exc.code, "head": None}  # fmt: skip
    if not project.workspace:
        path.mkdir(parents=True, exist_ok=True)  # the default is made on first use
    try:
        info = worktrees.inspect(path, git=git)
    except worktrees.GitFailedError as exc:
        return {"path": str(path), "default": not project.workspace, "git": False,
                "mode": "serial", "reason": exc.message, "reason_code": "git_failed",
                "head": None}  # fmt: skip
    return {
        "path": str(path),
        "default": not project.workspace,
        "git": info.root is not None,
        "mode": info.mode,
        "reason": info.reason,
        "reason_code": info.reason_code,
        "head": info.head_oneline,
        "base": info.base,
    }


async def workspace_info(core: Services, project: Project) -> dict[str, Any]:
    """The project's ``workspace`` object on the wire (cached; git runs in a worker thread)."""
    cached = core.workspaces.get(project.id)
    if cached is not None and cached["path"] == str(
        project.workspace or default_workspace(core.settings, project.id)
    ):
        return cached
    info = await asyncio.to_thread(_inspect, core.settings, core.git, project)
    core.workspaces[project.id] = info
    return info


def forget_info(core: Services, project_id: int) -> None:
    core.workspaces.pop(project_id, None)


def git_lock(core: Services, project_id: int) -> asyncio.Lock:
    lock = core.git_locks.get(project_id)
    if lock is None:
        lock = core.git_locks[project_id] = asyncio.Lock()
    return lock


async def project_wire(core: Services, project: Project) -> dict[str, Any]:
    """``{"workspace": …}`` to merge into a project answered over HTTP or a subscription."""
    return {"workspace": await workspace_info(core, project)}


async def set_workspace(core: Services, member: Member, raw: str | None) -> dict[str, Any]:
    """An owner sets the project's workspace (None: back to the default, which is always its
    own); audited. The path is resolved first, off the event loop; whether another live project
    holds it is checked in the write that stores it (``workspace_in_use``, 409)."""
    if member.kind != "human":
        raise ForbiddenError("只有人类成员可以设置工作区 (Only people set the workspace.)",
                             code="human_only")  # fmt: skip
    if not member.is_owner:
        raise ForbiddenError("只有项目所有者可以设置工作区 (Only an owner sets the workspace.)",
                             code="not_owner")  # fmt: skip
    project_id = member.project_id
    path = await checked_workspace(core.settings, raw, project_id)

    def job(conn: Connection, tx: Tx) -> Project:
        before = projects_store.get(conn, project_id)
        if before is None:
            raise NotFoundError("no such project", code="no_project")
        if path is not None:
            tenancy.ensure_free(
                conn, core.settings, path, project_id=project_id, user_id=member.user_id
            )
        projects_store.set_workspace(conn, project_id, path, tx.now)
        audit_store.record(
            conn, now=tx.now, actor_kind="human", actor_id=member.id, project_id=project_id,
            action="project.workspace", outcome="ok",
            detail={"from": before.workspace, "to": path},
        )  # fmt: skip
        after = projects_store.get(conn, project_id)
        assert after is not None
        return after

    project = await core.db.write(job, locks=(member.project_id,))
    forget_info(core, project_id)
    return {"workspace": await workspace_info(core, project)}


# -- where a member works -----------------------------------------------------------------------


async def work_dir(core: Services, member: Member) -> WorkDir:
    """Where ``member`` works now: the worktree of its in-progress task's latest open attempt,
    else the workspace in serial mode with the reason. The default workspace is made on first
    use."""

    def read(conn: Connection) -> tuple[Project | None, Any]:
        return (
            projects_store.get(conn, member.project_id),
            attempts_store.current_for_member(conn, member.id),
        )

    project, current = await core.db.read(read)
    if project is None:
        raise NotFoundError("no such project", code="no_project")
    workspace = workspace_of(core.settings, project)
    if not project.workspace:
        await asyncio.to_thread(workspace.mkdir, parents=True, exist_ok=True)
    if current is not None:
        attempt, key = current
        path = Path(attempt.path)
        if await asyncio.to_thread(path.is_dir):
            return WorkDir(path=path, workspace=workspace, mode="worktree", task_key=key,
                           branch=attempt.branch)  # fmt: skip
    info = await workspace_info(core, project)
    reason = info["reason"] if info["mode"] == "serial" else NO_ATTEMPT_REASON
    return WorkDir(path=workspace, workspace=workspace, mode="serial", reason=reason)
