"""Deterministic @mention resolution — the Python half of ``shared/mentions/SPEC.md``.

Pure: no I/O, no clock. The server builds one :class:`Roster` per project (and caches it), then
calls :func:`resolve` on every sent message. ``web/mentions.js`` implements the same rules for the
browser's pre-send preview; both must pass ``shared/mentions/vectors.json``
(:func:`check_vectors`; ``python -m room.mentions_check check PATH`` runs a file).

Section numbers in comments (§n) refer to SPEC.md.
"""

from __future__ import annotations

import bisect
import json
import re
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

MemberKind = Literal["human", "agent"]
MemberStatus = Literal["active", "paused", "left"]

# §1. Spelled out rather than `str.isspace` / JS `\s`, which disagree with each other.
_WHITESPACE = (
    "\t\n\x0b\x0c\r \x85\xa0\u1680"
    + "".join(chr(c) for c in range(0x2000, 0x200B))
    + "\u2028\u2029\u202f\u205f\u3000"
)
_WS_SET = frozenset(_WHITESPACE)
_WS_CLASS = "[\t\n\x0b\x0c\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]"
_ASCII_WORD = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_")

# §4. CJK punctuation; all of it may also precede an at-sign (§3).
_CJK_PUNCT = frozenset("（［｛〈《「『【〔〖“‘" + "）］｝〉》」』】〕〗”’" + "，。、；：！？…—～")
_BOUNDARY = _WS_SET | _CJK_PUNCT | frozenset(",;)]}>\"'*~([{<")
_BOUNDARY_UNLESS_WORD = frozenset(".:!?")  # `@lin.` ends at lin, `@lin.zhang` does not
_BEFORE_AT = _WS_SET | _CJK_PUNCT | frozenset("([{<\"'*~,;")

_FENCE_RE = re.compile("(?: {0,3})(`{3,}|~{3,})(.*)")
_QUOTE_RE = re.compile("[ \t]*>")
_BACKTICKS_RE = re.compile("`+")
_BLANK_RE = re.compile(f"{_WS_CLASS}*")
_WS_RE = re.compile(_WS_CLASS)
# §2.5-2.6, matched without scanning every letter of the line (see _urls and _emails).
_ASCII_LETTERS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
_SCHEME_CHARS = _ASCII_LETTERS | frozenset("0123456789+.-")
_URL_CHARS = _ASCII_LETTERS | frozenset("0123456789-._~:/?#[]@!$&'()*+,;=%")
_URL_RUN_RE = re.compile(r"[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]+")
_WWW = frozenset(a + b + c for a in "Ww" for b in "Ww" for c in "Ww")
_EMAIL_LOCAL_CHARS = _ASCII_LETTERS | frozenset("0123456789._%+-")
_EMAIL_DOMAIN_RE = re.compile(r"[A-Za-z0-9\-]+(?:\.[A-Za-z0-9\-]+)+")

_ASCII_UPPER_RE = re.compile("[A-Z]+")

# Upper bound of len(x) / len(NFC(x)): no character has a canonical decomposition longer than 4.
_NFC_EXPANSION = 4

EVERYONE_NAMES = ("all", "everyone", "所有人")
HUMANS_NAMES = ("humans", "用户")

# Ranks of §5: lower wins when entries share a folded name; a tombstone counts only when no live
# member has the name (a departed name never hides a live member).
_RANK_GROUP, _RANK_HANDLE, _RANK_ALIAS, _RANK_DISPLAY, _RANK_TOMBSTONE = range(5)
# §5: an unmatched plain word with a letter outside ASCII (`@张三`) is `unknown` up to this length.
UNKNOWN_WORD_MAX = 32
_VIA_BY_RANK = {_RANK_HANDLE: "handle", _RANK_ALIAS: "alias", _RANK_DISPLAY: "display_name"}


@dataclass(frozen=True, slots=True)
class RosterMember:
    """A member as the resolver sees it; ids are opaque strings."""

    id: str
    kind: MemberKind
    handle: str
    display_name: str
    aliases: tuple[str, ...] = ()
    status: MemberStatus = "active"
    role: str = ""


@dataclass(frozen=True, slots=True)
class Tombstone:
    """A name that belonged to a member who left; it stays reserved."""

    name: str
    member_id: str


