"""Search text, pure: what the full-text index stores for a text, how a person's query becomes a
safe FTS5 expression, and the highlighted snippet of a hit. No I/O, no clock.

The index is SQLite FTS5 with the ``unicode61`` tokenizer over a *normalised* text
(:func:`index_text`; docs/search.md says why and with which measurements):

* NFKC first (full-width ``ＡＢＣ１`` is ``ABC1``), so the index and the query agree.
* Every run of CJK characters (Han, kana, Hangul) becomes its overlapping bigrams followed by the
  run's last character alone: ``数据库`` is indexed as ``数据 据库 库``. A two-character query is
  one token, found inside any longer word; three or more are a phrase of bigrams. A second
  column, ``uni``, holds every CJK character alone: a one-character query looks there.
* Everything else is left to ``unicode61`` (case folding, diacritics removed, words split on
  punctuation and spaces).

A query (:func:`parse_query`) is words (all must match), ``"quoted phrases"``, ``word*``
prefixes (of at least ``MIN_PREFIX_CHARS``), ``OR`` between two terms and ``-word`` to exclude. The person's text never reaches
FTS5 as syntax: every term is re-emitted as a quoted FTS5 string; whatever carries no searchable
character (``*``, ``"``, a lone ``OR``) is dropped, and a query left with no term to look for
raises :class:`~room.errors.BadQueryError` (``bad_query``).
"""

from __future__ import annotations

import html
import re
import unicodedata
from dataclasses import dataclass
from datetime import UTC, date, datetime
from functools import lru_cache

from room.errors import BadQueryError, BadRequestError

MAX_QUERY_CHARS = 500
MAX_QUERY_TERMS = 24
# ``ab*`` would merge the doclists of every word starting with ``ab`` (seconds on a large
# project): shorter prefixes are searched as whole words.
MIN_PREFIX_CHARS = 3
SNIPPET_CHARS = 160  # characters of context in a snippet, around the first match

# CJK runs: Han (with extensions and compatibility ideographs), kana, Hangul syllables.
_CJK = (
    "\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
    "\U00020000-\U0003134f"
)
_IS_CJK = re.compile(f"[{_CJK}]")


# Pictographs: separators to Python, but most came after the Unicode 6.1 tables of unicode61,
# which would glue them to the word beside them (``ok🥺`` one token); they index as spaces.
_PICTOGRAPHS = "\u2600-\u27bf\ufe0f\u200d\U0001f000-\U0001faff"
_INDEX_PIECES = re.compile(f"([{_CJK}]+)|[{_PICTOGRAPHS}]+")
_CJK_CHAR = re.compile(f"[{_CJK}]")


def _expand_run(match: re.Match[str]) -> str:
    run = match.group(1)
    if run is None:
        return " "
    if len(run) == 1:
        return f" {run} "
    grams = [run[i : i + 2] for i in range(len(run) - 1)]
    return " " + " ".join(grams) + " " + run[-1] + " "


@lru_cache(maxsize=4)  # SQL asks for the two columns of one text one after the other
def index_texts(text: str) -> tuple[str, str]:
    """What the index tokenizes for ``text``: its ``body`` column (NFKC, CJK runs as bigrams
    plus each run's last character) and its ``uni`` column (every CJK character alone, for
    one-character queries)."""
    if text.isascii():  # most messages: nothing to normalise, no CJK, no pictographs
        return text, ""
    if not unicodedata.is_normalized("NFKC", text):
        text = unicodedata.normalize("NFKC", text)
    return _INDEX_PIECES.sub(_expand_run, text), " ".join(_CJK_CHAR.findall(text))


def index_text(text: str) -> str:
    """The ``body`` column of :func:`index_texts` (SQL: ``room_index_text``)."""
    return index_texts(text)[0]


def index_unigrams(text: str) -> str:
    """The ``uni`` column of :func:`index_texts` (SQL: ``room_index_unigrams``)."""
    return index_texts(text)[1]


