"""Live fan-out: which connections watch which project, and what each project publishes.

``publish`` and ``broadcast`` never await and never touch a subscriber: they record the frame
(JSON-encoded once by the caller, framed for the wire once here) on the project's fan-out of this
loop turn. At the end of the turn the :class:`room.infra.fanout.Flusher` makes one pass over each project's
subscribers with everything the project published in the turn, joined into one wire string; the
common case — a live subscriber, nothing waiting in its outbox, an open and writable connection
whose transport has nothing buffered — is one ``send`` straight to its socket, read from the
project's flat table of such subscribers (:class:`room.infra.fanout.Channel`, kept as their state changes, so the
pass touches two list entries per subscriber rather than its objects). Everything else
(frames of that connection pushed in the same turn, a full socket, a connection without the
direct path) goes through the connection's outbox as before: frames pushed to a connection
(acks, errors, person frames) first take the project frames published before them, so each
connection sees frames in the order they were published and pushed. A connection's frames of a
turn leave in one write; when the socket is not writable they wait in its bounded outbox,
drained by the connection's own sender task. A reader that stops reading fills its outbox and is
cut (close code 1013, "resume with since") without slowing anyone else; it loses nothing,
because on reconnect it replays from its cursor.

Sequenced project events (messages, edits …) go through ``publish`` and carry a seq; ephemeral
ones (typing, read cursors, delivery labels, roster and task views) go through ``broadcast`` and
are not replayed; a subscriber still replaying gets them right after its replay (typing excepted).

The pieces: frames and close codes in :mod:`room.infra.frames`, the turn's fan-out pass in
:mod:`room.infra.fanout`, a connection's bounded outbox in :mod:`room.infra.outbox`, and whose
connections are open (presence, sign-out) in :mod:`room.infra.presence`.
"""

from __future__ import annotations

from collections.abc import Iterable

from room.infra.fanout import Channel, Flusher, Subscription
from room.infra.frames import Frame
from room.infra.outbox import Outbox
from room.infra.presence import Presence


class Hub:
    def __init__(self) -> None:
        self._projects: dict[int, Channel] = {}
        self._replaying: dict[int, set[Subscription]] = {}  # not live yet, by project
        self.presence = Presence()  # whose connections are open
        self.flusher = Flusher()
        self.connections = 0  # open WebSocket connections (``/metrics``)
        self.messages = 0  # new messages published since the start (``/metrics``)

    def subscribe(self, project_id: int, outbox: Outbox, member_id: int) -> Subscription:
        """Register first (buffering), replay from the store, then :meth:`go_live`."""
        if outbox.flusher is not self.flusher:
            raise ValueError("the outbox must write through this hub's flusher")
        channel = self._projects.get(project_id)
        if channel is None:
            channel = self._projects[project_id] = Channel()
        sub = Subscription(project_id, outbox, member_id, channel)
        channel.add(sub)
        self._replaying.setdefault(project_id, set()).add(sub)
        outbox.subs.append(sub)
        return sub

    def go_live(self, sub: Subscription, last_seq: int) -> None:
        """Flush what was published during the replay, skipping what the replay already sent,
        then the state frames broadcast meanwhile (after the events they may refer to)."""
        if not sub.active:  # cut while replaying (the member left): nothing more goes out
            sub.buffer.clear()
            sub.side.clear()
            return
        self._discard(self._replaying, sub)
        sub.settled = self.flusher.order  # what was published so far is in buffer and side
        sub.last_seq = last_seq
        for seq, frame in sub.buffer:
            if seq > sub.last_seq:
                sub.last_seq = seq
                sub.outbox.push(frame)
        for frame in sub.side:
            sub.outbox.push(frame)
        sub.buffer.clear()
        sub.side.clear()
        sub.live = True
        sub.channel.refresh(sub)

    def unsubscribe(self, sub: Subscription) -> None:
        if sub.active and sub.live and self.flusher.fanouts:
            self.flusher.settle(sub.outbox)  # what was published before this still goes out
        sub.active = False
        channel = sub.channel
        channel.remove(sub)
        if not channel.subs and self._projects.get(sub.project_id) is channel:
            del self._projects[sub.project_id]
        self._discard(self._replaying, sub)
        if sub in sub.outbox.subs:
            sub.outbox.subs.remove(sub)

    @staticmethod
    def _discard(by_project: dict[int, set[Subscription]], sub: Subscription) -> None:
        subs = by_project.get(sub.project_id)
        if subs is not None:
            subs.discard(sub)
            if not subs:
                del by_project[sub.project_id]

    def publish(self, project_id: int, seq: int, frame: Frame | str) -> None:
        """A committed, sequenced event of a project, to every subscriber, in seq order."""
        channel = self._projects.get(project_id)
        if channel is None:
            return
        if seq > channel.top_seq:
            channel.top_seq = seq
        subs = channel.subs
        if isinstance(frame, str):
            frame = Frame(frame)
        replaying = self._replaying.get(project_id)
        if replaying:
            for sub in replaying:
                sub.buffer.append((seq, frame))
                sub.hold()
            if len(replaying) == len(subs):
                return
        self.flusher.fan_out(project_id, channel, seq, frame)

    def broadcast(
        self,
        project_id: int,
        frame: Frame | str,
        *,
        exclude: Outbox | None = None,
        only_members: Iterable[int] | None = None,
        volatile: bool = False,
    ) -> None:
        """A frame outside the replayable stream. Live subscribers get it now; one still
        replaying gets it after the replay, unless it is ``volatile`` (typing: stale at once)."""
        channel = self._projects.get(project_id)
        if channel is None:
            return
        subs = channel.subs
        if isinstance(frame, str):
            frame = Frame(frame)
        members = frozenset(only_members) if only_members is not None else None
        replaying = self._replaying.get(project_id)
        if replaying:
            if not volatile:
                for sub in replaying:
                    if sub.outbox is exclude or (
                        members is not None and sub.member_id not in members
                    ):
                        continue
                    sub.side.append(frame)
                    sub.hold()
            if len(replaying) == len(subs):
                return
        self.flusher.fan_out(project_id, channel, 0, frame, exclude, members)

    def subscriber_count(self, project_id: int | None = None) -> int:
        if project_id is not None:
            channel = self._projects.get(project_id)
            return 0 if channel is None else len(channel.subs)
        return sum(len(c.subs) for c in self._projects.values())

    def cut_member(self, project_id: int, member_id: int) -> None:
        """A member left: end their subscriptions to the project at once (they may still be
        connected for other projects)."""
        frame = Frame(f'{{"type":"unsubscribed","project_id":{project_id},"reason":"left"}}')
        for sub in self._subs(project_id):
            if sub.member_id == member_id:
                self.unsubscribe(sub)
                sub.outbox.push(frame)

    def cut_project(self, project_id: int, reason: str) -> None:
        for sub in self._subs(project_id):
            sub.outbox.cut(reason, code=1001)

    def _subs(self, project_id: int) -> list[Subscription]:
        channel = self._projects.get(project_id)
        return [] if channel is None else list(channel.subs)
