"""The store's functions on both dialects: users and sign-in, projects, members, messages (sends,
history pages, replay, edits, read cursors, unread counts) and deliveries, run against a migrated
SQLite database and a migrated PostgreSQL database (the tests' private cluster) with the same
calls and the same expected results. Each test runs once per backend: ``[sqlite]`` and
``[postgresql]`` in its id. What does not run on PostgreSQL yet is listed in docs/storage.md
("PostgreSQL: done and not done"), not here."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

import psycopg
import pytest

from room.errors import ConflictError
from room.rules.entities import Member, User
from room.rules.ledger import DeliveryState, Reason
from room.rules.tasks import TaskState
from room.store import Appends, Tx, run_write
from room.store import attachments as attachments_store
from room.store import audit as audit_store
from room.store import auth as auth_store
from room.store import brakes as brakes_store
from room.store import checkpoints as checkpoints_store
from room.store import decisions as decisions_store
from room.store import deliveries as deliveries_store
from room.store import members as members_store
from room.store import memory as memory_store
from room.store import messages as messages_store
from room.store import projects as projects_store
from room.store import reactions as reactions_store
from room.store import research as research_store
from room.store import routes as routes_store
from room.store import tasks as tasks_store
from room.store import turns as turns_store
from room.store import usage as usage_store
from room.store.dialect import POSTGRESQL, SQLITE, Connection, dialect_for
from room.store.migrate import connect as sqlite_connect
from room.store.migrate import migrate as sqlite_migrate
from room.store.pg import connect as pg_connect
from room.store.pg_migrate import migrate as pg_migrate

R = TypeVar("R")
NOW = 1_800_000_000.0
# A duplicate key, as each driver says it.
DUPLICATE = (sqlite3.IntegrityError, psycopg.errors.UniqueViolation)


@pytest.fixture(params=["sqlite", "postgresql"])
def conn(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Connection]:
    """A freshly migrated database of each backend, through the store's connection protocol."""
    opened: Connection
    if request.param == "sqlite":
        path = tmp_path / "room.sqlite"
        raw = sqlite_connect(path)
        sqlite_migrate(raw, path, now=NOW)
        opened = raw
    else:
        pg = pg_connect(request.getfixturevalue("pg_dsn"))
        pg_migrate(pg, now=NOW)
        opened = pg
    try:
        yield opened
    finally:
        opened.close()


def write(conn: Connection, job: Callable[[Connection, Tx], R], now: float = NOW) -> R:
    """One write job in its own transaction, as the writer runs it (``BEGIN IMMEDIATE``)."""
    return run_write(conn, job, now=now)


@dataclass(frozen=True, slots=True)
class World:
    ann: User
    bob: User
    project_id: int
    owner: Member  # ann
    guest: Member  # bob
    agent: Member  # an agent with aliases


def make_world(conn: Connection) -> World:
    def job(c: Connection, tx: Tx) -> World:
        ann_id = auth_store.insert_user(
            c, handle="Ann", display_name="Ann A.", is_admin=True, now=tx.now
        )
        bob_id = auth_store.insert_user(
            c, handle="bob", display_name="Bob", is_admin=False, now=tx.now
        )
        project_id = projects_store.insert(
            c, name="Alpha", goal="ship", workspace=None, created_by=ann_id, now=tx.now
        )
        owner_id = members_store.insert(
            c, project_id=project_id, kind="human", user_id=ann_id, role="owner",
            handle="Ann", display_name="Ann A.", now=tx.now,
        )  # fmt: skip
        guest_id = members_store.insert(
            c, project_id=project_id, kind="human", user_id=bob_id, role="member",
            handle="bob", display_name="Bob", now=tx.now,
        )  # fmt: skip
        agent_id = members_store.insert(
            c, project_id=project_id, kind="agent", user_id=None, role="lead",
            handle="Lead", display_name="Lead Agent", aliases=("领队", "boss"), now=tx.now,
        )  # fmt: skip
        projects_store.set_lead(c, project_id, agent_id)
        found = [members_store.get(c, i) for i in (owner_id, guest_id, agent_id)]
        users = [auth_store.get_user(c, i) for i in (ann_id, bob_id)]
        assert all(found) and all(users)
        return World(
            cast(User, users[0]), cast(User, users[1]), project_id,
            cast(Member, found[0]), cast(Member, found[1]), cast(Member, found[2]),
        )  # fmt: skip

    return write(conn, job)


def test_the_connection_names_its_dialect(conn: Connection, request: pytest.FixtureRequest) -> None:
    expected = SQLITE if "sqlite" in request.node.callspec.id else POSTGRESQL
    assert dialect_for(conn) is expected


# -- users, sessions, links, agent tokens ----------------------------------------------------------


