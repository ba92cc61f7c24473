"""The core's shared state: the roster cache."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from room.store.migrate import connect, migrate


@pytest.mark.anyio
async def test_the_roster_cache_does_not_keep_a_read_that_raced_an_invalidation(
    tmp_path: Path,
) -> None:
    from room.services import RosterCache
    from room.store import Database

    path = tmp_path / "room.sqlite"
    conn = connect(path)
    migrate(conn, path, now=time.time())
    conn.execute("INSERT INTO projects (name, created_at, updated_at) VALUES ('p', 0, 0)")
    conn.close()
    db = Database(path, readers=1)
    db.start(asyncio.get_running_loop())
    try:
        cache = RosterCache(db)
        pending = asyncio.ensure_future(cache.get(1))
        await asyncio.sleep(0)  # the read is in flight
        cache.invalidate(1)  # a member changed meanwhile
        await pending
        assert cache.peek(1) is None
        await cache.get(1)
        assert cache.peek(1) is not None
    finally:
        await db.close()
