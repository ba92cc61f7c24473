"""The resume contract (room.rules.resume): a cursor resumes, or the client is told why not."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from room.rules.resume import MAX_REPLAY_EVENTS, replay_from, resync_reason

seqs = st.integers(min_value=0, max_value=10 * MAX_REPLAY_EVENTS)


@pytest.mark.parametrize(
    ("since", "epoch", "head", "current", "reason"),
    [
        (None, None, 50, 1, None),  # no cursor: start at the head
        (50, 1, 50, 1, None),  # caught up
        (0, 1, 50, 1, None),  # everything from the start
        (10, 2, 50, 1, "epoch_changed"),  # the timeline was replaced
        (None, 2, 50, 1, "epoch_changed"),  # even without a cursor
        (60, 1, 50, 1, "cursor_ahead"),
        (60, 2, 50, 1, "epoch_changed"),  # the epoch is checked first
        (0, None, MAX_REPLAY_EVENTS, 1, None),  # exactly the most that is replayed
        (0, None, MAX_REPLAY_EVENTS + 1, 1, "too_far_behind"),
    ],
)
def test_a_cursor_resumes_or_says_why_not(
    since: int | None, epoch: int | None, head: int, current: int, reason: str | None
) -> None:
    assert resync_reason(since=since, epoch=epoch, head_seq=head, current_epoch=current) == reason


@given(since=st.none() | seqs, head=seqs, epoch=st.integers(1, 3), current=st.integers(1, 3))
def test_a_resumable_cursor_replays_only_what_the_client_lacks(
    since: int | None, head: int, epoch: int, current: int
) -> None:
    reason = resync_reason(since=since, epoch=epoch, head_seq=head, current_epoch=current)
    if reason is None:
        start = replay_from(since, head)
        # never past the head, never more than the bound, and nothing the client has already
        assert start <= head and head - start <= MAX_REPLAY_EVENTS
        assert start == (head if since is None else since)
        assert epoch == current
    else:
        assert reason != "epoch_changed" or epoch != current


def test_the_bound_is_a_parameter() -> None:
    assert resync_reason(since=0, epoch=None, head_seq=11, current_epoch=1, max_events=10) == (
        "too_far_behind"
    )
    assert resync_reason(since=1, epoch=None, head_seq=11, current_epoch=1, max_events=10) is None
