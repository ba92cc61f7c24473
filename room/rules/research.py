"""Deep research, approved by a person: the state machine, the scope digest and the gates
(pure: no I/O, no clock — callers pass ``now``; docs/research.md).

A research run is proposed (by the lead agent or a person) with a question, a scope (workspace
paths it may read and project references, each as it resolved when proposed: :class:`ScopeRef`),
the participating members and a budget. Every proposal has a revision and a
:func:`scope_digest` (SHA-256 of the canonical JSON of scope, members and budget). An approval
binds exactly ``(revision, digest)`` and the project's epoch, and expires; adjusting makes a new
revision, which no earlier approval covers. One table, :data:`TRANSITIONS`, says which event
moves a run from which state to which; :data:`EVENT_ACTORS` says who may trigger each. Only a
person who owns the project acts on a run; the system stops, finishes and reconciles it; an
agent never appears in :data:`EVENT_ACTORS` (it may only propose, which is not a transition).

:func:`start_gate` (before 开始研究 and before a resume) and :func:`step_gate` (before every
model step) return the first failure as a :class:`GateFailure` code, or None.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Any

from room.errors import BadRequestError, ConflictError, ForbiddenError


class ResearchState(StrEnum):
    PROPOSED = "proposed"  # waiting for a person's approval (a new revision lands here too)
    APPROVED = "approved"  # approved, not started (may expire: see display_state)
    REJECTED = "rejected"
    CANCELLED = "cancelled"
    RUNNING = "running"
    PAUSED = "paused"  # paused by a person
    PAUSED_RECONCILE = "paused_reconcile"  # was running when the server stopped
    STOPPED = "stopped"  # stopped by a person, a gate or a budget
    REVOKED = "revoked"  # the project was archived or trashed: approval revoked
    DONE = "done"  # the report is in


class ResearchEvent(StrEnum):
    ADJUST = "adjust"
    APPROVE = "approve"
    REJECT = "reject"
    CANCEL = "cancel"
    START = "start"
    PAUSE = "pause"
    RESUME = "resume"
    STOP = "stop"
    FINISH = "finish"  # a member filed the report
    HALT = "halt"  # a gate failed or a budget ran out before a step
    RECONCILE = "reconcile"  # the server started and found the run running
    REVOKE = "revoke"  # the project was archived or trashed


class ResearchActor(StrEnum):
    OWNER = "owner"  # an authenticated person who owns the project
    SYSTEM = "system"  # the server itself


#: Shown as "expired" while approved past its expiry (the stored state stays ``approved``).
EXPIRED = "expired"

_S, _E = ResearchState, ResearchEvent

TERMINAL = frozenset({_S.REJECTED, _S.CANCELLED, _S.STOPPED, _S.REVOKED, _S.DONE})
#: A run in these states holds its sessions (a run lock, a budget reservation).
ACTIVE = frozenset({_S.RUNNING, _S.PAUSED, _S.PAUSED_RECONCILE})

_transitions: dict[tuple[ResearchState, ResearchEvent], ResearchState] = {
    (_S.PROPOSED, _E.ADJUST): _S.PROPOSED,
    (_S.APPROVED, _E.ADJUST): _S.PROPOSED,
    (_S.PROPOSED, _E.APPROVE): _S.APPROVED,
    (_S.PROPOSED, _E.REJECT): _S.REJECTED,
    (_S.APPROVED, _E.REJECT): _S.REJECTED,
    (_S.PROPOSED, _E.CANCEL): _S.CANCELLED,
    (_S.APPROVED, _E.CANCEL): _S.CANCELLED,
    (_S.APPROVED, _E.START): _S.RUNNING,
    (_S.RUNNING, _E.PAUSE): _S.PAUSED,
    (_S.PAUSED, _E.RESUME): _S.RUNNING,
    (_S.PAUSED_RECONCILE, _E.RESUME): _S.RUNNING,
    (_S.RUNNING, _E.STOP): _S.STOPPED,
    (_S.PAUSED, _E.STOP): _S.STOPPED,
    (_S.PAUSED_RECONCILE, _E.STOP): _S.STOPPED,
    (_S.RUNNING, _E.FINISH): _S.DONE,
    (_S.RUNNING, _E.HALT): _S.STOPPED,
    (_S.RUNNING, _E.RECONCILE): _S.PAUSED_RECONCILE,
}
# Revoking reaches every state that is not over yet.
_transitions |= {(s, _E.REVOKE): _S.REVOKED for s in ResearchState if s not in TERMINAL}

TRANSITIONS: Mapping[tuple[ResearchState, ResearchEvent], ResearchState] = MappingProxyType(
    _transitions
)

_PEOPLE = frozenset({ResearchActor.OWNER})
_SYSTEM = frozenset({ResearchActor.SYSTEM})
EVENT_ACTORS: Mapping[ResearchEvent, frozenset[ResearchActor]] = MappingProxyType(
    {
        _E.ADJUST: _PEOPLE,
        _E.APPROVE: _PEOPLE,
        _E.REJECT: _PEOPLE,
        _E.CANCEL: _PEOPLE,
        _E.START: _PEOPLE,
        _E.PAUSE: _PEOPLE,
        _E.RESUME: _PEOPLE,
        _E.STOP: _PEOPLE,
        _E.FINISH: _SYSTEM,
        _E.HALT: _SYSTEM,
        _E.RECONCILE: _SYSTEM,
        _E.REVOKE: _SYSTEM,
    }
)


class ResearchTransitionError(ConflictError):
    code = "research_bad_transition"


class ResearchForbiddenError(ForbiddenError):
    code = "research_not_owner"


def transition(state: ResearchState, event: ResearchEvent, actor: ResearchActor) -> ResearchState:
    """The state ``event`` leads to, or a structured refusal (wrong actor first)."""
    if actor not in EVENT_ACTORS[event]:
        raise ResearchForbiddenError(
            "只有项目所有者本人可以操作研究卡片 (Only a project owner can act on a research card.)",
            event=event.value,
            actor=actor.value,
        )
    target = TRANSITIONS.get((state, event))
    if target is None:
        raise ResearchTransitionError(
            f"研究处于 {state.value}，不能 {event.value} (The research is {state.value}; "
            f"{event.value} is not possible.)",
            state=state.value,
            event=event.value,
            allowed=allowed_events(state, actor),
        )
    return target


def allowed_events(state: ResearchState, actor: ResearchActor) -> list[str]:
    return [e.value for (s, e) in TRANSITIONS if s is state and actor in EVENT_ACTORS[e]]


# -- proposals ------------------------------------------------------------------------------------

BUDGET_KEYS = ("tokens", "requests", "seconds", "steps")
BUDGET_MAX: Mapping[str, int] = MappingProxyType(
    {"tokens": 50_000_000, "requests": 10_000, "seconds": 7 * 86_400, "steps": 10_000}
)
MAX_QUESTION = 4_000
MAX_PATHS = 50
MAX_PATH = 400
MAX_REFERENCES = 20
#: Reference kinds a session may read (as file-tool roots); the others are metadata only.
READABLE_REFS = ("dir", "file")


class ResearchInputError(BadRequestError):
    code = "research_bad_input"


@dataclass(frozen=True, slots=True)
class Budget:
    tokens: int
    requests: int
    seconds: int
    steps: int

    def as_dict(self) -> dict[str, int]:
        return {k: int(getattr(self, k)) for k in BUDGET_KEYS}


@dataclass(frozen=True, slots=True)
class ScopeRef:
    """A project reference as the proposal saw it (docs/research.md, "References").

    ``dir`` and ``file`` references are read, never written: a relative target is a workspace
    path (``path``, normalised like a scope path); an absolute one is a folder or file outside
    the workspace, bound by its resolved real path (``real``, symlinks followed when proposed).
    ``url`` and ``tool`` references are metadata the sessions are shown, never fetched. The
    digest covers all of it, so editing the reference afterwards changes nothing a run reads."""

    id: int
    kind: str
    target: str
    note: str = ""
    path: str | None = None
    real: str | None = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "kind": self.kind, "target": self.target,
                               "note": self.note}  # fmt: skip
        if self.path is not None:
            out["path"] = self.path
        if self.real is not None:
            out["real"] = self.real
        return out

    @classmethod
    def of(cls, raw: Mapping[str, Any]) -> ScopeRef:
        return cls(int(raw["id"]), str(raw["kind"]), str(raw["target"]), str(raw.get("note", "")),
                   raw.get("path"), raw.get("real"))  # fmt: skip


@dataclass(frozen=True, slots=True)
class Proposal:
    """A proposal's content, checked: the question, the workspace paths it may read (normalised,
    relative, sorted), the references (by id), the participating member ids (sorted) and the
    budget."""

    question: str
    paths: tuple[str, ...]
    members: tuple[int, ...]
    budget: Budget
    references: tuple[ScopeRef, ...] = ()

    @property
    def scope(self) -> dict[str, Any]:
        """The canonical scope. ``references`` appears only when there are some, so a scope of
        paths alone digests as it always did."""
        out: dict[str, Any] = {"paths": list(self.paths)}
        if self.references:
            out["references"] = [r.as_dict() for r in self.references]
        return out

    @property
    def read_paths(self) -> tuple[str, ...]:
        """Every workspace path a session may read: the scope's and the relative references'."""
        refs = {r.path for r in self.references if r.path is not None}
        return tuple(sorted({*self.paths, *refs}))

    @property
    def read_roots(self) -> tuple[ScopeRef, ...]:
        """The references outside the workspace a session may read (absolute dir / file)."""
        return tuple(r for r in self.references if r.real is not None)

    @property
    def digest(self) -> str:
        return scope_digest(self.scope, self.members, self.budget.as_dict())


def canonical(value: Any) -> str:
    """Canonical JSON: sorted keys, no spaces, UTF-8 kept."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def scope_digest(
    scope: Mapping[str, Any], members: Sequence[int], budget: Mapping[str, int]
) -> str:
    """SHA-256 of the canonical JSON of scope, members (sorted) and budget."""
    doc = {"scope": dict(scope), "members": sorted(int(m) for m in members), "budget": dict(budget)}
    return hashlib.sha256(canonical(doc).encode()).hexdigest()


