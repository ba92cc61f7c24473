"""The task state machine (pure: no I/O, no clock).

One table, :data:`TASK_TRANSITIONS`, says which event moves a task from which state to which;
:data:`TASK_EVENT_ACTORS` says who may trigger each event; ``docs/tasks.md`` prints both and a test
parses it. Everything else here is a small guard the actions layer calls around a transition.

Conventions the actions layer relies on:

* **Dependencies settle separately.** Transitions never look at dependencies. After any change
  that can affect them (a task entering ``waiting`` or ``ready``, a dependency accepted or
  reopened) the actions layer asks :func:`settle` and fires the system event it returns
  (``deps_accepted``: waiting → ready, ``deps_reopened``: ready → waiting). So ``reassign`` lands in
  ``waiting`` and, when every dependency is accepted, immediately settles to ``ready``.
* **Requirement sync remembers where the task was.** ``require_sync`` records the prior state
  (kept, not overwritten, if the task is already in ``needs_sync``); ``sync_receipt`` returns to
  :func:`after_sync` of it. :func:`advance` does this bookkeeping.
* **The revision counts submissions.** It is 0 before the first ``submit`` and every ``submit``
  increments it. A criterion pass counts only on the revision it was recorded for. The only ways
  back to ``submit`` after a review are ``changes_requested`` and ``needs_sync``, so every
  resubmission after requested changes or a requirement sync invalidates all earlier passes.

Human-facing text is Chinese first with English in parentheses.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import TypeVar

from room.errors import BadRequestError, ConflictError, ForbiddenError


class TaskState(StrEnum):
    WAITING = "waiting"  # some dependency is not accepted yet
    READY = "ready"
    IN_PROGRESS = "in_progress"
    IN_REVIEW = "in_review"
    ACCEPTED = "accepted"
    CHANGES_REQUESTED = "changes_requested"
    NEEDS_SYNC = "needs_sync"  # a requirement change touched the task; the owner must acknowledge
    HANDOFF = "handoff"  # the owner left; a human reassigns it
    BLOCKED = "blocked"
    CANCELLED = "cancelled"


class TaskEvent(StrEnum):
    DEPS_ACCEPTED = "deps_accepted"
    DEPS_REOPENED = "deps_reopened"
    START = "start"
    BLOCK = "block"
    UNBLOCK = "unblock"
    SUBMIT = "submit"
    REQUEST_CHANGES = "request_changes"
    ACCEPT = "accept"
    REOPEN = "reopen"
    REQUIRE_SYNC = "require_sync"
    SYNC_RECEIPT = "sync_receipt"
    HANDOFF = "handoff"
    REASSIGN = "reassign"
    CANCEL = "cancel"


class TaskActor(StrEnum):
    OWNER = "owner"  # the task's owner member (human or agent)
    REVIEWER = "reviewer"  # the task's reviewer member (human or agent)
    HUMAN = "human"  # any human member of the project
    SYSTEM = "system"  # the server itself, reacting to another change


class Computed(StrEnum):
    """A target the table cannot fix: ``sync_receipt`` goes to ``after_sync(prior)``."""

    AFTER_SYNC = "after_sync(prior)"


TaskTarget = TaskState | Computed

_S, _E = TaskState, TaskEvent

# Where sync_receipt leads, by the state require_sync interrupted. Its keys are exactly the states
# require_sync may interrupt: not accepted or cancelled work (reopen it first), not handoff (the
# next owner reads the current requirement anyway). Work under review was done against the old
# requirement, so it goes back to in_progress and must be resubmitted.
AFTER_SYNC: Mapping[TaskState, TaskState] = MappingProxyType(
    {
        _S.WAITING: _S.WAITING,
        _S.READY: _S.READY,
        _S.IN_PROGRESS: _S.IN_PROGRESS,
        _S.IN_REVIEW: _S.IN_PROGRESS,
        _S.CHANGES_REQUESTED: _S.CHANGES_REQUESTED,
        _S.BLOCKED: _S.BLOCKED,
    }
)

OPEN_STATES = frozenset(TaskState) - {_S.ACCEPTED, _S.CANCELLED}

_transitions: dict[tuple[TaskState, TaskEvent], TaskTarget] = {
    (_S.WAITING, _E.DEPS_ACCEPTED): _S.READY,
    (_S.READY, _E.DEPS_REOPENED): _S.WAITING,
    (_S.READY, _E.START): _S.IN_PROGRESS,
    (_S.IN_PROGRESS, _E.BLOCK): _S.BLOCKED,
    (_S.BLOCKED, _E.UNBLOCK): _S.IN_PROGRESS,
    (_S.IN_PROGRESS, _E.SUBMIT): _S.IN_REVIEW,
    # A newer revision may replace the one under review.
    (_S.IN_REVIEW, _E.SUBMIT): _S.IN_REVIEW,
    (_S.IN_REVIEW, _E.REQUEST_CHANGES): _S.CHANGES_REQUESTED,
    (_S.IN_REVIEW, _E.ACCEPT): _S.ACCEPTED,
    (_S.CHANGES_REQUESTED, _E.START): _S.IN_PROGRESS,
    (_S.CHANGES_REQUESTED, _E.SUBMIT): _S.IN_REVIEW,
    (_S.ACCEPTED, _E.REOPEN): _S.CHANGES_REQUESTED,
    (_S.CANCELLED, _E.REOPEN): _S.WAITING,
    (_S.NEEDS_SYNC, _E.REQUIRE_SYNC): _S.NEEDS_SYNC,
    (_S.NEEDS_SYNC, _E.SYNC_RECEIPT): Computed.AFTER_SYNC,
    (_S.HANDOFF, _E.REASSIGN): _S.WAITING,
}
# Cross-cutting events, written as rules so they cannot miss a state.
_transitions |= {(state, _E.REQUIRE_SYNC): _S.NEEDS_SYNC for state in AFTER_SYNC}
_transitions |= {(state, _E.HANDOFF): _S.HANDOFF for state in OPEN_STATES - {_S.HANDOFF}}
_transitions |= {(state, _E.CANCEL): _S.CANCELLED for state in OPEN_STATES}

TASK_TRANSITIONS: Mapping[tuple[TaskState, TaskEvent], TaskTarget] = MappingProxyType(
    {(s, e): _transitions[(s, e)] for s in TaskState for e in TaskEvent if (s, e) in _transitions}
)
del _transitions

_O, _R, _H, _SYS = TaskActor.OWNER, TaskActor.REVIEWER, TaskActor.HUMAN, TaskActor.SYSTEM

TASK_EVENT_ACTORS: Mapping[TaskEvent, frozenset[TaskActor]] = MappingProxyType(
    {
        _E.DEPS_ACCEPTED: frozenset({_SYS}),
        _E.DEPS_REOPENED: frozenset({_SYS}),
        _E.START: frozenset({_O}),
        _E.BLOCK: frozenset({_O}),
        _E.UNBLOCK: frozenset({_O, _H}),
        _E.SUBMIT: frozenset({_O}),
        _E.REQUEST_CHANGES: frozenset({_R, _H}),
        _E.ACCEPT: frozenset({_R, _H}),
        _E.REOPEN: frozenset({_H}),
        _E.REQUIRE_SYNC: frozenset({_SYS}),
        _E.SYNC_RECEIPT: frozenset({_O}),
        _E.HANDOFF: frozenset({_SYS}),
        _E.REASSIGN: frozenset({_H}),
        _E.CANCEL: frozenset({_H}),
    }
)

# Events that must carry a note, and what the note is called in messages.
NOTE_REQUIRED: Mapping[TaskEvent, str] = MappingProxyType(
    {
        _E.BLOCK: "reason",
        _E.SUBMIT: "evidence",
        _E.REQUEST_CHANGES: "reason",
        _E.REOPEN: "reason",
        _E.CANCEL: "reason",
    }
)

_REVIEW_EVENTS = frozenset({_E.ACCEPT, _E.REQUEST_CHANGES})


class TaskTransitionError(ConflictError):
    """The event is not possible from the task's state; ``allowed`` lists what is."""

    code = "invalid_task_transition"

    def __init__(self, state: TaskState, event: TaskEvent, allowed: Sequence[TaskEvent]) -> None:
        names = ", ".join(allowed) or "-"
        super().__init__(
            f"任务处于 {state}，不能执行 {event}；可执行：{names} "
            f"(A task in {state} cannot take {event}; allowed: {names}.)",
            state=str(state),
            event=str(event),
            allowed=[str(e) for e in allowed],
        )
        self.state = state
        self.event = event
        self.allowed = list(allowed)


