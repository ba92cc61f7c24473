"""Task tools an agent session may call: plans, the task board, task updates, reviews, and
decision proposals. The author is the session's member; every rule (who may trigger what, the
evidence a submission needs, paths inside the workspace) is enforced by the actions, not here.

Every tool answers JSON: ``{"ok": true, …}`` or ``{"ok": false, "error", "message",
"details"?}`` — a refused plan lists all its ``problems`` so the model can fix them in one go.
Command evidence cannot be created from here: a submission may only cite the ids of command
results the runtime itself recorded (:func:`room.actions.task_updates.record_command_result`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from room.actions import decisions as decision_actions
from room.actions import plans as plan_actions
from room.actions import task_updates as update_actions
from room.actions import tasks as task_actions
from room.agents.tools import Tool, ToolContext
from room.errors import RoomError
from room.providers import ToolSpec

TASK_LIST_MAX = 100


def _spec(name: str, description: str, properties: dict[str, Any], required: list[str]) -> ToolSpec:
    return ToolSpec(
        name=name,
        description=description,
        parameters={"type": "object", "properties": properties, "required": required},
    )


def _result(data: Any) -> str:
    return json.dumps(data, ensure_ascii=False)


def _refusal(exc: RoomError) -> str:
    data: dict[str, Any] = {"ok": False, "error": exc.code, "message": exc.message}
    if exc.details:
        data["details"] = exc.details
    return _result(data)


def _strings(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list):
        return tuple(str(v) for v in value if isinstance(v, str | int))
    return ()


def _ints(value: Any) -> tuple[int, ...]:
    if isinstance(value, int) and not isinstance(value, bool):
        return (value,)
    if isinstance(value, list):
        return tuple(v for v in value if isinstance(v, int) and not isinstance(v, bool))
    return ()


def _compact(task: dict[str, Any], me: int) -> dict[str, Any]:
    owner = task["owner"] or {}
    data: dict[str, Any] = {
        "key": task["key"],
        "title": task["title"],
        "state": task["state"],
        "revision": task["revision"],
        "owner": f"@{owner.get('handle')}" if owner else None,
        "yours": owner.get("id") == me,
        "criteria": [
            {"n": c["n"], "text": c["text"], "passed": c["passed"]} for c in task["criteria"]
        ],
        "allowed_events": task["allowed_events"],
    }
    if task["waiting_on"]:
        data["waiting_on"] = task["waiting_on"]
    if task["depends_on"]:
        data["depends_on"] = task["depends_on"]
    if task["note"]:
        data["note"] = task["note"]
    if task["held"]:
        data["held"] = "计划尚未开始 (plan not started)"
    if task["sync"]:
        data["sync_required"] = [f"{s['decision']} r{s['revision']}" for s in task["sync"]]
    return data


async def _plan_submit(ctx: ToolContext, args: dict[str, Any]) -> str:
    raw = {"goal": args.get("goal"), "items": args.get("items")}
    try:
        result = await plan_actions.submit_plan(ctx.core, ctx.member, raw)
    except RoomError as exc:
        return _refusal(exc)
    tasks = [
        {"key": t["key"], "owner": f"@{(t['owner'] or {}).get('handle')}", "state": t["state"],
         "waiting_on": t["waiting_on"]}
        for t in result["tasks"]
    ]  # fmt: skip
    plan = result["plan"]
    next_step = (
        "计划已保存，等待人类开始后再派发 (Saved; waiting for a person to start it.)"
        if not plan["started"]
        else "就绪的任务已派发给负责人 (Ready tasks were dispatched to their owners.)"
    )
    return _result({"ok": True, "plan": plan, "tasks": tasks, "next": next_step})


async def _task_list(ctx: ToolContext, args: dict[str, Any]) -> str:
    board = await task_actions.read_board(ctx.core, ctx.member.project_id)
    tasks = board["tasks"]
    if args.get("mine"):
        tasks = [t for t in tasks if (t["owner"] or {}).get("id") == ctx.member.id]
    state = args.get("state")
    if isinstance(state, str) and state:
        tasks = [t for t in tasks if t["state"] == state]
    shown = [_compact(t, ctx.member.id) for t in tasks[:TASK_LIST_MAX]]
    return _result(
        {"tasks": shown, "counts": board["counts"], "truncated": len(tasks) > len(shown)}
    )


async def _task_update(ctx: ToolContext, args: dict[str, Any]) -> str:
    action = str(args.get("action", ""))
    if action not in ("start", "block", "unblock", "submit", "sync"):
        return _result({"ok": False, "error": "bad_task_event",
                        "message": "action 是 start、block、unblock、submit 或 sync"})  # fmt: skip
    evidence = None
    if action == "submit":
        evidence = update_actions.EvidenceInput(
            summary=str(args.get("summary") or "").strip() or None,
            artifacts=_strings(args.get("artifacts")),
            messages=_ints(args.get("messages")),
            commands=_ints(args.get("commands")),
        )
    reason = args.get("reason")
    try:
        task = await update_actions.change_task(
            ctx.core, ctx.member, str(args.get("task", "")), action,
            note=str(reason) if isinstance(reason, str) and reason.strip() else None,
            evidence=evidence,
        )  # fmt: skip
    except RoomError as exc:
        return _refusal(exc)
    return _result({"ok": True, "task": _compact(task, ctx.member.id)})


async def _task_review(ctx: ToolContext, args: dict[str, Any]) -> str:
    raw = args.get("results")
    if not isinstance(raw, list) or not raw:
        return _result({"ok": False, "error": "no_results",
                        "message": "results 是逐条结论的列表 (results is a list of verdicts)"})  # fmt: skip
    verdicts = []
    for item in raw:
        if not isinstance(item, dict) or not isinstance(item.get("criterion"), int):
            return _result({"ok": False, "error": "bad_result",
                            "message": "每条结论需要 criterion（编号）、passed、evidence"})  # fmt: skip
        verdicts.append(
            update_actions.CriterionVerdict(
                criterion=int(item["criterion"]),
                passed=item.get("passed") is True,
                evidence=str(item.get("evidence") or ""),
                artifacts=_strings(item.get("artifacts")),
                messages=_ints(item.get("messages")),
            )
        )
    try:
        task = await update_actions.review_task(
            ctx.core, ctx.member, str(args.get("task", "")), verdicts
        )
    except RoomError as exc:
        return _refusal(exc)
    return _result({"ok": True, "task": _compact(task, ctx.member.id)})


async def _decision_propose(ctx: ToolContext, args: dict[str, Any]) -> str:
    try:
        decision = await decision_actions.propose_decision(
            ctx.core, ctx.member,
            title=str(args.get("title") or ""), context=str(args.get("context") or ""),
            decision=str(args.get("decision") or ""),
            consequences=str(args.get("consequences") or ""),
            task_keys=list(_strings(args.get("tasks"))),
            alternatives=args.get("alternatives"),
            constraints=str(args.get("constraints") or ""),
        )  # fmt: skip
    except RoomError as exc:
        return _refusal(exc)
    return _result({"ok": True, "decision": decision["label"], "status": decision["status"]})


ALTERNATIVES_SPEC = {
    "type": "array",
    "description": "否决的备选方案及原因（至少一个）",
    "minItems": 1,
    "items": {
        "type": "object",
        "properties": {"option": {"type": "string"}, "why_rejected": {"type": "string"}},
        "required": ["option", "why_rejected"],
    },
}

_EVIDENCE = {
    "summary": {"type": "string", "description": "做了什么、如何验证（submit 必填）"},
    "artifacts": {
        "type": "array",
        "items": {"type": "string"},
        "description": "工作区内的相对路径，如 src/app.py；服务器记录大小和 sha256（不接受绝对路径和 ..）",
    },
    "messages": {
        "type": "array",
        "items": {"type": "integer"},
        "description": "作为证据的消息 id",
    },
    "commands": {
        "type": "array",
        "items": {"type": "integer"},
        "description": "运行时记录的命令结果 id（不能自己声称）",
    },
}

_PLAN_ITEM = {
    "type": "object",
    "properties": {
        "key": {"type": "string", "description": "小写字母、数字、- 或 _，如 api"},
        "title": {"type": "string"},
        "owner": {"type": "string", "description": "负责人 handle（在职成员）"},
        "depends_on": {"type": "array", "items": {"type": "string"}},
        "acceptance": {
            "type": "array",
            "items": {"type": "string"},
            "description": "至少一条可检查的验收标准",
        },
        "assumptions": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["key", "title", "owner", "acceptance"],
}

TASK_TOOLS: Mapping[str, Tool] = MappingProxyType(
    {
        "room_plan_submit": Tool(
            _spec(
                "room_plan_submit",
                "提交整份计划（整体校验：依赖无环、每项至少一条验收标准、负责人是在职成员、key "
                "唯一；有问题会全部列出，什么都不保存）。依赖都已验收的任务会派发给负责人。",
                {
                    "goal": {"type": "string", "description": "计划要达成的目标"},
                    "items": {"type": "array", "items": _PLAN_ITEM},
                },
                ["items"],
            ),
            _plan_submit,
            side_effect=True,
        ),
        "room_task_list": Tool(
            _spec(
                "room_task_list",
                "查看任务看板：状态、负责人、等待的依赖、验收标准是否已通过、你能执行的操作。",
                {
                    "mine": {"type": "boolean", "description": "只看我负责的"},
                    "state": {"type": "string", "description": "只看某个状态"},
                },
                [],
            ),
            _task_list,
            side_effect=False,
        ),
        "room_task_update": Tool(
            _spec(
                "room_task_update",
                "更新你负责的任务：start 开始；block 受阻（reason 必填）；unblock 继续；submit "
                "提交评审（summary 必填，并附 artifacts/messages/commands 至少一项证据）；sync "
                "确认已阅读需求变更。",
                {
                    "task": {"type": "string", "description": "任务 key"},
                    "action": {
                        "type": "string",
                        "enum": ["start", "block", "unblock", "submit", "sync"],
                    },
                    "reason": {"type": "string", "description": "block 的原因，或 sync 的说明"},
                    **_EVIDENCE,
                },
                ["task", "action"],
            ),
            _task_update,
            side_effect=True,
        ),
        "room_task_review": Tool(
            _spec(
                "room_task_review",
                "评审别人提交的任务：逐条给出验收标准的结论和依据。有不通过 → 需要修改；当前版本"
                "全部通过 → 通过验收。不能评审自己负责的任务。",
                {
                    "task": {"type": "string", "description": "任务 key"},
                    "results": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "properties": {
                                "criterion": {
                                    "type": "integer",
                                    "description": "标准编号，从 1 开始",
                                },
                                "passed": {"type": "boolean"},
                                "evidence": {"type": "string", "description": "检查了什么"},
                                "artifacts": _EVIDENCE["artifacts"],
                                "messages": _EVIDENCE["messages"],
                            },
                            "required": ["criterion", "passed", "evidence"],
                        },
                    },
                },
                ["task", "results"],
            ),
            _task_review,
            side_effect=True,
        ),
        "room_decision_propose": Tool(
            _spec(
                "room_decision_propose",
                "提议一条决定记录（ADR）：背景、决定、后果、否决的备选、约束。人类接受后生效。",
                {
                    "title": {"type": "string"},
                    "context": {"type": "string", "description": "背景：为什么需要做决定"},
                    "decision": {"type": "string", "description": "决定了什么"},
                    "consequences": {"type": "string", "description": "后果与代价"},
                    "alternatives": ALTERNATIVES_SPEC,
                    "constraints": {"type": "string", "description": "约束：限制了选择的条件"},
                    "tasks": {
                        "type": "array",
                        "items": {"type": "string"},
                        "description": "相关任务 key",
                    },
                },
                ["title", "context", "decision", "alternatives"],
            ),
            _decision_propose,
            side_effect=True,
        ),
    }
)
