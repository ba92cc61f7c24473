"""Uploading attachments, taking them into a send, copying them to an agent, purging them.

An upload (:func:`upload`) streams the request body to disk through ``room.infra.blobs`` — the
body is received straight into a ring of :data:`BUFFERS` buffers of :data:`BUFFER_BYTES` while
two threads write and hash those received before, so memory stays bounded whatever the file's size — and is refused
(413) as soon as its declared length or its streamed bytes pass ``attachment_max_bytes`` or what
is left of the project's ``attachment_project_bytes``. What is left counts the room reserved by
the project's uploads still under way, on any server of a cluster: an upload reserves its
declared length (a chunked one, the most it may be) before reading a byte, in a row of
``upload_reservations`` taken under the project's lock in the writer's transaction, so two at
once (on one node or two) cannot both take the last of the quota. The row is deleted in the
transaction that records the upload, or when it fails; while the body streams the upload renews
it every third of ``attachment_reservation_secs``, so the reservation of an upload whose server
died expires, is ignored, and is deleted by the next reservation in the project.
At most ``attachment_concurrent_uploads`` uploads are received at once on the whole server (each
holds its buffer ring, two threads and, at its end, an image decoder): the others wait their turn
in order for up to ``attachment_wait_secs``, reading nothing meanwhile, and are then refused (503
``uploads_busy``), so memory stays bounded however many arrive together. The row it writes
belongs to its uploader until a send takes it (:func:`take`, inside the send's transaction): only the uploader's own, unsent
uploads in the same project may be attached, each to one message.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import secrets
import shutil
import stat
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any

from room.errors import (
    BadRequestError,
    BusyError,
    ConflictError,
    NotFoundError,
    PayloadTooLargeError,
    RateLimitedError,
    WorkspacePathError,
)
from room.infra import blobs
from room.infra.bodies import BodyInto
from room.infra.evidence import EvidenceError, open_workspace
from room.infra.pdfpreview import PreviewFailure
from room.rules.attachments import MAX_PER_MESSAGE, clean_name, wire
from room.rules.entities import Member
from room.rules.lifecycle import ActorKind, ProjectState, posting_open
from room.services import Services
from room.store import Tx
from room.store import attachments as store
from room.store import messages as messages_store
from room.store import projects as projects_store
from room.store import uploads as reservations
from room.store.dialect import Connection

log = logging.getLogger(__name__)

BUFFER_BYTES = 4 * 1024 * 1024
BUFFERS = 4  # received, being written, being hashed, and one spare for the slower half
AGENT_DIR = Path(".room") / "attachments"
PDF_TYPE = "application/pdf"
# The states a member of each kind may upload in: those it may post in.
POSTING_STATES = {
    "human": frozenset(s.value for s in ProjectState if posting_open(s, ActorKind.MEMBER)),
    "agent": frozenset(s.value for s in ProjectState if posting_open(s, ActorKind.AGENT)),
}


def _too_large(limit: int) -> PayloadTooLargeError:
    return PayloadTooLargeError(
        f"附件超过单个文件上限 (the file is larger than {limit} bytes)", limit=limit
    )


def _over_quota(limit: int, used: int) -> PayloadTooLargeError:
    return PayloadTooLargeError(
        f"项目的附件空间已满 (the project's attachments would pass {limit} bytes)",
        code="project_quota",
        limit=limit,
        used=used,
    )


async def upload(
    core: Services,
    member: Member,
    *,
    name: str | None,
    declared: int | None,
    body: BodyInto,
) -> dict[str, Any]:
    """Store one upload by ``member``; its wire object (``room.rules.attachments.wire``)."""
    settings = core.settings
    limit = settings.attachment_max_bytes
    if declared is not None and declared > limit:
        raise _too_large(limit)
    wait_ms = core.uploads.take(member.id)
    if wait_ms:
        raise RateLimitedError(
            f"上传太频繁，请 {(wait_ms + 999) // 1000} 秒后再试 (uploading too fast; try again in "
            f"{wait_ms} ms)",
            retry_after_ms=wait_ms,
        )
    slots = core.upload_slots
    if slots is None:
        slots = core.upload_slots = asyncio.Semaphore(settings.attachment_concurrent_uploads)
    try:
        # Not wait_for: on 3.11 it swallows a cancellation that lands as the slot is handed
        # over (the cancelled upload went on and was stored).
        async with asyncio.timeout(settings.attachment_wait_secs):
            await slots.acquire()
    except TimeoutError:
        raise BusyError(
            "服务器正在接收其他上传，请稍后再试 (the server is receiving as many uploads as it "
            "may at once; try again shortly)",
            code="uploads_busy",
            retry_after_ms=1000,
        ) from None
    try:
        return await _upload(core, member, name, declared, body)
    finally:
        slots.release()


async def _upload(
    core: Services, member: Member, name: str | None, declared: int | None, body: BodyInto
) -> dict[str, Any]:
    """An upload that holds its slot: reserve the room, receive, type, store, record."""
    settings = core.settings
    limit = settings.attachment_max_bytes
    project_id = member.project_id
    quota = settings.attachment_project_bytes

    lasts = settings.attachment_reservation_secs

    def reserve(conn: Connection, tx: Tx) -> tuple[int, int, int]:
        # Under the project's lock (``locks``): nobody else reserves or records in it meanwhile.
        state = projects_store.state_of(conn, project_id)
        if state not in POSTING_STATES[member.kind]:
            raise ConflictError(
                f"the project is {state}; it does not accept attachments now",
                code="project_not_accepting",
                state=state,
            )
        reservations.reap(conn, project_id, tx.now)
        used = store.project_bytes(conn, project_id) + reservations.reserved(
            conn, project_id, tx.now
        )
        room_left = max(0, quota - used)
        if declared is not None and declared > room_left:
            raise _over_quota(quota, used)
        size = declared if declared is not None else min(limit, room_left)
        taken = reservations.reserve(conn, project_id, size, tx.node or "", tx.now, tx.now + lasts)
        return taken, used, room_left

    # The room an upload may take is reserved before its first byte is read; the reservation
    # ends in the transaction that records the upload's row, or when the upload fails.
    reservation, used, room_left = await core.db.submit(reserve, locks=(project_id,))
    renewing = asyncio.get_running_loop().create_task(
        _renew(core, reservation, lasts), name=f"upload reservation {reservation}"
    )
    part: blobs.Upload | None = None
    try:
        cap = min(limit, room_left)
        file_name = clean_name(name)
        root = settings.attachments_root
        part = await asyncio.to_thread(blobs.Upload, root)
        try:
            await _stream(part, body, cap, limit, lambda: _over_quota(quota, used))
            if part.size == 0:
                raise BadRequestError("空文件 (the file is empty)", code="empty_file")
            row, thumb = await asyncio.to_thread(
                _finish, part, root, file_name, settings.attachment_max_pixels
            )
            if row["mime"] == PDF_TYPE:
                row.update(await _pdf_preview(core, str(row["sha256"])))
        except BaseException:
            await asyncio.to_thread(part.discard)
            raise

        def record(conn: Connection, tx: Tx) -> dict[str, Any]:
            reservations.release(conn, reservation)
            return store.insert(
                conn, project_id=project_id, uploader_id=member.id, now=tx.now, **row
            )

        renewing.cancel()
        stored = await core.db.submit(record, locks=(project_id,))
        # The row is committed: its content stays (put back if a removal took it meanwhile).
        await asyncio.to_thread(_settle, part, root, row, thumb)
    except BaseException:
        renewing.cancel()
        if part is not None:
            part.path.unlink(missing_ok=True)  # the copy kept until the row was committed
        with contextlib.suppress(Exception):  # the server is stopping: the row expires
            await asyncio.shield(
                core.db.write(lambda conn, tx: reservations.release(conn, reservation))
            )
        raise
    return wire(stored)


async def _renew(core: Services, reservation: int, lasts: float) -> None:
    """Keep an upload's reservation alive while it streams (every third of its life)."""
    while True:
        await asyncio.sleep(lasts / 3)

        def job(conn: Connection, tx: Tx) -> bool:
            return reservations.renew(conn, reservation, tx.now + lasts)

        try:
            if not await core.db.write(job):
                log.warning("upload reservation %d expired before it was renewed", reservation)
                return
        except Exception:
            log.debug("upload reservation %d not renewed", reservation, exc_info=True)


