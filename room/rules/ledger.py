"""The delivery ledger's rules (pure: no I/O, no clock).

One row per (message, recipient) says how far a message got towards an agent's session
(docs/architecture.md, "The delivery ledger"). This module holds everything that decides about
those rows without reading them: the states (:class:`DeliveryState`), the one table of allowed
transitions (:data:`ALLOWED_FROM`), the state a new row starts in (:func:`initial_state`), the one
rule that says whether a member may be dispatched now (:func:`dispatch_blocker`), and the machine
codes of the reasons a row carries (:class:`Reason`, each with an English text).

The store moves rows only along :data:`ALLOWED_FROM`; the actions ask :func:`dispatch_blocker`
once, inside the write that hands deliveries over.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from types import MappingProxyType

from room.rules.lifecycle import MemberStatus, ProjectState, admission_open, dispatch_open


class DeliveryState(StrEnum):
    PENDING = "pending"  # written, not yet handed to the recipient's session
    HELD = "held"  # recipient or project paused; dispatched on resume
    DELIVERED = "delivered"  # handed to the session; not yet taken into a turn
    CONSUMED = "consumed"  # the session really took it into a turn
    UNKNOWN = "unknown"  # hand-off interrupted; no automatic resend until reconciled
    FAILED = "failed"  # gave up, with a reason
    CANCELLED = "cancelled"  # recipient left or message retracted before delivery


class DeliveryMode(StrEnum):
    QUEUE = "queue"  # started a new turn
    STEER = "steer"  # inserted at a step boundary of a running turn


_D = DeliveryState

OPEN_STATES: frozenset[DeliveryState] = frozenset({_D.PENDING, _D.HELD, _D.DELIVERED, _D.UNKNOWN})
TERMINAL_STATES: frozenset[DeliveryState] = frozenset(DeliveryState) - OPEN_STATES

# The ledger's transitions: a state may only be reached from these. Terminal states (consumed,
# failed, cancelled) are left only by the start-up reconciliation and a cleared brake resuming
# the turns it cut short (:data:`RECONCILE_FROM`), and by a person's retry of a failed delivery
# (:data:`RETRY_FROM`), each of which says so explicitly with a reconcile record.
ALLOWED_FROM: Mapping[DeliveryState, frozenset[DeliveryState]] = MappingProxyType(
    {
        _D.PENDING: frozenset({_D.HELD, _D.DELIVERED, _D.UNKNOWN}),
        _D.HELD: frozenset({_D.PENDING, _D.DELIVERED, _D.UNKNOWN}),
        _D.DELIVERED: frozenset({_D.PENDING, _D.UNKNOWN}),
        _D.CONSUMED: frozenset({_D.PENDING, _D.DELIVERED, _D.UNKNOWN}),
        _D.UNKNOWN: frozenset({_D.PENDING, _D.DELIVERED}),
        _D.FAILED: frozenset({_D.PENDING, _D.HELD, _D.DELIVERED, _D.UNKNOWN}),
        _D.CANCELLED: frozenset({_D.PENDING, _D.HELD, _D.DELIVERED, _D.UNKNOWN}),
    }
)

# A turn the crash cut short is settled by the start-up reconciliation, and a turn a brake cut
# short by the person clearing it: the one path that may leave ``consumed`` (a reply posted
# before the crash settles its deliveries as consumed; an unanswered prompt goes back to wait).
RECONCILE_FROM: frozenset[DeliveryState] = frozenset(
    {_D.PENDING, _D.DELIVERED, _D.CONSUMED, _D.UNKNOWN}
)

# A person's retry (``POST /api/deliveries/{id}/retry``) moves a failed delivery back to wait.
RETRY_FROM: frozenset[DeliveryState] = frozenset({_D.FAILED})

# What an external agent may report about a delivery offered to it, and from where.
CONFIRM_FROM: Mapping[DeliveryState, frozenset[DeliveryState]] = MappingProxyType(
    {
        _D.DELIVERED: frozenset({_D.PENDING, _D.UNKNOWN}),  # `received`
        _D.CONSUMED: frozenset({_D.PENDING, _D.DELIVERED, _D.UNKNOWN}),  # `consume`
        _D.PENDING: frozenset({_D.UNKNOWN, _D.DELIVERED}),  # `redeliver`
    }
)


def allowed(source: DeliveryState | str, target: DeliveryState | str) -> bool:
    """True if a row in ``source`` may move to ``target`` (outside the start-up reconciliation)."""
    return DeliveryState(source) in ALLOWED_FROM[DeliveryState(target)]


class Reason(StrEnum):
    """Why a delivery is where it is: the machine code stored in ``deliveries.reason_code`` and
    carried by ``delivery`` frames and receipts (``reason`` holds any detail). The English text
    of each is :data:`REASON_TEXTS`."""

    RECIPIENT_LEFT = "recipient_left"
    MESSAGE_DELETED = "message_deleted"
    MEMBER_PAUSED = "member_paused"
    PROJECT_NOT_ACTIVE = "project_not_active"
    PROJECT_TRASHED = "project_trashed"
    SOCKET_LOST = "socket_lost"
    AWAITING_CONFIRMATION = "awaiting_confirmation"
    REDELIVERY_REQUESTED = "redelivery_requested"
    DISPATCH_STOPPED = "dispatch_stopped"
    LOOP_BRAKE = "loop_brake"
    RESTART_REPLY_POSTED = "restart_reply_posted"
    RESTART_AFTER_EFFECT = "restart_after_effect"
    RESTART_BEFORE_EFFECT = "restart_before_effect"
    RESTART_IN_INBOX = "restart_in_inbox"
    PROVIDER_ERROR = "provider_error"
    TURN_STOPPED = "turn_stopped"
    TURN_FAILED = "turn_failed"
    TURN_NOT_STARTED = "turn_not_started"
    ANSWER_NOT_POSTED = "answer_not_posted"
    BRAKE_RESUMED = "brake_resumed"
    RETRY_REQUESTED = "retry_requested"
    HOME_NODE_OFFLINE = "home_node_offline"


_R = Reason

# The English text of each code; also the free-text ``reason`` of a row that has no more detail
# (the wording rows carried before the codes existed, which clients may still show).
REASON_TEXTS: Mapping[Reason, str] = MappingProxyType(
    {
        _R.RECIPIENT_LEFT: "recipient left",
        _R.MESSAGE_DELETED: "message deleted",
        _R.MEMBER_PAUSED: "member paused",
        _R.PROJECT_NOT_ACTIVE: "project not active",
        _R.PROJECT_TRASHED: "project trashed",
        _R.SOCKET_LOST: "socket lost before receipt",
        _R.AWAITING_CONFIRMATION: "awaiting the agent's confirmation",
        _R.REDELIVERY_REQUESTED: "the external agent asked for it again",
        _R.DISPATCH_STOPPED: "dispatch stopped before the turn started",
        _R.LOOP_BRAKE: "loop brake: waiting for a human",
        _R.RESTART_REPLY_POSTED: "the turn's reply was posted before the restart",
        _R.RESTART_AFTER_EFFECT: "turn interrupted by a restart after it had acted;"
        " not re-run (no duplicates)",
        _R.RESTART_BEFORE_EFFECT: "turn interrupted by a restart before any effect;"
        " dispatched again",
        _R.RESTART_IN_INBOX: "in the session inbox at restart, taken by no turn; dispatched again",
        _R.PROVIDER_ERROR: "the model provider refused or failed the request",
        _R.TURN_STOPPED: "stopped: a person stopped this work, or the project stopped",
        _R.TURN_FAILED: "internal error",
        _R.TURN_NOT_STARTED: "the turn could not start",
        _R.ANSWER_NOT_POSTED: "answer not posted",
        _R.BRAKE_RESUMED: "the brake that stopped this turn was cleared; dispatched again once",
        _R.RETRY_REQUESTED: "a person asked for this failed delivery again; dispatched once more",
        _R.HOME_NODE_OFFLINE: "the project's home node is offline: waiting for it, or for an"
        " operator to move the project",
    }
)


def text_of(reason: Reason | str | None) -> str | None:
    """The English text of a reason code (None for no code)."""
    return None if reason is None else REASON_TEXTS[Reason(reason)]


def detail_of(code: Reason | str | None, reason: str | None) -> str | None:
    """What a row's stored ``reason`` says beyond its code (a provider's error message), or
    None when it is only the code's own text (or there is no code to translate)."""
    if reason is None or code is None or code not in REASON_TEXTS:
        return None
    return None if reason == REASON_TEXTS[Reason(code)] else reason


