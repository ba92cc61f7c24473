"""The project records an agent session is given, and its end-of-turn reminder (docs/memory.md,
"Project records in every turn").

An in-process agent's session (:class:`room.agents.drivers.Session`) keeps one
:class:`MemorySession`. Its first turn reads the project's memory and builds the labelled
section (:func:`room.rules.injection.build`, within ``memory_budget_bytes``); the session keeps that
text and the memory version it was built from, so every later turn's request starts with the
very same bytes (a provider's prompt cache keeps working). When memory changed since (its
version moved: an agent's checkpoint, a person's edit of the summary), a turn gets, after the
section, the changed records themselves (:func:`read_deltas`, rendered by
:func:`room.rules.deltas.render` within what is left of the budget), never the section again.

A session — and with it the section, the reminder count — starts anew when the server starts
and when the member was idle for :data:`SESSION_IDLE_SECS` (an hour: providers keep a prompt
prefix for minutes, so a rebuilt section costs no cache then, and a day-old section would only
say "memory changed" every turn). Nothing of it is stored in the database: after a restart the
next turn builds the section again from the records themselves.

The reminder: a turn that did real work (wrote files, ran commands, changed tasks) and wrote
nothing to memory earns one short reminder (:class:`room.rules.injection.Reminders`: at most three
per session, ten minutes apart, the count reset by a memory write of the member). It is never
an extra model call: it rides on the next request of the session — the first request of the
member's next turn — as a line after the section.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from room.rules import deltas
from room.rules import injection as inj
from room.rules.entities import Member
from room.services import Services
from room.settings import Settings
from room.store import decisions as decisions_store
from room.store import memory as memory_store

log = logging.getLogger(__name__)

SESSION_IDLE_SECS = 3_600.0
#: Given instead of the section when memory could not be read (a fault, logged).
UNREADABLE = f"# {inj.LABEL}\n（项目记录这次没有读出来；需要时用 memory_read 读取。）"


@dataclass(slots=True)
class MemorySession:
    """What one agent session keeps: the section as built (and from which memory version),
    when its last turn ended, and its reminders."""

    section: str | None = None
    built_version: int = 0
    built_at: float = 0.0
    last_turn_at: float | None = None
    reminders: inj.Reminders = field(default_factory=inj.Reminders)
    injection: inj.Injection | None = None  # how the section was built (step, what was shown)

    def expired(self, now: float) -> bool:
        return self.last_turn_at is not None and now - self.last_turn_at >= SESSION_IDLE_SECS

    def restart(self) -> None:
        """Begin a new session: the next turn builds the section again, reminders from zero."""
        self.section, self.injection, self.last_turn_at = None, None, None
        self.reminders = inj.Reminders()

    def after_turn(
        self,
        *,
        now: float,
        work: Sequence[str],
        recorded: bool,
        max_given: int = inj.MAX_REMINDERS,
        gap_secs: float = inj.REMINDER_GAP_SECS,
    ) -> None:
        """Called when a turn of the session ended, with the tools it called successfully
        (``max_given`` and ``gap_secs``: the settings ``memory_reminder_max`` and
        ``memory_reminder_gap_secs``)."""
        self.last_turn_at = now
        self.reminders = self.reminders.after_turn(
            now=now, work=work, recorded=recorded, max_given=max_given, gap_secs=gap_secs
        )


async def records_text(
    core: Services, member: Member, session: MemorySession, now: float, *, can_record: bool = True
) -> str:
    """The records text of the turn starting now: the session's section (built now if the
    session is new), then the notice and the reminder it has earned, if any. ``can_record``:
    the member may write memory (only then does an empty summary ask it to fill it in)."""
    if session.expired(now):
        session.restart()
    project_id = member.project_id
    settings = core.settings
    if not settings.memory_inject:  # switched off: only the reminder, if one was earned
        reminder, session.reminders = session.reminders.take()
        return reminder or ""
    if session.section is None:
        roster = await core.rosters.get(project_id)
        names = {m.id: f"@{m.handle}（{m.display_name}）" for m in roster.members.values()}
        records = await core.db.read(
            lambda conn: read_records(conn, project_id, now, names, settings)
        )
        built = inj.build(
            records,
            budget_bytes=settings.memory_budget_bytes,
            session_entries=settings.memory_session_entries,
            bootstrap=settings.memory_bootstrap_when_empty and can_record,
        )
        session.section, session.built_version, session.built_at = built.text, built.version, now
        session.injection = built
        log.info(
            "member %s: project records built, %d bytes of %d, step %d, memory v%d",
            member.id, built.size, settings.memory_budget_bytes, built.step, built.version,
        )  # fmt: skip
        version = built.version
    else:
        version = await core.db.read(lambda conn: memory_store.memory_version(conn, project_id))
    changes = None
    if version != session.built_version:
        # What changed since the section was built, the records themselves, within what is
        # left of the budget (room.rules.deltas); the section itself stays as built.
        since, me = session.built_at, member.id
        found = await core.db.read(lambda conn: read_deltas(conn, project_id, since, me))
        room_left = settings.memory_budget_bytes - len(session.section.encode())
        changes = deltas.render(found, budget_bytes=room_left)
    reminder, session.reminders = session.reminders.take()
    notices = inj.notices(
        built_version=session.built_version, version=version, reminder=reminder, changes=changes
    )
    return session.section + ("\n\n" + notices if notices else "")


def read_deltas(
    conn: sqlite3.Connection, project_id: int, since: float, member_id: int
) -> list[deltas.Delta]:
    """The memory records changed after ``since`` by anyone but ``member_id`` (what the member
    wrote itself is in its own transcript), decisions included."""
    out = []
    for e in memory_store.changed_since(conn, project_id, since):
        if (e["updated_by"] or e["author_id"]) == member_id and not e["archived"]:
            continue
        if e["archived"] and (e["archived_at"] or 0.0) > since:
            what, at = "archived", float(e["archived_at"])
        else:
            what, at = ("new" if e["created_at"] > since else "edited"), e["updated_at"]
        label = f"id={e['id']}" if e["kind"] == "session" else ""
        out.append(deltas.Delta(e["kind"], what, at, deltas.text_of(e["kind"], e["body"]), label))
    for row in decisions_store.decisions_of(conn, project_id):
        if row.updated_at <= since or row.archived:
            continue
        revisions = decisions_store.revisions_of(conn, row.id)
        rev = next((r for r in revisions if r["revision"] == row.revision), None) or {}
        if row.created_by == member_id and row.updated_at == row.created_at:
            continue  # proposed by the member itself, nothing done to it since
        text = deltas.decision_text(row.title, row.status, str(rev.get("decision") or ""), row.kind)
        what = "new" if row.created_at > since else "edited"
        out.append(deltas.Delta("decision", what, row.updated_at, text, row.label))
    return out


def read_records(
    conn: sqlite3.Connection,
    project_id: int,
    now: float,
    names: Mapping[int, str],
    settings: Settings,
) -> inj.Records:
    """The project's memory as the section is built from it, read in one transaction."""

    def name(member_id: Any) -> str:
        return names.get(member_id, f"#{member_id}") if member_id is not None else "系统"

    version = memory_store.memory_version(conn, project_id)
    current = memory_store.summary(conn, project_id)
    summary = None
    stale = None
    if current is not None:
        sections = current["body"].get("sections") or {}
        summary = inj.Summary(
            sections={str(k): str(v) for k, v in sections.items()},
            rev=current["rev"],
            updated_at=current["updated_at"],
            author=name(current.get("updated_by") or current.get("author_id")),
        )
        if settings.memory_stale_days > 0:
            since = memory_store.sessions_since(conn, project_id, current["updated_at"])
            stale = inj.staleness(current["updated_at"], now, settings.memory_stale_days, since)
    # The live log is capped (200 entries): read whole, its length is the count shown.
    log = memory_store.entries(conn, project_id, "session")
    sessions = log[: settings.memory_session_entries]
    live = memory_store.live_counts(conn, project_id)

    def texts(kind: str) -> list[str]:
        # Capped by size (conventions 16 KiB, facts 24 KiB): every live one, newest first.
        return [
            str(e["body"].get("text") or "") for e in memory_store.entries(conn, project_id, kind)
        ]

    progress = memory_store.entries(conn, project_id, "progress", limit=inj.PROGRESS_ENTRIES)
    references = memory_store.entries(conn, project_id, "reference", limit=inj.REFERENCE_ENTRIES)
    return inj.Records(
        summary=summary,
        decisions=decisions(conn, project_id),
        sessions=[
            inj.SessionEntry(
                id=e["id"],
                author=name(e["author_id"]),
                at=e["created_at"],
                summary=str(e["body"].get("summary") or ""),
                did=str(e["body"].get("did") or ""),
                verified=str(e["body"].get("verified") or ""),
                next=str(e["body"].get("next") or ""),
                blocked=str(e["body"].get("blocked") or ""),
            )
            for e in sessions
        ],
        sessions_total=len(log),
        version=version,
        stale=stale,
        conventions=texts("convention"),
        facts=texts("fact"),
        progress=[
            inj.Progress(
                text=str(e["body"].get("text") or ""),
                stage=str(e["body"].get("stage") or ""),
                next=str(e["body"].get("next") or ""),
                at=e["created_at"],
                tags=tuple(str(t) for t in e["body"].get("tags") or ()),
                blocked=str(e["body"].get("blocked") or ""),
            )
            for e in progress
        ],
        progress_total=live.get("progress", 0),
        references=[
            inj.Reference(
                ref_kind=str(e["body"].get("ref_kind") or ""),
                target=str(e["body"].get("target") or ""),
                note=str(e["body"].get("note") or ""),
            )
            for e in references
        ],
        references_total=live.get("reference", 0),
    )