def check_path(path: Any) -> str:
    """A scope path: relative to the workspace, never leaving it (``..``, absolute and drive paths
    are refused); returned normalised (``.`` is the whole workspace)."""
    if not isinstance(path, str) or not path.strip() or len(path) > MAX_PATH or "\x00" in path:
        raise ResearchInputError("范围路径无效 (A scope path is not valid.)", field="scope",
                                 path=str(path)[:80])  # fmt: skip
    raw = path.strip().replace("\\", "/")
    norm = posixpath.normpath(raw)
    if (
        raw.startswith("/")
        or (len(raw) > 1 and raw[1] == ":")
        or norm == ".."
        or norm.startswith("../")
    ):
        raise ResearchInputError(
            f"范围路径在工作区之外：{path[:80]} (The scope path {path[:80]!r} is outside the "
            "workspace.)",
            code="research_scope_outside",
            field="scope",
            path=path[:80],
        )
    return norm


def check_budget(raw: Any) -> Budget:
    if not isinstance(raw, Mapping):
        raise ResearchInputError("budget 是对象 (budget is an object.)", field="budget")
    unknown = sorted(set(raw) - set(BUDGET_KEYS))
    if unknown:
        raise ResearchInputError(f"预算没有 {unknown[0][:40]} (Unknown budget field.)",
                                 field=f"budget.{unknown[0][:40]}")  # fmt: skip
    values: dict[str, int] = {}
    for key in BUDGET_KEYS:
        value = raw.get(key)
        if (
            not isinstance(value, int)
            or isinstance(value, bool)
            or not (1 <= value <= BUDGET_MAX[key])
        ):
            raise ResearchInputError(
                f"预算 {key} 必须是 1 到 {BUDGET_MAX[key]} 的整数 (budget.{key} must be an integer "
                f"from 1 to {BUDGET_MAX[key]}.)",
                code="research_bad_budget",
                field=f"budget.{key}",
                value=value if isinstance(value, int | None) else str(value)[:40],
            )
        values[key] = value
    return Budget(**values)


