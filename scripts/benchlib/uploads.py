"""Upload of a 100 MB attachment through the real server vs ``cp`` of the same file, same run.

The file (random bytes, so nothing compresses or deduplicates; its first bytes change per run,
so every upload is new content) lives in ``workdir``, on the same file system as the server's
data folder and as ``cp``'s copy. The client sends it with ``sendfile`` on a raw socket (a
``POST /api/projects/1/attachments`` with its ``Content-Length``), so the client costs next to
nothing (its CPU is reported); the server receives it, hashes it (SHA-256), writes it, ``fsync``s
it and renames it into place before it answers. Each upload is deleted again (its unsent upload
removed through the API) as each ``cp`` copy is, so both start from the same disk and cache.

References, all in the same run: ``cp`` (issue 17's target, ≥ 0.5×; it does not ``fsync``, so
its copy may still be only in the page cache), ``cp`` then ``fsync`` (the honest reference for a
server that acknowledges only durable files; the floor this bench holds the upload to,
≥ 0.5×), and SHA-256 of the file in this process (what the hash alone costs one core).
Every figure is taken twice, each time with a fresh server: pinned to the server core as in the
other workloads (then it cannot be faster than SHA-256 alone), and free to use every core as it
is deployed (its writer and hasher threads work through the buffers received before while the event loop receives the
next; the client, at ~25 ms of CPU per upload, leaves the other core nearly idle). The server's CPU per upload (utime + stime
of all its threads) is reported too: it moves far less with the machine's load than the wall
clock does. While the upload runs a thread samples the server's ``VmRSS`` every 5 ms; the growth
is the largest sample minus the one taken just before (target < 50 MB). One warm-up upload and
copy first, then ``RUNS`` rounds, interleaved; the rows report medians.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import statistics
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from benchlib.serverproc import RoomServer, cpu_seconds, http_request
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


def upload(server: RoomServer, csrf: str, path: Path) -> tuple[float, float, int]:
    """Seconds from the first byte sent to the server's answer (201), this client's CPU
    seconds for it, and the attachment's id."""
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
        c0, t0 = time.process_time(), time.perf_counter()
        sock.sendall(head)
        sock.sendfile(f)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    status = int(answer.split(b" ", 2)[1])
    if status != 201:
        raise RuntimeError(f"upload answered {status}: {answer[-300:]!r}")
    attachment_id: int = json.loads(answer.partition(b"\r\n\r\n")[2])["attachment"]["id"]
    return elapsed, cpu, attachment_id


def remove(server: RoomServer, csrf: str, attachment_id: int) -> None:
    headers = {**server.headers, "X-CSRF-Token": csrf, "Origin": f"http://127.0.0.1:{server.port}"}
    status, _, raw = http_request(
        server.port, "DELETE", f"/api/projects/1/attachments/{attachment_id}", headers=headers
    )
    if status != 204:
        raise RuntimeError(f"removing the upload answered {status}: {raw[:300]!r}")


def sha256_secs(path: Path) -> float:
    """Seconds to hash the file (read from the page cache) in this process, 4 MB at a time."""
    hasher, buf = hashlib.sha256(), bytearray(4 * MB)
    view = memoryview(buf)
    with path.open("rb", buffering=0) as f:
        t0 = time.perf_counter()
        while n := f.readinto(buf):
            hasher.update(view[:n])
        return time.perf_counter() - t0


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


@dataclass
class Figures:
    ours: list[float] = field(default_factory=list)
    cps: list[float] = field(default_factory=list)
    synced: list[float] = field(default_factory=list)
    hashes: list[float] = field(default_factory=list)
    growth: list[float] = field(default_factory=list)
    server_cpu: list[float] = field(default_factory=list)
    client_cpu: list[float] = field(default_factory=list)


def measure(base: Path, src: Path, dst: Path, *, pinned: bool, rounds: int) -> Figures:
    """``rounds`` uploads through a fresh server (pinned to its core, or free to use every
    core), each interleaved with the ``cp``, ``cp`` + ``fsync`` and SHA-256 references."""
    data = base / ("data-pinned" if pinned else "data-free")
    server = RoomServer(
        data,
        env={"ROOM_ATTACHMENT_MAX_BYTES": str(2 * SIZE_BYTES), "ROOM_ATTACHMENT_BURST": "1000"},
        pinned=pinned,
    ).start()
    fig = Figures()
    try:
        csrf = csrf_of(server)
        vary(src, 0)
        # Warm-up: the page cache, the server's first upload.
        remove(server, csrf, upload(server, csrf, src)[2])
        copy(src, dst, sync=False)
        for i in range(rounds):
            vary(src, i + 1)
            fig.cps.append(copy(src, dst, sync=False))
            fig.synced.append(copy(src, dst, sync=True))
            fig.hashes.append(sha256_secs(src))
            before = rss_kb(server.pid)
            sampler = RssSampler(server.pid)
            cpu0 = cpu_seconds(server.pid)
            sampler.start()
            try:
                elapsed, cpu, attachment_id = upload(server, csrf, src)
            finally:
                sampler.done.set()
                sampler.join()
            cpu1 = cpu_seconds(server.pid)
            remove(server, csrf, attachment_id)
            fig.ours.append(elapsed)
            fig.client_cpu.append(cpu)
            fig.server_cpu.append(sum(cpu1.values()) - sum(cpu0.values()))
            fig.growth.append((sampler.peak - before) / 1024)
    finally:
        server.stop()
        shutil.rmtree(data, ignore_errors=True)
    return fig


def run(workdir: Path, *, quick: bool) -> list[Row]:
    base = workdir / "uploads"
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    src, dst = base / "source.bin", base / "copy.bin"
    make_file(src)
    rounds = 1 if quick else RUNS
    try:
        placements = {
            "server on one core": measure(base, src, dst, pinned=True, rounds=rounds),
            "server on every core": measure(base, src, dst, pinned=False, rounds=rounds),
        }
    finally:
        shutil.rmtree(base, ignore_errors=True)
    mb = SIZE_BYTES / MB
    rows: list[Row] = []
    for where, fig in placements.items():
        up, cp, cp_sync, hashed = (
            mb / statistics.median(x) for x in (fig.ours, fig.cps, fig.synced, fig.hashes)
        )
        case = f"{int(mb)} MB file, {where}"
        rows += [
            Row(WORKLOAD, case, "upload MB/s (ref: cp, page cache)", up, cp, "cp: {ref:.0f} MB/s"),
            Row(WORKLOAD, case, "upload MB/s (ref: cp + fsync)", up, cp_sync,
                "cp+fsync: {ref:.0f} MB/s"),
            Row(WORKLOAD, case, "upload MB/s (ref: SHA-256 alone)", up, hashed,
                "sha256: {ref:.0f} MB/s"),
            Row(WORKLOAD, case, "upload ÷ cp (issue 17's target)", up / cp, None, "issue 17",
                "≥ 0.5"),
            Row(WORKLOAD, case, "upload ÷ (cp + fsync) (durable floor)", up / cp_sync, None,
                "both fsync", "≥ 0.5"),
            Row(WORKLOAD, case, "server CPU ms per upload", statistics.median(fig.server_cpu) * 1000,
                statistics.median(fig.client_cpu) * 1000, "client CPU: {ref:.0f} ms"),
            Row(WORKLOAD, case, "server RSS growth MB", statistics.median(fig.growth), None,
                "issue 17", "≤ 50"),
        ]  # fmt: skip
    return rows
