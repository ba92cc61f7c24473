"""Research tools (docs/research.md).

``room_research_propose`` is the lead's ordinary tool: it proposes a run (a card a person
approves, or not). A research session is given exactly :data:`SESSION_TOOLS`: the research tools
``room_research_get / hypothesis / experiment / finding / report / flowback`` and read-only file
tools held to the approved scope: its workspace paths and, as read-only roots of their own, the
``dir`` / ``file`` references it names (each as it resolved when proposed: editing the
reference later changes nothing here; a target whose real path moved since is refused, and so is
one another live project's workspace has come to hold since: ``workspace_in_use``).
``url`` and ``tool`` references are shown by ``room_research_get`` as metadata and never
fetched: this server has no web search provider. No shell, no write tool, no ordinary room tool: a call to any
other name is refused by the toolbox and runs nothing. No tool approves, starts, pauses or
deletes research; those are a person's actions on the card.
"""

from __future__ import annotations

import asyncio
import json
import posixpath
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from room.actions import research as research_actions
from room.actions import tenancy
from room.actions.workspaces import readable_target, work_dir
from room.agents.tools import Tool, ToolContext
from room.agents.work_tools import WORK_TOOLS
from room.errors import RoomError
from room.infra import files
from room.infra.fsroot import open_root
from room.providers import ToolSpec
from room.rules.research import (
    MAX_QUESTION,
    READABLE_REFS,
    Proposal,
    ScopeRef,
    check_path,
    in_scope,
    root_of,
)
from room.settings import Settings
from room.store import research as research_store


def _result(data: Any) -> str:
    return json.dumps(data, ensure_ascii=False)


def _refusal(exc: RoomError) -> str:
    data: dict[str, Any] = {"ok": False, "error": exc.code, "message": exc.message}
    if exc.details:
        data["details"] = exc.details
    return _result(data)


def _spec(name: str, description: str, properties: dict[str, Any], required: list[str]) -> ToolSpec:
    return ToolSpec(name, description, {"type": "object", "properties": properties,
                                        "required": required})  # fmt: skip


def research_of(ctx: ToolContext) -> int:
    return int(ctx.extra["research_id"])


async def _propose(ctx: ToolContext, args: dict[str, Any]) -> str:
    try:
        run = await research_actions.propose(ctx.core, ctx.member, args)
    except RoomError as exc:
        return _refusal(exc)
    return _result({"ok": True, "research_id": run["id"], "rev": run["rev"],
                    "state": run["state"],
                    "note": "提案已发到群里，等项目所有者批准；批准不会自动开始。"})  # fmt: skip


async def _get(ctx: ToolContext, args: dict[str, Any]) -> str:
    rid = research_of(ctx)

    def read(conn: Any) -> dict[str, Any]:
        run = research_actions.get_run(conn, rid)
        out = research_actions.wire(conn, run)
        out["readable"] = readable_of(research_actions.view_of(run).proposal)
        out["items"] = [{k: it[k] for k in ("id", "kind", "body", "sources", "flow", "member_id")}
                        for it in research_store.items(conn, rid)]  # fmt: skip
        return out

    return _result({"ok": True, **(await ctx.core.db.read(read))})


def _sources(args: Mapping[str, Any]) -> list[str]:
    raw = args.get("sources") or []
    if not isinstance(raw, list):
        raise ValueError("sources is a list of strings")
    return [str(s)[:400] for s in raw[: research_actions.MAX_SOURCES]]


def _item_tool(kind: str) -> Any:
    async def run(ctx: ToolContext, args: dict[str, Any]) -> str:
        text = str(args.get("text", "")).strip()
        if not text:
            return _result({"ok": False, "error": "empty_field", "message": "text is required"})
        sources = _sources(args)
        rid = research_of(ctx)

        def job(conn: Any, tx: Any) -> dict[str, Any]:
            item = research_actions.add_item(conn, tx, rid, ctx.member, kind,
                                             text[: research_actions.MAX_ITEM], sources)  # fmt: skip
            out: dict[str, Any] = {"ok": True, "item_id": item["id"]}
            if kind == "report":
                out["message_id"] = research_actions.finish(conn, tx, rid, ctx.member, text,
                                                            sources)  # fmt: skip
                out["done"] = True
            return out

        try:
            return _result(await ctx.core.db.write(job, locks=(ctx.member.project_id,)))
        except RoomError as exc:
            return _refusal(exc)

    return run