def test_users_and_their_handles_ignore_ascii_case(conn: Connection) -> None:
    w = make_world(conn)
    assert (w.ann.id, w.ann.handle, w.ann.is_admin) == (1, "Ann", True)
    assert auth_store.admin_user(conn) == w.ann
    assert auth_store.get_user(conn, w.bob.id) == User(w.bob.id, "bob", "Bob", False)
    assert auth_store.get_user(conn, 999) is None
    assert [auth_store.user_handle_taken(conn, h) for h in ("ANN", "ann", "Bob", "zed")] == [
        True,
        True,
        True,
        False,
    ]
    with pytest.raises(DUPLICATE):  # the unique key ignores case too, on both
        write(
            conn,
            lambda c, tx: auth_store.insert_user(
                c, handle="aNN", display_name="x", is_admin=False, now=tx.now
            ),
        )
    assert not conn.in_transaction
    assert auth_store.user_handle_taken(conn, "aNN")


def test_sessions_links_and_tokens(conn: Connection) -> None:
    w = make_world(conn)

    def sign_in(c: Connection, tx: Tx) -> None:
        auth_store.insert_session(
            c, secret="s-1", user_id=w.ann.id, csrf_token="csrf", now=tx.now,
            expires_at=tx.now + 60,
        )  # fmt: skip
        auth_store.insert_session(
            c, secret="s-old", user_id=w.bob.id, csrf_token="c2", now=tx.now, expires_at=tx.now
        )
        auth_store.insert_link(
            c, secret="link", purpose="invite", user_id=None, project_id=w.project_id,
            role="member", created_by=w.ann.id, now=tx.now, expires_at=tx.now + 60,
        )  # fmt: skip
        auth_store.insert_agent_token(c, member_id=w.agent.id, secret="tok", now=tx.now)

    write(conn, sign_in)
    assert auth_store.session_user(conn, "s-1", NOW + 1) == (w.ann, "csrf")
    assert auth_store.session_user(conn, "s-old", NOW + 1) is None  # expired
    assert auth_store.token_member(conn, "tok") == w.agent
    assert auth_store.token_member(conn, "nope") is None
    digest = auth_store.digest
    sessions = {digest("s-1"), digest("s-old"), digest("never")}
    tokens = {digest("tok"), digest("never")} | {digest(f"t{i}") for i in range(70)}
    assert auth_store.live_credentials(conn, sessions, tokens, NOW + 1) == (
        {digest("s-1")},
        {digest("tok")},
    )
    assert auth_store.live_credentials(conn, set(), set(), NOW + 1) == (set(), set())

    taken = write(conn, lambda c, tx: auth_store.take_link(c, "link", tx.now + 1))
    assert taken == ("invite", None, w.project_id, "member")
    assert write(conn, lambda c, tx: auth_store.take_link(c, "link", tx.now + 2)) is None
    write(conn, lambda c, tx: auth_store.mark_link_user(c, "link", w.bob.id))

    write(conn, lambda c, tx: auth_store.revoke_session(c, "s-1", tx.now))
    assert auth_store.session_user(conn, "s-1", NOW + 1) is None
    revoked = write(conn, lambda c, tx: auth_store.revoke_member_tokens(c, w.agent.id, tx.now))
    assert revoked == 1
    assert auth_store.live_credentials(conn, sessions, tokens, NOW + 1) == (set(), set())


# -- projects --------------------------------------------------------------------------------------


def test_projects_by_name_ignore_ascii_case_and_seq_is_gap_free(conn: Connection) -> None:
    w = make_world(conn)
    project = projects_store.get(conn, w.project_id)
    assert project is not None and (project.name, project.state) == ("Alpha", "active")
    assert projects_store.find(conn, "ALPHA") == project
    assert projects_store.find(conn, str(w.project_id)) == project
    assert projects_store.find(conn, "beta") is None
    assert projects_store.name_taken(conn, "alpha")
    assert not projects_store.name_taken(conn, "alphabet")
    assert projects_store.list_for_user(conn, w.bob.id) == [project]
    assert projects_store.list_all(conn) == [project]
    assert projects_store.lead_of(conn, w.project_id) == w.agent.id

    seqs = [write(conn, lambda c, tx: projects_store.next_seq(c, w.project_id, tx.now))]
    seqs += write(
        conn, lambda c, tx: [projects_store.next_seq(c, w.project_id, tx.now) for _ in range(3)]
    )
    assert seqs == [1, 2, 3, 4]
    assert projects_store.head_seq(conn, w.project_id) == 4
    assert write(conn, lambda c, tx: projects_store.bump_epoch(c, w.project_id)) == 2

    merged = write(
        conn,
        lambda c, tx: projects_store.update_settings(
            c, w.project_id, {"tone": "brief", "x": 1}, tx.now
        ),
    )
    assert merged == {"tone": "brief", "x": 1}
    write(
        conn,
        lambda c, tx: projects_store.update_settings(c, w.project_id, {}, tx.now, remove=["x"]),
    )
    assert projects_store.settings(conn, w.project_id) == {"tone": "brief"}

    def archive(c: Connection, tx: Tx) -> None:
        projects_store.set_state(
            c, w.project_id, state="archived", state_from="active", stop_target=None, now=tx.now
        )
        projects_store.set_state_reason(c, w.project_id, "done")

    write(conn, archive, now=NOW + 5)
    assert projects_store.state_of(conn, w.project_id) == "archived"
    assert projects_store.state_at(conn, w.project_id) == NOW + 5
    with pytest.raises(ConflictError):
        projects_store.require_open(conn, w.project_id)


