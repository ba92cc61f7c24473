"""Merging another project's records into this one (docs/packs.md, "Merge").

Memory records and decisions of the source are copied into the target unless the target already
has the same record: facts and conventions by normalized text (:func:`room.rules.packs.normalized`),
decisions by their current decision text (a copied decision keeps its number when the target
has none by that number, else takes the next one: renumbered), progress by time, session
(the author's handle), stage and text, session-log entries by time and summary, references by
union (kind and target), the summary only when the target has none. Requirements stay with
their own project. Authors map to the target's member with the same handle (else none).
The source's people (not its agents) join the target as members unless they are in it
already; its dependencies are added to the target's (none on the target itself).
The target records ``merged_from``; the source is kept (the caller may move it to the trash),
never purged here. One transaction.
"""

from __future__ import annotations

import json
from typing import Any

from room.actions import auth as auth_actions
from room.actions import memory as memory_actions
from room.errors import BadRequestError, ConflictError, NotFoundError
from room.rules import records
from room.rules.packs import normalized, progress_key
from room.store import Tx
from room.store import audit as audit_store
from room.store import auth as auth_store
from room.store import members as members_store
from room.store import projects as projects_store
from room.store.dialect import Connection

_ENTRY_COLUMNS = (
    "kind, rev, body_json, size, author_id, ref_key, archived, archived_at, created_at,"
    " updated_at, updated_by"
)
_DECISION_COLUMNS = (
    "number, kind, title, status, revision, created_by, accepted_by, created_at, updated_at,"
    " archived"
)
_REVISION_COLUMNS = (
    "revision, context, decision, consequences, original_text, author_id, created_at,"
    " alternatives_json, constraints"
)


def _handles(conn: Connection, project_id: int) -> dict[int, str]:
    rows = conn.execute("SELECT id, handle FROM members WHERE project_id = :p", {"p": project_id})
    return {int(r[0]): str(r[1]) for r in rows}


def _entry_key(kind: str, body: dict[str, Any], created_at: float, author: str | None) -> Any:
    if kind in ("fact", "convention"):
        return (kind, normalized(str(body.get("text", ""))))
    if kind == "progress":
        return (kind, *progress_key(created_at, author, body))
    if kind == "session":
        return (kind, round(created_at), normalized(str(body.get("summary", ""))))
    if kind == "reference":
        return (kind, records.reference_key(body))
    return (kind,)  # the summary: one per project


def merge_records(
    conn: Connection,
    tx: Tx,
    target_id: int,
    source_id: int,
    actor_id: int,
    source_actor_id: int | None = None,
) -> dict[str, Any]:
    """Copy the source's records into the target with the dedupe rules above; returns what
    was added, what was a duplicate and which decisions were renumbered."""
    if target_id == source_id:
        raise BadRequestError("a project cannot merge itself", code="merge_self")
    target = projects_store.get(conn, target_id)
    source = projects_store.get(conn, source_id)
    if target is None or source is None or source.state == "purged":
        raise NotFoundError("no such project", code="no_project")
    if target.state not in projects_store.OPEN_STATES:
        raise ConflictError(
            f"项目处于 {target.state}，不能合并进来 (The project is {target.state}; nothing can be "
            "merged into it.)",
            code="project_not_open",
            state=target.state,
        )
    tx.write_directly(conn)
    source_handles = _handles(conn, source_id)
    by_handle = {h.casefold(): i for i, h in _handles(conn, target_id).items()}
    target_handles = _handles(conn, target_id)

    def member(old: Any) -> int | None:
        handle = source_handles.get(old) if isinstance(old, int) else None
        return by_handle.get(handle.casefold()) if handle else None

    report: dict[str, Any] = {"memory_added": 0, "memory_duplicates": 0, "decisions_added": 0,
                              "decisions_duplicates": 0, "renumbered": []}  # fmt: skip
    seen = {
        _entry_key(r[0], json.loads(r[1]), r[2], target_handles.get(r[3]))
        for r in conn.execute(
            "SELECT kind, body_json, created_at, author_id FROM memory_entries"
            " WHERE project_id = :p", {"p": target_id},
        )
    }  # fmt: skip
    kinds: set[str] = set()
    for row in conn.execute(
        f"SELECT id, {_ENTRY_COLUMNS} FROM memory_entries WHERE project_id = :p ORDER BY id",
        {"p": source_id},
    ).fetchall():
        old_id, kind, body_json, created_at = row[0], row[1], row[3], row[9]
        key = _entry_key(kind, json.loads(body_json), created_at, source_handles.get(row[5]))
        if key in seen:
            report["memory_duplicates"] += 1
            continue
        seen.add(key)
        values = list(row[1:])
        values[4] = member(values[4])  # author_id
        values[10] = member(values[10])  # updated_by
        new_id = int(
            conn.execute(
                f"INSERT INTO memory_entries (project_id, {_ENTRY_COLUMNS}) VALUES"
                f" (?, {', '.join('?' * len(values))}) RETURNING id",
                [target_id, *values],
            ).fetchone()[0]
        )
        conn.execute(
            "INSERT INTO memory_revisions (project_id, entry_id, rev, body_json, author_id, at)"
            " SELECT :t, :new, rev, body_json, NULL, at FROM memory_revisions"
            " WHERE entry_id = :old ORDER BY rev",
            {"t": target_id, "new": new_id, "old": old_id},
        )
        memory_actions.index_entry(conn, new_id)
        kinds.add(kind)
        report["memory_added"] += 1
    added = _merge_decisions(conn, target_id, source_id, member, report)
    memory_actions.index_decisions(conn, added)
    _merge_people(conn, tx, target_id, source_id, report)
    report["dependencies_added"] = _merge_dependencies(conn, target_id, source_id, tx.now)
    merged_from = json.loads(
        conn.execute("SELECT merged_from FROM projects WHERE id = :p", {"p": target_id}).fetchone()[
            0
        ]
    )
    merged_from.append(source_id)
    conn.execute(
        "UPDATE projects SET merged_from = :m, updated_at = :now WHERE id = :p",
        {"m": json.dumps(merged_from), "now": tx.now, "p": target_id},
    )
    for kind in sorted(kinds | ({"decision"} if added else set())):
        memory_actions.enforce_cap(conn, tx, target_id, kind)
    memory_actions.record_written(conn, tx, target_id, "merge", source_id)
    detail = {"source": source_id, "target": target_id, **report}
    for project_id in (target_id, source_id):
        audit_store.record(
            conn, now=tx.now, actor_kind="human",
            actor_id=actor_id if project_id == target_id else source_actor_id,
            project_id=project_id, action="project.merge", outcome="ok",
            detail=detail,
        )  # fmt: skip
    return detail


