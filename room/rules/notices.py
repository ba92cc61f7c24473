"""Server notices as a code with its facts, and their Chinese words.

Every notice the server writes into a room is a :class:`Notice`: ``body`` is the readable
Chinese text stored as the message's body (search, exports and agents' context read it), and
``meta.notice = {code, params}`` carries the same facts for the page to word in the reader's
language (web/notices.js, web/strings-*.js).

:data:`TEXTS` holds the Chinese template of every code and of every part a notice is put
together from, keyed as the page keys them (``noticeText.<name>``); the page's Chinese table
has the same words (without the leading emoji and the Markdown backticks) and its English table
the same placeholders — tests/test_notice_strings.py checks both. A builder below composes a
notice exactly as notices.js composes it, part by part.

(The first five coded notices — ``risk_found``, ``research_state``, ``plan_submitted``,
``task_ready``, ``route_change`` — are built where they are written; this module holds the rest.)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from room.rules.portfolio import STATE_LABELS

TEXTS: Mapping[str, str] = MappingProxyType(
    {
        # -- the project's lifecycle: one code per state reached, then the reason and who
        "noticeText.project_paused": "⏸ 项目已暂停：不再派发给 AI 成员，人类消息会保留到恢复后再送达。",
        "noticeText.project_active": "▶️ 项目已恢复，暂存的消息按顺序派发。",
        "noticeText.project_archived": "🗄 项目已归档。",
        "noticeText.project_complete": "✅ 项目已完成。",
        "noticeText.project_abandoned": "⛔ 项目已放弃。",
        "noticeText.project_trashed": "🗑 项目已移入回收站：有人彻底清除之前随时可以恢复（服务器从不自动清除；建议 {days} 天内处理）。",
        "noticeText.project_stop_unconfirmed": "⚠️ 停止未确认：仍有成员的工作没有确认停止。可重试检查，或取消回到原状态。",
        "noticeText.project_restored": "♻️ 项目已从{where}恢复为暂停状态；旧的待处理请求不会恢复。",
        "noticeText.restoredFrom.trashed": "回收站",
        "noticeText.restoredFrom.archived": "归档",
        "noticeText.restoredFrom.complete": "已完成",
        "noticeText.restoredFrom.abandoned": "已放弃",
        "noticeText.project_stop_cancelled": "↩️ 已取消停止，项目回到{state}。",
        "noticeText.reason": "原因：{reason}",
        "noticeText.byline": "（{by}）",
        # -- members
        "noticeText.member_pause": "{by} 暂停了 @{handle}",
        "noticeText.member_resume": "{by} 恢复了 @{handle}",
        "noticeText.member_stop": "{by} 停止了当前工作：@{handle}",
        "noticeText.member_leave": "{by} 移出了 @{handle}",
        # -- the loop brake: what tripped it, then whom it holds
        "noticeText.brake.agent_turn_cap": "⛔ 循环制动：自上一条人类消息以来 AI 成员已运行 {agent_turns} 轮（上限 {cap}）。",
        "noticeText.brake.token_budget": "⛔ 预算制动：本项目已用 {tokens_used} tokens（预算 {budget}）。",
        "noticeText.brake.step_limit": "⛔ 步数制动：@{handle} 的一轮达到 {max_steps} 步上限仍未给出答复。",
        "noticeText.brake.repetition": "⛔ 重复制动：@{handle} 在重复同样的动作（{what}）。",
        "noticeText.brake.tool_calls": "⛔ 工具制动：@{handle} 的一轮调用了 {calls} 次工具（上限 {cap}）。",
        "noticeText.brake.command_time": "⛔ 命令时间制动：@{handle} 的一轮命令已运行 {secs} 秒（上限 {cap} 秒）。",
        "noticeText.brakeSameReply": "相同的回复",
        "noticeText.brakeHeldSome": "已暂停派发给 {who}，其他成员照常工作；请人类查看后在界面上解除（解除后被打断的工作会继续）。",
        "noticeText.brakeHeldAll": "已暂停本项目的全部派发，请人类查看后解除。",
        "noticeText.brakeHeldAllBudget": "已暂停本项目的全部派发，请人类调整预算或解除。",
        "noticeText.brake_interrupted": "⏸️ 制动打断了 @{handle} 正在进行的工作{tasks}（第 {turn_id} 轮，做到第 {step} 步）。解除制动后它会从检查点继续，未回答的消息会再投递一次。",
        "noticeText.brakeTasks": "（任务 {tasks}）",
        "noticeText.brakeTask": "{key}「{title}」",
        "noticeText.brake_cleared": "✅ 制动已由人类解除，恢复派发。",
        "noticeText.brakeResumed": "继续被打断的工作：{who}。",
        # -- a turn that failed, and one a restart cut short
        "noticeText.turn_failed": "⚠️ @{handle} 处理消息失败{where}：{cause}（{code}）。下一步：{next}（「重试」在这条通知上）。",
        "noticeText.failedModel": "（模型 {model}）",
        "noticeText.failure.provider_timeout.cause": "模型服务没有在限定时间内开始回答（请求已送达，为免重复计费没有重发）",
        "noticeText.failure.provider_timeout.next": "稍后点「重试」；反复出现时请检查模型服务，或调大 provider_first_byte_timeout_secs",
        "noticeText.failure.provider_rate_limited.cause": "模型服务限流（请求太多或额度用尽）",
        "noticeText.failure.provider_rate_limited.next": "稍等片刻后点「重试」，或检查账户额度",
        "noticeText.failure.provider_server_error.cause": "模型服务出错或连接中断",
        "noticeText.failure.provider_server_error.next": "稍后点「重试」；持续出现时检查模型服务的状态",
        "noticeText.failure.provider_auth.cause": "模型服务拒绝了凭据（API key 缺失或无效）",
        "noticeText.failure.provider_auth.next": "请管理员配置正确的 API key，然后点「重试」",
        "noticeText.failure.provider_request_rejected.cause": "模型服务拒绝了这次请求（例如上下文太长或参数不被接受）",
        "noticeText.failure.provider_request_rejected.next": "换一个模型路由，或缩短消息后点「重试」",
        "noticeText.failure.internal.cause": "服务器内部出错",
        "noticeText.failure.internal.next": "点「重试」；持续出现时请管理员查看服务器日志",
        "noticeText.failure.unknown.cause": "模型调用失败",
        "noticeText.failure.unknown.next": "点「重试」，或请管理员查看服务器日志",
        "noticeText.someMember": "一位成员",
        "noticeText.restart_interrupted": "⚠️ 服务器重启打断了 {who} 一轮已产生动作的工作（第 {turn_id} 轮），为避免重复不会自动重跑。下一步：看过它已做的事后，点这条通知上的「重试」，或重新 @ 它。",
        # -- tasks (beyond task_ready): one line each, parts on lines of their own
        "noticeText.bySystem": "系统",
        "noticeText.task_changes_requested": "↩️ 任务 `{key}` 第 {revision} 版需要修改（{by}）— @{owner}",
        "noticeText.taskNote": "原因：{note}",
        "noticeText.next.start_person": "下一步：在任务看板上点「开始」，完成后附证据提交评审。",
        "noticeText.next.start_agent": "下一步：开始任务，完成后附证据提交评审。",
        "noticeText.next.resubmit_person": "下一步：修改后在任务看板上重新提交（新版本的每条标准都要重新评审）。",
        "noticeText.next.resubmit_agent": "下一步：修改后重新提交（新版本的每条标准都要重新评审）。",
        "noticeText.task_accepted": "✅ 任务 `{key}`「{title}」第 {revision} 版通过验收（{by}）。",
        "noticeText.task_blocked": "⛔ 任务 `{key}` 受阻（{by}）：{note}",
        "noticeText.task_cancelled": "🚫 任务 `{key}` 已取消（{by}）：{note}",
        "noticeText.task_reopened": "🔁 任务 `{key}` 重新打开（{by}）：{note}",
        "noticeText.taskNextFor": "@{owner} {next}",
        "noticeText.task_reassigned": "👤 任务 `{key}` 由 {by} 指派给 @{owner}",
        "noticeText.reassignedFrom": "（原负责人 @{was}）",
        "noticeText.tasks_handed_off": "📦 @{handle} 已离开，其未完成的任务转为待移交：{keys}。请人类在任务看板上重新指派。",
        "noticeText.review_requested": "🔍 任务 `{key}` 第 {revision} 版已提交评审（{by}）— @{reviewer} 请评审",
        "noticeText.review_requested_people": "🔍 任务 `{key}` 第 {revision} 版已提交评审（{by}）— 请人类在任务看板上评审",
        "noticeText.reviewSummary": "提交说明：{summary}",
        "noticeText.reviewEvidence": "证据：",
        "noticeText.evidence.artifact": "- 📄 {path}（{size} 字节，sha256 {sha}…）",
        "noticeText.evidence.message": "- 💬 消息 #{seq}",
        "noticeText.evidence.command": "- ⚙️ 命令 `{command}` 退出码 {exit_code}",
        "noticeText.reviewNext": "下一步：逐条评审验收标准，给出结论和依据。",
        "noticeText.criteria": "验收标准：",
        "noticeText.sync_receipt": "✅ {by} 已同步 {what}（任务 `{key}`）",
        "noticeText.syncedRevision": "{label} 第 {revision} 版",
        "noticeText.syncedAny": "需求变更",
        "noticeText.syncNote": "：{note}",
        # -- plans, reviews, decisions
        "noticeText.plan_started": "▶️ {by} 开始了计划 {versions}，就绪的任务开始派发。",
        "noticeText.task_reviewed": "🔍 {by} 评审任务 `{key}` 第 {revision} 版：",
        "noticeText.verdict": "- {mark} {n}. {text} — {evidence}",
        "noticeText.reviewChanges": "结果：需要修改",
        "noticeText.reviewChangesFor": "结果：需要修改 — @{owner}",
        "noticeText.reviewAccepted": "结果：全部标准通过，任务通过验收 ✅",
        "noticeText.reviewLeft": "结果：还有 {left} 条标准未评审",
        "noticeText.decision_recorded": "📐 {by} 记录了决定 {label}「{title}」（已接受）。",
        "noticeText.decision_proposed": "📐 {by} 提议了决定 {label}「{title}」，等待人类接受。",
        "noticeText.decision_accepted": "✅ {by} 接受了决定 {label}「{title}」。",
        "noticeText.requirement_changed": "📝 需求变更 {label}（{by}）：",
        "noticeText.changeTasks": "需同步的任务：{tasks}",
        "noticeText.changeTask": "`{key}` @{owner}",
        "noticeText.changeNext": "负责人请阅读新需求后确认同步（人类在任务看板上点「已同步」）。确认前任务保持「需同步需求」，不会继续推进。",
        "noticeText.changeNone": "没有需要同步的任务。",
        "noticeText.changeSkipped": "未中断（如需按新需求返工，请先 reopen）：{tasks}",
        "noticeText.changeSkippedTask": "`{task}`（{state}）",
        "noticeText.requirement_change_failed": "⚠️ 需求变更没有记录：{message}",
    }
)

#: The codes this module builds (each has a ``noticeText.<code>`` text and a case in notices.js).
CODES = frozenset(
    {
        *(f"project_{s}" for s in ("paused", "active", "archived", "complete", "abandoned")),
        "project_trashed", "project_stop_unconfirmed", "project_restored", "project_stop_cancelled",
        "member_pause", "member_resume", "member_stop", "member_leave",
        "brake_tripped", "brake_interrupted", "brake_cleared",
        "turn_failed", "restart_interrupted",
        "task_changes_requested", "task_accepted", "task_blocked", "task_cancelled",
        "task_reopened", "task_reassigned", "tasks_handed_off", "review_requested",
        "sync_receipt", "plan_started", "task_reviewed",
        "decision_recorded", "decision_proposed", "decision_accepted",
        "requirement_changed", "requirement_change_failed",
    }
)  # fmt: skip

#: The failure codes with words of their own; any other reads ``failure.unknown``.
FAILURE_CODES = frozenset(
    k.split(".")[2] for k in TEXTS if k.startswith("noticeText.failure.") and "unknown" not in k
)
#: The brake reasons with words of their own.
BRAKE_REASONS = frozenset(k.split(".")[2] for k in TEXTS if k.startswith("noticeText.brake."))


def word(name: str, **params: Any) -> str:
    """``noticeText.<name>`` with its placeholders filled (a whole float reads as an integer)."""
    shown = {k: f"{v:g}" if isinstance(v, float) else v for k, v in params.items()}
    return TEXTS[f"noticeText.{name}"].format(**shown)


@dataclass(frozen=True, slots=True)
class Notice:
    """A notice: ``body`` (Chinese, stored as the message body) and its ``code`` and ``params``
    (``meta.notice``, worded by the page)."""

    body: str
    code: str
    params: dict[str, Any] = field(default_factory=dict)

    def meta(self) -> dict[str, Any]:
        return {"code": self.code, "params": self.params}


# -- the project's lifecycle ---------------------------------------------------------------------


def lifecycle(
    state: str, by: str, *, reason: str | None = None, days: int | None = None,
    restored_from: str | None = None, cancelled: bool = False,
) -> Notice:  # fmt: skip
    """The project reached ``state`` (``restored_from``: restored from that state;
    ``cancelled``: a stop was cancelled back to ``state``), by ``by`` (a display name)."""
    params: dict[str, Any] = {"state": state, "by": by}
    if cancelled:
        code, head = (
            "project_stop_cancelled",
            word("project_stop_cancelled", state=STATE_LABELS.get(state, state)),
        )
    elif restored_from is not None:
        params["from"] = restored_from
        where = word(f"restoredFrom.{restored_from}")
        code, head = "project_restored", word("project_restored", where=where)
    elif state == "trashed":
        params["days"] = days
        code, head = "project_trashed", word("project_trashed", days=days)
    else:
        code, head = f"project_{state}", word(f"project_{state}")
    if reason:
        params["reason"] = reason
        head += word("reason", reason=reason)
    return Notice(head + word("byline", by=by), code, params)


def member_op(op: str, by: str, handle: str) -> Notice:
    """A person paused, resumed, stopped or removed a member."""
    code = f"member_{op}"
    return Notice(word(code, by=by, handle=handle), code, {"op": op, "by": by, "handle": handle})


# -- the loop brake ------------------------------------------------------------------------------


def brake_tripped(reason: str, detail: Mapping[str, Any], held: Sequence[str] | None) -> Notice:
    """The brake tripped for ``reason`` (its facts in ``detail``), holding the members ``held``
    (handles) or, with None, the whole project."""
    facts = dict(detail)
    if facts.get("same_reply"):
        facts["what"] = word("brakeSameReply")
    text = word(f"brake.{reason}", **facts)
    if held is None:
        text += word("brakeHeldAllBudget" if reason == "token_budget" else "brakeHeldAll")
    else:
        text += word("brakeHeldSome", who="、".join(f"@{h}" for h in held))
    params = {**detail, "reason": reason, "held": list(held) if held is not None else None}
    return Notice(text, "brake_tripped", params)


def brake_interrupted(
    handle: str, tasks: Sequence[tuple[str, str]], turn_id: int, step: int
) -> Notice:
    """A held member's running turn stopped at a step boundary (``tasks``: (key, title) of the
    work it was on)."""
    named = "、".join(word("brakeTask", key=k, title=t) for k, t in tasks)
    text = word(
        "brake_interrupted", handle=handle, turn_id=turn_id, step=step,
        tasks=word("brakeTasks", tasks=named) if tasks else "",
    )  # fmt: skip
    params = {
        "handle": handle, "turn_id": turn_id, "step": step,
        "tasks": [{"key": k, "title": t} for k, t in tasks],
    }  # fmt: skip
    return Notice(text, "brake_interrupted", params)


def brake_cleared(resumed: Sequence[str]) -> Notice:
    """A person cleared the brake; ``resumed``: the handles whose interrupted work goes on."""
    text = word("brake_cleared")
    if resumed:
        text += word("brakeResumed", who="、".join(f"@{h}" for h in resumed))
    return Notice(text, "brake_cleared", {"resumed": list(resumed)})


# -- turns ---------------------------------------------------------------------------------------


def turn_failed(handle: str, code: str, model: str | None = None) -> Notice:
    """A member's turn failed: the cause in words (and its code) and the next step."""
    known = code if code in FAILURE_CODES else "unknown"
    text = word(
        "turn_failed", handle=handle, code=code,
        where=word("failedModel", model=model) if model else "",
        cause=word(f"failure.{known}.cause"), next=word(f"failure.{known}.next"),
    )  # fmt: skip
    params: dict[str, Any] = {"handle": handle, "code": code}
    if model:
        params["model"] = model
    return Notice(text, "turn_failed", params)


