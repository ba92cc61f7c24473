"""Batched appends in the writer: rows several jobs leave to their batch, written together.

Each test holds the writer with one slow job so that everything submitted next runs as one
batch, then checks what a person relies on: every job sees what earlier jobs of its batch
wrote, seqs stay gap-free, and one bad row costs only its own job.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
import time
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

import pytest

from room.actions import messages as message_actions
from room.actions.messages import Ack, append_message
from room.errors import TxnConflictError
from room.services import NoAgents
from room.store import Appends, Database, Tx
from room.store import search as search_store
from room.store.db import BulkInsert
from room.store.migrate import connect, migrate
from tests.support.inproc import running_app

USERS = BulkInsert("users", ("handle", "display_name", "created_at"))


def _database(tmp_path: Path) -> Database:
    """A fresh, migrated database with its writer running (close it with ``await db.close()``)."""
    path = tmp_path / "room.sqlite"
    conn = connect(path)
    migrate(conn, path, now=time.time())
    conn.close()
    db = Database(path, readers=1)
    db.start(asyncio.get_running_loop())
    return db


def _held_writer(db: Database) -> tuple[threading.Event, asyncio.Future[None]]:
    """A job that keeps the writer busy until the event is set: what is submitted meanwhile
    queues up and runs as one batch."""
    release = threading.Event()

    def hold(conn: sqlite3.Connection, tx: Tx) -> None:
        release.wait(10)

    return release, db.submit(hold)


def _append_user(handle: str) -> Callable[[sqlite3.Connection, Tx], None]:
    def job(conn: sqlite3.Connection, tx: Tx) -> None:
        row = (handle, handle, tx.now)
        if tx.appends is None:  # run again alone after a batch's rows were refused
            conn.execute(USERS.sql, row)
        else:
            tx.appends.add(USERS, row)

    return job


@pytest.mark.anyio
async def test_a_plain_job_sees_rows_appended_before_it_and_a_bad_row_fails_alone(
    tmp_path: Path,
) -> None:
    db = _database(tmp_path)
    try:
        release, held = _held_writer(db)
        await asyncio.sleep(0.05)  # the writer has taken the hold job alone

        def count(conn: sqlite3.Connection, tx: Tx) -> int:
            assert tx.appends is None  # a plain job writes and reads directly
            return int(conn.execute("SELECT count(*) FROM users").fetchone()[0])

        first = db.submit(_append_user("ann"), appends=True)
        seen = db.submit(count)
        second = db.submit(_append_user("bob"), appends=True)
        duplicate = db.submit(_append_user("bob"), appends=True)  # handles are unique
        third = db.submit(_append_user("cat"), appends=True)
        release.set()
        await held
        results = await asyncio.gather(
            first, seen, second, duplicate, third, return_exceptions=True
        )
        assert results[1] == 1  # ann was written before the plain job ran
        assert isinstance(results[3], sqlite3.IntegrityError)
        assert [r for i, r in enumerate(results) if i not in (1, 3)] == [None, None, None]
        handles = await db.read(
            lambda c: [r[0] for r in c.execute("SELECT handle FROM users ORDER BY id")]
        )
        assert handles == ["ann", "bob", "cat"]
    finally:
        await db.close()


@pytest.mark.anyio
async def test_an_appending_job_sees_the_rows_earlier_jobs_of_its_batch_left_waiting(
    tmp_path: Path,
) -> None:
    # A job of the batch's appends that reads (or updates) a table whose rows still wait gets
    # them written first, whether or not it thought of flushing: it never counts past them.
    db = _database(tmp_path)
    try:
        release, held = _held_writer(db)
        await asyncio.sleep(0.05)

        def count_then_append(conn: sqlite3.Connection, tx: Tx) -> tuple[int, int, bool]:
            assert tx.appends is not None  # batched: the earlier rows have not been written
            seen = int(conn.execute("SELECT count(*) FROM users").fetchone()[0])
            renamed = conn.execute(
                "UPDATE users SET display_name = 'Ann B.' WHERE handle = 'ann'"
            ).rowcount
            tx.appends.add(USERS, ("dan", "dan", tx.now))
            waits = tx.appends.waits_for("SELECT handle FROM users")
            return seen, renamed, waits

        first = db.submit(_append_user("ann"), appends=True)
        second = db.submit(_append_user("bob"), appends=True)
        reader = db.submit(count_then_append, appends=True)
        release.set()
        await held
        await asyncio.gather(first, second)
        assert await reader == (2, 1, True)  # ann and bob seen, ann renamed, dan left waiting
        rows = await db.read(
            lambda c: [tuple(r) for r in c.execute("SELECT handle, display_name FROM users")]
        )
        assert rows == [("ann", "Ann B."), ("bob", "bob"), ("dan", "dan")]
        assert db.stats.retries == 0  # the batched path, not a retry job by job
    finally:
        await db.close()


@pytest.mark.anyio
async def test_a_plain_job_makes_the_batch_forget_its_facts_and_look_up_again(
    tmp_path: Path,
) -> None:
    # A plain job may change what the batch's jobs told each other (it may store a send):
    # the jobs after it are prefetched again, and none of them sees a fact from before it.
    db = _database(tmp_path)
    calls: list[list[Any]] = []

    def prefetch(conn: sqlite3.Connection, appends: Appends, keys: list[Any]) -> None:
        calls.append(list(keys))
        for key in keys:
            appends.remember_sent(0, key, None)

    def tells(key: str) -> Callable[[sqlite3.Connection, Tx], Any]:
        def job(conn: sqlite3.Connection, tx: Tx) -> Any:
            assert tx.appends is not None
            before = tx.appends.sent(0, key)
            tx.appends.remember_sent(0, key, (1, 1, None, key))
            return before

        return job

    def plain(conn: sqlite3.Connection, tx: Tx) -> None:
        assert tx.appends is None

    try:
        release, held = _held_writer(db)
        await asyncio.sleep(0.05)
        futures = [
            db.submit(tells("a"), appends=True, prefetch=(prefetch, "a")),
            db.submit(tells("a"), appends=True, prefetch=(prefetch, "a")),
            db.submit(plain),
            db.submit(tells("a"), appends=True, prefetch=(prefetch, "a")),
            db.submit(tells("b"), appends=True, prefetch=(prefetch, "b")),
        ]
        release.set()
        await held
        told = await asyncio.gather(*futures)
        # The second job learns the first's send; after the plain job, only the lookup counts.
        assert told == [None, (1, 1, None, "a"), None, None, None]
        assert calls == [["a", "a", "a", "b"], ["a", "b"]]
    finally:
        await db.close()


@pytest.mark.anyio
async def test_a_row_that_will_not_bind_fails_its_own_job_and_the_writer_lives_on(
    tmp_path: Path,
) -> None:
    db = _database(tmp_path)

    def too_big(conn: sqlite3.Connection, tx: Tx) -> None:
        row = ("huge", "huge", 2**70)  # no SQLite integer holds it: OverflowError, not sqlite3's
        if tx.appends is None:
            conn.execute(USERS.sql, row)
        else:
            tx.appends.add(USERS, row)

    try:
        release, held = _held_writer(db)
        await asyncio.sleep(0.05)
        good = db.submit(_append_user("dan"), appends=True)
        bad = db.submit(too_big, appends=True)
        release.set()
        await held
        await good  # the good row's job completes
        with pytest.raises(OverflowError):
            await bad
        # The writer is alive (this is one more batch) and only dan was written.
        count = await db.write(lambda c, tx: c.execute("SELECT count(*) FROM users").fetchone()[0])
        assert count == 1
    finally:
        await db.close()


@pytest.mark.anyio
async def test_a_job_leaking_stop_iteration_fails_alone_and_its_batch_completes(
    tmp_path: Path,
) -> None:
    db = _database(tmp_path)

    def leaks(conn: sqlite3.Connection, tx: Tx) -> None:
        next(iter(()))  # StopIteration, which a future refuses to carry

    told: list[tuple[Any, BaseException | None]] = []
    try:
        release, held = _held_writer(db)
        await asyncio.sleep(0.05)
        bad = db.submit(leaks)
        db.submit_then(_append_user("eve"), lambda result, error: told.append((result, error)))
        good = db.submit(_append_user("fay"), appends=True)
        release.set()
        await held
        with pytest.raises(RuntimeError, match="StopIteration"):
            await bad
        await good  # the good row's job completes
        assert told == [(None, None)]
    finally:
        await db.close()


@pytest.mark.anyio
async def test_prefetch_gets_every_key_of_the_batch_in_one_call(tmp_path: Path) -> None:
    db = _database(tmp_path)
    calls: list[list[Any]] = []

    def prefetch(conn: sqlite3.Connection, appends: Appends, keys: list[Any]) -> None:
        calls.append(list(keys))
        for key in keys:
            appends.remember_sent(0, key, (0, 0, None, f"found {key}"))

    def reads_memo(key: str) -> Callable[[sqlite3.Connection, Tx], Any]:
        def job(conn: sqlite3.Connection, tx: Tx) -> Any:
            assert tx.appends is not None
            sent = tx.appends.sent(0, key)
            return sent[3] if isinstance(sent, tuple) else sent

        return job

    def broken(conn: sqlite3.Connection, appends: Appends, keys: list[Any]) -> None:
        raise RuntimeError("the prefetch broke")

    try:
        release, held = _held_writer(db)
        await asyncio.sleep(0.05)
        futures = [
            db.submit(reads_memo(k), appends=True, prefetch=(prefetch, k)) for k in ("a", "b", "c")
        ]
        release.set()
        await held
        assert await asyncio.gather(*futures) == ["found a", "found b", "found c"]
        assert calls == [["a", "b", "c"]]

        # A prefetch that fails costs the batch its shortcut, never its jobs: they run again
        # alone (without appends, so they look up for themselves) and the writer lives on.
        def looks_up(conn: sqlite3.Connection, tx: Tx) -> str:
            return "alone" if tx.appends is None else "batched"

        retries = db.stats.retries
        release, held = _held_writer(db)
        await asyncio.sleep(0.05)
        futures = [db.submit(looks_up, appends=True, prefetch=(broken, k)) for k in "xy"]
        release.set()
        await held
        assert await asyncio.gather(*futures) == ["alone", "alone"]
        assert db.stats.retries == retries + 1
    finally:
        await db.close()


def test_sends_in_one_batch_keep_exactly_once_replies_and_gap_free_seqs(tmp_path: Path) -> None:
    with running_app(tmp_path / "data") as app:
        core = app.core
        # The demo's echo lead would answer in between: pause it (its deliveries are then held).
        lead = app.db().execute("SELECT lead_member_id FROM projects WHERE id = 1").fetchone()[0]
        status, _ = app.request(
            "POST", f"/api/projects/1/members/{lead}/pause", {}, cookie=app.owner_cookie
        )
        assert status == 200

        async def scenario() -> dict[str, Any]:
            roster = await core.rosters.get(1)
            owner = next(m for m in roster.members.values() if m.kind == "human")

            def send(txn: str, body: str, **kw: Any) -> Awaitable[Ack]:
                return message_actions.submit_send(
                    core, owner, roster, client_txn_id=txn, body=body, **kw
                )

            def notice(conn: sqlite3.Connection, tx: Tx) -> int:
                # A plain job between sends: it takes its seq from the table directly.
                _, seq, _ = append_message(
                    conn, tx, project_id=1, author_id=None, kind="system",
                    body="系统通知", html="<p>系统通知</p>",
                )  # fmt: skip
                return seq

            head, last_id = await core.db.read(
                lambda c: c.execute(
                    "SELECT (SELECT last_seq FROM projects WHERE id = 1),"
                    " (SELECT max(id) FROM messages)"
                ).fetchone()
            )
            retries = core.db.stats.retries
            release, held = _held_writer(core.db)
            await asyncio.sleep(0.05)
            batch = [
                send("t-1", "第一条"),
                send("t-1", "第一条"),  # a retransmit, in the same batch as its original
                core.db.submit(notice, locks=(1,)),
                send("t-2", "第二条"),
                send("t-3", "回复第二条", reply_to=last_id + 3),  # still in the batch, unwritten
            ]
            release.set()
            await held
            acks = await asyncio.gather(*batch)
            one_batch = core.db.stats.largest_batch >= len(batch)
            no_retry = core.db.stats.retries == retries
            # The same txn id with another body, later: refused, nothing written.
            with pytest.raises(TxnConflictError):
                await send("t-1", "不同的内容")
            rows = await core.db.read(
                lambda c: [
                    str(r[0])
                    for r in c.execute(
                        "SELECT body FROM messages WHERE project_id = 1 AND seq > ? ORDER BY seq",
                        (head,),
                    )
                ]
            )
            return {"head": head, "acks": acks, "rows": rows, "one_batch": one_batch,
                    "no_retry": no_retry}  # fmt: skip

        got = app.call(scenario)
        head = got["head"]
        first, again, system_seq, second, reply = got["acks"]
        assert got["one_batch"] and got["no_retry"]  # the batched path, not the fallback
        assert (again.message_id, again.seq, again.duplicate) == (first.message_id, first.seq, True)
        assert [first.seq, system_seq, second.seq, reply.seq] == [head + i for i in range(1, 5)]
        assert got["rows"] == ["第一条", "系统通知", "第二条", "回复第二条"]
        assert '"excerpt":"第二条"' in reply.frame
        conn = app.db()
        events = [
            (r[0], r[1], r[2])
            for r in conn.execute(
                "SELECT seq, kind, message_id FROM events WHERE project_id = 1 AND seq > ?"
                " ORDER BY seq",
                (head,),
            )
        ]
        assert [e[0] for e in events] == [head + i for i in range(1, 6)]
        # The reply's thread count on its root (unwritten in the batch too): the fifth event.
        assert events[4][1:] == ("message_updated", second.message_id)
        root_frame = conn.execute(
            "SELECT frame FROM messages WHERE id = ?", (second.message_id,)
        ).fetchone()[0]
        assert (
            '"thread":{"replies":1,' in root_frame
            and f'"last_reply_id":{reply.message_id}}}' in root_frame
        )
        # Every human message reached the lead through the ledger, once.
        delivered = conn.execute(
            "SELECT count(*), count(DISTINCT message_id) FROM deliveries WHERE message_id IN"
            " (?, ?, ?)",
            (first.message_id, second.message_id, reply.message_id),
        ).fetchone()
        assert tuple(delivered) == (3, 3)
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_a_flush_writes_the_full_text_rows_last_one_row_per_statement(tmp_path: Path) -> None:
    # FTS5 writes out what it buffered as a new index segment whenever a later statement of the
    # transaction opens a savepoint (a multi-row INSERT, one checking foreign keys): its rows
    # go after every other table's, so a batch makes one segment, not one per statement.
    path = tmp_path / "room.sqlite"
    conn = connect(path)
    migrate(conn, path, now=time.time())
    statements: list[str] = []
    appends = Appends()
    appends.add(search_store.FTS_ROWS, (1, "first message", ""))
    appends.add(USERS, ("ann", "Ann", 1.0))
    appends.add(search_store.FTS_ROWS, (2, "second message", ""))
    appends.add(USERS, ("bob", "Bob", 1.0))
    appends.add(USERS, ("cat", "Cat", 1.0))
    appends.take_seq(0, 0, 1.0)  # a project's last seq (no project 0: the row stays as it is)
    conn.execute("BEGIN IMMEDIATE")
    conn.set_trace_callback(statements.append)
    appends.flush(conn)
    conn.set_trace_callback(None)
    conn.execute("COMMIT")
    ours = ("INSERT INTO users ", "INSERT INTO search_fts ", "UPDATE projects ")
    mine = [s for s in statements if s.startswith(ours)]  # not FTS5's own statements
    tables = [s.split()[2] if s.startswith("INSERT") else s.split()[1] for s in mine]
    # users: 2 + 1 rows; the index: one statement per row, after everything else
    assert tables == ["users", "users", "projects", "search_fts", "search_fts"]
    handles = [r[0] for r in conn.execute("SELECT handle FROM users ORDER BY id")]
    assert handles == ["ann", "bob", "cat"]
    found = conn.execute("SELECT rowid FROM search_fts WHERE search_fts MATCH 'message'")
    assert sorted(r[0] for r in found) == [1, 2]


class _Wakes(NoAgents):
    def __init__(self) -> None:
        self.woken: list[int] = []

    def wake(self, project_id: int, member_ids: Iterable[int]) -> None:
        self.woken.extend(member_ids)


def test_a_send_wakes_only_the_agents_whose_delivery_is_pending(tmp_path: Path) -> None:
    # A paused agent's delivery is held: the resume releases it and wakes the agent, so the
    # send itself has nobody to wake (each wake of a paused agent cost a session round).
    with running_app(tmp_path / "data") as app:
        core = app.core
        lead = app.db().execute("SELECT lead_member_id FROM projects WHERE id = 1").fetchone()[0]
        path = f"/api/projects/1/members/{lead}"
        assert app.request("POST", f"{path}/pause", {}, cookie=app.owner_cookie)[0] == 200
        wakes = _Wakes()
        core.agents = wakes

        async def send(txn: str) -> Ack:
            roster = await core.rosters.get(1)
            owner = next(m for m in roster.members.values() if m.kind == "human")
            return await message_actions.submit_send(
                core, owner, roster, client_txn_id=txn, body="请看一下"
            )

        held = app.call(send, "w-1")
        assert wakes.woken == []
        state = (
            app.db()
            .execute("SELECT state FROM deliveries WHERE message_id = ?", (held.message_id,))
            .fetchone()[0]
        )
        assert state == "held"
        assert app.request("POST", f"{path}/resume", {}, cookie=app.owner_cookie)[0] == 200
        wakes.woken.clear()
        app.call(send, "w-2")
        assert wakes.woken == [lead]


def test_an_ack_frame_is_the_json_of_its_fields() -> None:
    ack = Ack(7, 42, False, "{}")
    for txn, req in [("t-1", None), ('引号"\\\n\u2028', "请求-1"), ("x", 'a"b')]:
        expected = {"type": "ack", "client_txn_id": txn, "message_id": 7, "seq": 42}
        expected |= {"duplicate": False} | ({} if req is None else {"req_id": req})
        assert json.loads(ack.to_text(txn, req)) == expected
        assert ack.to_text(txn, req) == json.dumps(
            expected, ensure_ascii=False, separators=(",", ":")
        )
