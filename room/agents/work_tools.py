"""Work tools an agent session may call: the workspace's files (``fs_list``, ``fs_glob``,
``fs_read``, ``fs_search``, ``fs_write``, ``fs_edit``) and one command at a time (``shell``).
See docs/agents.md for what each role gets and the error codes.

Each runs where the member works now (:func:`room.actions.workspaces.work_dir`: its task attempt's
worktree, or the workspace itself in ``serial`` mode, where the write tools and ``shell`` take the
project's one-writer lock). File operations are :mod:`room.infra.files` in a worker thread; commands
are :mod:`room.infra.sandbox` as the start-up probe found it (:class:`room.agents.tools.WorkEnv`),
with the project's ``network`` and ``unsandboxed`` settings and its limits. Every command is
recorded (:func:`room.actions.task_updates.record_command_result`) and the model is told its
``command_result_id`` to cite as evidence. Refusals are :class:`~room.errors.RoomError` s, which the
toolbox turns into ``{"ok": false, "error": code, "message", "details"?}``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from types import MappingProxyType
from typing import Any

from room.actions import task_updates as update_actions
from room.actions import turns as turn_actions
from room.actions.workspaces import WorkDir, work_dir
from room.agents.tools import Tool, ToolContext, ToolReply
from room.errors import RoomError
from room.infra import files
from room.infra.supervise import FILE_BYTES, CommandLimits
from room.providers import ToolSpec
from room.store import projects as projects_store

MAX_COMMAND_CHARS = 8000
WRITER_WAIT_SECS = 30.0  # how long a write waits for another member's write in serial mode
KILLED_EXIT_CODE = -1  # how a killed command's exit code is recorded as evidence


class NotIsolatedError(RoomError):
    """No sandbox on this server and the project has not allowed unsandboxed commands."""

    code = "not_isolated"
    http_status = 503


class WriterBusyError(RoomError):
    """Serial mode: another member held the project's one-writer lock for too long."""

    code = "writer_busy"
    http_status = 409


class CommandTimeSpentError(RoomError):
    """This turn's commands have used the project's ``command_secs_per_turn``."""

    code = "command_time_spent"
    http_status = 429


class DiskBudgetError(RoomError):
    """The folder the member writes in has used the project's ``workspace_disk_mib``."""

    code = "disk_budget_exceeded"
    http_status = 507


class NoWorkEnvError(RoomError):
    code = "tool_unavailable"
    http_status = 503


def _ok(data: Mapping[str, Any]) -> str:
    return json.dumps({"ok": True, **data}, ensure_ascii=False)


def _text(args: Mapping[str, Any], key: str, default: str | None = None) -> str:
    value = args.get(key, default)
    if not isinstance(value, str):
        raise ValueError(f"{key} must be a string")
    return value


def _number(args: Mapping[str, Any], key: str) -> int | None:
    value = args.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError(f"{key} must be an integer")
    return value


