"""Project memory records: the writes (docs/memory.md) and the read shapes they answer with.

People (owners and members) read and edit records over HTTP (:mod:`room.api.memory`); agents
write only through their tools (:mod:`room.agents.memory_tools`). Every write, in one
transaction: the record and its revision row, the caps (past one the oldest entries of the kind
move to the archive whole, never cut), the project's memory version bumped, and a ``memory``
frame for the project's subscribers recorded as an effect. An edit names the revision it
started from; another edit in between is ``stale_revision`` (409) and nothing is written.
Session-log entries are append-only; references are deduplicated on their kind and target.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from room.errors import ConflictError, ForbiddenError, NotFoundError
from room.rules import injection, records
from room.rules.effects import Broadcast
from room.rules.entities import Member, iso
from room.rules.lifecycle import ActorKind, ProjectState, posting_open
from room.rules.protocol import encode
from room.rules.records import RecordError
from room.services import Services
from room.store import Tx
from room.store import audit as audit_store
from room.store import decisions as decisions_store
from room.store import members as members_store
from room.store import memory as memory_store
from room.store import projects as projects_store
from room.store import search as search_store
from room.store.dialect import Connection

#: Session-log entries the overview carries (newest first); the rest are a page away.
OVERVIEW_SESSIONS = 50
MAX_PAGE = 200


# -- writes ---------------------------------------------------------------------------------------


def check_writable(conn: Connection, member: Member) -> None:
    """Memory changes only while the project accepts messages from this kind of member."""
    state = projects_store.state_of(conn, member.project_id) or "purged"
    poster = ActorKind.AGENT if member.kind == "agent" else ActorKind.MEMBER
    if not posting_open(ProjectState(state), poster):
        raise ConflictError(
            f"项目处于 {state}，现在不能修改记忆 (The project is {state}; memory cannot change "
            "now.)",
            code="project_not_accepting",
            state=state,
        )
    if member.status == "left":
        raise ForbiddenError("你已离开本项目 (You have left this project.)", code="member_left")


def record_written(conn: Connection, tx: Tx, project_id: int, kind: str, record_id: int) -> int:
    """Bump the project's memory version and announce it (the ``memory`` frame, after the
    commit). Every memory write calls it once, decisions included; returns the new version."""
    version = memory_store.bump_version(conn, project_id, tx.now)
    frame = {"type": "memory", "project_id": project_id, "version": version, "kind": kind,
             "id": record_id}  # fmt: skip
    tx.emit(Broadcast(project_id, encode(frame)))
    return version


def index_entry(conn: Connection, entry_id: int) -> dict[str, Any]:
    """(Re)index an entry's current text for search, in the write's transaction; returns it.
    Archived entries stay indexed: the archive is searchable."""
    found = memory_store.entry(conn, entry_id)
    assert found is not None
    search_store.index_record(
        conn, project_id=found["project_id"], record_id=entry_id, kind=found["kind"],
        author_id=found["author_id"], at=found["updated_at"],
        text=records.text_of(found["kind"], found["body"]),
    )  # fmt: skip
    return found


def index_decisions(conn: Connection, decision_ids: set[int]) -> None:
    """(Re)index decisions' current revisions (title, context, decision, consequences, the
    alternatives rejected, constraints) under kind ``decision``."""
    for decision_id in sorted(decision_ids):
        row = decisions_store.get_decision(conn, decision_id)
        if row is None:
            continue
        current = decisions_store.revisions_of(conn, decision_id)[-1:]
        parts = [f"{row.label} {row.title}"]
        for rev in current:
            parts += [rev["context"], rev["decision"], rev["consequences"], rev["constraints"]]
            parts += [f"否决：{a['option']}（{a['why_rejected']}）" for a in rev["alternatives"]]
        search_store.index_record(
            conn, project_id=row.project_id, record_id=row.id, kind="decision",
            author_id=row.created_by, at=row.updated_at,
            text="\n".join(p for p in parts if p),
        )  # fmt: skip


def enforce_cap(
    conn: Connection, tx: Tx, project_id: int, kind: str, *, newest: int | None = None
) -> list[int]:
    """Move the oldest live entries of ``kind`` past its cap to the archive; returns their ids.
    Decisions are capped in the decisions table (the requirement is never archived).
    ``newest``: an entry counted as the newest whatever its id (one just restored), so it stays."""
    if kind == "decision":
        sizes = memory_store.decision_sizes(conn, project_id)
    else:
        sizes = memory_store.live_sizes(conn, project_id, kind)
    if newest is not None:
        sizes = [s for s in sizes if s[0] != newest] + [s for s in sizes if s[0] == newest]
    drop = records.over_cap(kind, [size for _, size in sizes])
    if not drop:
        return []
    ids = [entry_id for entry_id, _ in sizes[:drop]]
    if kind == "decision":
        memory_store.archive_decisions(conn, ids)
    else:
        memory_store.archive(conn, ids, tx.now)
    audit_store.record(
        conn, now=tx.now, actor_kind="system", actor_id=None, project_id=project_id,
        action="memory.archive", outcome="ok",
        detail={"kind": kind, "ids": ids, "reason": "cap"},
    )  # fmt: skip
    return ids


def _in_project(conn: Connection, member: Member, entry_id: int) -> dict[str, Any]:
    found = memory_store.entry(conn, entry_id)
    if found is None or found["project_id"] != member.project_id:
        raise NotFoundError(f"没有记录 {entry_id} (No record {entry_id} here.)", code="not_found")
    return found


def add_entry_in(
    conn: Connection,
    tx: Tx,
    actor: Member,
    kind: str,
    raw: Mapping[str, Any],
    *,
    turn_id: int | None = None,
) -> dict[str, Any]:
    """A new fact, convention, progress, session or reference entry; call inside a write job.

    Returns the entry (store shape) with ``duplicate: true`` when a reference with the same
    kind and target already existed (its note is updated in a new revision if it differs)."""
    records.check_kind(kind)
    if kind == "summary":
        raise RecordError(
            "概要只有一份，用 PUT …/memory/summary 修改 (The summary is one record: edit it.)",
            code="summary_is_single",
        )
    body = records.validate(kind, raw)
    check_writable(conn, actor)
    project_id = actor.project_id
    ref_key = records.reference_key(body) if kind == "reference" else None
    if ref_key is not None:
        same = memory_store.reference_by_key(conn, project_id, ref_key)
        if same is not None:
            if body["note"] and body["note"] != same["body"].get("note"):
                _update(conn, tx, actor, same, body, ref_key)
            return (memory_store.entry(conn, same["id"]) or same) | {"duplicate": True}
    entry_id = memory_store.insert_entry(
        conn, project_id=project_id, kind=kind, body=body, size=records.size_of(kind, body),
        author_id=actor.id, now=tx.now, turn_id=turn_id if kind == "session" else None,
        ref_key=ref_key,
    )  # fmt: skip
    created = index_entry(conn, entry_id)
    enforce_cap(conn, tx, project_id, kind)
    record_written(conn, tx, project_id, kind, entry_id)
    return memory_store.entry(conn, entry_id) or created


def _update(
    conn: Connection,
    tx: Tx,
    actor: Member,
    current: dict[str, Any],
    body: dict[str, Any],
    ref_key: str | None = None,
) -> dict[str, Any]:
    kind = current["kind"]
    memory_store.update_entry(
        conn, entry_id=current["id"], project_id=current["project_id"], rev=current["rev"] + 1,
        body=body, size=records.size_of(kind, body), author_id=actor.id, now=tx.now,
        ref_key=ref_key,
    )  # fmt: skip
    index_entry(conn, current["id"])
    audit_store.record(
        conn, now=tx.now, actor_kind=actor.kind, actor_id=actor.id,
        project_id=current["project_id"], action="memory.edit", outcome="ok",
        detail={"kind": kind, "id": current["id"], "rev": current["rev"] + 1},
    )  # fmt: skip
    if kind != "summary" and not current["archived"]:
        enforce_cap(conn, tx, current["project_id"], kind)
    record_written(conn, tx, current["project_id"], kind, current["id"])
    updated = memory_store.entry(conn, current["id"])
    assert updated is not None
    return updated


def _check_rev(current: dict[str, Any] | None, rev: int | None) -> None:
    have = current["rev"] if current is not None else 0
    if rev is not None and rev != have:
        raise ConflictError(
            f"记录已被改过：你基于第 {rev} 版，现在是第 {have} 版 (Someone edited it since "
            f"revision {rev}; it is at revision {have}. Reload and edit again.)",
            code="stale_revision",
            rev=have,
            yours=rev,
        )


def edit_entry_in(
    conn: Connection,
    tx: Tx,
    actor: Member,
    entry_id: int,
    rev: int | None,
    changes: Mapping[str, Any],
) -> dict[str, Any]:
    """Edit an entry from revision ``rev`` (None: whatever is current, for an agent's tool
    that read it just now); the fields given replace the current ones. Call inside a write."""
    current = _in_project(conn, actor, entry_id)
    kind = current["kind"]
    if kind == "session":
        raise ConflictError(
            "会话记录只能追加，不能修改 (Session-log entries are append-only.)",
            code="append_only",
        )
    if kind == "summary":
        records.validate("summary", changes)  # only ``sections``, each known and not too long
        return set_summary_in(conn, tx, actor, rev, changes.get("sections") or {})
    body = records.validate(kind, {**current["body"], **changes})
    check_writable(conn, actor)
    _check_rev(current, rev)
    ref_key = None
    if kind == "reference":
        ref_key = records.reference_key(body)
        same = memory_store.reference_by_key(conn, actor.project_id, ref_key)
        if same is not None and same["id"] != entry_id:
            raise ConflictError(
                f"已有同样的参考（记录 {same['id']}） (The same reference exists: {same['id']}.)",
                code="duplicate_reference",
                id=same["id"],
            )
    return _update(conn, tx, actor, current, body, ref_key)


def set_summary_in(
    conn: Connection,
    tx: Tx,
    actor: Member,
    rev: int | None,
    sections: Mapping[str, Any],
) -> dict[str, Any]:
    """Edit the project summary's sections from revision ``rev`` (0 before it exists; None:
    whatever is current). The sections named replace theirs; the others stay."""
    records.validate("summary", {"sections": sections})  # unknown or too long: say so first
    check_writable(conn, actor)
    current = memory_store.summary(conn, actor.project_id)
    _check_rev(current, rev)
    if current is None:
        body = records.validate("summary", {"sections": sections})
        entry_id = memory_store.insert_entry(
            conn, project_id=actor.project_id, kind="summary", body=body,
            size=records.size_of("summary", body), author_id=actor.id, now=tx.now,
        )  # fmt: skip
        created = index_entry(conn, entry_id)
        record_written(conn, tx, actor.project_id, "summary", entry_id)
        return created
    body = records.validate(
        "summary", records.merge_sections(current["body"]["sections"], sections)
    )
    return _update(conn, tx, actor, current, body)


def archive_entry_in(conn: Connection, tx: Tx, actor: Member, entry_id: int) -> dict[str, Any]:
    """A person moves an entry to the archive (it stays readable and searchable)."""
    current = _in_project(conn, actor, entry_id)
    if current["kind"] == "summary":
        raise ConflictError("概要不能归档 (The summary is not archived.)", code="not_archivable")
    check_writable(conn, actor)
    if not current["archived"]:
        memory_store.archive(conn, [entry_id], tx.now)
        audit_store.record(
            conn, now=tx.now, actor_kind=actor.kind, actor_id=actor.id,
            project_id=actor.project_id, action="memory.archive", outcome="ok",
            detail={"kind": current["kind"], "ids": [entry_id], "reason": "by hand"},
        )  # fmt: skip
        record_written(conn, tx, actor.project_id, current["kind"], entry_id)
    archived = memory_store.entry(conn, entry_id)
    assert archived is not None
    return archived


def restore_entry_in(conn: Connection, tx: Tx, actor: Member, entry_id: int) -> dict[str, Any]:
    """A person moves an archived entry back to the live ones. It counts as the newest of its
    kind: when that takes the kind past its cap, the oldest other live entries go to the
    archive in its place."""
    current = _in_project(conn, actor, entry_id)
    check_writable(conn, actor)
    if current["archived"]:
        memory_store.restore(conn, entry_id)
        audit_store.record(
            conn, now=tx.now, actor_kind=actor.kind, actor_id=actor.id,
            project_id=actor.project_id, action="memory.restore", outcome="ok",
            detail={"kind": current["kind"], "ids": [entry_id]},
        )  # fmt: skip
        enforce_cap(conn, tx, actor.project_id, current["kind"], newest=entry_id)
        record_written(conn, tx, actor.project_id, current["kind"], entry_id)
    restored = memory_store.entry(conn, entry_id)
    assert restored is not None
    return restored


def clear_in(conn: Connection, tx: Tx, actor: Member, confirm: Any) -> dict[str, Any]:
    """An owner clears the project's memory: every entry of every kind (the summary, facts,
    conventions, progress, the session log, references), live and archived, with its history
    and its search index. Decisions stay: they are the decision log of the task board. Needs
    ``confirm: true`` (the page's second click); audited as ``memory.clear`` with the counts."""
    if not actor.is_owner:
        raise ForbiddenError(
            "只有项目所有者可以清除记忆 (Only a project owner can clear the memory.)",
            code="not_owner",
        )
    if confirm is not True:
        raise RecordError(
            "清除全部记忆要确认：confirm 为 true (Clearing all memory needs confirm: true.)",
            code="confirm_required",
            field="confirm",
        )
    check_writable(conn, actor)
    gone = memory_store.clear_entries(conn, actor.project_id)
    for entry_id, kind in gone:
        search_store.unindex_record(conn, entry_id, kind=kind)
    counts: dict[str, int] = {}
    for _, kind in gone:
        counts[kind] = counts.get(kind, 0) + 1
    audit_store.record(
        conn, now=tx.now, actor_kind=actor.kind, actor_id=actor.id,
        project_id=actor.project_id, action="memory.clear", outcome="ok",
        detail={"counts": counts},
    )  # fmt: skip
    version = record_written(conn, tx, actor.project_id, "all", 0)
    return {"project_id": actor.project_id, "version": version, "deleted": counts}


async def clear(core: Services, actor: Member, confirm: Any) -> dict[str, Any]:
    return await core.db.write(
        lambda conn, tx: clear_in(conn, tx, actor, confirm), locks=(actor.project_id,)
    )


async def add_entry(
    core: Services, actor: Member, kind: str, raw: Mapping[str, Any], *, turn_id: int | None = None
) -> dict[str, Any]:
    """Add an entry; returns its wire object."""

    def job(conn: Connection, tx: Tx) -> dict[str, Any]:
        return entry_wire(conn, add_entry_in(conn, tx, actor, kind, raw, turn_id=turn_id))

    return await core.db.write(job, locks=(actor.project_id,))


async def edit_entry(
    core: Services, actor: Member, entry_id: int, rev: int | None, changes: Mapping[str, Any]
) -> dict[str, Any]:
    return await core.db.write(
        lambda conn, tx: entry_wire(conn, edit_entry_in(conn, tx, actor, entry_id, rev, changes)),
        locks=(actor.project_id,),
    )


async def set_summary(
    core: Services, actor: Member, rev: int | None, sections: Mapping[str, Any]
) -> dict[str, Any]:
    return await core.db.write(
        lambda conn, tx: entry_wire(conn, set_summary_in(conn, tx, actor, rev, sections)),
        locks=(actor.project_id,),
    )


async def archive_entry(core: Services, actor: Member, entry_id: int) -> dict[str, Any]:
    return await core.db.write(
        lambda conn, tx: entry_wire(conn, archive_entry_in(conn, tx, actor, entry_id)),
        locks=(actor.project_id,),
    )


async def restore_entry(core: Services, actor: Member, entry_id: int) -> dict[str, Any]:
    return await core.db.write(
        lambda conn, tx: entry_wire(conn, restore_entry_in(conn, tx, actor, entry_id)),
        locks=(actor.project_id,),
    )


# -- reads ----------------------------------------------------------------------------------------


def _author(conn: Connection, member_id: int | None) -> dict[str, Any] | None:
    if member_id is None:
        return None
    found = members_store.get(conn, member_id)
    if found is None:
        return None
    return {"id": found.id, "handle": found.handle, "display_name": found.display_name,
            "kind": found.kind}  # fmt: skip


def entry_wire(conn: Connection, entry: dict[str, Any]) -> dict[str, Any]:
    """An entry as the API, the page and the tools see it (times ISO 8601 UTC)."""
    body = dict(entry["body"])
    if entry["kind"] == "summary":
        body["labels"] = dict(records.SUMMARY_SECTIONS)
    if entry["kind"] == "session":
        body["member_id"] = entry["author_id"]
        body["turn_id"] = entry["turn_id"]
    wire = {
        "id": entry["id"],
        "kind": entry["kind"],
        "rev": entry["rev"],
        "body": body,
        "author": _author(conn, entry["author_id"]),
        "created_at": iso(entry["created_at"]),
        "updated_at": iso(entry["updated_at"]),
        "archived": entry["archived"],
    }
    if entry.get("updated_by") not in (None, entry["author_id"]):
        wire["updated_by"] = _author(conn, entry["updated_by"])
    if entry.get("duplicate"):
        wire["duplicate"] = True
    return wire


def staleness(
    conn: Connection, project_id: int, now: float, stale_days: int
) -> dict[str, int] | None:
    """``{days, entries_since}`` when the summary is older than ``stale_days`` while newer
    session-log entries exist; None otherwise, or when ``stale_days`` is 0 (off)."""
    current = memory_store.summary(conn, project_id)
    if stale_days <= 0 or current is None:
        return None
    # The rule is injection.staleness's (the agents' section says the same); the count is read
    # only once the summary is old enough to matter.
    if injection.staleness(current["updated_at"], now, stale_days, 1) is None:
        return None
    since = memory_store.sessions_since(conn, project_id, current["updated_at"])
    stale = injection.staleness(current["updated_at"], now, stale_days, since)
    return None if stale is None else {"days": stale.days, "entries_since": stale.entries_since}


def overview(conn: Connection, project_id: int, *, now: float, stale_days: int) -> dict[str, Any]:
    """Everything the 记忆 tab shows at once (``GET /api/projects/{id}/memory``)."""
    summary = memory_store.summary(conn, project_id)
    body: dict[str, Any] = {
        "version": memory_store.memory_version(conn, project_id),
        "changed_at": iso(memory_store.memory_changed_at(conn, project_id)),
        "summary": entry_wire(conn, summary) if summary else None,
    }
    for kind, key in records.LIST_KEYS.items():
        limit = OVERVIEW_SESSIONS if kind == "session" else None
        body[key] = [
            entry_wire(conn, e) for e in memory_store.entries(conn, project_id, kind, limit=limit)
        ]
    archived = memory_store.archived_counts(conn, project_id)
    body["archived"] = archived
    body["pointers"] = {k: records.archive_pointer(k, n) for k, n in archived.items()}
    body["caps"] = {
        kind: {"max_bytes": cap.max_bytes, "max_entries": cap.max_entries}
        for kind, cap in records.CAPS.items()
    }
    body["sections"] = [{"key": k, "label": label} for k, label in records.SUMMARY_SECTIONS]
    body["stale"] = staleness(conn, project_id, now, stale_days)
    return body


def page(
    conn: Connection,
    project_id: int,
    kind: str,
    *,
    archived: bool,
    before: int | None,
    limit: int,
    progress: records.ProgressFilter | None = None,
) -> dict[str, Any]:
    """A page of one kind, newest first (``GET /api/projects/{id}/memory/{kind}``); for
    ``decision`` the decisions (full objects), archived or live. ``progress`` filters a page
    of progress (the status filters)."""
    if kind == "decision":
        return _decision_page(conn, project_id, archived=archived, before=before, limit=limit)
    records.check_kind(kind)
    rows = read_page(conn, project_id, kind, archived, before, limit + 1, progress)
    body: dict[str, Any] = {
        "kind": kind,
        "archived": archived,
        "entries": [entry_wire(conn, e) for e in rows[:limit]],
        "has_more": len(rows) > limit,
    }
    count = memory_store.archived_counts(conn, project_id).get(kind, 0)
    if count and not archived:
        body["pointer"] = records.archive_pointer(kind, count)
    return body


def read_page(
    conn: Connection,
    project_id: int,
    kind: str,
    archived: bool,
    before: int | None,
    limit: int,
    progress: records.ProgressFilter | None = None,
) -> list[dict[str, Any]]:
    """Entries of one kind, newest first; progress through its filter when one is given."""
    if progress is None or not progress.active:
        return memory_store.entries(
            conn, project_id, kind, archived=archived, before=before, limit=limit
        )
    if kind != "progress":
        raise RecordError(
            "stage、tag、since、blocked 只用于进展 (These filters are for progress only.)",
            code="bad_query", field="kind",
        )  # fmt: skip
    return memory_store.entries_matching(
        conn, project_id, kind, lambda e: progress.matches(e["body"], e["created_at"]),
        archived=archived, before=before, limit=limit,
    )  # fmt: skip


def _decision_page(
    conn: Connection, project_id: int, *, archived: bool, before: int | None, limit: int
) -> dict[str, Any]:
    rows = [
        d
        for d in reversed(decisions_store.decisions_of(conn, project_id))
        if bool(d.archived) == archived and (before is None or d.id < before)
    ]
    return {
        "kind": "decision",
        "archived": archived,
        "entries": [decisions_store.decision_object(conn, d) for d in rows[:limit]],
        "has_more": len(rows) > limit,
    }


def history(conn: Connection, member: Member, entry_id: int) -> dict[str, Any]:
    """Every revision of an entry, oldest first."""
    _in_project(conn, member, entry_id)
    return {
        "id": entry_id,
        "revisions": [
            {
                "rev": r["rev"],
                "body": r["body"],
                "author": _author(conn, r["author_id"]),
                "at": iso(r["at"]),
            }
            for r in memory_store.revisions(conn, entry_id)
        ],
    }


def entry_for(conn: Connection, member: Member, entry_id: int) -> dict[str, Any]:
    return entry_wire(conn, _in_project(conn, member, entry_id))