def decisions(conn: sqlite3.Connection, project_id: int) -> list[inj.Decision]:
    """The live decisions (not archived), each at its current revision, as the section lists
    them: the standing ones newest first, then those superseded, newest first (so the decision
    heads a small budget keeps are the newest standing ones)."""
    rows = [d for d in decisions_store.decisions_of(conn, project_id) if not d.archived]
    rows.sort(key=lambda d: (d.status == "superseded", -d.number))
    out = []
    for row in rows:
        revisions = decisions_store.revisions_of(conn, row.id)
        rev = next((r for r in revisions if r["revision"] == row.revision), None)
        rev = rev or (revisions[-1] if revisions else {})
        constraints = rev.get("constraints") or ""
        if isinstance(constraints, list):
            constraints = "；".join(str(c) for c in constraints)
        out.append(
            inj.Decision(
                label=row.label,
                title=row.title,
                status=row.status,
                kind=row.kind,
                decision=str(rev.get("decision") or ""),
                context=str(rev.get("context") or ""),
                alternatives=tuple(
                    inj.Alternative(str(a.get("option", "")), str(a.get("why_rejected", "")))
                    for a in rev.get("alternatives") or ()
                    if isinstance(a, dict)
                ),
                constraints=str(constraints),
                consequences=str(rev.get("consequences") or ""),
            )
        )
    return out
