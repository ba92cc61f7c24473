"""The delivery ledger's rules, exhaustively (room/rules/ledger.py is pure), and the places they
reach: the migration that gave old rows a reason code, the one write that opens a turn, and the
``delivery`` frame over a real /ws."""

from __future__ import annotations

import time
import uuid
from itertools import product
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from room.actions import brakes as brake_actions
from room.actions import turns as turn_actions
from room.actions.deliveries import settle_via_unknown
from room.rules import ledger
from room.rules.ledger import (
    ALLOWED_FROM,
    OPEN_STATES,
    REASON_TEXTS,
    DeliveryState,
    Reason,
    dispatch_blocker,
    initial_state,
    waiting_state,
)
from room.rules.lifecycle import MemberStatus, ProjectState
from room.store import brakes as brakes_store
from room.store.migrate import connect, migrate
from room.store.schema import MIGRATIONS
from tests.support.inproc import App, owner_user, running_app, wait_until
from tests.support.live_room import Room
from tests.support.llm_servers import error
from tests.support.wsclient import Client

D = DeliveryState
P, H, DL, C, U, F, X = (
    D.PENDING,
    D.HELD,
    D.DELIVERED,
    D.CONSUMED,
    D.UNKNOWN,
    D.FAILED,
    D.CANCELLED,
)

# (from, to) pairs the ledger allows; every other pair is refused.
EXPECTED_ALLOWED = {
    (H, P), (DL, P), (U, P),
    (P, H), (DL, H), (U, H),
    (P, DL), (U, DL),
    (P, C), (DL, C), (U, C),
    (P, U), (DL, U),
    (P, F), (H, F), (DL, F), (U, F),
    (P, X), (H, X), (DL, X), (U, X),
}  # fmt: skip


@pytest.mark.parametrize(("source", "target"), list(product(DeliveryState, DeliveryState)))
def test_every_transition_is_allowed_or_refused_by_the_one_table(
    source: DeliveryState, target: DeliveryState
) -> None:
    assert ledger.allowed(source, target) == ((source, target) in EXPECTED_ALLOWED)
    assert (source in ALLOWED_FROM[target]) == ((source, target) in EXPECTED_ALLOWED)


def test_terminal_states_are_left_only_by_the_reconciliation() -> None:
    for terminal in (C, F, X):
        assert not any(terminal in sources for sources in ALLOWED_FROM.values())
    assert C in ledger.RECONCILE_FROM and F not in ledger.RECONCILE_FROM
    assert {P, H, DL, U} == OPEN_STATES
    assert {C, F, X} == ledger.TERMINAL_STATES


def test_what_an_external_agent_may_report_is_within_the_ledger() -> None:
    for target, sources in ledger.CONFIRM_FROM.items():
        assert all(ledger.allowed(s, target) for s in sources)


@pytest.mark.parametrize(("project", "member"), list(product(ProjectState, MemberStatus)))
def test_initial_state_table(project: ProjectState, member: MemberStatus) -> None:
    expected = P if (project is ProjectState.ACTIVE and member is MemberStatus.ACTIVE) else H
    assert initial_state(project.value, member.value) is expected


DISPATCH_CASES = [
    (ProjectState.ACTIVE, MemberStatus.ACTIVE, False, None),
    (ProjectState.ACTIVE, MemberStatus.ACTIVE, True, Reason.LOOP_BRAKE),
    (ProjectState.ACTIVE, MemberStatus.PAUSED, False, Reason.MEMBER_PAUSED),
    (ProjectState.ACTIVE, MemberStatus.PAUSED, True, Reason.MEMBER_PAUSED),
    (ProjectState.ACTIVE, MemberStatus.LEFT, False, Reason.RECIPIENT_LEFT),
    *[
        (state, status, tripped, Reason.PROJECT_NOT_ACTIVE)
        for state in ProjectState
        if state is not ProjectState.ACTIVE
        for status in MemberStatus
        for tripped in (False, True)
    ],
]


@pytest.mark.parametrize(("project", "member", "tripped", "expected"), DISPATCH_CASES)
def test_dispatch_rule_table(
    project: ProjectState, member: MemberStatus, tripped: bool, expected: Reason | None
) -> None:
    assert dispatch_blocker(project.value, member.value, tripped) == expected


