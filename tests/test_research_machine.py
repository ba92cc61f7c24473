"""The research state machine, the scope digest and the gates, exhaustively
(room.rules.research)."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from room.errors import BadRequestError
from room.rules.research import (
    ACTIVE,
    EVENT_ACTORS,
    EXPIRED,
    TERMINAL,
    TRANSITIONS,
    Approval,
    Budget,
    GateFailure,
    Proposal,
    ResearchActor,
    ResearchEvent,
    ResearchForbiddenError,
    ResearchInputError,
    ResearchReferenceError,
    ResearchState,
    ResearchTransitionError,
    RunView,
    ScopeRef,
    Spend,
    check_path,
    check_proposal,
    display_state,
    in_scope,
    reference_of,
    root_of,
    scope_digest,
    start_gate,
    step_gate,
    transition,
)

_S, _E, _A = ResearchState, ResearchEvent, ResearchActor
AGENTS = {"lead": 2, "scout": 3}
BUDGET = {"tokens": 1000, "requests": 10, "seconds": 600, "steps": 20}


def _proposal(**over: object) -> Proposal:
    data = {"question": "为什么慢？", "scope": {"paths": ["docs", "src/app"]},
            "members": ["scout"], "budget": BUDGET} | over  # fmt: skip
    return check_proposal(data, AGENTS)


def _run(state: ResearchState = _S.APPROVED, *, approval_rev: int = 1, epoch: int = 1,
         expires: float = 1000.0, spend: Spend | None = None, rev: int = 1) -> RunView:  # fmt: skip
    p = _proposal()
    approval = Approval(approval_rev, p.digest, epoch, by=1, at=0.0, expires_at=expires)
    return RunView(state, rev, p.digest, p, approval, spend or Spend())


@pytest.mark.parametrize(("state", "event"), list(itertools.product(_S, _E)))
def test_every_pair_is_a_transition_or_a_refusal(
    state: ResearchState, event: ResearchEvent
) -> None:
    actor = next(iter(EVENT_ACTORS[event]))
    if (state, event) in TRANSITIONS:
        assert transition(state, event, actor) is TRANSITIONS[(state, event)]
    else:
        with pytest.raises(ResearchTransitionError) as err:
            transition(state, event, actor)
        assert err.value.code == "research_bad_transition"


@pytest.mark.parametrize(("event", "actor"), list(itertools.product(_E, _A)))
def test_only_the_listed_actor_may_trigger(event: ResearchEvent, actor: ResearchActor) -> None:
    states = [s for (s, e) in TRANSITIONS if e is event]
    assert states, f"{event} leads nowhere"
    if actor in EVENT_ACTORS[event]:
        transition(states[0], event, actor)
    else:
        with pytest.raises(ResearchForbiddenError):
            transition(states[0], event, actor)


def test_people_act_the_system_stops_and_no_agent_actor_exists() -> None:
    assert {a.value for a in _A} == {"owner", "system"}
    for event in (_E.APPROVE, _E.START, _E.RESUME, _E.STOP, _E.PAUSE, _E.ADJUST, _E.CANCEL):
        assert EVENT_ACTORS[event] == {_A.OWNER}
    for event in (_E.HALT, _E.FINISH, _E.RECONCILE, _E.REVOKE):
        assert EVENT_ACTORS[event] == {_A.SYSTEM}


def test_terminal_states_have_no_way_out_and_revoke_reaches_the_rest() -> None:
    for (state, _), _target in TRANSITIONS.items():
        assert state not in TERMINAL
    for state in set(_S) - TERMINAL:
        assert TRANSITIONS[(state, _E.REVOKE)] is _S.REVOKED
    assert {_S.RUNNING, _S.PAUSED, _S.PAUSED_RECONCILE} == ACTIVE
    # Approving never starts anything; only a start does.
    assert TRANSITIONS[(_S.PROPOSED, _E.APPROVE)] is _S.APPROVED
    assert [k for k, v in TRANSITIONS.items() if v is _S.RUNNING and k[0] is _S.APPROVED] == [
        (_S.APPROVED, _E.START)
    ]
    # A restart's reconcile waits for a person: only resume, stop or revoke lead out.
    assert {e for (s, e) in TRANSITIONS if s is _S.PAUSED_RECONCILE} == {
        _E.RESUME, _E.STOP, _E.REVOKE}  # fmt: skip


def test_digest_is_canonical_and_covers_scope_members_and_budget() -> None:
    a = scope_digest({"paths": ["a", "b"]}, [3, 2], BUDGET)
    assert a == scope_digest({"paths": ["a", "b"]}, [2, 3], dict(reversed(BUDGET.items())))
    assert a != scope_digest({"paths": ["a"]}, [2, 3], BUDGET)
    assert a != scope_digest({"paths": ["a", "b"]}, [2], BUDGET)
    assert a != scope_digest({"paths": ["a", "b"]}, [2, 3], BUDGET | {"tokens": 1001})
    p = _proposal(members=["scout", "@lead", 3])
    assert p.members == (2, 3) and p.paths == ("docs", "src/app")
    assert p.digest == scope_digest({"paths": ["docs", "src/app"]}, [2, 3], BUDGET)


@pytest.mark.parametrize(
    ("over", "code", "field"),
    [
        ({"budget": BUDGET | {"tokens": -1}}, "research_bad_budget", "budget.tokens"),
        ({"budget": BUDGET | {"steps": 0}}, "research_bad_budget", "budget.steps"),
        ({"budget": BUDGET | {"requests": True}}, "research_bad_budget", "budget.requests"),
        ({"budget": {"tokens": 5}}, "research_bad_budget", "budget.requests"),
        ({"budget": BUDGET | {"money": 1}}, "research_bad_input", "budget.money"),
        ({"scope": {"paths": ["../etc"]}}, "research_scope_outside", "scope"),
        ({"scope": {"paths": ["/etc/passwd"]}}, "research_scope_outside", "scope"),
        ({"scope": {"paths": ["a/../../b"]}}, "research_scope_outside", "scope"),
        ({"scope": {"paths": ["C:\\x"]}}, "research_scope_outside", "scope"),
        ({"scope": {"paths": []}}, "research_bad_input", "scope"),
        ({"members": ["ghost"]}, "research_unknown_member", "members"),
        ({"members": [99]}, "research_unknown_member", "members"),
        ({"members": []}, "research_bad_input", "members"),
        ({"question": "  "}, "research_bad_input", "question"),
        ({"extra": 1}, "research_bad_input", "extra"),
    ],
)
def test_bad_input_is_refused_with_its_field(over: dict[str, Any], code: str, field: str) -> None:
    with pytest.raises(ResearchInputError) as err:
        _proposal(**over)
    assert err.value.code == code
    assert err.value.details["field"] == field
    assert err.value.http_status == 400


def test_scope_paths() -> None:
    assert check_path("./docs/") == "docs"
    assert check_path(".") == "."
    assert in_scope(["docs"], "docs/a.md") and in_scope(["docs"], "docs")
    assert not in_scope(["docs"], "docsx/a.md") and not in_scope(["docs"], "../docs/a")
    assert not in_scope(["docs"], "src/x.py") and in_scope(["."], "src/x.py")


def test_start_gate_checks_in_order() -> None:
    ok: dict[str, Any] = dict(project_state="active", epoch=1, now=10.0, tokens_left=None)
    assert start_gate(_run(), **ok) is None
    assert start_gate(_run(_S.PROPOSED), **ok) is GateFailure.WRONG_STATE
    assert (
        start_gate(_run(), **(ok | {"project_state": "paused"})) is GateFailure.PROJECT_NOT_ACTIVE
    )
    # An approval of revision 1 cannot start revision 2.
    assert start_gate(_run(rev=2), **ok) is GateFailure.REVISION_CHANGED
    assert start_gate(_run(), **(ok | {"epoch": 2})) is GateFailure.EPOCH_CHANGED
    assert start_gate(_run(expires=10.0), **ok) is GateFailure.APPROVAL_EXPIRED
    assert start_gate(_run(), **(ok | {"tokens_left": 999})) is GateFailure.BUDGET_UNAVAILABLE
    assert start_gate(_run(), **(ok | {"tokens_left": 1000})) is None
    no_approval = RunView(_S.APPROVED, 1, _proposal().digest, _proposal(), None)
    assert start_gate(no_approval, **ok) is GateFailure.NOT_APPROVED
    p = _proposal()
    forged = RunView(_S.APPROVED, 1, p.digest, p, Approval(1, "0" * 64, 1, 1, 0.0, 99.0))
    assert start_gate(forged, **ok) is GateFailure.DIGEST_MISMATCH


def test_resume_rechecks_but_an_old_expiry_does_not_strand_a_paused_run() -> None:
    ok: dict[str, Any] = dict(
        project_state="active", epoch=1, now=5000.0, tokens_left=0, resuming=True
    )
    assert start_gate(_run(_S.PAUSED_RECONCILE), **ok) is None
    assert start_gate(_run(_S.PAUSED), **ok) is None
    assert start_gate(_run(_S.APPROVED), **ok) is GateFailure.WRONG_STATE
    assert start_gate(_run(_S.PAUSED), **(ok | {"epoch": 2})) is GateFailure.EPOCH_CHANGED
    spent = _run(_S.PAUSED, spend=Spend(tokens=1000))
    assert start_gate(spent, **ok) is GateFailure.BUDGET_TOKENS


@pytest.mark.parametrize(
    ("spend", "failure"),
    [
        (Spend(tokens=999, requests=9, seconds=599.9, steps=19), None),
        (Spend(tokens=1000), GateFailure.BUDGET_TOKENS),
        (Spend(requests=10), GateFailure.BUDGET_REQUESTS),
        (Spend(seconds=600), GateFailure.BUDGET_SECONDS),
        (Spend(steps=20), GateFailure.BUDGET_STEPS),
    ],
)
def test_step_gate_budgets_are_hard_stops(spend: Spend, failure: GateFailure | None) -> None:
    assert step_gate(_run(_S.RUNNING, spend=spend), project_state="active", epoch=1) is failure


def test_step_gate_state_project_and_approval() -> None:
    assert step_gate(_run(_S.RUNNING), project_state="active", epoch=1) is None
    assert step_gate(_run(_S.PAUSED), project_state="active", epoch=1) is GateFailure.WRONG_STATE
    assert step_gate(_run(_S.RUNNING), project_state="stopping", epoch=1) is (
        GateFailure.PROJECT_NOT_ACTIVE)  # fmt: skip
    assert step_gate(_run(_S.RUNNING, rev=2), project_state="active", epoch=1) is (
        GateFailure.REVISION_CHANGED)  # fmt: skip
    # A run that started in time is not cut by its approval's expiry.
    assert step_gate(_run(_S.RUNNING, expires=0.0), project_state="active", epoch=1) is None


def test_display_state_shows_expiry() -> None:
    run = _run()
    assert display_state(_S.APPROVED, run.approval, now=999.0) == "approved"
    assert display_state(_S.APPROVED, run.approval, now=1000.0) == EXPIRED
    assert display_state(_S.RUNNING, run.approval, now=5000.0) == "running"


def test_budget_dict_round_trip() -> None:
    assert Budget(**BUDGET).as_dict() == BUDGET


# -- references in the scope ------------------------------------------------------------------------


def _ref_entry(ref_id: int, kind: str, target: str, **over: Any) -> dict[str, Any]:
    return {"id": ref_id, "project_id": 1, "kind": "reference", "archived": False,
            "body": {"ref_kind": kind, "target": target, "note": "笔记"}} | over  # fmt: skip


DOCS = ScopeRef(7, "dir", "/srv/docs/", "设计文档", real="/srv/docs")
LINK = ScopeRef(8, "url", "https://example.org/spec", "规范")


def test_a_scope_may_name_references_and_the_digest_binds_what_they_resolve_to() -> None:
    data = {"question": "q", "scope": {"references": [8, 7]}, "members": ["lead"],
            "budget": BUDGET}  # fmt: skip
    p = check_proposal(data, AGENTS, {7: DOCS, 8: LINK})
    assert p.paths == () and [r.id for r in p.references] == [7, 8]
    assert p.scope == {"paths": [], "references": [DOCS.as_dict(), LINK.as_dict()]}
    assert p.read_roots == (DOCS,) and p.read_paths == ()
    # The digest covers the target and its real path, not only the id: a reference pointing
    # elsewhere is another scope.
    moved = check_proposal(data, AGENTS, {7: ScopeRef(7, "dir", "/srv/other", "设计文档",
                                                      real="/srv/other"), 8: LINK})  # fmt: skip
    assert moved.digest != p.digest
    renoted = check_proposal(data, AGENTS, {7: DOCS, 8: ScopeRef(8, "url", LINK.target, "改")})
    assert renoted.digest != p.digest
    # A scope of paths alone digests as it did before references existed.
    plain = _proposal()
    assert plain.scope == {"paths": ["docs", "src/app"]}
    assert plain.digest == scope_digest({"paths": ["docs", "src/app"]}, [3], BUDGET)


@pytest.mark.parametrize(
    ("scope", "refs", "code"),
    [
        ({"references": [9]}, {}, "research_unknown_reference"),
        ({"references": ["7"]}, {7: DOCS}, "research_unknown_reference"),
        ({"references": [True]}, {}, "research_unknown_reference"),
        ({"references": 7}, {7: DOCS}, "research_bad_input"),
        ({"paths": ["docs"], "web": True}, {}, "research_web_unavailable"),
        ({"paths": ["docs"], "urls": ["https://x"]}, {}, "research_bad_input"),
        ({"references": []}, {}, "research_bad_input"),
    ],
)
def test_bad_references_and_the_web_are_refused(
    scope: dict[str, Any], refs: dict[int, ScopeRef], code: str
) -> None:
    data = {"question": "q", "scope": scope, "members": ["lead"], "budget": BUDGET}
    with pytest.raises(BadRequestError) as err:
        check_proposal(data, AGENTS, refs)
    assert err.value.code == code and err.value.http_status == 400


def test_reference_of_resolves_a_live_reference_of_this_project_only() -> None:
    rel = reference_of(_ref_entry(5, "dir", "./src/"), 1, 5)
    assert rel == ScopeRef(5, "dir", "./src/", "笔记", path="src")
    absolute = reference_of(_ref_entry(5, "file", "/srv/a.md"), 1, 5)
    assert absolute.path is None and absolute.real is None  # resolved on disk by the caller
    assert reference_of(_ref_entry(5, "url", "https://x"), 1, 5).path is None
    cases = [
        (None, "research_unknown_reference"),
        (_ref_entry(5, "dir", "src", project_id=2), "research_unknown_reference"),
        (_ref_entry(5, "dir", "src") | {"kind": "fact"}, "research_unknown_reference"),
        (_ref_entry(5, "dir", "src", archived=True), "research_reference_archived"),
        (_ref_entry(5, "dir", "../secrets"), "research_reference_outside"),
    ]
    for entry, code in cases:
        with pytest.raises(ResearchReferenceError) as err:
            reference_of(entry, 1, 5)
        assert err.value.code == code, entry


def test_an_absolute_path_is_read_only_inside_a_reference_root() -> None:
    one = ScopeRef(9, "file", "/srv/notes.md", real="/data/notes.md")
    assert root_of([DOCS], "/srv/docs/a/b.md") == (DOCS, "a/b.md")
    assert root_of([DOCS], "/srv/docs") == (DOCS, ".")
    assert root_of([DOCS], "/srv/docs/../secret") is None
    assert root_of([DOCS], "/srv/docsx/a") is None and root_of([DOCS], "docs/a") is None
    assert root_of([one], "/srv/notes.md") == (one, "notes.md")
    assert root_of([one], "/data/notes.md") == (one, "notes.md")
    assert root_of([one], "/data/other.md") is None
    assert root_of([LINK], "/https:") is None
