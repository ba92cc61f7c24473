"""The Python mention resolver against shared/mentions: every vector, the CLI, and properties."""

from __future__ import annotations

import itertools
import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from room import mentions_check
from room.rules import mentions
from room.rules.mentions import Resolution, Roster, RosterMember, Tombstone, resolve

ROOT = Path(__file__).resolve().parents[1]
VECTORS_PATH = ROOT / "shared" / "mentions" / "vectors.json"
SPEC_PATH = ROOT / "shared" / "mentions" / "SPEC.md"
VECTORS: dict[str, Any] = json.loads(VECTORS_PATH.read_text(encoding="utf-8"))
CASES: list[dict[str, Any]] = VECTORS["cases"]
ROSTERS = {key: Roster.from_json(r) for key, r in VECTORS["rosters"].items()}
CODES = {"needs_boundary", "ambiguous", "unknown", "departed", "self", "all_not_allowed"}

# Examples are kept in Hypothesis's database (.hypothesis/, not committed), so a failure found
# once is tried first on the next local run; failures found before are pinned with @example,
# so every run — CI's clean clone included — replays them.
PROPERTY = settings(max_examples=200, deadline=None)


def roster_of(case: dict[str, Any]) -> Roster:
    ref = case["roster"]
    return ROSTERS[ref] if isinstance(ref, str) else Roster.from_json(ref)


def summary(result: Resolution) -> tuple[list[str], list[tuple[str, str]]]:
    return list(result.mentioned), [(d.code, d.name) for d in result.diagnostics]


# ------------------------------------------------------------------------------------- vectors


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_vector(case: dict[str, Any]) -> None:
    result = resolve(case["text"], roster_of(case), case["sender"], case["chips"])
    expect = case["expect"]
    assert summary(result) == (
        expect["mentioned"],
        [(d["code"], d["name"]) for d in expect["diagnostics"]],
    )
    for got, want in zip(result.diagnostics, expect["diagnostics"], strict=True):
        if "candidates" in want:
            assert list(got.candidates) == want["candidates"]


def test_vectors_are_well_formed() -> None:
    """A malformed case could be skipped silently by some runner: refuse it here."""
    assert len(CASES) >= 150
    assert len({c["name"] for c in CASES}) == len(CASES)
    for case in CASES:
        assert set(case) == {"name", "roster", "sender", "text", "chips", "expect"}, case["name"]
        assert isinstance(case["text"], str) and isinstance(case["chips"], list)
        mentioned = case["expect"]["mentioned"]
        assert mentioned == sorted(set(mentioned)), case["name"]
        for diag in case["expect"]["diagnostics"]:
            assert {"code", "name"} <= set(diag) <= {"code", "name", "candidates"}, case["name"]
            assert diag["code"] in CODES, case["name"]


def test_vectors_cover_every_rule() -> None:
    texts = [c["text"] for c in CASES]
    codes = {d["code"] for c in CASES for d in c["expect"]["diagnostics"]}
    assert codes == CODES
    features = {
        "full-width at": "＠",
        "zero-width": "\u200b",
        "combining mark (NFD)": "\u0301",
        "fence": "```",
        "tilde fence": "~~~",
        "inline code": "`",
        "quote": "> ",
        "link target": "](",
        "URL": "://",
        "bracket form": "@「",
        "scope package": "@scope/",
        "ideographic space": "\u3000",
        "emoji": "👍",
        "CJK comma": "，",
    }
    for feature, needle in features.items():
        assert any(needle in t for t in texts), feature
    assert any(re.search(r"[\w.+-]@[\w-]+\.\w", t) for t in texts), "email"
    reached = {m for c in CASES for m in c["expect"]["mentioned"]}
    paused = {m["id"] for r in VECTORS["rosters"].values() for m in r["members"]}
    paused &= {
        m["id"]
        for r in VECTORS["rosters"].values()
        for m in r["members"]
        if m["status"] == "paused"
    }
    assert paused & reached, "a paused member is mentioned"


def test_spec_documents_every_code() -> None:
    spec = SPEC_PATH.read_text(encoding="utf-8")
    for code in CODES:
        assert f"`{code}`" in spec


