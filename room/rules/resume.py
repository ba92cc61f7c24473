"""The resume contract of a subscription (docs/protocol.md, ``resync_required``): from which seq
a client's subscription replays, or why it must resync first.

A client subscribes with the cursor it holds (``since``: the last seq it has, or none: start at
the head) and the ``epoch`` it was taken in. The server answers with the project's events after
``since``, or with ``resync_required`` and the reason:

* ``epoch_changed``: the project's timeline was replaced (restore from trash, import) since the
  cursor was taken; its seqs no longer mean the same messages;
* ``cursor_ahead``: the cursor is past the project's head (a cursor of another server, or of the
  timeline before it was replaced);
* ``too_far_behind``: more than ``max_events`` events would have to be replayed; a fresh load
  of the history is cheaper for both sides.

Pure: the caller reads the project's head and epoch and gives them here.
"""

from __future__ import annotations

from typing import Literal

MAX_REPLAY_EVENTS = 200_000  # past this many events behind, the client loads afresh

ResyncReason = Literal["epoch_changed", "cursor_ahead", "too_far_behind"]


def resync_reason(
    *,
    since: int | None,
    epoch: int | None,
    head_seq: int,
    current_epoch: int,
    max_events: int = MAX_REPLAY_EVENTS,
) -> ResyncReason | None:
    """Why a subscription with cursor ``since`` taken in ``epoch`` cannot resume at a project
    whose head is ``head_seq`` in ``current_epoch``; None when it can (from :func:`replay_from`).
    A client that gives no epoch is not checked against it; one that gives no cursor starts at
    the head."""
    if epoch is not None and epoch != current_epoch:
        return "epoch_changed"
    if since is not None and since > head_seq:
        return "cursor_ahead"
    if since is not None and head_seq - since > max_events:
        return "too_far_behind"
    return None


def replay_from(since: int | None, head_seq: int) -> int:
    """The seq after which a resumable subscription's replay starts (the head: no replay)."""
    return head_seq if since is None else since
