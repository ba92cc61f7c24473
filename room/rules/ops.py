"""What a viewer may do, attached to projects and members on the wire (docs/protocol.md,
"Allowed operations").

The rules are :func:`room.rules.lifecycle.project_ops` and :func:`room.rules.lifecycle.member_ops`;
this module only says who the viewer is and where the lists go. An answer addressed to one viewer
carries that viewer's list on each object (``allowed_ops: [...]``); a frame broadcast to every
subscriber carries, next to the objects, the lists for every kind of viewer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from room.rules.entities import Member, Project
from room.rules.lifecycle import (
    ActorKind,
    MemberStatus,
    ProjectState,
    member_ops,
    member_ops_by_viewer,
    project_ops,
    project_ops_by_kind,
)


def viewer_kind(member: Member) -> ActorKind:
    if member.kind == "agent":
        return ActorKind.AGENT
    return ActorKind.OWNER if member.is_owner else ActorKind.MEMBER


def _kind_of(wire: Mapping[str, Any]) -> ActorKind:
    if wire["kind"] == "agent":
        return ActorKind.AGENT
    return ActorKind.OWNER if wire["role"] == "owner" else ActorKind.MEMBER


def project_for(
    project: Project, viewer: ActorKind, extra: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The project as one viewer gets it, with the operations that viewer may run; ``extra``
    (the ``workspace`` object, computed off the loop) replaces fields of the stored row."""
    wire = project.to_wire() | {"allowed_ops": project_ops(ProjectState(project.state), viewer)}
    return wire | dict(extra or {})


def project_frame(project: Mapping[str, Any]) -> dict[str, Any]:
    """The ``project`` frame: the same for every subscriber, with every kind's operations."""
    state = ProjectState(project["state"])
    return {"type": "project", "project": dict(project), "allowed_ops": project_ops_by_kind(state)}


def members_for(
    members: list[dict[str, Any]], project_state: str, viewer: Member
) -> list[dict[str, Any]]:
    """Wire members (``members_store.wire_list``) as one viewer gets them, each with the
    operations that viewer may run on it."""
    state, kind = ProjectState(project_state), viewer_kind(viewer)
    return [
        m
        | {
            "allowed_ops": member_ops(
                state, MemberStatus(m["status"]), m["kind"], kind, is_self=m["id"] == viewer.id
            )
        }
        for m in members
    ]


def member_for(member: Member, project_state: str, viewer: Member) -> dict[str, Any]:
    """One member as one viewer gets it (the member card, an added agent)."""
    return members_for([member.to_wire()], project_state, viewer)[0]


def members_frame(
    project_id: int, members: list[dict[str, Any]], project_state: str
) -> dict[str, Any]:
    """The ``members`` frame: the same for every subscriber; ``allowed_ops`` maps each member id
    to what an owner, another member, and the member themself may do to it."""
    state = ProjectState(project_state)
    return {
        "type": "members",
        "project_id": project_id,
        "members": members,
        "allowed_ops": {
            str(m["id"]): member_ops_by_viewer(
                state, MemberStatus(m["status"]), m["kind"], _kind_of(m)
            )
            for m in members
        },
    }


# -- presence (docs/protocol.md, "Presence") ------------------------------------------------------

ONLINE, OFFLINE = "online", "offline"  # people
RUNNING, IDLE, PAUSED = "running", "idle", "paused"  # agents (or OFFLINE)
_AGENTS_PAUSED = frozenset(
    {ProjectState.PAUSED, ProjectState.STOPPING, ProjectState.STOP_UNCONFIRMED}
)


def presence_of(member: Member, project_state: str, *, connected: bool, running: bool) -> str:
    """Whether a member is here now (not whether they belong).

    A person is ``online`` while they have a socket open to the server, else ``offline``. An
    agent is ``running`` a turn, ``idle`` (ready), ``paused`` (it or its project is paused) or
    ``offline``: it left, its project is closed (archived, trashed …), or it is an external agent
    with no socket open. ``connected`` is "has a socket open" (people, external agents);
    ``running`` is "a turn of it runs now"."""
    if member.status == MemberStatus.LEFT:
        return OFFLINE
    if member.kind != "agent":
        return ONLINE if connected else OFFLINE
    state = ProjectState(project_state)
    if state is not ProjectState.ACTIVE and state not in _AGENTS_PAUSED:
        return OFFLINE
    if member.driver == "external" and not connected:
        return OFFLINE
    if running:
        return RUNNING
    if member.status == MemberStatus.PAUSED or state in _AGENTS_PAUSED:
        return PAUSED
    return IDLE