@given(st.sampled_from(list(ProjectState)), st.sampled_from(list(MemberStatus)), st.booleans())
def test_dispatch_is_open_only_when_everything_is(
    project: ProjectState, member: MemberStatus, tripped: bool
) -> None:
    blocker = dispatch_blocker(project, member, tripped)
    open_ = project is ProjectState.ACTIVE and member is MemberStatus.ACTIVE and not tripped
    assert (blocker is None) == open_
    # What is held waits for a resume; what the brake stopped waits as pending.
    if blocker is not None:
        assert waiting_state(blocker) is (P if blocker is Reason.LOOP_BRAKE else H)


def test_every_reason_has_a_text_and_is_documented() -> None:
    assert set(REASON_TEXTS) == set(Reason)
    docs = (Path(__file__).resolve().parent.parent / "docs" / "protocol.md").read_text()
    for reason in Reason:
        assert f"* `{reason.value}` — {REASON_TEXTS[reason]}" in docs
    assert "`reason_code?`" in docs


# -- the migration ---------------------------------------------------------------------------

OLD_REASONS: dict[str | None, str | None] = {
    "recipient left": "recipient_left",
    "message deleted": "message_deleted",
    "member paused": "member_paused",
    "project not active": "project_not_active",
    "project trashed": "project_trashed",
    "socket lost before receipt": "socket_lost",
    "awaiting the agent's confirmation": "awaiting_confirmation",
    "the external agent asked for it again": "redelivery_requested",
    "dispatch stopped before the turn started": "dispatch_stopped",
    "loop brake: waiting for a human": "loop_brake",
    "step limit reached without a final answer": "loop_brake",
    "the turn's reply was posted before the restart": "restart_reply_posted",
    "turn interrupted by a restart after it had acted; not re-run (no duplicates)": (
        "restart_after_effect"
    ),
    "turn interrupted by a restart before any effect; dispatched again": "restart_before_effect",
    "in the session inbox at restart, taken by no turn; dispatched again": "restart_in_inbox",
    "stopped: a person stopped this work, or the project stopped": "turn_stopped",
    "internal error: KeyError": "turn_failed",
    "the turn could not start": "turn_not_started",
    "answer not posted: project_not_accepting": "answer_not_posted",
    "provider_auth: bad key": "provider_error",
    "something nobody wrote": None,
}


def test_the_migration_gives_old_reasons_their_codes(tmp_path: Path) -> None:
    path = tmp_path / "room.sqlite"
    conn = connect(path)
    for version, migration in enumerate(MIGRATIONS[:4], start=1):
        conn.executescript(migration.sql)
        conn.execute(f"PRAGMA user_version = {version}")
    conn.executescript(
        """
        INSERT INTO projects (name, created_at, updated_at) VALUES ('p', 0, 0);
        INSERT INTO members (project_id, kind, role, handle, display_name, created_at)
            VALUES (1, 'agent', 'lead', 'a', 'a', 0);
        """
    )
    for i, reason in enumerate([*OLD_REASONS, None], start=1):
        conn.execute(
            "INSERT INTO messages (id, project_id, seq, kind, body, frame, created_at)"
            " VALUES (?, 1, ?, 'chat', 'x', '{}', 0)",
            (i, i),
        )
        conn.execute(
            "INSERT INTO deliveries (project_id, message_id, recipient_id, state, reason,"
            " created_at, updated_at) VALUES (1, ?, 1, 'failed', ?, 0, 0)",
            (i, reason),
        )
    conn.commit()
    applied = migrate(conn, path, now=time.time())
    assert applied[0] == "0005_delivery_reason_codes"  # later migrations may follow it
    assert list((tmp_path / "backups").glob("room-v4-*.sqlite"))  # the backup came first
    found: dict[str | None, str | None] = dict(
        conn.execute("SELECT reason, reason_code FROM deliveries").fetchall()
    )
    assert found == {**OLD_REASONS, None: None}
    assert all(code is None or code in set(Reason) for code in found.values())


# -- one write opens a turn ------------------------------------------------------------------


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest) -> str | None:
    """The in-process app's store: SQLite in its data folder, or a fresh PostgreSQL database."""
    return None if request.param == "sqlite" else str(request.getfixturevalue("pg_dsn"))


def _say(app: App, project_id: int, body: str) -> int:
    status, sent = app.request(
        "POST",
        f"/api/projects/{project_id}/messages",
        {"body": body, "client_txn_id": uuid.uuid4().hex},
        cookie=app.owner_cookie,
    )
    assert status in (200, 201), sent
    return int(sent["message_id"])


