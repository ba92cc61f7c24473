"""SQL of research runs (docs/research.md): runs, their revisions, their items.

Plain functions over a connection; :mod:`room.actions.research` decides. A run is a dict with
its columns decoded (``scope``, ``members``, ``budget`` from JSON; times as epoch floats).
"""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from room.store.dialect import Connection
from room.store.schema_research import RESEARCH_TABLES

_COLUMNS = (
    "id, project_id, state, rev, question, scope_json, members_json, budget_json, digest,"
    " proposer_id, card_id, approved_rev, approved_digest, approved_epoch, approved_by,"
    " approved_at, expires_at, tokens_used, requests_used, steps_used, run_secs, running_since,"
    " reserved_tokens, stop_reason, created_at, updated_at, owner, wait_reason, taken"
)
_NAMES = [c.strip() for c in _COLUMNS.split(",")]


def _run(row: sqlite3.Row | tuple[Any, ...]) -> dict[str, Any]:
    out = dict(zip(_NAMES, row, strict=True))
    for key in ("scope", "members", "budget"):
        out[key] = json.loads(out.pop(f"{key}_json"))
    return out


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True)


def insert_run(
    conn: Connection,
    *,
    project_id: int,
    question: str,
    scope: dict[str, Any],
    members: list[int],
    budget: dict[str, int],
    digest: str,
    proposer_id: int,
    now: float,
) -> int:
    cur = conn.execute(
        "INSERT INTO research_runs (project_id, state, rev, question, scope_json, members_json,"
        " budget_json, digest, proposer_id, created_at, updated_at) VALUES (:p, 'proposed', 1,"
        " :q, :s, :m, :b, :d, :by, :now, :now) RETURNING id",
        {"p": project_id, "q": question, "s": _json(scope), "m": _json(members),
         "b": _json(budget), "d": digest, "by": proposer_id, "now": now},
    )  # fmt: skip
    research_id = int(cur.fetchone()[0])
    add_revision(conn, research_id, author_id=proposer_id, now=now)
    return research_id


def add_revision(conn: Connection, research_id: int, *, author_id: int, now: float) -> None:
    """Copy the run's current revision into ``research_revisions``."""
    conn.execute(
        "INSERT INTO research_revisions (project_id, research_id, rev, question, scope_json,"
        " members_json, budget_json, digest, author_id, at) SELECT project_id, id, rev, question,"
        " scope_json, members_json, budget_json, digest, :a, :now FROM research_runs"
        " WHERE id = :r",
        {"r": research_id, "a": author_id, "now": now},
    )


def revise(
    conn: Connection,
    research_id: int,
    *,
    question: str,
    scope: dict[str, Any],
    members: list[int],
    budget: dict[str, int],
    digest: str,
    author_id: int,
    now: float,
) -> int:
    """A new revision: content replaced, rev + 1, back to ``proposed``, any approval cleared."""
    conn.execute(
        "UPDATE research_runs SET rev = rev + 1, question = :q, scope_json = :s,"
        " members_json = :m, budget_json = :b, digest = :d, state = 'proposed',"
        " approved_rev = NULL, approved_digest = NULL, approved_epoch = NULL,"
        " approved_by = NULL, approved_at = NULL, expires_at = NULL, updated_at = :now"
        " WHERE id = :r",
        {"r": research_id, "q": question, "s": _json(scope), "m": _json(members),
         "b": _json(budget), "d": digest, "now": now},
    )  # fmt: skip
    add_revision(conn, research_id, author_id=author_id, now=now)
    run = get(conn, research_id)
    assert run is not None
    return int(run["rev"])


def get(conn: Connection, research_id: int) -> dict[str, Any] | None:
    row = conn.execute(
        f"SELECT {_COLUMNS} FROM research_runs WHERE id = :r", {"r": research_id}
    ).fetchone()
    return _run(row) if row else None


def of_project(
    conn: Connection, project_id: int, states: tuple[str, ...] | None = None
) -> list[dict[str, Any]]:
    sql = f"SELECT {_COLUMNS} FROM research_runs WHERE project_id = :p"
    params: dict[str, Any] = {"p": project_id}
    if states is not None:
        marks = ", ".join(f":s{i}" for i in range(len(states)))
        sql += f" AND state IN ({marks})"
        params |= {f"s{i}": s for i, s in enumerate(states)}
    return [_run(r) for r in conn.execute(sql + " ORDER BY id", params)]


def in_states(
    conn: Connection, states: tuple[str, ...], owner: str | None = None
) -> list[dict[str, Any]]:
    """Runs in ``states``; with ``owner``, only those node ``owner`` started (or resumed) and
    those naming no node (docs/storage.md, "Several writers")."""
    marks = ", ".join(f":s{i}" for i in range(len(states)))
    params: dict[str, Any] = {f"s{i}": s for i, s in enumerate(states)}
    mine = ""
    if owner is not None:
        mine, params["owner"] = " AND (owner IS NULL OR owner = :owner)", owner
    return [
        _run(r)
        for r in conn.execute(
            f"SELECT {_COLUMNS} FROM research_runs WHERE state IN ({marks}){mine} ORDER BY id",
            params,
        )
    ]


