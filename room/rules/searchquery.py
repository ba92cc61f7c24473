"""Search operators, pure: ``from:``, ``has:file``, ``before:``, ``after:``, ``in:`` and
``is:mention`` taken out of a person's query, and a snippet's inline markdown. No I/O, no clock.

:func:`parse_search` splits a query into its words (left to
:func:`room.rules.searchtext.parse_query`, unchanged) and its operators. An operator is one of
:data:`OPERATORS` followed by ``:`` (or the full-width ``：`` a Chinese IME types) at the start
of a word (or right after a quoted value's closing quote); its value is the rest of the word, or a quoted value (``"…"``, ``“…”``, ``「…」``)
for one with spaces: ``in:"Project Room 网站"``, ``from:「张 三」``. The name is matched
case-insensitively; anything else with a colon (``http://…``, ``时间:3点``) stays a word.

| operator | value | means |
|---|---|---|
| ``from:`` | a handle (``@`` optional) or a display name | written by that member |
| ``has:`` | ``file`` | carrying an attachment |
| ``before:`` | a date ``YYYY-MM-DD`` or an ISO 8601 time | strictly before (a date: its first moment) |
| ``after:`` | a date or a time | strictly after (a date: its last moment) |
| ``in:`` | a project's name or id | only that project |
| ``is:`` | ``mention`` | mentioning the person searching |

Each may be given once; ``in:`` may repeat (any of those projects). Refusals are
:class:`SearchOperatorError` (400 ``bad_operator``, ``details: {operator, value, reason}``;
``reason``: ``empty``, ``unknown_value``, ``repeated``, ``bad_time``, ``before_after``).
A query of operators only has no words: :attr:`SearchQuery.words` is empty and the caller lists
what the operators alone select.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, field

from room.errors import BadRequestError
from room.rules.searchtext import parse_time

OPERATORS = ("from", "has", "before", "after", "in", "is")
HAS_VALUES = ("file",)
IS_VALUES = ("mention",)
# One microsecond: before/after are strict, the store's time filters inclusive.
_EPSILON_SECS = 1e-6

_QUOTES = {'"': '"', "“": "”", "「": "」", "『": "』"}
_OPERATOR = re.compile(
    # At a word's start, or right after a quoted value's closing quote (``in:"a"from:b``).
    r"(?:(?<!\S)|(?<=[\"”」』]))(?P<name>" + "|".join(OPERATORS) + r")[:：]"
    r"(?:(?P<open>[\"“「『])(?P<quoted>[^\"”」』]*)(?P<close>[\"”」』])?|(?P<bare>\S*))",
    re.IGNORECASE,
)


class SearchOperatorError(BadRequestError):
    """An operator that cannot be used; ``details``: ``operator``, ``value``, ``reason``."""

    code = "bad_operator"

    def __init__(self, operator: str, value: str, reason: str, message: str) -> None:
        super().__init__(message, operator=operator, value=value[:80], reason=reason)


@dataclass(frozen=True, slots=True)
class SearchQuery:
    """A parsed query: the words (may be empty) and the operators' values."""

    words: str
    author: str | None = None  # from: — a handle (no @) or a display name, as typed
    has_file: bool = False
    before: float | None = None  # epoch seconds, exclusive
    after: float | None = None  # epoch seconds, exclusive
    projects: tuple[str, ...] = field(default_factory=tuple)  # in:
    mentions_me: bool = False

    @property
    def until(self) -> float | None:
        """``before`` as the store's inclusive upper bound."""
        return None if self.before is None else self.before - _EPSILON_SECS

    @property
    def since(self) -> float | None:
        """``after`` as the store's inclusive lower bound."""
        return None if self.after is None else self.after + _EPSILON_SECS

    @property
    def messages_only(self) -> bool:
        """``has:file`` and ``is:mention`` select messages; memory records have neither."""
        return self.has_file or self.mentions_me

    @property
    def has_operators(self) -> bool:
        return bool(
            self.author or self.has_file or self.before is not None or self.after is not None
            or self.projects or self.mentions_me
        )  # fmt: skip


def _time(name: str, value: str) -> float:
    try:
        moment = parse_time(value, end=name == "after")
    except BadRequestError:
        moment = None
    if moment is None:
        raise SearchOperatorError(
            name,
            value,
            "bad_time",
            f"{name}: 需要日期 YYYY-MM-DD 或 ISO 8601 时间 "
            f"({name}: needs a date YYYY-MM-DD or an ISO 8601 time.)",
        )
    return moment