class TaskForbiddenError(ForbiddenError):
    code = "task_actor_forbidden"


class TaskNoteRequiredError(BadRequestError):
    code = "note_required"


class AcceptanceIncompleteError(ConflictError):
    code = "acceptance_incomplete"


def allowed_events(state: TaskState) -> list[TaskEvent]:
    """Events possible from ``state``, in :class:`TaskEvent` order."""
    return [event for event in TaskEvent if (TaskState(state), event) in TASK_TRANSITIONS]


def after_sync(prior: TaskState) -> TaskState:
    """Where ``sync_receipt`` leads when ``require_sync`` interrupted a task in ``prior``."""
    try:
        return AFTER_SYNC[TaskState(prior)]
    except KeyError:
        raise ValueError(f"require_sync cannot interrupt a task in {prior}") from None


def transition(state: TaskState, event: TaskEvent, *, prior: TaskState | None = None) -> TaskState:
    """The state after ``event``, or :class:`TaskTransitionError` naming the allowed events.

    ``prior`` (the state ``require_sync`` interrupted) is needed only for ``sync_receipt``.
    """
    state, event = TaskState(state), TaskEvent(event)
    target = TASK_TRANSITIONS.get((state, event))
    if target is None:
        raise TaskTransitionError(state, event, allowed_events(state))
    if target is Computed.AFTER_SYNC:
        if prior is None:
            raise ValueError("sync_receipt needs the state require_sync interrupted")
        return after_sync(prior)
    assert isinstance(target, TaskState)
    return target


