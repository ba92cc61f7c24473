"""Whose connections are open: by person (presence, frames addressed to a person wherever they
look) and by the credential they rest on (a sign-out, a departure or a revoked token closes
them)."""

from __future__ import annotations

from typing import Protocol

from room.infra.frames import Frame
from room.infra.outbox import Outbox


class Closable(Protocol):
    """What a credential's connection must do when the credential ends: a socket's outbox, or
    an MCP session (room.mcp_server)."""

    def cut(self, reason: str, code: int = ...) -> None: ...


class Presence:
    def __init__(self) -> None:
        # Connections by the digest of the browser session that opened them (or an agent's
        # ``agent_session`` key), so signing out (or leaving) closes them too.
        self._sessions: dict[str, set[Closable]] = {}
        # Each person's open connections by user id: presence (a person with one is online)
        # and the frames addressed to a person wherever they look (unread counts).
        self._people: dict[int, set[Outbox]] = {}

    def attach_person(self, user_id: int, outbox: Outbox) -> bool:
        """A person's connection opened; True if it is their first (they came online)."""
        outboxes = self._people.setdefault(user_id, set())
        outboxes.add(outbox)
        return len(outboxes) == 1

    def detach_person(self, user_id: int, outbox: Outbox) -> bool:
        """A person's connection closed; True if it was their last (they went offline)."""
        outboxes = self._people.get(user_id)
        if outboxes is None or outbox not in outboxes:
            return False
        outboxes.discard(outbox)
        if outboxes:
            return False
        del self._people[user_id]
        return True

    def person_online(self, user_id: int | None) -> bool:
        """Whether the person has a connection open on this server."""
        return user_id is not None and user_id in self._people

    def person_present(self, user_id: int | None) -> bool:
        """Whether the person has a connection open anywhere: here, or on another node of a
        cluster (room.infra.bus.ClusterPresence); what presence shows."""
        return self.person_online(user_id)

    def agent_connected_elsewhere(self, member_id: int) -> bool:
        """Whether an external agent has a socket open on another node of a cluster."""
        return False

    def agent_running_elsewhere(self, member_id: int) -> bool:
        """Whether a turn of the agent runs on another node of a cluster."""
        return False

    def local_changed(self) -> None:
        """Something presence is computed from changed on this server (a cluster's node says
        so to the others)."""

    def to_person(self, user_id: int, frame: Frame | str) -> None:
        """A frame for one person, on every connection they have open (not replayed)."""
        outboxes = self._people.get(user_id)
        if not outboxes:
            return
        if isinstance(frame, str):
            frame = Frame(frame)
        for outbox in outboxes:
            outbox.push(frame)

    @staticmethod
    def agent_session(member_id: int) -> str:
        """The key an agent's connections are attached under (browser sessions use their
        digest, which never starts like this): a member who leaves has them closed."""
        return f"agent:{member_id}"

    @staticmethod
    def token_session(token_digest: str) -> str:
        """The key an agent's connection is also attached under: the token that opened it, so
        a revocation the server only reads later (the CLI's) closes exactly those."""
        return f"token:{token_digest}"

    def credentials(self) -> tuple[set[str], set[str]]:
        """The browser-session digests and agent-token digests open connections rest on."""
        sessions: set[str] = set()
        tokens: set[str] = set()
        for key in self._sessions:
            if key.startswith("token:"):
                tokens.add(key.removeprefix("token:"))
            elif not key.startswith("agent:"):
                sessions.add(key)
        return sessions, tokens

    def attach_session(self, session: str, outbox: Closable) -> None:
        self._sessions.setdefault(session, set()).add(outbox)

    def detach_session(self, session: str, outbox: Closable) -> None:
        outboxes = self._sessions.get(session)
        if outboxes is not None:
            outboxes.discard(outbox)
            if not outboxes:
                del self._sessions[session]

    def cut_session(self, session: str, reason: str, code: int) -> int:
        """The session ended (sign-out): close every connection it opened."""
        outboxes = self._sessions.pop(session, set())
        for outbox in outboxes:
            outbox.cut(reason, code=code)
        return len(outboxes)
