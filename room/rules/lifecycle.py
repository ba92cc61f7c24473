"""Project and member lifecycle state machines (pure: no I/O, no clock).

Each machine is one table of data — :data:`PROJECT_TRANSITIONS` and
:data:`MEMBER_TRANSITIONS` — plus the refusal reason for every pair the table does not allow
(:data:`PROJECT_REFUSALS`, :data:`MEMBER_REFUSALS`). ``docs/lifecycle.md`` prints the same tables
and a test parses it, so the docs cannot drift from the code.

The actions layer asks :func:`decide` (or :func:`decide_member`) what a request means, writes the
audit record whether it was allowed or not, and then runs the decision's :class:`Procedure`:

* ``Procedure.STOP`` (pause / archive / trash, and ``retry_stop``): write ``stopping`` with the
  decision's ``target`` and ``from_state`` (the ``stop_target`` / ``state_from`` columns), block
  admission and wake-ups, ask every running turn to stop, re-read the real session state, then
  write :func:`finish_stop` of the result.
* ``Procedure.PURGE``: release resources one by one, then write :func:`finish_purge` of the result.
  :func:`check_purge_request` must have passed first.
* ``Procedure.NONE``: write ``target`` at once.

Human-facing text is Chinese first with English in parentheses, everywhere in this module.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Generic, TypeVar

from room.errors import BadRequestError, ConflictError, ForbiddenError


class ProjectState(StrEnum):
    ACTIVE = "active"
    STOPPING = "stopping"  # admission blocked, stop requested; transient within one action
    STOP_UNCONFIRMED = "stop_unconfirmed"
    PAUSED = "paused"
    ARCHIVED = "archived"
    COMPLETE = "complete"  # the work is done (actual hours recorded); read-only like archived
    ABANDONED = "abandoned"  # the work was given up; read-only like archived
    TRASHED = "trashed"
    PURGE_BLOCKED = "purge_blocked"
    PURGED = "purged"  # the tombstone


class ProjectOp(StrEnum):
    PAUSE = "pause"
    RESUME = "resume"
    ARCHIVE = "archive"
    COMPLETE = "complete"
    ABANDON = "abandon"
    TRASH = "trash"
    RESTORE = "restore"
    PURGE = "purge"
    RETRY_STOP = "retry_stop"
    CANCEL_STOP = "cancel_stop"


class ActorKind(StrEnum):
    """Who asks, as bound server-side from the authenticated connection (never from the body)."""

    OWNER = "owner"  # a human with the owner role in this project
    MEMBER = "member"  # a human without the owner role
    AGENT = "agent"


class MemberStatus(StrEnum):
    ACTIVE = "active"
    PAUSED = "paused"
    LEFT = "left"  # final: authorship kept, names tombstoned


class MemberOp(StrEnum):
    PAUSE = "pause"
    RESUME = "resume"
    STOP = "stop"  # stop current work; the status does not change
    LEAVE = "leave"


class Procedure(StrEnum):
    """What the actions layer must run before the target state is reached."""

    NONE = "none"
    STOP = "stop"
    PURGE = "purge"


class Remembered(StrEnum):
    """A target that is not fixed by the table but read from the remembered :class:`PendingStop`."""

    TARGET = "pending.target"
    FROM = "pending.from"


_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class Transition(Generic[_T]):
    target: _T
    procedure: Procedure = Procedure.NONE


@dataclass(frozen=True, slots=True)
class PendingStop:
    """What a project in ``stopping``/``stop_unconfirmed`` remembers: where it goes, where it was."""

    target: ProjectState
    from_state: ProjectState


@dataclass(frozen=True, slots=True)
class Decision(Generic[_T]):
    """The meaning of one lifecycle request. Refused decisions have no target and no procedure.

    ``from_state`` is set only when a stop sequence starts: it is the state ``cancel_stop``
    returns to. ``interim`` is the state to write while the procedure runs (``stopping``).
    """

    state: _T
    op: str
    allowed: bool
    reason: str | None
    message: str
    procedure: Procedure = Procedure.NONE
    target: _T | None = None
    from_state: _T | None = None
    interim: _T | None = None

    @property
    def needs_stop(self) -> bool:
        return self.procedure is Procedure.STOP

    def raise_if_refused(self) -> None:
        """Raise the matching error for a refused decision (403 for actor, 409 for state)."""
        if self.allowed:
            return
        assert self.reason is not None
        details = {"state": str(self.state), "op": self.op}
        if self.reason in ACTOR_REASONS:
            raise LifecycleForbiddenError(self.message, code=self.reason, **details)
        raise LifecycleConflictError(self.message, code=self.reason, **details)


class LifecycleForbiddenError(ForbiddenError):
    """The actor may never run this operation (agents; humans without the owner role)."""

    code = "lifecycle_forbidden"


class LifecycleConflictError(ConflictError):
    """The operation is not possible from the current state."""

    code = "lifecycle_conflict"


class PurgeConfirmationError(BadRequestError):
    """The purge request did not carry the exact project name and an explicit confirmation."""

    code = "purge_not_confirmed"


# -- reasons ------------------------------------------------------------------------------------

ACTOR_REASONS = frozenset({"agent_forbidden", "not_owner", "not_owner_or_self"})

REASON_MESSAGES: Mapping[str, str] = MappingProxyType(
    {
        "agent_forbidden": "智能体不能执行生命周期操作 (Agents cannot run lifecycle operations.)",
        "not_owner": "只有项目所有者可以执行此操作 (Only a project owner can do this.)",
        "not_owner_or_self": (
            "只有项目所有者或该成员本人可以执行此操作 "
            "(Only a project owner or the member themself can do this.)"
        ),
        "already_in_state": "已经处于该状态 (Already in that state.)",
        "restore_first": "请先恢复项目 (Restore the project first.)",
        "not_restorable": (
            "只有已归档、已完成、已放弃或回收站中的项目可以恢复 "
            "(Only archived, complete, abandoned or trashed projects can be restored.)"
        ),
        "not_trashed": "只有回收站中的项目可以彻底清除 (Only a trashed project can be purged; move it to the trash first.)",
        "no_pending_stop": "没有待确认的停止 (There is no unconfirmed stop to retry or cancel.)",
        "stop_in_progress": "正在停止运行中的回合，请稍候 (Running turns are being stopped; wait for the result.)",
        "stop_unconfirmed": (
            "上次停止未确认：请重试检查或取消 "
            "(The last stop was not confirmed: retry the check or cancel it first.)"
        ),
        "purge_blocked": "清除未完成，只能重试清除 (The purge is incomplete; only retrying the purge is possible.)",
        "project_purged": "项目已彻底清除 (The project has been purged.)",
        "member_left": "该成员已离开项目 (The member has left the project.)",
    }
)

# Actors refused whatever the state; an owner goes on to the state table.
PROJECT_ACTOR_REFUSALS: Mapping[ActorKind, str] = MappingProxyType(
    {ActorKind.MEMBER: "not_owner", ActorKind.AGENT: "agent_forbidden"}
)

# Keyed by (actor, is_self): a human may manage their own membership; agents never, not even
# their own (agent tokens have no path to lifecycle operations).
MEMBER_ACTOR_REFUSALS: Mapping[tuple[ActorKind, bool], str] = MappingProxyType(
    {
        (ActorKind.MEMBER, False): "not_owner_or_self",
        (ActorKind.AGENT, False): "agent_forbidden",
        (ActorKind.AGENT, True): "agent_forbidden",
    }
)

# -- the project table --------------------------------------------------------------------------

_PS, _PO, _STOP, _PURGE = ProjectState, ProjectOp, Procedure.STOP, Procedure.PURGE

PROJECT_TRANSITIONS: Mapping[
    tuple[ProjectState, ProjectOp], Transition[ProjectState | Remembered]
] = MappingProxyType(
    {
        (_PS.ACTIVE, _PO.PAUSE): Transition(_PS.PAUSED, _STOP),
        (_PS.ACTIVE, _PO.ARCHIVE): Transition(_PS.ARCHIVED, _STOP),
        (_PS.ACTIVE, _PO.TRASH): Transition(_PS.TRASHED, _STOP),
        (_PS.PAUSED, _PO.RESUME): Transition(_PS.ACTIVE),
        # A paused project runs no turns, but an external agent may still be mid-turn: the stop
        # check is cheap, so every way into archived/trashed takes it.
        (_PS.PAUSED, _PO.ARCHIVE): Transition(_PS.ARCHIVED, _STOP),
        (_PS.PAUSED, _PO.TRASH): Transition(_PS.TRASHED, _STOP),
        (_PS.ARCHIVED, _PO.TRASH): Transition(_PS.TRASHED, _STOP),
        # Complete and abandoned end the work like an archive does: nothing runs, read-only.
        (_PS.ACTIVE, _PO.COMPLETE): Transition(_PS.COMPLETE, _STOP),
        (_PS.ACTIVE, _PO.ABANDON): Transition(_PS.ABANDONED, _STOP),
        (_PS.PAUSED, _PO.COMPLETE): Transition(_PS.COMPLETE, _STOP),
        (_PS.PAUSED, _PO.ABANDON): Transition(_PS.ABANDONED, _STOP),
        (_PS.COMPLETE, _PO.TRASH): Transition(_PS.TRASHED, _STOP),
        (_PS.ABANDONED, _PO.TRASH): Transition(_PS.TRASHED, _STOP),
        (_PS.COMPLETE, _PO.RESTORE): Transition(_PS.PAUSED),
        (_PS.ABANDONED, _PO.RESTORE): Transition(_PS.PAUSED),
        # Restoring starts nothing: the owner resumes explicitly.
        (_PS.ARCHIVED, _PO.RESTORE): Transition(_PS.PAUSED),
        (_PS.TRASHED, _PO.RESTORE): Transition(_PS.PAUSED),
        (_PS.TRASHED, _PO.PURGE): Transition(_PS.PURGED, _PURGE),
        (_PS.PURGE_BLOCKED, _PO.PURGE): Transition(_PS.PURGED, _PURGE),
        (_PS.STOP_UNCONFIRMED, _PO.RETRY_STOP): Transition(Remembered.TARGET, _STOP),
        (_PS.STOP_UNCONFIRMED, _PO.CANCEL_STOP): Transition(Remembered.FROM),
    }
)

# The state an op leads to, to recognise "already there" requests.
_OP_GOAL = {
    _PO.PAUSE: _PS.PAUSED,
    _PO.RESUME: _PS.ACTIVE,
    _PO.ARCHIVE: _PS.ARCHIVED,
    _PO.TRASH: _PS.TRASHED,
    _PO.COMPLETE: _PS.COMPLETE,
    _PO.ABANDON: _PS.ABANDONED,
}


def _project_refusal(state: ProjectState, op: ProjectOp) -> str:
    # Order matters: a state that blocks everything wins over what is wrong with the op.
    if state is _PS.PURGED:
        return "project_purged"
    if state is _PS.STOPPING:
        return "stop_in_progress"
    if state is _PS.STOP_UNCONFIRMED:
        return "stop_unconfirmed"
    if state is _PS.PURGE_BLOCKED:
        return "purge_blocked"
    if op in (_PO.RETRY_STOP, _PO.CANCEL_STOP):
        return "no_pending_stop"
    if op is _PO.PURGE:
        return "not_trashed"
    if op is _PO.RESTORE:
        return "not_restorable"
    if _OP_GOAL.get(op) is state:
        return "already_in_state"
    if state in (_PS.ARCHIVED, _PS.TRASHED, _PS.COMPLETE, _PS.ABANDONED):
        return "restore_first"
    raise AssertionError(f"no refusal rule for {state}/{op}")  # pragma: no cover


PROJECT_REFUSALS: Mapping[tuple[ProjectState, ProjectOp], str] = MappingProxyType(
    {
        (state, op): _project_refusal(state, op)
        for state in ProjectState
        for op in ProjectOp
        if (state, op) not in PROJECT_TRANSITIONS
    }
)

# -- the member table ---------------------------------------------------------------------------

_MS, _MO = MemberStatus, MemberOp

MEMBER_TRANSITIONS: Mapping[tuple[MemberStatus, MemberOp], Transition[MemberStatus]] = (
    MappingProxyType(
        {
            # Pausing holds new deliveries; the current turn may finish. `stop` interrupts it.
            (_MS.ACTIVE, _MO.PAUSE): Transition(_MS.PAUSED),
            (_MS.ACTIVE, _MO.STOP): Transition(_MS.ACTIVE, _STOP),
            (_MS.ACTIVE, _MO.LEAVE): Transition(_MS.LEFT, _STOP),
            (_MS.PAUSED, _MO.RESUME): Transition(_MS.ACTIVE),
            (_MS.PAUSED, _MO.STOP): Transition(_MS.PAUSED, _STOP),
            (_MS.PAUSED, _MO.LEAVE): Transition(_MS.LEFT, _STOP),
        }
    )
)

MEMBER_REFUSALS: Mapping[tuple[MemberStatus, MemberOp], str] = MappingProxyType(
    {
        (status, op): "member_left" if status is _MS.LEFT else "already_in_state"
        for status in MemberStatus
        for op in MemberOp
        if (status, op) not in MEMBER_TRANSITIONS
    }
)


# -- deciding -----------------------------------------------------------------------------------


def _refused(state: _T, op: str, reason: str) -> Decision[_T]:
    return Decision(
        state=state, op=op, allowed=False, reason=reason, message=REASON_MESSAGES[reason]
    )


def _allowed_message(procedure: Procedure, target: str) -> str:
    if procedure is Procedure.STOP:
        return (
            f"先停止所有运行中的回合，全部确认后进入 {target} "
            f"(Running turns are stopped first; {target} is entered once all are confirmed.)"
        )
    if procedure is Procedure.PURGE:
        return (
            "逐项释放资源并删除项目私有数据，源代码和工作区不会删除 "
            "(Resources are released one by one and private data deleted; "
            "source code and workspaces are kept.)"
        )
    return f"进入 {target} (Enters {target}.)"


def decide(
    state: ProjectState,
    op: ProjectOp,
    actor: ActorKind,
    *,
    pending: PendingStop | None = None,
) -> Decision[ProjectState]:
    """Decide a project lifecycle request. Never raises for a refusal: the decision says why.

    The actor is checked first, so an agent learns nothing about the project's state. ``pending``
    is the remembered stop of a ``stop_unconfirmed`` project; it is required for ``retry_stop``
    and ``cancel_stop`` (a :class:`ValueError` means the stored record is inconsistent).
    """
    state, op, actor = ProjectState(state), ProjectOp(op), ActorKind(actor)
    actor_refusal = PROJECT_ACTOR_REFUSALS.get(actor)
    if actor_refusal is not None:
        return _refused(state, op, actor_refusal)
    transition = PROJECT_TRANSITIONS.get((state, op))
    if transition is None:
        return _refused(state, op, PROJECT_REFUSALS[(state, op)])

    target = transition.target
    from_state: ProjectState | None = None
    if isinstance(target, Remembered):
        if pending is None:
            raise ValueError(f"{op} from {state} needs the remembered pending stop")
        if target is Remembered.TARGET:
            target, from_state = pending.target, pending.from_state
        else:
            target = pending.from_state
    elif transition.procedure is Procedure.STOP:
        from_state = state
    assert isinstance(target, ProjectState)
    return Decision(
        state=state,
        op=op,
        allowed=True,
        reason=None,
        message=_allowed_message(transition.procedure, target),
        procedure=transition.procedure,
        target=target,
        from_state=from_state,
        interim=_PS.STOPPING if transition.procedure is Procedure.STOP else None,
    )


_STOP_TARGETS = frozenset({_PS.PAUSED, _PS.ARCHIVED, _PS.TRASHED, _PS.COMPLETE, _PS.ABANDONED})


def finish_stop(target: ProjectState, all_stopped: bool) -> ProjectState:
    """The state after a stop sequence: ``target`` only if every turn is confirmed stopped."""
    target = ProjectState(target)
    if target not in _STOP_TARGETS:
        raise ValueError(f"{target} is not reached through a stop sequence")
    return target if all_stopped else _PS.STOP_UNCONFIRMED


def finish_purge(all_released: bool) -> ProjectState:
    """The state after a purge run: the tombstone, or ``purge_blocked`` to retry idempotently."""
    return _PS.PURGED if all_released else _PS.PURGE_BLOCKED


def state_after_restart(state: ProjectState) -> ProjectState:
    """The state to assume after a restart: a stop cut off by a crash was never confirmed."""
    state = ProjectState(state)
    return _PS.STOP_UNCONFIRMED if state is _PS.STOPPING else state


def check_purge_request(project_name: str, typed_name: str, confirmed: bool) -> None:
    """Refuse a purge unless the full name was typed exactly and the confirmation is explicit.

    "Exactly" means no trimming, no case folding and no Unicode normalisation: purge is the one
    operation that cannot be undone, so near-misses are refused rather than guessed at.
    """
    if typed_name != project_name:
        raise PurgeConfirmationError(
            "输入的名称与项目全名不一致 (The typed name does not match the full project name.)",
            code="purge_name_mismatch",
        )
    if confirmed is not True:
        raise PurgeConfirmationError(
            "需要明确确认才能彻底清除 (Purging needs an explicit confirmation.)",
            code="purge_not_confirmed",
        )


def decide_member(
    status: MemberStatus,
    op: MemberOp,
    actor: ActorKind,
    *,
    is_self: bool = False,
) -> Decision[MemberStatus]:
    """Decide a member lifecycle request (pause, resume, stop current work, leave).

    Allowed for a project owner on any member, and for a human on their own membership
    (``is_self``). Agents are always refused, even about themselves: agent tokens have no path to
    lifecycle operations. Member procedures never leave an interim status: ``STOP`` asks the
    member's running turn to stop and the status is written at once.
    """
    status, op, actor = MemberStatus(status), MemberOp(op), ActorKind(actor)
    actor_refusal = MEMBER_ACTOR_REFUSALS.get((actor, bool(is_self)))
    if actor_refusal is not None:
        return _refused(status, op, actor_refusal)
    transition = MEMBER_TRANSITIONS.get((status, op))
    if transition is None:
        return _refused(status, op, MEMBER_REFUSALS[(status, op)])
    return Decision(
        state=status,
        op=op,
        allowed=True,
        reason=None,
        message=f"成员进入 {transition.target} (The member enters {transition.target}.)",
        procedure=transition.procedure,
        target=transition.target,
    )


# -- who may post, and what wakes ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Admission:
    """What a project state lets in.

    ``humans_post`` / ``agents_post``: a new message is accepted at all. ``wakes``: a new message
    creates ``pending`` deliveries and wakes the runtime (otherwise its deliveries are ``held``).
    ``dispatch``: pending and held deliveries are handed to sessions.
    """

    humans_post: bool
    agents_post: bool
    wakes: bool
    dispatch: bool


_OPEN = Admission(humans_post=True, agents_post=True, wakes=True, dispatch=True)
_HOLD = Admission(humans_post=True, agents_post=False, wakes=False, dispatch=False)
_SHUT = Admission(humans_post=False, agents_post=False, wakes=False, dispatch=False)

# Humans may keep talking in a paused project (their deliveries wait as `held` until resume);
# every other non-active state is closed, including the transient stop states, where admission is
# exactly what the stop sequence has just blocked.
ADMISSION: Mapping[ProjectState, Admission] = MappingProxyType(
    {state: _OPEN if state is _PS.ACTIVE else _SHUT for state in ProjectState} | {_PS.PAUSED: _HOLD}
)


def admission_open(state: ProjectState) -> bool:
    """True if a new message may wake agents (create ``pending`` deliveries). Only ``active``."""
    return ADMISSION[ProjectState(state)].wakes


def dispatch_open(state: ProjectState) -> bool:
    """True if queued deliveries may be handed to agent sessions. Only ``active``."""
    return ADMISSION[ProjectState(state)].dispatch


def posting_open(state: ProjectState, actor: ActorKind) -> bool:
    """True if ``actor`` may post a message at all (humans also in ``paused``, as ``held``)."""
    rule = ADMISSION[ProjectState(state)]
    return rule.agents_post if ActorKind(actor) is ActorKind.AGENT else rule.humans_post


# -- what a viewer is offered -------------------------------------------------------------------

POST = "post"  # not a lifecycle op: "this viewer may post a message in the project's state"

# Member operations need the project open or a stop under way (stopping a stuck member is how a
# person gets a stop confirmed); the store's ``MEMBER_OPEN_STATES`` is the same set (a test
# checks it).
MEMBER_OPS_STATES = frozenset({_PS.ACTIVE, _PS.PAUSED, _PS.STOPPING, _PS.STOP_UNCONFIRMED})


def project_ops(state: str, actor: ActorKind) -> list[str]:
    """The operations ``actor`` may run on a project in ``state``, in :class:`ProjectOp` order,
    then :data:`POST` if ``actor`` may post a message. What the page offers, nothing more.

    Exactly the ops :func:`decide` allows (a test checks every pair); the tables are read
    directly because ``retry_stop``/``cancel_stop`` need no remembered stop to be *allowed*.
    """
    state, actor = ProjectState(state), ActorKind(actor)
    ops: list[str] = []
    if actor not in PROJECT_ACTOR_REFUSALS:
        ops = [op.value for op in ProjectOp if (state, op) in PROJECT_TRANSITIONS]
    if posting_open(state, actor):
        ops.append(POST)
    return ops


def project_ops_by_kind(state: str) -> dict[str, list[str]]:
    """:func:`project_ops` for every kind of viewer, for frames that every subscriber gets."""
    return {kind.value: project_ops(state, kind) for kind in ActorKind}


def member_ops(
    project_state: str,
    status: str,
    target_kind: str,
    actor: ActorKind,
    *,
    is_self: bool,
) -> list[str]:
    """The operations ``actor`` may run on one member, in :class:`MemberOp` order.

    :func:`decide_member`'s answer, in a project state where member operations run at all.
    ``stop`` is offered for agents only: a person runs no turn to stop (the action accepts it and
    stops nothing). The last owner's ``leave`` is still offered; the action refuses it with
    ``last_owner`` (that rule needs the roster).
    """
    if ProjectState(project_state) not in MEMBER_OPS_STATES:
        return []
    return [
        op.value
        for op in MemberOp
        if decide_member(MemberStatus(status), op, actor, is_self=is_self).allowed
        and (op is not MemberOp.STOP or target_kind == "agent")
    ]


def member_ops_by_viewer(
    project_state: str, status: str, target_kind: str, target_actor: ActorKind
) -> dict[str, list[str]]:
    """:func:`member_ops` on one member for an ``owner`` viewer, a ``member`` viewer (another
    person without the owner role) and ``self`` (the member themself, as ``target_actor``), for
    frames that every subscriber gets. Agents are offered nothing, so they have no entry."""
    return {
        "owner": member_ops(project_state, status, target_kind, ActorKind.OWNER, is_self=False),
        "member": member_ops(project_state, status, target_kind, ActorKind.MEMBER, is_self=False),
        "self": member_ops(project_state, status, target_kind, target_actor, is_self=True),
    }
