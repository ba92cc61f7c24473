"""The one dispatcher of committed effects (:mod:`room.rules.effects`).

The database calls :func:`apply` on the event loop with the effects of each committed job, in
commit order; nothing else publishes a stored change, wakes an agent for a delivery or drops the
roster cache. A failure here is logged, never raised into the writer.
"""

from __future__ import annotations

import logging

from room.actions import presence, unread
from room.infra.frames import CLOSE_SIGNED_OUT
from room.rules.effects import (
    Broadcast,
    CloseAgentSockets,
    CutMember,
    Effect,
    FollowUp,
    PresenceChanged,
    Publish,
    RosterChanged,
    Wake,
    WakeProject,
)
from room.services import Services

log = logging.getLogger(__name__)

NEW_MESSAGE = '{"type":"message",'  # a new message's event (room.store.messages.event_frame)


def apply(core: Services, effects: list[Effect]) -> None:
    """Carry out one committed job's effects, in the order it recorded them. One that fails is
    logged and the rest still run (a failed publish must not cost the wake after it)."""
    for effect in effects:
        try:
            _apply_one(core, effect)
        except Exception:
            log.exception("carrying out %s failed", type(effect).__name__)


def _apply_one(core: Services, effect: Effect) -> None:
    hub = core.hub
    match effect:
        case Publish(project_id, seq, frame):
            if core.relay is not None:  # several servers: in seq order with theirs
                core.relay.publish(project_id, seq, frame)
            else:
                hub.publish(project_id, seq, frame)
            if frame.startswith(NEW_MESSAGE):
                hub.messages += 1
            unread.schedule(core, project_id)  # a message, an edit or a delete
        case Broadcast(project_id, frame):
            hub.broadcast(project_id, frame)
        case Wake(project_id, member_ids):
            core.agents.wake(project_id, member_ids)
            if core.relay is not None:  # an external agent's socket may be on another server
                core.relay.wake_elsewhere(project_id, list(member_ids))
        case WakeProject(project_id):
            core.agents.wake_project(project_id)
        case RosterChanged(project_id):
            core.rosters.invalidate(project_id)
            if core.relay is not None:  # several servers with a bus: theirs too
                core.relay.roster_changed(project_id)
            presence.schedule(core, project_id)
        case PresenceChanged(project_id):
            presence.schedule(core, project_id)
        case CutMember(project_id, member_id):
            hub.cut_member(project_id, member_id)
        case CloseAgentSockets(member_id, reason):
            hub.presence.cut_session(
                hub.presence.agent_session(member_id), reason, CLOSE_SIGNED_OUT
            )
        case FollowUp():
            _follow_up(core, effect)


def _follow_up(core: Services, effect: FollowUp) -> None:
    def done(result: object, error: BaseException | None) -> None:
        if error is None:
            return
        log.info("follow-up %s failed: %s", effect.label, error)
        report = effect.on_error(error) if effect.on_error is not None else None
        if report is not None:
            core.db.submit_then(report, _log_failure, locks=effect.locks)

    core.db.submit_then(effect.job, done, locks=effect.locks)


def _log_failure(result: object, error: BaseException | None) -> None:
    if error is not None:
        log.warning("reporting a failed follow-up failed too: %s", error)
