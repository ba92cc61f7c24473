"""The task state machine, exhaustively, against docs/tasks.md."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from room.rules.tasks import (
    AFTER_SYNC,
    NOTE_REQUIRED,
    OPEN_STATES,
    TASK_EVENT_ACTORS,
    TASK_TRANSITIONS,
    AcceptanceIncompleteError,
    Computed,
    TaskActor,
    TaskEvent,
    TaskForbiddenError,
    TaskNoteRequiredError,
    TaskSnapshot,
    TaskState,
    TaskTransitionError,
    acceptance_complete,
    advance,
    after_sync,
    allowed_events,
    authorize,
    check_acceptance,
    check_note,
    missing_criteria,
    revision_after,
    settle,
    transition,
    waiting_on,
)
from tests.support.doctables import read_table as doc_table


def read_table(name: str) -> tuple[list[str], list[list[str]]]:
    return doc_table("tasks.md", name)


DOC_TRANSITIONS = {(row[0], row[1]): row[2] for row in read_table("task-transitions")[1]}
DOC_AFTER_SYNC = {row[0]: row[1] for row in read_table("after-sync")[1]}
DOC_ACTORS = {row[0]: (row[1], row[2]) for row in read_table("task-actors")[1]}


def documented_allowed(state: TaskState) -> list[str]:
    return [event for event in TaskEvent if (state, event) in DOC_TRANSITIONS]


# -- the docs are the code ----------------------------------------------------------------------


def test_transition_table_in_docs_equals_module() -> None:
    assert {(str(s), str(e)): str(t) for (s, e), t in TASK_TRANSITIONS.items()} == DOC_TRANSITIONS
    _, body = read_table("task-transitions")
    assert len(body) == len(DOC_TRANSITIONS), "a pair is listed twice in the docs"


def test_after_sync_table_in_docs_equals_module() -> None:
    assert {str(k): str(v) for k, v in AFTER_SYNC.items()} == DOC_AFTER_SYNC


def test_actor_table_in_docs_equals_module() -> None:
    assert list(DOC_ACTORS) == list(TaskEvent)
    for event in TaskEvent:
        who, note = DOC_ACTORS[event]
        assert set(who.split(", ")) == set(TASK_EVENT_ACTORS[event]), event
        assert note == NOTE_REQUIRED.get(event, "-"), event


# -- exhaustive: every (state, event) -----------------------------------------------------------


@pytest.mark.parametrize("event", list(TaskEvent))
@pytest.mark.parametrize("state", list(TaskState))
def test_every_pair(state: TaskState, event: TaskEvent) -> None:
    documented = DOC_TRANSITIONS.get((state, event))
    if documented is None:
        with pytest.raises(TaskTransitionError) as caught:
            transition(state, event, prior=TaskState.IN_PROGRESS)
        error = caught.value
        assert error.code == "invalid_task_transition"
        assert (error.state, error.event) == (state, event)
        assert error.allowed == documented_allowed(state)
        assert error.details == {
            "state": state,
            "event": event,
            "allowed": documented_allowed(state),
        }
        for name in documented_allowed(state):
            assert name in error.message
        return
    if documented == Computed.AFTER_SYNC:
        for prior, expected in DOC_AFTER_SYNC.items():
            assert transition(state, event, prior=TaskState(prior)) == expected
    else:
        assert transition(state, event) == documented


@pytest.mark.parametrize("state", list(TaskState))
def test_allowed_events_match_docs(state: TaskState) -> None:
    assert allowed_events(state) == documented_allowed(state)


def test_every_state_can_be_left_except_cancelled_and_accepted_only_by_reopen() -> None:
    for state in TaskState:
        assert allowed_events(state), f"{state} is a dead end"
    assert allowed_events(TaskState.ACCEPTED) == [TaskEvent.REOPEN]
    assert allowed_events(TaskState.CANCELLED) == [TaskEvent.REOPEN]


def test_cancel_and_handoff_cover_exactly_the_open_states() -> None:
    cancellable = {s for s in TaskState if (s, TaskEvent.CANCEL) in TASK_TRANSITIONS}
    handed = {s for s in TaskState if (s, TaskEvent.HANDOFF) in TASK_TRANSITIONS}
    assert cancellable == OPEN_STATES
    assert handed == OPEN_STATES - {TaskState.HANDOFF}


# -- requirement sync ---------------------------------------------------------------------------


def test_sync_receipt_without_prior_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="require_sync"):
        transition(TaskState.NEEDS_SYNC, TaskEvent.SYNC_RECEIPT)


@pytest.mark.parametrize("prior", [s for s in TaskState if s not in AFTER_SYNC])
def test_after_sync_refuses_states_sync_cannot_interrupt(prior: TaskState) -> None:
    with pytest.raises(ValueError):
        after_sync(prior)


def test_advance_remembers_the_first_prior_and_clears_it_after_the_receipt() -> None:
    task = TaskSnapshot(TaskState.IN_REVIEW, revision=1)
    task = advance(task, TaskEvent.REQUIRE_SYNC)
    assert task == TaskSnapshot(TaskState.NEEDS_SYNC, revision=1, sync_prior=TaskState.IN_REVIEW)
    task = advance(task, TaskEvent.REQUIRE_SYNC)  # a second change before the receipt
    assert task.sync_prior is TaskState.IN_REVIEW
    task = advance(task, TaskEvent.SYNC_RECEIPT)
    assert task == TaskSnapshot(TaskState.IN_PROGRESS, revision=1, sync_prior=None)


def test_resubmission_after_changes_invalidates_earlier_passes() -> None:
    criteria = ["builds", "tests"]
    task = TaskSnapshot(TaskState.READY)
    for event in (TaskEvent.START, TaskEvent.SUBMIT):
        task = advance(task, event)
    assert task.revision == 1
    passes = {"builds": (1, True), "tests": (1, False)}
    assert missing_criteria(criteria, passes, task.revision) == ["tests"]
    task = advance(task, TaskEvent.REQUEST_CHANGES)
    task = advance(task, TaskEvent.SUBMIT)
    assert (task.state, task.revision) == (TaskState.IN_REVIEW, 2)
    passes["tests"] = (1, True)  # a late pass on the old revision does not count either
    assert not acceptance_complete(criteria, passes, task.revision)
    assert missing_criteria(criteria, passes, task.revision) == ["builds", "tests"]
    passes = {"builds": (2, True), "tests": (2, True)}
    check_acceptance(criteria, passes, task.revision)
    assert advance(task, TaskEvent.ACCEPT).state is TaskState.ACCEPTED


def test_revision_counts_only_submits() -> None:
    for event in TaskEvent:
        assert revision_after(event, 4) == (5 if event is TaskEvent.SUBMIT else 4)


event_lists = st.lists(st.sampled_from(list(TaskEvent)), max_size=40)


@settings(max_examples=200, deadline=None)
@given(events=event_lists)
def test_advance_invariants_hold_for_any_event_sequence(events: list[TaskEvent]) -> None:
    task = TaskSnapshot(TaskState.WAITING)
    submits = 0
    for event in events:
        try:
            nxt = advance(task, event)
        except TaskTransitionError as error:
            assert event not in allowed_events(task.state)
            assert error.allowed == allowed_events(task.state)
            continue
        assert nxt.state == transition(task.state, event, prior=task.sync_prior)
        submits += event is TaskEvent.SUBMIT
        task = nxt
        assert task.revision == submits
        assert (task.sync_prior is not None) == (task.state is TaskState.NEEDS_SYNC)
        if task.sync_prior is not None:
            assert task.sync_prior in AFTER_SYNC


# -- acceptance guard ---------------------------------------------------------------------------


def test_acceptance_needs_a_pass_on_the_current_revision_for_every_criterion() -> None:
    assert acceptance_complete([1, 2], {1: (3, True), 2: (3, True)}, 3)
    assert not acceptance_complete([1, 2], {1: (3, True), 2: (3, False)}, 3)  # failed
    assert not acceptance_complete([1, 2], {1: (3, True), 2: (2, True)}, 3)  # stale
    assert not acceptance_complete([1, 2], {1: (3, True)}, 3)  # never checked
    assert not acceptance_complete([1, 2], {1: (4, True), 2: (4, True)}, 3)  # not this revision
    assert acceptance_complete([1], {1: (3, True), 9: (1, False)}, 3)  # unrelated ids ignored


def test_no_criteria_is_never_complete() -> None:
    assert not acceptance_complete([], {}, 1)
    with pytest.raises(AcceptanceIncompleteError) as caught:
        check_acceptance([], {}, 1)
    assert caught.value.code == "no_criteria"


def test_check_acceptance_lists_what_is_missing() -> None:
    with pytest.raises(AcceptanceIncompleteError) as caught:
        check_acceptance(["a", "b", "c"], {"b": (2, True), "c": (1, True)}, 2)
    assert caught.value.code == "acceptance_incomplete"
    assert caught.value.details == {"revision": 2, "missing": ["a", "c"]}
    assert caught.value.http_status == 409


# -- actors and notes ---------------------------------------------------------------------------


@pytest.mark.parametrize("role", list(TaskActor))
@pytest.mark.parametrize("event", list(TaskEvent))
def test_each_single_role(event: TaskEvent, role: TaskActor) -> None:
    if role in DOC_ACTORS[event][0].split(", "):
        authorize(event, [role])
    else:
        with pytest.raises(TaskForbiddenError) as caught:
            authorize(event, [role])
        review = event in (TaskEvent.ACCEPT, TaskEvent.REQUEST_CHANGES)
        expected = "self_review" if review and role is TaskActor.OWNER else "task_actor_forbidden"
        assert caught.value.code == expected
        assert caught.value.http_status == 403


@pytest.mark.parametrize("event", [TaskEvent.ACCEPT, TaskEvent.REQUEST_CHANGES])
def test_an_agent_cannot_review_its_own_task(event: TaskEvent) -> None:
    with pytest.raises(TaskForbiddenError) as caught:
        authorize(event, [TaskActor.OWNER, TaskActor.REVIEWER])
    assert caught.value.code == "self_review"
    authorize(event, [TaskActor.OWNER, TaskActor.REVIEWER, TaskActor.HUMAN])  # a human may


def test_no_roles_may_do_nothing() -> None:
    for event in TaskEvent:
        with pytest.raises(TaskForbiddenError):
            authorize(event, [])


@pytest.mark.parametrize("event", list(TaskEvent))
def test_notes(event: TaskEvent) -> None:
    check_note(event, "because the API changed")
    if event in NOTE_REQUIRED:
        for note in (None, "", "  \n"):
            with pytest.raises(TaskNoteRequiredError) as caught:
                check_note(event, note)
            assert caught.value.details == {"event": event, "note": NOTE_REQUIRED[event]}
    else:
        check_note(event, None)


# -- dependencies -------------------------------------------------------------------------------


def test_waiting_on_lists_every_dependency_not_accepted_in_order() -> None:
    deps = {
        "api": TaskState.ACCEPTED,
        "db": TaskState.IN_REVIEW,
        "ui": TaskState.CANCELLED,
        "ops": TaskState.ACCEPTED,
    }
    assert waiting_on(deps) == ["db", "ui"]
    assert waiting_on({}) == []


@pytest.mark.parametrize("state", list(TaskState))
def test_settle(state: TaskState) -> None:
    met = {"a": TaskState.ACCEPTED}
    unmet = {"a": TaskState.ACCEPTED, "b": TaskState.READY}
    assert settle(state, {}) == (TaskEvent.DEPS_ACCEPTED if state is TaskState.WAITING else None)
    assert settle(state, met) == settle(state, {})
    assert settle(state, unmet) == (TaskEvent.DEPS_REOPENED if state is TaskState.READY else None)
    for deps in ({}, met, unmet):  # whatever settle fires is a legal transition
        event = settle(state, deps)
        if event is not None:
            assert event in allowed_events(state)


def test_reassign_lands_in_waiting_and_settles_by_dependencies() -> None:
    state = transition(TaskState.HANDOFF, TaskEvent.REASSIGN)
    assert state is TaskState.WAITING
    assert settle(state, {"a": TaskState.IN_PROGRESS}) is None
    event = settle(state, {"a": TaskState.ACCEPTED})
    assert event is TaskEvent.DEPS_ACCEPTED
    assert transition(state, event) is TaskState.READY
