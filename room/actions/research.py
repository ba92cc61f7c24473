"""Deep research runs: proposals, the approval card, the start gate, pause / resume / stop, the
spend, revocation with the project's lifecycle and the restart reconcile (docs/research.md).

The pure :mod:`room.rules.research` decides (states, who, the gates); this module carries decisions
out in one write each, keeps the run's card in the timeline up to date (a system message whose
``meta.research`` the page renders as a card, updated in place with ``message_updated``) and
audits every attempt, allowed or refused, with its actor. Only an authenticated person who
owns the project acts on a run (the HTTP layer refuses agents' tokens before this); the lead
agent and people propose. Nothing here runs a model: a start asks ``core.research`` (the
runner, :mod:`room.agents.research_run`) to run the sessions, and the runner reports back
through :func:`record_step` and :func:`halt`.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Mapping
from typing import Any

from room.actions import memory as memory_actions
from room.actions import recovery, tenancy
from room.actions.message_edits import annotate_message
from room.actions.notices import insert_notice
from room.actions.turns import limits_of
from room.actions.workspaces import floating, readable_target
from room.errors import BadRequestError, ConflictError, ForbiddenError, NotFoundError
from room.rules.entities import Member, iso
from room.rules.research import (
    ACTIVE,
    BUDGET_KEYS,
    BUDGET_MAX,
    GATE_TEXT,
    READABLE_REFS,
    TRANSITIONS,
    Approval,
    Budget,
    GateFailure,
    Proposal,
    ResearchActor,
    ResearchEvent,
    ResearchForbiddenError,
    ResearchState,
    RunView,
    ScopeRef,
    Spend,
    WaitReason,
    allowed_events,
    check_proposal,
    reference_ids,
    reference_of,
    start_gate,
    step_gate,
    transition,
)
from room.services import Services
from room.store import Tx
from room.store import audit as audit_store
from room.store import brakes as brakes_store
from room.store import leases as leases_store
from room.store import members as members_store
from room.store import memory as memory_store
from room.store import projects as projects_store
from room.store import research as research_store
from room.store.dialect import Connection, locks_rows

_E = ResearchEvent
#: The events a person asks for over HTTP (the rest are the system's).
PERSON_EVENTS = frozenset(
    {_E.APPROVE, _E.REJECT, _E.CANCEL, _E.START, _E.PAUSE, _E.RESUME, _E.STOP}
)
SECONDS_PER_HOUR = 3600

STATE_TEXT = {
    "proposed": "🔬 研究提案待批准",
    "approved": "✅ 研究已批准，待开始",
    "rejected": "🚫 研究提案被拒绝",
    "cancelled": "研究提案已取消",
    "running": "▶️ 研究进行中",
    "paused": "⏸ 研究已暂停",
    "paused_reconcile": "⚠️ 服务器重启时研究在运行：等待人工查看后恢复或停止",
    "stopped": "⏹ 研究已停止",
    "revoked": "🗄 项目已归档或移入回收站：研究停止，批准已撤销",
    "done": "📄 研究完成",
}


# -- reading ---------------------------------------------------------------------------------------


def view_of(run: Mapping[str, Any]) -> RunView:
    """The pure view of a stored run (what the gates read)."""
    budget = Budget(**{k: int(v) for k, v in run["budget"].items()})
    refs = tuple(ScopeRef.of(r) for r in run["scope"].get("references", []))
    proposal = Proposal(
        run["question"], tuple(run["scope"]["paths"]), tuple(run["members"]), budget, refs
    )
    approval = None
    if run["approved_rev"] is not None:
        approval = Approval(
            rev=int(run["approved_rev"]), digest=str(run["approved_digest"]),
            epoch=int(run["approved_epoch"]), by=int(run["approved_by"]),
            at=float(run["approved_at"]), expires_at=float(run["expires_at"]),
        )  # fmt: skip
    spend = Spend(int(run["tokens_used"]), int(run["requests_used"]),
                  float(run["run_secs"]), int(run["steps_used"]))  # fmt: skip
    return RunView(ResearchState(run["state"]), int(run["rev"]), str(run["digest"]), proposal,
                   approval, spend)  # fmt: skip


def spend_now(run: Mapping[str, Any], now: float) -> float:
    """Wall-clock seconds spent: the closed running spans plus the open one."""
    since = run["running_since"]
    return float(run["run_secs"]) + (max(0.0, now - float(since)) if since is not None else 0.0)


def wire(conn: Connection, run: Mapping[str, Any], now: float | None = None) -> dict[str, Any]:
    """A run as the card and the research view show it."""
    names = {m.id: (m.handle, m.display_name) for m in members_store.list_for_project(
        conn, int(run["project_id"]))}  # fmt: skip
    items = research_store.items(conn, int(run["id"]))
    counts: dict[str, int] = {}
    for it in items:
        counts[it["kind"]] = counts.get(it["kind"], 0) + 1

    def who(member_id: Any) -> dict[str, Any] | None:
        if member_id is None:
            return None
        handle, name = names.get(int(member_id), ("?", "?"))
        return {"id": int(member_id), "handle": handle, "display_name": name}

    seconds = spend_now(run, now) if now is not None else float(run["run_secs"])
    approval = None
    if run["approved_rev"] is not None:
        approval = {
            "rev": run["approved_rev"], "digest": run["approved_digest"],
            "by": who(run["approved_by"]), "at": iso(run["approved_at"]),
            "expires_at": iso(run["expires_at"]),
        }  # fmt: skip
    state = ResearchState(run["state"])
    return {
        "id": int(run["id"]),
        "project_id": int(run["project_id"]),
        "state": state.value,
        "rev": int(run["rev"]),
        "scope_digest": run["digest"],
        "question": run["question"],
        "scope": run["scope"],
        "members": [who(m) for m in run["members"]],
        "budget": run["budget"],
        "spend": {
            "tokens": int(run["tokens_used"]),
            "requests": int(run["requests_used"]),
            "seconds": round(seconds, 1),
            "steps": int(run["steps_used"]),
        },
        "proposer": who(run["proposer_id"]),
        "approval": approval,
        "stop_reason": run["stop_reason"],
        # Why a running run does not run for now (WaitReason; its seconds are not counted).
        "waiting": run.get("wait_reason"),
        "counts": counts,
        "events": allowed_events(state, ResearchActor.OWNER),
        "card_id": run["card_id"],
        "updated_at": iso(run["updated_at"]),
    }


def detail(conn: Connection, run: Mapping[str, Any], now: float) -> dict[str, Any]:
    """The research view: the card's fields, every revision and every item."""
    out = wire(conn, run, now)
    out["revisions"] = research_store.revisions(conn, int(run["id"]))
    out["items"] = [{**it, "created_at": iso(it["created_at"])}
                    for it in research_store.items(conn, int(run["id"]))]  # fmt: skip
    return out


