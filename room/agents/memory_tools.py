"""Memory tools an agent session may call (docs/memory.md): ``memory_checkpoint`` writes,
``memory_read`` reads (archives included), ``memory_search`` searches the project's messages and
records. The author is the session's member and the project is its own: no argument names
either. Every tool answers JSON: ``{"ok": true, …}`` or ``{"ok": false, "error", "message",
"details"?}`` (``unknown_kind``, ``empty_field`` with the ``field``, ``record_too_large``,
``stale_revision`` …) so the model can correct itself; a refused write stores nothing.
"""

from __future__ import annotations

import html
import json
import sqlite3
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from room.actions import decisions as decision_actions
from room.actions import memory as memory_actions
from room.actions import search as search_actions
from room.agents.task_tools import ALTERNATIVES_SPEC
from room.agents.tools import Tool, ToolContext
from room.errors import RoomError
from room.providers import ToolSpec
from room.rules import records
from room.rules.entities import iso
from room.store import decisions as decisions_store
from room.store import memory as memory_store

READ_DEFAULT = 20
READ_MAX = 50
CHECKPOINT_KINDS = ("session", "decision", "summary", "fact", "convention", "progress", "reference")
READ_KINDS = (*records.KINDS, "decision")
SEARCH_DEFAULT = 10
SEARCH_MAX = 30


def _result(data: Any) -> str:
    return json.dumps(data, ensure_ascii=False)


def _refusal(exc: RoomError) -> str:
    data: dict[str, Any] = {"ok": False, "error": exc.code, "message": exc.message}
    if exc.details:
        data["details"] = exc.details
    return _result(data)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _fields(kind: str, args: Mapping[str, Any]) -> dict[str, Any]:
    """The record fields of ``kind`` the model gave (other arguments are for other kinds)."""
    return {f: args[f] for f in records.fields_of(kind) if args.get(f) is not None}


def _compact(entry: dict[str, Any], handles: Mapping[int, str]) -> dict[str, Any]:
    author = handles.get(entry["author_id"]) if entry["author_id"] else None
    data = {
        "id": entry["id"],
        "kind": entry["kind"],
        "rev": entry["rev"],
        "author": f"@{author}" if author else None,
        "at": iso(entry["updated_at"]),
        "text": records.text_of(entry["kind"], entry["body"]),
        "body": entry["body"],
    }
    if entry["archived"]:
        data["archived"] = True
    return data


def _decision(conn: sqlite3.Connection, row: decisions_store.DecisionRow) -> dict[str, Any]:
    current = decisions_store.revisions_of(conn, row.id)[-1:]
    data: dict[str, Any] = {"id": row.id, "kind": "decision", "label": row.label,
                            "title": row.title, "status": row.status, "revision": row.revision}  # fmt: skip
    if current:
        rev = current[0]
        data |= {"context": rev["context"], "decision": rev["decision"],
                 "consequences": rev["consequences"], "alternatives": rev["alternatives"],
                 "constraints": rev["constraints"]}  # fmt: skip
    if row.archived:
        data["archived"] = True
    return data