async def _flowback(ctx: ToolContext, args: dict[str, Any]) -> str:
    item_id = args.get("item_id")
    if not isinstance(item_id, int) or isinstance(item_id, bool):
        return _result({"ok": False, "error": "bad_arguments", "message": "item_id is an integer"})
    try:
        item = await ctx.core.db.write(
            lambda conn, tx: research_actions.propose_flowback(conn, tx, ctx.member, item_id),
            locks=(ctx.member.project_id,),
        )
    except RoomError as exc:
        return _refusal(exc)
    return _result({"ok": True, "item_id": item["id"], "flow": item["flow"],
                    "note": "已提议，等人确认后才写入项目记忆。"})  # fmt: skip


NOT_FETCHED = (
    "只是参考资料（元数据），不会被读取或抓取：这个服务器没有配置网络搜索 (metadata only, "
    "never fetched: no web search provider is configured on this server)"
)


def readable_of(p: Proposal) -> dict[str, Any]:
    """What a session may read, as the model is told: workspace paths, the folders and files
    outside the workspace (by their absolute paths), and the references that are only metadata."""
    roots = [
        {"reference": r.id, "kind": r.kind, "path": r.real, "target": r.target, "note": r.note}
        for r in p.read_roots
    ]
    metadata = [
        {"reference": r.id, "kind": r.kind, "target": r.target, "note": r.note, "fetched": False}
        for r in p.references
        if r.kind not in READABLE_REFS
    ]
    return {
        "workspace_paths": list(p.read_paths),
        "roots": roots,
        "metadata": metadata,
        "metadata_note": NOT_FETCHED,
        "web": False,
    }


class ReferenceMovedError(RoomError):
    code = "research_reference_moved"
    http_status = 409


def _out_of_scope(path: Any, p: Proposal, why: str = "") -> str:
    allowed = [*p.read_paths, *(r.real or "" for r in p.read_roots)]
    return _result({"ok": False, "error": "research_out_of_scope",
                    "message": f"路径不在批准的范围内{why} (outside the approved scope: "
                               f"{', '.join(allowed)})", "details": {"path": str(path)[:200]}})  # fmt: skip


def _stays_in_scope(base: Path, roots: tuple[str, ...], path: str) -> bool:
    """Whether a workspace path in scope (lexically) also *resolves* inside the approved path it
    names: a symlink under ``docs`` leading elsewhere in the workspace is out of scope, as it is
    under a reference's root (blocking: in a worker thread)."""
    home = base.resolve()
    try:
        real = home.joinpath(check_path(path)).resolve()
    except (OSError, RuntimeError, ValueError):
        return True  # the file tool refuses it in its own words
    for root in roots:
        if not in_scope([root], path):
            continue
        try:
            top = home.joinpath(root).resolve()
        except (OSError, RuntimeError):
            continue
        if real == top or top in real.parents:
            return True
    return False


def _int_arg(args: Mapping[str, Any], key: str) -> int | None:
    value = args.get(key)
    if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
        raise ValueError(f"{key} must be an integer")
    return value