def restart_interrupted(handle: str | None, turn_id: int) -> Notice:
    """A restart cut short a turn that had already acted; it is not re-run on its own."""
    who = f"@{handle}" if handle else word("someMember")
    return Notice(
        word("restart_interrupted", who=who, turn_id=turn_id),
        "restart_interrupted",
        {"handle": handle, "turn_id": turn_id},
    )


# -- tasks ---------------------------------------------------------------------------------------


def by_word(by: str | None) -> str:
    """Who did it: a member's ``@handle``, or the server itself (None)."""
    return by if by is not None else word("bySystem")


def _task(code: str, paragraphs: Sequence[str], params: dict[str, Any]) -> Notice:
    return Notice("\n\n".join(p for p in paragraphs if p), code, params)


def task_changes_requested(
    key: str, revision: int, by: str | None, owner: str, note: str | None, next_step: str
) -> Notice:
    """A reviewer asked for changes; ``next_step``: ``resubmit_person`` or ``resubmit_agent``."""
    head = word("task_changes_requested", key=key, revision=revision, by=by_word(by), owner=owner)
    params = {"key": key, "revision": revision, "by": by, "owner": owner, "note": note,
              "next": next_step}  # fmt: skip
    return _task(
        "task_changes_requested",
        [head, word("taskNote", note=note), word(f"next.{next_step}")],
        params,
    )


