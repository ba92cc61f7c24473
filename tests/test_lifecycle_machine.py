"""The project and member lifecycle machines, exhaustively, against docs/lifecycle.md."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

import pytest

from room.errors import BadRequestError, ConflictError, ForbiddenError
from room.rules.lifecycle import (
    ADMISSION,
    MEMBER_ACTOR_REFUSALS,
    MEMBER_OPS_STATES,
    MEMBER_REFUSALS,
    MEMBER_TRANSITIONS,
    PROJECT_ACTOR_REFUSALS,
    PROJECT_REFUSALS,
    PROJECT_TRANSITIONS,
    REASON_MESSAGES,
    ActorKind,
    LifecycleConflictError,
    LifecycleForbiddenError,
    MemberOp,
    MemberStatus,
    PendingStop,
    Procedure,
    ProjectOp,
    ProjectState,
    PurgeConfirmationError,
    Remembered,
    admission_open,
    check_purge_request,
    decide,
    decide_member,
    dispatch_open,
    finish_purge,
    finish_stop,
    member_ops,
    member_ops_by_viewer,
    posting_open,
    project_ops,
    project_ops_by_kind,
    state_after_restart,
)
from tests.support.doctables import read_table as doc_table


def read_table(name: str) -> tuple[list[str], list[list[str]]]:
    return doc_table("lifecycle.md", name)


class Cell(NamedTuple):
    allowed: bool
    value: str  # the target when allowed, the reason code when refused
    procedure: str = "none"


def parse_cell(text: str) -> Cell:
    if text.startswith("✗ "):
        return Cell(False, text.removeprefix("✗ "))
    assert text.startswith("→ "), text
    target, _, rest = text.removeprefix("→ ").partition(" ")
    return Cell(True, target, rest.strip("()") or "none")


def read_matrix(name: str) -> dict[tuple[str, str], Cell]:
    header, body = read_table(name)
    return {
        (row[0], op): parse_cell(cell)
        for row in body
        for op, cell in zip(header[1:], row[1:], strict=True)
    }


def module_matrix(
    transitions: Mapping[Any, Any], refusals: Mapping[Any, str]
) -> dict[tuple[str, str], Cell]:
    table: dict[tuple[str, str], Cell] = {}
    for (state, op), t in transitions.items():
        table[(str(state), str(op))] = Cell(True, str(t.target), str(t.procedure))
    for (state, op), reason in refusals.items():
        table[(str(state), str(op))] = Cell(False, reason)
    return table


PROJECT_DOC = read_matrix("project-transitions")
MEMBER_DOC = read_matrix("member-transitions")
PROJECT_ACTORS_DOC = {row[0]: row[1] for row in read_table("project-actors")[1]}
MEMBER_ACTORS_DOC = {(row[0], row[1] == "yes"): row[2] for row in read_table("member-actors")[1]}

# A remembered stop that differs from both ends of every fixed transition, so a test cannot pass
# by accident when retry/cancel resolve the remembered target wrongly.
PENDING = PendingStop(target=ProjectState.ARCHIVED, from_state=ProjectState.PAUSED)


# -- the docs are the code ----------------------------------------------------------------------


def test_project_table_in_docs_equals_module() -> None:
    header, body = read_table("project-transitions")
    assert header[1:] == list(ProjectOp)
    assert [row[0] for row in body] == list(ProjectState)
    assert module_matrix(PROJECT_TRANSITIONS, PROJECT_REFUSALS) == PROJECT_DOC


def test_member_table_in_docs_equals_module() -> None:
    header, body = read_table("member-transitions")
    assert header[1:] == list(MemberOp)
    assert [row[0] for row in body] == list(MemberStatus)
    assert module_matrix(MEMBER_TRANSITIONS, MEMBER_REFUSALS) == MEMBER_DOC


def test_actor_tables_in_docs_equal_module() -> None:
    assert set(PROJECT_ACTORS_DOC) == set(ActorKind)
    documented = {a: c.removeprefix("✗ ") for a, c in PROJECT_ACTORS_DOC.items() if "✗" in c}
    assert documented == {str(a): r for a, r in PROJECT_ACTOR_REFUSALS.items()}
    assert set(MEMBER_ACTORS_DOC) == {(str(a), s) for a in ActorKind for s in (False, True)}
    documented_m = {k: c.removeprefix("✗ ") for k, c in MEMBER_ACTORS_DOC.items() if "✗" in c}
    assert documented_m == {(str(a), s): r for (a, s), r in MEMBER_ACTOR_REFUSALS.items()}


def test_admission_table_in_docs_equals_module() -> None:
    header, body = read_table("admission")
    assert header == ["state", "humans post", "agents post", "wakes", "dispatch"]
    documented = {row[0]: tuple(cell == "yes" for cell in row[1:]) for row in body}
    assert documented == {
        str(s): (a.humans_post, a.agents_post, a.wakes, a.dispatch) for s, a in ADMISSION.items()
    }


def test_reason_table_in_docs_equals_module() -> None:
    _, body = read_table("reasons")
    assert {row[0]: row[1] for row in body} == dict(REASON_MESSAGES)


def test_every_refusal_has_a_message() -> None:
    used = (
        set(PROJECT_REFUSALS.values())
        | set(MEMBER_REFUSALS.values())
        | set(PROJECT_ACTOR_REFUSALS.values())
        | set(MEMBER_ACTOR_REFUSALS.values())
    )
    assert used == set(REASON_MESSAGES)


# -- exhaustive: every (state, op, actor) ------------------------------------------------------


@pytest.mark.parametrize("actor", list(ActorKind))
@pytest.mark.parametrize("op", list(ProjectOp))
@pytest.mark.parametrize("state", list(ProjectState))
def test_project_decision(state: ProjectState, op: ProjectOp, actor: ActorKind) -> None:
    decision = decide(state, op, actor, pending=PENDING)
    assert (decision.state, decision.op) == (state, op)
    documented_actor = PROJECT_ACTORS_DOC[actor]
    cell = (
        parse_cell(documented_actor)
        if documented_actor != "per state table"
        else PROJECT_DOC[(state, op)]
    )
    if not cell.allowed:
        assert not decision.allowed
        assert decision.reason == cell.value
        assert decision.message == REASON_MESSAGES[cell.value]
        assert decision.target is None and decision.from_state is None
        assert decision.procedure is Procedure.NONE and decision.interim is None
        expected_error = (
            LifecycleForbiddenError if actor is not ActorKind.OWNER else LifecycleConflictError
        )
        with pytest.raises(expected_error) as caught:
            decision.raise_if_refused()
        assert caught.value.code == cell.value
        assert caught.value.details == {"state": state, "op": op}
        return

    assert decision.allowed and decision.reason is None
    assert decision.procedure == cell.procedure
    if cell.value == Remembered.TARGET:
        assert decision.target is PENDING.target
        assert decision.from_state is PENDING.from_state
    elif cell.value == Remembered.FROM:
        assert decision.target is PENDING.from_state
        assert decision.from_state is None
    else:
        assert decision.target == cell.value
        assert decision.from_state == (state if cell.procedure == "stop" else None)
    assert decision.needs_stop is (cell.procedure == "stop")
    assert decision.interim == (ProjectState.STOPPING if cell.procedure == "stop" else None)
    decision.raise_if_refused()  # allowed: no error


def test_only_owners_are_ever_allowed() -> None:
    allowed_actors = {
        actor
        for state in ProjectState
        for op in ProjectOp
        for actor in ActorKind
        if decide(state, op, actor, pending=PENDING).allowed
    }
    assert allowed_actors == {ActorKind.OWNER}


@pytest.mark.parametrize("is_self", [False, True])
@pytest.mark.parametrize("actor", list(ActorKind))
@pytest.mark.parametrize("op", list(MemberOp))
@pytest.mark.parametrize("status", list(MemberStatus))
def test_member_decision(
    status: MemberStatus, op: MemberOp, actor: ActorKind, is_self: bool
) -> None:
    decision = decide_member(status, op, actor, is_self=is_self)
    documented_actor = MEMBER_ACTORS_DOC[(actor, is_self)]
    cell = (
        parse_cell(documented_actor)
        if documented_actor != "per status table"
        else MEMBER_DOC[(status, op)]
    )
    if not cell.allowed:
        assert not decision.allowed
        assert decision.reason == cell.value
        assert decision.message == REASON_MESSAGES[cell.value]
        assert decision.target is None and decision.procedure is Procedure.NONE
        with pytest.raises((ForbiddenError, ConflictError)) as caught:
            decision.raise_if_refused()
        assert caught.value.code == cell.value
        return
    assert decision.allowed and decision.reason is None
    assert decision.target == cell.value
    assert decision.procedure == cell.procedure
    assert decision.interim is None  # members have no interim status


def test_agents_cannot_manage_even_themselves() -> None:
    for op in MemberOp:
        decision = decide_member(MemberStatus.ACTIVE, op, ActorKind.AGENT, is_self=True)
        assert decision.reason == "agent_forbidden"


# -- stop sequences -----------------------------------------------------------------------------


def test_pause_that_does_not_confirm_can_be_retried_then_lands() -> None:
    decision = decide(ProjectState.ACTIVE, ProjectOp.PAUSE, ActorKind.OWNER)
    assert decision.interim is ProjectState.STOPPING
    assert decision.target is ProjectState.PAUSED
    assert decision.from_state is ProjectState.ACTIVE
    state = finish_stop(decision.target, all_stopped=False)
    assert state is ProjectState.STOP_UNCONFIRMED

    pending = PendingStop(decision.target, decision.from_state)
    retry = decide(state, ProjectOp.RETRY_STOP, ActorKind.OWNER, pending=pending)
    assert retry.needs_stop and retry.target is ProjectState.PAUSED
    assert retry.from_state is ProjectState.ACTIVE  # still the state before the first stop
    assert finish_stop(retry.target, all_stopped=True) is ProjectState.PAUSED


def test_cancel_returns_to_the_state_before_the_stop() -> None:
    decision = decide(ProjectState.PAUSED, ProjectOp.TRASH, ActorKind.OWNER)
    assert decision.target is not None and decision.from_state is not None
    pending = PendingStop(decision.target, decision.from_state)
    cancel = decide(
        ProjectState.STOP_UNCONFIRMED, ProjectOp.CANCEL_STOP, ActorKind.OWNER, pending=pending
    )
    assert cancel.target is ProjectState.PAUSED
    assert cancel.procedure is Procedure.NONE


@pytest.mark.parametrize("op", [ProjectOp.RETRY_STOP, ProjectOp.CANCEL_STOP])
def test_retry_or_cancel_without_remembered_stop_is_a_programming_error(op: ProjectOp) -> None:
    with pytest.raises(ValueError, match="pending stop"):
        decide(ProjectState.STOP_UNCONFIRMED, op, ActorKind.OWNER)


@pytest.mark.parametrize(
    "target",
    [
        ProjectState.PAUSED,
        ProjectState.ARCHIVED,
        ProjectState.TRASHED,
        ProjectState.COMPLETE,
        ProjectState.ABANDONED,
    ],
)
def test_finish_stop(target: ProjectState) -> None:
    assert finish_stop(target, all_stopped=True) is target
    assert finish_stop(target, all_stopped=False) is ProjectState.STOP_UNCONFIRMED


@pytest.mark.parametrize(
    "target",
    [
        s
        for s in ProjectState
        if s not in {"paused", "archived", "trashed", "complete", "abandoned"}
    ],
)
def test_finish_stop_rejects_targets_no_stop_leads_to(target: ProjectState) -> None:
    with pytest.raises(ValueError):
        finish_stop(target, all_stopped=True)


def test_finish_purge() -> None:
    assert finish_purge(all_released=True) is ProjectState.PURGED
    assert finish_purge(all_released=False) is ProjectState.PURGE_BLOCKED


def test_restart_turns_an_interrupted_stop_into_unconfirmed() -> None:
    assert state_after_restart(ProjectState.STOPPING) is ProjectState.STOP_UNCONFIRMED
    for state in ProjectState:
        if state is not ProjectState.STOPPING:
            assert state_after_restart(state) is state


def test_string_values_from_the_database_are_accepted_and_unknown_ones_refused() -> None:
    decision = decide("active", "pause", "owner")  # type: ignore[arg-type]
    assert decision.target is ProjectState.PAUSED
    with pytest.raises(ValueError):
        decide("frozen", "pause", "owner")  # type: ignore[arg-type]


# -- purge confirmation -------------------------------------------------------------------------


def test_purge_request_with_exact_name_and_confirmation_passes() -> None:
    check_purge_request("前端重构 Q3", "前端重构 Q3", confirmed=True)


@pytest.mark.parametrize(
    ("typed", "confirmed", "code"),
    [
        ("前端重构 Q3 ", True, "purge_name_mismatch"),  # trailing space is not trimmed
        ("前端重构 q3", True, "purge_name_mismatch"),  # no case folding
        ("前端重构", True, "purge_name_mismatch"),  # a prefix is not the full name
        ("", True, "purge_name_mismatch"),
        ("前端重构 Q3", False, "purge_not_confirmed"),
        ("wrong", False, "purge_name_mismatch"),  # the name is checked first
    ],
)
def test_purge_request_refusals(typed: str, confirmed: bool, code: str) -> None:
    with pytest.raises(PurgeConfirmationError) as caught:
        check_purge_request("前端重构 Q3", typed, confirmed)
    assert caught.value.code == code
    assert isinstance(caught.value, BadRequestError)


def test_purge_confirmation_must_be_literally_true() -> None:
    with pytest.raises(PurgeConfirmationError):
        check_purge_request("p", "p", "yes")  # type: ignore[arg-type]


# -- posting ------------------------------------------------------------------------------------


@pytest.mark.parametrize("state", list(ProjectState))
def test_posting_and_admission_functions_follow_the_table(state: ProjectState) -> None:
    rule = ADMISSION[state]
    assert posting_open(state, ActorKind.OWNER) is rule.humans_post
    assert posting_open(state, ActorKind.MEMBER) is rule.humans_post
    assert posting_open(state, ActorKind.AGENT) is rule.agents_post
    assert admission_open(state) is rule.wakes
    assert dispatch_open(state) is rule.dispatch


def test_only_active_wakes_and_humans_may_still_post_when_paused() -> None:
    assert [s for s in ProjectState if admission_open(s)] == [ProjectState.ACTIVE]
    assert [s for s in ProjectState if dispatch_open(s)] == [ProjectState.ACTIVE]
    assert posting_open(ProjectState.PAUSED, ActorKind.MEMBER)
    assert not posting_open(ProjectState.PAUSED, ActorKind.AGENT)
    assert not posting_open(ProjectState.ARCHIVED, ActorKind.OWNER)


# -- what a viewer is offered -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "owner", "member"),
    [
        ("active", ["pause", "archive", "complete", "abandon", "trash", "post"], ["post"]),
        ("paused", ["resume", "archive", "complete", "abandon", "trash", "post"], ["post"]),
        ("stopping", [], []),
        ("stop_unconfirmed", ["retry_stop", "cancel_stop"], []),
        ("archived", ["trash", "restore"], []),
        ("complete", ["trash", "restore"], []),
        ("abandoned", ["trash", "restore"], []),
        ("trashed", ["restore", "purge"], []),
        ("purge_blocked", ["purge"], []),
        ("purged", [], []),
    ],
)
def test_project_ops_per_state_and_viewer(state: str, owner: list[str], member: list[str]) -> None:
    assert project_ops(ProjectState(state), ActorKind.OWNER) == owner
    assert project_ops(ProjectState(state), ActorKind.MEMBER) == member
    assert project_ops_by_kind(ProjectState(state)) == {
        "owner": owner,
        "member": member,
        "agent": ["post"] if state == "active" else [],
    }


@pytest.mark.parametrize("state", list(ProjectState))
@pytest.mark.parametrize("actor", list(ActorKind))
def test_project_ops_are_exactly_what_decide_allows(state: ProjectState, actor: ActorKind) -> None:
    pending = PendingStop(ProjectState.PAUSED, ProjectState.ACTIVE)
    allowed = [op.value for op in ProjectOp if decide(state, op, actor, pending=pending).allowed]
    posting = ["post"] if posting_open(state, actor) else []
    assert project_ops(state, actor) == allowed + posting


def test_member_ops_for_owner_member_and_self() -> None:
    active, paused = MemberStatus.ACTIVE, MemberStatus.PAUSED
    owner, member = ActorKind.OWNER, ActorKind.MEMBER
    # An owner on an agent: pause/stop/leave while active, resume/stop/leave while paused.
    assert member_ops("active", active, "agent", owner, is_self=False) == ["pause", "stop", "leave"]
    assert member_ops("paused", paused, "agent", owner, is_self=False) == [
        "resume",
        "stop",
        "leave",
    ]
    # A person runs no turn: nothing to stop.
    assert member_ops("active", active, "human", owner, is_self=False) == ["pause", "leave"]
    # Another member may do nothing to someone else, but may manage themself.
    assert member_ops("active", active, "agent", member, is_self=False) == []
    assert member_ops("active", active, "human", member, is_self=True) == ["pause", "leave"]
    # Agents never, not even to themselves; nobody, once left.
    assert member_ops("active", active, "agent", ActorKind.AGENT, is_self=True) == []
    assert member_ops("active", MemberStatus.LEFT, "agent", owner, is_self=False) == []


def test_member_ops_only_while_the_project_is_open_or_stopping() -> None:
    from room.store.projects import MEMBER_OPEN_STATES

    assert {str(s) for s in MEMBER_OPS_STATES} == MEMBER_OPEN_STATES
    for state in ProjectState:
        ops = member_ops(state, MemberStatus.ACTIVE, "agent", ActorKind.OWNER, is_self=False)
        assert ops == (["pause", "stop", "leave"] if state in MEMBER_OPS_STATES else [])


def test_member_ops_by_viewer() -> None:
    assert member_ops_by_viewer("active", MemberStatus.ACTIVE, "human", ActorKind.MEMBER) == {
        "owner": ["pause", "leave"],
        "member": [],
        "self": ["pause", "leave"],
    }
    assert member_ops_by_viewer("archived", MemberStatus.ACTIVE, "agent", ActorKind.AGENT) == {
        "owner": [],
        "member": [],
        "self": [],
    }
