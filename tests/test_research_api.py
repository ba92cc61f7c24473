"""Research over HTTP on the real app (no model): proposals and their card, who may act, the
approval binding revision + digest + epoch, expiry, the start gate, revocation with the project's
lifecycle, the restart reconcile, the audit trail and bad input."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from room.actions import research as research_actions
from room.errors import ForbiddenError
from room.rules.entities import Member
from room.store import members as members_store
from room.store import research as research_store
from tests.support.inproc import App, Team, owner_user, running_app

BUDGET = {"tokens": 5000, "requests": 10, "seconds": 600, "steps": 10}
PROPOSAL: dict[str, Any] = {"question": "为什么启动慢？", "scope": {"paths": ["docs"]}, "members": ["lead"],
            "budget": BUDGET}  # fmt: skip


class Project(Team):
    def __init__(self, app: App) -> None:
        super().__init__(app, "研究项目")

    def propose(self, **over: Any) -> dict[str, Any]:
        status, body = self.owner("POST", f"/api/projects/{self.id}/research", PROPOSAL | over)
        assert status == 201, body
        return one(body)

    def act(self, run: dict[str, Any], op: str, who: str = "owner", **body: Any) -> tuple[int, Any]:
        status, answer = getattr(self, who)("POST", f"/api/research/{run['id']}/{op}", body)
        return status, one(answer) if status == 200 else answer

    def approve(self, run: dict[str, Any]) -> dict[str, Any]:
        status, body = self.act(run, "approve", rev=run["rev"], scope_digest=run["scope_digest"])
        assert status == 200, body
        return body

    def card(self, run: dict[str, Any]) -> dict[str, Any]:
        with self.app.db() as conn:
            frame = conn.execute("SELECT frame FROM messages WHERE id = ?",
                                 (run["card_id"],)).fetchone()[0]  # fmt: skip
        return json.loads(frame)["meta"]["research"]

    def audit(self) -> list[tuple[str, str, str, int | None]]:
        with self.app.db() as conn:
            return [tuple(r) for r in conn.execute(
                "SELECT action, outcome, actor_kind, actor_id FROM audit_events"
                " WHERE action LIKE 'research_%' ORDER BY id")]  # fmt: skip

    def state(self, run: dict[str, Any]) -> str:
        with self.app.db() as conn:
            return str(conn.execute("SELECT state FROM research_runs WHERE id = ?",
                                    (run["id"],)).fetchone()[0])  # fmt: skip


@pytest.fixture(params=["sqlite", "postgresql"])
def app(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    # The references these tests make are in tmp_path, outside the default roots
    # (<data>/workspaces): the operator's setting allows them. On each store (``[postgresql]``:
    # a fresh database of the tests' private cluster).
    url = None if request.param == "sqlite" else str(request.getfixturevalue("pg_dsn"))
    with running_app(
        tmp_path / "data", workspace_roots=(str(tmp_path),), database_url=url
    ) as handle:
        yield handle


@pytest.fixture
def project(app: App) -> Project:
    return Project(app)


def one(body: Any) -> dict[str, Any]:
    """A research answer: one run under the key ``research`` (docs/protocol.md, "Answers over HTTP")."""
    assert isinstance(body, dict) and list(body) == ["research"], body
    run = body["research"]
    assert isinstance(run, dict) and isinstance(run["id"], int)
    return run


def err(result: tuple[int, Any]) -> tuple[int, str]:
    status, body = result
    return status, body["error"]["code"]


def test_a_proposal_posts_a_card_everyone_sees(project: Project) -> None:
    run = project.propose()
    assert run["state"] == "proposed" and run["rev"] == 1 and len(run["scope_digest"]) == 64
    assert run["members"][0]["handle"] == "lead" and run["budget"] == BUDGET
    assert run["events"] == ["approve", "reject", "cancel", "adjust"] or set(run["events"]) == {
        "adjust", "approve", "reject", "cancel"}  # fmt: skip
    card = project.card(run)
    assert card["state"] == "proposed" and card["scope_digest"] == run["scope_digest"]
    status, listed = project.member("GET", f"/api/projects/{project.id}/research")
    assert status == 200 and [r["id"] for r in listed["research"]] == [run["id"]]
    status, seen = project.agent("GET", f"/api/research/{run['id']}")
    assert status == 200 and one(seen)["revisions"][0]["digest"] == run["scope_digest"]


def test_only_an_owner_acts_agents_and_members_are_refused(project: Project) -> None:
    run = project.propose()
    for op in ("approve", "reject", "cancel", "start", "stop", "adjust"):
        assert err(project.act(run, op, "agent")) == (403, "research_people_only")
        assert err(project.act(run, op, "member", rev=1, scope_digest=run["scope_digest"])) == (
            403, "research_not_owner")  # fmt: skip
    # An agent cannot propose over HTTP either (its tool is the way).
    assert err(project.agent("POST", f"/api/projects/{project.id}/research", PROPOSAL)) == (
        403, "research_people_only")  # fmt: skip
    assert project.state(run) == "proposed"
    refused = [a for a in project.audit() if a[1] == "refused"]
    assert len(refused) == 13
    assert sum(a[2] == "human" for a in refused) == 6
    assert all(a[3] == project.members["lead"].id for a in refused if a[2] == "agent")


def test_only_an_owner_settles_a_flowback_into_project_memory(project: Project) -> None:
    """Issue 28, item 4: accepting a finding writes project memory, so it follows the rule of
    approval: a plain member is refused (403, structured, audited) and nothing is written."""
    run = project.propose()

    def finding(conn: Any, tx: Any) -> int:
        item = research_store.add_item(
            conn, project_id=project.id, research_id=run["id"], member_id=None,
            kind="finding", body="配置读了两次", sources=["docs/start.md:3"], now=tx.now,
        )  # fmt: skip
        research_store.set_flow(conn, item, "proposed", by=project.members["lead"].id)
        return item

    item = project.app.write(finding)
    path = f"/api/research/items/{item}/flowback"
    for decision in ("accept", "reject"):
        status, body = project.member("POST", path, {"decision": decision})
        assert (status, body["error"]["code"]) == (403, "research_not_owner"), body
        assert "所有者" in body["error"]["message"]
        assert err(project.agent("POST", path, {"decision": decision})) == (
            403, "research_people_only")  # fmt: skip
    facts = project.owner("GET", f"/api/projects/{project.id}/memory")[1]["facts"]
    assert facts == []
    refused = [a for a in project.audit() if a[1] == "refused"]
    assert [a[0] for a in refused if a[2] == "human"] == [
        "research_flowback_accept", "research_flowback_reject"]  # fmt: skip
    # The owner's answer is what writes the fact.
    status, settled = project.owner("POST", path, {"decision": "accept"})
    assert (status, settled["item"]["flow"]) == (200, "accepted"), settled
    assert list(settled) == ["item"]
    [fact] = project.owner("GET", f"/api/projects/{project.id}/memory")[1]["facts"]
    assert "配置读了两次" in fact["body"]["text"] and fact["author"]["kind"] == "human"


def test_chat_text_saying_i_approve_changes_nothing(project: Project) -> None:
    run = project.propose()
    for who in ("owner", "agent"):
        status, _ = getattr(project, who)(
            "POST", f"/api/projects/{project.id}/messages",
            {"body": f"I approve research {run['id']}，我批准，开始研究", "client_txn_id": who},
        )  # fmt: skip
        assert status == 201
    assert project.state(run) == "proposed" and project.card(run)["approval"] is None


def test_approval_binds_revision_and_digest_and_records_the_person(project: Project) -> None:
    run = project.propose()
    assert err(project.act(run, "approve", rev=1, scope_digest="0" * 64)) == (
        409,
        "digest_mismatch",
    )
    assert err(project.act(run, "approve")) == (409, "stale_revision")
    approved = project.approve(run)
    assert approved["state"] == "approved"
    assert approved["approval"]["by"]["handle"] == "owner" and approved["approval"]["rev"] == 1
    assert approved["approval"]["digest"] == run["scope_digest"]
    # Approving starts nothing.
    with project.app.db() as conn:
        assert conn.execute("SELECT count(*) FROM model_requests").fetchone()[0] == 0
    # Adjusting makes revision 2 and voids the approval of revision 1: it cannot start.
    status, adjusted = project.act(
        run, "adjust", rev=1, **(PROPOSAL | {"budget": BUDGET | {"steps": 5}})
    )
    assert status == 200 and adjusted["rev"] == 2 and adjusted["state"] == "proposed"
    assert adjusted["approval"] is None and adjusted["scope_digest"] != run["scope_digest"]
    assert err(project.act(run, "start")) == (409, "research_bad_transition")
    # The old revision's digest cannot approve the new one.
    assert err(project.act(run, "approve", rev=2, scope_digest=run["scope_digest"])) == (
        409, "digest_mismatch")  # fmt: skip
    assert err(project.act(run, "approve", rev=1, scope_digest=run["scope_digest"])) == (
        409, "stale_revision")  # fmt: skip
    actions = [a[0] for a in project.audit() if a[1] == "ok"]
    assert actions == ["research_propose", "research_approve", "research_adjust"]


def test_an_expired_approval_is_refused_at_the_gate(project: Project) -> None:
    run = project.approve(project.propose())
    with project.app.db() as conn:
        conn.execute("UPDATE research_runs SET expires_at = 1 WHERE id = ?", (run["id"],))
    status, body = project.act(run, "start")
    assert (status, body["error"]["code"]) == (409, "research_gate")
    assert body["error"]["details"]["failure"] == "approval_expired"
    assert project.state(run) == "approved"
    assert ("research_gate", "refused", "human", project.members["owner"].id) in project.audit()


def test_the_start_gate_reserves_the_projects_token_budget(project: Project) -> None:
    status, _ = project.owner("POST", f"/api/projects/{project.id}/limits",
                              {"token_budget": 4000})  # fmt: skip
    assert status == 200
    run = project.approve(project.propose())
    status, body = project.act(run, "start")
    assert status == 409 and body["error"]["details"]["failure"] == "budget_unavailable"


def test_trash_revokes_and_a_restored_project_cannot_reuse_the_approval(project: Project) -> None:
    run = project.approve(project.propose())
    status, body = project.owner("POST", f"/api/projects/{project.id}/lifecycle", {"op": "trash"})
    assert status == 200, body
    assert project.state(run) == "revoked" and project.card(run)["approval"] is None
    assert body["research_revoked"] == []
    status, _ = project.owner("POST", f"/api/projects/{project.id}/lifecycle", {"op": "restore"})
    assert status == 200
    project.owner("POST", f"/api/projects/{project.id}/lifecycle", {"op": "resume"})
    assert err(project.act(run, "start")) == (409, "research_bad_transition")
    assert ("research_revoke", "ok", "human", project.members["owner"].id) in project.audit()


def test_a_restored_project_voids_an_approval_by_epoch(project: Project) -> None:
    """Even an approval that was somehow kept binds the old epoch: the gate refuses it."""
    run = project.approve(project.propose())
    with project.app.db() as conn:
        conn.execute("UPDATE projects SET epoch = epoch + 1 WHERE id = ?", (project.id,))
    _status, body = project.act(run, "start")
    assert body["error"]["details"]["failure"] == "epoch_changed"


@pytest.mark.parametrize(
    ("over", "code", "field"),
    [
        ({"budget": BUDGET | {"tokens": -1}}, "research_bad_budget", "budget.tokens"),
        ({"scope": {"paths": ["../../etc"]}}, "research_scope_outside", "scope"),
        ({"members": ["nobody"]}, "research_unknown_member", "members"),
    ],
)
def test_bad_input_is_refused_with_a_clear_error(
    project: Project, over: dict[str, Any], code: str, field: str
) -> None:
    status, body = project.owner("POST", f"/api/projects/{project.id}/research", PROPOSAL | over)
    assert status == 400 and body["error"]["code"] == code
    assert body["error"]["details"]["field"] == field and body["error"]["message"]
    with project.app.db() as conn:
        assert conn.execute("SELECT count(*) FROM research_runs").fetchone()[0] == 0


def test_a_run_active_at_restart_waits_in_paused_reconcile(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with running_app(data) as app:
        project = Project(app)
        run = project.approve(project.propose())
        with app.db() as conn:  # as if the server died mid-run
            conn.execute("UPDATE research_runs SET state = 'running', running_since = 1,"
                         " updated_at = 1 WHERE id = ?", (run["id"],))  # fmt: skip
    with running_app(data) as app:
        project.app = app
        project.app.owner_cookie = app.owner_cookie
        assert project.state(run) == "paused_reconcile"
        card = project.card(run)
        assert card["state"] == "paused_reconcile" and set(card["events"]) == {"resume", "stop"}
        with app.db() as conn:
            assert conn.execute("SELECT count(*) FROM model_requests").fetchone()[0] == 0
        assert ("research_reconcile", "ok", "system", None) in project.audit()
        status, stopped = project.act(run, "stop")
        assert status == 200 and stopped["state"] == "stopped"


# -- references in the scope ------------------------------------------------------------------------


def add_reference(project: Project, kind: str, target: str, note: str = "") -> dict[str, Any]:
    status, entry = project.owner("POST", f"/api/projects/{project.id}/memory/reference",
                                  {"ref_kind": kind, "target": target, "note": note})  # fmt: skip
    assert status == 201, entry
    return dict(entry["entry"])


def test_unknown_archived_and_unreadable_references_and_the_web_are_refused(
    project: Project, tmp_path: Path
) -> None:
    fact_status, fact = project.owner("POST", f"/api/projects/{project.id}/memory/fact",
                                      {"text": "不是参考"})  # fmt: skip
    assert fact_status == 201
    archived = add_reference(project, "dir", "old/")
    assert project.owner("POST", f"/api/memory/{archived['id']}/archive")[0] == 200
    outside = add_reference(project, "dir", "/etc")
    missing = add_reference(project, "dir", str(tmp_path / "nowhere"))
    escape = add_reference(project, "file", "../secret.txt")
    cases = [
        ({"references": [99_999]}, "research_unknown_reference"),
        ({"references": [fact["entry"]["id"]]}, "research_unknown_reference"),
        ({"references": [archived["id"]]}, "research_reference_archived"),
        ({"references": [outside["id"]]}, "research_reference_outside"),
        ({"references": [missing["id"]]}, "research_reference_missing"),
        ({"references": [escape["id"]]}, "research_reference_outside"),
        ({"paths": ["docs"], "web": True}, "research_web_unavailable"),
    ]
    for scope, code in cases:
        status, body = project.owner("POST", f"/api/projects/{project.id}/research",
                                     PROPOSAL | {"scope": scope})  # fmt: skip
        assert (status, body["error"]["code"]) == (400, code), scope
        assert body["error"]["message"] and body["error"]["details"]["field"].startswith("scope")
    # Another project's reference is unknown here.
    other_id, _, _ = project.app.project_with("别的项目", owner_user(project.app))
    status, theirs = project.owner("POST", f"/api/projects/{other_id}/memory/reference",
                                   {"ref_kind": "dir", "target": "src"})  # fmt: skip
    assert status == 201
    status, body = project.owner("POST", f"/api/projects/{project.id}/research",
                                 PROPOSAL | {"scope": {"references": [theirs["entry"]["id"]]}})  # fmt: skip
    assert (status, body["error"]["code"]) == (400, "research_unknown_reference")
    with project.app.db() as conn:
        assert conn.execute("SELECT count(*) FROM research_runs").fetchone()[0] == 0


def test_a_reference_is_bound_as_it_resolved_and_an_edit_does_not_change_the_approved_run(
    project: Project, tmp_path: Path
) -> None:
    docs = tmp_path / "refdocs"
    docs.mkdir()
    ref = add_reference(project, "dir", str(docs) + "/", "设计文档")
    link = add_reference(project, "url", "https://example.org/spec", "规范")
    run = project.propose(scope={"paths": ["docs"], "references": [link["id"], ref["id"]]})
    refs = run["scope"]["references"]
    assert [r["id"] for r in refs] == sorted([ref["id"], link["id"]])
    bound = next(r for r in refs if r["id"] == ref["id"])
    assert bound["real"] == str(docs.resolve()) and bound["kind"] == "dir"
    assert project.card(run)["scope"] == run["scope"]
    project.approve(run)
    # The reference now points elsewhere: the approved run's scope and digest stay as approved.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    status, _ = project.owner("PATCH", f"/api/memory/{ref['id']}",
                              {"rev": ref["rev"], "target": str(elsewhere)})  # fmt: skip
    assert status == 200
    status, seen = project.owner("GET", f"/api/research/{run['id']}")
    seen = one(seen)
    assert seen["scope"] == run["scope"] and seen["scope_digest"] == run["scope_digest"]
    with project.app.db() as conn:
        details = [json.loads(r[0]) for r in conn.execute(
            "SELECT detail_json FROM audit_events WHERE action IN ('research_propose',"
            " 'research_approve') ORDER BY id")]  # fmt: skip
    assert [d["scope"] for d in details] == [run["scope"], run["scope"]]


def test_adjusting_references_makes_a_new_revision_and_voids_the_approval(
    project: Project, tmp_path: Path
) -> None:
    (tmp_path / "refdocs").mkdir()
    ref = add_reference(project, "dir", str(tmp_path / "refdocs"))
    run = project.propose()
    project.approve(run)
    body = {"rev": 1, **PROPOSAL, "scope": {"paths": ["docs"], "references": [ref["id"]]}}
    status, adjusted = project.act(run, "adjust", **body)
    assert status == 200, adjusted
    assert adjusted["rev"] == 2 and adjusted["state"] == "proposed"
    assert adjusted["approval"] is None and adjusted["scope_digest"] != run["scope_digest"]
    assert [r["id"] for r in adjusted["scope"]["references"]] == [ref["id"]]
    # The approval of revision 1 cannot be used for revision 2.
    assert err(project.act(run, "start")) == (409, "research_bad_transition")
    assert err(project.act(adjusted, "approve", rev=1, scope_digest=run["scope_digest"])) == (
        409, "stale_revision")  # fmt: skip
    assert err(project.act(adjusted, "adjust", **(body | {"rev": 2, "scope": {
        "references": [ref["id"], 424242]}}))) == (400, "research_unknown_reference")  # fmt: skip
    with project.app.db() as conn:
        [detail] = [json.loads(r[0]) for r in conn.execute(
            "SELECT detail_json FROM audit_events WHERE action = 'research_adjust'")]  # fmt: skip
    assert detail["scope"] == adjusted["scope"] and detail["approval_voided"] is True


def test_who_may_act_is_checked_before_the_references(project: Project) -> None:
    """A plain member adjusting, or an agent that is not the lead proposing, with a reference that
    does not resolve is refused for who they are (403), not for the reference (400)."""
    run = project.propose()
    outside = add_reference(project, "dir", "/etc")
    bad_scopes = [{"references": [99_999]}, {"references": [outside["id"]]}]
    for scope in bad_scopes:
        body = PROPOSAL | {"rev": 1, "scope": scope}
        assert err(project.act(run, "adjust", "member", **body)) == (403, "research_not_owner")
        # The owner is told about the reference.
        assert err(project.act(run, "adjust", **body))[0] == 400

    def second_agent(conn: Any, tx: Any) -> Member:
        member_id = members_store.insert(
            conn, project_id=project.id, kind="agent", user_id=None, role="worker",
            handle="scout", display_name="侦察", now=tx.now,
        )  # fmt: skip
        found = members_store.get(conn, member_id)
        assert found is not None
        return found

    scout = project.app.write(second_agent)
    for scope in bad_scopes:
        with pytest.raises(ForbiddenError) as refused:
            project.app.call(research_actions.propose, project.app.core, scout,
                             PROPOSAL | {"scope": scope})  # fmt: skip
        assert refused.value.code == "research_not_lead"
    refusals = [a for a in project.audit() if a[1] == "refused"]
    assert [a[2] for a in refusals] == ["human", "human", "agent", "agent"]
    assert project.state(run) == "proposed" and project.card(run)["rev"] == 1


def test_the_list_offers_the_proposal_forms_budget(project: Project) -> None:
    """The form's suggested budget comes from the settings, held to the caps and to what the
    project's own token budget has left; every member may read it."""
    status, listed = project.member("GET", f"/api/projects/{project.id}/research")
    assert status == 200
    assert listed["budget"] == {
        "default": {"tokens": 200_000, "requests": 60, "seconds": 1800, "steps": 60},
        "max": {"tokens": 50_000_000, "requests": 10_000, "seconds": 604_800, "steps": 10_000},
        "tokens_left": None,
    }
    assert project.owner("POST", f"/api/projects/{project.id}/limits",
                         {"token_budget": 30_000})[0] == 200  # fmt: skip
    budget = project.owner("GET", f"/api/projects/{project.id}/research")[1]["budget"]
    assert budget["default"]["tokens"] == 30_000 and budget["tokens_left"] == 30_000