def task_accepted(key: str, title: str, revision: int, by: str | None) -> Notice:
    text = word("task_accepted", key=key, title=title, revision=revision, by=by_word(by))
    params = {"key": key, "title": title, "revision": revision, "by": by}
    return Notice(text, "task_accepted", params)


def task_noted(
    code: str, key: str, by: str | None, note: str | None,
    owner: str | None = None, next_step: str | None = None,
) -> Notice:  # fmt: skip
    """A task blocked, cancelled or reopened (``code``) with its note; a reopened task sent back
    to its owner names them and their next step."""
    params: dict[str, Any] = {"key": key, "by": by, "note": note}
    paragraphs = [word(code, key=key, by=by_word(by), note=note)]
    if owner is not None and next_step is not None:
        params |= {"owner": owner, "next": next_step}
        paragraphs.append(word("taskNextFor", owner=owner, next=word(f"next.{next_step}")))
    return _task(code, paragraphs, params)


def task_reassigned(key: str, by: str | None, owner: str, was: str | None) -> Notice:
    text = word("task_reassigned", key=key, by=by_word(by), owner=owner)
    if was is not None:
        text += word("reassignedFrom", was=was)
    return Notice(text, "task_reassigned", {"key": key, "by": by, "owner": owner, "was": was})


def tasks_handed_off(handle: str, keys: Sequence[str]) -> Notice:
    """A member left; their open tasks wait to be handed to someone else."""
    shown = "、".join(f"`{k}`" for k in keys)
    text = word("tasks_handed_off", handle=handle, keys=shown)
    return Notice(text, "tasks_handed_off", {"handle": handle, "keys": list(keys)})


