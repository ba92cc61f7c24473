"""room.rules.languages: the interface language from a choice or the browser's preferences."""

from __future__ import annotations

import pytest

from room.rules.languages import pick_language, preferred


@pytest.mark.parametrize(
    ("header", "chosen", "expected"),
    [
        (None, None, "zh"),
        ("", None, "zh"),
        ("zh-CN,zh;q=0.9,en;q=0.8", None, "zh"),
        ("en-US,en;q=0.9", None, "en"),
        ("en-GB,zh-CN;q=0.5", None, "en"),
        ("fr-FR,fr;q=0.9,zh-TW;q=0.4,en;q=0.3", None, "zh"),
        ("fr-FR,de", None, "en"),
        ("zh;q=0.2,en;q=0.8", None, "en"),  # weights, not order, decide
        ("en;q=0,zh-Hant", None, "zh"),  # q=0 is "not this"
        ("en;q=abc,zh", None, "zh"),  # a malformed weight is dropped
        ("*", None, "en"),
        ("en-US", "zh", "zh"),  # a choice wins
        ("zh-CN", "en", "en"),
        ("zh-CN", "fr", "zh"),  # an unknown choice is no choice
        ("EN_us", None, "en"),
    ],
)
def test_pick_language(header: str | None, chosen: str | None, expected: str) -> None:
    assert pick_language(header, chosen) == expected


def test_preferred_orders_by_weight_then_position() -> None:
    assert preferred("a;q=0.5, b, c;q=0.5, d;q=1.0") == ["b", "d", "a", "c"]
    assert preferred("x;q=2, y;q=-1, z") == ["z"]  # out of range
    assert preferred("zh," * 5000) == ["zh"] * 333  # the first 1000 characters, no half tag