class ResearchReferenceError(BadRequestError):
    """A scope reference that is not a live reference of this project (or cannot be read)."""

    code = "research_unknown_reference"


class ResearchWebError(BadRequestError):
    """The scope asked for the web: no search provider is configured on this server."""

    code = "research_web_unavailable"


def reference_ids(data: Mapping[str, Any]) -> list[int]:
    """The reference ids a proposal's ``scope.references`` names, checked for shape (the caller
    looks them up and passes :func:`check_proposal` what they resolve to)."""
    scope = data.get("scope")
    raw = scope.get("references", []) if isinstance(scope, Mapping) else []
    if raw is None:
        raw = []
    if not isinstance(raw, list) or len(raw) > MAX_REFERENCES:
        raise ResearchInputError(
            f"scope.references 是至多 {MAX_REFERENCES} 个参考的 id (scope.references lists at most "
            f"{MAX_REFERENCES} reference ids.)",
            field="scope.references",
        )
    ids: list[int] = []
    for item in raw:
        if not isinstance(item, int) or isinstance(item, bool) or item < 1:
            raise ResearchReferenceError(
                f"没有这个参考：{str(item)[:40]} (No such reference: {str(item)[:40]}.)",
                field="scope.references", reference=str(item)[:40],
            )  # fmt: skip
        if item not in ids:
            ids.append(item)
    return ids