def get_run(conn: Connection, research_id: int, project_id: int | None = None) -> dict[str, Any]:
    run = research_store.get(conn, research_id)
    if run is None or (project_id is not None and run["project_id"] != project_id):
        raise NotFoundError(f"没有研究 {research_id} (No research {research_id}.)",
                            code="not_found")  # fmt: skip
    return run


# -- the card -------------------------------------------------------------------------------------


def refresh_card(conn: Connection, tx: Tx, research_id: int) -> None:
    """Rewrite the card's ``meta.research`` (everyone's page redraws it)."""
    run = research_store.get(conn, research_id)
    assert run is not None
    if run["card_id"] is not None:
        annotate_message(conn, tx, int(run["card_id"]), {"research": wire(conn, run, tx.now)})


def _audit(
    conn: Connection,
    tx: Tx,
    actor: Member | None,
    project_id: int,
    action: str,
    outcome: str,
    *,
    from_state: str | None = None,
    **detail: Any,
) -> None:
    audit_store.record(
        conn, now=tx.now, actor_kind="system" if actor is None else actor.kind,
        actor_id=None if actor is None else actor.id, project_id=project_id,
        action=f"research_{action}", outcome=outcome, from_state=from_state, detail=detail,
    )  # fmt: skip


def _notice(
    conn: Connection,
    tx: Tx,
    run: Mapping[str, Any],
    text: str,
    notice: dict[str, Any] | None = None,
    **meta: Any,
) -> None:
    """A research notice; `notice` ({code, params}) lets the page word it in the reader's
    language (web/notices.js), `text` is the server's Chinese for everything else."""
    stored: dict[str, Any] = {"research_event": {"id": int(run["id"]), **meta}}
    if notice is not None:
        stored["notice"] = notice
    insert_notice(conn, tx, int(run["project_id"]), text, stored)


# -- proposals ------------------------------------------------------------------------------------


def _agents_of(conn: Connection, project_id: int) -> dict[str, int]:
    return {m.handle: m.id for m in members_store.list_for_project(conn, project_id)
            if m.kind == "agent" and m.status != "left"}  # fmt: skip


def _may_propose(conn: Connection, member: Member) -> None:
    if member.status == "left":
        raise ForbiddenError("你已离开本项目 (You have left this project.)", code="member_left")
    if member.kind == "agent" and projects_store.lead_of(conn, member.project_id) != member.id:
        raise ForbiddenError("只有负责人 AI 可以提出研究 (Only the lead agent proposes research.)",
                             code="research_not_lead")  # fmt: skip
    projects_store.require_open(conn, member.project_id)
    state = projects_store.state_of(conn, member.project_id)
    if state != "active":
        raise ConflictError(f"项目处于 {state}，不能提出研究 (The project is {state}.)",
                            code="project_not_active", state=state)  # fmt: skip


