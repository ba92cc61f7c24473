"""Search across all of a person's projects, with operators (docs/search.md "Across projects").

The query is split by the pure :func:`room.rules.searchquery.parse_search` into words and
operators; each project the person may read is searched with the store's own function
(:func:`room.store.search.search`, or :func:`room.store.search_filters.list_messages` for
operators alone), and the results are merged best first. Which projects: those where the person
is a member who has not left (:func:`room.store.members.projects_of_user`: a project they left,
never joined, or that was purged is never looked at), narrowed by ``in:`` (a name or an id, only
among those) or by the caller's ``project_ids``. ``from:`` is resolved in each project (a handle,
then a display name); a project where nobody has that name is skipped.
"""

from __future__ import annotations

from typing import Any

from room.actions.search import fold_name, member_named, operators_of, settle_index
from room.errors import BadQueryError, NotFoundError, RateLimitedError
from room.rules.entities import Project
from room.rules.searchquery import SearchQuery, parse_search, snippet_markdown
from room.rules.searchtext import parse_query
from room.services import Services
from room.store import members as members_store
from room.store import projects as projects_store
from room.store import search as search_store
from room.store import search_filters
from room.store.dialect import Connection


def _chosen(
    conn: Connection, user_id: int, query: SearchQuery, project_ids: list[int] | None
) -> list[Project]:
    mine = [
        p
        for pid in members_store.projects_of_user(conn, user_id)
        if (p := projects_store.get(conn, pid)) is not None and p.state != "purged"
    ]
    if project_ids is not None:
        wanted = set(project_ids)
        missing = sorted(wanted - {p.id for p in mine})
        if missing:
            raise NotFoundError(
                "no such project, or you are not in it", code="not_member", projects=missing
            )
        mine = [p for p in mine if p.id in wanted]
    if not query.projects:
        return mine
    chosen: dict[int, Project] = {}
    for value in query.projects:
        found = [p for p in mine if str(p.id) == value or fold_name(p.name) == fold_name(value)]
        if not found:  # only the person's own projects are named: nothing about others leaks
            raise NotFoundError(
                f"你的项目里没有「{value[:80]}」 (None of your projects is {value[:80]}.)",
                code="unknown_project",
                value=value[:80],
            )
        chosen.update((p.id, p) for p in found)
    return [p for p in mine if p.id in chosen]


async def search_projects(
    core: Services,
    user_id: int,
    q: str,
    *,
    project_ids: list[int] | None = None,
    kinds: list[str] | None = None,
    limit: int = search_store.DEFAULT_LIMIT,
) -> dict[str, Any]:
    """Search the person's projects: ``{"query", "operators", "projects", "results",
    "capped"}``, each result as :func:`room.store.search.search` gives it plus ``project:
    {id, name}``, its ``snippet_html`` with inline markdown rendered
    (:func:`room.rules.searchquery.snippet_markdown`). Refused before any reading: a bad operator
    (``bad_operator``), a query with neither words nor operators (``bad_query``), too many
    searches (``rate_limited``); ``unknown_project`` for an ``in:`` naming none of the person's
    projects, ``unknown_author`` for a ``from:`` naming nobody in any of them."""
    query = parse_search(q)
    if query.words:
        parse_query(query.words)
    elif not query.has_operators:
        raise BadQueryError("nothing to search for", reason="empty")
    wait_ms = core.chatter.take(("user", user_id, "search"))
    if wait_ms:
        raise RateLimitedError("searching too fast; slow down", retry_after_ms=wait_ms)
    if query.words:  # operators alone read the messages table, not the index
        await settle_index(core)

    def read(conn: Connection) -> dict[str, Any]:
        projects = _chosen(conn, user_id, query, project_ids)
        found: list[dict[str, Any]] = []
        capped = False
        author_found = False
        for project in projects:
            me = members_store.for_user(conn, project.id, user_id)
            if me is None or me.status == "left":
                continue
            author_id = None
            if query.author is not None:
                author = member_named(conn, project.id, query.author)
                if author is None:
                    continue
                author_found, author_id = True, author.id
            filters: dict[str, Any] = {
                "author_id": author_id,
                "since": query.since,
                "until": query.until,
                "has_file": query.has_file,
                "mentioning": me.id if query.mentions_me else None,
                "limit": limit,
            }
            if query.words:
                answer = search_store.search(conn, project.id, query.words, kinds=kinds, **filters)
            else:
                answer = search_filters.list_messages(conn, project.id, **filters)
            capped = capped or answer["capped"]
            for result in answer["results"]:
                result["project"] = {"id": project.id, "name": project.name}
                result["snippet_html"] = snippet_markdown(result["snippet_html"])
                found.append(result)
        if query.author is not None and not author_found and projects:
            raise NotFoundError(
                f"你的项目里没有成员 {query.author[:40]} (No member {query.author[:40]} in your "
                "projects.)",
                code="unknown_author",
                value=query.author[:40],
            )
        # Ranks are comparable across projects (one index, one BM25); newer first on ties and
        # for operators alone (rank 0).
        found.sort(key=lambda r: r["at"] or "", reverse=True)
        found.sort(key=lambda r: -r["rank"])
        return {
            "query": q,
            "words": query.words,
            "operators": operators_of(query),
            "projects": [{"id": p.id, "name": p.name} for p in projects],
            "results": found[: max(1, min(int(limit), search_store.MAX_LIMIT))],
            "capped": capped,
        }

    return await core.db.read(read)
