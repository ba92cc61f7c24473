"""A PDF's preview: its first page as a PNG and its page count, made in the commands' sandbox.

Every uploaded PDF is treated as hostile: a PDF parser is a large C++ attack surface, and a page
can be made to take forever (forms that draw forms, a billion times over) or all the memory.
So the server never parses one itself. :meth:`PdfPreviewer.render` runs poppler's ``pdfinfo``
and ``pdftoppm`` (Debian ``poppler-utils``) inside the bubblewrap sandbox the agents' commands
use (:mod:`room.infra.sandbox`): no network, no data folder (nor any other folder of the host
but ``/usr`` and a few harmless ``/etc`` entries), no capabilities, a user of its own, and
bounded by :data:`PREVIEW_LIMITS` (wall clock, CPU seconds, address space, processes, and the
largest file it may write, which caps the picture). The PDF comes in only as two pipes
(poppler's ``fd://N``), one per tool, fed by the server — not a descriptor of the stored file,
which the sandbox's user could reopen for writing; the picture goes to an empty scratch folder
that is the sandbox's only writable place besides its RAM-backed ``/tmp``. What comes back is
checked before it is kept: a regular file (a link planted there is not followed), a PNG, no
larger than :data:`PREVIEW_BYTES`, at most :data:`PREVIEW_PX` on its longer side.

Without bubblewrap, or without poppler, there is no preview (never an unsandboxed parse): the
result is a :class:`PreviewFailure` whose ``reason`` says why, as it is for a damaged or
encrypted file or one the limits stopped. Reasons: ``no_poppler``, ``no_sandbox``, ``limit``
(killed by a limit: ``detail`` names it), ``unreadable`` (poppler could not open it: damaged,
or encrypted with a password), ``bad_output`` (no PNG, or not one we accept), ``failed`` (the
sandbox itself could not run).
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import shutil
import stat
import struct
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from room.errors import SandboxError
from room.infra.sandbox import Sandbox
from room.infra.supervise import CommandLimits

log = logging.getLogger(__name__)

PREVIEW_PX = 960  # the picture's longer side: sharp in the timeline, legible in the viewer
PREVIEW_BYTES = 4 * 1024 * 1024  # the largest picture kept (RLIMIT_FSIZE of the render)
# A real first page renders in well under a second; these only stop the hostile ones.
PREVIEW_LIMITS = CommandLimits(
    timeout_secs=20.0,
    cpu_secs=10,
    memory_bytes=1024**3,
    processes=16,
    file_bytes=PREVIEW_BYTES,
    output_bytes=16 * 1024,
)
PREVIEW_TMP_BYTES = 64 * 1024 * 1024  # the sandbox's /tmp and /dev/shm for a render
# Renders at once on the server (the others wait their turn): each may take a CPU for its
# limit and up to its address space, so a burst of hostile uploads holds two, not eight.
MAX_RENDERS = 2
# Read-only in the sandbox: fontconfig's configuration and its cache (no secrets in either).
FONT_CONFIG = (Path("/etc/fonts"), Path("/var/cache/fontconfig"))
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
_FEED_BYTES = 1024 * 1024
_PICTURE = "page.png"  # pdftoppm -singlefile writes <root>.png
_PAGES = re.compile(r"^pages=(\d{1,9})$", re.MULTILINE)
_RENDER = re.compile(r"^render=(\d+)$", re.MULTILINE)

Reason = Literal["no_poppler", "no_sandbox", "limit", "unreadable", "bad_output", "failed"]


@dataclass(frozen=True, slots=True)
class PdfPreview:
    content: bytes  # a PNG
    mime: str
    width: int  # of the picture
    height: int
    pages: int | None  # None when pdfinfo could not tell


@dataclass(frozen=True, slots=True)
class PreviewFailure:
    reason: Reason
    detail: str = ""


def find_poppler() -> tuple[str | None, str | None]:
    """Where ``pdfinfo`` and ``pdftoppm`` are (None each when missing)."""
    return shutil.which("pdfinfo"), shutil.which("pdftoppm")


def _script(pdfinfo: str, pdftoppm: str, info_fd: int, page_fd: int) -> str:
    # The page count is the last "Pages:" line: the free-text fields a PDF controls (title,
    # author …) come before it, and nothing after it is free text. Only the markers are read.
    return (
        f"{pdfinfo} fd://{info_fd} 2>/dev/null"
        " | sed -n 's/^Pages:[[:space:]]*\\([0-9][0-9]*\\)$/pages=\\1/p' | tail -n 1\n"
        f"{pdftoppm} -q -f 1 -l 1 -singlefile -png -scale-to {PREVIEW_PX} fd://{page_fd} page\n"
        'echo "render=$?"\n'
    )


def png_size(content: bytes) -> tuple[int, int] | None:
    """Width and height from a PNG's header (IHDR), or None when it is not a PNG."""
    if len(content) < 24 or not content.startswith(PNG_SIGNATURE) or content[12:16] != b"IHDR":
        return None
    width, height = struct.unpack(">II", content[16:24])
    return width, height