# -- members ---------------------------------------------------------------------------------------


def test_members_names_aliases_and_departures(conn: Connection) -> None:
    w = make_world(conn)
    assert members_store.by_handle(conn, w.project_id, "LEAD") == w.agent
    assert members_store.by_handle(conn, w.project_id, "nobody") is None
    assert members_store.for_user(conn, w.project_id, w.bob.id) == w.guest
    assert members_store.list_for_project(conn, w.project_id) == [w.owner, w.guest, w.agent]
    assert members_store.aliases_for_project(conn, w.project_id) == {w.agent.id: ["boss", "领队"]}
    assert members_store.name_holders(conn, w.project_id, "BOSS") == [("alias", False)]
    assert members_store.handle_reserved(conn, w.project_id, "lead")
    wire = members_store.wire_list(conn, w.project_id)
    assert [(m["handle"], m["aliases"]) for m in wire] == [
        ("Ann", []),
        ("bob", []),
        ("Lead", ["boss", "领队"]),
    ]
    assert members_store.projects_of_user(conn, w.bob.id) == [w.project_id]
    assert members_store.owned_projects(conn, w.ann.id) == {w.project_id}
    assert members_store.owned_projects(conn, w.bob.id) == set()

    write(conn, lambda c, tx: members_store.set_status(c, w.guest.id, "left", tx.now))
    assert members_store.projects_of_user(conn, w.bob.id) == []
    assert sorted(members_store.name_holders(conn, w.project_id, "Bob")) == [
        ("display_name", True),
        ("handle", True),
    ]
    # a departed member keeps its name; a newcomer with it sorts after the living one
    newcomer = write(
        conn,
        lambda c, tx: members_store.insert(
            c,
            project_id=w.project_id,
            kind="agent",
            user_id=None,
            role="member",
            handle="BOB",
            display_name="Bob 2",
            now=tx.now,
        ),
    )
    found = members_store.by_handle(conn, w.project_id, "bob")
    assert found is not None and found.id == newcomer


# -- messages --------------------------------------------------------------------------------------


def send(
    conn: Connection,
    tx: Tx,
    w: World,
    author: Member,
    body: str,
    *,
    txn: str | None = None,
    mentions: tuple[Member, ...] = (),
    meta: dict[str, Any] | None = None,
    message_id: int,
    appends: Appends | None = None,
) -> tuple[int, int]:
    """What a send writes (room/actions/messages.py), by the store's functions: (id, seq)."""
    seq = projects_store.next_seq(conn, w.project_id, tx.now, appends)
    frame = messages_store.message_object(
        message_id=message_id, project_id=w.project_id, seq=seq, author_id=author.id,
        kind="chat", body=body, html=f"<p>{body}</p>", reply_to=None, reply_excerpt=None,
        mentions=[m.id for m in mentions], client_txn_id=txn, created_at=tx.now, meta=meta,
    )  # fmt: skip
    messages_store.insert(
        conn, message_id=message_id, project_id=w.project_id, seq=seq, author_id=author.id,
        kind="chat", body=body, reply_to=None, client_txn_id=txn, txn_digest=None, frame=frame,
        now=tx.now, appends=appends,
    )  # fmt: skip
    messages_store.insert_mentions(conn, message_id, [(m.id, "handle") for m in mentions], appends)
    messages_store.insert_event(
        conn, project_id=w.project_id, seq=seq, kind="message", message_id=message_id,
        frame=None, now=tx.now, appends=appends,
    )  # fmt: skip
    recipients = [(m.id, str(DeliveryState.PENDING)) for m in mentions if m.kind == "agent"]
    deliveries_store.insert_many(
        conn, project_id=w.project_id, message_id=message_id, recipients=recipients,
        now=tx.now, appends=appends,
    )  # fmt: skip
    return message_id, seq


def post(
    conn: Connection, w: World, author: Member, body: str, *, now: float = NOW, **how: Any
) -> tuple[int, int]:
    """:func:`send` in a transaction of its own."""
    return write(conn, lambda c, tx: send(c, tx, w, author, body, **how), now=now)