@dataclass(frozen=True, slots=True)
class Mention:
    """One member reached by one written name; chips have ``start == end == -1``."""

    member_id: str
    start: int
    end: int
    via: str  # handle | alias | display_name | bracket | chip | all | humans


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """A problem the sender should see before sending; ``code`` is stable (SPEC §7)."""

    code: str
    name: str
    start: int
    end: int
    hint: str
    candidates: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class _Target:
    """What a folded name resolves to, computed once per roster."""

    action: Literal["all", "humans", "departed", "ambiguous", "member"]
    ids: tuple[str, ...]
    via: str


def _fold(s: str) -> str:
    """Map A-Z to a-z and nothing else (SPEC §1); NFC is the caller's business."""
    if s.isascii():
        return s.lower()
    # Not `str.translate`: it does a dict lookup per character, ten times slower on CJK text.
    return _ASCII_UPPER_RE.sub(_lower, s)


def _lower(m: re.Match[str]) -> str:
    return m[0].lower()


def _key(name: str) -> str:
    return _fold(unicodedata.normalize("NFC", name))


def _deletions(key: str) -> set[str]:
    """The key and every string made by deleting one character from it (never the empty one)."""
    out = {key[:i] + key[i + 1 :] for i in range(len(key))}
    out.add(key)
    out.discard("")
    return out


class Roster:
    """Members and tombstones with precomputed lookups; immutable once built."""

    __slots__ = (
        "_bracket",
        "_by_id",
        "_everyone",
        "_humans",
        "_lengths",
        "_max_len",
        "_near",
        "_plain",
        "_prefixes",
        "_spaced_heads",
        "_tombstoned",
    )

    def __init__(self, members: Iterable[RosterMember], tombstones: Iterable[Tombstone]) -> None:
        by_id: dict[str, RosterMember] = {}
        for member in members:
            if member.id in by_id:
                raise ValueError(f"duplicate member id {member.id!r}")
            by_id[member.id] = member
        tombstones = tuple(tombstones)

        entries: dict[str, list[tuple[int, str]]] = {}  # key -> [(rank, member id or group)]
        near: dict[str, set[str]] = {}
        prefixes: dict[str, set[str]] = {}
        spaced_heads: set[str] = set()

        def add(name: str, rank: int, ref: str) -> None:
            key = _key(name)
            if key:
                entries.setdefault(key, []).append((rank, ref))

        for name in EVERYONE_NAMES:
            add(name, _RANK_GROUP, "all")
        for name in HUMANS_NAMES:
            add(name, _RANK_GROUP, "humans")
        for tomb in tombstones:
            add(tomb.name, _RANK_TOMBSTONE, tomb.member_id)
        for member in by_id.values():
            names = [(member.handle, _RANK_HANDLE), (member.display_name, _RANK_DISPLAY)]
            names += [(alias, _RANK_ALIAS) for alias in member.aliases]
            for name, rank in names:
                add(name, rank, member.id)
                key = _key(name)
                if member.status != "left" and key:
                    for variant in _deletions(key):
                        near.setdefault(variant, set()).add(member.id)
                    for end in range(1, len(key) + 1):
                        prefixes.setdefault(key[:end], set()).add(member.id)
                    space = _WS_RE.search(key)
                    if space is not None and space.start() > 0:
                        spaced_heads.add(key[: space.start()])

        bracket = {key: _target(found, by_id) for key, found in entries.items()}
        plain = {key: t for key, t in bracket.items() if not any(c in _WS_SET for c in key)}
        self._by_id = by_id
        live = sorted((m for m in by_id.values() if m.status != "left"), key=lambda m: m.id)
        self._everyone = tuple(m.id for m in live)
        self._humans = tuple(m.id for m in live if m.kind == "human")
        self._tombstoned = frozenset(t.member_id for t in tombstones)
        self._bracket = bracket
        self._plain = plain
        # Per first character, the distinct lengths of plain names, longest first: the fast path
        # tries only these ends.
        lengths: dict[str, set[int]] = {}
        for key in plain:
            lengths.setdefault(key[0], set()).add(len(key))
        self._lengths = {c: tuple(sorted(ns, reverse=True)) for c, ns in lengths.items()}
        self._max_len = max((len(key) for key in bracket), default=0)
        self._near = {variant: frozenset(ids) for variant, ids in near.items()}
        self._prefixes = {prefix: frozenset(ids) for prefix, ids in prefixes.items()}
        self._spaced_heads = frozenset(spaced_heads)

    @classmethod
    def build(cls, members: Iterable[RosterMember], tombstones: Iterable[Tombstone] = ()) -> Roster:
        """Index the names of ``members`` and ``tombstones``; raises ValueError on duplicate ids."""
        return cls(members, tombstones)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Roster:
        """Build from the vectors' roster format (SPEC §8); raises ValueError if malformed."""
        try:
            members = [
                RosterMember(
                    id=str(m["id"]),
                    kind=_literal(m["kind"], ("human", "agent")),
                    handle=str(m.get("handle", "")),
                    display_name=str(m.get("display_name", "")),
                    aliases=tuple(str(a) for a in m.get("aliases", ())),
                    status=_literal(m.get("status", "active"), ("active", "paused", "left")),
                    role=str(m.get("role", "")),
                )
                for m in data["members"]
            ]
            tombstones = [
                Tombstone(name=str(t["name"]), member_id=str(t["member_id"]))
                for t in data.get("tombstones", ())
            ]
        except (KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"malformed roster: {exc!r}") from exc
        return cls.build(members, tombstones)

    def member(self, member_id: str) -> RosterMember | None:
        """The member with this id, or None."""
        return self._by_id.get(member_id)

    def __repr__(self) -> str:
        return f"<Roster {len(self._by_id)} members>"