def revision_after(event: TaskEvent, revision: int) -> int:
    """The task revision after ``event``: every ``submit`` starts a new revision."""
    return revision + 1 if TaskEvent(event) is _E.SUBMIT else revision


@dataclass(frozen=True, slots=True)
class TaskSnapshot:
    """The stored facts the machine needs: state, revision and the state a sync interrupted."""

    state: TaskState
    revision: int = 0
    sync_prior: TaskState | None = None


def advance(task: TaskSnapshot, event: TaskEvent) -> TaskSnapshot:
    """Apply ``event`` with all bookkeeping: revision, and the remembered sync prior."""
    state = transition(task.state, event, prior=task.sync_prior)
    prior: TaskState | None = None
    if state is _S.NEEDS_SYNC:
        # A second requirement change while waiting for the receipt keeps the first prior.
        prior = task.sync_prior if task.state is _S.NEEDS_SYNC else task.state
    return TaskSnapshot(
        state=state, revision=revision_after(event, task.revision), sync_prior=prior
    )


def authorize(event: TaskEvent, roles: Collection[TaskActor]) -> None:
    """Refuse ``event`` unless one of the caller's ``roles`` on this task may trigger it.

    An agent may not review its own work: owner without human cannot accept or request changes,
    even if it is also recorded as the reviewer. Humans are trusted to judge their own tasks.
    """
    event = TaskEvent(event)
    held = frozenset(TaskActor(r) for r in roles)
    if event in _REVIEW_EVENTS and _O in held and _H not in held:
        raise TaskForbiddenError(
            "智能体不能评审自己负责的任务 (An agent cannot review its own task.)",
            code="self_review",
            event=str(event),
        )
    if not held & TASK_EVENT_ACTORS[event]:
        who = ", ".join(sorted(TASK_EVENT_ACTORS[event]))
        raise TaskForbiddenError(
            f"只有 {who} 可以执行 {event} (Only {who} may trigger {event}.)",
            event=str(event),
            allowed_actors=sorted(TASK_EVENT_ACTORS[event]),
        )


def check_note(event: TaskEvent, note: str | None) -> None:
    """Refuse an event that needs a note (reason, evidence) when none was given."""
    event = TaskEvent(event)
    name = NOTE_REQUIRED.get(event)
    if name is not None and (note is None or not note.strip()):
        raise TaskNoteRequiredError(
            f"{event} 需要填写 {name} ({event} needs a {name}.)", event=str(event), note=name
        )


_K = TypeVar("_K", bound=Hashable)