async def _checkpoint(ctx: ToolContext, args: dict[str, Any]) -> str:
    kind = str(args.get("kind") or "")
    member = ctx.member
    core = ctx.core
    try:
        if kind == "decision":
            made = await decision_actions.propose_decision(
                core, member, title=str(args.get("title") or ""),
                context=str(args.get("context") or ""), decision=str(args.get("decision") or ""),
                consequences=str(args.get("consequences") or ""),
                alternatives=args.get("alternatives"),
                constraints=str(args.get("constraints") or ""),
                task_keys=[str(t) for t in args.get("tasks") or [] if isinstance(t, str)],
            )  # fmt: skip
            return _result({"ok": True, "kind": "decision", "id": made["id"],
                            "decision": made["label"], "status": made["status"]})  # fmt: skip
        if kind not in CHECKPOINT_KINDS:
            records.check_kind(kind)  # unknown_kind, with the kinds listed
            raise records.RecordError(
                f"memory_checkpoint 的 kind 是 {'、'.join(CHECKPOINT_KINDS)} 之一",
                code="unknown_kind",
                kinds=list(CHECKPOINT_KINDS),
            )
        rev = _int(args.get("rev"))
        if kind == "summary":
            sections = args.get("sections")
            if not isinstance(sections, dict):
                raise records.RecordError(
                    'sections 是对象，如 {"status": "…"}，只写要改的节 (sections is an '
                    "object of the sections to change.)",
                    code="bad_field",
                    field="sections",
                )
            entry = await memory_actions.set_summary(core, member, rev, sections)
        elif (entry_id := _int(args.get("id"))) is not None:
            found = await core.db.read(lambda conn: memory_store.entry(conn, entry_id))
            # The record's own kind says which fields count (a model may name it wrongly).
            fields = _fields(found["kind"], args) if found else {}
            entry = await memory_actions.edit_entry(core, member, entry_id, rev, fields)
        else:
            entry = await memory_actions.add_entry(
                core, member, kind, _fields(kind, args), turn_id=ctx.turn_id
            )
    except RoomError as exc:
        return _refusal(exc)
    data = {"ok": True, "kind": entry["kind"], "id": entry["id"], "rev": entry["rev"]}
    if entry.get("duplicate"):
        data["duplicate"] = True
    return _result(data)


def _progress_filter(args: Mapping[str, Any]) -> records.ProgressFilter:
    """memory_read's status filters for progress (docs/memory.md, "Agent tools")."""
    since = args.get("since")
    return records.ProgressFilter(
        stage=str(args["stage"]) if args.get("stage") else None,
        tag=str(args["tag"]) if args.get("tag") else None,
        since=records.parse_since(since) if isinstance(since, str) and since else None,
        blocked_only=args.get("blocked") is True,
    )


async def _read(ctx: ToolContext, args: dict[str, Any]) -> str:
    project_id = ctx.member.project_id
    kind = args.get("kind")
    entry_id = _int(args.get("id"))
    archived = args.get("archived") is True
    before = _int(args.get("before"))
    limit = max(1, min(READ_MAX, _int(args.get("limit")) or READ_DEFAULT))
    roster = await ctx.core.rosters.get(project_id)
    handles = {m.id: m.handle for m in roster.members.values()}

    def read(conn: sqlite3.Connection) -> dict[str, Any]:
        if entry_id is not None and kind == "decision":
            row = decisions_store.get_decision(conn, entry_id)
            if row is None or row.project_id != project_id:
                return {"ok": False, "error": "not_found", "message": f"没有决定 {entry_id}"}
            return {"ok": True, "entry": _decision(conn, row)}
        if entry_id is not None:
            found = memory_store.entry(conn, entry_id)
            if found is None or found["project_id"] != project_id:
                return {"ok": False, "error": "not_found", "message": f"没有记录 {entry_id}"}
            return {"ok": True, "entry": _compact(found, handles)}
        if kind is None or kind == "":
            return _outline(conn, project_id)
        if not isinstance(kind, str) or kind not in READ_KINDS:
            records.check_kind(str(kind))
        if kind == "decision":
            rows = [
                d for d in reversed(decisions_store.decisions_of(conn, project_id))
                if bool(d.archived) == archived and (before is None or d.id < before)
            ]  # fmt: skip
            return {"ok": True, "kind": kind, "archived": archived,
                    "entries": [_decision(conn, d) for d in rows[:limit]],
                    "has_more": len(rows) > limit}  # fmt: skip
        page = memory_actions.read_page(
            conn, project_id, kind, archived, before, limit + 1, _progress_filter(args)
        )
        data = {"ok": True, "kind": kind, "archived": archived,
                "entries": [_compact(e, handles) for e in page[:limit]],
                "has_more": len(page) > limit}  # fmt: skip
        count = memory_store.archived_counts(conn, project_id).get(kind, 0)
        if count and not archived:
            data["archived_note"] = records.archive_pointer(kind, count)
        return data

    try:
        return _result(await ctx.core.db.read(read))
    except RoomError as exc:
        return _refusal(exc)