def _literal(value: Any, allowed: tuple[str, ...]) -> Any:
    if value not in allowed:
        raise ValueError(f"{value!r} is not one of {allowed}")
    return value


def _target(found: list[tuple[int, str]], members: Mapping[str, RosterMember]) -> _Target:
    """Resolve the entries sharing one folded name (SPEC §5, §6): a group name first, then the
    best rank among live members; only a name no live member has is departed."""
    groups = sorted(ref for rank, ref in found if rank == _RANK_GROUP)
    if groups:
        return _Target("all" if groups[0] == "all" else "humans", (), groups[0])
    live = [
        (rank, ref)
        for rank, ref in found
        if rank != _RANK_TOMBSTONE and members[ref].status != "left"
    ]
    if not live:
        return _Target("departed", tuple(sorted({ref for _, ref in found})), "")
    best = min(rank for rank, _ in live)
    ids = tuple(sorted({ref for rank, ref in live if rank == best}))
    if len(ids) > 1:
        return _Target("ambiguous", ids, "")
    return _Target("member", ids, _VIA_BY_RANK[best])


def _has_foreign_letter(word: str) -> bool:
    """True if ``word`` holds a letter outside ASCII (Unicode category L*): a person's name
    (`张三`, `José`), not a code word (`@param`, `@types/node`)."""
    return not word.isascii() and any(
        not c.isascii() and unicodedata.category(c)[0] == "L" for c in word
    )


@dataclass(frozen=True, slots=True)
class Resolution:
    """The outcome of :func:`resolve`; ``mentioned`` is what delivery uses."""

    mentioned: tuple[str, ...]
    mentions: tuple[Mention, ...]
    diagnostics: tuple[Diagnostic, ...]
    masked: tuple[tuple[int, int], ...]
    everyone: bool
    humans_only_group: bool

    def agents_reached(self, roster: Roster) -> int:
        """How many AI (agent) members are in ``mentioned``."""
        count = 0
        for member_id in self.mentioned:
            member = roster.member(member_id)
            if member is not None and member.kind == "agent":
                count += 1
        return count


# ---------------------------------------------------------------------------------- masking (§2)


def _fence_blocks(text: str) -> list[tuple[int, int]]:
    """Fenced code blocks as (start, end) spans; an unclosed fence runs to the end of the text."""
    blocks: list[tuple[int, int]] = []
    fence = ""  # the opener's run while inside a block
    block_start = 0
    n = len(text)
    # Only a line holding ``` or ~~~ can open or close a fence: visit just those lines.
    for start in _lines_with(text, "```", "~~~"):
        nl = text.find("\n", start)
        end = n if nl < 0 else nl
        m = _FENCE_RE.match(text, start, end)
        if not fence:
            if m and not (m[1][0] == "`" and "`" in m[2]):
                fence, block_start = m[1], start
        elif (
            m
            and m[1][0] == fence[0]
            and len(m[1]) >= len(fence)
            and _BLANK_RE.fullmatch(m[2]) is not None
        ):
            blocks.append((block_start, end))
            fence = ""
    if fence:
        blocks.append((block_start, n))
    return blocks


