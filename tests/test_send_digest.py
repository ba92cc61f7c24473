"""The content digest a send stores with its ``client_txn_id``: a retransmit is matched against
it, also after a restart, so its bytes must never change — whichever path computes it."""

from __future__ import annotations

import hashlib

import pytest

from room.actions.messages import _digest


def _as_stored(
    body: str, reply_to: int | None, chips: list[int], plain: bool, files: list[int]
) -> str:
    head = f"{reply_to}|{sorted(set(chips)) if chips else '[]'}|{int(plain)}|"
    if files:
        head += f"{files}|"
    return hashlib.blake2b((head + body).encode(), digest_size=16).hexdigest()


@pytest.mark.parametrize(
    ("reply_to", "chips", "plain", "files"),
    [(None, [], False, []), (7, [], False, []), (None, [3, 2, 3], False, []),
     (None, [], True, []), (None, [], False, [5, 4]), (9, [1], True, [2])],
)  # fmt: skip
def test_the_digest_of_a_send_is_the_stored_one(
    reply_to: int | None, chips: list[int], plain: bool, files: list[int]
) -> None:
    for body in ("probe 1 2 a line of prose", "数据 @小张 ✓", ""):
        assert _digest(body, reply_to, chips, plain, files) == _as_stored(
            body, reply_to, chips, plain, files
        )