@asynccontextmanager
async def _writing(ctx: ToolContext, where: WorkDir) -> AsyncIterator[None]:
    """Serial mode: one writer at a time in the project's workspace (a stop ends the wait)."""
    if where.mode != "serial" or ctx.work is None:
        yield
        return
    lock = ctx.work.writers.of(ctx.member.project_id)
    acquire = asyncio.ensure_future(lock.acquire())
    waits: set[asyncio.Future[Any]] = {acquire}
    stop = asyncio.ensure_future(ctx.turn.cancel.wait()) if ctx.turn is not None else None
    if stop is not None:
        waits.add(stop)
    try:
        await asyncio.wait(waits, timeout=WRITER_WAIT_SECS, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if stop is not None:
            stop.cancel()
    if not acquire.done():
        acquire.cancel()
        raise WriterBusyError(
            "另一位成员正在工作区里写入（串行模式），稍后再试 "
            "(Another member is writing in the shared workspace (serial mode); try again later.)",
            reason=where.reason,
        )
    try:
        yield
    finally:
        lock.release()


# -- files ----------------------------------------------------------------------------------------


async def _fs_list(ctx: ToolContext, args: dict[str, Any]) -> str:
    where = await work_dir(ctx.core, ctx.member)
    depth = _number(args, "depth") or 1
    result = await asyncio.to_thread(files.list_dir, where.path, _text(args, "path", "."), depth)
    return _ok(result.to_dict())


async def _fs_glob(ctx: ToolContext, args: dict[str, Any]) -> str:
    where = await work_dir(ctx.core, ctx.member)
    result = await asyncio.to_thread(files.glob, where.path, _text(args, "pattern"))
    return _ok(result.to_dict())


async def _fs_read(ctx: ToolContext, args: dict[str, Any]) -> str:
    where = await work_dir(ctx.core, ctx.member)
    result = await asyncio.to_thread(
        files.read,
        where.path,
        _text(args, "path"),
        _number(args, "start_line"),
        _number(args, "end_line"),
    )
    return _ok(result.to_dict())


async def _fs_search(ctx: ToolContext, args: dict[str, Any]) -> str:
    where = await work_dir(ctx.core, ctx.member)
    glob = args.get("glob")
    limit = min(_number(args, "limit") or files.SEARCH_LIMIT, files.SEARCH_LIMIT)
    result = await asyncio.to_thread(
        files.search,
        where.path,
        _text(args, "pattern"),
        _text(args, "path", "."),
        glob if isinstance(glob, str) and glob else None,
        limit,
    )
    return _ok(result.to_dict())


# -- the disk budget -----------------------------------------------------------------------------

WATCH_SECS = 2.0  # how often a running command's folder is counted against the budget


async def _budget(ctx: ToolContext) -> int:
    limits = (
        ctx.turn.limits if ctx.turn else await turn_actions.limits(ctx.core, ctx.member.project_id)
    )
    return limits.workspace_disk_mib * 1024 * 1024


def _over(where: WorkDir, used: int, budget: int, adding: int = 0) -> DiskBudgetError:
    mib = 1024 * 1024
    return DiskBudgetError(
        f"工作区已用 {used // mib} MiB，磁盘上限 {budget // mib} MiB；先删除不需要的文件（构建产物、"
        f"缓存） (The folder you write in uses {used // mib} MiB of its {budget // mib} MiB disk "
        "budget; delete what is not needed — build output, caches — before writing more.)",
        used_bytes=used, budget_bytes=budget, adding_bytes=adding, mode=where.mode,
    )  # fmt: skip


async def _make_room(ctx: ToolContext, where: WorkDir, adding: int) -> None:
    """Refuse a file-tool write that would take the folder past its disk budget."""
    if ctx.work is None:
        return
    budget = await _budget(ctx)
    used = await ctx.work.disk.used(where.path)
    if used + adding > budget:
        raise _over(where, used, budget, adding)


async def _fs_write(ctx: ToolContext, args: dict[str, Any]) -> ToolReply:
    where = await work_dir(ctx.core, ctx.member)
    path, content = _text(args, "path"), _text(args, "content")
    size = len(content.encode("utf-8", "surrogatepass"))
    async with _writing(ctx, where):
        await _make_room(ctx, where, size)
        result = await asyncio.to_thread(files.write, where.path, path, content)
    if ctx.work is not None:
        ctx.work.disk.add(where.path, result.bytes_written)
    return ToolReply(
        _ok(result.to_dict()), {"file": {"path": result.path, "bytes": result.bytes_written}}
    )


async def _fs_edit(ctx: ToolContext, args: dict[str, Any]) -> ToolReply:
    where = await work_dir(ctx.core, ctx.member)
    path = _text(args, "path")
    hunks = args.get("hunks")
    async with _writing(ctx, where):
        await _make_room(ctx, where, 0)
        if hunks is not None:
            result = await asyncio.to_thread(files.edit_patch, where.path, path, hunks)
        else:
            old, new = _text(args, "old"), _text(args, "new")
            result = await asyncio.to_thread(files.edit, where.path, path, old, new)
    return ToolReply(
        _ok(result.to_dict()), {"file": {"path": result.path, "bytes": result.bytes_written}}
    )


# -- commands -------------------------------------------------------------------------------------


async def _shell(ctx: ToolContext, args: dict[str, Any]) -> ToolReply:
    command = _text(args, "command").strip()
    if not command or len(command) > MAX_COMMAND_CHARS or "\x00" in command:
        raise ValueError(f"command must be 1–{MAX_COMMAND_CHARS} characters, without NUL")
    if ctx.work is None:
        raise NoWorkEnvError("这个服务器没有配置命令运行器 (No command runner on this server.)")
    sandbox = ctx.work.sandbox
    project_id = ctx.member.project_id
    stored = await ctx.core.db.read(lambda conn: projects_store.settings(conn, project_id))
    # Both must agree: the operator lets owners decide (a command without a sandbox sees what
    # the server sees), and the project's owner turns it on.
    unsandboxed = stored.get("unsandboxed") is True and ctx.core.settings.allow_unsandboxed_commands
    if not sandbox.info.isolated and not unsandboxed:
        raise NotIsolatedError(
            "命令无法隔离运行，未允许不隔离执行 (Not isolated: commands cannot be sandboxed on "
            f"this server ({sandbox.info.reason}), and unsandboxed execution needs both the "
            "server's allow_unsandboxed_commands and the project owner's setting.)",
            reason=sandbox.info.reason,
        )
    limits = ctx.turn.limits if ctx.turn else turn_actions.limits_of(ctx.core.settings, stored)
    spent = ctx.turn.command_secs if ctx.turn else 0.0
    remaining = limits.command_secs_per_turn - spent
    if remaining <= 0:
        raise CommandTimeSpentError(
            f"本轮命令时间已用完（{limits.command_secs_per_turn:g} 秒） (This turn's commands "
            f"have used their {limits.command_secs_per_turn:g} seconds.)",
            limit_secs=limits.command_secs_per_turn,
        )
    where = await work_dir(ctx.core, ctx.member)
    # A repository's .git stays read-only to commands: whoever can write it can make the
    # server's own git run a program (a filter, a merge driver). In a worktree the common
    # repository is readable (so `git status`, `git log` and `git diff` work) and the worktree's
    # .git file cannot be pointed elsewhere; the server commits an attempt's work when a person
    # merges it.
    protected = [where.path / ".git"]
    common = where.workspace / ".git"
    if where.mode == "worktree" and common.is_dir() and not common.is_symlink():
        protected.append(common)
    budget = limits.workspace_disk_mib * 1024 * 1024
    async with _writing(ctx, where):
        disk = ctx.work.disk
        used = await disk.used(where.path)  # the last count (each command ends with a fresh one)
        # No one file past what is left (the rest of the budget is watched while it runs); a
        # folder already over its budget still runs commands, to clean up, writing nothing.
        file_cap = max(1, min(FILE_BYTES, budget - used))
        async with _watched(ctx, where, budget) as (stop, overran):
            result = await sandbox.run(
                command,
                cwd=where.path,
                protected=protected,
                network=stored.get("network") is True,
                limits=CommandLimits(
                    timeout_secs=min(limits.command_timeout_secs, remaining),
                    output_bytes=limits.command_output_bytes,
                    file_bytes=file_cap,
                ),
                cancel=stop,
                allow_unsandboxed=unsandboxed,
            )
        used = await disk.used(where.path, fresh=True)
    if ctx.turn is not None:
        ctx.turn.command_secs += result.duration_secs
    record_id = await update_actions.record_command_result(
        ctx.core,
        ctx.member,
        turn_id=ctx.turn_id,
        command=command,
        exit_code=result.exit_code if result.exit_code is not None else KILLED_EXIT_CODE,
        duration_ms=round(result.duration_secs * 1000),
        output=result.output,
        whole=(result.output_bytes, result.output_sha256),
    )
    killed = "disk_budget" if overran.is_set() else result.killed
    shown = {
        "command": command,
        "exit_code": result.exit_code,
        "duration_secs": round(result.duration_secs, 3),
        "output": result.output,
        "truncated": result.truncated_bytes > 0,
        "sandboxed": result.sandboxed,
        "killed": killed,
        "command_result_id": record_id,
    }
    data: dict[str, Any] = {
        **shown,
        "truncated_bytes": result.truncated_bytes,
        "cwd_mode": where.mode,
    }
    if used >= budget or killed in ("disk_budget", "SIGXFSZ"):
        over = _over(where, used, budget)
        data["disk"] = {"used_bytes": used, "budget_bytes": budget, "message": over.message}
    return ToolReply(_ok(data), {"command": shown})


@asynccontextmanager
async def _watched(
    ctx: ToolContext, where: WorkDir, budget: int
) -> AsyncIterator[tuple[asyncio.Event, asyncio.Event]]:
    """``(stop, overran)`` for a command: ``stop`` is set when the turn is stopped, or — then
    ``overran`` too — when a count of the folder finds it past its disk budget."""
    stop, overran = asyncio.Event(), asyncio.Event()
    assert ctx.work is not None
    disk = ctx.work.disk

    async def watch() -> None:
        while True:
            await asyncio.sleep(WATCH_SECS)
            if await disk.used(where.path, fresh=True) > budget:
                overran.set()
                stop.set()
                return

    async def relay() -> None:
        assert ctx.turn is not None
        await ctx.turn.cancel.wait()
        stop.set()

    tasks = [asyncio.ensure_future(watch())]
    if ctx.turn is not None:
        tasks.append(asyncio.ensure_future(relay()))
    try:
        yield stop, overran
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _spec(name: str, description: str, properties: dict[str, Any], required: list[str]) -> ToolSpec:
    return ToolSpec(
        name=name,
        description=description,
        parameters={"type": "object", "properties": properties, "required": required},
    )


_PATH = {"type": "string", "description": "相对于工作目录的路径（不能以 / 开头，不能含 ..）"}

WORK_TOOLS: Mapping[str, Tool] = MappingProxyType(
    {
        "fs_list": Tool(
            _spec(
                "fs_list",
                f"列出工作目录里的一个文件夹（按名字排序，隐藏 .git，不进入符号链接）。"
                f"depth 1–{files.MAX_LIST_DEPTH}，最多 {files.LIST_LIMIT} 项（truncated 表示还有）。",
                {
                    "path": {**_PATH, "description": "文件夹路径，默认 ."},
                    "depth": {"type": "integer", "description": "向下几层，默认 1"},
                },
                [],
            ),
            _fs_list,
            side_effect=False,
        ),
        "fs_glob": Tool(
            _spec(
                "fs_glob",
                f"按通配符找文件（如 src/**/*.py；不含 .git、.gitignore 忽略的文件和符号链接），"
                f"最多 {files.GLOB_LIMIT} 个。",
                {"pattern": {"type": "string", "description": "通配符，相对于工作目录"}},
                ["pattern"],
            ),
            _fs_glob,
            side_effect=False,
        ),
        "fs_read": Tool(
            _spec(
                "fs_read",
                f"读一个 UTF-8 文本文件的若干行（行号从 1 起）。一次最多返回 "
                f"{files.MAX_READ_BYTES // 1024} KB（truncated 时从 end_line+1 继续读）；"
                f"超过 {files.MAX_READ_FILE_BYTES // 1024**2} MB 的文件、二进制文件和非 UTF-8 "
                "文件会被拒绝并说明原因。",
                {
                    "path": _PATH,
                    "start_line": {"type": "integer", "description": "起始行（含），默认 1"},
                    "end_line": {"type": "integer", "description": "结束行（含），默认到末尾"},
                },
                ["path"],
            ),
            _fs_read,
            side_effect=False,
        ),
        "fs_search": Tool(
            _spec(
                "fs_search",
                f"在工作目录里按正则表达式搜索文本行（跳过 .git、.gitignore 忽略的文件、二进制"
                f"和超过 {files.MAX_SEARCH_FILE_BYTES // 1024**2} MB 的文件），每行一条结果，"
                f"最多 {files.SEARCH_LIMIT} 条，整次搜索最多 {files.SEARCH_TIMEOUT_SECS:g} 秒。",
                {
                    "pattern": {"type": "string", "description": "正则表达式（多行模式）"},
                    "path": {**_PATH, "description": "在哪个文件夹或文件里搜，默认 ."},
                    "glob": {"type": "string", "description": "只搜匹配的文件，如 *.py"},
                    "limit": {"type": "integer", "description": "最多几条结果"},
                },
                ["pattern"],
            ),
            _fs_search,
            side_effect=False,
        ),
        "fs_write": Tool(
            _spec(
                "fs_write",
                f"创建或整体覆盖一个文本文件（UTF-8，最多 {files.MAX_WRITE_BYTES // 1024} KB，"
                "自动创建上级文件夹；原子写入；不通过符号链接写）。改动已有文件的一部分请用 fs_edit。",
                {"path": _PATH, "content": {"type": "string", "description": "完整的新内容"}},
                ["path", "content"],
            ),
            _fs_write,
            side_effect=True,
        ),
        "fs_edit": Tool(
            _spec(
                "fs_edit",
                "修改一个已有的文本文件：把恰好出现一次的 old 换成 new；或者给 hunks "
                '（[{"old": …, "new": …}, …]，按顺序应用，每段的 old 都必须恰好出现一次，'
                "任何一段失败就什么都不写）。出现 0 次或多次时报错并给出次数。",
                {
                    "path": _PATH,
                    "old": {"type": "string", "description": "要替换的原文（照抄，含空白）"},
                    "new": {"type": "string", "description": "替换成的文本"},
                    "hunks": {
                        "type": "array",
                        "description": "多段替换（给了它就不用 old/new）",
                        "items": {
                            "type": "object",
                            "properties": {"old": {"type": "string"}, "new": {"type": "string"}},
                            "required": ["old", "new"],
                        },
                    },
                },
                ["path"],
            ),
            _fs_edit,
            side_effect=True,
        ),
        "shell": Tool(
            _spec(
                "shell",
                "在工作目录里用 /bin/sh 运行一条命令（隔离环境：只有工作目录可写，私有 /tmp，"
                "默认没有网络，不带任何密钥；有超时和 CPU、内存、进程数、文件大小限制）。返回退出码、"
                "用时、合并后的输出（过长时保留开头和结尾并标明截断）以及 command_result_id——"
                "提交任务时把它放进 commands 作为证据。超时或被人停止时进程组全部结束，"
                "exit_code 为 null，killed 说明原因。",
                {"command": {"type": "string", "description": "要运行的命令（一行 shell）"}},
                ["command"],
            ),
            _shell,
            side_effect=True,
        ),
    }
)