async def _search(ctx: ToolContext, args: dict[str, Any]) -> str:
    q = args.get("q")
    kinds = args.get("kinds")
    if isinstance(kinds, str):
        kinds = [kinds]
    limit = max(1, min(SEARCH_MAX, _int(args.get("limit")) or SEARCH_DEFAULT))
    try:
        # The project search's own rules, operators included (from:, has:file, before:,
        # after:, is:mention — the agent's own mentions — and in: only for this project); an
        # agent's tool is not rate limited. It waits for the indexer: what was just said is found.
        found = await search_actions.search(
            ctx.core, ctx.member, str(q or ""),
            kinds=[str(k) for k in kinds] if isinstance(kinds, list) else None,
            limit=limit, rate_limited=False,
        )  # fmt: skip
    except RoomError as exc:
        return _refusal(exc)
    results = []
    for hit in found["results"]:
        author = hit.get("author") or {}
        item = {"kind": hit["kind"], "id": hit["id"],
                "author": f"@{author['handle']}" if author.get("handle") else None,
                "at": hit["at"], "snippet": _plain(hit["snippet_html"])}  # fmt: skip
        for key in ("seq", "message_id", "record_id"):
            if hit.get(key) is not None:
                item[key] = hit[key]
        results.append(item)
    return _result({"ok": True, "query": found["query"], "operators": _given(found["operators"]),
                    "results": results,
                    "next": "记录用 memory_read(id=…) 读全文，消息用 room_history"})  # fmt: skip


def _given(operators: dict[str, Any]) -> dict[str, Any]:
    """The operators the query carried (the others left out, for a short answer)."""
    return {name: value for name, value in operators.items() if value not in (None, [])}


def _plain(snippet_html: str) -> str:
    """A snippet for a model: the matches marked 【like this】, the text unescaped."""
    marked = snippet_html.replace("<mark>", "【").replace("</mark>", "】")
    return html.unescape(marked)


def _outline(conn: sqlite3.Connection, project_id: int) -> dict[str, Any]:
    """No kind and no id: the summary, and how many entries of each kind there are."""
    summary = memory_store.summary(conn, project_id)
    counts = {
        kind: len(memory_store.live_sizes(conn, project_id, kind)) for kind in records.ENTRY_KINDS
    }
    counts["decision"] = len(
        [d for d in decisions_store.decisions_of(conn, project_id) if not d.archived]
    )
    archived = memory_store.archived_counts(conn, project_id)
    return {
        "ok": True,
        "version": memory_store.memory_version(conn, project_id),
        "summary": records.section_text(summary["body"]["sections"] if summary else {}),
        "summary_rev": summary["rev"] if summary else 0,
        "counts": counts,
        "archived": archived,
        "archived_notes": [records.archive_pointer(k, n) for k, n in archived.items()],
        "next": '用 memory_read(kind="…") 读某一类，id 读一条，archived=true 读归档',
    }


def _spec(name: str, description: str, properties: dict[str, Any], required: list[str]) -> ToolSpec:
    return ToolSpec(
        name=name,
        description=description,
        parameters={"type": "object", "properties": properties, "required": required},
    )


_S = {"type": "string"}
_SECTIONS = {
    "type": "object",
    "description": "要改的概要小节（只写要改的）："
    + "，".join(f"{k} {label}" for k, label in records.SUMMARY_SECTIONS),
    "properties": {
        k: {"type": "string", "description": label} for k, label in records.SUMMARY_SECTIONS
    },
}