async def _stream(
    part: blobs.Upload, body: BodyInto, cap: int, limit: int, over_quota: Any
) -> None:
    """Receive the body into a ring of :data:`BUFFERS` buffers of :data:`BUFFER_BYTES` while two
    threads of this upload's own, one writing and one hashing, each take the received buffers in
    order: receiving, hashing and writing run at once, and neither half waits for the other's
    previous buffer (the disk's time hidden behind the hashing). A buffer is received into again
    once both have finished with it, so memory stays bounded whatever the file's size. Never
    reads more than one byte past ``cap``, and refuses as soon as that byte arrives."""
    # Anonymous memory, page-aligned for direct writes; unmapped when the last view goes.
    buffers = [memoryview(blobs.aligned_buffer(BUFFER_BYTES)) for _ in range(BUFFERS)]
    busy: list[list[asyncio.Future[None]]] = [[] for _ in buffers]  # each buffer's write and hash
    # One worker each: a half takes its chunks in the order they were received.
    writer = ThreadPoolExecutor(1, thread_name_prefix="upload-write")
    hasher = ThreadPoolExecutor(1, thread_name_prefix="upload-hash")
    received = 0
    try:
        for turn in itertools.count():
            slot = turn % BUFFERS
            await _done(busy[slot])  # this buffer's last chunk is written and hashed
            _check(busy)  # a failed write (a full disk) stops the upload now
            view = buffers[slot]
            n = await body(view[: min(BUFFER_BYTES, cap + 1 - received)])
            received += n
            if received > cap:
                raise _too_large(limit) if cap == limit else over_quota()
            if n == 0:
                break
            chunk = view[:n]  # written in one thread while another hashes it: both only read it
            busy[slot] = [  # the write first: it waits on the device, the hash on the CPU
                asyncio.wrap_future(writer.submit(part.store, chunk)),
                asyncio.wrap_future(hasher.submit(part.hash, chunk)),
            ]
        for futures in busy:
            await _done(futures)
    finally:
        # A refusal while a write ran: queued chunks are dropped, running ones end before the
        # caller discards the file (which also waits for a write, should this task be cancelled
        # meanwhile: Upload.lock).
        writer.shutdown(wait=False, cancel_futures=True)
        hasher.shutdown(wait=False, cancel_futures=True)
        running = [f for futures in busy for f in futures if not f.done()]
        if running:
            await asyncio.gather(*running, return_exceptions=True)