def evidence_line(item: Mapping[str, Any]) -> str:
    """One line of evidence: an artifact, a message or a command (see :func:`review_requested`)."""
    return word(f"evidence.{item['kind']}", **{k: v for k, v in item.items() if k != "kind"})


def review_requested(
    key: str, revision: int, by: str | None, reviewer: str | None, *,
    summary: str | None, evidence: Sequence[Mapping[str, Any]], criteria: Sequence[str],
    agent_reviewer: bool,
) -> Notice:  # fmt: skip
    """A task submitted for review: by whom, to whom (None: people, on the board), the summary,
    the evidence (``{kind: artifact, path, size, sha}``, ``{kind: message, seq}``,
    ``{kind: command, command, exit_code}``) and the criteria to review."""
    if reviewer is not None:
        head = word("review_requested", key=key, revision=revision, by=by_word(by),
                    reviewer=reviewer)  # fmt: skip
    else:
        head = word("review_requested_people", key=key, revision=revision, by=by_word(by))
    paragraphs = [head]
    if summary:
        paragraphs.append(word("reviewSummary", summary=summary))
    if evidence:
        paragraphs.append(
            "\n".join([word("reviewEvidence"), *(evidence_line(e) for e in evidence)])
        )
    numbered = [f"{n}. {text}" for n, text in enumerate(criteria, start=1)]
    paragraphs.append("\n".join([word("criteria"), *numbered]))
    if agent_reviewer:
        paragraphs.append(word("reviewNext"))
    params = {
        "key": key, "revision": revision, "by": by, "reviewer": reviewer, "summary": summary,
        "evidence": [dict(e) for e in evidence], "criteria": list(criteria),
        "agent_reviewer": agent_reviewer,
    }  # fmt: skip
    return _task("review_requested", paragraphs, params)


