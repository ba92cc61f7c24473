"""The pure rules of tasks by hand: editing a task (room.rules.taskedits) and moving a card
between state columns (room.rules.tasks.move_event)."""

from __future__ import annotations

import pytest

from room.rules.lifecycle import MemberStatus
from room.rules.plans import OwnerInfo
from room.rules.taskedits import (
    EDIT_PROBLEM_CODES,
    TaskEditInvalidError,
    TaskFacts,
    order_problem,
    validate_edit,
)
from room.rules.tasks import (
    TASK_EVENT_ACTORS,
    TaskActor,
    TaskEvent,
    TaskMoveError,
    TaskState,
    move_event,
    move_targets,
    transition,
)

S, E = TaskState, TaskEvent
OWNERS = {
    "zhang": OwnerInfo(MemberStatus.ACTIVE, "human"),
    "lead": OwnerInfo(MemberStatus.ACTIVE, "agent"),
    "gone": OwnerInfo(MemberStatus.LEFT, "human"),
}
GRAPH = {"a": [], "b": ["a"], "c": ["b"], "d": []}


def facts(
    key: str = "a",
    state: TaskState = TaskState.READY,
    revision: int = 0,
    deps: tuple[str, ...] = (),
) -> TaskFacts:
    return TaskFacts(key=key, state=state, revision=revision, owner="zhang", depends_on=deps)


def codes(patch: dict[str, object], task: TaskFacts | None = None) -> list[tuple[str, str | None]]:
    with pytest.raises(TaskEditInvalidError) as caught:
        validate_edit(task or facts(), patch, OWNERS, GRAPH)
    assert all(p["code"] in EDIT_PROBLEM_CODES for p in caught.value.problems)
    return [(p["code"], p["field"]) for p in caught.value.problems]


def test_a_valid_edit_returns_only_what_changes() -> None:
    edit = validate_edit(facts(), {"title": " 新 ", "acceptance": [" x ", "y"]}, OWNERS, GRAPH)
    assert (edit.title, edit.acceptance, edit.owner, edit.depends_on) == (
        "新",
        ("x", "y"),
        None,
        None,
    )
    same = validate_edit(
        facts("b", deps=("a",)), {"owner": "@Zhang", "depends_on": ["a", "a"]}, OWNERS, GRAPH
    )
    assert same.changed == []
    edit = validate_edit(facts(), {"owner": "＠lead", "depends_on": ["d"]}, OWNERS, GRAPH)
    assert (edit.owner, edit.depends_on, edit.changed) == ("lead", ("d",), ["owner", "depends_on"])


def test_every_problem_under_its_field() -> None:
    assert codes({}) == [("empty_edit", None)]
    assert codes(
        {
            "title": "x" * 201,
            "acceptance": ["ok", " "],
            "owner": "gone",
            "depends_on": ["a", "zz"],
            "size": 1,
        }
    ) == [
        ("bad_field", None),
        ("bad_title", "title"),
        ("missing_criteria", "acceptance"),
        ("inactive_owner", "owner"),
        ("self_dependency", "depends_on"),
        ("unknown_dependency", "depends_on"),
    ]
    assert codes({"owner": "nobody", "acceptance": "one"}) == [
        ("missing_criteria", "acceptance"),
        ("unknown_owner", "owner"),
    ]
    assert codes({"depends_on": [1]}) == [("bad_field", "depends_on")]


def test_cycles_name_their_keys_from_the_edited_task() -> None:
    with pytest.raises(TaskEditInvalidError) as caught:
        validate_edit(facts("a"), {"depends_on": ["c"]}, OWNERS, GRAPH)
    (problem,) = caught.value.problems
    assert problem["code"] == "cycle" and problem["keys"] == ["a", "c", "b"]
    assert "a → c → b → a" in problem["message"]


def test_state_locks() -> None:
    assert codes({"acceptance": ["x"]}, facts(revision=1)) == [("acceptance_locked", "acceptance")]
    for state in (S.IN_PROGRESS, S.IN_REVIEW, S.BLOCKED, S.ACCEPTED):
        assert codes({"owner": "lead"}, facts(state=state)) == [("owner_locked", "owner")]
    for state in (S.WAITING, S.READY, S.HANDOFF):
        assert validate_edit(facts(state=state), {"owner": "lead"}, OWNERS, GRAPH).owner == "lead"
    assert codes({"depends_on": ["d"]}, facts(state=S.CANCELLED)) == [
        ("dependencies_locked", "depends_on")
    ]
    # A title may change in any state.
    assert validate_edit(facts(state=S.ACCEPTED), {"title": "t"}, OWNERS, GRAPH).title == "t"


def test_order_problem() -> None:
    assert order_problem(["b", "a"], ["a", "b"]) is None
    assert order_problem(["a", "a", "x"], ["a", "b"]) == {
        "missing": ["b"],
        "unknown": ["x"],
        "repeated": ["a"],
    }
    assert order_problem("ab", ["a"]) == {"missing": ["a"], "unknown": [], "repeated": []}


def test_a_move_is_the_one_member_event_leading_there() -> None:
    for state in TaskState:
        for target, event in move_targets(state, S.IN_REVIEW).items():
            assert TASK_EVENT_ACTORS[event] != frozenset({TaskActor.SYSTEM})
            assert transition(state, event, prior=S.IN_REVIEW) is target
            if target is not state:
                assert move_event(state, target, S.IN_REVIEW) is event
    assert move_event(S.READY, S.IN_PROGRESS) is E.START
    assert move_event(S.IN_PROGRESS, S.IN_REVIEW) is E.SUBMIT
    assert move_event(S.CANCELLED, S.WAITING) is E.REOPEN
    assert move_event(S.NEEDS_SYNC, S.IN_PROGRESS, S.IN_REVIEW) is E.SYNC_RECEIPT


def test_a_refused_move_lists_where_the_card_can_go() -> None:
    with pytest.raises(TaskMoveError) as caught:
        move_event(S.WAITING, S.READY)  # only the server settles dependencies
    assert caught.value.http_status == 409 and caught.value.code == "invalid_task_move"
    assert caught.value.details == {"state": "waiting", "to": "ready", "reachable": ["cancelled"]}
    with pytest.raises(TaskMoveError):
        move_event(S.IN_REVIEW, S.IN_REVIEW)  # the same column is no move


def test_the_docs_list_every_edit_problem() -> None:
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "tasks.md").read_text(encoding="utf-8")
    for code, meaning in EDIT_PROBLEM_CODES.items():
        assert f"| `{code}` | {meaning} |" in text, code