async def _done(futures: list[asyncio.Future[None]]) -> None:
    if futures:
        await asyncio.gather(*futures)
        futures.clear()


def _check(busy: list[list[asyncio.Future[None]]]) -> None:
    for futures in busy:
        for future in futures:
            if future.done() and not future.cancelled() and future.exception() is not None:
                future.result()  # raises it


def _settle(part: blobs.Upload, root: Path, row: Mapping[str, Any], thumb: bytes | None) -> None:
    """After the row is committed: its file and thumbnail are at their addresses (a removal of
    the same content racing this upload, on any node, may have taken them: see
    ``blobs.retire``)."""
    part.settle(str(row["sha256"]))
    if thumb is not None and not blobs.holds(root, str(row["thumb_sha256"]), len(thumb)):
        blobs.put_bytes(root, thumb)


def _finish(
    part: blobs.Upload, root: Path, name: str, max_pixels: int
) -> tuple[dict[str, Any], bytes | None]:
    """Flush, type and thumbnail the upload, then put it at its content address, its temporary
    file kept until the row is committed (in a thread); the row, and the thumbnail's bytes."""
    sha256 = part.finish()
    mime = blobs.detect_bytes(bytes(part.head), name, whole=part.size <= len(part.head))
    thumb = None
    if mime.startswith("image/") and mime != "image/svg+xml":
        thumb = blobs.thumbnail(part.path, max_pixels)
    part.commit(sha256, keep=True)
    thumb_sha = blobs.put_bytes(root, thumb.content) if thumb else None
    return {
        "sha256": sha256,
        "size": part.size,
        "name": name,
        "mime": mime,
        "kind": "image" if thumb else "file",
        "width": thumb.width if thumb else None,
        "height": thumb.height if thumb else None,
        "thumb_sha256": thumb_sha,
        "thumb_mime": thumb.mime if thumb else None,
    }, thumb.content if thumb else None


async def _pdf_preview(core: Services, sha256: str) -> dict[str, Any]:
    """The columns of a PDF's preview (its first page's picture and page count), or none: drawn
    in the sandbox by ``room.infra.pdfpreview`` (never here; at most two at once), once per
    content. The upload holds its slot meanwhile. A PDF
    without a preview (damaged, encrypted, stopped by a limit, no poppler or no sandbox on this
    server) is kept as a plain file, its reason logged."""
    if core.pdfs is None:
        return {}
    known = await core.db.read(lambda conn: store.pdf_preview(conn, sha256))
    if known is not None:
        return known
    data = core.settings.attachments_root
    found = await core.pdfs.render(blobs.path_of(data, sha256))
    if isinstance(found, PreviewFailure):
        # One that a limit stopped may be an attack (or a limit too tight): the operator's to see.
        level = logging.WARNING if found.reason in ("limit", "failed") else logging.INFO
        log.log(level, "no preview of PDF %s…: %s %s", sha256[:12], found.reason, found.detail)
        return {}
    thumb_sha = await asyncio.to_thread(blobs.put_bytes, data, found.content)
    return {
        "thumb_sha256": thumb_sha,
        "thumb_mime": found.mime,
        "width": found.width,
        "height": found.height,
        "pages": found.pages,
    }


