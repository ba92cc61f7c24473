"""Safe message rendering: markdown-it-py (raw HTML off) then nh3 with a small allow-list.

No images are rendered (no remote fetches from a message); links are limited to http(s) and
mailto and open in a new tab with ``rel="noopener noreferrer nofollow"``.

* Bare URLs with a scheme (``https://…``, ``mailto:…``) become links (markdown-it's linkify,
  through ``linkify-it-py``); bare domains (``example.com``) and protocol-relative ``//host``
  stay text. A link's visible text is shortened to its host and the start of its path, and a
  named link (``[text](url)``) is followed by its host, so where a link leads is always shown.
  A bare URL ends at full-width punctuation (``https://例子.中国/路径，好的`` links up to 路径).
* Fenced code with a language Pygments knows is highlighted server-side into ``<span class>``
  tokens: classes only, never inline styles, so the page's CSP keeps ``style-src 'self'``
  (``web/code.css`` colours them, light and dark).
* Table alignment becomes ``class="align-left|center|right"`` instead of a ``style`` attribute.

nh3 sanitises the result whatever the steps above produced: tags, attributes and class names
are each allow-listed.

Most chat messages are one line of plain prose. For those, a fast path produces exactly what the
full pipeline would (a test checks the two agree on generated text) at a fraction of the cost, so
the send path stays fast; anything with a character markdown treats specially takes the full path.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache
from typing import Any
from urllib.parse import urlsplit

import nh3
from markdown_it import MarkdownIt
from markdown_it.rules_core import StateCore
from markdown_it.token import Token
from pygments import highlight as pygments_highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import get_lexer_by_name
from pygments.token import STANDARD_TYPES
from pygments.util import ClassNotFound

ALLOWED_TAGS = frozenset(
    {
        "p", "br", "hr", "strong", "em", "del", "s", "code", "pre", "blockquote", "ul", "ol",
        "li", "a", "h1", "h2", "h3", "h4", "h5", "h6", "table", "thead", "tbody", "tr", "th",
        "td", "span",
    }
)  # fmt: skip
# ``class`` is not listed here: nh3 keeps it only through ``ALLOWED_CLASSES``, name by name.
ALLOWED_ATTRIBUTES = {"a": {"href", "title"}, "ol": {"start"}, "pre": {"data-lang"}}
ALIGN_CLASSES = frozenset({"align-left", "align-center", "align-right"})
# Pygments' short token class names ("k", "s2", "nf" …): the only classes a code span may carry.
TOKEN_CLASSES = frozenset(c for c in STANDARD_TYPES.values() if c)
ALLOWED_CLASSES = {
    "th": set(ALIGN_CLASSES),
    "td": set(ALIGN_CLASSES),
    "pre": {"highlight"},
    "span": {*TOKEN_CLASSES, "link-host"},
}
URL_SCHEMES = frozenset({"http", "https", "mailto"})
MAX_HIGHLIGHT_CHARS = 20_000  # longer blocks stay plain: highlighting is on the send path
LINK_TEXT_CHARS = 48  # a linkified URL's visible text, at most (host + start of the path)

# One line, no leading/trailing blank, and none of the characters markdown gives meaning to
# (or that the renderer escapes or normalises, like U+00A0 → &nbsp;). Digits may not open the text ("1. item").
# stdlib ``re``: for plain character classes it is several times faster than ``regex`` here.
_PLAIN = re.compile(
    r"[^\s\d\\`*_\[\]<>!#~|&\-+=\"\x00-\x1f\x7f\xa0\u2028\u2029]"
    r"[^\\`*_\[\]<>!#~|&\"\x00-\x1f\x7f\xa0\u2028\u2029\n\r]*"
)
_FORMATTER = HtmlFormatter(nowrap=True)


def _highlight(code: str, lang: str, attrs: str) -> str:
    """markdown-it's ``highlight`` hook: a full ``<pre>`` for a known language, else "" (the
    default rendering, escaped by markdown-it)."""
    name = lang.strip().lower()
    if not name or len(code) > MAX_HIGHLIGHT_CHARS:
        return ""
    try:
        lexer = get_lexer_by_name(name)
    except ClassNotFound:
        return ""
    tokens = pygments_highlight(code, lexer, _FORMATTER)  # escapes &, <, >, quotes
    label = re.sub(r"[^a-z0-9+#._-]", "", name)[:32]
    return f'<pre class="highlight" data-lang="{label}"><code>{tokens}</code></pre>\n'


def _host(href: str) -> str:
    try:
        parts = urlsplit(href)
    except ValueError:
        return ""
    if parts.scheme == "mailto":
        return ""
    return parts.hostname or ""


def _shorten(text: str) -> str:
    """``https://example.com/a/very/long/path?q=1`` → ``example.com/a/very/long/pa…``."""
    for prefix in ("https://", "http://"):
        if text.lower().startswith(prefix):
            text = text[len(prefix) :]
            break
    text = text.removesuffix("/")
    return text if len(text) <= LINK_TEXT_CHARS else text[: LINK_TEXT_CHARS - 1] + "…"


# Full-width punctuation ends a bare URL: "见 https://例子.中国/路径，谢谢" links the URL, not "，谢谢".
_CJK_PUNCTUATION = re.compile(
    r"[\u3000-\u303f\uff01-\uff0f\uff1a-\uff20\uff3b-\uff40\uff5b-\uff65]"
)


