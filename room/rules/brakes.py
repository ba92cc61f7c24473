"""The loop brake's rules (pure: no I/O, no clock): whom a brake holds, and what is not a
repetition (docs/agents.md, "The loop brake").

A brake stops the loop, not the team. Each reason holds its own circle of members:

* ``token_budget`` — the project's budget is shared: every member (``None``: the whole project);
* ``step_limit``, ``tool_calls``, ``command_time`` and a tool call repeated in one turn — one
  member's own turn ran away: that member;
* ``repetition`` of a final answer — the member repeating itself and the agents the repeated
  answers replied to or woke (:func:`repetition_loop`);
* ``agent_turn_cap`` — the agents going back and forth: those that took more than one turn since
  the last human message (:func:`cap_loop`).

A brake tripped while another stands adds the members it holds (:func:`merge_holds`). Short
acknowledgements ("收到。", "ok", "好的，谢谢！") are what a team says again and again; they are
never counted as a repetition (:func:`is_acknowledgement`).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Collection, Iterable, Mapping

PROJECT_WIDE = frozenset({"token_budget"})

#: The words an acknowledgement is made of, as :func:`normalise` leaves them (casefolded, no
#: spaces or punctuation). Longest first, so "好的" is not read as "好" + "的".
_ACK_TEXT = (
    "收到 好的 好嘞 好 行 嗯 明白 明白了 了解 知道了 懂了 谢谢 多谢 感谢 辛苦了 辛苦 没问题"
    " 可以 是的 对 了 啦 哈 呀 ok okay k kk thanks thankyou thx ty noted gotit roger sure"
    " yes yep cool great fine"
)
ACK_WORDS: tuple[str, ...] = tuple(sorted(_ACK_TEXT.split(" "), key=len, reverse=True))
#: An acknowledgement is short: at most this many characters once normalised.
ACK_MAX_CHARS = 12


def normalise(text: str) -> str:
    """``text`` as compared for acknowledgements: NFKC (full-width letters and punctuation become
    their ASCII forms), casefolded, with every space, punctuation mark, symbol (emoji included)
    and control character left out."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return "".join(c for c in folded if unicodedata.category(c)[0] not in "PSZC")


def is_acknowledgement(text: str) -> bool:
    """Whether ``text`` only acknowledges: once normalised, at most :data:`ACK_MAX_CHARS`
    characters made only of :data:`ACK_WORDS` ("收到。", "ＯＫ！", "好的，谢谢", "thanks 👍"),
    or nothing at all (an emoji, a "。"). A mention keeps its handle, so "@lin 收到" is not one:
    it wakes someone, and a loop of those is a loop."""
    rest = normalise(text)
    if len(rest) > ACK_MAX_CHARS:
        return False
    while rest:
        word = next((w for w in ACK_WORDS if rest.startswith(w)), None)
        if word is None:
            return False
        rest = rest[len(word) :]
    return True


def same_answer(a: str, b: str) -> bool:
    """Two final answers are the same when they differ only in whitespace."""
    return " ".join(a.split()) == " ".join(b.split())


def repetition_loop(member_id: int, partners: Iterable[int]) -> frozenset[int]:
    """Who a repeated final answer holds: its author and ``partners``, the agents the repeated
    answers replied to or woke."""
    return frozenset({member_id, *partners})


def cap_loop(turns_by_member: Mapping[int, int]) -> frozenset[int]:
    """Who the agent-turn cap holds: the agents that took more than one turn since the last
    human message (they answer each other); if none did, every agent that took one."""
    looping = frozenset(m for m, n in turns_by_member.items() if n > 1)
    return looping or frozenset(turns_by_member)


def holds(tripped: str | None, held: Collection[int] | None, member_id: int) -> bool:
    """Whether a brake (its reason ``tripped``, None when clear) holds ``member_id``: ``held``
    None is the whole project."""
    if tripped is None:
        return False
    return held is None or member_id in held


def merge_holds(
    tripped: str | None, held: Collection[int] | None, new: Collection[int] | None
) -> tuple[frozenset[int] | None, frozenset[int] | None]:
    """A brake trips with ``new`` (None: the whole project) while the brake is ``tripped`` with
    ``held``: (whom it holds after, whom it holds that it did not before — None when the whole
    project became held, empty when nothing changed)."""
    if tripped is None:
        after = None if new is None else frozenset(new)
        return after, after
    if held is None:
        return None, frozenset()
    if new is None:
        return None, None
    added = frozenset(new) - frozenset(held)
    return frozenset(held) | added, added