_WAKING = frozenset(s.value for s in ProjectState if admission_open(s))
# Looked up once: an enum class's attributes are slow to read on Python 3.11, and
# :func:`initial_state` runs for every delivery a send writes.
_ACTIVE, _PENDING, _HELD = MemberStatus.ACTIVE, DeliveryState.PENDING, DeliveryState.HELD


def initial_state(project_state: str, member_status: str) -> DeliveryState:
    """The state a new delivery row starts in: ``pending`` when a new message may wake agents in
    the project (lifecycle's admission table) and the recipient is active, else ``held``."""
    if project_state in _WAKING and member_status == _ACTIVE:
        return _PENDING
    return _HELD


def dispatch_blocker(project_state: str, member_status: str, brake_holds: bool) -> Reason | None:
    """THE dispatch rule: why a member's deliveries may not be handed to its session now, or
    None when they may. Built on lifecycle's admission table (``dispatch_open``), the member's
    status and whether the project's loop brake holds the member (room.rules.brakes)."""
    if not dispatch_open(ProjectState(project_state)):
        return Reason.PROJECT_NOT_ACTIVE
    if member_status == MemberStatus.LEFT:
        return Reason.RECIPIENT_LEFT
    if member_status != MemberStatus.ACTIVE:
        return Reason.MEMBER_PAUSED
    if brake_holds:
        return Reason.LOOP_BRAKE
    return None


def waiting_state(blocker: Reason | None) -> DeliveryState:
    """Where deliveries go back to while ``blocker`` stands: ``held`` while the project or the
    member is paused or closed (released on resume), ``pending`` otherwise (the brake: they are
    dispatched once a person clears it)."""
    if blocker in (Reason.PROJECT_NOT_ACTIVE, Reason.MEMBER_PAUSED, Reason.RECIPIENT_LEFT):
        return DeliveryState.HELD
    return DeliveryState.PENDING
