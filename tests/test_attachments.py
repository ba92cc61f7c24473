"""Attachments through a real server (issue 17, item 1): uploads streamed to content-addressed
files, typed from their content, served as downloads unless they are safe images, attached to a
message only by their uploader, and hostile uploads — a declared 2 GB body, a streamed body past
the limit, content that contradicts its name, an SVG with a script, a decompression bomb —
refused or made harmless with the server's memory bounded."""

from __future__ import annotations

import io
import json
import socket
import sqlite3
import urllib.parse
import urllib.request
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from tests.support.server import ServerProcess, Session

LIMIT = 32 * 1024 * 1024
MB = 1024 * 1024


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    data = tmp_path_factory.mktemp("attach") / "data"
    proc = ServerProcess(data, env={"ROOM_ATTACHMENT_MAX_BYTES": str(LIMIT)}).start()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture(scope="module")
def owner(server: ServerProcess) -> Session:
    return server.login()


def upload(
    server: ServerProcess, who: Session, name: str, content: bytes, project_id: int = 1
) -> tuple[int, Any]:
    query = urllib.parse.urlencode({"name": name})
    req = urllib.request.Request(
        f"{server.origin}/api/projects/{project_id}/attachments?{query}",
        data=content,
        headers={**who.headers, "Content-Type": "application/octet-stream"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def fetch(server: ServerProcess, who: Session | None, url: str) -> tuple[int, Any, bytes]:
    headers = {"Cookie": f"room_session={who.cookie}"} if who else {}
    req = urllib.request.Request(f"{server.origin}{url}", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.headers, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers, exc.read()


def png(size: tuple[int, int] = (64, 48), colour: str = "red") -> bytes:
    out = io.BytesIO()
    Image.new("RGB", size, colour).save(out, "PNG")
    return out.getvalue()


def blob_files(server: ServerProcess) -> list[Path]:
    root = server.data / "attachments"
    return sorted(p for p in root.rglob("*") if p.is_file() and p.parent.name != "tmp")


def part_files(server: ServerProcess) -> list[Path]:
    return sorted((server.data / "attachments" / "tmp").glob("*.part"))


def peak_rss_kb(server: ServerProcess) -> int:
    assert server.proc is not None
    for line in Path(f"/proc/{server.proc.pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


def raw_post(server: ServerProcess, who: Session, head: dict[str, str]) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=20)
    lines = [
        "POST /api/projects/1/attachments?name=big.bin HTTP/1.1",
        f"Host: 127.0.0.1:{server.port}",
        f"Cookie: room_session={who.cookie}",
        f"X-CSRF-Token: {who.csrf}",
        *(f"{k}: {v}" for k, v in head.items()),
    ]
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
    return sock


def read_response(sock: socket.socket) -> tuple[int, dict[str, Any]]:
    raw = b""
    while b"\r\n\r\n" not in raw:
        chunk = sock.recv(65536)
        assert chunk, raw
        raw += chunk
    head, _, rest = raw.partition(b"\r\n\r\n")
    status = int(head.split()[1])
    length = next(
        int(line.split(b":")[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length")
    )
    while len(rest) < length:
        chunk = sock.recv(65536)
        if not chunk:
            break
        rest += chunk
    return status, json.loads(rest[:length])


# -- hostile uploads ---------------------------------------------------------------------------


def test_a_declared_2gb_upload_is_refused_before_its_body_is_read(
    server: ServerProcess, owner: Session
) -> None:
    sock = raw_post(server, owner, {"Content-Length": str(2 * 1024**3)})
    try:
        # Not one byte of the body is sent: the answer comes from the headers alone.
        status, body = read_response(sock)
    finally:
        sock.close()
    assert status == 413 and body["error"]["code"] == "too_large"
    assert body["error"]["details"]["limit"] == LIMIT
    assert part_files(server) == []


def test_a_streamed_upload_is_cut_at_the_limit_with_memory_bounded(
    server: ServerProcess, owner: Session
) -> None:
    before = blob_files(server)
    peak_before = peak_rss_kb(server)
    # Within the limit: streamed to disk, the server's peak memory barely moves.
    content = bytes(range(256)) * (30 * MB // 256)
    status, body = upload(server, owner, "data.bin", content)
    assert status == 201, body
    assert body["attachment"]["size"] == len(content)
    # Past the limit, with no declared length: chunked, cut as it passes the limit.
    sock = raw_post(server, owner, {"Transfer-Encoding": "chunked"})
    piece = b"\x01" * MB
    sent = 0
    try:
        while sent < 3 * LIMIT:
            try:
                sock.sendall(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
            except (BrokenPipeError, ConnectionResetError):
                break
            sent += len(piece)
        status, answer = read_response(sock)
    finally:
        sock.close()
    assert status == 413 and answer["error"]["code"] == "too_large"
    grown_mb = (peak_rss_kb(server) - peak_before) / 1024
    # Holding either body in memory would have grown the peak by 30 MB or more.
    assert grown_mb < 20, f"server peak RSS grew by {grown_mb:.1f} MB"
    assert part_files(server) == []
    assert len(blob_files(server)) == len(before) + 1  # only the accepted upload is stored


def test_content_that_contradicts_its_name_is_typed_by_its_content(
    server: ServerProcess, owner: Session
) -> None:
    status, body = upload(server, owner, "notes.txt", png(colour="blue"))
    assert status == 201
    item = body["attachment"]
    assert (item["name"], item["mime"], item["kind"]) == ("notes.txt", "image/png", "image")
    code, headers, _ = fetch(server, owner, item["url"])
    assert code == 200 and headers["Content-Type"] == "image/png"

    page = b"<!doctype html><html><body><script>alert(document.cookie)</script></body></html>"
    status, body = upload(server, owner, "photo.png", page)
    item = body["attachment"]
    assert item["mime"] == "text/html" and item["kind"] == "file" and item["thumb_url"] is None
    code, headers, served = fetch(server, owner, item["url"])
    assert code == 200 and served == page
    # Never as HTML, never shown: a download in a sandbox, whatever the name says.
    assert headers["Content-Type"] == "application/octet-stream"
    assert headers["Content-Disposition"].startswith("attachment;")
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert headers["Content-Security-Policy"] == "default-src 'none'; sandbox"


def test_an_svg_with_a_script_is_only_ever_a_download(
    server: ServerProcess, owner: Session
) -> None:
    svg = (
        b'<?xml version="1.0"?><svg xmlns="http://www.w3.org/2000/svg" width="10" height="10">'
        b"<script>alert(1)</script><rect width='10' height='10'/></svg>"
    )
    status, body = upload(server, owner, "logo.svg", svg)
    assert status == 201
    item = body["attachment"]
    assert item["mime"] == "image/svg+xml"
    assert item["kind"] == "file" and item["inline"] is False and item["thumb_url"] is None
    code, headers, _ = fetch(server, owner, item["url"])
    assert code == 200
    assert headers["Content-Type"] == "application/octet-stream"
    assert headers["Content-Disposition"] == (
        "attachment; filename=\"logo.svg\"; filename*=UTF-8''logo.svg"
    )
    assert headers["Content-Security-Policy"] == "default-src 'none'; sandbox"


def _bomb_png(side: int) -> bytes:
    """A real decompression bomb: a grey PNG of side×side zero pixels, compressed to ~KBs."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return len(data).to_bytes(4, "big") + body + zlib.crc32(body).to_bytes(4, "big")

    ihdr = side.to_bytes(4, "big") * 2 + bytes([8, 0, 0, 0, 0])
    squeeze = zlib.compressobj(9)
    row = b"\x00" * (side + 1)
    idat = b"".join(squeeze.compress(row) for _ in range(side)) + squeeze.flush()
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


def test_a_decompression_bomb_is_refused_with_a_clear_error(
    server: ServerProcess, owner: Session
) -> None:
    before = blob_files(server)
    bomb = _bomb_png(12_000)  # 144 megapixels in ~140 KB
    assert len(bomb) < 1024 * 1024
    status, body = upload(server, owner, "cute-cat.png", bomb)
    assert status == 400, body
    assert body["error"]["code"] == "image_too_large"
    assert "decompression bomb" in body["error"]["message"]
    # Past the limit but under Pillow's own (twice it): refused by the server's check, named.
    status, body = upload(server, owner, "big.png", _bomb_png(8_000))  # 64 megapixels
    assert status == 400 and body["error"]["code"] == "image_too_large"
    assert "8000×8000" in body["error"]["message"]
    assert blob_files(server) == before and part_files(server) == []


# -- the normal path -----------------------------------------------------------------------------


def _jpeg_rotated() -> bytes:
    """A 40×20 JPEG whose EXIF says "rotate 90° clockwise to show" and carries a GPS tag."""
    im = Image.new("RGB", (40, 20), "green")
    exif = Image.Exif()
    exif[0x0112] = 6  # orientation
    exif[0x010F] = "SecretCam"  # make
    out = io.BytesIO()
    im.save(out, "JPEG", exif=exif)
    return out.getvalue()


def test_an_image_gets_an_upright_thumbnail_without_metadata(
    server: ServerProcess, owner: Session
) -> None:
    status, body = upload(server, owner, "IMG_0001.JPG", _jpeg_rotated())
    assert status == 201
    item = body["attachment"]
    assert item["kind"] == "image" and item["inline"] is True
    assert (item["width"], item["height"]) == (20, 40)  # as shown, upright
    code, headers, thumb = fetch(server, owner, item["thumb_url"])
    assert code == 200 and headers["Content-Type"] == "image/jpeg"
    with Image.open(io.BytesIO(thumb)) as im:
        assert im.size == (20, 40)
        assert not im.getexif()
    code, headers, _ = fetch(server, owner, item["url"])
    assert headers["Content-Disposition"].startswith("inline;")


def test_a_message_carries_its_senders_uploads_to_other_members(
    server: ServerProcess, owner: Session
) -> None:
    status, project = server.request(
        "POST", "/api/projects", {"name": "附件项目"}, headers=owner.headers
    )
    assert status == 201
    pid = project["project"]["id"]
    guest = server.invite(owner, pid, "guest", "访客")
    status, body = upload(
        server, owner, "报告.pdf", b"%PDF-1.4\n%\xe2\xe3\n1 0 obj\n<<>>\nendobj\n", pid
    )
    assert status == 201
    pdf = body["attachment"]
    assert pdf["mime"] == "application/pdf"
    # Before it is sent only its uploader reads it.
    assert fetch(server, guest, pdf["url"])[0] == 404
    # Someone else's upload cannot be attached.
    status, refused = server.request(
        "POST", f"/api/projects/{pid}/messages", {"body": "mine now", "attachments": [pdf["id"]]},
        headers=guest.headers,
    )  # fmt: skip
    assert status == 400 and refused["error"]["code"] == "bad_attachment"
    # Text may be left out when a file is attached.
    status, sent = server.request(
        "POST", f"/api/projects/{pid}/messages", {"body": "", "attachments": [pdf["id"]]},
        headers=owner.headers,
    )  # fmt: skip
    assert status == 201, sent
    carried = sent["message"]["meta"]["attachments"]
    assert [a["id"] for a in carried] == [pdf["id"]] and carried[0]["name"] == "报告.pdf"
    code, headers, content = fetch(server, guest, pdf["url"])
    assert code == 200 and content.startswith(b"%PDF")
    assert headers["Content-Type"] == "application/pdf"
    assert "filename*=UTF-8''%E6%8A%A5%E5%91%8A.pdf" in headers["Content-Disposition"]
    # A sent upload is not sent twice; a stranger reads nothing.
    status, again = server.request(
        "POST", f"/api/projects/{pid}/messages", {"body": "again", "attachments": [pdf["id"]]},
        headers=owner.headers,
    )  # fmt: skip
    assert status == 400 and again["error"]["code"] == "attachment_sent"
    assert fetch(server, None, pdf["url"])[0] == 401
    history = server.get_json(f"/api/projects/{pid}/messages", cookie=guest.cookie)
    [stored] = [m for m in history["messages"] if m["id"] == sent["message_id"]]
    assert stored["meta"]["attachments"][0]["id"] == pdf["id"]


def test_purge_keeps_content_another_project_still_uses(
    server: ServerProcess, owner: Session
) -> None:
    shared, own = png(colour="purple"), png(colour="orange")
    ids = []
    for name in ("甲", "乙"):
        status, project = server.request(
            "POST", "/api/projects", {"name": f"清除{name}"}, headers=owner.headers
        )
        ids.append(project["project"]["id"])
    first, second = ids
    before = len(blob_files(server))
    assert upload(server, owner, "a.png", shared, first)[0] == 201
    assert upload(server, owner, "b.png", own, first)[0] == 201
    assert upload(server, owner, "c.png", shared, second)[0] == 201
    # Content-addressed: the shared picture and its thumbnail are stored once.
    assert len(blob_files(server)) == before + 4
    status, _ = server.request(
        "POST", f"/api/projects/{first}/lifecycle", {"op": "trash"}, headers=owner.headers
    )
    assert status == 200
    status, result = server.request(
        "POST", f"/api/projects/{first}/purge", {"confirm_name": "清除甲", "confirmed": True},
        headers=owner.headers,
    )  # fmt: skip
    assert status == 200 and result["state"] == "purged", result
    assert result["steps"]["attachments"] == {"attachments": 2, "attachment_files": 2}
    assert len(blob_files(server)) == before + 2  # the shared one stays for the other project
    status, body = upload(server, owner, "c2.png", shared, second)
    assert status == 201
    assert fetch(server, owner, body["attachment"]["url"])[2] == shared


def test_the_project_quota_counts_each_content_once(tmp_path: Path) -> None:
    small = ServerProcess(tmp_path / "data", env={"ROOM_ATTACHMENT_PROJECT_BYTES": "5000"}).start()
    try:
        who = small.login()
        first = b"a" * 2000
        assert upload(small, who, "a.txt", first)[0] == 201
        # The same content again is stored once and counted once: 2000 bytes used, not 4000 …
        assert upload(small, who, "a-again.txt", first)[0] == 201
        # … so another 2000 still fit, and only the next one does not.
        assert upload(small, who, "b.txt", b"b" * 2000)[0] == 201
        status, body = upload(small, who, "c.txt", b"c" * 2000)
        assert status == 413 and body["error"]["code"] == "project_quota"
        assert body["error"]["details"] == {"limit": 5000, "used": 4000}
        assert part_files(small) == []
    finally:
        small.stop()


def test_uploads_never_sent_are_forgotten_at_a_restart_after_a_day(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data").start()
    try:
        who = server.login()
        status, kept = upload(server, who, "kept.png", png(colour="white"))
        status, left = upload(server, who, "left.png", png(colour="black"))
        status, draft = upload(server, who, "draft.txt", b"never sent")
        status, _ = server.request(
            "POST", "/api/projects/1/messages", {"attachments": [kept["attachment"]["id"]]},
            headers=who.headers,
        )  # fmt: skip
        assert status == 201
        server.stop()
        with sqlite3.connect(server.data / "room.sqlite") as db:  # two days pass
            db.execute("UPDATE attachments SET created_at = created_at - 2 * 86400")
        files_before = len(blob_files(server))
        server.start()
        assert fetch(server, who, kept["attachment"]["url"])[0] == 200
        assert fetch(server, who, left["attachment"]["url"])[0] == 404
        assert fetch(server, who, draft["attachment"]["url"])[0] == 404
        assert len(blob_files(server)) == files_before - 3  # left.png, its thumbnail, draft.txt
    finally:
        server.stop()
