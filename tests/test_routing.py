"""Model route resolution: ids, precedence and pool picks, against docs/routing.md."""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from room.errors import BadRequestError
from room.rules.routing import (
    FALLBACK_MODEL_ID,
    MAX_MODEL_ID_CHARS,
    MODEL_ID_PROBLEMS,
    POOL_PICK_REFUSALS,
    ROUTE_PRECEDENCE,
    SOURCE_LABELS,
    InvalidModelIdError,
    Pool,
    PoolPick,
    PoolPickError,
    ResolvedRoute,
    RouteSource,
    parse_model_id,
    resolve_route,
    validate_pool_pick,
)
from tests.support.doctables import read_table as doc_table


def read_table(name: str) -> list[list[str]]:
    return doc_table("routing.md", name)[1]


MODEL_ID_ROWS = read_table("model-ids")

# -- the docs are the code ----------------------------------------------------------------------


def test_precedence_table_in_docs_equals_module() -> None:
    rows = read_table("route-precedence")
    assert [int(row[0]) for row in rows] == list(range(1, len(ROUTE_PRECEDENCE) + 1))
    assert [row[1] for row in rows] == list(ROUTE_PRECEDENCE)
    assert {row[1]: (row[2], row[3]) for row in rows} == {
        str(source): tuple(label) for source, label in SOURCE_LABELS.items()
    }


def test_pool_pick_table_in_docs_equals_module() -> None:
    assert {row[0]: row[1] for row in read_table("pool-pick-refusals")} == dict(POOL_PICK_REFUSALS)


@pytest.mark.parametrize(("model_id", "provider", "model"), MODEL_ID_ROWS)
def test_model_id_examples_in_docs(model_id: str, provider: str, model: str) -> None:
    if provider.startswith("✗ "):
        with pytest.raises(InvalidModelIdError) as caught:
            parse_model_id(model_id)
        assert caught.value.details == {"value": model_id, "why": provider.removeprefix("✗ ")}
        assert model == "-"
    else:
        assert parse_model_id(model_id) == (provider, model)


def test_docs_show_every_kind_of_malformed_id_that_a_string_can_have() -> None:
    shown = {row[1].removeprefix("✗ ") for row in MODEL_ID_ROWS if row[1].startswith("✗")}
    assert shown == set(MODEL_ID_PROBLEMS) - {"not_string", "length"}


def test_source_labels_are_the_product_words() -> None:
    assert {s: label.zh for s, label in SOURCE_LABELS.items()} == {
        RouteSource.MEMBER: "成员固定",
        RouteSource.ROLE: "角色默认",
        RouteSource.PROJECT: "项目默认",
        RouteSource.POOL: "允许池",
        RouteSource.FALLBACK: "内置离线",
    }


# -- model ids ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "why"),
    [
        (None, "not_string"),
        (42, "not_string"),
        ("", "length"),
        ("openai/" + "x" * MAX_MODEL_ID_CHARS, "length"),
        ("openai/gpt\u200b4o", "bad_char"),  # zero-width space: looks like another id
        ("openai/gpt\n", "bad_char"),
        ("openai/gpt\x00", "bad_char"),
        ("a" * 41 + "/m", "bad_provider"),
    ],
)
def test_malformed_ids(value: Any, why: str) -> None:
    with pytest.raises(InvalidModelIdError) as caught:
        parse_model_id(value)
    assert caught.value.details["why"] == why
    assert caught.value.code == "bad_model_id"
    assert isinstance(caught.value, BadRequestError)


def test_longest_id_is_accepted() -> None:
    model_id = "p/" + "m" * (MAX_MODEL_ID_CHARS - 2)
    assert parse_model_id(model_id) == ("p", "m" * (MAX_MODEL_ID_CHARS - 2))


providers = st.from_regex(r"[a-z0-9][a-z0-9_-]{0,39}", fullmatch=True)
segments = st.text(
    st.characters(exclude_categories=("Cc", "Cf", "Cs", "Co", "Cn", "Zs", "Zl", "Zp")).filter(
        lambda ch: ch != "/" and not ch.isspace()
    ),
    min_size=1,
    max_size=20,
)


@settings(max_examples=200, deadline=None)
@given(provider=providers, parts=st.lists(segments, min_size=1, max_size=4))
def test_parse_splits_at_the_first_slash_only(provider: str, parts: list[str]) -> None:
    model = "/".join(parts)
    model_id = f"{provider}/{model}"
    if len(model_id) <= MAX_MODEL_ID_CHARS:
        assert parse_model_id(model_id) == (provider, model)


# -- precedence ---------------------------------------------------------------------------------

POOL = Pool(models=("openai/gpt-4o", "deepseek/deepseek-chat"))
GOOD_PICK = PoolPick("deepseek/deepseek-chat", "代码审查需要更长上下文")
SLOTS = {
    RouteSource.MEMBER: "anthropic/claude-3-5-sonnet",
    RouteSource.ROLE: "openai/gpt-4o-mini",
    RouteSource.PROJECT: "ollama/qwen2.5:7b",
}


