"""Project memory records (docs/memory.md): their kinds, fields, size limits and caps. Pure.

A record is one of :data:`KINDS`. ``summary`` is one per project with five sections; ``fact``
and ``convention`` are short texts; ``progress`` carries a ``stage`` and a ``next`` step (both
required) and ``tags``; ``session`` is one agent turn or checkpoint (append-only); ``reference``
names a dir, file, URL or tool (metadata only, never read; deduplicated on its kind and target).
Decisions live in the decisions table (:mod:`room.actions.decisions`) and share the caps here.

:func:`validate` turns what a person or an agent sent into a record body or raises a
:class:`RecordError` whose ``code`` says what is wrong (``unknown_kind``, ``empty_field``,
``record_too_large``, ``bad_field``, ``unknown_field``) and whose details name the ``field``.
:func:`over_cap` says how many of the oldest live entries a cap moves to the archive; nothing is
ever cut: an entry is kept whole or archived whole, and :func:`archive_pointer` is the line that
says where the archived ones are.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from room.errors import BadRequestError

KINDS = ("summary", "fact", "convention", "progress", "session", "reference")
#: Kinds with many entries (the summary is one record per project).
ENTRY_KINDS = ("fact", "convention", "progress", "session", "reference")
#: The key of each kind in the memory overview (``GET /api/projects/{id}/memory``).
LIST_KEYS = {
    "fact": "facts",
    "convention": "conventions",
    "progress": "progress",
    "session": "sessions",
    "reference": "references",
}
KIND_LABELS = {
    "summary": "项目概要",
    "fact": "事实",
    "convention": "约定",
    "progress": "进展",
    "session": "会话记录",
    "reference": "参考",
    "decision": "决定",
}

#: The project summary's sections: ASCII key, Chinese label, in the order they are shown.
SUMMARY_SECTIONS: tuple[tuple[str, str], ...] = (
    ("what", "这是什么"),
    ("run", "怎么跑和怎么测"),
    ("where", "东西都在哪"),
    ("status", "现状"),
    ("pitfalls", "坑"),
)
EMPTY_SECTION = "暂无"
REF_KINDS = ("dir", "file", "url", "tool")
SESSION_FIELDS = ("summary", "did", "verified", "next", "blocked")

MAX_SECTION_BYTES = 8 * 1024
MAX_TAGS = 16
MAX_TAG_CHARS = 40
#: The largest single entry of each kind (UTF-8 bytes of all its text): an entry that does not
#: fit is refused (``record_too_large``), never cut.
MAX_ENTRY_BYTES = {
    "fact": 2 * 1024,
    "convention": 2 * 1024,
    "progress": 4 * 1024,
    "session": 8 * 1024,
    "reference": 2 * 1024,
    "decision": 16 * 1024,
}


@dataclass(frozen=True, slots=True)
class Cap:
    """What a project keeps live of one kind: at most ``max_bytes`` of text and at most
    ``max_entries`` entries (None: no such limit). Past it the oldest go to the archive."""

    max_bytes: int | None
    max_entries: int | None


CAPS: Mapping[str, Cap] = {
    "fact": Cap(24 * 1024, None),
    "convention": Cap(16 * 1024, None),
    "decision": Cap(32 * 1024, None),
    "progress": Cap(256 * 1024, 512),
    "session": Cap(None, 200),
    "reference": Cap(None, 200),
}


class RecordError(BadRequestError):
    """A record a person or an agent sent was refused; ``code`` says why, ``field`` where."""

    code = "bad_record"


def check_kind(kind: str) -> str:
    if kind not in KINDS:
        raise RecordError(
            f"没有这种记录：{kind[:40]} (Unknown record kind; one of {', '.join(KINDS)}.)",
            code="unknown_kind",
            kind=kind[:40],
            kinds=list(KINDS),
        )
    return kind


def _bytes(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _text(raw: Mapping[str, Any], field: str, *, required: bool, limit: int) -> str:
    value = raw.get(field)
    if value is None:
        value = ""
    if not isinstance(value, str):
        raise RecordError(f"{field} 必须是文本 ({field} must be text.)", code="bad_field",
                          field=field)  # fmt: skip
    value = value.strip()
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise RecordError(
            f"{field} 含有无效字符（孤立代理项） ({field} holds a lone surrogate.)",
            code="bad_text",
            field=field,
        ) from None
    if required and not value:
        raise RecordError(
            f"{field} 不能为空 ({field} is required and may not be empty.)",
            code="empty_field",
            field=field,
        )
    size = _bytes(value)
    if size > limit:
        raise RecordError(
            f"{field} 太长：{size} 字节，上限 {limit} ({field} is {size} bytes; the limit is "
            f"{limit}. Split it, nothing was saved.)",
            code="record_too_large",
            field=field,
            size=size,
            limit=limit,
        )
    return value


def _tags(raw: Mapping[str, Any]) -> list[str]:
    value = raw.get("tags")
    if value is None:
        return []
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise RecordError("tags 是文本列表 (tags is a list of strings.)", code="bad_field",
                          field="tags")  # fmt: skip
    tags = list(dict.fromkeys(t.strip() for t in value if t.strip()))
    if len(tags) > MAX_TAGS or any(len(t) > MAX_TAG_CHARS for t in tags):
        raise RecordError(
            f"最多 {MAX_TAGS} 个标签，每个不超过 {MAX_TAG_CHARS} 字 "
            f"(At most {MAX_TAGS} tags of up to {MAX_TAG_CHARS} characters.)",
            code="record_too_large",
            field="tags",
            limit=MAX_TAGS,
        )
    return tags


_FIELDS: Mapping[str, tuple[str, ...]] = {
    "summary": ("sections",),
    "fact": ("text",),
    "convention": ("text",),
    "progress": ("text", "stage", "next", "tags", "blocked"),
    "session": SESSION_FIELDS,
    "reference": ("ref_kind", "target", "note"),
}


def fields_of(kind: str) -> tuple[str, ...]:
    return _FIELDS[check_kind(kind)]


def validate(kind: str, raw: Mapping[str, Any]) -> dict[str, Any]:
    """The body of a ``kind`` record from ``raw`` (whitespace trimmed), or a :class:`RecordError`.

    Unknown fields are refused (``unknown_field``) rather than dropped, so nothing sent is lost
    without a word."""
    fields = fields_of(kind)
    extra = sorted(set(raw) - set(fields))
    if extra:
        raise RecordError(
            f"{KIND_LABELS[kind]}没有字段 {extra[0][:40]} (A {kind} has no field {extra[0][:40]}; "
            f"its fields: {', '.join(fields)}.)",
            code="unknown_field",
            field=extra[0][:40],
            fields=list(fields),
        )
    if kind == "summary":
        return {"sections": _sections(raw.get("sections"))}
    limit = MAX_ENTRY_BYTES[kind]
    if kind in ("fact", "convention"):
        body: dict[str, Any] = {"text": _text(raw, "text", required=True, limit=limit)}
    elif kind == "progress":
        body = {
            "text": _text(raw, "text", required=True, limit=limit),
            "stage": _text(raw, "stage", required=True, limit=limit),
            "next": _text(raw, "next", required=True, limit=limit),
            "tags": _tags(raw),
        }
        blocked = _text(raw, "blocked", required=False, limit=limit)
        if blocked:  # optional: what holds it up (the status filters' blocked-only)
            body["blocked"] = blocked
    elif kind == "session":
        body = {f: _text(raw, f, required=f == "summary", limit=limit) for f in SESSION_FIELDS}
    else:
        ref_kind = _text(raw, "ref_kind", required=True, limit=16)
        if ref_kind not in REF_KINDS:
            raise RecordError(
                f"ref_kind 是 {'、'.join(REF_KINDS)} 之一 (ref_kind is one of "
                f"{', '.join(REF_KINDS)}.)",
                code="bad_field",
                field="ref_kind",
            )
        body = {
            "ref_kind": ref_kind,
            "target": _text(raw, "target", required=True, limit=limit),
            "note": _text(raw, "note", required=False, limit=limit),
        }
    size = size_of(kind, body)
    if size > limit:
        raise RecordError(
            f"记录太长：{size} 字节，上限 {limit} (The entry is {size} bytes; the limit is "
            f"{limit}. Nothing was saved.)",
            code="record_too_large",
            field=fields[0],
            size=size,
            limit=limit,
        )
    return body


def _sections(value: Any) -> dict[str, str]:
    if value is None:
        value = {}
    if not isinstance(value, Mapping):
        raise RecordError("sections 是对象 (sections is an object.)", code="bad_field",
                          field="sections")  # fmt: skip
    keys = [k for k, _ in SUMMARY_SECTIONS]
    extra = sorted(set(value) - set(keys))
    if extra:
        raise RecordError(
            f"概要没有 {extra[0][:40]} 这一节 (No summary section {extra[0][:40]}; the sections:"
            f" {', '.join(keys)}.)",
            code="unknown_field",
            field=f"sections.{extra[0][:40]}",
            fields=keys,
        )
    out = {}
    for key in keys:
        try:
            out[key] = _text(value, key, required=False, limit=MAX_SECTION_BYTES)
        except RecordError as exc:
            exc.details["field"] = f"sections.{key}"
            raise
    return out


def merge_sections(current: Mapping[str, str], edit: Mapping[str, Any]) -> dict[str, Any]:
    """A section edit: the sections named in ``edit`` replace the current ones, the rest stay."""
    return {"sections": {**current, **edit}}


def reference_key(body: Mapping[str, Any]) -> str:
    """What makes two references the same: their kind and target (a trailing slash of a dir or
    a URL does not count)."""
    target = str(body["target"])
    if body["ref_kind"] in ("dir", "url"):
        target = target.rstrip("/") or target
    return f"{body['ref_kind']}\n{target}"


def text_of(kind: str, body: Mapping[str, Any]) -> str:
    """All of a record's text, one field a line (what search indexes and caps measure)."""
    if kind == "summary":
        sections = body.get("sections") or {}
        return "\n".join(
            f"{label}：{sections.get(key) or EMPTY_SECTION}" for key, label in SUMMARY_SECTIONS
        )
    if kind == "progress":
        tags = " ".join(f"#{t}" for t in body.get("tags") or [])
        parts = [body.get("text", ""), f"阶段：{body.get('stage', '')}",
                 f"下一步：{body.get('next', '')}", tags]  # fmt: skip
        return "\n".join(p for p in parts if p)
    if kind == "session":
        labels = {"summary": "", "did": "做了：", "verified": "验证：", "next": "下一步：",
                  "blocked": "受阻："}  # fmt: skip
        return "\n".join(f"{labels[f]}{body[f]}" for f in SESSION_FIELDS if body.get(f))
    if kind == "reference":
        note = f" — {body['note']}" if body.get("note") else ""
        return f"[{body['ref_kind']}] {body['target']}{note}"
    return str(body.get("text", ""))


