"""Emoji reactions, the pure part: which text is one reaction, and their wire shape.

A reaction is exactly one grapheme cluster that is an emoji: a pictographic character (with
its variation selector, skin tone or ZWJ sequence), a flag (two regional indicators) or a
keycap (``1️⃣``). Anything else — two emoji, a letter, a CJK character, a bare ``#`` — is
refused with ``bad_emoji``. The page offers :data:`QUICK_SET`; any other emoji is accepted.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable
from typing import Any

import regex

from room.errors import BadRequestError

QUICK_SET = ("👍", "❤️", "😄", "🎉", "👀", "✅", "🙏", "🤔")
MAX_EMOJI_CHARS = 32  # the longest ZWJ family sequences are 11 code points; this is generous
MAX_KINDS_PER_MESSAGE = 40  # distinct emoji on one message: a flood stays bounded

_ONE_GRAPHEME = regex.compile(r"\X")
_PICTOGRAPHIC = regex.compile(r"\p{Extended_Pictographic}")
_FLAG = regex.compile(r"\p{Regional_Indicator}{2}")
_KEYCAP = regex.compile(r"[0-9#*]\uFE0F?\u20E3")


def check_emoji(text: str) -> str:
    """``text`` as a stored reaction (NFC), or :class:`BadRequestError` ``bad_emoji``."""
    emoji = unicodedata.normalize("NFC", text.strip()) if isinstance(text, str) else ""
    if (
        not emoji
        or len(emoji) > MAX_EMOJI_CHARS
        or not _ONE_GRAPHEME.fullmatch(emoji)
        or not (_PICTOGRAPHIC.match(emoji) or _FLAG.fullmatch(emoji) or _KEYCAP.fullmatch(emoji))
    ):
        raise BadRequestError("a reaction is one emoji", code="bad_emoji")
    return emoji


def summarise(rows: Iterable[tuple[str, int]]) -> list[dict[str, Any]]:
    """``(emoji, member_id)`` rows, oldest first → the message's ``reactions``: one entry per
    emoji in the order it was first used, with who reacted in the order they did."""
    by_emoji: dict[str, list[int]] = {}
    for emoji, member_id in rows:
        by_emoji.setdefault(emoji, []).append(int(member_id))
    return [
        {"emoji": emoji, "count": len(members), "members": members}
        for emoji, members in by_emoji.items()
    ]