@pytest.mark.parametrize(
    ("member", "pick", "role", "project"), list(itertools.product([False, True], repeat=4))
)
def test_precedence_every_combination(member: bool, pick: bool, role: bool, project: bool) -> None:
    route = resolve_route(
        member_route=SLOTS[RouteSource.MEMBER] if member else None,
        pool=POOL,
        pool_pick=GOOD_PICK if pick else None,
        role_default=SLOTS[RouteSource.ROLE] if role else None,
        project_default=SLOTS[RouteSource.PROJECT] if project else None,
    )
    present = {
        RouteSource.MEMBER: member,
        RouteSource.POOL: pick,
        RouteSource.ROLE: role,
        RouteSource.PROJECT: project,
        RouteSource.FALLBACK: True,
    }
    expected = next(source for source in ROUTE_PRECEDENCE if present[source])
    assert route.source is expected
    expected_id = {
        **SLOTS,
        RouteSource.POOL: GOOD_PICK.model_id,
        RouteSource.FALLBACK: FALLBACK_MODEL_ID,
    }[expected]
    assert route.model_id == expected_id
    assert route.label == SOURCE_LABELS[expected]
    assert route.reason == (GOOD_PICK.reason if expected is RouteSource.POOL else None)
    # A valid pick loses only to a member lock, and then says so.
    assert route.pick_refused == ("locked_member" if pick and member else None)


def test_nothing_configured_is_the_builtin_offline_route() -> None:
    route = resolve_route(
        project_default=None, role_default=None, member_route=None, pool=None, pool_pick=None
    )
    assert route == ResolvedRoute("builtin/echo", RouteSource.FALLBACK)
    assert (route.provider, route.model) == ("builtin", "echo")
    assert route.label.zh == "内置离线"


def test_fallback_can_be_configured() -> None:
    route = resolve_route(
        project_default=None,
        role_default=None,
        member_route=None,
        pool=None,
        pool_pick=None,
        fallback="ollama/llama3",
    )
    assert (route.model_id, route.source) == ("ollama/llama3", RouteSource.FALLBACK)


@pytest.mark.parametrize(
    ("pool", "pick", "refused"),
    [
        (None, GOOD_PICK, "pool_mode_off"),
        (Pool(POOL.models, enabled=False), GOOD_PICK, "pool_mode_off"),
        (POOL, PoolPick("openai/o1", "更强推理"), "outside_pool"),
        (POOL, PoolPick("OpenAI/gpt-4o", "大小写不同"), "outside_pool"),
        (POOL, PoolPick("not an id", "x"), "outside_pool"),
        (POOL, PoolPick("openai/gpt-4o", "  "), "reason_required"),
    ],
)
def test_unusable_pick_is_ignored_and_explained(
    pool: Pool | None, pick: PoolPick, refused: str
) -> None:
    route = resolve_route(
        project_default="ollama/qwen2.5:7b",
        role_default=None,
        member_route=None,
        pool=pool,
        pool_pick=pick,
    )
    assert (route.model_id, route.source) == ("ollama/qwen2.5:7b", RouteSource.PROJECT)
    assert route.pick_refused == refused
    assert route.reason is None


def test_pool_reason_is_public_and_trimmed() -> None:
    route = resolve_route(
        project_default=None,
        role_default=None,
        member_route=None,
        pool=POOL,
        pool_pick=PoolPick("openai/gpt-4o", "  需要视觉能力 \n"),
    )
    assert (route.source, route.reason) == (RouteSource.POOL, "需要视觉能力")


@pytest.mark.parametrize("slot", ["project_default", "role_default", "member_route", "fallback"])
def test_malformed_configured_route_raises_instead_of_falling_through(slot: str) -> None:
    kwargs: dict[str, Any] = {
        "project_default": None,
        "role_default": None,
        "member_route": None,
        "pool": None,
        "pool_pick": None,
        slot: "gpt-4o",
    }
    with pytest.raises(InvalidModelIdError):
        resolve_route(**kwargs)


def test_pool_refuses_malformed_ids() -> None:
    with pytest.raises(InvalidModelIdError):
        Pool(models=("openai/gpt-4o", "gpt-4o"))


# -- validate_pool_pick -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pool", "pick", "locked", "code"),
    [
        (None, GOOD_PICK, False, "pool_mode_off"),
        (Pool(POOL.models, enabled=False), GOOD_PICK, True, "pool_mode_off"),  # checked first
        (POOL, GOOD_PICK, True, "locked_member"),
        (POOL, PoolPick("openai/o1", ""), True, "locked_member"),  # before reason and pool
        (POOL, PoolPick("openai/o1", ""), False, "reason_required"),  # before the pool
        (POOL, PoolPick("openai/o1", "理由"), False, "outside_pool"),
    ],
)
def test_pick_refusals_in_order(pool: Pool | None, pick: PoolPick, locked: bool, code: str) -> None:
    with pytest.raises(PoolPickError) as caught:
        validate_pool_pick(pool, pick, member_locked=locked)
    assert caught.value.code == code
    assert caught.value.message == POOL_PICK_REFUSALS[code]
    assert caught.value.details == {"model_id": pick.model_id}


def test_valid_pick_passes() -> None:
    validate_pool_pick(POOL, GOOD_PICK, member_locked=False)