def reference_of(entry: Mapping[str, Any] | None, project_id: int, ref_id: int) -> ScopeRef:
    """What a scope reference resolves to now, from its stored memory entry (None: there is
    none). Refused: no such live reference of this project (``research_unknown_reference``), an
    archived one (``research_reference_archived``), a relative dir / file target leaving the
    workspace (``research_reference_outside``). An absolute dir / file target comes back with
    ``real`` unset: the caller resolves it on disk (``room.actions.research``)."""
    if entry is None or int(entry["project_id"]) != project_id or entry["kind"] != "reference":
        raise ResearchReferenceError(
            f"本项目没有参考 {ref_id} (This project has no reference {ref_id}.)",
            field="scope.references", reference=ref_id,
        )  # fmt: skip
    if entry["archived"]:
        raise ResearchReferenceError(
            f"参考 {ref_id} 已归档，不能纳入研究范围 (Reference {ref_id} is archived; it cannot be in "
            "a research scope.)",
            code="research_reference_archived", field="scope.references", reference=ref_id,
        )  # fmt: skip
    body = entry["body"]
    kind, target = str(body["ref_kind"]), str(body["target"]).strip()
    ref = ScopeRef(ref_id, kind, target, str(body.get("note") or ""))
    if kind not in READABLE_REFS or target.startswith("/"):
        return ref
    try:
        path = check_path(target)
    except ResearchInputError:
        raise ResearchReferenceError(
            f"参考 {ref_id} 的路径在工作区之外：{target[:80]} (Reference {ref_id} points outside "
            "the workspace.)",
            code="research_reference_outside", field="scope.references", reference=ref_id,
        ) from None  # fmt: skip
    return ScopeRef(ref_id, kind, target, ref.note, path=path)