def test_the_dispatch_rule_is_checked_once_per_turn(
    tmp_path: Path, store_url: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[tuple[str, str, bool]] = []
    rule = ledger.dispatch_blocker

    def counted(project_state: str, member_status: str, tripped: bool) -> Reason | None:
        calls.append((project_state, member_status, tripped))
        return rule(project_state, member_status, tripped)

    monkeypatch.setattr(ledger, "dispatch_blocker", counted)
    with running_app(tmp_path / "data", database_url=store_url) as app:
        project_id, _, _ = app.project_with("p", owner_user(app))
        _say(app, project_id, "@lead 你好")

        def turns() -> list[tuple[str]]:
            with app.db() as conn:
                return conn.execute("SELECT state FROM turns").fetchall()

        assert wait_until(lambda: turns() == [("completed",)])
        time.sleep(0.3)  # the session looks for more work once more, then idles
    # One turn, one check: the write that claimed its delivery and opened it; then the
    # session's one more look (a write that found nothing pending), and no other check.
    assert calls == [("active", "active", False)] * 2


def test_a_member_paused_before_its_turn_opens_is_never_started(
    tmp_path: Path, store_url: str | None
) -> None:
    with running_app(tmp_path / "data", database_url=store_url) as app:
        project_id, members, _ = app.project_with("p", owner_user(app))
        lead = members["lead"]
        app.write(lambda conn, tx: conn.execute("UPDATE projects SET state = 'paused'"))
        message_id = _say(app, project_id, "@lead 先等等")
        # Paused between the wake and the turn: the project resumes, the member is paused in the
        # same instant the turn would open; the one write sees it and takes nothing.
        app.write(
            lambda conn, tx: conn.execute(
                "UPDATE deliveries SET state = 'pending' WHERE message_id = ?", (message_id,)
            )
        )
        app.write(lambda conn, tx: conn.execute("UPDATE projects SET state = 'active'"))
        app.write(
            lambda conn, tx: conn.execute(
                "UPDATE members SET status = 'paused' WHERE id = ?", (lead.id,)
            )
        )
        start = app.call(turn_actions.begin_turn, app.core, lead.id, 10, project_id=lead.project_id)
        assert start.turn_id is None and start.blocked is Reason.MEMBER_PAUSED
        with app.db() as conn:
            assert conn.execute("SELECT count(*) FROM turns").fetchone()[0] == 0
            state = conn.execute(
                "SELECT state, turn_id FROM deliveries WHERE message_id = ?", (message_id,)
            ).fetchone()
        assert state == ("pending", None)


def test_a_model_call_consumes_only_what_is_still_its_turns(
    tmp_path: Path, store_url: str | None
) -> None:
    """A turn settled while it ran on (taken for a leftover: its deliveries pending again and
    unbound) cannot consume them: they wait for another turn, and no consumed row names no
    turn. What the turn still holds is consumed as before."""
    with running_app(tmp_path / "data", database_url=store_url) as app:
        project_id, members, _ = app.project_with("p", owner_user(app))
        lead = members["lead"]
        app.write(lambda conn, tx: conn.execute("UPDATE members SET status = 'paused'"))
        first, second = _say(app, project_id, "@lead 一"), _say(app, project_id, "@lead 二")
        app.write(lambda conn, tx: conn.execute("UPDATE deliveries SET state = 'pending'"))
        app.write(lambda conn, tx: conn.execute("UPDATE members SET status = 'active'"))
        start = app.call(turn_actions.begin_turn, app.core, lead.id, 10, project_id=project_id)
        assert start.turn_id is not None and len(start.inbound) == 2
        taken = {i.message_id: i.delivery_id for i in start.inbound}
        # The first one settled away from the turn, as a settling does (room.actions.deliveries).
        app.write(
            lambda conn, tx: settle_via_unknown(
                conn, tx, [taken[first]], DeliveryState.PENDING, Reason.RESTART_BEFORE_EFFECT,
                why="test",
            ),
            locks=(project_id,),
        )  # fmt: skip
        call = turn_actions.ModelCall(
            project_id=project_id, member_id=lead.id, turn_id=start.turn_id,
            model_id="builtin/echo", route_source="test", provider="builtin",
            model_reported="echo", latency_ms=1.0,
            consumed=[(taken[first], "queue"), (taken[second], "queue")],
        )  # fmt: skip
        app.call(turn_actions.record_model_call, app.core, call, None)
        with app.db() as conn:
            rows = conn.execute(
                "SELECT message_id, state, turn_id FROM deliveries ORDER BY message_id"
            ).fetchall()
        assert [tuple(r) for r in rows] == [
            (first, "pending", None),
            (second, "consumed", start.turn_id),
        ]


def test_a_brake_past_its_cap_claims_nothing(tmp_path: Path, store_url: str | None) -> None:
    with running_app(tmp_path / "data", database_url=store_url) as app:
        project_id, members, _ = app.project_with("p", owner_user(app))
        lead = members["lead"]
        app.write(
            lambda conn, tx: conn.execute(
                "UPDATE members SET status = 'paused' WHERE kind = 'agent'"
            )
        )
        message_id = _say(app, project_id, "@lead 数一数")
        app.write(lambda conn, tx: conn.execute("UPDATE deliveries SET state = 'pending'"))
        app.write(
            lambda conn, tx: conn.execute(
                "UPDATE members SET status = 'active' WHERE kind = 'agent'"
            )
        )
        start = app.call(turn_actions.begin_turn, app.core, lead.id, 0, project_id=lead.project_id)
        assert start.turn_id is None and start.blocked is Reason.LOOP_BRAKE
        with app.db() as conn:
            assert conn.execute("SELECT tripped FROM project_brakes").fetchone()[0] == (
                "agent_turn_cap"
            )
            row = conn.execute(
                "SELECT state FROM deliveries WHERE message_id = ?", (message_id,)
            ).fetchone()
        assert row == ("pending",)


@pytest.mark.anyio
@pytest.mark.usefixtures("clients")
async def test_reason_codes_reach_the_delivery_frame_and_the_receipts(room: Room) -> None:
    room.route("lead")
    room.llm.push(error(401, "bad key"))
    server = room.server
    client = await Client.open(server.ws_url, cookie=room.owner.cookie, origin=server.origin)
    await client.send({"type": "subscribe", "project_id": room.project})
    await client.wait_for("subscribed")
    sent = room.say("@lead 在吗")
    frame = await client.wait_for(
        lambda f: f.get("type") == "delivery" and f["state"] == "failed", timeout=15
    )
    assert frame["message_id"] == sent["message_id"]
    assert frame["reason_code"] == "provider_error"
    assert frame["reason"].startswith("provider_auth")  # the detail stays in `reason`
    await client.send(
        {"type": "receipts", "project_id": room.project, "message_id": sent["message_id"]}
    )
    receipts = await client.wait_for("receipts")
    assert [d["reason_code"] for d in receipts["deliveries"]] == ["provider_error"]
    [row] = room.deliveries(sent["message_id"])
    assert (row["state"], row["reason_code"]) == ("failed", "provider_error")


def test_a_brake_holds_its_loop_a_second_trip_adds_to_it_and_a_budget_holds_everyone(
    tmp_path: Path,
    store_url: str | None,
) -> None:
    """Issue 28, item 1, in the store: whom a brake holds, and the notices that say so."""
    with running_app(tmp_path / "data", database_url=store_url) as app:
        project_id, members, _ = app.project_with("p", owner_user(app))
        lead, other = members["lead"].id, members["lead"].id + 100  # other: any member id

        def held(member_id: int) -> bool:
            return bool(app.call(app.core.db.read, lambda conn: brakes_store.holds_member(
                conn, project_id, member_id)))  # fmt: skip

        def trip(reason: str, detail: dict[str, Any], who: list[int] | None) -> None:
            app.write(
                lambda conn, tx: brake_actions.trip(conn, tx, project_id, reason, detail, who),
                locks=(project_id,),
            )

        def notices() -> list[str]:
            with app.db() as conn:
                return [r[0] for r in conn.execute(
                    "SELECT body FROM messages WHERE kind = 'system' AND body LIKE '%制动%'"
                    " ORDER BY id")]  # fmt: skip

        trip("repetition", {"handle": "lead", "what": "相同的回复"}, [lead])
        assert (held(lead), held(other)) == (True, False)
        [first] = notices()
        assert "@lead" in first and "其他成员照常工作" in first
        trip("repetition", {"handle": "lead", "what": "相同的回复"}, [lead])
        assert len(notices()) == 1  # nothing new: no second notice
        trip("step_limit", {"handle": "x", "max_steps": 3}, [lead, other])
        assert held(other) and len(notices()) == 2
        trip("token_budget", {"tokens_used": 10, "budget": 5}, [lead])  # always everyone
        assert held(lead + 200)
        assert "全部派发" in notices()[-1] and "预算" in notices()[-1]
        with app.db() as conn:
            row = conn.execute("SELECT tripped, held_json FROM project_brakes").fetchone()
        assert row == ("repetition", None)  # the first reason stands; now the whole project
        person = next(m for m in members.values() if m.kind == "human")
        app.call(brake_actions.clear_brake, app.core, project_id, person.id)
        assert not held(lead) and not held(other)