def test_messages_history_pages_replay_and_edits(conn: Connection) -> None:
    w = make_world(conn)
    sent = [
        post(
            conn,
            w,
            w.owner if i % 2 else w.guest,
            f"m{i} 100% ok?",
            txn=f"t{i}",
            mentions=(w.agent,) if i == 3 else (),
            message_id=i,
            now=NOW + i,
        )
        for i in range(1, 6)
    ]
    assert sent == [(i, i) for i in range(1, 6)]
    frames, more = messages_store.history(conn, w.project_id, None, 2)
    assert more and [f.count('"seq":') for f in frames] == [1, 1]
    assert ['"seq":4' in frames[0], '"seq":5' in frames[1]] == [True, True]
    older, more = messages_store.history(conn, w.project_id, 4, 10)
    assert not more and len(older) == 3
    assert messages_store.history(conn, w.project_id, 1 << 70, 1)[0] == frames[1:]
    newer, more_newer = messages_store.newer(conn, w.project_id, 3, 1)
    assert (len(newer), more_newer) == (1, True) and '"seq":4' in newer[0]
    window, has_older, has_newer = messages_store.around(conn, w.project_id, 3, 3)
    assert (len(window), has_older, has_newer) == (3, True, True)
    assert messages_store.count_before(conn, w.project_id, 5) == 4
    row = messages_store.get_row(conn, 3)
    assert row is not None and (row["body"], row["created_at"]) == ("m3 100% ok?", NOW + 3)
    assert messages_store.id_at_seq(conn, w.project_id, 3) == 3
    assert messages_store.find_txn(conn, w.owner.id, "t3") == (3, 3, None, row["frame"])
    assert messages_store.find_txn(conn, w.owner.id, "t2") is None  # bob's

    appends = Appends()
    messages_store.find_txns(conn, appends, [(w.owner.id, "t1"), (w.owner.id, "zz")])
    found = appends.sent(w.owner.id, "t1")
    assert isinstance(found, tuple) and found[:2] == (1, 1)
    assert appends.sent(w.owner.id, "zz") is None

    # replay: the frames SQL builds equal the ones Python builds
    replayed = messages_store.replay(conn, w.project_id, 3, 10)
    assert [seq for seq, _ in replayed] == [4, 5]
    stored = messages_store.get_row(conn, 4)
    assert stored is not None
    assert replayed[0][1] == messages_store.event_frame(w.project_id, 4, stored["frame"])

    def edit(c: Connection, tx: Tx) -> None:
        messages_store.record_edit(
            c, message_id=3, old_body="m3 100% ok?", action="edit", new_body="m3 v2", now=tx.now
        )

    write(conn, edit, now=NOW + 10)
    assert messages_store.edit_history(conn, 3, with_bodies=True)[0]["body"] == "m3 100% ok?"
    edited = messages_store.get_row(conn, 3)
    assert edited is not None and (edited["body"], edited["edited_at"]) == ("m3 v2", NOW + 10)


def test_sends_gathered_by_a_batch_are_written_at_its_flush(conn: Connection) -> None:
    """The hot path: rows left to :class:`Appends`, written with multi-row INSERTs at the flush
    (the seq counted in the batch and written once)."""
    w = make_world(conn)

    def batch(c: Connection, tx: Tx) -> list[tuple[int, int]]:
        appends = Appends()
        out = [
            send(c, tx, w, w.owner, f"b{i}", txn=f"b{i}", mentions=(w.agent, w.guest),
                 meta={"for_agents": f"note {i}"}, message_id=100 + i, appends=appends)
            for i in range(5)
        ]  # fmt: skip
        # Appends is annotated with sqlite3.Connection until its rework; it runs on either.
        appends.flush(cast(sqlite3.Connection, c))
        return out

    assert write(conn, batch) == [(100 + i, i + 1) for i in range(5)]
    assert projects_store.head_seq(conn, w.project_id) == 5
    frames, more = messages_store.history(conn, w.project_id, None, 10)
    assert (len(frames), more) == (5, False)
    assert [seq for seq, _ in messages_store.replay(conn, w.project_id, 0, 10)] == [1, 2, 3, 4, 5]
    # mentions and deliveries of every message
    assert deliveries_store.recipients(conn, 102) == {w.agent.id}
    pending = deliveries_store.pending_of(conn, w.agent.id, 10, unoffered=True)
    assert len(pending) == 5
    inbound = deliveries_store.inbound_by_ids(conn, pending[:2])
    assert [(i.message_id, i.seq, i.author_name, i.for_agents) for i in inbound] == [
        (100, 1, "Ann A.", "note 0"),
        (101, 2, "Ann A.", "note 1"),
    ]


def test_read_cursors_and_unread_counts(conn: Connection) -> None:
    w = make_world(conn)
    for i in range(1, 5):
        post(conn, w, w.owner, f"hi {i}", mentions=(w.guest,) if i == 2 else (), message_id=i)
    assert messages_store.unread_for_user(conn, w.bob.id) == {w.project_id: (4, 1)}
    assert messages_store.unread_for_user(conn, w.ann.id) == {w.project_id: (0, 0)}
    moved = write(
        conn,
        lambda c, tx: messages_store.set_read_cursor(
            c, member_id=w.guest.id, project_id=w.project_id, seq=3, now=tx.now
        ),
    )
    assert moved == 3
    assert messages_store.unread_for_members(conn, [w.guest.id, w.owner.id]) == {
        w.guest.id: (1, 0),
        w.owner.id: (0, 0),
    }
    # forward only, unless asked to go back ("mark as unread")
    assert (
        write(
            conn,
            lambda c, tx: messages_store.set_read_cursor(
                c, member_id=w.guest.id, project_id=w.project_id, seq=1, now=tx.now
            ),
        )
        == 3
    )
    assert (
        write(
            conn,
            lambda c, tx: messages_store.set_read_cursor(
                c, member_id=w.guest.id, project_id=w.project_id, seq=1, now=tx.now, back=True
            ),
        )
        == 1
    )
    assert messages_store.read_cursors(conn, w.project_id) == {w.guest.id: 1}


# -- deliveries ------------------------------------------------------------------------------------


