"""Attachment rows (``attachments``): one per upload; the bytes are ``room.infra.blobs``'."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from room.store.dialect import Connection

COLUMNS = (
    "id, project_id, uploader_id, sha256, size, name, mime, kind, width, height, thumb_sha256,"
    " thumb_mime, message_id, created_at, pages"
)


_NAMES = tuple(name.strip() for name in COLUMNS.split(","))


def _row(row: Sequence[Any]) -> dict[str, Any]:
    return dict(zip(_NAMES, row, strict=True))


def insert(
    conn: Connection,
    *,
    project_id: int,
    uploader_id: int,
    sha256: str,
    size: int,
    name: str,
    mime: str,
    kind: str,
    width: int | None,
    height: int | None,
    thumb_sha256: str | None,
    thumb_mime: str | None,
    now: float,
    pages: int | None = None,
) -> dict[str, Any]:
    cur = conn.execute(
        "INSERT INTO attachments (project_id, uploader_id, sha256, size, name, mime, kind,"
        " width, height, thumb_sha256, thumb_mime, created_at, pages)"
        " VALUES (:p, :u, :sha, :size, :name, :mime, :kind, :w, :h, :thumb, :tmime, :now, :pages)"
        f" RETURNING {COLUMNS}",
        {
            "p": project_id,
            "u": uploader_id,
            "sha": sha256,
            "size": size,
            "name": name,
            "mime": mime,
            "kind": kind,
            "w": width,
            "h": height,
            "thumb": thumb_sha256,
            "tmime": thumb_mime,
            "now": now,
            "pages": pages,
        },
    )
    return _row(cur.fetchone())


def get(conn: Connection, attachment_id: int) -> dict[str, Any] | None:
    cur = conn.execute(f"SELECT {COLUMNS} FROM attachments WHERE id = :id", {"id": attachment_id})
    row = cur.fetchone()
    return _row(row) if row else None


def many(conn: Connection, ids: Sequence[int]) -> list[dict[str, Any]]:
    if not ids:
        return []
    marks = ",".join("?" * len(ids))
    cur = conn.execute(f"SELECT {COLUMNS} FROM attachments WHERE id IN ({marks})", list(ids))
    return [_row(r) for r in cur.fetchall()]


def for_messages(conn: Connection, message_ids: Sequence[int]) -> dict[int, list[dict[str, Any]]]:
    """Each message's attachments, in upload order."""
    found: dict[int, list[dict[str, Any]]] = {}
    if not message_ids:
        return found
    marks = ",".join("?" * len(message_ids))
    cur = conn.execute(
        f"SELECT {COLUMNS} FROM attachments WHERE message_id IN ({marks}) ORDER BY id",
        list(message_ids),
    )
    for r in cur.fetchall():
        row = _row(r)
        found.setdefault(int(row["message_id"]), []).append(row)
    return found


def set_message(conn: Connection, ids: Sequence[int], message_id: int) -> None:
    conn.executemany(
        "UPDATE attachments SET message_id = ? WHERE id = ?", [(message_id, i) for i in ids]
    )


def project_bytes(conn: Connection, project_id: int) -> int:
    """The bytes a project's uploads hold, each distinct content counted once."""
    row = conn.execute(
        "SELECT COALESCE(SUM(size), 0) FROM"
        " (SELECT DISTINCT sha256, size FROM attachments WHERE project_id = :p) AS contents",
        {"p": project_id},
    ).fetchone()
    return int(row[0])


def has_content(conn: Connection, project_id: int, sha256: str) -> bool:
    row = conn.execute(
        "SELECT 1 FROM attachments WHERE project_id = :p AND sha256 = :s LIMIT 1",
        {"p": project_id, "s": sha256},
    ).fetchone()
    return row is not None


def delete_unsent(conn: Connection, attachment_id: int, uploader_id: int) -> bool:
    cur = conn.execute(
        "DELETE FROM attachments WHERE id = :id AND uploader_id = :u AND message_id IS NULL",
        {"id": attachment_id, "u": uploader_id},
    )
    return cur.rowcount > 0


def delete_project(conn: Connection, project_id: int) -> tuple[int, list[str]]:
    """Delete a project's rows; the blobs (content and thumbnails) no row references any more,
    for the caller to remove from disk."""
    shas = {
        str(r[0])
        for r in conn.execute(
            "SELECT sha256 FROM attachments WHERE project_id = :p UNION"
            " SELECT thumb_sha256 FROM attachments WHERE project_id = :p"
            " AND thumb_sha256 IS NOT NULL",
            {"p": project_id},
        )
    }
    count = conn.execute(
        "DELETE FROM attachments WHERE project_id = :p", {"p": project_id}
    ).rowcount
    return count, sorted(s for s in shas if not referenced(conn, s))


def delete_unsent_before(conn: Connection, cutoff: float) -> tuple[int, list[str]]:
    """Delete uploads no send took that are older than ``cutoff``; the blobs no row uses now."""
    shas = {
        str(r[0])
        for r in conn.execute(
            "SELECT sha256 FROM attachments WHERE message_id IS NULL AND created_at < :c UNION"
            " SELECT thumb_sha256 FROM attachments WHERE message_id IS NULL AND created_at < :c"
            " AND thumb_sha256 IS NOT NULL",
            {"c": cutoff},
        )
    }
    count = conn.execute(
        "DELETE FROM attachments WHERE message_id IS NULL AND created_at < :c", {"c": cutoff}
    ).rowcount
    return count, sorted(s for s in shas if not referenced(conn, s))


def referenced(conn: Connection, sha256: str) -> bool:
    row = conn.execute(
        "SELECT 1 FROM attachments WHERE sha256 = :s OR thumb_sha256 = :s LIMIT 1", {"s": sha256}
    ).fetchone()
    return row is not None


def pdf_preview(conn: Connection, sha256: str) -> dict[str, Any] | None:
    """The preview another upload of the same PDF already has (its picture's blob, type, size
    and page count): the same content draws the same first page, so it is drawn once."""
    row = conn.execute(
        "SELECT thumb_sha256, thumb_mime, width, height, pages FROM attachments"
        " WHERE sha256 = :s AND thumb_sha256 IS NOT NULL AND pages IS NOT NULL LIMIT 1",
        {"s": sha256},
    ).fetchone()
    if row is None:
        return None
    return dict(zip(("thumb_sha256", "thumb_mime", "width", "height", "pages"), row, strict=True))