def sync_receipt(
    by: str | None, key: str, answered: Sequence[tuple[str, int]], note: str | None
) -> Notice:
    """A task's owner confirmed it took in the requirement changes ``answered`` (label,
    revision)."""
    what = "、".join(word("syncedRevision", label=lb, revision=r) for lb, r in answered)
    text = word("sync_receipt", by=by_word(by), what=what or word("syncedAny"), key=key)
    if note:
        text += word("syncNote", note=note)
    params = {"by": by, "key": key, "answered": [{"label": lb, "revision": r} for lb, r in answered],
              "note": note}  # fmt: skip
    return Notice(text, "sync_receipt", params)


# -- plans, reviews, decisions -------------------------------------------------------------------


def plan_started(by: str | None, versions: Sequence[int]) -> Notice:
    """A person started plans waiting in plan-first mode (``versions``)."""
    shown = "、".join(f"v{v}" for v in versions)
    text = word("plan_started", by=by_word(by), versions=shown)
    return Notice(text, "plan_started", {"by": by, "versions": list(versions)})


def task_reviewed(
    key: str, revision: int, by: str | None, verdicts: Sequence[Mapping[str, Any]], *,
    outcome: str, owner: str | None = None, next_step: str | None = None, left: int = 0,
) -> Notice:  # fmt: skip
    """A reviewer's verdicts (``{n, text, passed, evidence}`` each) and the outcome: ``changes``
    (to ``owner``, with their ``next_step``), ``accepted`` or ``partial`` (``left`` criteria
    not reviewed yet)."""
    lines = [word("task_reviewed", by=by_word(by), key=key, revision=revision)]
    lines += [
        word("verdict", mark="✅" if v["passed"] else "❌", n=v["n"], text=v["text"],
             evidence=v["evidence"])
        for v in verdicts
    ]  # fmt: skip
    if outcome == "changes" and owner is not None and next_step is not None:
        tail = word("reviewChangesFor", owner=owner) + "\n\n" + word(f"next.{next_step}")
    elif outcome == "changes":
        tail = word("reviewChanges")
    elif outcome == "accepted":
        tail = word("reviewAccepted")
    else:
        tail = word("reviewLeft", left=left)
    params = {
        "key": key, "revision": revision, "by": by, "verdicts": [dict(v) for v in verdicts],
        "outcome": outcome, "owner": owner, "next": next_step, "left": left,
    }  # fmt: skip
    return Notice("\n".join(lines) + "\n\n" + tail, "task_reviewed", params)


