"""The server facts the page spells out itself, pinned equal to the server's (issue 25, item 6).

The page (web/, plain ES modules, no build step) asks the server for most of what it offers
(``allowed_ops``, ``event_rules``, the limits' defaults, each error's code), but some facts are
written into its modules: the agent roles, the memory summary's sections, the lifecycle states,
the mention boundary characters, the work limits' keys, the labels of each server enum. Each is
read here from the JavaScript source (literals only: anything else fails the read) and compared
with the server's own constant, so neither side can change alone. Error codes are pinned by
tests/test_error_strings.py; the mention resolver itself by tests/test_mentions_js.py.
"""

from __future__ import annotations

import ast
import re
import typing
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

import room.infra.worktrees._repo as worktree_repo
from room.actions import lifecycle as lifecycle_actions
from room.actions import memory as memory_actions
from room.actions.turns import WORK_LIMITS
from room.agents.presets import PRESETS
from room.api.lifecycle import RoleIn
from room.infra.frames import CLOSE_SIGNED_OUT
from room.rules import mentions, records
from room.rules.entities import AGENT_ROLES
from room.rules.ledger import OPEN_STATES, DeliveryState, Reason
from room.rules.lifecycle import MemberOp, ProjectOp, ProjectState
from room.rules.protocol import MAX_HISTORY_LIMIT
from room.rules.reactions import QUICK_SET
from room.rules.research import BUDGET_KEYS, EVENT_ACTORS, ResearchActor, ResearchState
from room.rules.routing import RouteSource
from room.rules.tasks import NOTE_REQUIRED, TASK_EVENT_ACTORS, TaskActor, TaskEvent, TaskState
from room.services import CHATTER_PER_SEC
from room.store import search as search_store

WEB = Path(__file__).resolve().parents[1] / "web"
LANGS = ("zh", "en")


# -- reading the JavaScript ------------------------------------------------------------------------


class JsReadError(Exception):
    """The constant is missing or is not a plain literal this reader understands."""


_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", "v": "\v", "0": "\0"}
_SPACE = re.compile(r"(?:\s+|//[^\n]*|/\*.*?\*/)+", re.S)
_NUMBER = re.compile(r"-?\d[\d_]*(\.\d+)?")
_NAME = re.compile(r"[A-Za-z_$][\w$]*")