# ---------------------------------------------------------------------------------------- CLI


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "room.mentions_check", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_cli_passes_every_vector() -> None:
    proc = run_cli("check", str(VECTORS_PATH))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == f"{len(CASES)} passed, 0 failed"


def test_cli_fails_on_a_wrong_expectation(tmp_path: Path) -> None:
    doc = json.loads(VECTORS_PATH.read_text(encoding="utf-8"))
    doc["cases"][0]["expect"]["mentioned"] = ["someone-else"]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")
    proc = run_cli("check", str(bad))
    assert proc.returncode == 1
    assert proc.stdout.strip().splitlines()[-1] == f"{len(CASES) - 1} passed, 1 failed"
    assert f"FAIL {CASES[0]['name']}" in proc.stdout


def test_cli_refuses_empty_and_unreadable_files(tmp_path: Path) -> None:
    empty = tmp_path / "empty.json"
    empty.write_text('{"rosters": {}, "cases": []}', encoding="utf-8")
    assert run_cli("check", str(empty)).returncode == 1
    broken = tmp_path / "broken.json"
    broken.write_text("{not json", encoding="utf-8")
    proc = run_cli("check", str(broken))
    assert proc.returncode == 2 and "cannot run" in proc.stderr


def test_main_in_process(capsys: pytest.CaptureFixture[str]) -> None:
    assert mentions_check.main(["check", str(VECTORS_PATH)]) == 0
    assert capsys.readouterr().out.endswith(f"{len(CASES)} passed, 0 failed\n")


# ------------------------------------------------------------------------------ the result API

TEAM = ROSTERS["team"]


def test_spans_via_and_hints() -> None:
    text = "好的，@前端 和 @「Amy Chen」，还有 @前端你先看看"
    result = resolve(text, TEAM, "h_lin")
    assert [(m.member_id, text[m.start : m.end], m.via) for m in result.mentions] == [
        ("a_fe", "@前端", "display_name"),
        ("h_amy", "@「Amy Chen」", "bracket"),
    ]
    (diag,) = result.diagnostics
    assert (diag.code, text[diag.start : diag.end]) == ("needs_boundary", "@前端")
    assert diag.hint == "请在名字后加空格或标点（例如 @前端）"


def test_spans_are_in_the_original_text_when_it_is_not_nfc() -> None:
    text = "hi @Jose\u0301 and @amy"
    result = resolve(text, TEAM, "h_lin")
    assert [text[m.start : m.end] for m in result.mentions] == ["@Jose\u0301", "@amy"]


def test_ambiguous_and_unknown_carry_candidates() -> None:
    result = resolve("@助手 @lni", TEAM, "h_amy")
    ambiguous, unknown = result.diagnostics
    assert ambiguous.candidates == ("a_h1", "a_h2")
    assert ambiguous.hint == "有 2 位成员都叫 助手，请改用 @helper1、@helper2"
    assert unknown.candidates == ("h_lin",)
    assert unknown.hint == "没有名为 lni 的成员，是不是想找 @lin？"
    assert result.mentioned == ()


def test_groups_set_flags_and_count_agents() -> None:
    small = ROSTERS["small"]
    everyone = resolve("@all", small, "h_lin")
    assert everyone.everyone and not everyone.humans_only_group
    assert {m.via for m in everyone.mentions} == {"all"}
    assert everyone.agents_reached(small) == 2
    humans = resolve("@用户", small, "a_fe")
    assert humans.humans_only_group and not humans.everyone
    assert humans.agents_reached(small) == 0
    refused = resolve("@all", small, "a_fe")
    assert not refused.everyone and refused.mentioned == ()
    assert refused.diagnostics[0].code == "all_not_allowed"


def test_chips_come_last_and_once() -> None:
    result = resolve("@amy", TEAM, "h_lin", ["a_fe", "h_amy", "a_fe"])
    assert [(m.member_id, m.via, m.start) for m in result.mentions] == [
        ("h_amy", "handle", 0),
        ("a_fe", "chip", -1),
    ]


