"""English plurals (issue 30): every count string of the page's English table has both forms —
its key, the general form ("{n} replies"), and ``<key>.one`` ("{n} reply") — so no reader sees
"1 results". web/i18n.js picks the form with ``Intl.PluralRules``: the count is the first
placeholder that a word follows and whose value is a number; a second count in one string is
worded so that nothing agrees with it ("… added since: {n}"). Chinese has one form.

A count is a placeholder in :data:`COUNTS` (the numbers the page and the server's notices fill
in); the word after it reads the same for one and for many only when it is in
:data:`INVARIANT` (units, "of", participles)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TABLES = {"zh": ROOT / "web" / "strings-zh.js", "en": ROOT / "web" / "strings-en.js"}

COUNTS = frozenset(
    {"n", "m", "count", "days", "idle_days", "left", "limit", "secs", "s", "cap", "size"}
    | {"tokens_used", "agent_turns", "max_steps", "calls", "steps", "projects", "cited", "junk"}
    | {"total", "h", "e", "f", "ahead", "behind", "percent", "progress"}
)
# Words after a count that do not change with it.
INVARIANT = frozenset(
    {"s", "min", "h", "d", "MiB", "KiB", "of", "archived", "chosen", "cited", "mentioning"}
    | {"ahead", "behind"}
)
_FOLLOWED = re.compile(r"\{(\w+)\} (\w+)")


def table(lang: str) -> dict[str, str]:
    text = TABLES[lang].read_text(encoding="utf-8")
    return dict(re.findall(r'^\s*"([\w.]+)": "((?:[^"\\]|\\.)*)",?$', text, re.M))


def counts_followed_by_words(template: str) -> list[tuple[str, str]]:
    return [(m[1], m[2]) for m in _FOLLOWED.finditer(template) if m[1] in COUNTS]


def test_the_reader_sees_every_string() -> None:
    # The reader below must not miss lines (a broken regex would make the other tests vacuous).
    en = TABLES["en"].read_text(encoding="utf-8")
    assert len(table("en")) == len(re.findall(r'^\s*"[\w.]+":', en, re.M)) > 1000


def test_every_english_count_string_has_both_forms() -> None:
    en = table("en")
    missing = []
    for key, template in en.items():
        if key.endswith(".one"):
            continue
        counted = counts_followed_by_words(template)
        if counted and counted[0][1] not in INVARIANT and f"{key}.one" not in en:
            missing.append(f"{key}: {template}")
    assert missing == [], "\n".join(missing)


def test_a_second_count_is_worded_so_nothing_agrees_with_it() -> None:
    # i18n.js picks the form by the first count; a later one followed by a noun would be wrong
    # for one of its values ("2 files merged; 1 unchosen changes …").
    wrong = [
        f"{key}: {template}"
        for key, template in table("en").items()
        if any(word not in INVARIANT for _, word in counts_followed_by_words(template)[1:])
    ]
    assert wrong == [], "\n".join(wrong)


def test_each_singular_form_matches_its_general_form() -> None:
    en, zh = table("en"), table("zh")
    ones = {key: text for key, text in en.items() if key.endswith(".one")}
    assert len(ones) >= 40
    for key, one in ones.items():
        general_key = key.removesuffix(".one")
        general = en.get(general_key)
        assert general is not None, f"{key} has no general form {general_key}"
        assert general_key in zh, f"{general_key} is not in the Chinese table"
        assert one != general, key
        placeholders = sorted(re.findall(r"\{(\w+)\}", general))
        assert sorted(re.findall(r"\{(\w+)\}", one)) == placeholders, key
    # Chinese has one form.
    assert [key for key in zh if key.endswith(".one")] == []


def test_the_rule_is_the_pages() -> None:
    # What this test assumes of web/i18n.js: plural categories from Intl.PluralRules, the
    # singular under "<key>.<category>", the count found as "{name} <word>".
    source = (ROOT / "web" / "i18n.js").read_text(encoding="utf-8")
    assert "new Intl.PluralRules(lang)" in source
    assert "dict[`${key}.${category}`]" in source
    assert r"/\{(\w+)\}(?= \p{L})/gu" in source
