"""Attachments, the pure part: names, the served type and disposition, wire objects, and the
lines an agent reads about a message's files.

The bytes are stored and typed by ``room.infra.blobs``; rows by ``room.store.attachments``; uploads,
sends and copies by ``room.actions.attachments``. The type of a file is what its content says
(``room.infra.blobs.detect_bytes``); the name a person gave it is kept for display and for the
download's file name, never to decide how the browser treats it. Only the images in
:data:`INLINE_IMAGE_TYPES` are served for the browser to show; everything else — an SVG above
all, which can carry script — is served as a download, with ``nosniff`` and a sandboxing CSP.
The one exception is a PDF opened on purpose at its ``view_url``: inline for the browser's own
PDF viewer, under :data:`PDF_VIEW_CSP` (docs/protocol.md, "PDF previews").
"""

from __future__ import annotations

import unicodedata
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any

MAX_NAME_CHARS = 180
MAX_PER_MESSAGE = 10
DEFAULT_NAME = "file"

# Raster formats every browser decodes without running anything; served inline.
INLINE_IMAGE_TYPES = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})
# Types served under their own name (as downloads); anything else is application/octet-stream,
# so that no text/html, image/svg+xml or script type ever reaches the browser from here.
PLAIN_TYPES = frozenset(
    {
        "application/pdf",
        "application/zip",
        "application/gzip",
        "application/x-tar",
        "application/x-7z-compressed",
        "application/json",
        "text/plain",
        "text/csv",
    }
)
OCTET_STREAM = "application/octet-stream"
# The policy of every attachment response: no script, no plugin, no same-origin document.
ATTACHMENT_CSP = "default-src 'none'; sandbox"
PDF_TYPE = "application/pdf"
PDF_MAGIC = b"%PDF-"
# A PDF opened in a tab of its own (``view_url``): the browser's PDF viewer draws it, in a
# sandboxed document of an opaque origin (no script, no same-origin access, cookies withheld),
# which no page may frame. Chromium's viewer renders under it (tests/test_browser_pdf.py).
PDF_VIEW_CSP = "default-src 'none'; frame-ancestors 'none'; sandbox"


def clean_name(raw: str | None) -> str:
    """A display and download name: the last path part, NFC, no control or bidi-override
    characters, at most :data:`MAX_NAME_CHARS` characters (the extension kept)."""
    text = unicodedata.normalize("NFC", raw or "")
    text = text.replace("\\", "/").rsplit("/", 1)[-1]
    text = "".join(
        ch for ch in text if unicodedata.category(ch) not in ("Cc", "Cf", "Zl", "Zp")
    ).strip(" .")
    if not text:
        return DEFAULT_NAME
    if len(text) > MAX_NAME_CHARS:
        stem, dot, ext = text.rpartition(".")
        if dot and 0 < len(ext) <= 16:
            text = f"{stem[: MAX_NAME_CHARS - len(ext) - 1]}.{ext}"
        else:
            text = text[:MAX_NAME_CHARS]
    return text


def extension_of(name: str) -> str:
    """The lower-case extension with its dot ('' when there is none)."""
    stem, dot, ext = name.rpartition(".")
    return f".{ext.lower()}" if dot and stem and ext else ""


def shows_inline(mime: str) -> bool:
    return mime in INLINE_IMAGE_TYPES


def served_type(mime: str) -> str:
    """The Content-Type an attachment is served with (its detected type where that is safe)."""
    if mime in INLINE_IMAGE_TYPES:
        return mime
    if mime in PLAIN_TYPES or mime.startswith(("audio/", "video/")):
        return f"{mime}; charset=utf-8" if mime.startswith("text/") else mime
    return OCTET_STREAM


def disposition(name: str, inline: bool) -> str:
    """``Content-Disposition`` with an ASCII fallback and the UTF-8 name (RFC 6266/5987)."""
    fallback = "".join(ch if 32 <= ord(ch) < 127 and ch not in '"\\' else "_" for ch in name)
    quoted = urllib.parse.quote(name, safe="")
    kind = "inline" if inline else "attachment"
    return f"{kind}; filename=\"{fallback}\"; filename*=UTF-8''{quoted}"


def url_of(attachment_id: int, name: str, thumb: bool = False, view: bool = False) -> str:
    quoted = urllib.parse.quote(name, safe="")
    part = "thumb/" if thumb else "view/" if view else ""
    return f"/attachments/{attachment_id}/{part}{quoted}"


def views_inline(mime: str, head: bytes) -> bool:
    """Whether an attachment may be opened in the browser's PDF viewer: typed a PDF from its
    content, and its bytes really start as one (checked again as it is served)."""
    return mime == PDF_TYPE and head.startswith(PDF_MAGIC)


def wire(row: Mapping[str, Any]) -> dict[str, Any]:
    """An attachment as messages and uploads carry it."""
    attachment_id, name = int(row["id"]), str(row["name"])
    return {
        "id": attachment_id,
        "name": name,
        "size": int(row["size"]),
        "mime": str(row["mime"]),
        "kind": str(row["kind"]),
        "width": row["width"],
        "height": row["height"],
        "inline": shows_inline(str(row["mime"])),
        "url": url_of(attachment_id, name),
        "thumb_url": url_of(attachment_id, name, thumb=True) if row["thumb_sha256"] else None,
        # A PDF's page count, beside the picture of its first page at ``thumb_url`` (whose size
        # ``width`` and ``height`` then are); None for anything else or a PDF without a preview.
        "pages": row.get("pages"),
        # A PDF opens in a tab of its own, in the browser's viewer, under PDF_VIEW_CSP.
        "view_url": url_of(attachment_id, name, view=True) if row["mime"] == PDF_TYPE else None,
    }


def human_size(size: int) -> str:
    value = float(size)
    for unit in ("B", "KB", "MB", "GB"):
        if value < 1024 or unit == "GB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{size} B"  # pragma: no cover


def agent_lines(attachments: Sequence[Mapping[str, Any]], paths: Mapping[int, str]) -> str:
    """What an agent reads about a message's files: one line each, with the path its file tools
    can open (``paths``: attachment id → path in its workspace) or else the URL it may fetch."""
    lines = []
    for item in attachments:
        where = paths.get(int(item["id"])) or str(item["url"])
        lines.append(
            f"[附件 #{item['id']}] {item['name']} ({item['mime']}, {human_size(int(item['size']))})"
            f"：{where}"
        )
    return "\n".join(lines)


def with_attachments(body: str, attachments: Sequence[Mapping[str, Any]],
                     paths: Mapping[int, str]) -> str:  # fmt: skip
    """A message body as an agent sees it: the text, then its attachments' lines."""
    if not attachments:
        return body
    listing = agent_lines(attachments, paths)
    return f"{body}\n{listing}" if body.strip() else listing