def test_masked_lists_the_regions_that_hid_a_would_be_mention() -> None:
    text = (
        "```\n@amy\n```\nmail a@b.io, see `` @bob ``, https://x.com/@c and www.x.io/(@amy)\n> @lin"
    )
    result = resolve(text, TEAM, "h_amy")
    assert [text[a:b] for a, b in result.masked] == [
        "```\n@amy\n```",
        "`` @bob ``",
        "www.x.io/(@amy)",
        "> @lin",
    ]
    assert result.mentioned == ()


def test_roster_construction() -> None:
    amy = RosterMember("h_amy", "human", "amy", "Amy")
    with pytest.raises(ValueError, match="duplicate"):
        Roster.build([amy, amy])
    with pytest.raises(ValueError, match="malformed"):
        Roster.from_json({"members": [{"kind": "human"}]})
    with pytest.raises(ValueError):
        Roster.from_json({"members": [{"id": "x", "kind": "robot"}]})
    roster = Roster.build([amy], [Tombstone("amy", "old")])
    assert roster.member("h_amy") == amy and roster.member("nobody") is None
    assert summary(resolve("@amy", roster, "x")) == (["h_amy"], [])  # a live name beats a tombstone


HOSTILE = {
    "at-signs": "@a " * 70_000,
    "emails": "a@b.co " * 30_000,
    "link openers": "@amy " + "](" * 100_000,
    "backtick widths": " ".join("`" * w for w in range(1, 200)) + " @amy `" * 30_000,
    "brackets": "@「" * 100_000,
    "long bracket": "@「" + "x" * 200_000 + "」",
    "NFD words": ("@e\u0301" + "e\u0301" * 30 + " ") * 3_000,
}


@pytest.mark.parametrize("text", HOSTILE.values(), ids=HOSTILE.keys())
def test_hostile_input_takes_linear_time(text: str) -> None:
    """~0.3 s each when linear; a quadratic slip would take minutes."""
    started = time.perf_counter()
    resolve(text, TEAM, "h_lin")
    assert time.perf_counter() - started < 5


# --------------------------------------------------------------------------------- properties

MEMBER_IDS = sorted({m["id"] for r in VECTORS["rosters"].values() for m in r["members"]})
FRAGMENTS = [
    *("@", "＠", "@@", "「", "」", "@「", " ", "  ", "\n", "\r\n", "\t", "\u3000", "\u2005"),
    *("\u200b", "\u200d", "\ufeff", "\u0301", "e\u0301", "😀", "👍", "·"),
    *("lin", "amy", "AMY", "bob", "fe", "frontend", "frontend-lead", "前端", "前端组长", "助手"),
    *("Amy Chen", "José", "Jose\u0301", "Zoë", "alice", "爱丽丝", "老王", "oldie", "li.ming"),
    *("all", "所有人", "everyone", "humans", "用户", "lni", "dataclass", "scope/pkg", "🤖"),
    *("`", "``", "```", "~~~", "> ", ">", "[", "](", ")", "(", "https://", "www.", "x.com/"),
    *("a@b.com", "mailto:", ".", ",", ":", "!", "?", "/", "_", "-", "'", '"', "*", "~"),
    *("，", "。", "、", "：", "！", "？", "（", "）", "“", "”", "…", "—", "～", "请", "你好"),
]


# Whole mentions and whole markup constructs, so that generated messages really mention people.
MENTION_PIECES = [
    *(" @amy ", "@lin", "@前端", "，@前端 ", "@「Amy Chen」", " @all ", "@所有人 ", " @humans"),
    *("@用户", "@助手 ", "@alice ", "@老王 ", "@old ", "@fe ", "@be", "＠前端 ", "@Jose\u0301 "),
    *("@li.ming ", "@scope/pkg", "@lni ", "@前端你先看看", "请@前端 ", "@qa,", "(@bob)", "@ops "),
]
MARKUP_PIECES = [
    *("`", "`x`", "``", "```\n", "\n```\n", "~~~\n", "\n> ", "> ", "[x](", "](https://a.b/@amy)"),
    *("https://x.com/@amy", " a@b.com", " www.x.io/(@amy) ", "[@amy](u)", "\n"),
]


