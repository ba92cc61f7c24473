"""The pure search text: index normalisation, query parsing into safe FTS5 and snippets.

The property tests feed arbitrary text to the parser and check it either raises the documented
``BadQueryError`` or yields an expression a real FTS5 table accepts; snippets are checked to be
escaped, to hold only whole characters of the text and to mark what was searched for.
"""

from __future__ import annotations

import html
import re
import sqlite3
import unicodedata
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from room.errors import BadQueryError, BadRequestError
from room.rules.searchtext import (
    MAX_QUERY_CHARS,
    MAX_QUERY_TERMS,
    index_text,
    index_texts,
    parse_query,
    parse_time,
    snippet_html,
)


@pytest.fixture(scope="module")
def fts() -> Iterator[sqlite3.Connection]:
    conn = sqlite3.connect(":memory:")
    conn.execute(
        "CREATE VIRTUAL TABLE t USING fts5(body, uni, tokenize = 'unicode61 remove_diacritics 2')"
    )
    yield conn
    conn.close()


def matches(conn: sqlite3.Connection, text: str, query: str) -> bool:
    conn.execute("DELETE FROM t")
    conn.execute("INSERT INTO t (rowid, body, uni) VALUES (1, ?, ?)", index_texts(text))
    found = conn.execute("SELECT rowid FROM t WHERE t MATCH ?", (parse_query(query).fts(),))
    return found.fetchall() == [(1,)]


def test_index_text_turns_cjk_runs_into_bigrams_and_the_last_character() -> None:
    assert index_text("数据库").split() == ["数据", "据库", "库"]
    assert index_text("用Python写代码").split() == ["用", "Python", "写代", "代码", "码"]
    assert index_text("ＡＢＣ１２").split() == ["ABC12"]  # NFKC: full width is plain
    assert index_text("hello world") == "hello world"
    assert index_texts("我们用Python") == (" 我们 们用 用 Python", "我 们 用")


@pytest.mark.parametrize(
    ("text", "query"),
    [
        ("我们需要迁移数据库到新的服务器", "数据"),  # two characters inside a longer word
        ("我们需要迁移数据库到新的服务器", "据库"),
        ("我们需要迁移数据库到新的服务器", "迁移数据库"),
        ("我们需要迁移数据库到新的服务器", "库"),  # one character: the run's last
        ("我们需要迁移数据库到新的服务器", "移"),  # one character: a bigram's first
        ("部署用Python写的脚本", "python写"),
        ("我们需要迁移数据库到新的服务器", "服务器 数据"),
        ("部署用Python写的脚本", "用Python写"),
        ("部署用Python写的脚本", "python"),
        ("The deployment pipeline failed", "deploy*"),
        ("The deployment pipeline failed", '"pipeline failed"'),
        ("The deployment pipeline failed", "DEPLOYMENT"),
        ("Café au lait", "cafe"),
        ("ＡＢＣ　全角", "abc"),
        ("migration or rollback", "rollback OR nothing"),
        ("カタカナのテスト", "カナ"),
        ("한국어 검색기능", "검색"),
        ("unbalanced quote", '"unbalanced'),
    ],
)
def test_queries_find_the_text(fts: sqlite3.Connection, text: str, query: str) -> None:
    assert matches(fts, text, query)


@pytest.mark.parametrize(
    ("text", "query"),
    [
        ("我们需要迁移数据库", "数库"),  # not adjacent
        ("我们需要迁移数据库", "据数"),
        ("The deployment pipeline failed", "deploy"),  # a word, not a prefix
        ("The deployment pipeline failed", '"failed pipeline"'),
        ("The deployment pipeline failed", "pipeline -failed"),
        ("数据 库", "数据库"),  # separated by a space: not the word
        ("migration", "rollback OR nothing"),
        ("我们需要迁移数据库", "鱼"),
        ("deploy the demo", "de*"),  # a two-letter prefix is the word "de"
    ],
)
def test_queries_do_not_find_what_is_not_there(
    fts: sqlite3.Connection, text: str, query: str
) -> None:
    assert not matches(fts, text, query)


@pytest.mark.parametrize(
    ("query", "reason"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ('"*" OR', "empty"),
        ("OR OR", "empty"),
        ('"', "empty"),
        ("* ** -", "empty"),
        ("!!! ??? 。，", "empty"),
        ("-secret", "only_exclusions"),
        ("x" * (MAX_QUERY_CHARS + 1), "too_long"),
        (" ".join(f"w{i}" for i in range(MAX_QUERY_TERMS + 1)), "too_many_terms"),
    ],
)
def test_bad_queries_say_why(query: str, reason: str) -> None:
    with pytest.raises(BadQueryError) as caught:
        parse_query(query)
    assert caught.value.code == "bad_query"
    assert caught.value.details == {"reason": reason}