def take(
    conn: Connection, sender: Member, ids: Sequence[int], message_id: int
) -> list[dict[str, Any]]:
    """Inside a send's transaction: attach ``ids`` (the sender's own unsent uploads in this
    project) to ``message_id``; their wire objects, in the order given."""
    rows = check_owned(conn, sender, ids)
    store.set_message(conn, ids, message_id)
    return [wire(r) for r in rows]


def check_owned(conn: Connection, sender: Member, ids: Sequence[int]) -> list[dict[str, Any]]:
    if len(ids) > MAX_PER_MESSAGE:
        raise BadRequestError(
            f"a message may carry at most {MAX_PER_MESSAGE} attachments",
            code="too_many_attachments",
            limit=MAX_PER_MESSAGE,
        )
    if len(set(ids)) != len(ids):
        raise BadRequestError("an attachment is listed twice", code="bad_attachment")
    found = {int(r["id"]): r for r in store.many(conn, ids)}
    rows = []
    for attachment_id in ids:
        row = found.get(attachment_id)
        if row is None or row["project_id"] != sender.project_id or row["uploader_id"] != sender.id:
            raise BadRequestError(
                f"attachment {attachment_id} is not one of your uploads in this project",
                code="bad_attachment",
                attachment_id=attachment_id,
            )
        if row["message_id"] is not None:
            raise BadRequestError(
                f"attachment {attachment_id} was already sent",
                code="attachment_sent",
                attachment_id=attachment_id,
            )
        rows.append(row)
    return rows


async def discard(core: Services, member: Member, attachment_id: int) -> None:
    """Remove one's own upload before it is sent (its content stays if anything else uses it)."""

    def job(conn: Connection, tx: Tx) -> list[str]:
        row = store.get(conn, attachment_id)
        if row is None or row["project_id"] != member.project_id:
            raise NotFoundError("no such attachment", code="no_attachment")
        if not store.delete_unsent(conn, attachment_id, member.id):
            raise ConflictError(
                "only your own upload, before it is sent, can be removed", code="attachment_sent"
            )
        shas = {row["sha256"], row["thumb_sha256"]} - {None}
        return [s for s in shas if not store.referenced(conn, s)]

    await drop_files(core, await core.db.write(job, locks=(member.project_id,)))


async def readable(core: Services, member: Member, attachment_id: int) -> dict[str, Any]:
    """The row of an attachment ``member`` may read: one sent in its project, or its own unsent
    upload. Once the message that carried it is deleted, only the people who may still read
    that message's text (its author and the project's owners, as with the edit history) may
    read its files; to everyone else it is gone (404 ``attachment_deleted``)."""

    def query(conn: Connection) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        row = store.get(conn, attachment_id)
        if row is None or row["message_id"] is None:
            return row, None
        return row, messages_store.get_row(conn, int(row["message_id"]))

    row, message = await core.db.read(query)
    if row is None or row["project_id"] != member.project_id:
        raise NotFoundError("no such attachment", code="no_attachment")
    if row["message_id"] is None and row["uploader_id"] != member.id:
        raise NotFoundError("no such attachment", code="no_attachment")
    if (
        message is not None
        and message["deleted_at"] is not None
        and member.id != message["author_id"]
        and not member.is_owner
    ):
        raise NotFoundError(
            "附件所在的消息已删除 (the message that carried this file was deleted)",
            code="attachment_deleted",
        )
    return row


def purge_project(conn: Connection, project_id: int, root: Path) -> dict[str, Any]:
    """Purge step: the project's rows, and the files no other project's row still uses
    (``root``: the attachments folder)."""
    count, orphans = store.delete_project(conn, project_id)
    removed = 0
    for sha256 in orphans:
        aside = blobs.retire(root, sha256)
        if aside is None:
            continue
        if store.referenced(conn, sha256):  # a statement of its own: sees others' new commits
            blobs.reinstate(root, sha256, aside)
        else:
            blobs.drop_retired(aside)
            removed += 1
    return {"attachments": count, "attachment_files": removed}