def messages() -> st.SearchStrategy[str]:
    """Chat-shaped text: mentions, markup, names, punctuation, with arbitrary text mixed in."""
    piece = st.one_of(
        st.sampled_from(MENTION_PIECES),
        st.sampled_from(MARKUP_PIECES),
        st.sampled_from(FRAGMENTS),
        st.text(max_size=3),
    )
    return st.lists(piece, max_size=30).map("".join)


any_text = st.text(st.characters(exclude_categories=()), max_size=300)
rosters = st.sampled_from(sorted(ROSTERS))
senders = st.sampled_from([*MEMBER_IDS, "x_nobody"])
chip_lists = st.lists(st.sampled_from([*MEMBER_IDS, "ghost", "h_gone"]), max_size=3)


def occurrences(result: Resolution) -> set[tuple[int, int]]:
    spans = {(m.start, m.end) for m in result.mentions if m.start >= 0}
    return spans | {(d.start, d.end) for d in result.diagnostics if d.start >= 0}


@PROPERTY
@given(st.one_of(messages(), any_text), rosters, senders, chip_lists)
def test_resolution_is_deterministic(text: str, key: str, sender: str, chips: list[str]) -> None:
    first = resolve(text, ROSTERS[key], sender, chips)
    rebuilt = Roster.from_json(VECTORS["rosters"][key])
    assert resolve(text, rebuilt, sender, chips) == first
    assert resolve(text, ROSTERS[key], sender, chips) == first


@PROPERTY
@given(any_text, rosters, senders)
def test_never_raises_on_any_unicode(text: str, key: str, sender: str) -> None:
    result = resolve(text, ROSTERS[key], sender)
    assert isinstance(result, Resolution)


@PROPERTY
@given(messages(), rosters, senders, chip_lists)
@example("@前端@所有人 ", "edge", "a_be", [])  # an unknown word ran over the next at-sign
@example("＠@lin", "team", "h_amy", [])  # a full-width at-sign before an ASCII one
def test_spans_lie_in_the_text_and_never_overlap(
    text: str, key: str, sender: str, chips: list[str]
) -> None:
    result = resolve(text, ROSTERS[key], sender, chips)
    spans = sorted(occurrences(result))
    for start, end in spans:
        assert 0 <= start < end <= len(text) and text[start] in "@＠"
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert end <= start
    masked = list(result.masked)
    for a, b in masked:
        assert 0 <= a < b <= len(text)
    for (_, b), (a, _) in itertools.pairwise(masked):
        assert b < a
    for m in result.mentions:
        assert (m.start, m.end) != (-1, -1) or m.via == "chip"


@PROPERTY
@given(messages(), rosters, senders, chip_lists)
def test_nothing_masked_is_mentioned(text: str, key: str, sender: str, chips: list[str]) -> None:
    roster = ROSTERS[key]
    result = resolve(text, roster, sender, chips)
    for start, end in occurrences(result):
        assert all(end <= a or b <= start for a, b in result.masked), (start, end)
    assert list(result.mentioned) == sorted(set(result.mentioned))
    assert sender not in result.mentioned
    for member_id in result.mentioned:
        member = roster.member(member_id)
        assert member is not None and member.status != "left"


plain_pieces = st.lists(
    st.sampled_from([f for f in FRAGMENTS if not set(f) & set("`~\n\r)")]), max_size=8
).map("".join)
reachable = st.sampled_from(["amy", "前端", "bob", "fe", "「Amy Chen」", "all", "humans", "Bob"])


@PROPERTY
@given(plain_pieces, reachable, plain_pieces)
def test_fenced_quoted_linked_and_inline_code_wake_nobody(left: str, name: str, right: str) -> None:
    """Independent of the resolver's own `masked`: a mention wrapped in markup wakes nobody."""
    body = f"{left} @{name} {right}"
    team = ROSTERS["team"]
    assert resolve(f"x @{name} y", team, "h_lin").mentioned != ()  # the mention itself works
    for wrapped in (
        f"```\n{body}\n```",
        f"~~~\n{body}",
        f"> {body}",
        f"`` {body} ``",
        f"[x]({body})",
    ):
        assert resolve(wrapped, team, "h_lin").mentioned == (), wrapped


