"""room.infra.pdfpreview with the real bubblewrap and poppler: a PDF's first page and page count,
made in the sandbox from descriptors; damaged and hostile PDFs give no preview and say why."""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from PIL import Image

from room.infra.pdfpreview import (
    MAX_RENDERS,
    PREVIEW_PX,
    PdfPreview,
    PdfPreviewer,
    PreviewFailure,
    png_size,
)
from room.infra.sandbox import Sandbox, SandboxInfo, probe
from room.infra.supervise import CommandLimits
from tests.support import pdfs

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(60), pytest.mark.slow]  # real processes

needs_tools = pytest.mark.skipif(
    shutil.which("bwrap") is None or shutil.which("pdftoppm") is None,
    reason="needs bubblewrap and poppler-utils; scripts/test installs both",
)


@pytest.fixture(scope="module")
def sandbox() -> Sandbox:
    return probe()


@pytest.fixture
def data(tmp_path: Path) -> Path:
    """A folder the sandbox is told to hide, as the server hides its data folder."""
    path = tmp_path / "data"
    path.mkdir()
    return path


def write(folder: Path, name: str, content: bytes) -> Path:
    path = folder / name
    path.write_bytes(content)
    return path


@needs_tools
async def test_first_page_and_page_count(sandbox: Sandbox, data: Path) -> None:
    previewer = PdfPreviewer(sandbox.configured(hidden=[data]))
    assert previewer.reason == ""
    # The file lives in a folder the sandbox cannot see: it comes in by descriptor only.
    found = await previewer.render(write(data, "report.pdf", pdfs.document(pages=3)))
    assert isinstance(found, PdfPreview), found
    assert found.pages == 3
    assert found.mime == "image/png"
    assert max(found.width, found.height) == PREVIEW_PX
    assert png_size(found.content) == (found.width, found.height)
    # A portrait A4 page (595 × 842 pt), drawn: its title bar is blue, the page below it white.
    assert found.height > found.width
    path = write(data, "page.png", found.content)
    with Image.open(path) as im:
        rgb = im.convert("RGB")
        bar = rgb.getpixel((found.width // 2, 10))
        assert isinstance(bar, tuple)
        assert bar[2] > 120 and bar[0] < 80, bar
        assert rgb.getpixel((found.width // 2, found.height - 10)) == (255, 255, 255)


@needs_tools
async def test_a_one_page_document(sandbox: Sandbox, data: Path) -> None:
    found = await PdfPreviewer(sandbox).render(write(data, "one.pdf", pdfs.document(pages=1)))
    assert isinstance(found, PdfPreview), found
    assert found.pages == 1


@needs_tools
async def test_a_giant_page_is_drawn_no_larger_than_the_bound(sandbox: Sandbox, data: Path) -> None:
    found = await PdfPreviewer(sandbox).render(write(data, "poster.pdf", pdfs.giant_page()))
    assert isinstance(found, PdfPreview), found
    assert (found.width, found.height) == (PREVIEW_PX, PREVIEW_PX)
    with Image.open(write(data, "poster.png", found.content)) as im:
        assert im.convert("RGB").getpixel((PREVIEW_PX // 2, PREVIEW_PX // 2)) == (51, 153, 51)


@needs_tools
async def test_malformed_pdf_gives_no_preview_and_a_reason(sandbox: Sandbox, data: Path) -> None:
    found = await PdfPreviewer(sandbox).render(write(data, "bad.pdf", pdfs.malformed()))
    assert found == PreviewFailure("unreadable", "pdftoppm exit 1")


@needs_tools
async def test_a_page_that_never_ends_is_killed_by_the_limit(sandbox: Sandbox, data: Path) -> None:
    # 10^12 rectangles from a few hundred bytes; the limits are the real ones, smaller.
    previewer = PdfPreviewer(sandbox, limits=CommandLimits(timeout_secs=4, cpu_secs=1))
    found = await previewer.render(write(data, "bomb.pdf", pdfs.nested_forms(depth=12)))
    assert isinstance(found, PreviewFailure), found
    assert found.reason == "limit"
    assert found.detail in {"SIGXCPU", "SIGKILL", "timeout"} or found.detail.startswith(
        "pdftoppm ended by signal"
    ), found.detail


@needs_tools
async def test_a_picture_past_the_file_cap_is_refused(sandbox: Sandbox, data: Path) -> None:
    # The render may write at most file_bytes: a first page's PNG is larger than 1 KB.
    previewer = PdfPreviewer(sandbox, limits=CommandLimits(file_bytes=1024))
    found = await previewer.render(write(data, "report.pdf", pdfs.document(pages=1)))
    assert isinstance(found, PreviewFailure), found
    assert found.reason == "limit"


async def test_without_poppler_or_a_sandbox_nothing_is_parsed(sandbox: Sandbox, data: Path) -> None:
    pdf = write(data, "report.pdf", pdfs.document(pages=1))
    no_poppler = PdfPreviewer(sandbox, tools=(None, None))
    assert await no_poppler.render(pdf) == PreviewFailure("no_poppler")
    assert "poppler-utils" in no_poppler.describe()
    unisolated = Sandbox(SandboxInfo(False, "no bubblewrap binary (bwrap) found", None, None, None))
    no_sandbox = PdfPreviewer(unisolated, tools=("/usr/bin/pdfinfo", "/usr/bin/pdftoppm"))
    assert await no_sandbox.render(pdf) == PreviewFailure("no_sandbox")
    assert "only in the sandbox (no bubblewrap binary (bwrap) found)" in no_sandbox.describe()
    no_runner = PdfPreviewer(None, tools=("/usr/bin/pdfinfo", "/usr/bin/pdftoppm"))
    assert await no_runner.render(pdf) == PreviewFailure("no_sandbox")


def test_png_size_reads_only_a_png_header() -> None:
    assert png_size(b"GIF89a" + b"\0" * 30) is None
    assert png_size(b"\x89PNG\r\n\x1a\n") is None
    header = b"\x89PNG\r\n\x1a\n\0\0\0\rIHDR\0\0\x02\xa7\0\0\x03\xc0"
    assert png_size(header) == (679, 960)


def test_doctor_says_whether_pdfs_get_a_preview(monkeypatch: pytest.MonkeyPatch) -> None:
    from room import doctor

    monkeypatch.setattr(doctor, "find_poppler", lambda: ("/usr/bin/pdfinfo", None))
    assert doctor.pdf_previews("on").startswith("off: pdfinfo/pdftoppm not found")
    assert "poppler-utils" in doctor.pdf_previews(None)
    monkeypatch.setattr(doctor, "find_poppler", lambda: ("/usr/bin/pdfinfo", "/usr/bin/pdftoppm"))
    assert doctor.pdf_previews("on").startswith("on: ")
    assert doctor.pdf_previews("no_sandbox").startswith("off: no sandbox")
    assert doctor.pdf_previews("no_poppler").startswith("poppler-utils found: on from the next")


@needs_tools
async def test_the_sandbox_gets_the_bytes_not_the_stored_file(
    sandbox: Sandbox, data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What a render that poppler's bugs let a PDF take over could try: write through the
    # descriptors it was given (reopened by /proc, where the sandbox's user owns what the server
    # owns: a descriptor of the stored file, even read-only, would let it rewrite the file).
    # They are pipes: the stored file is out of reach.
    def hostile(pdfinfo: str, pdftoppm: str, info_fd: int, page_fd: int) -> str:
        return (
            f"echo overwritten >/proc/self/fd/{info_fd}; echo more >>/proc/self/fd/{page_fd}\n"
            f"head -c 5 /proc/self/fd/{page_fd}; echo; echo render=1\n"
        )

    monkeypatch.setattr("room.infra.pdfpreview._script", hostile)
    content = pdfs.document(pages=1)
    path = write(data, "report.pdf", content)
    found = await PdfPreviewer(sandbox).render(path)
    assert found == PreviewFailure("unreadable", "pdftoppm exit 1")
    assert path.read_bytes() == content


@needs_tools
async def test_a_link_left_for_the_picture_is_not_followed(
    sandbox: Sandbox, data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = write(data, "secret.png", pdfs.document(pages=1))  # any file of the server's

    def planted(pdfinfo: str, pdftoppm: str, info_fd: int, page_fd: int) -> str:
        return f"ln -s {secret} page.png; echo pages=1; echo render=0\n"

    monkeypatch.setattr("room.infra.pdfpreview._script", planted)
    found = await PdfPreviewer(sandbox).render(write(data, "report.pdf", pdfs.document(pages=1)))
    assert found == PreviewFailure("bad_output", "no picture")


async def test_at_most_two_renders_run_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    running, most = 0, 0

    async def render(self: PdfPreviewer, path: Path) -> PreviewFailure:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await asyncio.sleep(0.01)
        running -= 1
        return PreviewFailure("unreadable")

    monkeypatch.setattr(PdfPreviewer, "_render", render)
    tools = ("/usr/bin/pdfinfo", "/usr/bin/pdftoppm")
    previewer = PdfPreviewer(
        Sandbox(SandboxInfo(True, "", "/usr/bin/bwrap", None, None)), tools=tools
    )
    found = await asyncio.gather(*(previewer.render(Path(f"/x/{i}.pdf")) for i in range(6)))
    assert found == [PreviewFailure("unreadable")] * 6
    assert most == MAX_RENDERS == 2


@needs_tools
async def test_renders_leave_no_descriptor_or_scratch_folder_behind(
    sandbox: Sandbox, data: Path
) -> None:
    def scratch_folders() -> set[str]:
        return {p.name for p in Path(tempfile.gettempdir()).glob("room-pdf-*")}

    previewer = PdfPreviewer(sandbox, limits=CommandLimits(timeout_secs=4, cpu_secs=1))
    inputs = [
        write(data, "ok.pdf", pdfs.document(pages=1)),
        write(data, "bad.pdf", pdfs.malformed()),
        write(data, "bomb.pdf", pdfs.nested_forms()),
        data / "missing.pdf",
    ]
    await previewer.render(inputs[0])  # the first render opens what stays open (loggers …)
    fds, folders = set(os.listdir("/proc/self/fd")), scratch_folders()
    found = [await previewer.render(path) for path in inputs]
    assert [type(f).__name__ for f in found] == [
        "PdfPreview", "PreviewFailure", "PreviewFailure", "PreviewFailure"
    ]  # fmt: skip
    assert found[3] == PreviewFailure(
        "failed", f"[Errno 2] No such file or directory: '{inputs[3]}'"
    )
    assert set(os.listdir("/proc/self/fd")) == fds
    assert scratch_folders() == folders