class PdfPreviewer:
    """Makes previews with the sandbox found at start-up; ``reason`` says why it cannot ('' when
    it can)."""

    def __init__(
        self,
        sandbox: Sandbox | None,
        *,
        tools: tuple[str | None, str | None] | None = None,
        limits: CommandLimits = PREVIEW_LIMITS,
    ) -> None:
        self.pdfinfo, self.pdftoppm = find_poppler() if tools is None else tools
        self.limits = limits
        self.slots = asyncio.Semaphore(MAX_RENDERS)
        # Its own scratch size, and the fonts' configuration (a PDF that names a standard font
        # without embedding it is drawn with the machine's); the data folder stays hidden.
        fonts = [p for p in FONT_CONFIG if p.is_dir()]
        self.sandbox = (
            sandbox.configured(
                readable=[*sandbox.readable, *fonts],
                hidden=sandbox.hidden,
                tmp_bytes=PREVIEW_TMP_BYTES,
            )
            if sandbox is not None
            else None
        )

    @property
    def reason(self) -> str:
        if self.pdfinfo is None or self.pdftoppm is None:
            return "no_poppler"
        if self.sandbox is None or not self.sandbox.info.isolated:
            return "no_sandbox"
        return ""

    def describe(self) -> str:
        """One line for ``room doctor`` and the boot report."""
        if self.reason == "no_poppler":
            return "PDF previews off: pdftoppm/pdfinfo not found (Debian package poppler-utils)"
        if self.reason == "no_sandbox":
            why = self.sandbox.info.reason if self.sandbox is not None else "no sandbox"
            return f"PDF previews off: PDFs are parsed only in the sandbox ({why})"
        return f"PDF previews on: {self.pdftoppm}, in the sandbox"

    async def render(self, path: Path) -> PdfPreview | PreviewFailure:
        """The preview of the PDF at ``path`` (opened here, read-only, and fed to the tools
        through pipes: the sandbox never sees the file or the folder it lives in)."""
        reason = self.reason
        if reason:
            return PreviewFailure("no_poppler" if reason == "no_poppler" else "no_sandbox")
        async with self.slots:
            return await self._render(path)

    async def _render(self, path: Path) -> PdfPreview | PreviewFailure:
        assert self.sandbox is not None and self.pdfinfo and self.pdftoppm
        source = -1
        scratch: Path | None = None
        readers: list[int] = []
        feeders: list[threading.Thread] = []
        try:
            source = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
            scratch = Path(await asyncio.to_thread(tempfile.mkdtemp, prefix="room-pdf-"))
            for _ in range(2):  # one pipe per tool, each fed by a thread of its own
                read, write = os.pipe()
                readers.append(read)
                feeder = threading.Thread(
                    target=_feed, args=(source, write), daemon=True, name="pdf-feed"
                )
                try:
                    feeder.start()
                except BaseException:
                    os.close(write)
                    raise
                feeders.append(feeder)
            result = await self.sandbox.run(
                _script(self.pdfinfo, self.pdftoppm, readers[0], readers[1]),
                cwd=scratch,
                limits=self.limits,
                pass_fds=readers,
            )
            if result.killed is not None:
                return PreviewFailure("limit", result.killed)
            render = _RENDER.search(result.output)
            if render is None or render.group(1) != "0":
                # pdftoppm's own exit codes: 1 cannot open the file, 3 permissions; a signal
                # (a limit: SIGXCPU, SIGXFSZ, SIGSEGV on memory) shows as 128 + its number.
                code = int(render.group(1)) if render else None
                if code is not None and code > 128:
                    return PreviewFailure("limit", f"pdftoppm ended by signal {code - 128}")
                return PreviewFailure("unreadable", f"pdftoppm exit {code}")
            return await asyncio.to_thread(_picture, scratch, result.output)
        except (OSError, RuntimeError, SandboxError) as exc:  # RuntimeError: no thread
            log.warning("PDF preview could not run: %s", exc)
            return PreviewFailure("failed", str(exc)[:200])
        finally:
            # The tools are gone: a feeder still writing gets EPIPE now and ends.
            for read in readers:
                os.close(read)
            for feeder in feeders:
                if feeder.is_alive():
                    await asyncio.to_thread(feeder.join, 5.0)
            if source >= 0:
                os.close(source)
            if scratch is not None:
                await asyncio.to_thread(shutil.rmtree, scratch, True)


def _feed(source: int, pipe: int) -> None:
    """Copy the PDF into one tool's pipe, in a thread of its own (it blocks while the tool
    reads). A pipe, not a descriptor of the stored file: the sandbox's user owns what the server
    owns, so a descriptor of the file could be reopened for writing through ``/proc``; a pipe
    holds only the bytes. Ends at the end of the file, or when the tool stopped reading."""
    offset = 0
    try:
        while chunk := os.pread(source, _FEED_BYTES, offset):
            offset += len(chunk)
            view = memoryview(chunk)
            while view:
                view = view[os.write(pipe, view) :]
    except OSError:
        pass  # EPIPE: the tool failed, was stopped, or did not need the rest
    finally:
        os.close(pipe)


def _picture(scratch: Path, output: str) -> PdfPreview | PreviewFailure:
    """The picture the render left in ``scratch``: a regular file (never followed through a
    link the sandbox could have put there), at most :data:`PREVIEW_BYTES`, a PNG within
    :data:`PREVIEW_PX` a side."""
    flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
    try:
        fd = os.open(scratch / _PICTURE, flags)
    except OSError:
        return PreviewFailure("bad_output", "no picture")
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return PreviewFailure("bad_output", "not a file")
        if info.st_size > PREVIEW_BYTES:
            return PreviewFailure("bad_output", f"{info.st_size} bytes")
        with os.fdopen(os.dup(fd), "rb") as file:
            content = file.read(PREVIEW_BYTES + 1)
    finally:
        os.close(fd)
    if len(content) > PREVIEW_BYTES:
        return PreviewFailure("bad_output", "grew past the cap")
    dims = png_size(content)
    if dims is None:
        return PreviewFailure("bad_output", "not a PNG")
    width, height = dims
    if not (0 < width <= PREVIEW_PX and 0 < height <= PREVIEW_PX):
        return PreviewFailure("bad_output", f"{width}x{height}")
    pages = _PAGES.search(output)
    return PdfPreview(content, "image/png", width, height, int(pages.group(1)) if pages else None)