def test_deliveries_move_through_the_ledger(conn: Connection) -> None:
    w = make_world(conn)
    for i in (1, 2):
        meta = {"for_agents": "ctx"} if i == 1 else None
        post(conn, w, w.owner, f"@Lead {i}", mentions=(w.agent,), message_id=i, meta=meta)
    first, second = deliveries_store.pending_of(conn, w.agent.id, 10, unoffered=False)
    write(conn, lambda c, tx: deliveries_store.mark_offered(c, [first], "sock-1"))
    assert deliveries_store.offered_to(conn, w.agent.id, "sock-1") == [first]
    assert deliveries_store.pending_of(conn, w.agent.id, 10, unoffered=True) == [second]
    moved = write(
        conn,
        lambda c, tx: deliveries_store.set_state(
            c, [first, second], DeliveryState.DELIVERED, tx.now, mode="queue"
        ),
    )
    assert moved == [(first, w.project_id, 1, w.agent.id), (second, w.project_id, 2, w.agent.id)]
    assert deliveries_store.state_of(conn, first) == "delivered"
    # consumed is final: nothing moves out of it
    write(conn, lambda c, tx: deliveries_store.set_state(c, [first], "consumed", tx.now))
    again = write(conn, lambda c, tx: deliveries_store.set_state(c, [first], "pending", tx.now))
    assert again == []
    unsettled = deliveries_store.unsettled(conn, w.agent.id)
    assert [(i.delivery_id, i.for_agents, i.body) for i in unsettled] == [(second, "", "@Lead 2")]
    assert deliveries_store.of_member(conn, w.agent.id, ["consumed", "delivered"]) == [
        first,
        second,
    ]
    rows = deliveries_store.for_message(conn, 1)
    assert [(r["state"], r["mode"]) for r in rows] == [("consumed", "queue")]

    post(conn, w, w.owner, "@Lead 3", mentions=(w.agent,), message_id=3)
    cancelled = write(
        conn,
        lambda c, tx: deliveries_store.cancel_open_for_message(
            c, 3, Reason.MESSAGE_DELETED, tx.now
        ),
    )
    assert [recipient for _, recipient in cancelled] == [w.agent.id]
    assert deliveries_store.for_message(conn, 3)[0]["reason_code"] == "message_deleted"


def answers(conn: Connection) -> dict[str, Any]:
    """One scenario's every answer."""
    w = make_world(conn)
    for i in range(1, 4):
        post(
            conn, w, w.owner, f"x{i} 中文", mentions=(w.agent,), message_id=i, txn=f"t{i}",
            meta={"for_agents": f"a{i}"}, now=NOW + i,
        )  # fmt: skip
    pending = deliveries_store.pending_of(conn, w.agent.id, 10, unoffered=False)
    return {
        "world": w,
        "history": messages_store.history(conn, w.project_id, None, 2),
        "replay": [tuple(r) for r in messages_store.replay(conn, w.project_id, 0, 10)],
        "row": messages_store.get_row(conn, 2),
        "unread": messages_store.unread_for_user(conn, w.bob.id),
        "inbound": deliveries_store.inbound_by_ids(conn, pending),
        "deliveries": deliveries_store.for_message(conn, 1),
        "members": members_store.wire_list(conn, w.project_id),
        "project": projects_store.find(conn, "alpha"),
    }


def test_both_backends_give_the_same_answers(tmp_path: Path, pg_dsn: str) -> None:
    """One scenario on each backend, every answer compared side by side (types included)."""
    lite = sqlite_connect(tmp_path / "same.sqlite")
    sqlite_migrate(lite, tmp_path / "same.sqlite", now=NOW)
    pg = pg_connect(pg_dsn)
    pg_migrate(pg, now=NOW)
    try:
        on_sqlite, on_postgresql = answers(lite), answers(pg)
    finally:
        lite.close()
        pg.close()
    assert len(on_sqlite["replay"]) == 3 and len(on_sqlite["inbound"]) == 3
    assert on_sqlite == on_postgresql


# -- the other modules the port touched ------------------------------------------------------------


