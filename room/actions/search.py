"""Searching a project (docs/search.md): who may, how often, and the filters read from a request.

The reading itself is :func:`room.store.search.search` in a reader thread; the caller must be
a member of the project (checked by the transport, as for history), so no other project's text
is ever looked at, and a purged project has no members and nothing in the index.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable
from typing import Any

from room.errors import BadRequestError, NotFoundError, RateLimitedError
from room.rules.entities import Member
from room.rules.searchquery import SearchOperatorError, SearchQuery, parse_search, snippet_markdown
from room.rules.searchtext import parse_query, parse_time
from room.services import Services
from room.store import members as members_store
from room.store import projects as projects_store
from room.store import search as search_store
from room.store import search_filters

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
    rate_limited: bool = True,
    markdown: bool = False,
) -> dict[str, Any]:
    """Search ``member``'s project: ``{"query", "words", "operators", "results", "capped"}``
    (the results as the store's function gives them).

    ``q`` may carry the operators of :mod:`room.rules.searchquery`
    (docs/search.md, "In one project, with operators"): ``from:`` (a handle or display name of this project), ``has:file``, ``before:``
    / ``after:`` (applied together with ``since`` / ``until``: both bounds hold), ``is:mention``
    (mentioning ``member``: for an agent, itself), and ``in:`` only naming this project (its id
    or name). A query of operators alone lists the newest messages they select.

    Refused before any reading: a bad operator (``bad_operator``; also ``in:`` naming another
    project, reason ``other_project``, and ``from:`` with ``by``, reason ``conflict``), a query
    with nothing to look for (``bad_query``), a bad time (``bad_time``), an unknown kind
    (``unknown_kind``) or author (``unknown_author``), and past ``SEARCH_PER_SEC`` per member
    (``rate_limited``, with ``retry_after_ms``; not for an agent's tool, ``rate_limited=False``).

    With ``markdown`` (the HTTP and WebSocket answers, which a page shows) each ``snippet_html``
    has its inline markdown rendered as ``/api/search`` has it
    (:func:`room.rules.searchquery.snippet_markdown`); an agent's tool reads the plain snippet."""
    query = parse_search(q)
    if query.words or not query.has_operators:
        parse_query(query.words)  # bad_query before spending the allowance or a reader
    since_at, until_at = parse_time(since), parse_time(until, end=True)
    since_at = _tighter(since_at, query.since, max)
    until_at = _tighter(until_at, query.until, min)
    if query.author is not None and by not in (None, ""):
        raise SearchOperatorError(
            "from", query.author, "conflict",
            "from: 与 by 不能同时使用 (from: and by cannot be used together.)",
        )  # fmt: skip
    if rate_limited:
        wait_ms = core.chatter.take((member.id, "search"))
        if wait_ms:
            raise RateLimitedError("searching too fast; slow down", retry_after_ms=wait_ms)
    project_id = member.project_id
    if query.projects:
        await _only_this_project(core, project_id, query.projects)
    if query.author is not None:
        author_id: int | None = await _named(core, project_id, query.author)
    else:
        author_id = await _author(core, project_id, by)
    filters: dict[str, Any] = {
        "author_id": author_id,
        "since": since_at,
        "until": until_at,
        "has_file": query.has_file,
        "mentioning": member.id if query.mentions_me else None,
        "limit": limit,
    }
    if query.words:
        await settle_index(core)
        answer = await core.db.read(
            lambda conn: search_store.search(conn, project_id, query.words, kinds=kinds, **filters)
        )
    else:  # operators alone read the messages table, not the index
        answer = await core.db.read(
            lambda conn: search_filters.list_messages(conn, project_id, **filters)
        )
    if markdown:
        for result in answer["results"]:
            result["snippet_html"] = snippet_markdown(result["snippet_html"])
    return {
        **answer,
        "query": q,
        "words": query.words,
        "operators": operators_of(query),
    }


def operators_of(query: SearchQuery) -> dict[str, Any]:
    """What the operators were read as (the page shows them as chips)."""
    return {
        "from": query.author,
        "has": "file" if query.has_file else None,
        "before": query.before,
        "after": query.after,
        "in": list(query.projects),
        "is": "mention" if query.mentions_me else None,
    }


def _tighter(
    given: float | None, operator: float | None, pick: Callable[[float, float], float]
) -> float | None:
    if given is None or operator is None:
        return operator if given is None else given
    return pick(given, operator)


def fold_name(text: str) -> str:
    """A name as an operator's value matches it: NFKC, case-folded, trimmed."""
    return unicodedata.normalize("NFKC", text).casefold().strip()


async def _only_this_project(core: Services, project_id: int, named: tuple[str, ...]) -> None:
    """``in:`` in a search of one project: only that project, by id or name; another is
    refused rather than ignored (its results would be this project's)."""
    project = await core.db.read(lambda conn: projects_store.get(conn, project_id))
    for value in named:
        if project is None or (
            value != str(project_id) and fold_name(value) != fold_name(project.name)
        ):
            raise SearchOperatorError(
                "in", value, "other_project",
                f"这里只搜本项目，in:{value[:80]} 不是它；跨项目请用 GET /api/search "
                f"(This search is of one project and in:{value[:80]} is not it; search across "
                "projects with GET /api/search.)",
            )  # fmt: skip


def member_named(conn: Any, project_id: int, name: str) -> Member | None:
    """The member ``from:`` names in a project: a handle (``@`` already taken off), then a
    display name (NFKC, case folded); ``None`` when nobody has that name."""
    found = members_store.by_handle(conn, project_id, name)
    if found is not None:
        return found
    folded = fold_name(name)
    for member in members_store.list_for_project(conn, project_id):
        if fold_name(member.display_name) == folded:
            return member
    return None


async def _named(core: Services, project_id: int, name: str) -> int:
    found = await core.db.read(lambda conn: member_named(conn, project_id, name))
    if found is None:
        raise NotFoundError(
            f"本项目没有成员 {name[:40]} (No member {name[:40]} in this project.)",
            code="unknown_author",
            value=name[:40],
        )
    return found.id


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