def _lines_with(text: str, *markers: str) -> list[int]:
    """Start offsets of the lines that contain any of ``markers``, in order."""
    starts: set[int] = set()
    for marker in markers:
        k = text.find(marker)
        while k >= 0:
            starts.add(text.rfind("\n", 0, k) + 1)
            nl = text.find("\n", k)
            k = -1 if nl < 0 else text.find(marker, nl + 1)
    return sorted(starts)


def _line_masks(line: str, offset: int) -> list[tuple[int, int]]:
    """Inline masks of one line (code spans, link targets, URLs, emails), merged (§2.3-2.6)."""
    spans: list[tuple[int, int]] = []
    if "`" in line:
        spans.extend(_code_spans(line))
    # Single-character tests first: `"](" in line` costs ten times more than `"]" in line`.
    if "]" in line:
        spans.extend(_link_targets(line))
    spans.extend(_urls(line))
    if "@" in line:
        spans.extend(_emails(line))
    if len(spans) > 1:
        spans = _merge(spans)
    return [(a + offset, b + offset) for a, b in spans]


def _code_spans(line: str) -> list[tuple[int, int]]:
    """Backtick runs paired with the next run of the same width (§2.3), in linear time."""
    runs = [(m.start(), m.end()) for m in _BACKTICKS_RE.finditer(line)]
    by_width: dict[int, list[int]] = {}
    for index, (a, b) in enumerate(runs):
        by_width.setdefault(b - a, []).append(index)
    cursor = dict.fromkeys(by_width, 0)  # per width, the first run not yet passed
    spans: list[tuple[int, int]] = []
    i = 0
    while i < len(runs):
        width = runs[i][1] - runs[i][0]
        same, c = by_width[width], cursor[width]
        while c < len(same) and same[c] <= i:
            c += 1
        cursor[width] = c
        if c < len(same):
            spans.append((runs[i][0], runs[same[c]][1]))
            i = same[c] + 1
        else:
            i += 1  # no partner: a literal backtick run
    return spans


def _link_targets(line: str) -> list[tuple[int, int]]:
    """The ``(…)`` of each ``](…)`` (§2.4), as a scan for ``\\]\\([^)\\n]*\\)`` finds them.

    Found with ``str.find``: the regex backtracks to the end of the line for every ``](`` that
    has no ``)`` after it, which is quadratic on hostile input.
    """
    spans: list[tuple[int, int]] = []
    k = line.find("](")
    while k >= 0:
        close = line.find(")", k + 2)
        if close < 0:
            break  # no `)` after this `](`, so none after any later one either
        spans.append((k + 1, close + 1))
        k = line.find("](", close + 1)
    return spans


def _urls(line: str) -> list[tuple[int, int]]:
    """The matches of the URL rule (§2.5), leftmost and greedy, as a regex scan would find them.

    Every URL character is a scheme character or one of ``://``, so a URL that starts at some
    position runs to the end of its run of URL characters. The leftmost start is therefore all
    that matters, and it is found from the ``://`` and ``www.`` in the line instead of by trying
    the pattern at every letter of the prose.
    """
    n = len(line)
    starts: list[int] = []
    # Single characters are found much faster than `://` in a non-ASCII string, and prose has few.
    k = line.find(":")
    while k >= 0:
        if line.startswith("//", k + 1) and k + 3 < n and line[k + 3] in _URL_CHARS:
            j = k
            while j > 0 and line[j - 1] in _SCHEME_CHARS:
                j -= 1
            while j < k and line[j] not in _ASCII_LETTERS:
                j += 1
            if j < k:
                starts.append(j)
        k = line.find(":", k + 1)
    k = line.find(".", 3)
    while k >= 0:  # `www.`, found from its dot
        if line[k - 3 : k] in _WWW and k + 1 < n and line[k + 1] in _URL_CHARS:
            starts.append(k - 3)
        k = line.find(".", k + 1)
    if not starts:
        return []
    spans: list[tuple[int, int]] = []
    for j in sorted(starts):
        if not spans or j >= spans[-1][1]:
            run = _URL_RUN_RE.match(line, j)
            assert run is not None  # line[j] is a letter
            spans.append((j, run.end()))
    return spans