def test_turns_transcripts_usage_and_audit(conn: Connection) -> None:
    w = make_world(conn)

    def turn(c: Connection, tx: Tx) -> tuple[int, int]:
        turn_id = turns_store.insert_turn(
            c, project_id=w.project_id, member_id=w.agent.id, trigger=None, now=tx.now
        )
        entry_id = turns_store.append_transcript(
            c, member_id=w.agent.id, turn_id=turn_id, role="assistant", content="done 100%",
            now=tx.now, tool_calls=[{"id": "c1", "name": "fs_read"}],
        )  # fmt: skip
        for ok, tokens, code in ((1, 30, None), (0, 12, "stopped"), (1, 0, None)):
            usage_store.record_request(
                c, project_id=w.project_id, member_id=w.agent.id, turn_id=turn_id,
                model_id="m", route_source="project", provider="openai", model_reported="m-1",
                latency_ms=12.5, input_tokens=tokens, output_tokens=tokens // 3,
                usage_reported=int(tokens > 0), ok=ok, error_code=code, attempts=2, now=tx.now,
            )  # fmt: skip
        return turn_id, entry_id

    turn_id, entry_id = write(conn, turn)
    assert turns_store.running_turns(conn) == [(turn_id, w.project_id, w.agent.id, 0)]
    write(
        conn, lambda c, tx: turns_store.update_turn(c, turn_id, state="completed", ended_at=tx.now)
    )
    last = turns_store.last_turn(conn, w.agent.id)
    assert last is not None and (last["id"], last["state"]) == (turn_id, "completed")
    assert [e["content"] for e in turns_store.transcript_of_turn(conn, turn_id)] == ["done 100%"]
    assert entry_id >= 1
    assert brakes_store.brake(conn, w.project_id)["tokens_used"] == 56  # in + out
    totals = usage_store.usage(conn, w.project_id)
    expected = {
        "requests": 3,
        "input_tokens": 42,
        "output_tokens": 14,
        "requests_without_usage": 1,
        "attempts": 6,
        "failed_requests": 1,
        "stopped_requests": 1,
    }
    assert {k: totals[k] for k in expected} == expected
    assert all(type(totals[k]) is int for k in expected)  # not PostgreSQL's numeric sums
    assert totals["members"] == {
        str(w.agent.id): {
            "requests": 3,
            "input_tokens": 42,
            "output_tokens": 14,
            "attempts": 6,
            "failed_requests": 1,
        }
    }
    route = usage_store.observed_route(conn, w.agent.id)
    assert route is not None and (route["ok"], route["latency_ms"]) == (True, 12.5)

    audit_id = write(
        conn,
        lambda c, tx: audit_store.record(
            c,
            now=tx.now,
            actor_kind="human",
            actor_id=w.ann.id,
            project_id=w.project_id,
            action="project.pause",
            outcome="ok",
            detail={"why": "lunch"},
        ),
    )
    events = audit_store.list_events(conn, w.project_id)
    assert [(e["id"], e["action"]) for e in events] == [(audit_id, "project.pause")]


def test_attachments_memory_and_checkpoints(conn: Connection) -> None:
    w = make_world(conn)

    def upload(c: Connection, tx: Tx) -> list[dict[str, Any]]:
        return [
            attachments_store.insert(
                c,
                project_id=w.project_id,
                uploader_id=w.owner.id,
                sha256=sha,
                size=size,
                name=f"{sha}.png",
                mime="image/png",
                kind="image",
                width=1,
                height=1,
                thumb_sha256=None,
                thumb_mime=None,
                now=tx.now,
            )
            for sha, size in (("a" * 64, 100), ("a" * 64, 100), ("b" * 64, 7))
        ]

    uploaded = write(conn, upload)
    assert [a["size"] for a in uploaded] == [100, 100, 7]
    assert attachments_store.get(conn, uploaded[0]["id"]) == uploaded[0]
    assert attachments_store.project_bytes(conn, w.project_id) == 107  # each content once
    post(conn, w, w.owner, "see", message_id=1)
    write(conn, lambda c, tx: attachments_store.set_message(c, [uploaded[2]["id"]], 1))
    assert [a["id"] for a in attachments_store.for_messages(conn, [1])[1]] == [uploaded[2]["id"]]

    def remember(c: Connection, tx: Tx) -> tuple[int, int, int]:
        first = memory_store.insert_entry(
            c, project_id=w.project_id, kind="fact", body={"text": "ünï"}, size=5,
            author_id=w.agent.id, now=tx.now,
        )  # fmt: skip
        second = memory_store.insert_entry(
            c, project_id=w.project_id, kind="fact", body={"text": "b"}, size=1,
            author_id=w.agent.id, now=tx.now,
        )  # fmt: skip
        memory_store.bump_version(c, w.project_id, tx.now)
        return first, second, memory_store.bump_version(c, w.project_id, tx.now)

    first, second, version = write(conn, remember)
    assert version == 2 and memory_store.memory_version(conn, w.project_id) == 2
    assert memory_store.live_sizes(conn, w.project_id, "fact") == [(first, 5), (second, 1)]
    assert [e["id"] for e in memory_store.entries(conn, w.project_id, "fact")] == [second, first]
    assert [e["id"] for e in memory_store.entries(conn, w.project_id, "fact", limit=1)] == [second]
    assert memory_store.decision_sizes(conn, w.project_id) == []

    def checkpoint(c: Connection, tx: Tx) -> int:
        turn_id = turns_store.insert_turn(
            c, project_id=w.project_id, member_id=w.agent.id, trigger=None, now=tx.now
        )
        return checkpoints_store.insert(
            c, project_id=w.project_id, member_id=w.agent.id, turn_id=turn_id, phase="step",
            state="running", step=1, summary="s", did=["a"], next="n", blocked="",
            last_tool="fs_read", pending_tools=[], prompt=[{"seq": 1}], now=tx.now,
        )  # fmt: skip

    checkpoint_id = write(conn, checkpoint)
    latest = checkpoints_store.latest(conn, w.agent.id)
    assert latest is not None and latest["id"] == checkpoint_id


