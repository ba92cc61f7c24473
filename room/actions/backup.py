"""Backups of a running server's data folder, and restoring one into a new folder
(docs/backup.md).

A backup is one uncompressed tar:

* ``<data>/room.sqlite`` — copied with SQLite's online backup API in one step, that is inside
  one read transaction of the live database: a copy consistent at one instant, taken while the
  server writes (WAL lets the writer go on; it never waits for the copy);
* ``attachments/<sha[:2]>/<sha[2:]>`` — every attachment file (and thumbnail) that the *copy*
  references, read from the copy's ``attachments`` table, never by listing the folder, so the
  archive holds exactly what its database needs;
* ``manifest.json``, last — the format and its version, the room and schema versions, when, the
  rows of every table, and the size and SHA-256 of every other member, computed while it was
  written.

Not in it: the search index (``search.sqlite``: rebuilt from the database at start), workspaces
and task worktrees (the projects' own files, often git repositories: back them up with them),
the boot reports, and the pre-migration backups. The data folder holds no settings file: the
settings are the ``ROOM_*`` environment and the flags (docs/settings.md).

A restore reads the whole archive and checks it — the manifest's format and version, the
schema version against this code, that every member is one the manifest lists with the size
and checksum it lists (and an attachment's name is its checksum) — before it writes anything;
then it unpacks into a staging folder beside the target, checks the database
(``integrity_check``, the rows per table against the manifest), signs everyone out (deletes the
sessions and the unused login links and invites), leaves ``restored.json`` for the first start
to report (room.infra.boot) and renames the staging folder into place. Agents' turns that were
running at the instant of the copy are settled by that start as after a crash
(room.actions.recovery).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import sqlite3
import tarfile
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from room import __version__
from room.errors import BackupError, BadRequestError, StorageError
from room.infra import blobs, boot
from room.store.migrate import check_version, connect, integrity_problems, user_version
from room.store.schema import SCHEMA_VERSION

FORMAT = "room-backup"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
DATABASE = "room.sqlite"
CHUNK_BYTES = 1 << 20
MAX_MANIFEST_BYTES = 64 << 20
_BLOB_MEMBER = re.compile(r"attachments/([0-9a-f]{2})/([0-9a-f]{62})")
_SCHEDULED = re.compile(r"room-\d{8}T\d{6}Z(-\d+)?\.tar")

NOT_INCLUDED = {
    "search.sqlite": "the search index: rebuilt from the database when the server starts",
    "workspaces": "projects' workspaces and task worktrees: the projects' own files, back them "
    "up with the projects' repositories",
    "reports": "boot-report.json and boot-trace.jsonl: written afresh by each start",
    "backups": "the automatic pre-migration copies of the database",
    "settings": "none in the data folder: settings are the ROOM_* environment and flags "
    "(docs/settings.md); keep them with the backup",
}


@dataclass(frozen=True, slots=True)
class Restored:
    manifest: dict[str, Any]
    sessions_ended: int
    links_dropped: int


# -- backup --------------------------------------------------------------------------------------


def write_backup(
    data: Path, target: Path, now: float, attachments: Path | None = None
) -> dict[str, Any]:
    """Write the backup of ``data`` to ``target`` (0600, atomically: a temporary file in the
    same folder renamed over it); returns its manifest. ``attachments``: the attachments folder
    when it is not ``<data>/attachments`` (the ``attachments_dir`` setting); the archive keeps
    its files under ``attachments/`` all the same, and a restore puts them there."""
    root = blobs.root_of(data) if attachments is None else attachments
    db_path = data / DATABASE
    if target.is_dir():
        raise BadRequestError(
            f"{target} is a folder: name the backup's file (or give --every to write "
            "scheduled backups into a folder)",
            code="backup_target_folder",
        )
    if not db_path.is_file():
        raise StorageError(f"no database in {data}; nothing to back up", code="no_database")
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        snapshot = work / DATABASE
        facts = _snapshot(db_path, snapshot)
        partial = work / "archive.tar"
        fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "wb") as out:
            files: dict[str, dict[str, Any]] = {}
            missing: list[str] = []
            with tarfile.open(fileobj=out, mode="w:", format=tarfile.PAX_FORMAT) as tar:
                files[DATABASE] = _add(tar, DATABASE, snapshot, now)
                for sha in facts["blobs"]:
                    path = blobs.path_of(root, sha)
                    try:
                        files[f"attachments/{sha[:2]}/{sha[2:]}"] = _add(
                            tar, f"attachments/{sha[:2]}/{sha[2:]}", path, now
                        )
                    except FileNotFoundError:
                        missing.append(sha)
                manifest = {
                    "format": FORMAT,
                    "format_version": FORMAT_VERSION,
                    "room_version": __version__,
                    "schema_version": facts["schema_version"],
                    "created_at": now,
                    "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
                    "source": str(data.resolve()),
                    "database": {"backend": "sqlite", "member": DATABASE, "integrity": "ok"},
                    "counts": facts["counts"],
                    "attachments": {
                        "folder": str(root.resolve()),  # where they were read from
                        "referenced": len(facts["blobs"]),
                        "included": len(facts["blobs"]) - len(missing),
                        "missing": missing,
                    },
                    "files": files,
                    "not_included": NOT_INCLUDED,
                }
                raw = json.dumps(manifest, ensure_ascii=False, indent=2).encode()
                info = _info(MANIFEST, len(raw), now)
                tar.addfile(info, _Reader(io.BytesIO(raw)))
            out.flush()
            os.fsync(out.fileno())
        os.replace(partial, target)
        _fsync_dir(target.parent)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return manifest


def remember(data: Path, target: Path, manifest: dict[str, Any], **schedule: Any) -> None:
    """Note the backup just written in the data folder, for ``/metrics`` and ``room doctor``
    (room.infra.boot); ``schedule``: ``every_hours`` and ``keep`` of a scheduled one."""
    counts = manifest["counts"]
    boot.write_last_backup(
        data,
        {
            "at": manifest["created_at"],
            "file": str(target.resolve()),
            "size": target.stat().st_size,
            "schema_version": manifest["schema_version"],
            "messages": counts.get("messages", 0),
            "attachments": manifest["attachments"]["included"],
            **schedule,
        },
    )


def scheduled_name(now: float) -> str:
    return f"room-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime(now))}.tar"


def backup_into(
    data: Path, folder: Path, now: float, keep: int, attachments: Path | None = None
) -> tuple[Path, dict[str, Any], list[Path]]:
    """One scheduled backup: ``room-<UTC time>.tar`` in ``folder``, then the oldest of the
    folder's scheduled backups removed past the ``keep`` newest (files of that name only:
    nothing else in the folder is touched). The file, its manifest, the files removed."""
    stem = scheduled_name(now).removesuffix(".tar")
    target, n = folder / f"{stem}.tar", 1
    while target.exists():
        n += 1
        target = folder / f"{stem}-{n}.tar"
    manifest = write_backup(data, target, now, attachments)
    ours = sorted(
        (p for p in folder.iterdir() if _SCHEDULED.fullmatch(p.name) and p.is_file()),
        key=lambda p: (p.stat().st_mtime, p.name),
    )
    removed = ours[: max(0, len(ours) - keep)]
    for old in removed:
        old.unlink(missing_ok=True)
    return target, manifest, removed


def _snapshot(db_path: Path, snapshot: Path) -> dict[str, Any]:
    """Copy the live database to ``snapshot`` in one step of the backup API (one read
    transaction: one instant) and read what the archive needs from the copy."""
    source = connect(db_path)
    try:
        source.execute("PRAGMA mmap_size = 0")  # a whole-database read: its pages out of RSS
        check_version(source, db_path)
        fd = os.open(snapshot, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        os.close(fd)
        copy = sqlite3.connect(snapshot, isolation_level=None)
        try:
            source.backup(copy)  # pages=-1: the whole database in one step
        finally:
            copy.close()
    finally:
        source.close()
    copy = sqlite3.connect(snapshot, isolation_level=None)
    try:
        copy.execute("PRAGMA journal_mode = DELETE")  # one file in the archive, no -wal
        problems = integrity_problems(copy)
        if problems:
            raise StorageError(
                f"the copy of {db_path} failed its integrity check ({'; '.join(problems[:5])})",
                code="backup_integrity",
            )
        return {
            "schema_version": user_version(copy),
            "counts": table_counts(copy),
            "blobs": referenced_blobs(copy),
        }
    finally:
        copy.close()


def table_counts(conn: sqlite3.Connection) -> dict[str, int]:
    """Rows per table (every table of the database, the search tables included)."""
    names = [
        str(n)
        for (n,) in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            " ORDER BY name"
        )
    ]
    return {n: int(conn.execute(f'SELECT count(*) FROM "{n}"').fetchone()[0]) for n in names}


def referenced_blobs(conn: sqlite3.Connection) -> list[str]:
    """The attachment files the database references: contents and thumbnails."""
    if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'attachments'").fetchone() is None:
        return []
    rows = conn.execute(
        "SELECT sha256 FROM attachments UNION"
        " SELECT thumb_sha256 FROM attachments WHERE thumb_sha256 IS NOT NULL"
    )
    return sorted(str(sha) for (sha,) in rows)


class _Reader:
    """A file read through once, hashed and counted on the way."""

    def __init__(self, raw: IO[bytes]) -> None:
        self.raw = raw
        self.sha = hashlib.sha256()
        self.size = 0

    def read(self, n: int = -1) -> bytes:
        chunk = self.raw.read(n)
        self.sha.update(chunk)
        self.size += len(chunk)
        return chunk


def _info(name: str, size: int, now: float) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mode = 0o600
    info.mtime = int(now)
    return info


def _add(tar: tarfile.TarFile, name: str, path: Path, now: float) -> dict[str, Any]:
    with path.open("rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        reader = _Reader(fh)
        tar.addfile(_info(name, size, now), reader)
    if reader.size != size:
        raise StorageError(f"{path} changed while it was copied", code="backup_changed")
    return {"sha256": reader.sha.hexdigest(), "size": size}


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# -- restore -------------------------------------------------------------------------------------


def check_target(data: Path) -> None:
    """A restore writes only into a missing or empty folder."""
    if data.is_symlink() or (data.exists() and not data.is_dir()):
        raise BackupError(f"{data} is not a folder", code="target_not_empty", path=str(data))
    if data.is_dir() and any(data.iterdir()):
        raise BackupError(
            f"{data} is not empty; restore into a new or empty folder (nothing was written)",
            code="target_not_empty",
            path=str(data),
        )


@contextmanager
def _open_archive(archive: Path) -> Iterator[tarfile.TarFile]:
    try:
        tar = tarfile.open(archive, mode="r:")  # noqa: SIM115 - closed below, after the yield
    except (OSError, tarfile.TarError) as exc:
        raise BackupError(
            f"{archive} is not a backup: {exc}", code="archive_unreadable", path=str(archive)
        ) from None
    try:
        yield tar
    finally:
        tar.close()


def verify_archive(archive: Path) -> dict[str, Any]:
    """Read all of ``archive`` and check it (the module's docstring); its manifest. Writes
    nothing."""
    with _open_archive(archive) as tar:
        try:
            members = tar.getmembers()
        except tarfile.TarError as exc:
            raise BackupError(f"{archive} is damaged: {exc}", code="archive_unreadable") from None
        manifest = _manifest(tar, members)
        files: dict[str, Any] = manifest["files"]
        seen: set[str] = set()
        for member in members:
            if member.name == MANIFEST:
                continue
            expected = files.get(member.name)
            if expected is None or member.name in seen or not member.isfile():
                raise BackupError(
                    f"the archive holds {member.name!r}, which its manifest does not list",
                    code="archive_unexpected_member",
                    member=member.name,
                )
            seen.add(member.name)
            _check_member(tar, member, expected)
        if DATABASE not in files:
            raise BackupError("the manifest lists no database", code="archive_incomplete")
        absent = sorted(set(files) - seen)
        if absent:
            raise BackupError(
                f"the archive lacks {len(absent)} file(s) its manifest lists: {absent[0]}",
                code="archive_incomplete",
                member=absent[0],
            )
    return manifest


def _manifest(tar: tarfile.TarFile, members: list[tarfile.TarInfo]) -> dict[str, Any]:
    found = [m for m in members if m.name == MANIFEST]
    if len(found) != 1 or not found[0].isfile() or found[0].size > MAX_MANIFEST_BYTES:
        raise BackupError("the archive has no manifest", code="archive_no_manifest")
    fh = tar.extractfile(found[0])
    assert fh is not None
    try:
        manifest = json.loads(fh.read())
    except ValueError:
        raise BackupError("the manifest is not JSON", code="archive_no_manifest") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise BackupError("the manifest is not a room backup's", code="archive_no_manifest")
    version = manifest.get("format_version")
    if version != FORMAT_VERSION:
        raise BackupError(
            f"the backup's format version is {version!r}; this room reads version "
            f"{FORMAT_VERSION} (a newer room wrote it: restore with that release)",
            code="archive_version",
            found=version,
            supported=FORMAT_VERSION,
        )
    schema = manifest.get("schema_version")
    if not isinstance(schema, int) or schema > SCHEMA_VERSION:
        raise BackupError(
            f"the backup's database is at schema {schema!r}, newer than this room's "
            f"{SCHEMA_VERSION}; restore it with the release that wrote it "
            f"({manifest.get('room_version')})",
            code="archive_schema_too_new",
            found=schema,
            supported=SCHEMA_VERSION,
        )
    files = manifest.get("files")
    if not isinstance(files, dict) or not isinstance(manifest.get("counts"), dict):
        raise BackupError("the manifest lists no files", code="archive_no_manifest")
    for name, entry in files.items():
        match = _BLOB_MEMBER.fullmatch(name)
        named_sha = match.group(1) + match.group(2) if match else None
        if (
            not (name == DATABASE or match)
            or not isinstance(entry, dict)
            or not isinstance(entry.get("sha256"), str)
            or not isinstance(entry.get("size"), int)
            or (named_sha is not None and entry["sha256"] != named_sha)
        ):
            raise BackupError(
                f"the manifest lists {name!r}, which is no member of a backup",
                code="archive_unexpected_member",
                member=name,
            )
    return manifest


def _check_member(tar: tarfile.TarFile, member: tarfile.TarInfo, expected: dict[str, Any]) -> None:
    fh = tar.extractfile(member)
    assert fh is not None
    sha, size = hashlib.sha256(), 0
    while chunk := fh.read(CHUNK_BYTES):
        sha.update(chunk)
        size += len(chunk)
    if size != expected["size"] or sha.hexdigest() != expected["sha256"]:
        raise BackupError(
            f"{member.name} does not match its checksum in the manifest: the archive is damaged "
            "or was changed (nothing was written)",
            code="archive_checksum",
            member=member.name,
        )


def restore(archive: Path, data: Path, now: float, attachments: Path | None = None) -> Restored:
    """Restore ``archive`` into ``data`` (missing or empty), checking everything first.

    ``attachments``: the attachments folder the restored server will use (its
    ``attachments_dir``), when it is not ``<data>/attachments``. A folder inside ``data`` is
    written in the staging folder like the rest; one outside it (a folder of its own, the
    shared folder of a cluster) may hold files already: the archive's files are put there by
    their content addresses (room.infra.blobs: written aside, then linked in, so content
    already there is kept and a reader of it is never disturbed), once the database has passed
    its checks and before the data folder is renamed into place."""
    check_target(data)
    manifest = verify_archive(archive)
    data.parent.mkdir(parents=True, exist_ok=True)
    default = data.resolve() / "attachments"
    root = default if attachments is None else attachments.resolve()
    inside = root.is_relative_to(data.resolve())
    staging = Path(tempfile.mkdtemp(prefix=f".{data.name}.restoring-", dir=data.parent))
    try:
        os.chmod(staging, 0o700)
        staged_root = staging / root.relative_to(data.resolve()) if inside else None
        _unpack(archive, staging, manifest["files"], staged_root)
        sessions, links = _settle_database(staging / DATABASE, manifest, archive, now)
        if not inside:
            _put_blobs(archive, root, manifest["files"])
        marker = {
            "restored_at": now,
            "archive": str(archive.resolve()),
            "backup_created_at": manifest["created_at"],
            "backup_room_version": manifest["room_version"],
            "schema_version": manifest["schema_version"],
            "source": manifest.get("source"),
            "counts": {
                t: manifest["counts"].get(t, 0)
                for t in ("messages", "tasks", "memory_entries", "attachments")
            },
            "attachments": {**manifest["attachments"], "restored_to": str(root)},
            "sessions_ended": sessions,
            "login_links_dropped": links,
        }
        boot.write_restored(staging, marker)
        check_target(data)  # still empty: nobody started a server there meanwhile
        os.replace(staging, data)
        _fsync_dir(data.parent)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return Restored(manifest, sessions, links)


def _unpack(archive: Path, staging: Path, files: dict[str, Any], blob_root: Path | None) -> None:
    """Write every member into ``staging`` (the attachments into ``blob_root``, a folder of
    the staging folder; None: they go elsewhere, :func:`_put_blobs`), checking each again as
    it is written (the file may have changed since it was verified)."""
    with _open_archive(archive) as tar:
        for member in tar.getmembers():
            if member.name == MANIFEST:
                continue
            expected = files[member.name]
            path = staging / member.name
            if member.name != DATABASE:
                if blob_root is None:
                    continue
                path = blobs.path_of(blob_root, expected["sha256"])
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            fh = tar.extractfile(member)
            assert fh is not None
            sha = hashlib.sha256()
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            with os.fdopen(fd, "wb") as out:
                while chunk := fh.read(CHUNK_BYTES):
                    sha.update(chunk)
                    out.write(chunk)
                out.flush()
                os.fsync(out.fileno())
            if sha.hexdigest() != expected["sha256"]:
                raise BackupError(
                    f"{member.name} changed while it was restored", code="archive_checksum"
                )


def _put_blobs(archive: Path, root: Path, files: dict[str, Any]) -> None:
    """Put the archive's attachment files into ``root`` by their content addresses, beside
    what it holds already (an existing file of that content is kept)."""
    if not root.exists():
        root.mkdir(mode=0o700, parents=True)
    with _open_archive(archive) as tar:
        for member in tar.getmembers():
            if member.name in (MANIFEST, DATABASE):
                continue
            expected = files[member.name]
            fh = tar.extractfile(member)
            assert fh is not None
            upload = blobs.Upload(root)
            try:
                while chunk := fh.read(CHUNK_BYTES):
                    upload.write(chunk)
                if upload.finish() != expected["sha256"]:
                    raise BackupError(
                        f"{member.name} changed while it was restored", code="archive_checksum"
                    )
                upload.commit(expected["sha256"])
            except BaseException:
                upload.discard()
                raise


def _settle_database(
    path: Path, manifest: dict[str, Any], archive: Path, now: float
) -> tuple[int, int]:
    """Check the restored database and sign everyone out; (sessions ended, links dropped)."""
    conn = connect(path)
    try:
        problems = integrity_problems(conn)
        if problems:
            raise BackupError(
                f"the restored database failed its integrity check ({'; '.join(problems[:5])})",
                code="archive_integrity",
            )
        counts = table_counts(conn)
        if counts != manifest["counts"]:
            differ = sorted(t for t in set(counts) | set(manifest["counts"])
                            if counts.get(t) != manifest["counts"].get(t))  # fmt: skip
            raise BackupError(
                f"the restored database's rows differ from the manifest's in {differ[:5]}",
                code="archive_counts",
            )
        conn.execute("BEGIN IMMEDIATE")
        try:
            sessions = conn.execute("DELETE FROM sessions").rowcount
            links = conn.execute("DELETE FROM login_links WHERE used_at IS NULL").rowcount
            detail = {
                "archive": archive.name,
                "backup_created_at": manifest["created_at"],
                "backup_room_version": manifest["room_version"],
                "sessions_ended": sessions,
                "login_links_dropped": links,
            }
            conn.execute(
                "INSERT INTO audit_events (at, actor_kind, project_id, action, outcome,"
                " detail_json) VALUES (:at, 'operator', NULL, 'backup.restore', 'ok', :d)",
                {"at": now, "d": json.dumps(detail, ensure_ascii=False)},
            )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    finally:
        conn.close()
    return sessions, links