async def drop_files(core: Services, shas: Sequence[str]) -> None:
    """Delete the files of contents no row named at the caller's commit: each is first taken
    from its address (``blobs.retire``), then the database is asked again, and a content an
    upload committed meanwhile (on any node) is put back instead of deleted."""
    root = core.settings.attachments_root
    for sha256 in shas:
        aside = await asyncio.to_thread(blobs.retire, root, sha256)
        if aside is None:
            continue
        if await core.db.read(partial(store.referenced, sha256=sha256)):
            await asyncio.to_thread(blobs.reinstate, root, sha256, aside)
        else:
            await asyncio.to_thread(blobs.drop_retired, aside)


UNSENT_KEEP_SECS = 24 * 3600


async def sweep_unsent(core: Services) -> int:
    """At start-up: forget uploads no message took within a day (a draft left behind), so they
    hold neither disk nor the project's quota; their files go unless another upload uses them."""

    def job(conn: Connection, tx: Tx) -> tuple[int, list[str]]:
        return store.delete_unsent_before(conn, tx.now - UNSENT_KEEP_SECS)

    count, orphans = await core.db.write(job)
    await drop_files(core, orphans)
    return count


def purge_preview(conn: Connection, project_id: int) -> dict[str, Any]:
    """What :func:`purge_project` would delete, without deleting (the caller's savepoint)."""
    count, orphans = store.delete_project(conn, project_id)
    return {"attachments": count, "attachment_files": len(orphans)}


async def copy_for_agent(
    core: Services, workspace: Path, items: Sequence[Mapping[str, Any]]
) -> dict[int, str]:
    """Copy attachments into ``<workspace>/.room/attachments/`` (which git is told to ignore);
    attachment id → the path relative to the workspace, for the agent's file tools."""
    if not items:
        return {}

    def read(conn: Connection) -> list[dict[str, Any]]:
        return store.many(conn, [int(i["id"]) for i in items])

    rows = await core.db.read(read)
    return await asyncio.to_thread(_copy, core.settings.attachments_root, workspace, rows)


def _copy(blob_root: Path, workspace: Path, rows: Sequence[Mapping[str, Any]]) -> dict[int, str]:
    """The copies behind :func:`copy_for_agent`. The working folder is written by agents, so nothing
    here goes by an absolute name inside it (a planted symlink would make the server write wherever
    it points — over its own database, say): the folders are walked to, and made, from the
    workspace's descriptor (:mod:`room.infra.fsroot`, a symlink followed only inside);
    ``.room/.gitignore`` is made only where there is no name at all (``O_EXCL | O_NOFOLLOW``); each
    copy is written under a temporary name in the folder held and renamed over its own name, which
    replaces a symlink planted there instead of writing through it. A copy already there as a
    regular file of the right size is kept."""
    paths: dict[int, str] = {}
    try:
        with (
            open_workspace(workspace) as root,
            root.folder(
                [AGENT_DIR.parts[0]], create=True, raw=str(AGENT_DIR), error=EvidenceError
            ) as top,
        ):
            _ignore_all(top.fd)
            with root.folder(
                list(AGENT_DIR.parts), create=True, raw=str(AGENT_DIR), error=EvidenceError
            ) as folder:
                for row in rows:
                    name = f"{row['id']}-{row['name']}"
                    try:
                        _copy_one(
                            blobs.path_of(blob_root, str(row["sha256"])), folder.fd, name, row
                        )
                    except OSError:
                        log.warning(
                            "attachment %s not copied for an agent", row["id"], exc_info=True
                        )
                        continue
                    paths[int(row["id"])] = str(AGENT_DIR / name)
    except (OSError, WorkspacePathError):
        log.warning("attachments folder not made in %s", workspace, exc_info=True)
    return paths


def _ignore_all(folder: int) -> None:
    """``.gitignore`` with ``*`` in the folder held, unless the name is taken (by anything)."""
    try:
        fd = os.open(
            ".gitignore",
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o644,
            dir_fd=folder,
        )
    except FileExistsError:
        return
    try:
        os.write(fd, b"*\n")
    finally:
        os.close(fd)


def _copy_one(source: Path, folder: int, name: str, row: Mapping[str, Any]) -> None:
    try:
        info = os.stat(name, dir_fd=folder, follow_symlinks=False)
        if stat.S_ISREG(info.st_mode) and info.st_size == row["size"]:
            return
    except FileNotFoundError:
        pass
    temp = f".{row['id']}.{secrets.token_hex(6)}.tmp"
    out = os.open(
        temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644,
        dir_fd=folder,
    )  # fmt: skip
    try:
        with os.fdopen(out, "wb") as dst, open(source, "rb") as src:
            shutil.copyfileobj(src, dst)
        os.replace(temp, name, src_dir_fd=folder, dst_dir_fd=folder)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=folder)
        raise
