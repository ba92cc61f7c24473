"""The project pack format (pure): which tables a pack carries, how their ids point at each other,
and how a message's stored wire object is rewritten for its new ids. docs/packs.md.

A pack is JSON Lines (UTF-8). The first line is the header ``{"kind": "room.project-pack",
"version": 1, ...}``; then each part in :data:`PACK_TABLES` order: ``{"part": NAME, "columns":
[...]}``, one JSON array per row (values in that column order), ``{"end": NAME, "rows": n}``;
the last line is ``{"end_pack": true, "rows": total}`` (a cut pack has none). One part is not a
table: :data:`FILES_PART`, the content of the project's attachments (their files and thumbnails,
by SHA-256, in chunks of base64). No I/O here: the export is :mod:`room.actions.pack_export`,
the import :mod:`room.actions.pack_import`.

To carry a new table, add one :class:`PackTable` to :data:`PACK_TABLES` after every table it
refers to (and raise :data:`PACK_VERSION` if an older server could not import it).
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import regex

from room.errors import PackError

PACK_KIND = "room.project-pack"
PACK_VERSION = 1


@dataclass(frozen=True, slots=True)
class PackTable:
    """One part of a pack: the rows of ``name`` that belong to the project.

    ``where`` selects them (``t`` is the table, ``:p`` the project id) in ``order``. ``key`` is
    the integer id column given a fresh value on import (None: the table has none). ``refs``
    maps a column to the table whose ids it holds; a column referring to a table not in the pack
    is imported as NULL. ``late`` refs may point forward (set once every row is in). ``drop``
    columns are never exported (they name things a pack does not carry: turns, sockets).
    ``dense``: the project's rows usually fill their range of ``id`` (a project's messages),
    which the export then reads in place (:func:`room.actions.pack_export._select`).
    ``deferred`` refs (columns without a foreign key, among ``refs``) point to a later part:
    imported as they are, then moved by that part's offset in one ``UPDATE`` once it is in.
    """

    name: str
    where: str = "t.project_id = :p"
    order: str = "t.id"
    key: str | None = "id"
    refs: Mapping[str, str] = field(default_factory=dict)
    late: tuple[str, ...] = ()
    drop: tuple[str, ...] = ()
    dense: bool = False
    deferred: tuple[str, ...] = ()


_MESSAGES = "t.message_id IN (SELECT id FROM messages WHERE project_id = :p)"
_THREADS = "t.root_id IN (SELECT root_id FROM threads WHERE project_id = :p)"

PACK_TABLES: tuple[PackTable, ...] = (
    PackTable(
        "projects",
        where="t.id = :p",
        refs={"lead_member_id": "members"},
        late=("lead_member_id",),
        # home_node: a node of the exporting cluster (the importing node becomes the home).
        drop=("forked_from", "merged_from", "home_node"),
    ),
    PackTable("members"),
    PackTable(
        "member_names",
        key=None,
        order="t.member_id, t.kind, t.name_key",
        refs={"member_id": "members"},
    ),
    PackTable("route_settings", key=None, order="t.scope, t.target"),
    PackTable("route_changes"),  # author_id: a member only when author_kind says so
    # The files of sent messages (an upload no message took stays behind); before the messages,
    # whose stored objects name them. Their content is the next part, FILES_PART.
    PackTable(
        "attachments",
        where="t.project_id = :p AND t.message_id IS NOT NULL",
        refs={"uploader_id": "members", "message_id": "messages"},
        deferred=("message_id",),
    ),
    PackTable("messages", refs={"author_id": "members", "reply_to": "messages"}, dense=True),
    PackTable("message_edits", where=_MESSAGES, refs={"message_id": "messages"}),
    PackTable(
        "mentions",
        where=_MESSAGES,
        key=None,
        order="t.message_id, t.member_id",
        refs={"message_id": "messages", "member_id": "members"},
    ),
    PackTable(
        "reactions",
        where=_MESSAGES,
        key=None,
        order="t.message_id, t.emoji, t.member_id",
        refs={"message_id": "messages", "member_id": "members"},
    ),
    # Threads (room.store.threads): keyed by their root's message id.
    PackTable(
        "threads",
        key=None,
        order="t.root_id",
        refs={"root_id": "messages", "last_reply_id": "messages"},
    ),
    PackTable(
        "thread_replies",
        where=_THREADS,
        key=None,
        order="t.message_id",
        refs={"message_id": "messages", "root_id": "messages"},
    ),
    PackTable(
        "thread_follows",
        where=_THREADS,
        key=None,
        order="t.root_id, t.member_id",
        refs={"root_id": "messages", "member_id": "members"},
    ),
    PackTable(
        "notification_levels",
        where="t.member_id IN (SELECT id FROM members WHERE project_id = :p)",
        key=None,
        order="t.member_id",
        refs={"member_id": "members"},
    ),
    PackTable("events", key=None, order="t.seq", refs={"message_id": "messages"}),
    PackTable("read_cursors", key=None, order="t.member_id", refs={"member_id": "members"}),
    PackTable(
        "deliveries",
        refs={"message_id": "messages", "recipient_id": "members"},
        drop=("turn_id", "handoff"),
    ),
    PackTable("plans", refs={"submitted_by": "members", "started_by": "members"}),
    PackTable("tasks", refs={"plan_id": "plans", "owner_id": "members", "reviewer_id": "members"}),
    PackTable(
        "task_deps",
        key=None,
        order="t.task_id, t.depends_on_id",
        refs={"task_id": "tasks", "depends_on_id": "tasks"},
    ),
    PackTable("task_criteria", refs={"task_id": "tasks"}),
    PackTable(
        "task_reviews",
        refs={"task_id": "tasks", "criterion_id": "task_criteria", "reviewer_id": "members"},
    ),
    PackTable("command_results", refs={"member_id": "members"}, drop=("turn_id",)),
    PackTable(
        "evidence",
        refs={
            "task_id": "tasks",
            "review_id": "task_reviews",
            "command_id": "command_results",
            "message_id": "messages",
            "added_by": "members",
        },
    ),
    PackTable(
        "decisions",
        refs={
            "supersedes": "decisions",
            "superseded_by": "decisions",
            "created_by": "members",
            "accepted_by": "members",
        },
        late=("supersedes", "superseded_by"),
    ),
    PackTable(
        "decision_revisions",
        refs={"decision_id": "decisions", "source_message_id": "messages", "author_id": "members"},
    ),
    PackTable(
        "decision_tasks",
        key=None,
        order="t.decision_id, t.task_id",
        refs={"decision_id": "decisions", "task_id": "tasks"},
    ),
    PackTable(
        "sync_requests",
        refs={
            "decision_id": "decisions",
            "task_id": "tasks",
            "owner_id": "members",
            "synced_by": "members",
        },
    ),
    PackTable("task_events", refs={"task_id": "tasks", "actor_id": "members"}),
    PackTable(
        "memory_entries",
        refs={"author_id": "members", "updated_by": "members"},
        drop=("turn_id",),
    ),
    PackTable("memory_revisions", refs={"entry_id": "memory_entries", "author_id": "members"}),
    PackTable("memory_versions", key=None, order="t.project_id"),
    PackTable("audit_events"),  # actor_id: a member only when actor_kind says so
    # The portfolio (docs/portfolio.md). A dependency on another project does not travel: that
    # project is not in the pack; skills and external dependencies do.
    PackTable("project_timelines", key=None, order="t.project_id", refs={"updated_by": "members"}),
    PackTable("milestones"),
    PackTable("milestone_counts"),
    PackTable("project_dependencies", where="t.project_id = :p AND t.kind != 'project'"),
    PackTable("risk_log"),
)

TABLES_BY_NAME: dict[str, PackTable] = {t.name: t for t in PACK_TABLES}

# The attachments' content: one row per chunk of at most FILE_CHUNK_BYTES of one file, as
# [sha256, size, offset, base64]; files in SHA-256 order, each one's chunks in order. Every file
# an attachment row names (its content and its thumbnail) is there once, and nothing else.
FILES_PART = "files"
FILE_COLUMNS = ("sha256", "size", "offset", "data")
FILE_CHUNK_BYTES = 1 << 20

# Every part in pack order: the tables, and the files right after their attachment rows.
PART_ORDER: tuple[str, ...] = tuple(
    name
    for t in PACK_TABLES
    for name in ((t.name, FILES_PART) if t.name == "attachments" else (t.name,))
)

# Optional in a version-1 pack: parts added after the first packs were written (a pack from
# before them simply has none of their rows).
LATER_TABLES = frozenset(
    {"project_timelines", "milestones", "milestone_counts", "project_dependencies", "risk_log",
     "attachments", FILES_PART, "reactions", "threads", "thread_replies", "thread_follows",
     "notification_levels"}
)  # fmt: skip

# Every version-1 pack has these parts.
V1_TABLES: tuple[str, ...] = tuple(t.name for t in PACK_TABLES if t.name not in LATER_TABLES)

# What a fork copies: the project's records, members and routes; no conversation, no deliveries,
# no task execution state, no agent sessions (those were never in a pack).
FORK_TABLES: tuple[str, ...] = (
    "projects", "members", "member_names", "route_settings", "route_changes", "decisions",
    "decision_revisions", "memory_entries", "memory_revisions", "memory_versions",
)  # fmt: skip

# Rows referring to a member whose id is not a column with a foreign key: the audit trail's
# actor and a route change's author (only when the actor was a member).
MEMBER_ACTOR_KINDS = frozenset({"human", "agent", "member"})


def check_header(header: Any, parts: tuple[str, ...] | None = None) -> list[str]:
    """The parts a pack header promises, in order; :class:`PackError` names what is wrong: not a
    pack, a forged kind, a newer version, unknown or missing parts."""
    if not isinstance(header, dict):
        raise PackError("not_a_pack", "the first line is not a pack header")
    if header.get("kind") != PACK_KIND:
        raise PackError("bad_kind", f"kind is {header.get('kind')!r}, not {PACK_KIND!r}")
    version = header.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise PackError("bad_version", f"version {version!r} is not a pack version")
    if version > PACK_VERSION:
        raise PackError(
            "pack_too_new",
            f"this pack is version {version}, written by a newer Project Room; this server "
            f"reads up to version {PACK_VERSION}: upgrade it first",
        )
    listed = header.get("parts")
    if not isinstance(listed, list) or not all(isinstance(p, str) for p in listed):
        raise PackError("bad_header", "the header lists no parts")
    unknown = [p for p in listed if p not in PART_ORDER]
    if unknown:
        raise PackError("unknown_part", f"unknown parts: {', '.join(unknown[:5])}")
    required = V1_TABLES if parts is None else parts
    missing = [p for p in required if p not in listed]
    if missing:
        raise PackError("missing_part", f"the pack has no {', '.join(missing)}")
    if ("attachments" in listed) != (FILES_PART in listed):
        missing_one = FILES_PART if "attachments" in listed else "attachments"
        raise PackError("missing_part", f"the pack has no {missing_one}", part=missing_one)
    order = [name for name in PART_ORDER if name in listed]
    if order != listed:
        raise PackError("bad_header", "the parts are not in pack order")
    return order


# -- message objects ------------------------------------------------------------------------------

IdMap = Callable[[str, Any], Any]  # (table, old id) → new id (None when it is not carried)

_META_REFS = {
    "member_id": "members",
    "author_id": "members",
    "message_id": "messages",
    "task_id": "tasks",
    "decision_id": "decisions",
    "turn_id": "turns",
}


def remap_message(obj: dict[str, Any], project_id: int, ids: IdMap) -> dict[str, Any]:
    """A message's wire object (``messages.frame``) with its ids replaced: its own, the
    project, the author, the reply and its excerpt's author, the mentions, who reacted, a
    thread's newest reply, and ids named in ``meta`` (turns are not carried: their ids become null)."""
    out = dict(obj)
    out["id"] = ids("messages", obj.get("id"))
    out["project_id"] = project_id
    out["author_id"] = ids("members", obj.get("author_id"))
    out["reply_to"] = ids("messages", obj.get("reply_to"))
    excerpt = obj.get("reply_excerpt")
    if isinstance(excerpt, dict):
        out["reply_excerpt"] = {**excerpt, "author_id": ids("members", excerpt.get("author_id"))}
    mentions = obj.get("mentions")
    if isinstance(mentions, list):
        out["mentions"] = sorted(ids("members", m) for m in mentions)
    reactions = obj.get("reactions")
    if isinstance(reactions, list):  # who reacted: members of the project
        out["reactions"] = [
            {**r, "members": [ids("members", m) for m in r.get("members", ())]}
            if isinstance(r, dict)
            else r
            for r in reactions
        ]
    thread = obj.get("thread")
    if isinstance(thread, dict):  # a thread's root: its newest reply
        out["thread"] = {**thread, "last_reply_id": ids("messages", thread.get("last_reply_id"))}
    if "meta" in obj:
        out["meta"] = meta = _remap_meta(obj["meta"], ids)
        files = obj["meta"].get("attachments") if isinstance(obj["meta"], dict) else None
        if isinstance(files, list):
            meta["attachments"] = _remap_attachments(files, ids)
    return out