def test_fts_syntax_in_a_query_is_only_text() -> None:
    # Words FTS5 would read as operators or column filters are searched for as words.
    expression = parse_query('body:secret NEAR(a b) AND NOT ^x "a" + "b"').fts()
    assert expression == (
        '"body secret" AND "near a" AND "b" AND "and" AND "not" AND "x" AND "a" AND "b"'
    )


def test_or_and_exclusion_shape() -> None:
    assert parse_query("a OR b c").fts() == '("a" OR "b") AND "c"'
    assert parse_query("OR a OR").fts() == '"a"'  # dangling ORs are dropped
    assert parse_query("a -b -c").fts() == '("a") NOT ("b" OR "c")'
    assert parse_query("数").fts() == 'uni : "数"'
    assert parse_query("python数").fts() == '("python" AND uni : "数")'
    assert parse_query("de*").fts() == '"de"'  # too short a prefix: the word itself
    assert parse_query("dep*").fts() == '"dep" *'


# Characters whose class Python and unicode61's Unicode 6.1 tables agree on.
common_text = st.text(
    alphabet=st.sampled_from(
        list("abcXYZ 09\"*-()^:+OR{}[]\\'　数据库迁移你好，。「」“”-－ＡéÉ\u0301\t\nカナ한글😀🥺")
    ),
    max_size=40,
)
any_text = st.text(alphabet=st.characters(codec="utf-8"), max_size=40)


def parsed_or_refused(q: str) -> str | None:
    """The FTS expression of ``q``, or None when it was refused with a documented reason."""
    try:
        return parse_query(q).fts()
    except BadQueryError as exc:
        assert exc.details["reason"] in {"empty", "only_exclusions", "too_long", "too_many_terms"}
        return None


@settings(max_examples=300, deadline=None)
@given(common_text | any_text)
def test_any_query_is_valid_fts_or_refused(q: str) -> None:
    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE VIRTUAL TABLE t USING fts5(body, uni)")
    expression = parsed_or_refused(q)
    if expression is not None:  # FTS5 accepts it: no syntax error, whatever it matches
        conn.execute("SELECT count(*) FROM t WHERE t MATCH ?", (expression,)).fetchall()


@settings(max_examples=300, deadline=None)
@given(common_text)
def test_a_query_finds_the_text_it_came_from(q: str) -> None:
    expression = parsed_or_refused(q)
    if expression is None or " NOT " in expression:
        return
    conn = sqlite3.connect(":memory:")
    conn.execute(
        "CREATE VIRTUAL TABLE t USING fts5(body, uni, tokenize = 'unicode61 remove_diacritics 2')"
    )
    assert matches(conn, q, q), expression


def visible(snippet: str) -> str:
    return html.unescape(snippet.replace("<mark>", "").replace("</mark>", "")).strip("…")


def test_snippet_escapes_and_marks() -> None:
    text = "before <script>alert(1)</script> 我们的数据库 & more"
    out = snippet_html(text, parse_query("数据 script"))
    assert "<script>" not in out and "&lt;<mark>script</mark>&gt;" in out
    assert "<mark>数据</mark>库" in out and "&amp;" in out


def test_snippet_cuts_long_text_around_the_match_with_ellipses() -> None:
    text = "开头" + "很长的前文。" * 100 + "关键的数据库迁移" + "后文。" * 100
    out = snippet_html(text, parse_query("迁移"), width=60)
    assert out.startswith("…") and out.endswith("…")
    assert "<mark>迁移</mark>" in out
    assert len(visible(out)) <= 60


def test_snippet_never_cuts_inside_a_combining_sequence() -> None:
    text = "e\u0301" * 200 + " target " + "👍🏽" * 100
    out = snippet_html(text, parse_query("target"), width=40)
    core = visible(out)
    assert not unicodedata.combining(core[0])
    assert not ("\U0001f3fb" <= core[-1] <= "\U0001f3ff" and not core.endswith("👍🏽"))


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300), st.sampled_from(["数据", "a", "数", "e", "x*", "😀", "ab cd"]))
def test_snippet_is_whole_escaped_text(text: str, q: str) -> None:
    try:
        query = parse_query(q)
    except BadQueryError:
        return
    out = snippet_html(text, query, width=50)
    assert re.sub(r"</?mark>", "", out).count("<") == 0  # every other '<' is escaped
    shown = visible(out)
    assert shown in re.sub(r"\s+", " ", text)
    assert out.count("<mark>") == out.count("</mark>")


def test_parse_time() -> None:
    assert parse_time(None) is None and parse_time("") is None
    assert parse_time(1_700_000_000) == 1_700_000_000.0
    assert parse_time("1700000000.5") == 1_700_000_000.5
    assert parse_time("2026-01-01T00:00:00Z") == parse_time("2026-01-01")
    next_day = parse_time("2026-01-02")
    assert next_day is not None and parse_time("2026-01-01", end=True) == next_day - 0.001
    bad_values: list[str | bool] = ["yesterday", "nan", "inf", "2026-13-01", True]
    for bad in bad_values:
        with pytest.raises(BadRequestError) as caught:
            parse_time(bad)
        assert caught.value.code == "bad_time"
