"""Content-addressed files in the attachments folder (``root``: the ``attachments_dir``
setting, by default ``<data>/attachments``): streamed in, typed, thumbnailed.

An upload is written to ``<root>/tmp/`` under a name no other upload (on any node) uses, while
it is hashed (SHA-256), never held whole in memory; when it is complete it is flushed to disk
(fsync) and put at ``<root>/<sha[:2]>/<sha[2:]>`` by a hard link, which creates the name only if
it is free, or else by an atomic rename; then the folder is synced too. The folder may be shared
by several nodes (NFS or similar, docs/cluster.md): a file is never written in place, a name is
never seen half-written, and content already stored (by this node or another) is never replaced
— a reader on another node keeps the file it opened. The same content uploaded again (in any
project) is stored once: the second copy's temporary file is dropped. Nothing here knows about
projects or rows.

The type comes from the content (``puremagic``'s signatures; the name only chooses between
types the content is equally consistent with, say ``.docx`` and ``.zip``). Images are decoded by
Pillow only after their declared size is checked against a pixel bound, so a decompression bomb
is refused before it costs any memory; the thumbnail is re-encoded from pixels (EXIF orientation
applied, no metadata kept).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import io
import mmap
import os
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import puremagic
from PIL import Image, ImageOps, UnidentifiedImageError

from room.errors import BadRequestError
from room.rules.attachments import extension_of

BLOBS_DIR = "attachments"
TMP_DIR = "tmp"
DETECT_HEAD_BYTES = 64 * 1024
THUMB_MAX_PX = 480
THUMB_JPEG_QUALITY = 82
STALE_TMP_SECS = 24 * 3600
# Formats Pillow may open for a thumbnail: raster formats only, never a vector or a container.
EXIF_ORIENTATION = 0x0112
THUMB_FORMATS = ("PNG", "JPEG", "GIF", "WEBP", "BMP", "TIFF")
DEFAULT_MAX_PIXELS = 50_000_000


class ImageTooLargeError(BadRequestError):
    code = "image_too_large"


def root_of(data: Path) -> Path:
    """The default attachments folder of a data folder (``Settings.attachments_root``)."""
    return data / BLOBS_DIR


def path_of(root: Path, sha256: str) -> Path:
    return root / sha256[:2] / sha256[2:]


# Whole-block writes go straight to the disk (O_DIRECT, where the OS and file system offer it):
# no copy into the page cache, whose fresh pages cost more than the write itself on some
# machines (a virtual machine touching memory it has not used lately). The durability is the
# same: :meth:`Upload.finish` fsyncs either way.
O_DIRECT: int = getattr(os, "O_DIRECT", 0)
DIRECT_ALIGN = 4096  # a direct write's address, length and offset: whole blocks of this


def aligned_buffer(size: int) -> mmap.mmap:
    """A page-aligned buffer (anonymous memory), fit for a direct write of whole blocks.
    Private where the OS says so: ``mmap``'s default for anonymous memory is shared, which
    Linux backs with shmem (dearer page faults, and a direct write pins its pages the slow
    way)."""
    private = getattr(mmap, "MAP_PRIVATE", 0) | getattr(mmap, "MAP_ANONYMOUS", 0)
    return mmap.mmap(-1, size, flags=private) if private else mmap.mmap(-1, size)


class Upload:
    """One upload being streamed to a temporary file. ``write`` hashes and writes a chunk
    (``hash`` and ``store`` do each half, so that a chunk's hashing and writing may run at once
    in two threads); ``finish`` flushes it to disk. A chunk from
    :func:`aligned_buffer` whose length is whole :data:`DIRECT_ALIGN` blocks is written with
    ``O_DIRECT``; the first that is not (the tail, a small file) turns the file to ordinary
    buffered writes for the rest, as does a file system that refuses direct writes. After a
    write fails (a full disk), every later one is refused: chunks already queued behind it
    (see ``room.actions.attachments``) never land at a wrong offset."""

    def __init__(self, root: Path, name: str | None = None) -> None:
        tmp = root / TMP_DIR
        tmp.mkdir(parents=True, exist_ok=True)
        self.root = root
        self.direct = bool(O_DIRECT)
        self.path = tmp / f"{name or uuid.uuid4().hex}.part"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC
        try:
            self.fd = os.open(self.path, flags | O_DIRECT)
        except OSError as exc:  # a file system without direct I/O (the file may exist now)
            if not self.direct or exc.errno != errno.EINVAL:
                raise
            self.path.unlink(missing_ok=True)
            self.fd = os.open(self.path, flags)
            self.direct = False
        self.closed = False
        self.failed = False  # a write failed (a full disk): the upload takes no more
        self.lock = threading.Lock()
        self.head = bytearray()  # the first DETECT_HEAD_BYTES, for typing without a read
        self.hasher = hashlib.sha256()
        self.size = 0

    def write(self, chunk: bytes | bytearray | memoryview) -> None:
        """Hash and store ``chunk``."""
        self.hash(chunk)
        self.store(chunk)

    def hash(self, chunk: bytes | bytearray | memoryview) -> None:
        """Hash the next chunk (chunks in order; may run beside :meth:`store` of the same one)."""
        self.hasher.update(chunk)
        if len(self.head) < DETECT_HEAD_BYTES:
            self.head += chunk[: DETECT_HEAD_BYTES - len(self.head)]

    def store(self, chunk: bytes | bytearray | memoryview) -> None:
        """Write the next chunk to the file (chunks in order)."""
        view = memoryview(chunk)
        size = len(view)
        with self.lock:  # a discard (a refusal, a cancelled upload) waits for this write
            if self.closed:
                raise OSError(errno.EBADF, "the upload was discarded")
            if self.failed:  # the file's end is unknown now: nothing more goes after it
                raise OSError(errno.EIO, "an earlier write of this upload failed")
            if self.direct and size % DIRECT_ALIGN:
                self._buffered()
            while view:
                try:
                    written = os.write(self.fd, view)
                except OSError as exc:
                    if not self.direct or exc.errno != errno.EINVAL:
                        self.failed = True
                        raise
                    self._buffered()  # an address or length the device will not take directly
                    continue
                view = view[written:]
            self.size += size

    def _buffered(self) -> None:
        flags = fcntl.fcntl(self.fd, fcntl.F_GETFL)
        fcntl.fcntl(self.fd, fcntl.F_SETFL, flags & ~O_DIRECT)
        self.direct = False

    def finish(self) -> str:
        """Flush to disk; the content's SHA-256."""
        with self.lock:
            os.fsync(self.fd)
            self._close()
        return self.hasher.hexdigest()

    def _close(self) -> None:
        if not self.closed:
            self.closed = True
            os.close(self.fd)

    def discard(self) -> None:
        with self.lock, contextlib.suppress(OSError):
            self._close()
        self.path.unlink(missing_ok=True)

    def commit(self, sha256: str, *, keep: bool = False) -> Path:
        """Move the finished file to its content address (or drop it: already stored).
        ``keep``: the temporary file stays too (a hard link), until :meth:`settle`."""
        target = path_of(self.root, sha256)
        _put(self.path, target, self.size, keep=keep)
        return target

    def settle(self, sha256: str) -> bool:
        """After the row naming the content is committed: the content is at its address (put
        there again from the kept temporary file if a removal took it meanwhile — another
        upload's row went, on this node or another, and its content with it: see
        :func:`retire`), and the temporary file goes. True if it had to be put again."""
        try:
            if holds(self.root, sha256, self.size):
                return False
            _put(self.path, path_of(self.root, sha256), self.size)
            return True
        finally:
            self.path.unlink(missing_ok=True)