class _Literal:
    """A JavaScript literal at ``pos`` of ``text``: strings, numbers (``86_400_000``), ``true``,
    ``false``, ``null``, arrays, objects (bare or quoted keys) and ``new Set([...])``."""

    def __init__(self, text: str, pos: int) -> None:
        self.text, self.pos = text, pos

    def fail(self, what: str) -> JsReadError:
        line = self.text.count("\n", 0, self.pos) + 1
        return JsReadError(f"{what} at line {line}: {self.text[self.pos : self.pos + 40]!r}")

    def skip(self) -> None:
        found = _SPACE.match(self.text, self.pos)
        if found:
            self.pos = found.end()

    def eat(self, token: str) -> bool:
        self.skip()
        if self.text.startswith(token, self.pos):
            self.pos += len(token)
            return True
        return False

    def value(self) -> Any:
        self.skip()
        c = self.text[self.pos : self.pos + 1]
        if c in ("'", '"'):
            return self.string()
        if self.eat("["):
            return self.items("]")
        if self.eat("{"):
            return self.object()
        if self.eat("new Set("):
            items = self.value()
            if not self.eat(")"):
                raise self.fail("expected ) after new Set(")
            return frozenset(items)
        for word, value in (("true", True), ("false", False), ("null", None)):
            if re.compile(rf"{word}\b").match(self.text, self.pos):
                self.pos += len(word)
                return value
        number = _NUMBER.match(self.text, self.pos)
        if number:
            self.pos = number.end()
            digits = number.group().replace("_", "")
            return float(digits) if "." in digits else int(digits)
        raise self.fail("not a literal")

    def string(self) -> str:
        quote, out = self.text[self.pos], []
        self.pos += 1
        while (c := self.text[self.pos]) != quote:
            if c == "\n":
                raise self.fail("unterminated string")
            if c == "\\":
                esc = self.text[self.pos + 1]
                if esc == "u" and self.text[self.pos + 2] == "{":
                    end = self.text.index("}", self.pos)
                    out.append(chr(int(self.text[self.pos + 3 : end], 16)))
                    self.pos = end + 1
                elif esc in "ux":
                    width = 4 if esc == "u" else 2
                    out.append(chr(int(self.text[self.pos + 2 : self.pos + 2 + width], 16)))
                    self.pos += 2 + width
                else:
                    out.append(_ESCAPES.get(esc, esc))
                    self.pos += 2
            else:
                out.append(c)
                self.pos += 1
        self.pos += 1
        return "".join(out)

    def items(self, close: str) -> list[Any]:
        out: list[Any] = []
        while not self.eat(close):
            out.append(self.value())
            if not self.eat(",") and not self.text.startswith(close, self.pos):
                raise self.fail(f"expected , or {close}")
        return out

    def key(self) -> str:
        self.skip()
        if self.text[self.pos] in ("'", '"'):
            return self.string()
        found = _NAME.match(self.text, self.pos)
        if not found:
            raise self.fail("expected a key")
        self.pos = found.end()
        return found.group()

    def object(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        while not self.eat("}"):
            key = self.key()
            if not self.eat(":"):
                raise self.fail("expected :")
            if key in out:
                raise self.fail(f"duplicate key {key!r}")
            out[key] = self.value()
            if not self.eat(",") and not self.text.startswith("}", self.pos):
                raise self.fail("expected , or }")
        return out


def _source(module: str) -> str:
    return (WEB / module).read_text(encoding="utf-8")


def _start(module: str, name: str) -> tuple[str, int]:
    text = _source(module)
    found = re.search(rf"^(?:export )?const {name} = ", text, re.M)
    if found is None:
        raise JsReadError(f"web/{module} has no top-level const {name}")
    return text, found.end()


def js_const(module: str, name: str) -> Any:
    """The value of ``const NAME = <literal>;`` at the top level of ``web/<module>`` (strings
    joined with ``+`` are one string)."""
    text, pos = _start(module, name)
    literal = _Literal(text, pos)
    value = literal.value()
    while isinstance(value, str) and literal.eat("+"):
        part = literal.value()
        if not isinstance(part, str):
            raise literal.fail("+ of a string and something else")
        value += part
    if not literal.eat(";"):
        raise literal.fail(f"{name} is more than a literal")
    return value


def js_object_keys(module: str, name: str) -> list[str]:
    """The keys of ``const NAME = {key: <anything>, ...};`` (values may be functions)."""
    text, pos = _start(module, name)
    literal = _Literal(text, pos)
    if not literal.eat("{"):
        raise literal.fail(f"{name} is not an object")
    keys, depth = [literal.key()], 0
    while True:
        c = text[literal.pos]
        if c in "\"'`":
            end = re.compile(rf"{c}(?:\\.|[^\\{c}])*{c}", re.S).match(text, literal.pos)
            assert end is not None
            literal.pos = end.end()
            continue
        literal.pos += 1
        if c in "([{":
            depth += 1
        elif c in ")]}":
            if depth == 0:
                return keys
            depth -= 1
        elif c == "," and depth == 0:
            literal.skip()
            if text[literal.pos] == "}":
                return keys
            keys.append(literal.key())


def js_char_class(module: str, name: str) -> frozenset[str]:
    """The characters (of the BMP) that ``const NAME = /[...]/;`` matches. Only a single class of
    literal characters, ``\\xNN``/``\\uNNNN`` escapes and ranges is read, where Python's ``re``
    means what JavaScript means: a class such as ``\\s`` (which differs) fails the read."""
    text, pos = _start(module, name)
    found = re.compile(r"/(\[(?:\\.|[^\]\\])*\])/([a-z]*);").match(text, pos)
    if found is None:
        raise JsReadError(f"{name} in web/{module} is not one /[...]/ character class")
    return char_class(*found.groups())


def char_class(source: str, flags: str = "") -> frozenset[str]:
    shorthand = re.search(r"\\[sSwWdDpPbB]", source)
    if shorthand or flags.replace("u", ""):
        raise JsReadError(f"/{source}/{flags} reads differently in Python")
    pattern = re.compile(source)
    return frozenset(c for c in map(chr, range(0x10000)) if pattern.fullmatch(c))


def string_keys(lang: str, prefix: str) -> set[str]:
    """What follows ``prefix.`` in the keys of ``web/strings-<lang>.js``."""
    text = _source(f"strings-{lang}.js")
    return set(re.findall(rf'^\s*"{re.escape(prefix)}\.([\w.]+)":', text, re.M))


def values(enum: Iterable[Any]) -> set[str]:
    return {str(member) for member in enum}


def test_the_reader_reads_literals_and_refuses_the_rest() -> None:
    literal = _Literal(
        """{a: [1, 86_400_000, "x\\u3000", 'y'], "b-c": new Set(["z",]), d: null,}""", 0
    )
    assert literal.value() == {
        "a": [1, 86_400_000, "x\u3000", "y"],
        "b-c": frozenset({"z"}),
        "d": None,
    }
    for text in ("[t(1)]", "{a: b}", "`x`", "{a: 1, a: 2}"):
        with pytest.raises(JsReadError):
            _Literal(text, 0).value()
    with pytest.raises(JsReadError, match="no top-level const"):
        js_const("composer.js", "NO_SUCH")
    for source, flags in ((r"[\s]", ""), (r"[a-z]", "i"), (r"[\p{L}]", "u")):
        with pytest.raises(JsReadError, match="reads differently"):
            char_class(source, flags)
    assert char_class(r"[\t-\r ,\u3000-\u3002]") == {*"\t\n\x0b\x0c\r ,", *"\u3000\u3001\u3002"}


# -- agents ----------------------------------------------------------------------------------------


def test_agent_roles_are_the_servers_in_its_order() -> None:
    assert js_const("modelroutes.js", "AGENT_ROLES") == list(AGENT_ROLES)


def test_the_create_dialogs_default_names_are_the_presets_titles() -> None:
    # The dialog names a new agent by its role in the reader's language (issue 30: English
    # readers got Chinese names); in Chinese that is the preset's title, as the server's.
    text = _source("strings-zh.js")
    zh = dict(re.findall(r'^\s*"role\.(\w+)": "([^"]*)"', text, re.M))
    assert {r: zh[r] for r in AGENT_ROLES} == {r: PRESETS[r].title for r in AGENT_ROLES}
    assert 'value: label("role", role)' in _source("projects.js")


def test_every_role_has_a_label() -> None:
    human_roles = set(typing.get_args(RoleIn.model_fields["role"].annotation))
    assert human_roles == {"owner", "member"}
    for lang in LANGS:
        assert string_keys(lang, "role") == set(AGENT_ROLES) | human_roles, lang


# -- memory ----------------------------------------------------------------------------------------


def test_summary_sections_are_the_servers_in_its_order() -> None:
    assert js_const("memory.js", "SUMMARY_SECTIONS") == [key for key, _ in records.SUMMARY_SECTIONS]


def _sample(field: str) -> Any:
    return {"ref_kind": records.REF_KINDS[0], "tags": ["x"]}.get(field, "x")


def _required(kind: str, field: str) -> bool:
    """Whether the server refuses a ``kind`` entry with ``field`` left empty."""
    body = {f: _sample(f) for f in records.fields_of(kind)}
    body[field] = [] if field == "tags" else ""
    try:
        records.validate(kind, body)
    except records.RecordError:
        return True
    return False


def test_memory_entry_kinds_and_their_fields_are_the_servers() -> None:
    kinds = js_const("memory.js", "KINDS")
    assert [k["kind"] for k in kinds] == list(records.ENTRY_KINDS)
    for spec in kinds:
        kind = spec["kind"]
        assert spec["key"] == records.LIST_KEYS[kind]
        assert [f["name"] for f in spec["fields"]] == list(records.fields_of(kind)), kind
        for field in spec["fields"]:
            assert field.get("required", False) == _required(kind, field["name"]), field
            if "choices" in field:
                assert field["choices"] == list(records.REF_KINDS)
    # Sanity: the probe tells a required field from an optional one.
    assert _required("session", "summary") and not _required("session", "did")


def test_memory_pages_fit_the_server() -> None:
    assert js_const("memory.js", "OVERVIEW_SESSIONS") == memory_actions.OVERVIEW_SESSIONS
    assert js_const("memory.js", "ARCHIVE_PAGE") <= memory_actions.MAX_PAGE


def test_search_kinds_and_limit_are_the_servers() -> None:
    assert js_const("search.js", "RECORD_KINDS") == list(search_store.RECORD_KINDS)
    assert 1 <= js_const("search.js", "LIMIT") <= search_store.MAX_LIMIT


def test_the_history_page_fits_the_server() -> None:
    assert 1 <= js_const("timeline.js", "PAGE") <= MAX_HISTORY_LIMIT


# -- lifecycle -------------------------------------------------------------------------------------


def test_the_lifecycle_menu_places_every_operation() -> None:
    # An operation missing from the order is never shown, whatever the server offers.
    menu = js_const("lifecycle.js", "MENU_ORDER")
    assert len(menu) == len(set(menu))
    assert set(menu) - {"preview"} == values(ProjectOp)
    assert set(js_const("lifecycle.js", "BANNER_ORDER")) <= values(ProjectOp)
    assert set(js_const("lifecycle.js", "DANGER")) <= values(ProjectOp)
    for lang in LANGS:
        assert set(menu) <= string_keys(lang, "lifecycle"), lang


def test_operations_that_take_a_reason_are_the_servers() -> None:
    assert js_const("lifecycle.js", "REASON_OPS") == values(lifecycle_actions.REASON_OPS)


def test_every_project_state_has_a_banner_group_and_label() -> None:
    # Every state but active (nothing to say) and purged (gone) shows the banner.
    states = values(ProjectState)
    assert js_const("lifecycle.js", "BANNER_STATES") == states - {"active", "purged"}
    groups = js_const("projects.js", "GROUPS")
    grouped = [state for _, members in groups for state in members]
    assert sorted(grouped) == sorted(states - {"purged"})
    for lang in LANGS:
        assert string_keys(lang, "projectState") == states, lang


def test_the_member_menu_looks_after_every_member_operation() -> None:
    assert set(js_object_keys("members.js", "OP_LOOK")) == values(MemberOp)


# -- work settings, deliveries, tasks, research -------------------------------------------------


def test_work_limit_keys_are_the_servers() -> None:
    assert js_const("worksettings.js", "WORK_LIMITS") == list(WORK_LIMITS)


def test_delivery_states_reasons_and_labels_are_the_servers() -> None:
    assert js_const("delivery.js", "OPEN_STATES") == values(OPEN_STATES)
    order = js_const("delivery.js", "ORDER")
    assert sorted(order) == sorted(values(DeliveryState))
    for lang in LANGS:
        assert values(DeliveryState) <= string_keys(lang, "delivery"), lang
        assert string_keys(lang, "deliveryShort") == values(DeliveryState), lang
        assert string_keys(lang, "reason") == values(Reason), lang


def test_task_buttons_cover_every_event_a_person_may_ask_for() -> None:
    actions = dict(js_const("taskactions.js", "ACTIONS"))
    # `review` is the per-criterion review: the server's request_changes (or accept).
    offered = (set(actions) - {"review"}) | {TaskEvent.REQUEST_CHANGES.value}
    by_people = {str(e) for e, who in TASK_EVENT_ACTORS.items() if who != {TaskActor.SYSTEM}}
    assert offered == by_people
    with_reason = {str(e) for e, note in NOTE_REQUIRED.items() if note == "reason"}
    assert {e for e, how in actions.items() if how == "reason"} == with_reason - {"request_changes"}
    assert {e for e, how in actions.items() if how == "submit"} == {
        str(e) for e, note in NOTE_REQUIRED.items() if note == "evidence"
    }
    assert js_const("panel.js", "JUDGED") <= values(TaskState)
    for lang in LANGS:
        assert string_keys(lang, "taskState") == values(TaskState), lang
        assert set(actions) <= string_keys(lang, "taskAction"), lang


def test_the_board_has_a_column_for_every_task_state() -> None:
    columns = js_const("taskboard.js", "BOARD_STATES")
    assert sorted(columns) == sorted(values(TaskState)) and len(columns) == len(TaskState)


def test_research_buttons_budget_and_states_are_the_servers() -> None:
    by_owner = {str(e) for e, who in EVENT_ACTORS.items() if ResearchActor.OWNER in who}
    buttons = js_const("research.js", "BUTTONS")
    assert sorted(buttons) == sorted(by_owner)
    assert js_const("research.js", "PRIMARY") <= set(buttons)
    assert js_const("research.js", "BUDGET_KEYS") == list(BUDGET_KEYS)
    for lang in LANGS:
        # "expired" is shown, not stored: an approved run past its approval's expiry.
        assert string_keys(lang, "research.state") == values(ResearchState) | {"expired"}, lang


def test_route_sources_have_labels() -> None:
    for lang in LANGS:
        assert string_keys(lang, "routeSource") == values(RouteSource), lang


def _serial_reasons() -> set[str]:
    """The codes ``room/worktrees/_repo.py`` gives ``_serial(workspace, code, …)``."""
    tree = ast.parse(Path(worktree_repo.__file__).read_text(encoding="utf-8"))
    return {
        node.args[1].value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "_serial"
        and len(node.args) > 1
        and isinstance(node.args[1], ast.Constant)
        and isinstance(node.args[1].value, str)
    }


# Shown in the server's words (bilingual, with the configuration keys it found) rather than a
# label; a label here would drop the keys.
SERVER_WORDED_REASONS = {"unsafe_repository"}


def test_every_reason_a_workspace_runs_serially_has_a_label() -> None:
    reasons = _serial_reasons()
    assert {"no_workspace", "nested_repository", "no_base_branch"} <= reasons
    for lang in LANGS:
        assert string_keys(lang, "workspaceReason") == reasons - SERVER_WORDED_REASONS, lang


# -- the socket, reactions, chatter ---------------------------------------------------------------


def test_the_signed_out_close_code_is_the_servers() -> None:
    assert js_const("socket.js", "CLOSE_SIGNED_OUT") == CLOSE_SIGNED_OUT


def test_the_quick_reactions_are_the_servers() -> None:
    assert js_const("reactions.js", "QUICK_SET") == list(QUICK_SET)


def test_typing_hints_and_read_cursors_stay_under_the_chatter_rate() -> None:
    # Past the rate a typing hint is dropped and a read cursor written late.
    for module, name in (("composer.js", "TYPING_EVERY_MS"), ("timeline.js", "READ_EVERY_MS")):
        assert 1000 / js_const(module, name) <= CHATTER_PER_SEC, name


# -- mentions (shared/mentions/SPEC.md, room/rules/mentions.py) ----------------------------------------


def test_the_composers_boundaries_are_the_specs() -> None:
    whitespace = mentions._WS_SET
    assert js_char_class("composer.js", "WHITESPACE") == whitespace  # §1
    assert js_char_class("composer.js", "BOUNDARY_BEFORE") == mentions._BEFORE_AT  # §3
    # §4 less whitespace (a name being typed may hold a space) and less `.:!?`.
    assert js_char_class("composer.js", "NAME_END") == mentions._BOUNDARY - whitespace
    assert js_char_class("reach.js", "WHITESPACE") == whitespace


def test_the_pickers_everyone_words_are_the_group_names() -> None:
    # The picker also knows the pinyin of 所有人, so typing `@suo` finds it.
    assert set(js_const("picker.js", "EVERYONE_WORDS")) == {*mentions.EVERYONE_NAMES, "suoyouren"}


def test_the_resolvers_names_and_punctuation_are_the_servers() -> None:
    assert js_const("mentions.js", "EVERYONE_NAMES") == list(mentions.EVERYONE_NAMES)
    assert js_const("mentions.js", "HUMANS_NAMES") == list(mentions.HUMANS_NAMES)
    assert js_const("mentions.js", "UNKNOWN_WORD_MAX") == mentions.UNKNOWN_WORD_MAX
    assert frozenset(js_const("mentions.js", "CJK_PUNCT")) == mentions._CJK_PUNCT