def _is_token_char(char: str) -> bool:
    # Split only where unicode61 surely splits too (spaces, punctuation, symbols, controls):
    # FTS5 tokenizes the quoted string again, so a character kept here that it treats as a
    # separator costs nothing, while a split it would not make loses the match.
    return unicodedata.category(char)[0] not in "ZPS" and char not in _CONTROLS


def _units(text: str) -> list[tuple[str, str]]:
    """The folded tokens of one query term, in order: ``("w", word)`` or ``("c", cjk run)``."""
    units: list[tuple[str, str]] = []
    word: list[str] = []

    def close() -> None:
        # A piece of only marks or format characters is nothing to unicode61: dropped, so it
        # cannot become an empty phrase that matches nothing.
        if any(_is_base_char(c) for c in word):
            piece = "".join(word)
            for part in _CJK_SPLIT.split(piece):
                if any(_is_base_char(c) for c in part):
                    units.append(("c" if _IS_CJK.match(part) else "w", part))
        word.clear()

    # Lower-cased only: FTS5's unicode61 folds the quoted strings further itself.
    for char in unicodedata.normalize("NFKC", text).lower():
        if _is_token_char(char):
            word.append(char)
        else:
            close()
    close()
    return units


def _is_base_char(char: str) -> bool:
    """A letter, number, private-use or (to Python) unassigned character: what unicode61
    makes tokens of, where marks and format characters only ride along."""
    category = unicodedata.category(char)
    return category[0] in "LN" or category in ("Co", "Cn")


_CJK_SPLIT = re.compile(f"([{_CJK}]+)")
_CONTROLS = frozenset(chr(c) for c in (*range(0x20), *range(0x7F, 0xA0)))


# -- queries -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Term:
    """One thing to look for: its folded units, in order (a phrase when more than one)."""

    units: tuple[tuple[str, str], ...]
    prefix: bool = False

    def fts(self) -> str:
        """The term as a quoted FTS5 string (a phrase of its tokens; ``*`` after a word prefix
        of at least ``MIN_PREFIX_CHARS``), and a lone trailing CJK character as a token of the
        ``uni`` column (ANDed: a phrase cannot span two columns)."""
        tokens: list[str] = []
        single = ""
        last = len(self.units) - 1
        for i, (kind, text) in enumerate(self.units):
            if kind == "w":
                tokens.append(text)
                continue
            followed = i < last
            if len(text) == 1 and not followed:
                single = text  # anywhere in a run: the unigram column has every character
            elif len(text) == 1:
                tokens.append(text)  # followed by more: the run's last character
            else:
                tokens += [text[j : j + 2] for j in range(len(text) - 1)]
                if followed:
                    tokens.append(text[-1])
        kind, text = self.units[-1]
        prefix = self.prefix and kind == "w" and len(text) >= MIN_PREFIX_CHARS
        parts = ['"' + " ".join(tokens) + '"' + (" *" if prefix else "")] if tokens else []
        if single:
            parts.append(f'uni : "{single}"')
        return parts[0] if len(parts) == 1 else "(" + " AND ".join(parts) + ")"


@dataclass(frozen=True, slots=True)
class Query:
    """A parsed query: ``all_of`` clauses (each one term or several joined by OR) that must all
    match, and ``none_of`` terms that must not."""

    all_of: tuple[tuple[Term, ...], ...]
    none_of: tuple[Term, ...] = ()

    def fts(self) -> str:
        """The FTS5 MATCH expression: only quoted strings, ``*``, AND, OR, NOT, parentheses."""
        clauses = [
            clause[0].fts()
            if len(clause) == 1
            else "(" + " OR ".join(t.fts() for t in clause) + ")"
            for clause in self.all_of
        ]
        expression = " AND ".join(clauses)
        if self.none_of:
            excluded = " OR ".join(t.fts() for t in self.none_of)
            expression = f"({expression}) NOT ({excluded})"
        return expression

    def highlights(self) -> tuple[Term, ...]:
        return tuple(term for clause in self.all_of for term in clause)


_OPEN_QUOTES = '"“”„«»「『'
_CLOSE_OF = {'"': '"', "“": "”", "”": "”", "„": "“", "«": "»", "»": "«", "「": "」", "『": "』"}
_DASHES = "-－"