async def resolve_references(
    core: Services, project_id: int, data: Mapping[str, Any]
) -> dict[int, ScopeRef]:
    """What each reference the proposal's scope names resolves to now: its kind, target and
    note, and for an absolute dir / file target its real path (resolved off the event loop and
    held to the workspace rules, :func:`room.actions.workspaces.readable_target`; whether another
    project holds it is checked in the write, :func:`_still_resolved`)."""
    ids = reference_ids(data)
    if not ids:
        return {}
    entries = await core.db.read(lambda conn: {i: memory_store.entry(conn, i) for i in ids})
    out: dict[int, ScopeRef] = {}
    for ref_id in ids:
        ref = reference_of(entries[ref_id], project_id, ref_id)
        if ref.kind in READABLE_REFS and ref.path is None:
            real = await asyncio.to_thread(readable_target, core.settings, ref.target, ref.kind)
            ref = dataclasses.replace(ref, real=real)
        out[ref_id] = ref
    return out


def _still_resolved(
    conn: Connection, core: Services, member: Member, refs: Mapping[int, ScopeRef]
) -> None:
    """In the write: each reference still reads as it did when resolved (an edit in between
    would make the digest bind something nobody saw), and no absolute one is, lies inside or
    contains another live project's workspace (``workspace_in_use``, naming that project only
    to a person who is its member): a run reads its own workspace and folders of no other
    project's."""
    project_id = member.project_id
    for ref_id, ref in refs.items():
        now = reference_of(memory_store.entry(conn, ref_id), project_id, ref_id)
        if (now.kind, now.target, now.note) != (ref.kind, ref.target, ref.note):
            raise ConflictError(
                f"参考 {ref_id} 刚被修改，请重试 (Reference {ref_id} changed meanwhile; try again.)",
                code="research_reference_changed", reference=ref_id,
            )  # fmt: skip
        if ref.real is not None:
            tenancy.ensure_free(
                conn, core.settings, ref.real, project_id=project_id, user_id=member.user_id,
                field="scope.references", reference=ref_id,
            )  # fmt: skip


async def propose(core: Services, member: Member, data: Mapping[str, Any]) -> dict[str, Any]:
    """A new proposal (revision 1) and its card in the timeline. A refusal is audited. Who may
    propose is checked before the references are resolved (a non-lead agent naming a bad
    reference is refused as not the lead, not told about the reference), and again in the
    write."""

    def job(conn: Connection, tx: Tx) -> dict[str, Any]:
        _may_propose(conn, member)
        _still_resolved(conn, core, member, refs)
        p = check_proposal(data, _agents_of(conn, member.project_id), refs)
        research_id = research_store.insert_run(
            conn, project_id=member.project_id, question=p.question, scope=p.scope,
            members=list(p.members), budget=p.budget.as_dict(), digest=p.digest,
            proposer_id=member.id, now=tx.now,
        )  # fmt: skip
        run = research_store.get(conn, research_id)
        assert run is not None
        card = insert_notice(
            conn, tx, member.project_id,
            f"{STATE_TEXT['proposed']}（@{member.handle}）：{p.question[:200]}",
            {"research": wire(conn, run, tx.now)},
        )  # fmt: skip
        research_store.update(conn, research_id, tx.now, card_id=card)
        refresh_card(conn, tx, research_id)
        _audit(conn, tx, member, member.project_id, "propose", "ok", research_id=research_id,
               rev=1, digest=p.digest, scope=p.scope)  # fmt: skip
        return wire(conn, get_run(conn, research_id), tx.now)

    try:
        await core.db.read(lambda conn: _may_propose(conn, member))
        refs = await resolve_references(core, member.project_id, data)
        return await core.db.write(job, locks=(member.project_id,))
    except (ConflictError, ForbiddenError) as exc:
        await refused(core, member, None, "propose", exc.code)
        raise


async def refused(
    core: Services, actor: Member, research_id: int | None, action: str, code: str, **detail: Any
) -> None:
    def job(conn: Connection, tx: Tx) -> None:
        _audit(conn, tx, actor, actor.project_id, action, "refused", research_id=research_id,
               reason=code, **detail)  # fmt: skip

    await core.db.write(job, locks=(actor.project_id,))


def _owner(member: Member) -> None:
    if not member.is_owner or member.status == "left":
        raise ResearchForbiddenError(
            "只有项目所有者本人可以操作研究卡片 (Only a project owner can act on a research card.)"
        )


