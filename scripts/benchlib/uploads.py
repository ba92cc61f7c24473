"""Upload of a 100 MB attachment through the real server vs ``cp`` of the same file, same run.

The file (random bytes, so nothing compresses or deduplicates; its first bytes change per run,
so every upload is new content) lives in ``workdir``, on the same file system as the server's
data folder and as ``cp``'s copy. The client sends it with ``sendfile`` on a raw socket (a
``POST /api/projects/1/attachments`` with its ``Content-Length``), so the client costs next to
nothing; the server streams it to disk while hashing, ``fsync``s it and renames it into place.
``cp`` does not ``fsync``: a second reference row, ``cp`` then ``fsync``, shows what durability
costs on this disk. While the upload runs a thread samples the server's ``VmRSS`` every 5 ms;
the growth is the largest sample minus the one taken just before (issue 17's targets: throughput
≥ 0.5× ``cp``, RSS growth < 50 MB). One warm-up upload and copy first, then ``RUNS`` pairs,
interleaved; the rows report medians.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import statistics
import subprocess
import threading
import time
from pathlib import Path

from benchlib.serverproc import RoomServer, http_request
from benchlib.stats import Row

WORKLOAD = "attachment upload"
SIZE_BYTES = 100 * 1024 * 1024
RUNS = 3
SAMPLE_SECS = 0.005
MB = 1024 * 1024


def make_file(path: Path) -> None:
    with path.open("wb") as f:
        for _ in range(SIZE_BYTES // MB):
            f.write(os.urandom(MB))


def vary(path: Path, run: int) -> None:
    with path.open("r+b") as f:
        f.write(f"run {run} {time.time_ns()}".encode().ljust(32, b"."))


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


class RssSampler(threading.Thread):
    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.peak = rss_kb(pid)
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.is_set():
            self.peak = max(self.peak, rss_kb(self.pid))
            time.sleep(SAMPLE_SECS)


def csrf_of(server: RoomServer) -> str:
    status, _, raw = http_request(server.port, "GET", "/api/me", headers=server.headers)
    assert status == 200, raw
    token: str = json.loads(raw)["csrf_token"]
    return token


def upload(server: RoomServer, csrf: str, path: Path) -> float:
    """Seconds from the first byte sent to the server's answer (201)."""
    size = path.stat().st_size
    head = (
        "POST /api/projects/1/attachments?name=bench.bin HTTP/1.1\r\n"
        f"Host: 127.0.0.1:{server.port}\r\n"
        f"Cookie: room_session={server.cookie}\r\nX-CSRF-Token: {csrf}\r\n"
        "Content-Type: application/octet-stream\r\n"
        f"Content-Length: {size}\r\nConnection: close\r\n\r\n"
    ).encode()
    with (
        socket.create_connection(("127.0.0.1", server.port), timeout=120) as sock,
        path.open("rb") as f,
    ):
        t0 = time.perf_counter()
        sock.sendall(head)
        sock.sendfile(f)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
        elapsed = time.perf_counter() - t0
    status = int(answer.split(b" ", 2)[1])
    if status != 201:
        raise RuntimeError(f"upload answered {status}: {answer[-300:]!r}")
    return elapsed


def copy(src: Path, dst: Path, sync: bool) -> float:
    dst.unlink(missing_ok=True)
    t0 = time.perf_counter()
    subprocess.run(["cp", str(src), str(dst)], check=True)
    if sync:
        fd = os.open(dst, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    elapsed = time.perf_counter() - t0
    dst.unlink()
    return elapsed


def run(workdir: Path, *, quick: bool) -> list[Row]:
    base = workdir / "uploads"
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    src, dst = base / "source.bin", base / "copy.bin"
    make_file(src)
    server = RoomServer(
        base / "data", env={"ROOM_ATTACHMENT_MAX_BYTES": str(2 * SIZE_BYTES)}
    ).start()
    ours: list[float] = []
    cps: list[float] = []
    synced: list[float] = []
    growth: list[float] = []
    try:
        csrf = csrf_of(server)
        vary(src, 0)
        upload(server, csrf, src)  # warm-up: page cache, the server's first upload
        copy(src, dst, sync=False)
        for i in range(1 if quick else RUNS):
            vary(src, i + 1)
            cps.append(copy(src, dst, sync=False))
            synced.append(copy(src, dst, sync=True))
            before = rss_kb(server.pid)
            sampler = RssSampler(server.pid)
            sampler.start()
            try:
                ours.append(upload(server, csrf, src))
            finally:
                sampler.done.set()
                sampler.join()
            growth.append((sampler.peak - before) / 1024)
    finally:
        server.stop()
        shutil.rmtree(base, ignore_errors=True)
    mb = SIZE_BYTES / MB
    up, cp, cp_sync = (mb / statistics.median(x) for x in (ours, cps, synced))
    case = f"{int(mb)} MB file"
    return [
        Row(WORKLOAD, case, "upload MB/s", up, cp, "cp: {ref:.0f} MB/s"),
        Row(
            WORKLOAD, case, "upload MB/s (ref: cp + fsync)", up, cp_sync, "cp+fsync: {ref:.0f} MB/s"
        ),
        Row(WORKLOAD, case, "upload ÷ cp (throughput)", up / cp, None, "issue 17", "≥ 0.5"),
        Row(
            WORKLOAD,
            case,
            "server RSS growth MB",
            statistics.median(growth),
            None,
            "issue 17",
            "≤ 50",
        ),
    ]