def missing_criteria(
    criteria_ids: Sequence[_K], passes: Mapping[_K, tuple[int, bool]], revision: int
) -> list[_K]:
    """Criteria without a pass recorded on the current ``revision``, in their given order."""
    return [cid for cid in criteria_ids if passes.get(cid) != (revision, True)]


def acceptance_complete(
    criteria_ids: Sequence[_K], passes: Mapping[_K, tuple[int, bool]], revision: int
) -> bool:
    """True if every criterion passed on the current revision.

    A task with no criteria is never complete: acceptance without anything checked is exactly
    what the guard exists to stop (plans require at least one criterion per item).
    """
    return bool(criteria_ids) and not missing_criteria(criteria_ids, passes, revision)


def check_acceptance(
    criteria_ids: Sequence[_K], passes: Mapping[_K, tuple[int, bool]], revision: int
) -> None:
    """The ``accept`` guard: raise :class:`AcceptanceIncompleteError` listing what is missing."""
    if acceptance_complete(criteria_ids, passes, revision):
        return
    missing = missing_criteria(criteria_ids, passes, revision) if criteria_ids else []
    raise AcceptanceIncompleteError(
        f"第 {revision} 版还有 {len(missing)} 条验收标准未通过 "
        f"(Revision {revision} still has {len(missing)} unpassed criteria.)",
        code="acceptance_incomplete" if criteria_ids else "no_criteria",
        revision=revision,
        missing=[str(c) for c in missing],
    )


def waiting_on(dep_states: Mapping[str, TaskState]) -> list[str]:
    """Dependency keys not yet accepted, in the mapping's order.

    A cancelled dependency keeps its dependents waiting: whether to drop it or reopen it is a
    human decision, not something to infer.
    """
    return [key for key, state in dep_states.items() if TaskState(state) is not _S.ACCEPTED]


def settle(state: TaskState, dep_states: Mapping[str, TaskState]) -> TaskEvent | None:
    """The system event that brings ``state`` in line with its dependencies, if any."""
    state = TaskState(state)
    pending = waiting_on(dep_states)
    if state is _S.WAITING and not pending:
        return _E.DEPS_ACCEPTED
    if state is _S.READY and pending:
        return _E.DEPS_REOPENED
    return None


# -- moving a card on the board -------------------------------------------------------------------


class TaskMoveError(ConflictError):
    """No event a member may ask for moves a task from ``state`` to ``target``; ``reachable``
    lists the states that can be reached from here (a person's board offers those columns)."""

    code = "invalid_task_move"

    def __init__(self, state: TaskState, target: TaskState, reachable: Sequence[TaskState]) -> None:
        names = ", ".join(reachable) or "-"
        super().__init__(
            f"任务不能从 {state} 直接移到 {target}；可移到：{names} "
            f"(A task in {state} cannot move to {target}; it can move to: {names}.)",
            state=str(state),
            to=str(target),
            reachable=[str(s) for s in reachable],
        )


def _asked_for(event: TaskEvent) -> bool:
    """Events a member may ask for (not the server's own reactions)."""
    return TASK_EVENT_ACTORS[event] != frozenset({_SYS})


def move_targets(state: TaskState, prior: TaskState | None = None) -> dict[TaskState, TaskEvent]:
    """Target state → the member event that leads there from ``state`` (first in
    :class:`TaskEvent` order when two would). ``prior`` is the state a sync interrupted."""
    targets: dict[TaskState, TaskEvent] = {}
    for event in allowed_events(state):
        if not _asked_for(event):
            continue
        if event is _E.SYNC_RECEIPT and prior is None:
            continue
        targets.setdefault(transition(state, event, prior=prior), event)
    return targets


def move_event(state: TaskState, target: TaskState, prior: TaskState | None = None) -> TaskEvent:
    """The event a drag from column ``state`` to column ``target`` asks for, or
    :class:`TaskMoveError` listing the reachable columns. Who may ask for it, and the note it
    needs, are checked afterwards like any event (:func:`authorize`, :func:`check_note`)."""
    state, target = TaskState(state), TaskState(target)
    targets = move_targets(state, prior)
    event = targets.get(target)
    if event is None or target is state:
        reachable = [s for s in TaskState if s in targets and s is not state]
        raise TaskMoveError(state, target, reachable)
    return event