def _put(part: Path, target: Path, size: int, *, keep: bool = False) -> None:
    """Put the finished, synced file ``part`` at ``target`` (in the same folder tree), unless
    that content is already there. A hard link creates the name only if it is free, so a file
    another node stored meanwhile (or is serving) is never replaced under its readers; a
    damaged file at the name (a size that does not match) is replaced by an atomic rename, as
    is everything on a file system without hard links."""
    try:
        if target.stat().st_size == size:
            if not keep:
                part.unlink(missing_ok=True)
            return
    except FileNotFoundError:
        pass
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(part, target)
    except FileExistsError:
        if target.stat().st_size != size:
            os.replace(part, target)
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK):
            raise
        os.replace(part, target)  # nothing kept: a file system without hard links
    if not keep:
        part.unlink(missing_ok=True)
    _fsync_dir(target.parent)


def put_bytes(root: Path, content: bytes) -> str:
    """Store a small blob (a thumbnail) by its SHA-256."""
    upload = Upload(root)
    try:
        upload.write(content)
        sha256 = upload.finish()
        upload.commit(sha256)
    except BaseException:
        upload.discard()
        raise
    return sha256


def holds(root: Path, sha256: str, size: int) -> bool:
    """Whether the store has this content already (its address, at its size)."""
    try:
        return path_of(root, sha256).stat().st_size == size
    except OSError:
        return False


