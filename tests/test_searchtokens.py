"""The app-side tokens of search on PostgreSQL (room.rules.searchtokens) against SQLite's own
FTS5 ``unicode61 remove_diacritics 2`` tokenizer, on the characters where the two could part
(accents, case folds, marks, joiners, scripts), and the ``tsquery`` a parsed query becomes."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator

import pytest

from room.rules import searchtokens
from room.rules.searchtext import parse_query
from room.rules.searchtokens import fts_tokens, tsquery

TEXTS = [
    "room.store.search foo_bar a-b 3.14 e\u0301te\u0301 Café ŒUVRE straße ẞ",
    "ǅ İstanbul ﬁ x\u0308y a\u200db ok👍 ① µ ſ ς ϐ Ω K ǰ ẛ",
    "ǡ ǣ ǯ ǽ ǿ Ǡ Ǽ à \u0300 a\u0301\u0302b a\u0305b",
    "ά й が ガ パ 한국어 क्षत्रिय مَرْحَبًا שָׁלוֹם ñ Ł ø đ ħ ı ŀ æ þ",
    "½ ⁰ x² \ue000a \u0378 tab\there\nnewline ＡＢＣ",
    "数据 据库 库 path/to/file.py:12 user@example.com https://x.io/a?b=c",
]


@pytest.fixture(scope="module")
def fts5() -> Iterator[sqlite3.Connection]:
    conn = sqlite3.connect(":memory:")
    conn.execute(
        "CREATE VIRTUAL TABLE t USING fts5(body, tokenize='unicode61 remove_diacritics 2')"
    )
    conn.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, instance)")
    yield conn
    conn.close()


@pytest.mark.parametrize("text", TEXTS)
def test_the_tokens_are_the_ones_fts5_makes(fts5: sqlite3.Connection, text: str) -> None:
    fts5.execute("DELETE FROM t")
    fts5.execute("INSERT INTO t (rowid, body) VALUES (1, ?)", (text,))
    expected = [r[0] for r in fts5.execute("SELECT term FROM v ORDER BY offset")]
    assert fts_tokens(text) == expected


def test_a_query_becomes_a_tsquery_of_the_same_terms() -> None:
    assert tsquery(parse_query("数据")) == "('数据':A)"
    assert tsquery(parse_query("迁移数据库")) == "('迁移':A <-> '移数':A <-> '数据':A <-> '据库':A)"
    assert tsquery(parse_query("库")) == "('库':B)"
    assert tsquery(parse_query("deploy* -token")) == "(('deploy':*A)) & !(('token':A))"
    assert tsquery(parse_query("de*")) == "('de':A)"  # too short a prefix: a whole word
    assert tsquery(parse_query("room.store OR Café")) == ("(('room':A <-> 'store':A) | ('cafe':A))")
    # A CJK run followed by a word: the run's last character stands between (as indexed).
    assert tsquery(parse_query('"数据 alone" 说')) == (
        "('数据':A <-> '据':A <-> 'alone':A) & ('说':B)"
    )
    assert tsquery(parse_query("数据库说")) == "('数据':A <-> '据库':A <-> '库说':A)"


def test_a_query_s_share_of_rows_is_bounded_by_its_common_lexemes() -> None:
    common = {"deploy": 0.02, "failed": 0.01, "数据": 0.03, "库": 0.05}

    def share(q: str) -> float:
        return searchtokens.share(parse_query(q), common)

    assert share("deploy") == 0.02
    assert share("failed deploy") == 0.01  # both clauses: the least
    assert share("deploy OR failed") == pytest.approx(0.03)  # either: the sum
    assert share('"deploy failed"') == 0.01  # a phrase needs every lexeme
    assert share('"deploy nowhere"') == 0.0  # a lexeme the statistics do not list
    assert share("nowhere") == 0.0
    assert share("deploy -failed") == 0.02  # an excluded term only takes rows away
    assert share("数据") == 0.03
    assert share("数据库") == 0.0  # the bigram 据库 is not listed
    assert share("deploy*") == 0.0  # a prefix alone: nothing bounds it
    assert share("deploy* failed") == 0.01
    many = {"a1": 0.6, "b2": 0.7}
    assert searchtokens.share(parse_query("a1 OR b2"), many) == 1.0
