"""A send never reaches a stale roster (docs/storage.md, "Several writers"): the roster a
server cached is checked under the project's lock against ``projects.roster_version``, which
every roster change raises in its own transaction — also one this server never heard of (another
server's). On each store (``[sqlite]``, ``[postgresql]``)."""

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path

import pytest

from room.actions import messages as message_actions
from room.store import Tx
from room.store import projects as projects_store
from tests.support.inproc import owner_user, running_app


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request: pytest.FixtureRequest) -> str | None:
    return None if request.param == "sqlite" else str(request.getfixturevalue("pg_dsn"))


def test_a_roster_changed_behind_the_cache_is_read_again_before_the_send(
    tmp_path: Path, store_url: str | None
) -> None:
    with running_app(tmp_path / "data", database_url=store_url) as app:
        owner = owner_user(app)
        project_id, members, _ = app.project_with("名单", owner)
        sender = members[owner.handle]
        cached = app.call(app.core.rosters.get, project_id)
        assert cached.version == app.call(
            app.core.db.read, lambda c: projects_store.roster_version(c, project_id)
        )
        # Another server's change: a member leaves, written straight to the database, and no
        # effect here invalidates this server's cached roster.
        lead = members["lead"].id

        def leave_elsewhere(conn: sqlite3.Connection, tx: Tx) -> None:
            conn.execute("UPDATE members SET status = 'left' WHERE id = ?", (lead,))
            projects_store.bump_roster(conn, project_id)

        app.write(leave_elsewhere, locks=(project_id,))
        assert app.core.rosters.peek(project_id) is cached  # still the stale one here

        ack = app.call(
            message_actions.send_message, app.core, sender,
            client_txn_id=uuid.uuid4().hex, body="还有人吗",
        )  # fmt: skip
        fresh = app.core.rosters.peek(project_id)
        assert fresh is not None and fresh is not cached
        assert fresh.version == cached.version + 1  # type: ignore[operator]
        assert fresh.member(lead) is not None and fresh.member(lead).status == "left"  # type: ignore[union-attr]
        # Addressed with the fresh roster: the departed lead got no delivery.
        with app.db() as conn:
            got = conn.execute(
                "SELECT recipient_id FROM deliveries WHERE message_id = ?", (ack.message_id,)
            ).fetchall()
        assert [r[0] for r in got] == []
