"""Streamed partial answers: what an agent is writing, shown while its answer streams
(docs/protocol.md, "Drafts").

A model answer arrives as a stream (room.providers); the turn hands each call's
:class:`~room.providers.CallMeter` to a :class:`DraftStream`, which tells the project's
subscribers the text so far in a ``draft`` frame — ephemeral (never stored, never replayed, not
in the ledger: a delivery is still ``consumed`` only when the answer came back), at most every
:data:`DRAFT_EVERY_SECS`, each frame the whole text so far (a client replaces what it shows, so
a lost frame costs nothing). The draft ends with a ``draft`` frame whose ``done`` is true: with
the ``message_id`` of the posted answer, or ``null`` when the call ended in tool calls, failed
or was stopped. The posted answer carries ``meta.turn_id``, the draft's ``turn_id``: a client
drops the draft when that message arrives, whichever comes first.

A client that subscribes while an answer streams gets the current draft right after its replay
(:func:`current`), or nothing: the draft is forgotten *before* the answer is posted, so no
client ever holds both the posted answer and a draft of it from the server.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from room.providers import CallMeter
from room.rules.entities import Member
from room.rules.protocol import encode
from room.services import Services

DRAFT_EVERY_SECS = 0.25  # a member's draft is sent at most this often
DRAFT_MAX_CHARS = 16000  # past this, a frame carries the text's end (``omitted``: chars before)


class DraftStream:
    """The draft of one turn's answers, one model call after another."""

    def __init__(
        self,
        core: Services,
        member: Member,
        turn_id: int,
        *,
        every_secs: float = DRAFT_EVERY_SECS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.core = core
        self.project_id = member.project_id
        self.member_id = member.id
        self.turn_id = turn_id
        self.every_secs = every_secs
        self.clock = clock
        self.shown = False  # a draft frame went out since the last end
        self.sent = 0  # draft frames sent (what a test or a metric may read)
        self._meter: CallMeter | None = None
        self._last_at = float("-inf")
        self._last_text = ""
        self._timer: asyncio.TimerHandle | None = None

    def watch(self, meter: CallMeter) -> CallMeter:
        """Follow ``meter``'s call (a new call's text starts empty)."""
        self._meter = meter
        meter.on_progress = self._progress
        return meter

    def _progress(self) -> None:
        if self._timer is not None:
            return
        wait = self._last_at + self.every_secs - self.clock()
        if wait <= 0:
            self._send()
        else:
            self._timer = asyncio.get_running_loop().call_later(wait, self._send)

    def _send(self) -> None:
        self._timer = None
        if self._meter is None:
            return
        text = self._meter.text()
        if text == self._last_text or not text.strip():
            return
        self._last_at = self.clock()
        self._last_text = text
        omitted = max(0, len(text) - DRAFT_MAX_CHARS)
        frame = encode(
            {
                "type": "draft",
                "project_id": self.project_id,
                "member_id": self.member_id,
                "turn_id": self.turn_id,
                "text": text[omitted:],
                "omitted": omitted,
                "done": False,
            }
        )
        self.core.drafts.setdefault(self.project_id, {})[self.member_id] = frame
        self.core.hub.broadcast(self.project_id, frame, volatile=True)
        self.shown = True
        self.sent += 1

    def forget(self) -> None:
        """Stop following the call and forget the draft (no frame): called before the answer is
        posted, so a client subscribing from here on gets the message, never the draft too."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._meter is not None:
            self._meter.on_progress = None
            self._meter = None
        self._last_text = ""
        drafts = self.core.drafts.get(self.project_id)
        if drafts is not None:
            drafts.pop(self.member_id, None)
            if not drafts:
                del self.core.drafts[self.project_id]

    def end(self, message_id: int | None = None) -> None:
        """The draft is over: forget it and, if one was shown, say so (``message_id``: the
        posted answer that replaces it)."""
        self.forget()
        if not self.shown:
            return
        self.shown = False
        self.core.hub.broadcast(
            self.project_id,
            encode(
                {
                    "type": "draft",
                    "project_id": self.project_id,
                    "member_id": self.member_id,
                    "turn_id": self.turn_id,
                    "done": True,
                    "message_id": message_id,
                }
            ),
            volatile=True,
        )


def current(core: Services, project_id: int) -> list[str]:
    """The drafts of the project's answers streaming now (``draft`` frames), for a client that
    just subscribed."""
    return list(core.drafts.get(project_id, {}).values())
