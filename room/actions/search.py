"""Searching a project (docs/search.md): who may, how often, and the filters read from a request.

The reading itself is :func:`room.store.search.search` in a reader thread; the caller must be
a member of the project (checked by the transport, as for history), so no other project's text
is ever looked at, and a purged project has no members and nothing in the index.
"""

from __future__ import annotations

from typing import Any

from room.errors import BadRequestError, NotFoundError, RateLimitedError
from room.rules.entities import Member
from room.rules.searchtext import parse_query, parse_time
from room.services import Services
from room.store import members as members_store
from room.store import search as search_store

SEARCH_PER_SEC = 4.0
SEARCH_BURST = 20
# What a search on PostgreSQL answers to retry after (it will not work before an upgrade).
# How long a search waits for the indexer to reach the messages committed before it (a
# message just sent is found); past it, the search reads what is indexed (docs/search.md).
SETTLE_SECS = 0.5


async def search(
    core: Services,
    member: Member,
    q: str,
    *,
    kinds: list[str] | None = None,
    by: int | str | None = None,
    since: str | float | None = None,
    until: str | float | None = None,
    limit: int = search_store.DEFAULT_LIMIT,
) -> dict[str, Any]:
    """Search ``member``'s project: ``{"query", "results"}`` (see the store's function).

    Refused before any reading: a query with nothing to look for (``bad_query``), a bad time
    (``bad_time``), an unknown kind (``unknown_kind``) or author (``unknown_author``), and past
    ``SEARCH_PER_SEC`` per member (``rate_limited``, with ``retry_after_ms``)."""
    parse_query(q)  # bad_query before spending the allowance or a reader
    since_at, until_at = parse_time(since), parse_time(until, end=True)
    wait_ms = core.chatter.take((member.id, "search"))
    if wait_ms:
        raise RateLimitedError("searching too fast; slow down", retry_after_ms=wait_ms)
    project_id = member.project_id
    author_id = await _author(core, project_id, by)
    await settle_index(core)
    return await core.db.read(
        lambda conn: search_store.search(
            conn,
            project_id,
            q,
            kinds=kinds,
            author_id=author_id,
            since=since_at,
            until=until_at,
            limit=limit,
        )
    )


async def settle_index(core: Services) -> bool:
    """Wait (at most ``SETTLE_SECS``) for the messages' indexer to reach what was committed
    before now; False when it is further behind (or not running)."""
    if core.search_indexer is None:
        return False
    return await core.search_indexer.settle(SETTLE_SECS)


async def _author(core: Services, project_id: int, by: int | str | None) -> int | None:
    """The author filter: a member id, or a handle (with or without ``@``) of this project."""
    if by is None or by == "":
        return None
    if isinstance(by, int) or by.isdigit():
        member_id = int(by)
        roster = await core.rosters.get(project_id)
        if roster.member(member_id) is None:
            raise NotFoundError("no such member in this project", code="unknown_author")
        return member_id
    handle = by.removeprefix("@").removeprefix("＠")
    if not handle:
        raise BadRequestError("an author is a member id or handle", code="unknown_author")
    found = await core.db.read(lambda conn: members_store.by_handle(conn, project_id, handle))
    if found is None:
        raise NotFoundError(f"no member @{handle} in this project", code="unknown_author")
    return found.id