# -- staged files: written before a transaction commits, put in place only if it gets that far --


def _staged_prefix(token: str) -> str:
    return f"staged-{token}-"


def stage(root: Path, token: str, sha256: str) -> Upload:
    """A temporary file for content that will be ``sha256``, kept aside under ``token`` until
    :func:`commit_staged` (or dropped by :func:`discard_staged`, or by :func:`sweep_tmp` a day
    later if the process dies first)."""
    return Upload(root, name=_staged_prefix(token) + sha256)


def _staged(root: Path, token: str) -> Iterator[tuple[Path, str]]:
    tmp = root / TMP_DIR
    if not tmp.is_dir():
        return
    prefix = _staged_prefix(token)
    with os.scandir(tmp) as entries:
        for entry in entries:
            if entry.name.startswith(prefix) and entry.name.endswith(".part"):
                yield Path(entry.path), entry.name[len(prefix) : -len(".part")]


def commit_staged(root: Path, token: str) -> int:
    """Move every file staged under ``token`` to its content address; how many moved."""
    moved = 0
    for path, sha256 in list(_staged(root, token)):
        _put(path, path_of(root, sha256), path.stat().st_size)
        moved += 1
    return moved


def discard_staged(root: Path, token: str) -> None:
    for path, _ in list(_staged(root, token)):
        path.unlink(missing_ok=True)


def retire(root: Path, sha256: str) -> Path | None:
    """Take content no row names any more away from its address, to a temporary name of its
    own (None: not there). The caller then asks the database again: if a row names it now (an
    upload of the same content, on any node, committed meanwhile) it puts it back with
    :func:`reinstate`, else it deletes it with :func:`drop_retired`. With :meth:`Upload.settle`
    on the uploading side, the content of a committed row is never lost to a removal racing it:
    whichever of the two looks last finds the other's work."""
    tmp = root / TMP_DIR
    tmp.mkdir(parents=True, exist_ok=True)
    aside = tmp / f"retired-{uuid.uuid4().hex}.part"
    try:
        os.replace(path_of(root, sha256), aside)
    except FileNotFoundError:
        return None
    return aside


def reinstate(root: Path, sha256: str, aside: Path) -> None:
    """Put retired content back at its address (unless it is there again already)."""
    _put(aside, path_of(root, sha256), aside.stat().st_size)


def drop_retired(aside: Path) -> None:
    aside.unlink(missing_ok=True)


def remove(root: Path, sha256: str) -> bool:
    target = path_of(root, sha256)
    try:
        target.unlink()
    except FileNotFoundError:
        return False
    return True


def sweep_tmp(root: Path, now: float | None = None) -> int:
    """Drop temporary files an interrupted upload left (older than a day: on a shared folder,
    another node's upload under way is never that old)."""
    tmp = root / TMP_DIR
    if not tmp.is_dir():
        return 0
    cutoff = (time.time() if now is None else now) - STALE_TMP_SECS
    removed = 0
    for part in tmp.glob("*.part"):
        with contextlib.suppress(OSError):
            if part.stat().st_mtime < cutoff:
                part.unlink()
                removed += 1
    return removed


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# -- type ----------------------------------------------------------------------------------------