def decision(code: str, by: str | None, label: str, title: str) -> Notice:
    """A decision recorded (accepted at once), proposed, or accepted (``code``)."""
    text = word(code, by=by_word(by), label=label, title=title)
    return Notice(text, code, {"by": by, "label": label, "title": title})


def requirement_changed(
    label: str, revision: int, by: str | None, excerpt: str,
    affected: Sequence[tuple[str, str]], skipped: Sequence[Mapping[str, str]],
) -> Notice:  # fmt: skip
    """A person's ``/change`` revised requirement ``label`` (now ``revision``): the new text
    (``excerpt``), the
    tasks whose owners must sync (``affected``: key, owner handle) and the tasks it did not
    interrupt (``skipped``: ``{task, state}``)."""
    which = word("syncedRevision", label=label, revision=revision)
    paragraphs = [word("requirement_changed", label=which, by=by_word(by)) + "\n> " + excerpt]
    if affected:
        listed = "、".join(word("changeTask", key=k, owner=o) for k, o in affected)
        paragraphs += [word("changeTasks", tasks=listed), word("changeNext")]
    else:
        paragraphs.append(word("changeNone"))
    if skipped:
        listed = "、".join(
            word("changeSkippedTask", task=s["task"], state=s["state"]) for s in skipped
        )
        paragraphs.append(word("changeSkipped", tasks=listed))
    params = {
        "label": label, "revision": revision, "by": by, "excerpt": excerpt,
        "affected": [{"key": k, "owner": o} for k, o in affected],
        "skipped": [dict(s) for s in skipped],
    }  # fmt: skip
    return _task("requirement_changed", paragraphs, params)