def _text(content: str) -> Token:
    token = Token("text", "", 0)
    token.content = content
    return token


def _bare_links(md: MarkdownIt, text: str) -> list[Token]:
    """``text`` as text and link tokens, each bare URL ending at its first full-width
    punctuation mark (linkify-it reads "https://a.com/x，谢谢" as one URL)."""
    assert md.linkify is not None
    out: list[Token] = []
    rest = text
    while rest:
        matches = md.linkify.match(rest) if ":" in rest else None
        if not matches:
            out.append(_text(rest))
            break
        found = matches[0]
        url = rest[found.index : found.last_index]
        cut = _CJK_PUNCTUATION.search(url)
        if cut is not None and cut.start() > 0:
            url = url[: cut.start()]
        if found.index:
            out.append(_text(rest[: found.index]))
        href = md.normalizeLink(url)
        if md.validateLink(href):
            link = Token("link_open", "a", 1)
            link.attrSet("href", href)
            link.markup, link.info = "linkify", "auto"
            close = Token("link_close", "a", -1)
            close.markup, close.info = "linkify", "auto"
            out += [link, _text(url), close]
        else:
            out.append(_text(url))
        rest = rest[found.index + len(url) :]
    return out


def _split_at_cjk_punctuation(md: MarkdownIt, tokens: list[Token]) -> list[Token]:
    out: list[Token] = []
    i = 0
    while i < len(tokens):
        group = tokens[i : i + 3]
        if (
            len(group) == 3
            and group[0].type == "link_open"
            and group[0].markup == "linkify"
            and group[1].type == "text"
            and group[2].type == "link_close"
            and _CJK_PUNCTUATION.search(group[1].content)
        ):
            out += _bare_links(md, group[1].content)
            i += 3
            continue
        out.append(tokens[i])
        i += 1
    return out


def _links_and_alignment(state: StateCore) -> None:
    """Core rule after linkify: shorten linkified URLs, name the host after a named link, and
    turn the table's ``style="text-align:…"`` into an alignment class."""
    for block in state.tokens:
        if block.type in ("th_open", "td_open"):
            style = str(block.attrs.pop("style", ""))
            if style.startswith("text-align:"):
                block.attrSet("class", "align-" + style.removeprefix("text-align:"))
            continue
        if block.type != "inline" or not block.children:
            continue
        children: list[Token] = []
        source = _split_at_cjk_punctuation(state.md, block.children)
        i = 0
        while i < len(source):
            token = source[i]
            children.append(token)
            if token.type != "link_open":
                i += 1
                continue
            href = str(token.attrGet("href") or "")
            host = _host(href)
            if host:
                token.attrSet("title", href)
            close = next(
                (j for j in range(i + 1, len(source)) if source[j].type == "link_close"), None
            )
            if close is None:
                i += 1
                continue
            inner = source[i + 1 : close]
            if token.info == "auto" and len(inner) == 1 and inner[0].type == "text":
                inner[0].content = _shorten(inner[0].content)
            children.extend(inner)
            children.append(source[close])
            text = "".join(t.content for t in inner if t.type in ("text", "code_inline"))
            if host and token.markup != "linkify" and host not in text:
                hint = Token("html_inline", "", 0)
                hint.content = f' <span class="link-host">{host}</span>'
                children.append(hint)
            i = close + 1
        block.children = children


@lru_cache(maxsize=1)
def _markdown() -> MarkdownIt:
    md = MarkdownIt(
        "commonmark",
        {"html": False, "linkify": True, "typographer": False, "highlight": _highlight},
    ).enable(["strikethrough", "table", "linkify"])
    assert md.linkify is not None
    # A scheme is required: "example.com" and "a@b.c" stay text, "//host" is no link (nh3
    # would let a relative URL through), and ftp: links would lose their href anyway.
    md.linkify.set({"fuzzy_link": False, "fuzzy_email": False, "fuzzy_ip": False})
    md.linkify.add("//", None)
    md.linkify.add("ftp:", None)
    md.core.ruler.push("links_and_alignment", _links_and_alignment)
    # The host hint is the one html_inline token the renderer emits (raw HTML input is off).
    md.add_render_rule("html_inline", _render_html_inline)
    return md


def _render_html_inline(
    self: Any, tokens: Sequence[Token], idx: int, options: Any, env: Any
) -> str:
    return tokens[idx].content


@lru_cache(maxsize=1)
def _cleaner() -> nh3.Cleaner:
    return nh3.Cleaner(
        tags=set(ALLOWED_TAGS),
        attributes={k: set(v) for k, v in ALLOWED_ATTRIBUTES.items()},
        allowed_classes={k: set(v) for k, v in ALLOWED_CLASSES.items()},
        url_schemes=set(URL_SCHEMES),
        link_rel="noopener noreferrer nofollow",
        set_tag_attribute_values={"a": {"target": "_blank"}},
        strip_comments=True,
    )


def render_full(body: str) -> str:
    html = _markdown().render(body)
    return str(_cleaner().clean(html))


def render(body: str) -> str:
    """Message body (markdown) → sanitised HTML."""
    # Every link linkify makes has a scheme (``https:``, ``mailto:``): no ASCII colon, no link.
    if (
        _PLAIN.fullmatch(body)
        and not body[-1].isspace()
        and (":" not in body or not _markdown().linkify.pretest(body))  # type: ignore[union-attr]
    ):
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