def set_owner(conn: Connection, research_id: int, node: str | None, now: float) -> bool:
    """Name the node running a running run (its runner took it: ``taken``); False when it is
    not running."""
    row = conn.execute(
        "UPDATE research_runs SET owner = :n, taken = 1, updated_at = :now WHERE id = :r"
        " AND state = 'running' RETURNING id",
        {"n": node, "now": now, "r": research_id},
    ).fetchone()
    return row is not None


def waiting(conn: Connection) -> list[tuple[int, int, str | None, str | None]]:
    """(run, project, the project's home node, the run's ``wait_reason``) of the running runs in
    active projects: each runs on its project's home (or, its workspace shared, wherever holds
    the lease)."""
    return [
        (int(r[0]), int(r[1]), None if r[2] is None else str(r[2]), r[3])
        for r in conn.execute(
            "SELECT r.id, r.project_id, p.home_node, r.wait_reason FROM research_runs r"
            " JOIN projects p ON p.id = r.project_id"
            " WHERE r.state = 'running' AND p.state = 'active' ORDER BY r.id"
        )
    ]


def update(conn: Connection, research_id: int, now: float, **fields: Any) -> None:
    fields["updated_at"] = now
    sets = ", ".join(f"{k} = :{k}" for k in fields)
    conn.execute(f"UPDATE research_runs SET {sets} WHERE id = :id", {**fields, "id": research_id})


def add_spend(
    conn: Connection,
    research_id: int,
    *,
    tokens: int,
    requests: int,
    steps: int,
    now: float,
) -> None:
    conn.execute(
        "UPDATE research_runs SET tokens_used = tokens_used + :t,"
        " requests_used = requests_used + :q, steps_used = steps_used + :s, updated_at = :now"
        " WHERE id = :r",
        {"r": research_id, "t": tokens, "q": requests, "s": steps, "now": now},
    )


def revisions(conn: Connection, research_id: int) -> list[dict[str, Any]]:
    return [
        {"rev": int(r[0]), "question": r[1], "scope": json.loads(r[2]),
         "members": json.loads(r[3]), "budget": json.loads(r[4]), "digest": r[5],
         "author_id": r[6], "at": float(r[7])}
        for r in conn.execute(
            "SELECT rev, question, scope_json, members_json, budget_json, digest, author_id, at"
            " FROM research_revisions WHERE research_id = :r ORDER BY rev",
            {"r": research_id},
        )
    ]  # fmt: skip


_ITEM_COLUMNS = (
    "id, research_id, member_id, kind, body, sources_json, flow, flow_by, memory_id, created_at"
)


def _item(r: Any) -> dict[str, Any]:
    return {"id": int(r[0]), "research_id": int(r[1]), "member_id": r[2], "kind": r[3],
            "body": r[4], "sources": json.loads(r[5]), "flow": r[6], "flow_by": r[7],
            "memory_id": r[8], "created_at": float(r[9])}  # fmt: skip


def add_item(
    conn: Connection,
    *,
    project_id: int,
    research_id: int,
    member_id: int | None,
    kind: str,
    body: str,
    sources: list[str],
    now: float,
) -> int:
    cur = conn.execute(
        "INSERT INTO research_items (project_id, research_id, member_id, kind, body,"
        " sources_json, created_at) VALUES (:p, :r, :m, :k, :b, :s, :now) RETURNING id",
        {"p": project_id, "r": research_id, "m": member_id, "k": kind, "b": body,
         "s": _json(sources), "now": now},
    )  # fmt: skip
    return int(cur.fetchone()[0])


def items(conn: Connection, research_id: int) -> list[dict[str, Any]]:
    return [
        _item(r)
        for r in conn.execute(
            f"SELECT {_ITEM_COLUMNS} FROM research_items WHERE research_id = :r ORDER BY id",
            {"r": research_id},
        )
    ]


def item(conn: Connection, item_id: int) -> dict[str, Any] | None:
    row = conn.execute(
        f"SELECT {_ITEM_COLUMNS} FROM research_items WHERE id = :i", {"i": item_id}
    ).fetchone()
    return _item(row) if row else None


def set_flow(
    conn: Connection,
    item_id: int,
    flow: str,
    *,
    by: int | None,
    memory_id: int | None = None,
) -> None:
    conn.execute(
        "UPDATE research_items SET flow = :f, flow_by = :by, memory_id = :mid WHERE id = :i",
        {"i": item_id, "f": flow, "by": by, "mid": memory_id},
    )


def delete_project(conn: Connection, project_id: int) -> dict[str, int]:
    """Delete every research row of a project (the purge); returns the counts per table."""
    return {
        table: conn.execute(
            f"DELETE FROM {table} WHERE project_id = :p", {"p": project_id}
        ).rowcount
        for table in RESEARCH_TABLES
    }