def requirement_change_failed(code: str, message: str) -> Notice:
    """A ``/change`` that could not be recorded: the error's ``code`` and its words."""
    text = word("requirement_change_failed", message=message)
    return Notice(text, "requirement_change_failed", {"code": code, "message": message})


# -- a new project's goal ------------------------------------------------------------------------

#: The words around a new project's goal, posted as its creator's own message (not a notice): in
#: the creator's language (``users.lang``, the language their page shows). ``for_agents`` is what
#: only the lead reads.
GOAL_WORDS: Mapping[str, Mapping[str, str]] = MappingProxyType(
    {
        "zh": {
            "head": "🎯 项目目标：",
            "ask": "@{lead} 请把目标拆成计划（每项：key、标题、负责人、依赖、验收标准）。",
            "plan_first": "计划优先：计划保存后等人类确认开始，才会派发。",
            "for_agents": "工具调用：用 room_plan_submit 提交计划。",
        },
        "en": {
            "head": "🎯 Project goal:",
            "ask": "@{lead} please break the goal into a plan (each item: key, title, owner, "
            "dependencies, acceptance criteria).",
            "plan_first": " Plan first: the saved plan waits for a person to start it before "
            "anything is dispatched.",
            "for_agents": "Tool call: submit the plan with room_plan_submit.",
        },
    }
)
