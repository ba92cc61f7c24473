"""web/mentions.js against shared/mentions, and against the Python resolver on generated input."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from room.rules.mentions import Roster, resolve

ROOT = Path(__file__).resolve().parents[1]
VECTORS_PATH = ROOT / "shared" / "mentions" / "vectors.json"
CHECKER = ROOT / "web" / "mentions-check.mjs"
VECTORS: dict[str, Any] = json.loads(VECTORS_PATH.read_text(encoding="utf-8"))
CASES: list[dict[str, Any]] = VECTORS["cases"]


def member(id: str, kind: str, handle: str, display: str, *aliases: str) -> dict[str, Any]:
    return {"id": id, "kind": kind, "handle": handle, "display_name": display,
            "aliases": list(aliases), "status": "active"}  # fmt: skip


# Astral names and ids: JavaScript indexes UTF-16 code units, Python code points.
ROSTER_DOCS = {
    **VECTORS["rosters"],
    "astral": {
        "members": [
            member("m_ann", "human", "ann", "𝒜nn", "🤖🤖"),
            member("😀id", "agent", "emo", "表情😀"),
            member("m_zed", "agent", "zed", "Zed 𝔷", "가나"),
            member("～x", "human", "tilde", "Å"),
            member("m_kelvin", "human", "kelvin", "Émile"),
        ],
        "tombstones": [{"name": "𝒜lice", "member_id": "m_alice"}],
    },
}
ROSTERS = {key: Roster.from_json(doc) for key, doc in ROSTER_DOCS.items()}
MEMBER_IDS = sorted({m["id"] for doc in ROSTER_DOCS.values() for m in doc["members"]})

PIECES = [
    # mentions and names from every roster
    *(" @amy ", "@lin", "@前端", "，@前端 ", "@「Amy Chen」", " @all ", "@所有人 ", "@humans"),
    *("@用户", "@助手 ", "@alice ", "@老王 ", "@fe ", "＠前端 ", "@Jose\u0301 ", "@li.ming "),
    *("@lni ", "@前端你先看看", "请@前端 ", "@ops ", "@𝒜nn ", "@🤖🤖", "@表情😀 ", "@「Zed 𝔷」"),
    *("@가나 ", "@\u1100\u1161\u1102\u1161 ", "@A\u030a ", "@Å", "@𝒜lice", "@emo", "@zed"),
    *("@", "＠", "「", "」", "amy", "前端", "ann", "all", "@「𝒜nn」", "@amyamyamyamyamyamyamyamy"),
    # non-ASCII case is not folded; a one-character astral word is too short to be "near"
    *("@å ", "@\u212aelvin ", "@émile ", "@ÉMILE ", "@🤖 ", "@😀 ", "😀https://x.com/@amy"),
    # markup
    *("`", "`x`", "``", "```\n", "\n```\n", "~~~\n", "\n> ", "[x](", "](https://a.b/@amy)"),
    *("https://x.com/@amy", " a@b.com", " www.x.io/(@amy) ", "[@amy](u)", "\n", " ", "\t"),
    *("://", "www.", "WwW.", "](", ")", "a.b", "x@y.z", "h1+", "-", "%", "a@", "@b.c"),
    # characters the two languages treat differently unless told exactly
    *("\u2028", "\u2029", "\x85", "\x1c", "\x1f", "\ufeff", "\u200b", "\u00a0", "\u3000"),
    *("\u2005", "\r", "\r\n", "İ", "\u212a", "ß", "ﬁ", "Σ", "e\u0301", "😀", "𝒜", "\ud83d"),
    *("，", "。", "：", "！", ".", ",", ":", "?", "/", "_", "-", "'", "’", "…", "～", "·"),
]


def utf16_offsets(text: str) -> list[int]:
    """offsets[i] = the UTF-16 index of code point i (offsets[len] = UTF-16 length)."""
    offsets = [0]
    for ch in text:
        offsets.append(offsets[-1] + (2 if ord(ch) > 0xFFFF else 1))
    return offsets


def python_view(inp: dict[str, Any]) -> dict[str, Any]:
    text = inp["text"]
    result = resolve(text, ROSTERS[inp["roster"]], inp["sender"], inp["chips"])
    u16 = utf16_offsets(text)

    def at(i: int) -> int:
        return i if i < 0 else u16[i]

    return {
        "mentioned": list(result.mentioned),
        "mentions": [[m.member_id, at(m.start), at(m.end), m.via] for m in result.mentions],
        "diagnostics": [
            [d.code, d.name, at(d.start), at(d.end), d.hint, list(d.candidates)]
            for d in result.diagnostics
        ],
        "masked": [[at(a), at(b)] for a, b in result.masked],
        "everyone": result.everyone,
        "humans": result.humans_only_group,
    }


def js_view(got: dict[str, Any]) -> dict[str, Any]:
    return {
        "mentioned": got["mentioned"],
        "mentions": [[m["memberId"], m["start"], m["end"], m["via"]] for m in got["mentions"]],
        "diagnostics": [
            [d["code"], d["name"], d["start"], d["end"], d["hint"], d["candidates"]]
            for d in got["diagnostics"]
        ],
        "masked": got["masked"],
        "everyone": got["everyone"],
        "humans": got["humansOnlyGroup"],
    }


def run_node(*args: str) -> subprocess.CompletedProcess[str]:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    return subprocess.run(
        [node, str(CHECKER), *args], cwd=ROOT, capture_output=True, text=True, timeout=60
    )


def assert_agreement(inputs: list[dict[str, Any]], workdir: Path) -> None:
    """Resolve every input in one node process and compare it field by field with Python."""
    path = workdir / "inputs.json"
    path.write_text(json.dumps({"rosters": ROSTER_DOCS, "inputs": inputs}), encoding="utf-8")
    proc = run_node("--resolve", str(path))
    assert proc.returncode == 0, proc.stderr
    results = json.loads(proc.stdout)
    assert len(results) == len(inputs)
    for inp, got in zip(inputs, results, strict=True):
        assert js_view(got) == python_view(inp), inp


# ------------------------------------------------------------------------------ conformance


def test_node_passes_every_vector() -> None:
    proc = run_node(str(VECTORS_PATH))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == f"{len(CASES)} passed, 0 failed"


def test_node_fails_on_a_wrong_expectation(tmp_path: Path) -> None:
    doc = json.loads(VECTORS_PATH.read_text(encoding="utf-8"))
    doc["cases"][-1]["expect"]["diagnostics"] = [{"code": "self", "name": "nobody"}]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")
    proc = run_node(str(bad))
    assert proc.returncode == 1
    assert proc.stdout.strip().splitlines()[-1] == f"{len(CASES) - 1} passed, 1 failed"
    assert f"FAIL {CASES[-1]['name']}" in proc.stdout


def test_node_refuses_empty_and_unreadable_files(tmp_path: Path) -> None:
    empty = tmp_path / "empty.json"
    empty.write_text('{"rosters": {}, "cases": []}', encoding="utf-8")
    assert run_node(str(empty)).returncode == 1
    assert run_node(str(tmp_path / "missing.json")).returncode == 2
    assert run_node().returncode == 2


# -------------------------------------------------------------------------------- agreement


def random_input(rng: random.Random) -> dict[str, Any]:
    return {
        "roster": rng.choice(sorted(ROSTERS)),
        "sender": rng.choice([*MEMBER_IDS, "x_nobody"]),
        "text": "".join(rng.choice(PIECES) for _ in range(rng.randint(0, 25))),
        "chips": rng.sample([*MEMBER_IDS, "ghost"], rng.choice((0, 0, 1, 2))),
    }


def test_python_and_js_agree_on_a_seeded_corpus(tmp_path: Path) -> None:
    rng = random.Random(20240601)
    inputs = [random_input(rng) for _ in range(300)]
    assert sum(bool(python_view(i)["mentions"]) for i in inputs) > 100  # the corpus does mention
    assert_agreement(inputs, tmp_path)


ASSIGNED = st.characters(exclude_categories=("Cs", "Cn"))

inputs = st.fixed_dictionaries(
    {
        "roster": st.sampled_from(sorted(ROSTERS)),
        "sender": st.sampled_from([*MEMBER_IDS, "x_nobody"]),
        # Characters assigned in Python's Unicode (14): newer ones may be letters to the
        # browser's ICU and unassigned to Python, as SPEC.md's last notes say.
        "text": st.lists(
            st.one_of(st.sampled_from(PIECES), st.text(ASSIGNED, max_size=3)), max_size=25
        ).map("".join),
        "chips": st.lists(st.sampled_from([*MEMBER_IDS, "ghost"]), max_size=2),
    }
)


@settings(max_examples=5, deadline=None)  # examples kept as in test_mentions
@given(batch=st.lists(inputs, min_size=60, max_size=60))
def test_python_and_js_agree_on_generated_input(
    batch: list[dict[str, Any]], tmp_path_factory: pytest.TempPathFactory
) -> None:
    assert_agreement(batch, tmp_path_factory.mktemp("agreement"))


def test_node_takes_linear_time_on_hostile_input(tmp_path: Path) -> None:
    """Well under a second when linear; a backtracking regex would take minutes on these."""
    hostile = [
        "@a " * 70_000,
        "a@b.co " * 30_000,
        "@amy " + "](" * 100_000,
        "@amy " + "a" * 200_000 + " x@y",
        "@「" * 100_000,
        ("@e\u0301" + "e\u0301" * 30 + " ") * 3_000,
    ]
    inputs = [{"roster": "team", "sender": "h_lin", "text": t, "chips": []} for t in hostile]
    path = tmp_path / "hostile.json"
    path.write_text(json.dumps({"rosters": ROSTER_DOCS, "inputs": inputs}), encoding="utf-8")
    started = time.perf_counter()
    proc = run_node("--resolve", str(path))
    assert proc.returncode == 0, proc.stderr
    assert time.perf_counter() - started < 10
