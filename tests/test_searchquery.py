"""Search operators and snippet markdown, pure (room.rules.searchquery)."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from room.rules.searchquery import (
    SearchOperatorError,
    SearchQuery,
    parse_search,
    plain_words,
    snippet_markdown,
)
from room.rules.searchtext import parse_query


def day(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def refused(q: str) -> dict[str, str]:
    with pytest.raises(SearchOperatorError) as caught:
        parse_search(q)
    assert caught.value.code == "bad_operator" and caught.value.http_status == 400
    return dict(caught.value.details)


def test_words_without_operators_are_left_alone() -> None:
    for q in ("迁移数据库", '"deployment failed" -token', "deploy* OR 部署", "http://x.io/a:b",
              "时间:3点", "fromage: cheese", "email a@b.c"):  # fmt: skip
        parsed = parse_search(q)
        assert parsed == SearchQuery(words=" ".join(q.split())), q
        assert not parsed.has_operators


def test_every_operator() -> None:
    parsed = parse_search(
        "部署 from:@lead has:file after:2026-01-01 before:2026-02-01T08:00:00 in:前端 is:mention"
    )
    assert parsed.words == "部署"
    assert parsed.author == "lead" and parsed.has_file and parsed.mentions_me
    assert parsed.projects == ("前端",)
    assert parsed.after == day("2026-01-01T23:59:59.999")
    assert parsed.before == day("2026-02-01T08:00:00")
    assert parsed.since is not None and parsed.since > parsed.after  # strict
    assert parsed.until is not None and parsed.until < parsed.before
    assert parsed.messages_only and parsed.has_operators


def test_chinese_text_full_width_colons_and_quoted_values() -> None:
    parsed = parse_search("from：小张 数据库迁移 in：「Project Room 网站」 IN:“另一个 项目” 测试")
    assert parsed.author == "小张"
    assert parsed.projects == ("Project Room 网站", "另一个 项目")
    assert parsed.words == "数据库迁移 测试"
    assert parse_search('from:"张 三" 你好').author == "张 三"
    assert parse_search("from:＠负责人 好").author == "负责人"
    # An unbalanced quote runs to the end, as in the words.
    assert parse_search('in:"半个 引号').projects == ("半个 引号",)
    # The words still parse as words: operators never reach FTS5.
    assert parse_query(parse_search("from:lead 数据").words).fts()


def test_operators_alone_leave_no_words() -> None:
    parsed = parse_search("has:file from:lead")
    assert parsed.words == "" and parsed.has_operators


def test_refusals_name_the_operator_and_why() -> None:
    assert refused("from: 你好") == {"operator": "from", "value": "", "reason": "empty"}
    assert refused('in:"" x')["reason"] == "empty"
    assert refused("has:image x") == {
        "operator": "has",
        "value": "image",
        "reason": "unknown_value",
    }
    assert refused("is:unread") == {"operator": "is", "value": "unread", "reason": "unknown_value"}
    assert refused("from:a from:b")["reason"] == "repeated"
    assert refused("before:明天") == {"operator": "before", "value": "明天", "reason": "bad_time"}
    assert refused("after:2026-13-01")["reason"] == "bad_time"
    assert refused("after:2026-02-01 before:2026-02-01")["reason"] == "before_after"
    assert parse_search("in:a in:b x").projects == ("a", "b")  # in: may repeat
    assert parse_search("HAS:FILE x").has_file


def test_snippet_markdown_renders_inline_marks_and_drops_cut_markers() -> None:
    assert snippet_markdown("用 `deploy` 命令") == "用 <code>deploy</code> 命令"
    assert snippet_markdown("<mark>数据</mark>库 **很重要** 和 *斜体* ~~删掉~~") == (
        "<mark>数据</mark>库 <strong>很重要</strong> 和 <em>斜体</em> <del>删掉</del>"
    )
    # Code is literal; a marker whose pair the snippet cut off is dropped.
    assert snippet_markdown("`a **b** c` 和 **没闭合") == "<code>a **b** c</code> 和 没闭合"
    assert snippet_markdown("…被截断的 `代码") == "…被截断的 代码"
    # A fence, a heading or a quote at the start, a link: their words only.
    assert snippet_markdown("```python print(1) ```") == " print(1) "
    assert snippet_markdown("# 标题 正文") == "标题 正文"
    assert snippet_markdown("&gt; 引用的话") == "引用的话"
    assert snippet_markdown("看 [文档](https://x.io/a) 吧") == "看 文档 吧"
    # Arithmetic and snake_case stay text; escaped HTML stays escaped.
    assert snippet_markdown("2*3*4 snake_case a * b") == "2*3*4 snake_case a * b"
    assert snippet_markdown("&lt;b&gt;x&lt;/b&gt;") == "&lt;b&gt;x&lt;/b&gt;"
    assert plain_words(snippet_markdown("**<mark>部署</mark>** &amp;")) == "部署 &"


OPERATOR_TEXT = st.lists(
    st.sampled_from(
        [
            "from:",
            "FROM：",
            "has:",
            "has:file",
            "is:mention",
            "in:",
            'in:"',
            "「",
            "」",
            "before:",
            "after:2026-01-01",
            "2026-13-40",
            "数据",
            "@lead",
            " ",
            " ",
            '"',
            "：",
            "-x",
            "OR",
        ]
    ),
    max_size=12,
).map("".join)


@settings(max_examples=300, deadline=None)
@given(OPERATOR_TEXT | st.text(max_size=60))
def test_any_text_is_split_or_refused_with_a_documented_reason(q: str) -> None:
    """Fuzz: an operator query is parsed or refused with ``bad_operator`` and one of its reasons;
    what remains as words never starts a word with a known operator."""
    try:
        parsed = parse_search(q)
    except SearchOperatorError as exc:
        assert exc.details["reason"] in {
            "empty", "unknown_value", "repeated", "bad_time", "before_after"}  # fmt: skip
        return
    for word in parsed.words.split():
        assert not re.match(r"(?i)(from|has|before|after|in|is)[:：]", word), (q, parsed)