async def adjust(
    core: Services, member: Member, research_id: int, rev: int, data: Mapping[str, Any]
) -> dict[str, Any]:
    """A new revision (the owner edited scope, members, budget or question): back to
    ``proposed``; any approval of an earlier revision no longer binds. The scope's references
    are resolved anew: the revision binds what they are now. Only an owner gets as far as
    resolving them: anyone else is refused as such, whatever the references say."""
    try:
        _owner(member)
    except ForbiddenError as exc:
        await refused(core, member, research_id, "adjust", exc.code)
        raise
    refs = await resolve_references(core, member.project_id, data)

    def job(conn: Connection, tx: Tx) -> dict[str, Any]:
        _owner(member)
        run = get_run(conn, research_id, member.project_id)
        projects_store.require_open(conn, member.project_id)
        transition(ResearchState(run["state"]), _E.ADJUST, ResearchActor.OWNER)
        _same_rev(run, rev)
        _still_resolved(conn, core, member, refs)
        p = check_proposal(data, _agents_of(conn, member.project_id), refs)
        new_rev = research_store.revise(
            conn, research_id, question=p.question, scope=p.scope, members=list(p.members),
            budget=p.budget.as_dict(), digest=p.digest, author_id=member.id, now=tx.now,
        )  # fmt: skip
        refresh_card(conn, tx, research_id)
        _audit(conn, tx, member, member.project_id, "adjust", "ok", from_state=run["state"],
               research_id=research_id, rev=new_rev, digest=p.digest, scope=p.scope,
               approval_voided=run["approved_rev"] is not None)  # fmt: skip
        return wire(conn, get_run(conn, research_id), tx.now)

    result: dict[str, Any] = await _guarded(core, member, research_id, "adjust", job)
    return result


def _same_rev(run: Mapping[str, Any], rev: int) -> None:
    if rev != int(run["rev"]):
        raise ConflictError(
            f"提案已是第 {run['rev']} 版，你看到的是第 {rev} 版 (The proposal is at revision "
            f"{run['rev']}; you saw {rev}.)",
            code="stale_revision", rev=int(run["rev"]),
        )  # fmt: skip


async def _guarded(core: Services, member: Member, research_id: int, action: str, job: Any) -> Any:
    try:
        return await core.db.write(job, locks=(member.project_id,))
    except (ConflictError, ForbiddenError) as exc:
        await refused(core, member, research_id, action, exc.code)
        raise


async def act(
    core: Services,
    member: Member,
    research_id: int,
    event: str,
    *,
    rev: int | None = None,
    digest: str | None = None,
) -> dict[str, Any]:
    """A person's action on the card. ``approve`` names the revision and digest the person saw
    (the approval binds exactly those); ``start`` and ``resume`` pass the start gate."""
    try:
        ev = ResearchEvent(event)
    except ValueError:
        ev = None
    if ev is None or ev not in PERSON_EVENTS:
        raise BadRequestError(f"unknown research action {event!r}", code="bad_op",
                              allowed=sorted(e.value for e in PERSON_EVENTS))  # fmt: skip

    def job(conn: Connection, tx: Tx) -> dict[str, Any]:
        assert ev is not None
        _owner(member)
        run = get_run(conn, research_id, member.project_id)
        state = ResearchState(run["state"])
        target = transition(state, ev, ResearchActor.OWNER)
        detail: dict[str, Any] = {"research_id": research_id, "rev": run["rev"]}
        fields: dict[str, Any] = {"state": target.value}
        if ev is _E.APPROVE:
            if rev is None or digest is None:
                raise ConflictError("批准须带上你看到的 rev 和 scope_digest (An approval names "
                                    "the rev and scope_digest it approves.)", code="stale_revision",
                                    rev=int(run["rev"]))  # fmt: skip
            _same_rev(run, rev)
            if digest != run["digest"]:
                raise ConflictError("范围摘要不符 (The scope digest does not match.)",
                                    code="digest_mismatch", rev=int(run["rev"]))  # fmt: skip
            project = projects_store.get(conn, member.project_id)
            assert project is not None
            hours = core.settings.research_approval_hours
            fields |= {"approved_rev": run["rev"], "approved_digest": run["digest"],
                       "approved_epoch": project.epoch, "approved_by": member.id,
                       "approved_at": tx.now, "expires_at": tx.now + hours * SECONDS_PER_HOUR}  # fmt: skip
            detail |= {"digest": run["digest"], "epoch": project.epoch,
                       "expires_at": fields["expires_at"], "scope": run["scope"]}  # fmt: skip
        elif ev in (_E.START, _E.RESUME):
            failure = _start_failure(conn, core, run, tx.now, resuming=ev is _E.RESUME)
            if failure is not None:
                raise GateRefusedError(failure)
            fields |= {"running_since": tx.now, "wait_reason": None, "taken": 0}
            # The node whose runner runs it (a start settles its own): the project's home in
            # a cluster, which the runner asked is told of (room.agents.research_run).
            fields["owner"] = runner_node(conn, tx, member.project_id,
                                          floating=floating(core, conn, member.project_id))  # fmt: skip
            detail |= {"digest": run["digest"], "scope": run["scope"]}
            if ev is _E.START:
                fields["reserved_tokens"] = int(run["budget"]["tokens"])
        elif ev in (_E.PAUSE, _E.STOP):
            fields |= _close_span(run, tx.now)
            if ev is _E.STOP:
                fields |= {"reserved_tokens": 0, "stop_reason": "stopped_by_person"}
        research_store.update(conn, research_id, tx.now, **fields)
        refresh_card(conn, tx, research_id)
        _audit(conn, tx, member, member.project_id, ev.value, "ok", from_state=state.value,
               **detail)  # fmt: skip
        text = STATE_TEXT[target.value]
        coded = {
            "code": "research_state",
            "params": {"state": target.value, "by": member.display_name, "id": int(run["id"])},
        }
        _notice(conn, tx, run, f"{text}（{member.display_name}）", coded, event=ev.value,
                state=target.value)  # fmt: skip
        return wire(conn, get_run(conn, research_id), tx.now)

    try:
        result = await core.db.write(job, locks=(member.project_id,))
    except GateRefusedError as exc:
        await _gate_refused(core, member, research_id, exc)
        raise
    except (ConflictError, ForbiddenError) as exc:
        await refused(core, member, research_id, ev.value, exc.code)
        raise
    if ev in (_E.START, _E.RESUME):
        core.research.start(research_id)
    elif ev in (_E.PAUSE, _E.STOP):
        await core.research.stop(research_id)
    return result


