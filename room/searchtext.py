"""Search text, pure: what the full-text index stores for a text, how a person's query becomes a
safe FTS5 expression, and the highlighted snippet of a hit. No I/O, no clock.

The index is SQLite FTS5 with the ``unicode61`` tokenizer over a *normalised* text
(:func:`index_text`; docs/search.md says why and with which measurements):

* NFKC first (full-width ``ＡＢＣ１`` is ``ABC1``), so the index and the query agree.
* Every run of CJK characters (Han, kana, Hangul) becomes its overlapping bigrams followed by the
  run's last character alone: ``数据库`` is indexed as ``数据 据库 库``. A two-character query is
  one token, found inside any longer word; one character is a prefix query (``据*`` finds the
  bigram ``据库``, ``库*`` the trailing unigram); three or more are a phrase of bigrams.
* Everything else is left to ``unicode61`` (case folding, diacritics removed, words split on
  punctuation and spaces).

A query (:func:`parse_query`) is words (all must match), ``"quoted phrases"``, ``word*``
prefixes, ``OR`` between two terms and ``-word`` to exclude. The person's text never reaches
FTS5 as syntax: every term is re-emitted as a quoted FTS5 string; whatever carries no searchable
character (``*``, ``"``, a lone ``OR``) is dropped, and a query left with no term to look for
raises :class:`~room.errors.BadQueryError` (``bad_query``).
"""

from __future__ import annotations

import re
import unicodedata

MAX_QUERY_CHARS = 500
MAX_QUERY_TERMS = 24
SNIPPET_CHARS = 160  # characters of context in a snippet, around the first match

# CJK runs: Han (with extensions and compatibility ideographs), kana, Hangul syllables.
_CJK = (
    "\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
    "\U00020000-\U0003134f"
)
_CJK_RUN = re.compile(f"[{_CJK}]+")
_IS_CJK = re.compile(f"[{_CJK}]")


def _expand_run(match: re.Match[str]) -> str:
    run = match.group()
    if len(run) == 1:
        return f" {run} "
    grams = [run[i : i + 2] for i in range(len(run) - 1)]
    return " " + " ".join(grams) + " " + run[-1] + " "


def index_text(text: str) -> str:
    """The text the index tokenizes for ``text``: NFKC, CJK runs as bigrams + last character."""
    return _CJK_RUN.sub(_expand_run, unicodedata.normalize("NFKC", text))
