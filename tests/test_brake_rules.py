"""The loop brake's pure rules (room.rules.brakes): what is an acknowledgement, and whom a brake
holds (issue 28, item 1)."""

from __future__ import annotations

import pytest

from room.rules.brakes import (
    ACK_MAX_CHARS,
    cap_loop,
    holds,
    is_acknowledgement,
    merge_holds,
    normalise,
    repetition_loop,
    same_answer,
)

ACKS = ["收到", "收到。", "收到！", "收到了", "ok", "OK!", "ｏｋ", "Okay.", "好的", "好的，谢谢！",
        "thanks 👍", "Thank you.", "Got it", "👍", "。", "  嗯嗯  ", "明白，辛苦了", "ＴＨＡＮＫＳ"]  # fmt: skip
NOT_ACKS = ["@lin 收到", "收到，我马上修改登录接口", "请再检查一遍", "好的好的好的好的好的好的好的",
            "ok, merging now", "thanks for the fix in api.py", "（无内容）", "done"]  # fmt: skip


@pytest.mark.parametrize("text", ACKS)
def test_short_acknowledgements_are_not_repetition(text: str) -> None:
    assert is_acknowledgement(text)


@pytest.mark.parametrize("text", NOT_ACKS)
def test_anything_more_than_an_acknowledgement_counts(text: str) -> None:
    assert not is_acknowledgement(text)


def test_normalising_folds_width_case_punctuation_and_emoji() -> None:
    assert normalise("ＯＫ！ 好的，👍") == "ok好的"
    assert len(normalise("谢谢" * 7)) > ACK_MAX_CHARS and not is_acknowledgement("谢谢" * 7)


def test_answers_are_the_same_up_to_whitespace() -> None:
    assert same_answer("@be 请继续，\n做完再汇报。", "@be  请继续， 做完再汇报。")
    assert not same_answer("@be 请继续", "@fe 请继续")


def test_a_repetition_holds_its_author_and_the_agents_it_answered_or_woke() -> None:
    assert repetition_loop(1, [2, 2, 3]) == {1, 2, 3}
    assert repetition_loop(1, []) == {1}


def test_the_turn_cap_holds_the_agents_going_back_and_forth() -> None:
    # The lead and be answered each other; fe took one turn for its task: not the loop.
    assert cap_loop({1: 5, 2: 4, 3: 1}) == {1, 2}
    # Many agents one turn each: all of them.
    assert cap_loop({1: 1, 2: 1}) == {1, 2}
    assert cap_loop({}) == frozenset()


def test_whom_a_brake_holds() -> None:
    assert not holds(None, None, 1) and not holds(None, [1], 1)
    assert holds("token_budget", None, 7)  # the whole project
    assert holds("repetition", [1, 2], 2) and not holds("repetition", [1, 2], 3)


@pytest.mark.parametrize(
    ("tripped", "held", "new", "after", "added"),
    [
        (None, None, [1, 2], {1, 2}, {1, 2}),  # a first trip
        (None, None, None, None, None),  # a first, project-wide trip
        ("repetition", [1, 2], [2, 3], {1, 2, 3}, {3}),  # a second loop joins the first
        ("repetition", [1, 2], [1], {1, 2}, set()),  # nothing new
        ("repetition", [1, 2], None, None, None),  # the budget: now everyone
        ("token_budget", None, [4], None, set()),  # everyone already
    ],
)
def test_a_trip_while_a_brake_stands_adds_whom_it_holds(
    tripped: str | None,
    held: list[int] | None,
    new: list[int] | None,
    after: set[int] | None,
    added: set[int] | None,
) -> None:
    assert merge_holds(tripped, held, new) == (after, added)