def _lex(q: str) -> list[tuple[str, str, bool, bool]]:
    """Items of a query: ``(kind, text, negated, prefix)``, kind ``or``, ``word`` or ``phrase``.
    An unbalanced quote runs to the end of the query."""
    items: list[tuple[str, str, bool, bool]] = []
    i, n = 0, len(q)
    while i < n:
        if q[i].isspace():
            i += 1
            continue
        negated = False
        if q[i] in _DASHES and i + 1 < n and not q[i + 1].isspace():
            negated, i = True, i + 1
        if q[i] in _OPEN_QUOTES:
            close = _CLOSE_OF[q[i]]
            end = q.find(close, i + 1)
            if end < 0:
                end = n
            text, i = q[i + 1 : end], end + 1
            prefix = i < n and q[i] == "*"
            while i < n and q[i] == "*":
                i += 1
            items.append(("phrase", text, negated, prefix))
            continue
        start = i
        while i < n and not q[i].isspace() and q[i] not in _OPEN_QUOTES:
            i += 1
        word = q[start:i]
        if word == "OR" and not negated:
            items.append(("or", word, False, False))
            continue
        stripped = word.rstrip("*")
        items.append(("word", stripped, negated, stripped != word))
    return items


def parse_query(q: str) -> Query:
    """A person's query as a :class:`Query`, or :class:`BadQueryError` when nothing in it can
    be searched for. Total: any string either parses or raises that error (a property test
    checks it), and the FTS5 expression of a parsed query is always valid syntax."""
    if len(q) > MAX_QUERY_CHARS:
        raise BadQueryError(
            f"the query is longer than {MAX_QUERY_CHARS} characters", reason="too_long"
        )
    clauses: list[list[Term]] = []
    excluded: list[Term] = []
    pending_or = False
    for kind, text, negated, prefix in _lex(q):
        if kind == "or":
            pending_or = bool(clauses)
            continue
        units = _units(text)
        if not units:
            continue  # nothing searchable in it: an operator, a lone quote, punctuation
        term = Term(tuple(units), prefix)
        if negated:
            excluded.append(term)
            pending_or = False
        elif pending_or:
            clauses[-1].append(term)
            pending_or = False
        else:
            clauses.append([term])
    if not clauses:
        if excluded:
            raise BadQueryError(
                "a query needs something to look for, not only words to exclude",
                reason="only_exclusions",
            )
        raise BadQueryError("the query has nothing to search for", reason="empty")
    if sum(len(c) for c in clauses) + len(excluded) > MAX_QUERY_TERMS:
        raise BadQueryError(
            f"the query has more than {MAX_QUERY_TERMS} terms", reason="too_many_terms"
        )
    return Query(tuple(tuple(c) for c in clauses), tuple(excluded))


# -- snippets ----------------------------------------------------------------------------------


@lru_cache(maxsize=8192)
def _fold_char(char: str) -> str:
    """One character for matching a snippet: NFKC, lower case, combining marks dropped. May be
    empty or longer than one character (``ﬁ`` is ``fi``)."""
    folded = unicodedata.normalize("NFD", unicodedata.normalize("NFKC", char).lower())
    return "".join(c for c in folded if not unicodedata.combining(c))


def _fold_with_map(text: str) -> tuple[str, list[int]]:
    """``text`` folded, and for each folded character the index of the original it came from."""
    if text.isascii():
        return text.lower(), list(range(len(text)))
    out: list[str] = []
    where: list[int] = []
    for i, char in enumerate(text):
        folded = _fold_char(char)
        out.append(folded)
        where.extend([i] * len(folded))
    return "".join(out), where


def _fold(text: str) -> str:
    return _fold_with_map(text)[0]