def test_reactions_routes_and_research(conn: Connection) -> None:
    w = make_world(conn)
    post(conn, w, w.owner, "hello", message_id=1)

    def react(c: Connection, tx: Tx) -> list[bool]:
        return [
            reactions_store.add(c, 1, "👍", w.guest.id, tx.now),
            reactions_store.add(c, 1, "👍", w.guest.id, tx.now),  # the same again: nothing
            reactions_store.add(c, 1, "🎉", w.agent.id, tx.now + 1),
        ]

    assert write(conn, react) == [True, False, True]
    assert reactions_store.kinds(conn, 1) == {"👍", "🎉"}
    assert write(conn, lambda c, tx: reactions_store.remove(c, 1, "🎉", w.agent.id))
    assert [r["emoji"] for r in reactions_store.of_message(conn, 1)] == ["👍"]

    def route(c: Connection, tx: Tx) -> list[int]:
        return [
            routes_store.change(
                c,
                project_id=w.project_id,
                scope="role",
                target="lead",
                value=value,
                reason="why",
                author_kind="human",
                author_id=w.ann.id,
                now=tx.now,
            )
            for value in ("model-a", "model-b", None)
        ]

    assert write(conn, route) == [2, 3, 4]  # a project starts at version 1
    assert routes_store.config_version(conn, w.project_id) == 4
    assert routes_store.settings(conn, w.project_id) == {}
    changes = routes_store.history(conn, w.project_id)
    assert [(c["old_value"], c["new_value"]) for c in changes] == [
        ("model-b", None),
        ("model-a", "model-b"),
        (None, "model-a"),
    ]

    def research(c: Connection, tx: Tx) -> tuple[int, int]:
        run_id = research_store.insert_run(
            c, project_id=w.project_id, question="why?", scope={"paths": ["a"]},
            members=[w.agent.id], budget={"tokens": 10}, digest="d", proposer_id=w.owner.id,
            now=tx.now,
        )  # fmt: skip
        item_id = research_store.add_item(
            c, project_id=w.project_id, research_id=run_id, member_id=w.agent.id,
            kind="finding", body="it is", sources=["a.py"], now=tx.now,
        )  # fmt: skip
        return run_id, item_id

    run_id, item_id = write(conn, research)
    run = research_store.get(conn, run_id)
    assert run is not None and (run["question"], run["state"]) == ("why?", "proposed")
    assert [r["rev"] for r in research_store.revisions(conn, run_id)] == [1]
    assert [i["id"] for i in research_store.items(conn, run_id)] == [item_id]
    assert [r["id"] for r in research_store.in_states(conn, ("proposed", "running"))] == [run_id]


# -- plans, tasks, decisions, the loop brake's JSON ------------------------------------------------


def test_plans_tasks_decisions_and_the_brakes_json(conn: Connection) -> None:
    w = make_world(conn)
    agent, guest = w.agent.id, w.guest.id

    def plan_and_tasks(c: Connection, tx: Tx) -> tuple[list[int], list[int], list[int]]:
        typed = cast(sqlite3.Connection, c)
        one, _ = tasks_store.insert_plan(
            typed, project_id=w.project_id, goal="g", plan={"a": 1}, submitted_by=agent,
            started=False, now=tx.now,
        )  # fmt: skip
        two, version = tasks_store.insert_plan(
            typed, project_id=w.project_id, goal=None, plan={}, submitted_by=agent,
            started=False, now=tx.now,
        )  # fmt: skip
        assert version == 2
        tasks = [
            tasks_store.insert_task(
                typed,
                project_id=w.project_id,
                plan_id=one,
                key=f"T{i}",
                title=f"t{i}",
                owner_id=agent,
                reviewer_id=None,
                state=TaskState.READY,
                held=False,
                assumptions=(),
                now=tx.now,
            )
            for i in range(3)
        ]
        # No plan named: every unstarted plan of the project (the `:plan IS NULL` form).
        started = tasks_store.start_plans(typed, w.project_id, None, agent, tx.now)
        return [one, two], tasks, started

    plans, tasks, started = write(conn, plan_and_tasks)
    assert started == plans and tasks == sorted(tasks) and len(set(tasks)) == 3
    typed = cast(sqlite3.Connection, conn)
    assert [t.position for t in tasks_store.tasks_of(typed, w.project_id)] == [1, 2, 3]

    def decide(c: Connection, tx: Tx) -> list[int]:
        typed = cast(sqlite3.Connection, c)
        return [
            decisions_store.insert_decision(
                typed,
                project_id=w.project_id,
                kind="decision",
                title=f"d{i}",
                status="accepted",
                created_by=agent,
                accepted_by=agent,
                now=tx.now,
            ).number
            for i in range(2)
        ]

    assert write(conn, decide) == [1, 2]

    def turns(c: Connection, tx: Tx) -> dict[str, Any]:
        brakes_store.count_agent_turn(c, tx, w.project_id, agent)
        brakes_store.count_agent_turn(c, tx, w.project_id, agent)
        brakes_store.count_agent_turn(c, tx, w.project_id, guest)
        brakes_store.trip(c, w.project_id, "loop", {"n": 3}, tx.now, held=[agent])
        return brakes_store.brake(c, w.project_id)

    brake = write(conn, turns)
    assert brake["agent_turns"] == 3
    assert brake["turns_by_member"] == {agent: 2, guest: 1}
    assert brake["held"] == [agent]
    assert brakes_store.holds_member(conn, w.project_id, agent) is True
    assert brakes_store.holds_member(conn, w.project_id, guest) is False
    assert deliveries_store.dispatch_facts(conn, agent) == ("active", "active", w.project_id, True)
    assert deliveries_store.dispatch_facts(conn, guest) == (
        "active", "active", w.project_id, False,
    )  # fmt: skip