MEMORY_TOOLS: Mapping[str, Tool] = MappingProxyType(
    {
        "memory_checkpoint": Tool(
            _spec(
                "memory_checkpoint",
                "写项目记忆（人和 AI 都能看到）。kind：session 本轮会话记录（summary 必填，"
                "did/verified/next/blocked）；decision 提议决定（title、context、decision，"
                "alternatives 否决的备选必填，至少一个，可附 constraints）；summary 修改项目概要的小节"
                "（sections）；fact / convention 简短事实、约定（text）；progress 进展（text，"
                "stage 和 next 必填，tags）；reference 目录、文件、URL、工具（ref_kind、"
                "target、note；只记元数据，不读取）。给 id 和 rev 则修改已有记录。",
                {
                    "kind": {"type": "string", "enum": list(CHECKPOINT_KINDS)},
                    "id": {"type": "integer", "description": "要修改的记录 id（可选）"},
                    "rev": {"type": "integer", "description": "你读到的版本号（修改时）"},
                    "summary": {**_S, "description": "session：这一轮的概述"},
                    "did": {**_S, "description": "session：做了什么"},
                    "verified": {**_S, "description": "session：怎么验证的"},
                    "next": {**_S, "description": "session / progress：下一步"},
                    "blocked": {**_S, "description": "session / progress：卡在哪里"},
                    "text": {**_S, "description": "fact / convention / progress 的正文"},
                    "stage": {**_S, "description": "progress：阶段"},
                    "tags": {"type": "array", "items": _S},
                    "ref_kind": {"type": "string", "enum": list(records.REF_KINDS)},
                    "target": {**_S, "description": "reference：路径、URL 或工具名"},
                    "note": {**_S, "description": "reference：说明"},
                    "sections": _SECTIONS,
                    "title": _S,
                    "context": {**_S, "description": "decision：背景"},
                    "decision": {**_S, "description": "decision：决定了什么"},
                    "consequences": {**_S, "description": "decision：后果"},
                    "alternatives": ALTERNATIVES_SPEC,
                    "constraints": {**_S, "description": "decision：约束"},
                    "tasks": {"type": "array", "items": _S},
                },
                ["kind"],
            ),
            _checkpoint,
            side_effect=True,
        ),
        "memory_read": Tool(
            _spec(
                "memory_read",
                "读项目记忆。不带参数：概要和各类条数；kind 读一类（最新在前，before 为 id 游标，"
                "limit 最多 50）；id 读一条；archived=true 读已归档的。kind=progress 时可按 stage、"
                "tag、since（ISO 日期）筛选，blocked=true 只看受阻的。",
                {
                    "kind": {"type": "string", "enum": list(READ_KINDS)},
                    "id": {"type": "integer"},
                    "archived": {"type": "boolean"},
                    "before": {"type": "integer", "description": "只看 id 小于它的"},
                    "limit": {"type": "integer", "description": "1–50"},
                    "stage": {**_S, "description": "progress：只看这个阶段"},
                    "tag": {**_S, "description": "progress：只看带这个标签的"},
                    "since": {**_S, "description": "progress：只看这之后的，如 2026-11-01"},
                    "blocked": {"type": "boolean", "description": "progress：只看受阻的"},
                },
                [],
            ),
            _read,
            side_effect=False,
        ),
        "memory_search": Tool(
            _spec(
                "memory_search",
                "全文搜索本项目的消息和记忆记录（含已归档的），按相关度排序。中文两个字以上即可"
                "命中词中的片段。kinds 只搜某几类：message、summary、fact、convention、"
                "decision、progress、session、reference。q 里可加筛选："
                "from:成员（handle 或名字）、has:file（带附件的消息）、before:/after:"
                "（YYYY-MM-DD 或 ISO 时间）、is:mention（提及你的消息）；只有筛选没有词时列出"
                "最新的相符消息。has:file 和 is:mention 只找消息。",
                {
                    "q": {
                        "type": "string",
                        "description": "要找的词（多个词都要出现），可带 from: has:file before: "
                        "after: is:mention",
                    },
                    "kinds": {"type": "array", "items": {"type": "string"}},
                    "limit": {"type": "integer", "description": f"1–{SEARCH_MAX}"},
                },
                ["q"],
            ),
            _search,
            side_effect=False,
        ),
    }
)