def check_proposal(
    data: Mapping[str, Any],
    member_ids: Mapping[str, int],
    references: Mapping[int, ScopeRef] | None = None,
) -> Proposal:
    """Check a proposal's fields. ``member_ids`` maps the handles of the project's current agent
    members to their ids: a participant must be one of them (by handle or id). ``references``
    is what each reference id the scope names resolved to (:func:`reference_of`); an id missing
    from it is refused."""
    unknown = sorted(set(data) - {"question", "scope", "members", "budget"})
    if unknown:
        raise ResearchInputError(f"提案没有字段 {unknown[0][:40]} (Unknown field.)",
                                 field=unknown[0][:40])  # fmt: skip
    question = data.get("question")
    if not isinstance(question, str) or not question.strip() or len(question) > MAX_QUESTION:
        raise ResearchInputError(
            f"question 是 1–{MAX_QUESTION} 字的问题 (question is required, at most "
            f"{MAX_QUESTION} characters.)",
            field="question",
        )
    scope = data.get("scope")
    if not isinstance(scope, Mapping):
        raise ResearchInputError("scope 是对象 (scope is an object.)", field="scope")
    if scope.get("web"):
        raise ResearchWebError(
            "这个服务器没有配置网络搜索，研究不能读网页 (No web search provider is configured on this "
            "server: research cannot read the web.)",
            field="scope.web",
        )
    if set(scope) - {"paths", "references", "web"}:
        raise ResearchInputError("scope 只有 paths 和 references (scope has only paths and "
                                 "references.)", field="scope")  # fmt: skip
    ids = reference_ids(data)
    refs: list[ScopeRef] = []
    for ref_id in ids:
        found = (references or {}).get(ref_id)
        if found is None:
            raise ResearchReferenceError(
                f"本项目没有参考 {ref_id} (This project has no reference {ref_id}.)",
                field="scope.references", reference=ref_id,
            )  # fmt: skip
        refs.append(found)
    paths_raw = scope.get("paths", [] if ids else None)
    if not isinstance(paths_raw, list) or (not paths_raw and not ids) or len(paths_raw) > MAX_PATHS:
        raise ResearchInputError(
            f"scope.paths 是 1–{MAX_PATHS} 个工作区路径（或给出参考） (scope.paths lists 1 to "
            f"{MAX_PATHS} workspace paths, or scope.references names references.)",
            field="scope",
        )
    paths = tuple(sorted({check_path(p) for p in paths_raw}))
    members_raw = data.get("members")
    if not isinstance(members_raw, list) or not members_raw or len(members_raw) > 20:
        raise ResearchInputError("members 是 1–20 个 AI 成员 (members lists 1 to 20 agents.)",
                                 field="members")  # fmt: skip
    agent_ids = set(member_ids.values())
    members: set[int] = set()
    for m in members_raw:
        if isinstance(m, str) and m.lstrip("@") in member_ids:
            members.add(member_ids[m.lstrip("@")])
        elif isinstance(m, int) and not isinstance(m, bool) and m in agent_ids:
            members.add(m)
        else:
            raise ResearchInputError(
                f"没有这个 AI 成员：{str(m)[:40]} (No such agent member: {str(m)[:40]}.)",
                code="research_unknown_member",
                field="members",
                member=str(m)[:40],
            )
    return Proposal(
        question.strip(), paths, tuple(sorted(members)), check_budget(data.get("budget")),
        tuple(sorted(refs, key=lambda r: r.id)),
    )  # fmt: skip


def in_scope(paths: Sequence[str], path: str) -> bool:
    """Whether a workspace-relative ``path`` lies inside one of the approved ``paths``."""
    try:
        target = check_path(path)
    except ResearchInputError:
        return False
    for root in paths:
        if root == "." or target == root or target.startswith(root.rstrip("/") + "/"):
            return True
    return False