def _merge_people(
    conn: Connection, tx: Tx, target_id: int, source_id: int, report: dict[str, Any]
) -> None:
    """The source's people join the target as members (never owners: a merge grants no
    ownership); one whose handle or name the target holds is skipped and said. Agents are
    not copied: each is a session with its own token, route and workspace."""
    report["members_added"], report["members_skipped"] = [], []
    for m in members_store.list_for_project(conn, source_id):
        if m.kind != "human" or m.status == "left" or m.user_id is None:
            continue
        user = auth_store.get_user(conn, m.user_id)
        if user is None:
            continue
        try:
            if auth_actions.join_as(conn, tx, user, target_id, "member"):
                report["members_added"].append(user.handle)
        except ConflictError as exc:
            report["members_skipped"].append({"handle": user.handle, "reason": exc.code})


def _merge_dependencies(conn: Connection, target_id: int, source_id: int, now: float) -> int:
    """The source's dependencies added to the target's (the same one once; none on the target
    itself, which the source's would become); returns how many were new."""
    before = _count_dependencies(conn, target_id)
    conn.execute(
        "INSERT OR IGNORE INTO project_dependencies"
        " (project_id, kind, target_project_id, name, created_at)"
        " SELECT :t, kind, target_project_id, name, :now FROM project_dependencies"
        " WHERE project_id = :s AND (target_project_id IS NULL OR target_project_id != :t)",
        {"t": target_id, "s": source_id, "now": now},
    )
    return _count_dependencies(conn, target_id) - before


def _count_dependencies(conn: Connection, project_id: int) -> int:
    row = conn.execute(
        "SELECT count(*) FROM project_dependencies WHERE project_id = :p", {"p": project_id}
    ).fetchone()
    return int(row[0])


def _merge_decisions(
    conn: Connection, target_id: int, source_id: int, member: Any, report: dict[str, Any]
) -> set[int]:
    def current_texts(project_id: int) -> dict[int, str]:
        rows = conn.execute(
            "SELECT d.id, r.decision FROM decisions d JOIN decision_revisions r"
            " ON r.decision_id = d.id AND r.revision = d.revision"
            " WHERE d.project_id = :p AND d.kind = 'decision' ORDER BY d.number",
            {"p": project_id},
        )
        return {int(r[0]): normalized(str(r[1])) for r in rows}

    texts = {text: decision_id for decision_id, text in current_texts(target_id).items()}
    numbers = {
        int(r[0])
        for r in conn.execute(
            "SELECT number FROM decisions WHERE project_id = :p", {"p": target_id}
        )
    }
    mapped: dict[int, int] = {}
    added: set[int] = set()
    for old_id, text in current_texts(source_id).items():
        if text in texts:
            mapped[old_id] = texts[text]
            report["decisions_duplicates"] += 1
            continue
        row = list(
            conn.execute(
                f"SELECT {_DECISION_COLUMNS} FROM decisions WHERE id = :id", {"id": old_id}
            ).fetchone()
        )
        number = int(row[0])
        if number in numbers:
            new_number = max(numbers) + 1
            report["renumbered"].append(
                {"from": f"ADR-{number:04d}", "to": f"ADR-{new_number:04d}"}
            )
            number = new_number
        numbers.add(number)
        row[0] = number
        row[5], row[6] = member(row[5]), member(row[6])
        new_id = int(
            conn.execute(
                f"INSERT INTO decisions (project_id, {_DECISION_COLUMNS}) VALUES"
                f" (?, {', '.join('?' * len(row))}) RETURNING id",
                [target_id, *row],
            ).fetchone()[0]
        )
        for rev in conn.execute(
            f"SELECT {_REVISION_COLUMNS} FROM decision_revisions WHERE decision_id = :d"
            " ORDER BY revision",
            {"d": old_id},
        ).fetchall():
            values = list(rev)
            values[5] = member(values[5])
            conn.execute(
                f"INSERT INTO decision_revisions (project_id, decision_id, {_REVISION_COLUMNS})"
                f" VALUES (?, ?, {', '.join('?' * len(values))})",
                [target_id, new_id, *values],
            )
        texts[text] = new_id
        mapped[old_id] = new_id
        added.add(new_id)
        report["decisions_added"] += 1
    for old_id, new_id in mapped.items():
        if new_id not in added:
            continue
        links = conn.execute(
            "SELECT supersedes, superseded_by FROM decisions WHERE id = :id", {"id": old_id}
        ).fetchone()
        conn.execute(
            "UPDATE decisions SET supersedes = :a, superseded_by = :b WHERE id = :id",
            {"a": mapped.get(links[0]), "b": mapped.get(links[1]), "id": new_id},
        )
    return added