class GateRefusedError(ConflictError):
    """The start gate found a failure: nothing started."""

    code = "research_gate"

    def __init__(self, failure: GateFailure) -> None:
        super().__init__(
            f"研究不能开始：{GATE_TEXT[failure]} (The research cannot start: {failure.value}.)",
            failure=failure.value,
        )
        self.failure = failure


async def _gate_refused(
    core: Services, member: Member, research_id: int, exc: GateRefusedError
) -> None:
    def job(conn: Connection, tx: Tx) -> None:
        _audit(conn, tx, member, member.project_id, "gate", "refused", research_id=research_id,
               failure=exc.failure.value)  # fmt: skip
        run = research_store.get(conn, research_id)
        if run is not None:
            _notice(conn, tx, run, f"⛔ 研究未能开始：{GATE_TEXT[exc.failure]}（{member.display_name}）",
                    gate=exc.failure.value)  # fmt: skip

    await core.db.write(job, locks=(member.project_id,))


def tokens_left(conn: Connection, core: Services, project_id: int, research_id: int) -> int | None:
    """What the project's own token budget has left, less what other active runs reserved
    (None: the project has no token budget)."""
    budget = limits_of(core.settings, projects_store.settings(conn, project_id)).token_budget
    if budget is None:
        return None
    used = int(brakes_store.brake(conn, project_id)["tokens_used"])
    reserved = sum(
        max(0, int(r["reserved_tokens"]) - int(r["tokens_used"]))
        for r in research_store.of_project(conn, project_id, tuple(s.value for s in ACTIVE))
        if r["id"] != research_id
    )
    return budget - used - reserved


def budget_form(conn: Connection, core: Services, project_id: int) -> dict[str, Any]:
    """What a proposal form offers: each budget item's suggested value (the
    ``research_budget_*`` settings, held to its cap and, for tokens, to what the project's own
    token budget has left, which the start gate would reserve) and its cap."""
    left = tokens_left(conn, core, project_id, 0)
    default = {k: min(int(getattr(core.settings, f"research_budget_{k}")), BUDGET_MAX[k])
               for k in BUDGET_KEYS}  # fmt: skip
    if left is not None:
        default["tokens"] = max(1, min(default["tokens"], left))
    return {"default": default, "max": dict(BUDGET_MAX), "tokens_left": left}


def _start_failure(
    conn: Connection, core: Services, run: Mapping[str, Any], now: float, *, resuming: bool
) -> GateFailure | None:
    project = projects_store.get(conn, int(run["project_id"]))
    assert project is not None
    return start_gate(
        view_of(run), project_state=project.state, epoch=project.epoch, now=now,
        tokens_left=tokens_left(conn, core, project.id, int(run["id"])), resuming=resuming,
    )  # fmt: skip


def _close_span(run: Mapping[str, Any], now: float) -> dict[str, Any]:
    return {"run_secs": spend_now(run, now), "running_since": None, "wait_reason": None}


# -- the runner's side -----------------------------------------------------------------------------


def pre_step(conn: Connection, research_id: int, now: float) -> GateFailure | None:
    """The pre-step gate, read in one transaction: state, project, approval, budget (with the
    wall-clock spent up to ``now``)."""
    run = research_store.get(conn, research_id)
    if run is None:
        return GateFailure.WRONG_STATE
    project = projects_store.get(conn, int(run["project_id"]))
    if project is None:
        return GateFailure.PROJECT_NOT_ACTIVE
    view = view_of({**run, "run_secs": spend_now(run, now)})
    return step_gate(view, project_state=project.state, epoch=project.epoch)