def root_of(refs: Sequence[ScopeRef], path: str) -> tuple[ScopeRef, str] | None:
    """Which approved reference outside the workspace an absolute ``path`` lies in, and the path
    relative to the folder the file tools then work in (a dir reference's real folder; for a
    file reference, the folder holding it, and only the file itself). Matched by the target as
    written or by its real path, lexically: ``..`` never leaves a root."""
    if not isinstance(path, str) or not path.startswith("/") or "\x00" in path:
        return None
    norm = posixpath.normpath(path)
    for ref in refs:
        if ref.real is None:
            continue
        for base in {posixpath.normpath(ref.target), ref.real}:
            if ref.kind == "file":
                if norm == base:
                    return ref, posixpath.basename(ref.real)
            elif norm == base:
                return ref, "."
            elif norm.startswith(base.rstrip("/") + "/"):
                return ref, norm[len(base.rstrip("/")) + 1 :]
    return None


# -- gates ----------------------------------------------------------------------------------------


class GateFailure(StrEnum):
    PROJECT_NOT_ACTIVE = "project_not_active"
    NOT_APPROVED = "not_approved"
    REVISION_CHANGED = "revision_changed"
    DIGEST_MISMATCH = "digest_mismatch"
    EPOCH_CHANGED = "epoch_changed"  # the project was restored since the approval
    APPROVAL_EXPIRED = "approval_expired"
    BUDGET_TOKENS = "budget_tokens"
    BUDGET_REQUESTS = "budget_requests"
    BUDGET_SECONDS = "budget_seconds"
    BUDGET_STEPS = "budget_steps"
    BUDGET_UNAVAILABLE = "budget_unavailable"  # the project's own token budget cannot cover it
    WRONG_STATE = "wrong_state"
    PROVIDER_ERROR = "provider_error"  # a model call failed (the run stops, nothing retried)
    NO_REPORT = "no_report"  # every session ended without filing a report


class WaitReason(StrEnum):
    """Why a ``running`` run does not run for now (``wait_reason``; docs/cluster.md): its
    wall-clock budget is not spent meanwhile, and it goes on by itself once the reason is gone.
    The page words each (``research.wait.<reason>``)."""

    HOME_NODE_OFFLINE = "home_node_offline"  # its project's home node is not heard on the bus


GATE_TEXT: Mapping[GateFailure, str] = MappingProxyType(
    {
        GateFailure.PROJECT_NOT_ACTIVE: "项目不在进行中 (the project is not active)",
        GateFailure.NOT_APPROVED: "没有有效的批准 (there is no valid approval)",
        GateFailure.REVISION_CHANGED: "提案已修改，批准的是旧版本 (the approval is for an older "
        "revision)",
        GateFailure.DIGEST_MISMATCH: "范围摘要不符 (the scope digest does not match the approval)",
        GateFailure.EPOCH_CHANGED: "项目恢复过，旧批准失效 (the project was restored; the old "
        "approval is void)",
        GateFailure.APPROVAL_EXPIRED: "批准已过期 (the approval has expired)",
        GateFailure.BUDGET_TOKENS: "token 预算用完 (the token budget is spent)",
        GateFailure.BUDGET_REQUESTS: "模型请求预算用完 (the model-request budget is spent)",
        GateFailure.BUDGET_SECONDS: "时间预算用完 (the wall-clock budget is spent)",
        GateFailure.BUDGET_STEPS: "步数预算用完 (the step budget is spent)",
        GateFailure.BUDGET_UNAVAILABLE: "项目剩余 token 预算不足以预留 (the project's token "
        "budget cannot reserve this)",
        GateFailure.WRONG_STATE: "研究状态不允许 (the research is not in a state to run)",
        GateFailure.PROVIDER_ERROR: "模型调用失败 (a model call failed)",
        GateFailure.NO_REPORT: "所有研究会话都结束了，但没有提交报告 (every session ended "
        "without a report)",
    }
)
BUDGET_FAILURES = frozenset(
    {
        GateFailure.BUDGET_TOKENS,
        GateFailure.BUDGET_REQUESTS,
        GateFailure.BUDGET_SECONDS,
        GateFailure.BUDGET_STEPS,
    }
)


@dataclass(frozen=True, slots=True)
class Approval:
    rev: int
    digest: str
    epoch: int
    by: int
    at: float
    expires_at: float