def _emails(line: str) -> list[tuple[int, int]]:
    """The matches of the email rule (§2.6), as a left-to-right regex scan would find them.

    The local part cannot contain ``@``, so each email is decided at its ``@``: the local part is
    the run of local characters before it (not reaching back into the previous email), the
    domain is matched right after it.
    """
    spans: list[tuple[int, int]] = []
    prev_end = 0
    k = line.find("@")
    while k >= 0:
        j = k
        while j > prev_end and line[j - 1] in _EMAIL_LOCAL_CHARS:
            j -= 1
        if j < k:
            domain = _EMAIL_DOMAIN_RE.match(line, k + 1)
            if domain is not None:
                spans.append((j, domain.end()))
                prev_end = domain.end()
        k = line.find("@", k + 1)
    return spans


def _merge(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for a, b in sorted(spans):
        if merged and a <= merged[-1][1]:
            if b > merged[-1][1]:
                merged[-1] = (merged[-1][0], b)
        else:
            merged.append((a, b))
    return merged


class _Line:
    """The line under the at-sign being resolved, with its masked regions (§2).

    At-signs are visited in increasing order, so the line only moves forward: every lookup is
    linear in the text overall, even for a hostile line of ten thousand at-signs.
    """

    __slots__ = ("_closers", "_fence_starts", "_fences", "_text", "end", "regions", "starts")

    def __init__(self, text: str) -> None:
        self._text = text
        # `str.find` is far cheaper than scanning lines, and most messages have no fence at all.
        has_fence = ("`" in text and "```" in text) or ("~" in text and "~~~" in text)
        self._fences = _fence_blocks(text) if has_fence else []
        self._fence_starts = [a for a, _ in self._fences]
        self.end = -1
        self.regions: list[tuple[int, int]] = []
        self.starts: list[int] = []
        self._closers: list[int] | None = None

    def move_to(self, pos: int) -> None:
        """Make the line holding ``pos`` current; ``pos`` never decreases between calls."""
        if pos < self.end:
            return
        text = self._text
        start = text.rfind("\n", max(self.end, 0), pos) + 1
        nl = text.find("\n", pos)
        self.end = end = len(text) if nl < 0 else nl
        line = text[start:end]
        i = bisect.bisect_right(self._fence_starts, pos) - 1
        if i >= 0 and pos < self._fences[i][1]:
            self.regions = [self._fences[i]]
        elif ">" in line and _QUOTE_RE.match(line):
            self.regions = [(start, end)]
        else:
            self.regions = _line_masks(line, start)
        self.starts = [a for a, _ in self.regions]
        self._closers = None

    def closer(self, lo: int, hi: int) -> int:
        """The first ``」`` of this line in ``[lo, hi)``, or -1."""
        if self._closers is None:
            text, found = self._text, []
            k = text.find("」", lo, self.end)
            while k >= 0:
                found.append(k)
                k = text.find("」", k + 1, self.end)
            self._closers = found
        i = bisect.bisect_left(self._closers, lo)
        return self._closers[i] if i < len(self._closers) and self._closers[i] < hi else -1


# --------------------------------------------------------------------------------- matching (§5)


def _at_signs(text: str) -> list[int]:
    """Positions of ``@`` and ``＠`` in order; ``str.find`` is several times faster than ``re``."""
    found: list[int] = []
    for sign in ("@", "＠"):
        k = text.find(sign)
        while k >= 0:
            found.append(k)
            k = text.find(sign, k + 1)
    found.sort()
    return found


def _is_boundary(text: str, q: int) -> bool:
    if q >= len(text):
        return True
    c = text[q]
    if c in _BOUNDARY:
        return True
    return c in _BOUNDARY_UNLESS_WORD and (q + 1 >= len(text) or text[q + 1] not in _ASCII_WORD)


_Match = tuple[int, _Target]  # (end of the name, what it resolves to)


def _match_plain(
    text: str, s: int, limit: int, roster: Roster
) -> tuple[_Match | None, _Match | None]:
    """The longest name at ``s`` followed by a boundary, and the longest one that is not."""
    unbounded: _Match | None = None
    plain = roster._plain
    bound = min(limit, s + _NFC_EXPANSION * roster._max_len)
    window = text[s:bound]
    if unicodedata.is_normalized("NFC", window):
        # Fast path: in NFC text a name of length n can only end at s + n. Folding keeps lengths.
        lengths = roster._lengths.get(_fold(window[:1]), ())
        folded = _fold(window[: lengths[0]]) if lengths else ""
        for n in lengths:
            target = plain.get(folded[:n]) if n <= len(folded) else None
            if target is not None:
                if _is_boundary(text, s + n):
                    return (s + n, target), unbounded
                if unbounded is None:
                    unbounded = (s + n, target)
        return None, unbounded
    # Slow path: try every end. A plain name has no whitespace and NFC keeps whitespace, so the
    # first whitespace bounds the ends to try (normalising every prefix is quadratic).
    space = _WS_RE.search(text, s, bound)
    for q in range(space.start() if space else bound, s, -1):
        target = plain.get(_key(text[s:q]))
        if target is not None:
            if _is_boundary(text, q):
                return (q, target), unbounded
            if unbounded is None:
                unbounded = (q, target)
    return None, unbounded


def _word_end(text: str, s: int, limit: int, longest: int) -> int:
    """End of the word after an at-sign (for the unknown-name check), or -1 if it is too long.
    The word stops at a later at-sign: it never swallows the mention that follows (SPEC §5)."""
    q = s
    while q < limit and not _is_boundary(text, q) and (q == s or text[q] not in "@＠"):
        q += 1
        if q - s > longest:
            return -1
    return q


# -------------------------------------------------------------------------------- resolution (§6)


def _hint(
    code: str, name: str, roster: Roster, ids: Sequence[str], bracket: bool, side: str
) -> str:
    """The text of a diagnostic for people (SPEC §7)."""
    written = f"@「{name}」" if bracket else f"@{name}"
    refs = "、".join(_ref(roster, i) for i in ids)
    if code == "needs_boundary":
        if side == "before":
            return f"请在 @ 前加空格或标点（例如 … {written}）"
        if side == "both":
            return f"请在 @ 前和名字后加空格（例如 … {written} …）"
        return f"请在名字后加空格或标点（例如 {written}）"
    if code == "ambiguous":
        return f"有 {len(ids)} 位成员都叫 {name}，请改用 {refs}"
    if code == "unknown":
        return f"没有名为 {name} 的成员" + (f"，是不是想找 {refs}？" if ids else "")
    if code == "departed":
        return f"{name} 已离开项目，不会收到这条消息"
    if code == "self":
        return "不能提及自己，已忽略"
    return f"AI 成员不能用 {written} 通知所有人，请直接提及需要的成员"


def _ref(roster: Roster, member_id: str) -> str:
    member = roster.member(member_id)
    if member is None:
        return member_id
    if member.handle and not any(c in _WS_SET for c in member.handle):
        return f"@{member.handle}"
    return f"@「{member.display_name}」"


class _Resolver:
    """Accumulates one message's mentions and diagnostics."""

    __slots__ = ("diagnostics", "everyone", "humans", "mentions", "roster", "sender", "text")

    def __init__(self, text: str, roster: Roster, sender: str) -> None:
        self.text = text
        self.roster = roster
        self.sender = sender
        self.mentions: list[Mention] = []
        self.diagnostics: list[Diagnostic] = []
        self.everyone = False
        self.humans = False

    def diagnose(
        self,
        code: str,
        name: str,
        span: tuple[int, int],
        ids: Sequence[str] = (),
        *,
        bracket: bool = False,
        side: str = "after",
    ) -> None:
        hint = _hint(code, name, self.roster, ids, bracket, side)
        self.diagnostics.append(Diagnostic(code, name, span[0], span[1], hint, tuple(ids)))

    def scan(self, at_signs: list[int]) -> tuple[tuple[int, int], ...]:
        """Resolve the at-signs at ``at_signs`` (in order); returns the masked regions that hid one."""
        text = self.text
        line = _Line(text)
        masked: set[tuple[int, int]] = set()
        for p in at_signs:
            before = text[p - 1] if p else " "
            starts = before in _BEFORE_AT
            # An at-sign after an ASCII letter, digit, `/`, `.`… or after another at-sign is
            # silent whatever surrounds it (emails, URLs; `＠@lin` is read from its first
            # at-sign): skip the masking work. After other non-ASCII (`请@前端 看`) it is read,
            # to say why it is not a mention.
            if not starts and (before.isascii() or before == "＠"):
                continue
            line.move_to(p)
            i = bisect.bisect_right(line.starts, p)
            if i and p < line.regions[i - 1][1]:
                masked.add(line.regions[i - 1])
                continue
            # Names stop at the end of the line or where the next masked region starts.
            limit = line.starts[i] if i < len(line.starts) else line.end
            self.at_sign(p, limit, line, starts)
        return tuple(sorted(masked))

    def at_sign(self, p: int, limit: int, line: _Line, starts: bool) -> None:
        """One unmasked at-sign; ``starts`` says whether it may start a mention (§3, §5)."""
        text, roster = self.text, self.roster
        s = p + 1
        if s < limit and text[s] == "「":
            close = line.closer(s + 1, limit)
            if close == s + 1:
                return  # `@「」` names nobody and is not worth a diagnostic
            if close > 0:
                self.bracket(p, close, starts)
                return
        found, unbounded = _match_plain(text, s, limit, roster)
        if found is not None:
            q, target = found
            if starts:
                self.apply(target, text[s:q], (p, q), target.via)
            else:
                self.diagnose("needs_boundary", text[s:q], (p, q), side="before")
            return
        if unbounded is not None:
            q = unbounded[0]
            name = text[s:q]  # q < len(text): the end of the text is a boundary
            if not (name[-1].isascii() and text[q].isascii()):
                self.diagnose("needs_boundary", name, (p, q), side="after" if starts else "both")
                return
        if starts:
            # Longer words cannot be near a name, even once NFC has shortened them.
            longest = max(_NFC_EXPANSION * (roster._max_len + 1), UNKNOWN_WORD_MAX)
            end = _word_end(text, s, limit, longest)
            word = text[s:end]
            if end > s and _key(word) not in roster._plain:
                near = self.near(word) if end - s >= 2 else ()
                foreign = end - s <= UNKNOWN_WORD_MAX and _has_foreign_letter(word)
                if near or foreign or _key(word) in roster._spaced_heads:
                    self.diagnose("unknown", word, (p, end), self.candidates(word, near))

    def bracket(self, p: int, close: int, starts: bool) -> None:
        """The bracket form ``@「name」``, whose closing bracket is at ``close``."""
        name = self.text[p + 2 : close]
        target = self.roster._bracket.get(_key(name))
        span = (p, close + 1)
        if not starts:
            if target is not None:
                self.diagnose("needs_boundary", name, span, bracket=True, side="before")
        elif target is not None:
            self.apply(target, name, span, "bracket")
        else:
            self.diagnose("unknown", name, span, self.candidates(name), bracket=True)

    def near(self, word: str) -> tuple[str, ...]:
        """Live members with a name near ``word``: one deletion on each side at most (§5)."""
        key = _key(word)
        if len(key) > self.roster._max_len + 1:
            return ()  # too long to be one deletion away from any name
        near = self.roster._near
        ids: set[str] = set()
        for variant in _deletions(key):
            ids.update(near.get(variant, ()))
        return tuple(sorted(ids))

    def candidates(self, word: str, near: Sequence[str] | None = None) -> tuple[str, ...]:
        """Who an unknown ``word`` may have meant (§5): live members with a name starting with it
        (`@前端` suggests 「前端 小林」), then those with a name near it; each group sorted."""
        first = sorted(self.roster._prefixes.get(_key(word), ()))
        then = sorted(set(self.near(word) if near is None else near).difference(first))
        return tuple(first + then)

    def apply(self, target: _Target, name: str, span: tuple[int, int], via: str) -> None:
        """What one matched name does (§6)."""
        bracket = via == "bracket"
        if target.action == "all":
            author = self.roster.member(self.sender)
            if author is None or author.kind != "human":
                self.diagnose("all_not_allowed", name, span, bracket=bracket)
            else:
                self.everyone = True
                self.add_group(span, "all")
        elif target.action == "humans":
            self.humans = True
            self.add_group(span, "humans")
        elif target.action != "member":
            self.diagnose(target.action, name, span, target.ids, bracket=bracket)
        elif target.ids[0] == self.sender:
            self.diagnose("self", name, span, bracket=bracket)
        else:
            self.mentions.append(Mention(target.ids[0], span[0], span[1], via))

    def add_group(self, span: tuple[int, int], via: Literal["all", "humans"]) -> None:
        ids = self.roster._everyone if via == "all" else self.roster._humans
        start, end, sender = span[0], span[1], self.sender
        self.mentions.extend(Mention(i, start, end, via) for i in ids if i != sender)

    def chips(self, chips: Sequence[str]) -> None:
        """Chips after the text, in order, each id once (§6)."""
        named = {m.member_id for m in self.mentions}
        seen: set[str] = set()
        for chip in chips:
            if chip in seen:
                continue
            seen.add(chip)
            member = self.roster.member(chip)
            if chip == self.sender:
                self.diagnose("self", chip, (-1, -1))
            elif member is None and chip not in self.roster._tombstoned:
                self.diagnose("unknown", chip, (-1, -1))
            elif member is None or member.status == "left":
                self.diagnose("departed", chip, (-1, -1), (chip,))
            elif chip not in named:
                named.add(chip)
                self.mentions.append(Mention(chip, -1, -1, "chip"))


_NOBODY = Resolution((), (), (), (), everyone=False, humans_only_group=False)


def resolve(text: str, roster: Roster, sender_id: str, chips: Sequence[str] = ()) -> Resolution:
    """Decide who ``text`` (plus composer ``chips``) reaches, by the rules of SPEC.md.

    Never raises for any ``str`` input. Spans are code-point indices into ``text``.
    """
    at_signs = _at_signs(text)
    if not at_signs and not chips:
        return _NOBODY  # most messages name nobody: nothing to mask, nothing to build
    resolver = _Resolver(text, roster, sender_id)
    masked = resolver.scan(at_signs) if at_signs else ()
    resolver.chips(chips)
    mentions = tuple(resolver.mentions)
    return Resolution(
        mentioned=tuple(sorted({m.member_id for m in mentions})),
        mentions=mentions,
        diagnostics=tuple(resolver.diagnostics),
        masked=masked,
        everyone=resolver.everyone,
        humans_only_group=resolver.humans,
    )


# ------------------------------------------------------------------------------------------ CLI


def check_vectors(data: Mapping[str, Any]) -> tuple[int, list[str]]:
    """Run every case of a vectors document; returns (passed, failure descriptions)."""
    named = {key: Roster.from_json(r) for key, r in data.get("rosters", {}).items()}
    passed = 0
    failures: list[str] = []
    for case in data["cases"]:
        roster_ref = case["roster"]
        roster = named[roster_ref] if isinstance(roster_ref, str) else Roster.from_json(roster_ref)
        result = resolve(case["text"], roster, case["sender"], case.get("chips", ()))
        expected = case["expect"]["diagnostics"]
        wants = [*expected, *([{}] * len(result.diagnostics))]
        got = {
            "mentioned": list(result.mentioned),
            "diagnostics": [
                _checked(d.code, d.name, d.candidates, wants[i])
                for i, d in enumerate(result.diagnostics)
            ],
        }
        want = {
            "mentioned": list(case["expect"]["mentioned"]),
            "diagnostics": [
                _checked(d["code"], d["name"], d.get("candidates"), d) for d in expected
            ],
        }
        if got == want:
            passed += 1
        else:
            failures.append(
                f"FAIL {case['name']}: expected {json.dumps(want, ensure_ascii=False)}, "
                f"got {json.dumps(got, ensure_ascii=False)}"
            )
    return passed, failures


def _checked(
    code: str, name: str, candidates: Sequence[str] | None, want: Mapping[str, Any]
) -> dict[str, Any]:
    """A diagnostic as a vector compares it: code and name, and the candidates in order when
    the expected diagnostic lists them (SPEC §8)."""
    out: dict[str, Any] = {"code": code, "name": name}
    if "candidates" in want and candidates is not None:
        out["candidates"] = list(candidates)
    return out