def record_step(
    conn: Connection, tx: Tx, research_id: int, *, tokens: int, requests: int, steps: int
) -> None:
    research_store.add_spend(conn, research_id, tokens=tokens, requests=requests, steps=steps,
                             now=tx.now)  # fmt: skip
    refresh_card(conn, tx, research_id)


def halt(conn: Connection, tx: Tx, research_id: int, failure: GateFailure) -> bool:
    """The pre-step gate failed: a running run stops, with a notice saying which check."""
    run = research_store.get(conn, research_id)
    if run is None or run["state"] != ResearchState.RUNNING:
        return False
    transition(ResearchState.RUNNING, _E.HALT, ResearchActor.SYSTEM)
    research_store.update(conn, research_id, tx.now, state=ResearchState.STOPPED.value,
                          stop_reason=failure.value, reserved_tokens=0,
                          **_close_span(run, tx.now))  # fmt: skip
    refresh_card(conn, tx, research_id)
    action = "budget_stop" if failure.value.startswith("budget_") else "gate"
    _audit(conn, tx, None, int(run["project_id"]), action, "stopped", from_state="running",
           research_id=research_id, failure=failure.value)  # fmt: skip
    _notice(conn, tx, run, f"⏹ 研究已停止：{GATE_TEXT[failure]}", gate=failure.value,
            state="stopped")  # fmt: skip
    return True


def halt_project(conn: Connection, tx: Tx, project_id: int, failure: GateFailure) -> list[int]:
    """The project stopped (paused) under its running research: each running run stops, with the
    notice saying why. Returns their ids."""
    return [
        int(run["id"])
        for run in research_store.of_project(conn, project_id, (ResearchState.RUNNING.value,))
        if halt(conn, tx, int(run["id"]), failure)
    ]


def finish(conn: Connection, tx: Tx, research_id: int, member: Member, report: str,
           sources: list[str]) -> int | None:  # fmt: skip
    """A member filed the report: the run is done, the report is posted in the room as a message
    from the research (its sources listed). Returns the report message id."""
    run = research_store.get(conn, research_id)
    if run is None or run["state"] != ResearchState.RUNNING:
        return None
    transition(ResearchState.RUNNING, _E.FINISH, ResearchActor.SYSTEM)
    research_store.update(conn, research_id, tx.now, state=ResearchState.DONE.value,
                          reserved_tokens=0, **_close_span(run, tx.now))  # fmt: skip
    lines = [f"📄 研究报告 #{research_id}（@{member.handle}）", "", report]
    if sources:
        lines += ["", "来源 (Sources):", *[f"- {s}" for s in sources]]
    message_id = insert_notice(conn, tx, int(run["project_id"]), "\n".join(lines),
                               {"research_report": {"id": research_id, "sources": sources}})  # fmt: skip
    refresh_card(conn, tx, research_id)
    _audit(conn, tx, None, int(run["project_id"]), "finish", "ok", from_state="running",
           research_id=research_id, member_id=member.id, message_id=message_id)  # fmt: skip
    return message_id


def revoke_project(conn: Connection, tx: Tx, project_id: int, actor: Member | None) -> list[int]:
    """The project was archived or trashed: every run not over is revoked (stopped, its approval
    voided, its reservation released). Returns the ids of the runs that were active."""
    was_active: list[int] = []
    for run in research_store.of_project(conn, project_id):
        state = ResearchState(run["state"])
        if (state, _E.REVOKE) not in _REVOCABLE:
            continue
        if state in ACTIVE:
            was_active.append(int(run["id"]))
        research_store.update(
            conn, int(run["id"]), tx.now, state=ResearchState.REVOKED.value,
            approved_rev=None, approved_digest=None, approved_epoch=None, approved_by=None,
            approved_at=None, expires_at=None, reserved_tokens=0, stop_reason="project_closed",
            **_close_span(run, tx.now),
        )  # fmt: skip
        refresh_card(conn, tx, int(run["id"]))
        _audit(conn, tx, actor, project_id, "revoke", "ok", from_state=state.value,
               research_id=int(run["id"]))  # fmt: skip
    return was_active


_REVOCABLE = frozenset(k for k in TRANSITIONS if k[1] is _E.REVOKE)


def reconcile_on_start(conn: Connection, tx: Tx) -> list[int]:
    """At start-up: a run still ``running`` was cut by the stop; it waits in
    ``paused_reconcile`` until a person resumes or stops it. Its running span is counted up to
    its last recorded step (when the server went down is not known). A run that waited for
    this node (``home_node_offline``) before its runner ever took it was cut nowhere: it is
    left for the runner to take up (:func:`wait_over`)."""
    out = []
    # Only this server's runs (and those naming none): another server's runner may be running
    # its own right now.
    for run in research_store.in_states(
        conn, (ResearchState.RUNNING.value,), recovery.settling_node(conn, tx)
    ):
        if run["wait_reason"] is not None and not run["taken"]:
            continue  # never run: it waited for this node, which takes it up (wait_over)
        _reconcile(conn, tx, run)
        out.append(int(run["id"]))
    return out