def _in_root(
    settings: Settings, name: str, ref: ScopeRef, relative: str, args: Mapping[str, Any]
) -> dict[str, Any]:
    """A read-only file operation inside a reference's folder (blocking: in a worker thread).
    The folder is the reference's real path bound when proposed; its real path now must be the
    same (a symlink swapped since, or roots narrowed by the operator, is refused); below it the
    file tools' own rules hold (no ``..``, a symlink followed only if it ends inside; for a file
    reference, no symlink at all: the file itself is the scope).

    The folder is then opened at exactly that real path, each component without following a
    symlink (:func:`room.infra.fsroot.open_root`): a component swapped for a link between the check
    and the read — the reference may lie in a folder agents write — is refused, not followed."""
    assert ref.real is not None
    try:
        now: str | None = readable_target(settings, ref.target, ref.kind)
    except RoomError:
        now = None
    if now != ref.real:
        raise _moved(ref)
    root = ref.real if ref.kind == "dir" else posixpath.dirname(ref.real)
    try:
        opened = open_root(Path(root), links=ref.kind == "dir")
    except OSError:
        raise _moved(ref) from None
    with opened:
        if name == "fs_list":
            depth = _int_arg(args, "depth") or 1
            result = files.list_dir(opened, relative, depth).to_dict()
        elif name == "fs_read":
            result = files.read(opened, relative, _int_arg(args, "start_line"),
                                _int_arg(args, "end_line")).to_dict()  # fmt: skip
        else:
            pattern, glob = args.get("pattern"), args.get("glob")
            if not isinstance(pattern, str):
                raise ValueError("pattern must be a string")
            limit = min(_int_arg(args, "limit") or files.SEARCH_LIMIT, files.SEARCH_LIMIT)
            result = files.search(opened, pattern, relative,
                                  glob if isinstance(glob, str) and glob else None, limit).to_dict()  # fmt: skip
            for hit in result["hits"]:
                hit["path"] = posixpath.join(root, hit["path"])
    result["path"] = posixpath.normpath(posixpath.join(root, result.get("path", relative)))
    return result


def _moved(ref: ScopeRef) -> ReferenceMovedError:
    return ReferenceMovedError(
        f"参考 {ref.id} 的路径 {ref.target} 已不是批准时的位置 (Reference {ref.id} no longer "
        "resolves to the approved path; adjust the research to read it.)",
        reference=ref.id, path=ref.target[:200],
    )  # fmt: skip


async def _not_held(ctx: ToolContext, ref: ScopeRef) -> None:
    """Refuse a reference's root that another live project's workspace now is, lies in or
    contains (one set after the approval): a run never reads another project's folder. The
    session is an agent: the other project is never named."""
    assert ref.real is not None
    real = ref.real
    await ctx.core.db.read(
        lambda conn: tenancy.ensure_free(
            conn, ctx.core.settings, real, project_id=ctx.member.project_id, user_id=None,
            reference=ref.id,
        )
    )  # fmt: skip


def _scoped(name: str, default_path: str | None) -> Tool:
    """A read-only file tool held to the approved scope: a workspace path inside its paths, or
    an absolute path inside one of its dir / file references."""
    inner = WORK_TOOLS[name]

    async def run(ctx: ToolContext, args: dict[str, Any]) -> str:
        path = args.get("path", default_path)
        p = await ctx.core.db.read(
            lambda conn: (
                research_actions.view_of(research_actions.get_run(conn, research_of(ctx))).proposal
            )
        )
        if isinstance(path, str) and path.startswith("/"):
            found = root_of(p.read_roots, path)
            if found is None:
                return _out_of_scope(path, p)
            ref, relative = found
            await _not_held(ctx, ref)
            result = await asyncio.to_thread(_in_root, ctx.core.settings, name, ref, relative, args)
            return _result({"ok": True, **result})
        if not isinstance(path, str) or not in_scope(p.read_paths, path):
            return _out_of_scope(path, p)
        where = await work_dir(ctx.core, ctx.member)
        if not await asyncio.to_thread(_stays_in_scope, where.path, p.read_paths, path):
            return _out_of_scope(path, p, "：符号链接指向范围之外")
        reply = await inner.run(ctx, {**args, "path": path})
        assert isinstance(reply, str)
        return reply

    spec = inner.spec
    props = dict(spec.parameters["properties"])
    props["path"] = {"type": "string", "description": "批准范围内的路径：工作区路径（相对），或参考目录/"
                     "文件里的绝对路径"}  # fmt: skip
    required = sorted({*spec.parameters.get("required", []), "path"})
    return Tool(_spec(name, spec.description + "（只能读批准范围内的路径）", props, required), run,
                side_effect=False)  # fmt: skip