def detect_bytes(head: bytes, name: str, *, whole: bool = True) -> str:
    if not head:
        return "application/octet-stream"
    try:
        found = puremagic.magic_string(head)
    except puremagic.PureError:
        found = []
    found = [m for m in found if m.mime_type]
    if found:
        best = max(m.confidence for m in found)
        ext = extension_of(name)
        # The name only chooses among what the content says (a zip that is a .docx).
        for match in found:
            if ext and match.extension.lower() == ext:
                return str(match.mime_type)
        return str(next(m for m in found if m.confidence == best).mime_type)
    return "text/plain" if _is_text(head, whole) else "application/octet-stream"


def _is_text(head: bytes, whole: bool) -> bool:
    if b"\x00" in head:
        return False
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        # A multi-byte character cut by the end of the head is still text.
        return not whole and exc.start >= len(head) - 3
    return True


# -- images --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Thumbnail:
    content: bytes
    mime: str
    width: int  # of the original, as it is shown (EXIF orientation applied)
    height: int


def thumbnail(path: Path, max_pixels: int = DEFAULT_MAX_PIXELS) -> Thumbnail | None:
    """A small re-encoded copy of the image at ``path``, or None when it is not an image Pillow
    decodes. Raises :class:`ImageTooLargeError` for an image that declares more than
    ``max_pixels`` pixels (checked from its header, before any decoding; Pillow's own
    ``Image.MAX_IMAGE_PIXELS`` bound, set to the same value, refuses past twice it at open)."""
    Image.MAX_IMAGE_PIXELS = max_pixels  # one value per server: the setting
    try:
        with Image.open(path, formats=THUMB_FORMATS) as im:
            width, height = im.size
            if width * height > max_pixels:
                raise ImageTooLargeError(
                    f"图片过大，已拒绝：{width}×{height} 像素超过上限 {max_pixels} "
                    f"(the image declares {width}×{height} pixels, more than {max_pixels}; "
                    "refused as a possible decompression bomb)",
                    width=width,
                    height=height,
                    limit=max_pixels,
                )
            im.seek(0)
            # Shown upright: orientations 5–8 turn the picture a quarter.
            turned = im.getexif().get(EXIF_ORIENTATION, 1) in (5, 6, 7, 8)
            size = (height, width) if turned else (width, height)
            # Shrunk before it is turned (the box is square), and a JPEG decoded at a reduced
            # scale: a 24-megapixel photo never becomes a 72 MB bitmap here.
            im.draft("RGB", (THUMB_MAX_PX, THUMB_MAX_PX))
            im.thumbnail((THUMB_MAX_PX, THUMB_MAX_PX))
            shown = ImageOps.exif_transpose(im)
            has_alpha = shown.mode in ("RGBA", "LA", "PA") or (
                shown.mode == "P" and "transparency" in shown.info
            )
            out = io.BytesIO()
            if has_alpha:
                shown.convert("RGBA").save(out, "PNG", optimize=True)
                mime = "image/png"
            else:
                shown.convert("RGB").save(out, "JPEG", quality=THUMB_JPEG_QUALITY)
                mime = "image/jpeg"
            return Thumbnail(out.getvalue(), mime, size[0], size[1])
    except Image.DecompressionBombError:  # Pillow's own bound, past twice the limit
        raise ImageTooLargeError(
            f"图片过大，已拒绝：像素数超过上限 {max_pixels} 的两倍 (the image declares more than "
            f"twice {max_pixels} pixels; refused as a possible decompression bomb)",
            limit=max_pixels,
        ) from None
    except (UnidentifiedImageError, OSError, ValueError, EOFError, SyntaxError):
        return None  # not an image after all, or a damaged one: kept as a plain file