def _remap_attachments(items: list[Any], ids: IdMap) -> list[Any]:
    """A message's attachments (``meta.attachments``): each one's id, and the id in its URLs
    (``/attachments/{id}/…``); one whose row is not carried is left out."""
    out = []
    for item in items:
        if not isinstance(item, dict):
            continue
        old, new = item.get("id"), ids("attachments", item.get("id"))
        if new is None:
            continue
        moved = dict(item, id=new)
        for key in ("url", "thumb_url"):
            url = item.get(key)
            prefix = f"/attachments/{old}/"
            if isinstance(url, str) and url.startswith(prefix):
                moved[key] = f"/attachments/{new}/{url[len(prefix) :]}"
        out.append(moved)
    return out


def _remap_meta(value: Any, ids: IdMap) -> Any:
    if isinstance(value, dict):
        return {
            k: ids(_META_REFS[k], v) if k in _META_REFS else _remap_meta(v, ids)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_remap_meta(v, ids) for v in value]
    return value


# -- merge keys -----------------------------------------------------------------------------------

_SPACES = regex.compile(r"\s+")
_TRAILING = regex.compile(r"[\p{P}\s]+$")


def normalized(text: str) -> str:
    """What two texts must share to be the same record in a merge: NFKC (full-width folds to
    half-width), case-folded, runs of whitespace as one space, no trailing punctuation."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return _TRAILING.sub("", _SPACES.sub(" ", folded).strip())


def progress_key(created_at: float, author: str | None, body: Mapping[str, Any]) -> tuple[Any, ...]:
    """A progress entry's identity in a merge: its time (to the second), its session (the
    author's handle), its stage and its text."""
    return (
        round(float(created_at)),
        (author or "").casefold(),
        normalized(str(body.get("stage", ""))),
        normalized(str(body.get("text", ""))),
    )