@lru_cache(maxsize=256)
def _pattern(terms: tuple[Term, ...]) -> re.Pattern[str] | None:
    """One regex finding every unit of ``terms`` in folded text: a word at a word's start (and
    end, unless it is the last unit of a prefix term), a CJK run anywhere."""
    alternatives: set[str] = set()
    for term in terms:
        last = len(term.units) - 1
        for i, (kind, text) in enumerate(term.units):
            folded = _fold(text)
            if not folded:
                continue
            if kind == "c":
                alternatives.add(re.escape(folded))
                continue
            tail = "" if term.prefix and i == last else r"(?![^\W_])"
            alternatives.add(r"(?<![^\W_])" + re.escape(folded) + tail)
    if not alternatives:
        return None
    # Longest first, so a longer unit wins where two start at the same place.
    return re.compile("|".join(sorted(alternatives, key=len, reverse=True)))


def _spans(text: str, terms: tuple[Term, ...]) -> list[tuple[int, int]]:
    pattern = _pattern(terms)
    if pattern is None:
        return []
    folded, where = _fold_with_map(text)
    spans: list[tuple[int, int]] = []
    for match in pattern.finditer(folded):
        if match.end() == match.start():
            continue
        start, end = where[match.start()], where[match.end() - 1] + 1
        if spans and start <= spans[-1][1]:
            spans[-1] = (spans[-1][0], max(end, spans[-1][1]))
        else:
            spans.append((start, end))
    return spans


def _joins_previous(char: str) -> bool:
    """A character that belongs to the one before it (a combining mark, a joiner, a variation
    selector, a skin tone): a snippet never starts or ends between them."""
    return (
        unicodedata.combining(char) != 0
        or unicodedata.category(char) in ("Mn", "Mc", "Me")
        or char in "\u200c\u200d"
        or "\ufe00" <= char <= "\ufe0f"
        or "\U0001f3fb" <= char <= "\U0001f3ff"
        or "\U000e0100" <= char <= "\U000e01ef"
    )


_SPACE_RUN = re.compile(r"\s+")


def snippet_html(text: str, query: Query, width: int = SNIPPET_CHARS) -> str:
    """Up to ``width`` characters of ``text`` around its first match, HTML-escaped, each match
    of the query's terms in ``<mark>``; ``…`` where text was left out. Cut only between whole
    characters (and never inside a combining sequence); whitespace runs shown as one space."""
    spans = _spans(text, query.highlights())
    first = spans[0][0] if spans else 0
    start = max(0, first - width // 4) if spans else 0
    end = min(len(text), start + width)
    start = max(0, min(start, end - width))
    while start > 0 and _joins_previous(text[start]):
        start -= 1
    while end < len(text) and _joins_previous(text[end]):
        end += 1
    out: list[str] = ["…"] if start > 0 else []
    at = start
    for s, e in spans:
        if e <= start or s >= end:
            continue
        s, e = max(s, start), min(e, end)
        out.append(_plain(text[at:s]))
        out.append("<mark>" + _plain(text[s:e]) + "</mark>")
        at = e
    out.append(_plain(text[at:end]))
    if end < len(text):
        out.append("…")
    return "".join(out)


def _plain(text: str) -> str:
    return html.escape(_SPACE_RUN.sub(" ", text), quote=True)


# -- filters -----------------------------------------------------------------------------------

DAY_SECS = 86_400.0


def parse_time(value: str | float | int | None, *, end: bool = False) -> float | None:
    """A ``since``/``until`` filter as epoch seconds: a number of seconds, or ISO 8601 (a time
    without a zone is UTC; a bare date is its first moment, or with ``end`` its last).
    :class:`~room.errors.BadRequestError` (``bad_time``) for anything else."""
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise BadRequestError("a time is epoch seconds or ISO 8601", code="bad_time")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        text = value.strip()
        try:
            seconds = float(text)
        except ValueError:
            seconds = _iso_seconds(text, end)
    if not -1e11 < seconds < 1e11:  # NaN and infinities fail this too
        raise BadRequestError("a time is epoch seconds or ISO 8601", code="bad_time", got=value)
    return seconds


def _iso_seconds(text: str, end: bool) -> float:
    try:
        if len(text) == 10:  # a bare date
            day = date.fromisoformat(text)
            start = datetime(day.year, day.month, day.day, tzinfo=UTC).timestamp()
            return start + DAY_SECS - 0.001 if end else start
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise BadRequestError(
            "a time is epoch seconds or ISO 8601", code="bad_time", got=text[:40]
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()