# The fast scanners in room.rules.mentions must find exactly what the spec's regexes find (SPEC §2).
URL_CHARS = r"[A-Za-z0-9\-._~:/?#\[\]@!$&'()*+,;=%]"
SPEC_URL_RE = re.compile(rf"[A-Za-z][A-Za-z0-9+.\-]*://{URL_CHARS}+|[Ww][Ww][Ww]\.{URL_CHARS}+")
SPEC_EMAIL_RE = re.compile(r"[A-Za-z0-9._%+\-]+@[A-Za-z0-9\-]+(?:\.[A-Za-z0-9\-]+)+")
url_lines = st.lists(
    st.sampled_from(
        [
            *(
                "://",
                "www.",
                "WwW.",
                "@",
                ".",
                "a",
                "h",
                "1",
                "+",
                "-",
                "_",
                "%",
                "/",
                ":",
                " ",
                "中",
            ),
            *("a@b.co", "@b.c", "x.y", "http", "(", ")", "，"),
        ]
    ),
    max_size=30,
).map("".join)


@PROPERTY
@given(url_lines)
def test_url_scanner_matches_the_spec_regex(line: str) -> None:
    assert mentions._urls(line) == [m.span() for m in SPEC_URL_RE.finditer(line)]


@PROPERTY
@given(url_lines)
def test_email_scanner_matches_the_spec_regex(line: str) -> None:
    assert mentions._emails(line) == [m.span() for m in SPEC_EMAIL_RE.finditer(line)]


@PROPERTY
@given(st.lists(st.sampled_from(["](", "]", "(", ")", "[", "x", "@"]), max_size=30).map("".join))
def test_link_target_scanner_matches_the_spec_regex(line: str) -> None:
    spans = [(m.start() + 1, m.end()) for m in re.finditer(r"\]\([^)\n]*\)", line)]
    assert mentions._link_targets(line) == spans


def naive_code_spans(line: str) -> list[tuple[int, int]]:
    """SPEC §2.3 read literally: each run looks ahead for the next run of its width."""
    runs = [m.span() for m in re.finditer("`+", line)]
    spans, i = [], 0
    while i < len(runs):
        width = runs[i][1] - runs[i][0]
        close = next((j for j in range(i + 1, len(runs)) if runs[j][1] - runs[j][0] == width), 0)
        if close:
            spans.append((runs[i][0], runs[close][1]))
            i = close + 1
        else:
            i += 1
    return spans


@PROPERTY
@given(st.lists(st.sampled_from(["`", "``", "```", "x", " "]), max_size=30).map("".join))
def test_code_span_scanner_matches_a_literal_reading(line: str) -> None:
    assert mentions._code_spans(line) == naive_code_spans(line)


def naive_fences(text: str) -> list[tuple[int, int]]:
    """SPEC §2.1 read literally: every line in turn."""
    blocks, fence, start, pos = [], "", 0, 0
    for line in text.split("\n"):
        m = re.match(r" {0,3}(`{3,}|~{3,})(.*)", line)
        if not fence and m and not (m[1][0] == "`" and "`" in m[2]):
            fence, start = m[1], pos
        elif (
            fence
            and m
            and m[1][0] == fence[0]
            and len(m[1]) >= len(fence)
            and not m[2].strip(" \t\r")
        ):
            blocks.append((start, pos + len(line)))
            fence = ""
        pos += len(line) + 1
    if fence:
        blocks.append((start, len(text)))
    return blocks


fence_lines = st.sampled_from(
    [
        "```",
        "````",
        "~~~",
        "~~~~",
        "```py",
        "``` x",
        "``` `",
        "   ```",
        "    ```",
        " ``` \t",
        "x",
        "",
    ]
)


@PROPERTY
@given(st.lists(fence_lines, max_size=12).map("\n".join))
def test_fence_scanner_matches_a_line_by_line_reading(text: str) -> None:
    assert mentions._fence_blocks(text) == naive_fences(text)
