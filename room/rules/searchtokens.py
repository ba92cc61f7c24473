"""Search on PostgreSQL, pure: the tokens SQLite's FTS5 would make, computed app-side, and a
parsed query as a ``tsquery`` over them (docs/storage.md, "Search on PostgreSQL").

SQLite indexes the normalised text of :func:`room.rules.searchtext.index_texts` with FTS5's
``unicode61`` tokenizer (``remove_diacritics 2``). PostgreSQL's ``to_tsvector`` has its own
parser, which keeps ``room.store.search`` as one host name, ``a@b.io`` as one email and
``3.14`` as one number where ``unicode61`` makes three, two and two tokens: searching
``store`` would find a code identifier on SQLite and miss it on PostgreSQL. So the PostgreSQL
index stores, in its ``body`` and ``uni`` columns, the tokens :func:`fts_tokens` computes here
(``unicode61``'s, as closely as Python's tables allow) joined by single spaces: what the
``simple`` configuration reads back as exactly those lexemes (letters and digits only, already
folded). A query is :meth:`Query`'s terms through the same function (:func:`tsquery`), cast to
``tsquery`` without the parser.

Where the tokens may differ from ``unicode61`` (tested on a corpus against SQLite itself):
characters assigned after Unicode 6.1 (SQLite's tables treat them as letters; Python knows
them as marks, symbols or punctuation), and case folding of letters added since.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Mapping
from functools import lru_cache

from room.rules.searchtext import MIN_PREFIX_CHARS, Query, Term

_ASCII_TOKEN = re.compile(r"[0-9a-z]+")


# The combining marks ``remove_diacritics`` drops (and keeps inside a word); every other mark
# separates words, as in SQLite's tables.
_DIACRITICS = frozenset(
    "\u0300\u0301\u0302\u0303\u0304\u0306\u0307\u0308\u0309\u030a\u030b\u030c\u030f"
    "\u0311\u031b\u0323\u0324\u0325\u0326\u0327\u0328\u032d\u032e\u0330\u0331"
)
_KEEP = frozenset("ǡǣǯǽǿ")  # Latin letters with marks that FTS5 does not fold


def _is_latin(char: str) -> bool:
    # ``remove_diacritics`` folds Latin letters only (``ά`` and ``й`` keep theirs in FTS5).
    return char < "\u0250" or "\u1e00" <= char <= "\u1eff"


@lru_cache(maxsize=8192)
def _fold(char: str) -> str | None:
    """One non-ASCII character as ``unicode61`` sees it: ``None`` for a separator, else its
    folded form (lower case, a Latin letter's accents removed; empty for an accent alone)."""
    if char in _DIACRITICS:
        return ""
    category = unicodedata.category(char)
    if category[0] not in "LN" and category not in ("Co", "Cn"):
        return None
    out = []
    for c in char.lower():
        if c not in _KEEP:
            parts = unicodedata.normalize("NFD", c)
            if len(parts) > 1 and _is_latin(parts[0]) and all(m in _DIACRITICS for m in parts[1:]):
                c = parts[0]
        folded = c.casefold()  # µ is μ, ſ is s, ς is σ; but ß stays ß
        c = folded if len(folded) == 1 else c
        if c not in _DIACRITICS:
            out.append(c)
    return "".join(out)


def fts_tokens(text: str) -> list[str]:
    """The tokens of ``text``, folded, in order: what FTS5's ``unicode61 remove_diacritics 2``
    tokenizer makes of it (runs of letters, numbers, private-use and unassigned characters;
    everything else separates)."""
    if text.isascii():
        return _ASCII_TOKEN.findall(text.lower())
    tokens: list[str] = []
    word: list[str] = []
    for char in text:
        if char.isascii():
            folded: str | None = char.lower() if char.isalnum() else None
        else:
            folded = _fold(char)
        if folded is None:
            if word:
                tokens.append("".join(word))
                word.clear()
        else:
            word.append(folded)
    if word:
        tokens.append("".join(word))
    return [t for t in tokens if t]


def index_row(texts: tuple[str, str]) -> tuple[str, str]:
    """The ``body`` and ``uni`` columns PostgreSQL stores for the columns FTS5 would index
    (:func:`room.rules.searchtext.index_texts`): their tokens joined by spaces."""
    return " ".join(fts_tokens(texts[0])), " ".join(fts_tokens(texts[1]))


def _lexeme(token: str, label: str) -> str:
    quoted = token.replace("\\", "\\\\").replace("'", "''")
    return f"'{quoted}':{label}"


def _term_parts(term: Term) -> tuple[list[str], bool, str]:
    """A term's body lexemes (a phrase, in order), whether the last is a prefix, and its lone
    trailing CJK character for the unigram column (``""`` when none)."""
    tokens: list[str] = []
    single = ""
    last = len(term.units) - 1
    for i, (kind, text) in enumerate(term.units):
        if kind == "w":
            tokens.append(text)
            continue
        followed = i < last
        if len(text) == 1 and not followed:
            single = text
        elif len(text) == 1:
            tokens.append(text)
        else:
            tokens += [text[j : j + 2] for j in range(len(text) - 1)]
            if followed:
                tokens.append(text[-1])
    kind, text = term.units[-1]
    prefix = term.prefix and kind == "w" and len(text) >= MIN_PREFIX_CHARS
    return fts_tokens(" ".join(tokens)), prefix, single


def _term(term: Term) -> str:
    """One term as :meth:`Term.fts` spells it for FTS5, in ``tsquery`` form: its words and CJK
    bigrams a phrase (``<->``) of body lexemes (weight A), a prefix on the last one, and a lone
    trailing CJK character a lexeme of the unigram column (weight B)."""
    lexemes, prefix, single = _term_parts(term)
    parts = []
    if lexemes:
        spelled = [_lexeme(t, "A") for t in lexemes]
        if prefix:
            spelled[-1] = _lexeme(lexemes[-1], "*A")
        parts.append(" <-> ".join(spelled))
    elif not single:  # nothing FTS5 would find (an empty phrase): a lexeme never stored
        parts.append("'!'")
    if single:
        parts.append(_lexeme(single, "B"))
    if len(parts) == 1:
        return f"({parts[0]})"
    return "(" + " & ".join(f"({p})" for p in parts) + ")"


def _term_share(term: Term, common: Mapping[str, float]) -> float | None:
    """About what share of rows ``term`` matches at most: the least of its exact lexemes'
    shares (a phrase needs them all), ``0`` for a lexeme missing from ``common``; ``None`` when
    nothing bounds it (a prefix alone)."""
    lexemes, prefix, single = _term_parts(term)
    exact = lexemes[:-1] if prefix else lexemes
    shares = [common.get(t, 0.0) for t in exact]
    if single:
        shares.append(common.get(single, 0.0))
    return min(shares) if shares else None


def share(query: Query, common: Mapping[str, float]) -> float:
    """About what share of index rows ``query`` matches at most, from ``common``: the lexemes
    PostgreSQL's statistics list as common (``most_common_elems`` of the index's ``tsv``) with
    the share of rows holding each. A lexeme not listed counts as ``0`` (rarer than any listed,
    as far as the statistics know); a clause matches at most the sum of its terms' shares, the
    query at most its least clause's; excluded terms only take rows away. ``0`` when nothing
    bounds it (only bare prefixes)."""
    bounds: list[float] = []
    for clause in query.all_of:
        terms = [_term_share(t, common) for t in clause]
        if any(s is None for s in terms):
            continue
        bounds.append(min(1.0, sum(s for s in terms if s is not None)))
    return min(bounds) if bounds else 0.0


def tsquery(query: Query) -> str:
    """The ``tsquery`` text (cast, not parsed: ``CAST(:q AS tsquery)``) matching what
    :meth:`Query.fts` matches in FTS5: every clause (its terms ORed), and none of the excluded."""
    clauses = [
        _term(clause[0]) if len(clause) == 1 else "(" + " | ".join(map(_term, clause)) + ")"
        for clause in query.all_of
    ]
    expression = " & ".join(clauses)
    if query.none_of:
        excluded = " | ".join(_term(t) for t in query.none_of)
        expression = f"({expression}) & !({excluded})"
    return expression
