"""The send path's hand-made fast paths must equal the slow, obvious versions exactly."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from html.parser import HTMLParser

from hypothesis import given, settings
from hypothesis import strategies as st

from room.rules.entities import iso
from room.rules.render import ALLOWED_TAGS, render, render_full
from room.store.messages import message_object

# Plain prose with everything markdown or the sanitiser might treat specially mixed in.
ALPHABET = st.sampled_from(
    [
        *"abcXYZ 0123456789你好，。！？：；、（）「」.,;:?!'%$@/-+=_*`#~|&<>\"[]()\\\n\t",
        *"\u00a0\u3000\u2028😀é\u0301",
    ]
)


@settings(max_examples=600, deadline=None)
@given(st.text(alphabet=ALPHABET, min_size=1, max_size=80))
def test_render_fast_path_equals_the_full_pipeline(text: str) -> None:
    assert render(text) == render_full(text)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            [
                "hello",
                "世界",
                "a-b",
                "x.y",
                "100%",
                "@lead",
                "https://example.com/路径",
                "备注:",
                "mailto:a@b.co",
                "www.example.com",
                "a.com",
                "x:y",
                "http:",
                "ftp://f.example",
            ]
        ),
        min_size=1,
    )
)
def test_render_fast_path_on_prose(words: list[str]) -> None:
    text = " ".join(words)
    assert render(text) == render_full(text)


XSS = [
    "<script>window.pwned = 1</script>",
    "<img src=x onerror=alert(1)>",
    "[click](javascript:alert(1))",
    "<svg onload=alert(1)><circle/></svg>",
    "![x](data:image/svg+xml;base64,PHN2ZyBvbmxvYWQ9YWxlcnQoMSk+)",
    "![remote](https://example.com/tracker.png)",
    '<a href="javascript:alert(1)">x</a>',
    "<iframe src=https://example.com></iframe>",
    "[x](https://ok.example/path)",
]


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, list[tuple[str, str | None]]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, attrs))


def test_xss_corpus_renders_inert() -> None:
    for text in XSS:
        parser = _Tags()
        parser.feed(render(text))
        for tag, attrs in parser.tags:
            assert tag in ALLOWED_TAGS, (text, tag)
            for name, value in attrs:
                assert not name.startswith("on"), (text, name)
                if name == "href":
                    assert (value or "").startswith(("https://", "http://", "mailto:")), text
    safe = render("[x](https://ok.example/path)")
    assert 'href="https://ok.example/path"' in safe and "noopener" in safe


@settings(max_examples=500, deadline=None)
@given(st.floats(min_value=0, max_value=4_102_444_800, allow_nan=False))
def test_iso_equals_datetime(ts: float) -> None:
    expected = datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds")
    assert iso(ts) == expected.replace("+00:00", "Z")


@settings(max_examples=300, deadline=None)
@given(
    body=st.text(max_size=60),
    author=st.one_of(st.none(), st.integers(1, 10**9)),
    reply_to=st.one_of(st.none(), st.integers(1, 10**9)),
    mentions=st.lists(st.integers(1, 10**6), max_size=5),
    txn=st.one_of(st.none(), st.text(max_size=20)),
    deleted=st.booleans(),
    meta=st.one_of(st.none(), st.dictionaries(st.text(max_size=5), st.integers(), max_size=2)),
)
def test_message_object_equals_json_dumps(
    body: str,
    author: int | None,
    reply_to: int | None,
    mentions: list[int],
    txn: str | None,
    deleted: bool,
    meta: dict[str, int] | None,
) -> None:
    excerpt = {"author_id": 1, "seq": 2, "excerpt": body[:5]} if reply_to else None
    text = message_object(
        message_id=7,
        project_id=3,
        seq=11,
        author_id=author,
        kind="chat",
        body=body,
        html=f"<p>{body}</p>",
        reply_to=reply_to,
        reply_excerpt=excerpt,
        mentions=mentions,
        client_txn_id=txn,
        created_at=1_796_000_000.25,
        edited_at=None,
        deleted=deleted,
        meta=meta,
    )
    expected: dict[str, object] = {
        "id": 7,
        "project_id": 3,
        "seq": 11,
        "author_id": author,
        "kind": "chat",
        "body": "" if deleted else body,
        "html": "" if deleted else f"<p>{body}</p>",
        "reply_to": reply_to,
        "reply_excerpt": excerpt,
        "mentions": sorted(mentions),
        "client_txn_id": txn,
        "created_at": iso(1_796_000_000.25),
        "edited_at": None,
        "deleted": deleted,
    }
    if meta:
        expected["meta"] = meta
    assert text == json.dumps(expected, ensure_ascii=False, separators=(",", ":"))


def _parsed(text: str) -> list[tuple[str, dict[str, str | None]]]:
    parser = _Tags()
    parser.feed(render(text))
    return [(tag, dict(attrs)) for tag, attrs in parser.tags]


def test_bare_urls_become_links_that_show_their_host() -> None:
    html = render("部署在 https://docs.example.com/guide/install?lang=zh 看看")
    (link,) = [attrs for tag, attrs in _parsed("见 https://docs.example.com/guide") if tag == "a"]
    assert link["href"] == "https://docs.example.com/guide"
    assert link["target"] == "_blank"
    assert link["rel"] == "noopener noreferrer nofollow"
    assert ">docs.example.com/guide/install?lang=zh</a>" in html
    long = render("https://example.com/" + "a" * 100)
    assert ">example.com/" in long and "…</a>" in long and 'title="https://example.com/' in long


def test_full_width_punctuation_ends_a_bare_url() -> None:
    html = render("看 https://例子.中国/路径，好的。再看 https://b.example/y）")
    assert 'href="https://xn--fsqu00a.xn--fiqs8s/%E8%B7%AF%E5%BE%84"' in html
    assert ">例子.中国/路径</a>，好的。" in html
    assert 'href="https://b.example/y"' in html and "b.example/y</a>）" in html
    two = render("https://a.example/x，https://b.example/y。")
    assert two.count("<a ") == 2 and "</a>，<a " in two and "</a>。</p>" in two


def test_only_urls_with_a_scheme_are_linkified() -> None:
    for text in ("example.com", "mail me at a@b.com", "//evil.example/x", "ftp://files.example"):
        assert "<a " not in render(text), text


def test_a_named_link_names_its_real_host() -> None:
    html = render("[https://bank.example](https://phish.example/login)")
    assert 'href="https://phish.example/login"' in html
    assert '<span class="link-host">phish.example</span>' in html
    assert "link-host" not in render("[see docs.example](https://docs.example/a)")


def test_code_blocks_are_highlighted_with_classes_only() -> None:
    html = render('```python\ndef greet(name):\n    return f"你好 {name}"\n```')
    assert html.startswith('<pre class="highlight" data-lang="python"><code>')
    assert '<span class="k">def</span>' in html and '<span class="nf">greet</span>' in html
    assert "style" not in html
    assert render("```\nplain <b>\n```") == "<pre><code>plain &lt;b&gt;\n</code></pre>\n"
    assert render("```nosuchlang\nx\n```") == "<pre><code>x\n</code></pre>\n"


def test_table_alignment_is_a_class_not_a_style() -> None:
    html = render("|a|b|c|\n|:-|:-:|-:|\n|1|2|3|")
    assert '<th class="align-left">a</th>' in html
    assert '<td class="align-center">2</td>' in html
    assert '<td class="align-right">3</td>' in html
    assert "style" not in html


HOSTILE = [
    "[click](javascript:alert(1))",
    "<javascript:alert(1)>",
    "javascript:alert(1)",
    "[x](JaVaScRiPt:alert(1))",
    "```html\n<script>alert(1)</script><img src=x onerror=alert(1)>\n```",
    '```"><img src=x onerror=alert(1)>\ncode\n```',
    '```python" onmouseover="alert(1)\nx = 1\n```',
    'https://x.example/"onmouseover="alert(1)"',
    "https://x.example/a'><script>alert(1)</script>",
    '[t](https://x.example/"style="x)',
    '<span class="k" style="position:fixed" onclick=\'x\'>hi</span>',
]


def test_hostile_inputs_render_inert() -> None:
    for text in HOSTILE:
        html = render(text)
        assert "<script" not in html and "<img" not in html, text
        for tag, attrs in _parsed(text):
            assert tag in ALLOWED_TAGS, (text, tag)
            for name, value in attrs.items():
                assert not name.startswith("on") and name != "style", (text, name)
                if name == "href":
                    assert (value or "").startswith(("https://", "http://", "mailto:")), text
                if name == "class":
                    assert tag in ("pre", "span", "th", "td"), (text, tag)
    quoted = render('https://x.example/"onmouseover="alert(1)"')
    assert 'href="https://x.example/%22onmouseover=%22alert(1)" title=' in quoted


@settings(max_examples=300, deadline=None)
@given(body=st.text(alphabet=st.characters(max_codepoint=127), max_size=80))
def test_an_ascii_message_object_equals_json_dumps(body: str) -> None:
    # ASCII text takes another encoder than the rest (room.store.messages._encode_string):
    # every control character, quote and backslash must come out as json.dumps writes them.
    body = '\x00\x1f\x7f"\\\n\t' + body
    text = message_object(
        message_id=1,
        project_id=1,
        seq=1,
        author_id=1,
        kind="chat",
        body=body,
        html=body[::-1],
        reply_to=None,
        reply_excerpt=None,
        mentions=(),
        client_txn_id=body[:9],
        created_at=1_796_000_000.0,
    )
    assert json.loads(text)["body"] == body
    expected = {
        "id": 1,
        "project_id": 1,
        "seq": 1,
        "author_id": 1,
        "kind": "chat",
        "body": body,
        "html": body[::-1],
        "reply_to": None,
        "reply_excerpt": None,
        "mentions": [],
        "client_txn_id": body[:9],
        "created_at": iso(1_796_000_000.0),
        "edited_at": None,
        "deleted": False,
    }
    assert text == json.dumps(expected, ensure_ascii=False, separators=(",", ":"))