# -- several writers: the constraints and versions both stores keep ---------------------------------


def test_one_running_turn_per_member_owners_and_the_roster_version(conn: Connection) -> None:
    w = make_world(conn)

    def open_turn(owner: str | None, member_id: int) -> Callable[[Connection, Tx], int]:
        def job(c: Connection, tx: Tx) -> int:
            return turns_store.insert_turn(
                c, project_id=w.project_id, member_id=member_id, trigger=None, now=tx.now,
                owner=owner,
            )  # fmt: skip

        return job

    mine = write(conn, open_turn("node-a", w.agent.id))
    with pytest.raises(DUPLICATE):  # a database constraint on both stores, not a convention
        write(conn, open_turn("node-b", w.agent.id))
    theirs = write(conn, open_turn("node-b", w.guest.id))
    assert turns_store.running_of(conn, w.agent.id) == mine
    # A start settles its own node's turns (and those that name none), never another's.
    assert [t[0] for t in turns_store.running_turns(conn, "node-a")] == [mine]
    assert [t[0] for t in turns_store.running_turns(conn, "node-b")] == [theirs]
    write(conn, lambda c, tx: turns_store.update_turn(c, mine, state="completed", ended_at=tx.now))
    again = write(conn, open_turn("node-b", w.agent.id))  # the member's next turn may run
    assert turns_store.running_of(conn, w.agent.id) == again

    before = projects_store.roster_version(conn, w.project_id)
    write(conn, lambda c, tx: projects_store.bump_roster(c, w.project_id))
    assert projects_store.roster_version(conn, w.project_id) == before + 1
    assert projects_store.roster_version(conn, 999) == -1


def test_a_start_leaves_the_inbox_of_a_member_another_node_runs(conn: Connection) -> None:
    w = make_world(conn)
    post(conn, w, w.owner, "@Lead 在吗", mentions=(w.agent,), message_id=1)
    [delivery] = deliveries_store.pending_of(conn, w.agent.id, 10, unoffered=False)
    write(
        conn,
        lambda c, tx: deliveries_store.set_state(c, [delivery], DeliveryState.DELIVERED, tx.now),
    )
    # In an in-process session's inbox and no turn runs: every start's to settle.
    assert deliveries_store.in_builtin_inboxes(conn, "node-a") == [delivery]
    write(
        conn,
        lambda c, tx: turns_store.insert_turn(
            c,
            project_id=w.project_id,
            member_id=w.agent.id,
            trigger=None,
            now=tx.now,
            owner="node-b",
        ),
    )
    # Node b runs the member's turn, whose session holds the inbox: a start of node a leaves it.
    assert deliveries_store.in_builtin_inboxes(conn, "node-a") == []
    assert deliveries_store.in_builtin_inboxes(conn, "node-b") == [delivery]


def test_a_start_leaves_the_hand_offs_of_another_nodes_sockets(conn: Connection) -> None:
    w = make_world(conn)
    write(conn, lambda c, tx: c.execute("UPDATE members SET driver = 'external' WHERE id = ?",
                                         (w.agent.id,)))  # fmt: skip
    for i in (1, 2, 3):
        post(conn, w, w.owner, f"@Lead {i}", mentions=(w.agent,), message_id=i)
    mine, theirs, old = deliveries_store.pending_of(conn, w.agent.id, 10, unoffered=False)
    write(conn, lambda c, tx: deliveries_store.mark_offered(c, [mine], "node-a:sock1"))
    write(conn, lambda c, tx: deliveries_store.mark_offered(c, [theirs], "node-b:sock2"))
    write(conn, lambda c, tx: deliveries_store.mark_offered(c, [old], "sock3"))  # before nodes
    assert deliveries_store.handed_to_external(conn, "node-a") == [mine, old]
    assert deliveries_store.handed_to_external(conn, "node-b") == [theirs, old]
    assert deliveries_store.handed_to_external(conn) == [mine, theirs, old]


def test_a_start_settles_only_its_own_nodes_research_runs(conn: Connection) -> None:
    w = make_world(conn)

    def runs(c: Connection, tx: Tx) -> list[int]:
        made = []
        for owner in ("node-a", "node-b", None):
            run_id = research_store.insert_run(
                c, project_id=w.project_id, question="why?", scope={}, members=[w.agent.id],
                budget={"tokens": 10}, digest="d", proposer_id=w.owner.id, now=tx.now,
            )  # fmt: skip
            research_store.update(c, run_id, tx.now, state="running", owner=owner)
            made.append(run_id)
        return made

    a, b, old = write(conn, runs)

    def ids(owner: str | None) -> list[int]:
        return [r["id"] for r in research_store.in_states(conn, ("running",), owner)]

    assert (ids("node-a"), ids("node-b"), ids(None)) == ([a, old], [b, old], [a, b, old])
