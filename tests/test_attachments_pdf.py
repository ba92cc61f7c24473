"""A PDF's preview through a real server (issue 30, item 9): the upload answers the picture of
its first page and its page count, drawn in the sandbox; the picture is served like an image's
thumbnail (inline PNG, nosniff, the sandboxing CSP, private cache) to exactly the people who may
read the PDF; the PDF itself stays a download; a damaged PDF is kept as a plain file."""

from __future__ import annotations

import io
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from PIL import Image

from tests.support import pdfs
from tests.support.server import ServerProcess, Session
from tests.test_attachments import blob_files, fetch, upload

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(
        shutil.which("bwrap") is None or shutil.which("pdftoppm") is None,
        reason="needs bubblewrap and poppler-utils; scripts/test installs both",
    ),
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = ServerProcess(tmp_path_factory.mktemp("pdf") / "data").start()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def owner(server: ServerProcess) -> Session:
    return server.login()


def new_project(server: ServerProcess, owner: Session, name: str) -> int:
    status, project = server.request("POST", "/api/projects", {"name": name}, headers=owner.headers)
    assert status == 201, project
    return int(project["project"]["id"])


def test_the_preview_is_served_like_a_thumbnail_to_the_pdfs_readers_only(
    server: ServerProcess, owner: Session
) -> None:
    pid = new_project(server, owner, "PDF 预览")
    guest = server.invite(owner, pid, "guest", "访客")
    stranger = server.invite(owner, new_project(server, owner, "别的项目"), "stranger", "外人")
    status, body = upload(server, owner, "季度报告.pdf", pdfs.document(pages=3), pid)
    assert status == 201, body
    pdf = body["attachment"]
    assert pdf["mime"] == "application/pdf" and pdf["kind"] == "file"
    assert pdf["inline"] is False  # the PDF itself is never shown by the browser
    assert pdf["pages"] == 3
    assert (
        pdf["thumb_url"]
        == f"/attachments/{pdf['id']}/thumb/%E5%AD%A3%E5%BA%A6%E6%8A%A5%E5%91%8A.pdf"
    )
    assert (pdf["width"], pdf["height"]) == (679, 960)  # A4's shape, 960 px high

    # Before it is sent only its uploader sees the preview.
    code, headers, picture = fetch(server, owner, pdf["thumb_url"])
    assert code == 200
    assert headers["Content-Type"] == "image/png"
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert headers["Content-Security-Policy"] == "default-src 'none'; sandbox"
    assert headers["Cache-Control"] == "private, max-age=86400"
    assert headers["Cross-Origin-Resource-Policy"] == "same-origin"
    disposition = headers["Content-Disposition"]
    assert disposition.startswith("inline;") and disposition.endswith(".pdf.png"), disposition
    with Image.open(io.BytesIO(picture)) as im:
        assert im.format == "PNG" and im.size == (679, 960)
    assert fetch(server, guest, pdf["thumb_url"])[0] == 404
    assert fetch(server, None, pdf["thumb_url"])[0] == 401

    status, sent = server.request(
        "POST", f"/api/projects/{pid}/messages", {"body": "报告", "attachments": [pdf["id"]]},
        headers=owner.headers,
    )  # fmt: skip
    assert status == 201, sent
    [carried] = sent["message"]["meta"]["attachments"]
    assert carried["thumb_url"] == pdf["thumb_url"] and carried["pages"] == 3
    # Sent: the project's members see it; a member of another project is told what the PDF
    # itself would tell them.
    assert fetch(server, guest, pdf["thumb_url"])[2] == picture
    stranger_code = fetch(server, stranger, pdf["thumb_url"])[0]
    assert stranger_code in (403, 404)
    assert fetch(server, stranger, pdf["url"])[0] == stranger_code
    # The PDF itself is still a download under the same policy.
    code, headers, content = fetch(server, guest, pdf["url"])
    assert code == 200 and content == pdfs.document(pages=3)
    assert headers["Content-Type"] == "application/pdf"
    assert headers["Content-Disposition"].startswith("attachment;")
    assert headers["Content-Security-Policy"] == "default-src 'none'; sandbox"


def test_a_pdf_opens_inline_only_in_a_sandboxed_unframeable_document(
    server: ServerProcess, owner: Session
) -> None:
    pid = new_project(server, owner, "在新标签页打开")
    guest = server.invite(owner, pid, "viewer", "读者")
    content = pdfs.document(pages=1, title="Invoice")
    status, body = upload(server, owner, "invoice.pdf", content, pid)
    assert status == 201, body
    pdf = body["attachment"]
    assert pdf["view_url"] == f"/attachments/{pdf['id']}/view/invoice.pdf"
    code, headers, served = fetch(server, owner, pdf["view_url"])
    assert code == 200 and served == content
    assert headers["Content-Type"] == "application/pdf"
    assert headers["Content-Disposition"].startswith("inline;")
    assert headers["Content-Security-Policy"] == (
        "default-src 'none'; frame-ancestors 'none'; sandbox"
    )
    assert headers["X-Frame-Options"] == "DENY"
    assert headers["Referrer-Policy"] == "no-referrer"
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert fetch(server, guest, pdf["view_url"])[0] == 404  # not sent yet: the uploader's alone
    assert fetch(server, None, pdf["view_url"])[0] == 401

    # Anything not typed a PDF from its content is the ordinary download there, whatever its
    # name: an HTML page named .pdf is served as bytes to save, never as a document.
    page = b"<html><body><script>alert(document.cookie)</script>%PDF-1.4</body></html>"
    status, body = upload(server, owner, "trap.pdf", page, pid)
    assert status == 201, body
    trap = body["attachment"]
    assert trap["mime"] == "text/html" and trap["view_url"] is None
    code, headers, served = fetch(server, owner, f"/attachments/{trap['id']}/view/trap.pdf")
    assert code == 200 and served == page
    assert headers["Content-Type"] == "application/octet-stream"
    assert headers["Content-Disposition"].startswith("attachment;")
    assert headers["Content-Security-Policy"] == "default-src 'none'; sandbox"


def test_the_same_pdf_again_is_drawn_once(server: ServerProcess, owner: Session) -> None:
    pid = new_project(server, owner, "再传一次")
    content = pdfs.document(pages=2, title="Minutes")
    status, first = upload(server, owner, "minutes.pdf", content, pid)
    assert status == 201 and first["attachment"]["pages"] == 2
    files = blob_files(server)
    status, second = upload(server, owner, "minutes-copy.pdf", content, pid)
    assert status == 201 and second["attachment"]["pages"] == 2
    assert blob_files(server) == files  # neither the PDF nor its picture stored twice
    assert (
        fetch(server, owner, first["attachment"]["thumb_url"])[2]
        == fetch(server, owner, second["attachment"]["thumb_url"])[2]
    )


def test_a_damaged_pdf_is_kept_as_a_plain_file(server: ServerProcess, owner: Session) -> None:
    pid = new_project(server, owner, "坏文件")
    status, body = upload(server, owner, "broken.pdf", pdfs.malformed(), pid)
    assert status == 201, body
    item = body["attachment"]
    assert item["mime"] == "application/pdf"
    assert item["thumb_url"] is None and item["pages"] is None
    code, _, error = fetch(server, owner, f"/attachments/{item['id']}/thumb/broken.pdf")
    assert code == 404 and b"no_thumbnail" in error


def test_the_boot_report_says_previews_are_on(server: ServerProcess) -> None:
    report = json.loads(Path(server.data / "boot-report.json").read_text())
    assert report["capabilities"]["pdf_previews"] == "on"
