"""Safe message rendering: markdown-it-py (raw HTML off) then nh3 with a small allow-list.

No images are rendered (no remote fetches from a message); links are limited to http(s) and
mailto and open with ``rel="noopener noreferrer nofollow"``.

Most chat messages are one line of plain prose. For those, a fast path produces exactly what the
full pipeline would (a test checks the two agree on generated text) at a fraction of the cost, so
the send path stays fast; anything with a character markdown treats specially takes the full path.
"""

from __future__ import annotations

import re
from functools import lru_cache

import nh3
from markdown_it import MarkdownIt

ALLOWED_TAGS = frozenset(
    {
        "p", "br", "hr", "strong", "em", "del", "s", "code", "pre", "blockquote", "ul", "ol",
        "li", "a", "h1", "h2", "h3", "h4", "h5", "h6", "table", "thead", "tbody", "tr", "th",
        "td",
    }
)  # fmt: skip
ALLOWED_ATTRIBUTES = {"a": {"href", "title"}, "ol": {"start"}, "th": {"style"}, "td": {"style"}}
URL_SCHEMES = frozenset({"http", "https", "mailto"})

# One line, no leading/trailing blank, and none of the characters markdown gives meaning to
# (or that the renderer escapes or normalises, like U+00A0 → &nbsp;). Digits may not open the text ("1. item").
# stdlib ``re``: for plain character classes it is several times faster than ``regex`` here.
_PLAIN = re.compile(
    r"[^\s\d\\`*_\[\]<>!#~|&\-+=\"\x00-\x1f\x7f\xa0\u2028\u2029]"
    r"[^\\`*_\[\]<>!#~|&\"\x00-\x1f\x7f\xa0\u2028\u2029\n\r]*"
)


@lru_cache(maxsize=1)
def _markdown() -> MarkdownIt:
    return MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False}).enable(
        ["strikethrough", "table"]
    )


def render_full(body: str) -> str:
    html = _markdown().render(body)
    return str(
        nh3.clean(
            html,
            tags=set(ALLOWED_TAGS),
            attributes={k: set(v) for k, v in ALLOWED_ATTRIBUTES.items()},
            url_schemes=set(URL_SCHEMES),
            link_rel="noopener noreferrer nofollow",
            strip_comments=True,
        )
    )


def render(body: str) -> str:
    """Message body (markdown) → sanitised HTML."""
    if _PLAIN.fullmatch(body) and not body[-1].isspace():
        return f"<p>{body}</p>\n"
    return render_full(body)


EXCERPT_CHARS = 140


def plain_text(body: str, limit: int = EXCERPT_CHARS) -> str:
    """Markdown → the readable words of it on one line, for a quote bar or a reply chip: no
    ``**``, backticks or ``>`` (the text of emphasis, code and quotes is kept), whitespace
    collapsed, cut to ``limit`` characters with "…". Plain text, never markup: callers show it
    as text."""
    words: list[str] = []
    for token in _markdown().parse(body):
        if token.type in ("fence", "code_block"):
            words.append(token.content)
        elif token.type == "inline":
            for child in token.children or ():
                if child.type in ("text", "code_inline", "image"):  # an image: its alt text
                    words.append(child.content)
                elif child.type in ("softbreak", "hardbreak"):
                    words.append(" ")
        elif token.type.endswith("_close") and token.block:
            words.append(" ")
    flat = " ".join("".join(words).split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