_TEXT = {"type": "string", "description": "内容（Markdown）"}
_SOURCES = {"type": "array", "items": {"type": "string"},
            "description": "来源：工作区路径（可带行号）或引用"}  # fmt: skip

PROPOSE_TOOLS: Mapping[str, Tool] = MappingProxyType(
    {
        "room_research_propose": Tool(
            _spec(
                "room_research_propose",
                "提出一项深入研究：问题、可读范围（工作区路径和项目参考）、参与的 AI 成员和预算（tokens、"
                "模型请求数、秒数、步数）。提案发到群里成为一张卡片，只有项目所有者本人能批准；"
                "批准后也要由人按“开始研究”才会运行。",
                {
                    "question": {
                        "type": "string",
                        "description": f"研究问题（≤{MAX_QUESTION} 字）",
                    },
                    "scope": {
                        "type": "object",
                        "description": '{"paths": [工作区路径], "references": [项目参考的 id]}：'
                        '参考用 memory_read(kind="reference") 查到；目录和文件参考只读，链接和'
                        "工具参考只作元数据（不抓取）。没有网络搜索，不能要求读网页。",
                        "properties": {
                            "paths": {"type": "array", "items": {"type": "string"}},
                            "references": {"type": "array", "items": {"type": "integer"}},
                        },
                    },
                    "members": {
                        "type": "array",
                        "items": {"type": "string"},
                        "description": "参与的 AI 成员 handle",
                    },
                    "budget": {
                        "type": "object",
                        "description": "预算，每项是正整数",
                        "properties": {
                            k: {"type": "integer"}
                            for k in ("tokens", "requests", "seconds", "steps")
                        },
                    },
                },
                ["question", "scope", "members", "budget"],
            ),
            _propose,
            side_effect=True,
        ),
    }
)

SESSION_TOOLS: Mapping[str, Tool] = MappingProxyType(
    {
        "room_research_get": Tool(
            _spec(
                "room_research_get",
                "读这项研究：问题、范围、预算和花费、已记录的假设、实验、发现。",
                {},
                [],
            ),
            _get,
            side_effect=False,
        ),
        "room_research_hypothesis": Tool(
            _spec("room_research_hypothesis", "记录一个假设。", {"text": _TEXT}, ["text"]),
            _item_tool("hypothesis"),
            side_effect=True,
        ),
        "room_research_experiment": Tool(
            _spec(
                "room_research_experiment",
                "记录一次实验（读了什么、怎么比较、结果）。",
                {"text": _TEXT, "sources": _SOURCES},
                ["text"],
            ),
            _item_tool("experiment"),
            side_effect=True,
        ),
        "room_research_finding": Tool(
            _spec(
                "room_research_finding",
                "记录一个发现，附上来源。",
                {"text": _TEXT, "sources": _SOURCES},
                ["text", "sources"],
            ),
            _item_tool("finding"),
            side_effect=True,
        ),
        "room_research_report": Tool(
            _spec(
                "room_research_report",
                "提交研究报告（附来源）：研究到此结束，报告发到群里。",
                {"text": _TEXT, "sources": _SOURCES},
                ["text"],
            ),
            _item_tool("report"),
            side_effect=True,
        ),
        "room_research_flowback": Tool(
            _spec(
                "room_research_flowback",
                "（负责人）提议把一个发现写入项目记忆；要人确认才写入。",
                {"item_id": {"type": "integer", "description": "发现的 id"}},
                ["item_id"],
            ),
            _flowback,
            side_effect=True,
        ),
        "fs_list": _scoped("fs_list", None),
        "fs_read": _scoped("fs_read", None),
        "fs_search": _scoped("fs_search", None),
    }
)