def _reconcile(conn: Connection, tx: Tx, run: Mapping[str, Any], **why: Any) -> None:
    transition(ResearchState.RUNNING, _E.RECONCILE, ResearchActor.SYSTEM)
    research_store.update(conn, int(run["id"]), tx.now,
                          state=ResearchState.PAUSED_RECONCILE.value,
                          **_close_span(run, float(run["updated_at"])))  # fmt: skip
    refresh_card(conn, tx, int(run["id"]))
    _audit(conn, tx, None, int(run["project_id"]), "reconcile", "ok", from_state="running",
           research_id=int(run["id"]), **why)  # fmt: skip
    _notice(conn, tx, run, STATE_TEXT["paused_reconcile"], state="paused_reconcile")


def settle_adopted(conn: Connection, tx: Tx, project_id: int, node: str) -> list[int]:
    """``node`` adopted the project's lease (room.actions.leases): the runs another node left
    ``running`` in it are settled as a restart settles its own (``paused_reconcile``, waiting
    for a person); whatever that node still writes for them is refused by the fence. A run
    that waited for its old home before any runner took it is left to this node's runner."""
    out = []
    for run in research_store.of_project(conn, project_id, (ResearchState.RUNNING.value,)):
        # A run that waited for its home before any runner took it was cut nowhere: this
        # node takes it up instead.
        if run.get("owner") != node and (run["wait_reason"] is None or run["taken"]):
            _reconcile(conn, tx, run, lease_adopted_by=node, ran_on=run.get("owner"))
            out.append(int(run["id"]))
    return out


def wait_for_home(conn: Connection, tx: Tx, research_id: int) -> bool:
    """The run's project's home node is not heard on the bus (seen from this node, which can
    tell): the run cannot step, so its running span is closed — counted up to its last write,
    as a restart counts it — and it says why it waits (``home_node_offline``, on its card).
    Not while the home holds the project's lease unlapsed: it is at work (only its bus link is
    down) and renews it while the run runs there. Nothing else changes: the home's runner
    takes the run up when it is back (:func:`wait_over`), or, if it had been running it (the
    run ``taken``: cut mid-step), a restart of the home or a node adopting the lease settles
    it ``paused_reconcile`` as before. False when nothing was to mark."""
    run = research_store.get(conn, research_id)
    if run is None or run["state"] != ResearchState.RUNNING or run["wait_reason"] is not None:
        return False
    project_id = int(run["project_id"])
    home = leases_store.home_of(conn, project_id)
    lease = leases_store.lease_of(conn, project_id)
    if home is None or (lease is not None and lease.holder == home and lease.expires_at > tx.now):
        return False
    reason = WaitReason.HOME_NODE_OFFLINE.value
    fields = _close_span(run, float(run["updated_at"])) | {"wait_reason": reason}
    research_store.update(conn, research_id, tx.now, **fields)
    refresh_card(conn, tx, research_id)
    _audit(conn, tx, None, project_id, "wait", "waiting", from_state="running",
           research_id=research_id, reason=reason, home=home, seen_by=tx.node)  # fmt: skip
    return True


def wait_over(conn: Connection, tx: Tx, research_id: int) -> bool:
    """The run's runner is about to step it (under the project's lease): a run that waited
    (:func:`wait_for_home`) opens a new running span from now, with the budget it had left.
    False when it was not waiting."""
    run = research_store.get(conn, research_id)
    if run is None or run["state"] != ResearchState.RUNNING or run["wait_reason"] is None:
        return False
    research_store.update(conn, research_id, tx.now, wait_reason=None, running_since=tx.now)
    refresh_card(conn, tx, research_id)
    _audit(conn, tx, None, int(run["project_id"]), "wait_over", "ok", from_state="running",
           research_id=research_id, reason=run["wait_reason"], node=tx.node)  # fmt: skip
    return True


def run_here(conn: Connection, tx: Tx, research_id: int) -> bool:
    """This node's runner runs the run from now on (``owner``): written under the project's
    lease (the runner's fence), so a node that lost it cannot take the run. False when it is
    no longer running."""
    return research_store.set_owner(conn, research_id, tx.node, tx.now)


def runner_node(conn: Connection, tx: Tx, project_id: int, *, floating: bool) -> str | None:
    """The node whose runner will run the project's research: on PostgreSQL the project's
    home (its workspace is there; docs/cluster.md), unless its workspace is in the folder the
    nodes share (``floating``: the node asked, under the lease); on SQLite this server."""
    if floating or not locks_rows(conn):
        return tx.node
    return leases_store.home_of(conn, project_id) or tx.node


