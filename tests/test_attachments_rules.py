"""The pure rules of attachments (room.rules.attachments) and content typing
(room.infra.blobs.detect_bytes): names that cannot reach outside their folder or reorder text, the
served type and disposition, and a type that comes from the content, the name only choosing among
what the content allows."""

from __future__ import annotations

import io

import pytest
from PIL import Image

from room.infra import blobs
from room.rules.attachments import (
    MAX_NAME_CHARS,
    agent_lines,
    clean_name,
    disposition,
    served_type,
    url_of,
    views_inline,
    with_attachments,
)


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("../../etc/passwd", "passwd"),
        ("C:\\Users\\me\\报告.pdf", "报告.pdf"),
        ("evil\u202egpj.exe", "evilgpj.exe"),  # a right-to-left override cannot hide .exe
        ("line\nbreak.txt", "linebreak.txt"),
        ("...", "file"),
        ("", "file"),
        (None, "file"),
        ("café.png", "café.png"),
    ],
)
def test_names_keep_only_their_last_part_and_visible_characters(
    raw: str | None, clean: str
) -> None:
    assert clean_name(raw) == clean


def test_a_long_name_keeps_its_extension() -> None:
    name = clean_name("长" * 500 + ".tar.gz")
    assert len(name) == MAX_NAME_CHARS and name.endswith(".gz")


def test_only_safe_raster_images_are_served_as_themselves() -> None:
    assert served_type("image/png") == "image/png"
    assert served_type("application/pdf") == "application/pdf"
    assert served_type("text/plain") == "text/plain; charset=utf-8"
    for dangerous in ("image/svg+xml", "text/html", "application/xml", "text/javascript"):
        assert served_type(dangerous) == "application/octet-stream"


def test_disposition_carries_an_ascii_fallback_and_the_utf8_name() -> None:
    assert disposition('季度"报告".pdf', inline=False) == (
        'attachment; filename="______.pdf"; '
        "filename*=UTF-8''%E5%AD%A3%E5%BA%A6%22%E6%8A%A5%E5%91%8A%22.pdf"
    )
    assert disposition("a.png", inline=True).startswith("inline;")
    assert url_of(7, "a b/c.png", thumb=True) == "/attachments/7/thumb/a%20b%2Fc.png"


def test_an_agent_reads_each_file_with_its_path() -> None:
    files = [
        {"id": 3, "name": "表.csv", "mime": "text/plain", "size": 2048, "url": "/attachments/3/x"}
    ]
    assert agent_lines(files, {3: ".room/attachments/3-表.csv"}) == (
        "[附件 #3] 表.csv (text/plain, 2.0 KB)：.room/attachments/3-表.csv"
    )
    assert with_attachments("", files, {}).endswith("：/attachments/3/x")
    assert with_attachments("看这个", [], {}) == "看这个"


def _png() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (2, 2)).save(out, "PNG")
    return out.getvalue()


def test_the_content_decides_the_type_not_the_name() -> None:
    assert blobs.detect_bytes(_png(), "notes.txt") == "image/png"
    assert blobs.detect_bytes(b"%PDF-1.7\n", "cat.jpg") == "application/pdf"
    assert blobs.detect_bytes(b"<svg xmlns='http://www.w3.org/2000/svg'/>", "a.png") == (
        "image/svg+xml"
    )
    assert blobs.detect_bytes("纯文本".encode(), "x.bin") == "text/plain"
    assert blobs.detect_bytes(b"\x00\x01\x02binary", "x.txt") == "application/octet-stream"
    # A multi-byte character cut at the end of the head read is still text.
    assert blobs.detect_bytes("文".encode()[:2], "x", whole=False) == "text/plain"


def test_the_name_only_chooses_among_what_the_content_allows() -> None:
    zipped = b"PK\x03\x04" + b"\x00" * 40
    assert blobs.detect_bytes(zipped, "archive.zip") == "application/zip"
    assert blobs.detect_bytes(zipped, "paper.docx").endswith("wordprocessingml.document")
    # A name the content does not allow changes nothing.
    assert blobs.detect_bytes(zipped, "photo.png") != "image/png"


def test_only_a_pdf_by_type_and_by_its_bytes_opens_in_the_viewer() -> None:
    assert views_inline("application/pdf", b"%PDF-")
    assert not views_inline("application/pdf", b"<html")  # typed so, but the bytes say otherwise
    assert not views_inline("application/pdf", b"")
    assert not views_inline("text/html", b"%PDF-")
    assert not views_inline("image/svg+xml", b"%PDF-")