@dataclass(frozen=True, slots=True)
class Spend:
    tokens: int = 0
    requests: int = 0
    seconds: float = 0.0  # wall-clock time spent running (pauses excluded)
    steps: int = 0

    def as_dict(self) -> dict[str, float | int]:
        return {"tokens": self.tokens, "requests": self.requests,
                "seconds": round(self.seconds, 1), "steps": self.steps}  # fmt: skip


@dataclass(frozen=True, slots=True)
class RunView:
    """What the gates read of a run, as stored now."""

    state: ResearchState
    rev: int
    digest: str
    proposal: Proposal
    approval: Approval | None
    spend: Spend = field(default_factory=Spend)


def _approval_failure(run: RunView, epoch: int, now: float) -> GateFailure | None:
    a = run.approval
    if a is None:
        return GateFailure.NOT_APPROVED
    if a.rev != run.rev:
        return GateFailure.REVISION_CHANGED
    if a.digest != run.digest or run.proposal.digest != run.digest:
        return GateFailure.DIGEST_MISMATCH
    if a.epoch != epoch:
        return GateFailure.EPOCH_CHANGED
    if now >= a.expires_at:
        return GateFailure.APPROVAL_EXPIRED
    return None


def budget_failure(budget: Budget, spend: Spend) -> GateFailure | None:
    if spend.tokens >= budget.tokens:
        return GateFailure.BUDGET_TOKENS
    if spend.requests >= budget.requests:
        return GateFailure.BUDGET_REQUESTS
    if spend.seconds >= budget.seconds:
        return GateFailure.BUDGET_SECONDS
    if spend.steps >= budget.steps:
        return GateFailure.BUDGET_STEPS
    return None


def start_gate(
    run: RunView,
    *,
    project_state: str,
    epoch: int,
    now: float,
    tokens_left: int | None,
    resuming: bool = False,
) -> GateFailure | None:
    """Before 开始研究 (or a resume): the run's state, the project is active, the approval
    covers this revision, digest and epoch and has not expired, and the budget has room.
    ``tokens_left`` is what the project's own token budget still has unreserved (None: no
    project budget); a start must be able to reserve the run's whole token budget in it.
    An approval's expiry bounds when a run may *start*; a resume re-checks everything but it."""
    wanted = (_S.PAUSED, _S.PAUSED_RECONCILE) if resuming else (_S.APPROVED,)
    if run.state not in wanted:
        return GateFailure.WRONG_STATE
    if project_state != "active":
        return GateFailure.PROJECT_NOT_ACTIVE
    failure = _approval_failure(run, epoch, now)
    if failure is GateFailure.APPROVAL_EXPIRED and resuming:
        failure = None
    if failure is not None:
        return failure
    if budget_failure(run.proposal.budget, run.spend) is not None:
        return budget_failure(run.proposal.budget, run.spend)
    if not resuming and tokens_left is not None and tokens_left < run.proposal.budget.tokens:
        return GateFailure.BUDGET_UNAVAILABLE
    return None


def step_gate(run: RunView, *, project_state: str, epoch: int) -> GateFailure | None:
    """Before every model step of a running run: still running, the project active, the approval
    still binding this revision, digest and epoch, and budget left. One request is checked
    before it is sent, so a run overshoots a budget by at most that one request."""
    if run.state is not _S.RUNNING:
        return GateFailure.WRONG_STATE
    if project_state != "active":
        return GateFailure.PROJECT_NOT_ACTIVE
    failure = _approval_failure(run, epoch, now=float("-inf"))  # expiry bounds starts only
    if failure is not None:
        return failure
    return budget_failure(run.proposal.budget, run.spend)


def display_state(state: ResearchState, approval: Approval | None, now: float) -> str:
    """The state a card shows: ``expired`` for an approved run past its approval's expiry."""
    if state is _S.APPROVED and approval is not None and now >= approval.expires_at:
        return EXPIRED
    return state.value