# -- items and flowback ----------------------------------------------------------------------------

ITEM_KINDS = ("hypothesis", "experiment", "finding", "report")
MAX_ITEM = 8_000
MAX_SOURCES = 20


def add_item(
    conn: Connection,
    tx: Tx,
    research_id: int,
    member: Member,
    kind: str,
    body: str,
    sources: list[str],
) -> dict[str, Any]:
    """A session recorded a hypothesis, experiment, finding or report (only while running)."""
    run = get_run(conn, research_id, member.project_id)
    if run["state"] != ResearchState.RUNNING or member.id not in run["members"]:
        raise ConflictError("研究不在进行中 (The research is not running.)",
                            code="research_not_running", state=run["state"])  # fmt: skip
    item_id = research_store.add_item(
        conn, project_id=member.project_id, research_id=research_id, member_id=member.id,
        kind=kind, body=body, sources=sources, now=tx.now,
    )  # fmt: skip
    refresh_card(conn, tx, research_id)
    found = research_store.item(conn, item_id)
    assert found is not None
    return found


def propose_flowback(conn: Connection, tx: Tx, member: Member, item_id: int) -> dict[str, Any]:
    """The lead proposes a finding for the project memory: a person accepts it, or not."""
    found = research_store.item(conn, item_id)
    if found is None:
        raise NotFoundError(f"没有条目 {item_id} (No item {item_id}.)", code="not_found")
    run = get_run(conn, int(found["research_id"]), member.project_id)
    if projects_store.lead_of(conn, member.project_id) != member.id:
        raise ForbiddenError("只有负责人 AI 可以提议写入记忆 (Only the lead proposes flowback.)",
                             code="research_not_lead")  # fmt: skip
    if found["kind"] != "finding" or found["flow"] is not None:
        raise ConflictError("只有未处理的发现可以提议 (Only an unsettled finding can be proposed.)",
                            code="flowback_not_open", flow=found["flow"])  # fmt: skip
    research_store.set_flow(conn, item_id, "proposed", by=member.id)
    _audit(conn, tx, member, member.project_id, "flowback_propose", "ok",
           research_id=int(run["id"]), item_id=item_id)  # fmt: skip
    _notice(conn, tx, run, f"📝 @{member.handle} 提议把研究 #{run['id']} 的发现写入项目记忆，等人确认："
            f"{found['body'][:200]}", flowback=item_id)  # fmt: skip
    refresh_card(conn, tx, int(run["id"]))
    out = research_store.item(conn, item_id)
    assert out is not None
    return out


async def settle_flowback(
    core: Services, member: Member, item_id: int, decision: str
) -> dict[str, Any]:
    """An owner accepts (the finding becomes a fact in the project memory, written by that
    person, its sources kept) or rejects a proposed flowback. It changes project memory, so it
    follows the rule of approval: a person who owns the project, anyone else is refused
    (``research_not_owner``, audited) before the item is read."""
    if member.is_human:
        try:
            _owner(member)
        except ForbiddenError as exc:
            await refused(core, member, None, f"flowback_{decision}", exc.code, item_id=item_id)
            raise

    def job(conn: Connection, tx: Tx) -> dict[str, Any]:
        if not member.is_human:
            raise ForbiddenError("只有人可以确认 (Only a person accepts.)",
                                 code="research_people_only")  # fmt: skip
        _owner(member)  # checked again in the write: ownership may have changed meanwhile
        found = research_store.item(conn, item_id)
        if found is None:
            raise NotFoundError(f"没有条目 {item_id} (No item {item_id}.)", code="not_found")
        run = get_run(conn, int(found["research_id"]), member.project_id)
        if found["flow"] != "proposed":
            raise ConflictError("这条发现没有待确认的提议 (This finding is not proposed.)",
                                code="flowback_not_proposed", flow=found["flow"])  # fmt: skip
        memory_id = None
        if decision == "accept":
            sources = "；".join(found["sources"])
            text = found["body"] + (f"（来源：{sources}）" if sources else "")
            entry = memory_actions.add_entry_in(conn, tx, member, "fact", {"text": text[:2000]})
            memory_id = int(entry["id"])
        research_store.set_flow(conn, item_id, "accepted" if decision == "accept" else "rejected",
                                by=member.id, memory_id=memory_id)  # fmt: skip
        _audit(conn, tx, member, member.project_id, f"flowback_{decision}", "ok",
               research_id=int(run["id"]), item_id=item_id, memory_id=memory_id)  # fmt: skip
        refresh_card(conn, tx, int(run["id"]))
        out = research_store.item(conn, item_id)
        assert out is not None
        return out

    result: dict[str, Any] = await core.db.write(job, locks=(member.project_id,))
    return result