def size_of(kind: str, body: Mapping[str, Any]) -> int:
    """The UTF-8 bytes of a record's fields (what the caps count)."""
    if kind == "summary":
        return sum(_bytes(v) for v in (body.get("sections") or {}).values())
    total = 0
    for value in body.values():
        if isinstance(value, str):
            total += _bytes(value)
        elif isinstance(value, list):
            total += sum(_bytes(str(v)) for v in value)
    return total


def over_cap(kind: str, sizes: Sequence[int]) -> int:
    """How many of the oldest live entries to archive so that the rest fit ``kind``'s cap;
    ``sizes`` are the live entries' sizes, oldest first. 0 when they fit or the kind has no cap.
    The newest entry always stays (it fits: single entries are smaller than any cap)."""
    cap = CAPS.get(kind)
    if cap is None:
        return 0
    drop = 0
    if cap.max_entries is not None and len(sizes) > cap.max_entries:
        drop = len(sizes) - cap.max_entries
    if cap.max_bytes is not None:
        total = sum(sizes[drop:])
        while total > cap.max_bytes and drop < len(sizes) - 1:
            total -= sizes[drop]
            drop += 1
    return drop


@dataclass(frozen=True, slots=True)
class ProgressFilter:
    """Which progress entries a status read shows: a ``stage`` (case-insensitive), a ``tag``
    among the entry's tags, written at or after ``since`` (epoch seconds), and with
    ``blocked_only`` those that say what blocks them."""

    stage: str | None = None
    tag: str | None = None
    since: float | None = None
    blocked_only: bool = False

    @property
    def active(self) -> bool:
        return bool(self.stage or self.tag or self.since is not None or self.blocked_only)

    def matches(self, body: Mapping[str, Any], created_at: float) -> bool:
        if self.stage and str(body.get("stage") or "").casefold() != self.stage.casefold():
            return False
        if self.tag and self.tag.casefold() not in {
            str(t).casefold() for t in body.get("tags") or ()
        }:
            return False
        if self.since is not None and created_at < self.since:
            return False
        return not self.blocked_only or bool(str(body.get("blocked") or "").strip())


def parse_since(text: str) -> float:
    """``since`` as epoch seconds: an ISO 8601 date (``2026-11-01``, midnight UTC) or date and
    time (``2026-11-01T08:00:00Z``; without a zone, UTC). Anything else: ``bad_query``."""
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise RecordError(
            "since 是 ISO 8601 日期或时间，如 2026-11-01 (since is an ISO 8601 date or time.)",
            code="bad_query",
            field="since",
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return when.timestamp()


def archive_pointer(kind: str, count: int) -> str:
    """The line left where archived entries were: how many, and how to read them."""
    return (
        f"另有 {count} 条{KIND_LABELS.get(kind, kind)}已归档，"
        f'需要时用 memory_read(kind="{kind}", archived=true) 查看 '
        f"({count} archived {kind} entries: memory_read with archived=true, "
        f"or GET …/memory/{kind}?archived=1)"
    )


def section_text(sections: Mapping[str, str]) -> str:
    """The summary as text, every section labelled, an empty one reading 暂无."""
    return text_of("summary", {"sections": sections})
