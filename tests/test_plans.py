"""Plan validation: examples for each problem, and properties over generated dependency graphs."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from room.rules.lifecycle import MemberStatus
from room.rules.plans import (
    MAX_PLAN_ITEMS,
    PROBLEM_CODES,
    OwnerInfo,
    PlanInvalidError,
    PlanProblem,
    validate_plan,
)
from room.rules.tasks import TaskState

DOC = Path(__file__).resolve().parent.parent / "docs" / "tasks.md"

OWNERS: Mapping[str, OwnerInfo] = {
    "fe": OwnerInfo(MemberStatus.ACTIVE, "agent"),
    "be": OwnerInfo(MemberStatus.ACTIVE, "agent"),
    "ann": OwnerInfo(MemberStatus.ACTIVE, "human"),
    "resting": OwnerInfo(MemberStatus.PAUSED, "agent"),
    "gone": OwnerInfo(MemberStatus.LEFT, "agent"),
    "bob": OwnerInfo(MemberStatus.ACTIVE, "human", disabled=True),  # room users disable
}


def item(key: str, *deps: str, owner: str = "fe", **extra: Any) -> dict[str, Any]:
    return {
        "key": key,
        "title": f"Do {key}",
        "owner": owner,
        "depends_on": list(deps),
        "acceptance": [f"{key} works"],
        **extra,
    }


def problems_of(raw: Any) -> list[PlanProblem]:
    with pytest.raises(PlanInvalidError) as caught:
        validate_plan(raw, OWNERS)
    error = caught.value
    assert error.code == "plan_invalid" and error.http_status == 400
    assert error.details == {"problems": error.problems}
    json.dumps(error.to_dict(), ensure_ascii=False)  # clients get it as JSON
    for problem in error.problems:
        assert problem["code"] in PROBLEM_CODES
        assert problem["message"] and problem["hint"].endswith(")"), problem
    return error.problems


def codes(problems: list[PlanProblem]) -> list[tuple[str, str | None]]:
    return [(p["code"], p["item"]) for p in problems]


# -- the docs are the code ----------------------------------------------------------------------


def test_problem_codes_in_docs_equal_module() -> None:
    lines = DOC.read_text(encoding="utf-8").splitlines()
    start = lines.index("<!-- table: plan-problems -->") + 3  # skip header and separator
    documented = {}
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        code, meaning = (c.strip() for c in line.strip().strip("|").split("|"))
        documented[code.strip("`")] = meaning
    assert documented == dict(PROBLEM_CODES)


# -- valid plans --------------------------------------------------------------------------------


def test_valid_plan_is_ordered_by_dependencies_and_gets_initial_states() -> None:
    plan = validate_plan(
        {
            "goal": "  上线登录页  ",
            "items": [
                item("ui", "api", owner="@FE"),
                item("api", "schema", owner="BE"),
                item("docs"),
                item("schema", owner="＠ann"),
            ],
        },
        OWNERS,
    )
    assert plan.keys == ["docs", "schema", "api", "ui"]
    assert plan.goal == "上线登录页"
    assert [i.owner for i in plan.items] == ["fe", "ann", "be", "fe"]
    assert plan.initial_states() == {
        "docs": TaskState.READY,
        "schema": TaskState.READY,
        "api": TaskState.WAITING,
        "ui": TaskState.WAITING,
    }


def test_fields_are_cleaned() -> None:
    raw = item("a", title="  标题  ", acceptance=[" 通过 "], assumptions=[" 有网络 "])
    raw["depends_on"] = []
    plan = validate_plan({"items": [raw, item("b", "a", "a")]}, OWNERS)
    first, second = plan.items
    assert (first.title, first.acceptance, first.assumptions) == ("标题", ("通过",), ("有网络",))
    assert second.depends_on == ("a",)  # a repeated dependency is kept once
    assert plan.goal is None


def test_blank_goal_is_no_goal() -> None:
    assert validate_plan({"goal": "   ", "items": [item("a")]}, OWNERS).goal is None


# -- one example per problem --------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        None,
        [],
        "plan",
        {"items": "a"},
        {"goal": "g"},
        {"items": [], "extra": 1},
        {"items": [], "goal": 5},
    ],
)
def test_bad_plan_shapes(raw: Any) -> None:
    assert [p["code"] for p in problems_of(raw)] == ["bad_plan"]


def test_empty_plan() -> None:
    assert codes(problems_of({"items": []})) == [("empty_plan", None)]


def test_too_many_items() -> None:
    raw = {"items": [item(f"k{i}") for i in range(MAX_PLAN_ITEMS + 1)]}
    assert codes(problems_of(raw)) == [("too_many_items", None)]
    validate_plan({"items": raw["items"][:MAX_PLAN_ITEMS]}, OWNERS)  # the limit itself is fine


@pytest.mark.parametrize(
    ("change", "code"),
    [
        ({"title": ""}, "bad_item"),
        ({"title": "x" * 201}, "bad_item"),
        ({"title": 7}, "bad_item"),
        ({"owner": ""}, "bad_item"),
        ({"depends_on": "b"}, "bad_item"),
        ({"assumptions": [""]}, "bad_item"),
        ({"colour": "red"}, "bad_item"),
        ({"acceptance": []}, "missing_criteria"),
        ({"acceptance": ["ok", "  "]}, "missing_criteria"),
        ({"acceptance": "works"}, "bad_item"),
    ],
)
def test_item_schema_problems(change: dict[str, Any], code: str) -> None:
    problems = problems_of({"items": [{**item("a"), **change}]})
    assert codes(problems) == [(code, "a")]
    assert problems[0]["index"] == 0


def test_missing_fields_each_reported() -> None:
    problems = problems_of({"items": [{"key": "a"}]})
    assert sorted(codes(problems)) == [
        ("bad_item", "a"),
        ("bad_item", "a"),
        ("missing_criteria", "a"),
    ]


@pytest.mark.parametrize("key", ["", "A", "-a", "a b", "a" * 41, "数据库", 3])
def test_bad_keys_are_named_by_position(key: Any) -> None:
    problems = problems_of({"items": [item("ok"), {**item("x"), "key": key}]})
    assert codes(problems) == [("bad_item", "#2")]
    assert problems[0]["index"] == 1


def test_item_that_is_not_an_object() -> None:
    assert codes(problems_of({"items": [item("a"), "b"]})) == [("bad_item", "#2")]


def test_duplicate_key_is_reported_on_the_later_item_only() -> None:
    problems = problems_of({"items": [item("a"), item("b", "a"), item("a")]})
    assert codes(problems) == [("duplicate_key", "a")]
    assert problems[0]["index"] == 2


@pytest.mark.parametrize(
    ("owner", "code"),
    [
        ("ghost", "unknown_owner"),
        ("resting", "inactive_owner"),
        ("gone", "inactive_owner"),
        ("bob", "inactive_owner"),
    ],
)
def test_owner_problems(owner: str, code: str) -> None:
    problems = problems_of({"items": [item("a", owner=owner)]})
    assert codes(problems) == [(code, "a")]
    assert f"@{owner}" in problems[0]["message"]


def test_an_owner_is_named_ignoring_ascii_case_only() -> None:
    """As the mentions and both stores compare handles: a Kelvin sign (which ``str.lower``
    makes a ``k``) names nobody."""
    owners = {"kai": OwnerInfo(MemberStatus.ACTIVE, "agent")}
    plan = validate_plan({"items": [item("a", owner="@KAI")]}, owners)
    assert plan.items[0].owner == "kai"
    with pytest.raises(PlanInvalidError) as caught:
        validate_plan({"items": [item("a", owner="\u212aai")]}, owners)
    assert [p["code"] for p in caught.value.problems] == ["unknown_owner"]


def test_dependency_problems() -> None:
    problems = problems_of({"items": [item("a", "a", "nope", "b"), item("b")]})
    assert codes(problems) == [("self_dependency", "a"), ("unknown_dependency", "a")]


def test_cycle_names_its_keys_in_dependency_order() -> None:
    problems = problems_of({"items": [item("x"), item("b", "c"), item("a", "b"), item("c", "a")]})
    assert codes(problems) == [("cycle", "b")]
    assert problems[0]["keys"] == ["b", "c", "a"]  # b→c, c→a, a→b; starts at the earliest
    assert "b → c → a → b" in problems[0]["message"]


def test_separate_cycles_are_separate_problems() -> None:
    raw = {"items": [item("a", "b"), item("b", "a"), item("c", "d"), item("d", "c")]}
    assert [p["keys"] for p in problems_of(raw)] == [["a", "b"], ["c", "d"]]


def test_faulty_item_still_takes_part_in_cross_item_checks() -> None:
    # `b` has an empty title, but it exists (no unknown_dependency for `a`), its owner is still
    # checked, and its edge still closes the cycle.
    raw = {"items": [item("a", "b"), item("b", "a", title="", owner="ghost")]}
    assert codes(problems_of(raw)) == [
        ("bad_item", "b"),
        ("unknown_owner", "b"),
        ("cycle", "a"),
    ]


def test_three_faults_three_problems() -> None:
    raw = {
        "items": [
            item("a", owner="ghost"),
            item("b", "a", acceptance=[]),
            item("c", "b", "zzz"),
        ]
    }
    assert codes(problems_of(raw)) == [
        ("unknown_owner", "a"),
        ("missing_criteria", "b"),
        ("unknown_dependency", "c"),
    ]


# -- properties over generated graphs -----------------------------------------------------------

slugs = st.from_regex(r"[a-z0-9][a-z0-9_-]{0,39}", fullmatch=True)


@st.composite
def dags(draw: st.DrawFn, min_size: int = 1) -> tuple[list[str], dict[str, list[str]]]:
    """Keys in plan order and a random DAG over them (edges only from later to earlier in a random
    permutation, so it cannot have a cycle)."""
    keys = draw(st.lists(slugs, min_size=min_size, max_size=12, unique=True))
    rank = draw(st.permutations(keys))
    deps: dict[str, list[str]] = {key: [] for key in keys}
    for later in range(len(rank)):
        for earlier in draw(st.sets(st.integers(0, later - 1), max_size=later)) if later else ():
            deps[rank[later]].append(rank[earlier])
    for key in keys:
        deps[key] = draw(st.permutations(deps[key]))
    return keys, deps


def plan_of(keys: list[str], deps: Mapping[str, list[str]]) -> dict[str, Any]:
    return {"items": [item(key, *deps[key]) for key in keys]}


def reference_order(keys: list[str], deps: Mapping[str, list[str]]) -> list[str]:
    """Obviously-correct stable topological order: the first listed item whose deps are done."""
    done: list[str] = []
    while len(done) < len(keys):
        done.append(next(k for k in keys if k not in done and set(deps[k]) <= set(done)))
    return done


def reachable(deps: Mapping[str, list[str]], start: str) -> set[str]:
    seen: set[str] = set()
    todo = list(deps[start])
    while todo:
        key = todo.pop()
        if key not in seen:
            seen.add(key)
            todo.extend(deps[key])
    return seen


def assert_real_cycle(cycle: list[str], deps: Mapping[str, list[str]]) -> None:
    assert len(cycle) >= 2 and len(set(cycle)) == len(cycle), cycle
    for here, there in zip(cycle, cycle[1:] + cycle[:1], strict=True):
        assert there in deps[here], f"{here} does not depend on {there}"


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(dag=dags())
def test_random_dags_are_accepted_in_stable_topological_order(
    dag: tuple[list[str], dict[str, list[str]]],
) -> None:
    keys, deps = dag
    plan = validate_plan(plan_of(keys, deps), OWNERS)
    position = {key: i for i, key in enumerate(plan.keys)}
    assert sorted(plan.keys) == sorted(keys)
    for key in keys:
        assert all(position[dep] < position[key] for dep in deps[key])
    assert plan.keys == reference_order(keys, deps)
    assert plan.initial_states() == {
        key: TaskState.WAITING if deps[key] else TaskState.READY for key in plan.keys
    }


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(dag=dags(min_size=2), data=st.data())
def test_a_back_edge_closing_a_cycle_is_refused_naming_that_cycle(
    dag: tuple[list[str], dict[str, list[str]]], data: st.DataObject
) -> None:
    keys, deps = dag
    if not any(deps.values()):  # make sure there is a path to close
        deps[keys[1]].append(keys[0])
    pairs = [(u, v) for u in keys for v in sorted(reachable(deps, u))]
    u, v = data.draw(st.sampled_from(pairs))  # u depends (transitively) on v ...
    deps[v].append(u)  # ... and now v depends on u: a cycle through the new edge
    problems = problems_of(plan_of(keys, deps))
    assert [p["code"] for p in problems] == ["cycle"]
    cycle = problems[0]["keys"]
    assert_real_cycle(cycle, deps)
    assert cycle[(cycle.index(v) + 1) % len(cycle)] == u  # every new cycle uses the new edge
    assert problems[0]["item"] == cycle[0] == min(cycle, key=keys.index)


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(dag=dags(min_size=2), data=st.data())
def test_every_cycle_reported_is_real_and_each_knot_is_reported_once(
    dag: tuple[list[str], dict[str, list[str]]], data: st.DataObject
) -> None:
    keys, deps = dag
    extra = data.draw(
        st.lists(st.tuples(st.sampled_from(keys), st.sampled_from(keys)), min_size=1, max_size=4)
    )
    for a, b in extra:
        if a != b and b not in deps[a]:
            deps[a].append(b)
    # Knots: groups of keys that reach each other (strongly connected, two or more keys).
    reach = {key: reachable(deps, key) for key in keys}
    knots = {frozenset({k} | {o for o in reach[k] if k in reach[o]}) for k in keys if k in reach[k]}
    if not knots:
        validate_plan(plan_of(keys, deps), OWNERS)
        return
    problems = problems_of(plan_of(keys, deps))
    assert all(p["code"] == "cycle" for p in problems)
    assert len(problems) == len(knots)
    for problem in problems:
        assert_real_cycle(problem["keys"], deps)
        assert sum(set(problem["keys"]) <= knot for knot in knots) == 1
    firsts = [keys.index(p["keys"][0]) for p in problems]
    assert firsts == sorted(firsts)


# Faults that touch one item only and cannot cascade into problems elsewhere.
FAULTS: dict[str, tuple[str, Any]] = {
    "unknown_owner": ("owner", "ghost"),
    "inactive_owner": ("owner", "resting"),
    "missing_criteria": ("acceptance", []),
    "bad_item": ("title", ""),
    "unknown_dependency": ("depends_on", ["no-such-item-anywhere-x"]),
    "self_dependency": ("depends_on", None),  # filled in with the item's own key
}


@pytest.mark.slow
@settings(max_examples=200, deadline=None)
@given(dag=dags(), data=st.data())
def test_all_problems_are_collected_at_once(
    dag: tuple[list[str], dict[str, list[str]]], data: st.DataObject
) -> None:
    keys, deps = dag
    raw = plan_of(keys, deps)
    faulty = data.draw(st.lists(st.sampled_from(range(len(keys))), min_size=1, unique=True))
    expected = []
    for index in faulty:
        code = data.draw(st.sampled_from(sorted(FAULTS)))
        field, value = FAULTS[code]
        entry = raw["items"][index]
        if field == "depends_on":
            entry["depends_on"] = [*entry["depends_on"], *(value or [entry["key"]])]
        else:
            entry[field] = value
        expected.append((code, entry["key"]))
    problems = problems_of(raw)
    assert Counter(codes(problems)) == Counter(expected)
    indexes = [-1 if p["index"] is None else p["index"] for p in problems]
    assert indexes == sorted(indexes)  # grouped by item, in plan order


@settings(max_examples=50, deadline=None)
@given(
    raw=st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=5),
        lambda inner: (
            st.lists(inner, max_size=3)
            | st.dictionaries(
                st.sampled_from(
                    ["items", "goal", "key", "title", "owner", "acceptance", "depends_on"]
                ),
                inner,
                max_size=4,
            )
        ),
        max_leaves=12,
    )
)
def test_arbitrary_input_is_accepted_or_refused_with_the_documented_error(raw: Any) -> None:
    try:
        validate_plan(raw, OWNERS)
    except PlanInvalidError as error:
        assert error.problems
        assert all(p["code"] in PROBLEM_CODES for p in error.problems)