def parse_search(q: str) -> SearchQuery:
    """Split ``q`` into its words and operators (see the module docstring)."""
    values: dict[str, list[str]] = {}
    pieces: list[str] = []
    last = 0
    for match in _OPERATOR.finditer(q):
        name = match["name"].lower()
        value = (match["quoted"] if match["open"] else match["bare"]) or ""
        if match["open"] and match["close"] is None:
            value = value.rstrip()  # an unbalanced quote runs to the end
        pieces.append(q[last : match.start()])
        last = match.end()
        value = value.strip()
        if not value:
            raise SearchOperatorError(
                name, value, "empty", f"{name}: 后面需要一个值 ({name}: needs a value.)"
            )
        values.setdefault(name, []).append(value)
    pieces.append(q[last:])
    for name, given in values.items():
        if name != "in" and len(given) > 1:
            raise SearchOperatorError(
                name, given[1], "repeated", f"{name}: 只能用一次 ({name}: may be used once.)"
            )
    for name, allowed in (("has", HAS_VALUES), ("is", IS_VALUES)):
        for value in values.get(name, []):
            if value.lower() not in allowed:
                raise SearchOperatorError(
                    name,
                    value,
                    "unknown_value",
                    f"{name}:{value} 不可用；可用：{', '.join(f'{name}:{a}' for a in allowed)} "
                    f"({name}:{value} is not known; use {', '.join(f'{name}:{a}' for a in allowed)}.)",
                )
    before = _time("before", values["before"][0]) if "before" in values else None
    after = _time("after", values["after"][0]) if "after" in values else None
    if before is not None and after is not None and after >= before:
        raise SearchOperatorError(
            "before",
            values["before"][0],
            "before_after",
            "after: 必须早于 before: (after: must come before before:.)",
        )
    author = (
        values["from"][0].removeprefix("@").removeprefix("＠").strip() if "from" in values else None
    )
    if author == "":
        raise SearchOperatorError(
            "from", "", "empty", "from: 后面需要一个值 (from: needs a value.)"
        )
    return SearchQuery(
        words=" ".join(" ".join(pieces).split()),
        author=author,
        has_file="has" in values,
        before=before,
        after=after,
        projects=tuple(dict.fromkeys(values.get("in", []))),
        mentions_me="is" in values,
    )


# -- snippets ---------------------------------------------------------------------------------------

# Inline markdown over a snippet's escaped text (``&lt;`` …, ``<mark>`` around matches): a pair
# of markers becomes its element; a marker left without its pair (the snippet cut it) is dropped.
_CODE = re.compile(r"`+([^`]+?)`+")
_STRONG = re.compile(r"(\*\*|__)(?=\S)(.+?)(?<=\S)\1")
_EM = re.compile(r"(?<![\w*])\*(?=[^\s*])([^*]+?)(?<=[^\s*])\*(?![\w*])")
_DEL = re.compile(r"~~(?=\S)(.+?)(?<=\S)~~")
# A block marker is recognisable only at the snippet's start (its line breaks are spaces).
_BLOCK = re.compile(r"^(…\s*)?(?:#{1,6}|&gt;|[-+*]|\d+\.)\s+(?=\S)")
_LINK = re.compile(r"\[([^\]]+)\]\([^)\s]*\)")
_FENCE = re.compile(r"`{3,}[\w+-]*")


def snippet_markdown(snippet: str) -> str:
    """A snippet (escaped text with ``<mark>`` and ``…``, from
    :func:`room.rules.searchtext.snippet_html`) with its inline markdown rendered as a message
    is: `` `code` `` → ``<code>``, ``**bold**`` → ``<strong>``, ``*em*`` → ``<em>``, ``~~x~~`` →
    ``<del>``, ``[text](url)`` → its text; a block marker at the start (``#``, ``>``, a list
    bullet) and code fences are dropped, and a marker whose pair was cut off is dropped too. The output holds only
    ``mark``, ``code``, ``strong``, ``em`` and ``del`` elements and escaped text."""
    text = re.sub(" {2,}", " ", _FENCE.sub(" ", snippet))
    text = _LINK.sub(r"\1", text)
    text = _BLOCK.sub(lambda m: m[1] or "", text)
    text = _CODE.sub(lambda m: f"<code>{m[1]}</code>", text)
    # Code is literal: keep the other markers inside it from being read.
    parts = re.split(r"(<code>.*?</code>)", text)
    for i in range(0, len(parts), 2):
        part = _STRONG.sub(r"<strong>\2</strong>", parts[i])
        part = _DEL.sub(r"<del>\1</del>", part)
        part = _EM.sub(r"<em>\1</em>", part)
        parts[i] = part.replace("`", "").replace("**", "").replace("~~", "")
    return "".join(parts)


def plain_words(snippet: str) -> str:
    """The snippet's text without any element (for tests and for reading aloud)."""
    return html.unescape(re.sub(r"<[^>]+>", "", snippet))
