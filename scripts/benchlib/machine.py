"""The machine's own limits and noise, measured in the same run so the other rows can be read.

* Loopback ping-pong between the two pinned cores (1-byte TCP round trip), back to back and with
  20 ms idle gaps: on a virtual machine an idle core's wake-up can cost milliseconds, which is a
  floor under every latency tail measured here.
* ``fsync`` of a 4 KB append in the work folder: the floor under every durable commit.
* Loopback send cost: one process on the server core writing a 1 KB frame to each of 1,000
  sockets read by the generator core — the kernel's share of any fan-out.
* :class:`Background`: CPU used by *other* processes while a workload ran (from ``/proc/stat``
  minus this process and its children), because the bench shares the machine.
"""

from __future__ import annotations

import os
import select
import socket
import statistics
import time
from pathlib import Path

from benchlib.cores import GENERATOR_CPU, SERVER_CPU
from benchlib.stats import Row, quantiles

WORKLOAD = "machine"


def _busy_jiffies() -> int:
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return sum(fields[:8]) - idle


def _own_seconds() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


class Background:
    """``start()`` … ``stop()`` → CPU % (of one core) used by processes that are not ours."""

    def __init__(self) -> None:
        self._busy = 0
        self._own = 0.0
        self._wall = 0.0

    def start(self) -> None:
        self._busy, self._own, self._wall = _busy_jiffies(), _own_seconds(), time.monotonic()

    def stop(self) -> float:
        busy = (_busy_jiffies() - self._busy) / os.sysconf("SC_CLK_TCK")
        own = _own_seconds() - self._own
        wall = time.monotonic() - self._wall
        return max(0.0, 100.0 * (busy - own) / wall) if wall > 0 else 0.0


def _pair() -> tuple[socket.socket, socket.socket]:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    client = socket.create_connection(listener.getsockname())
    server, _ = listener.accept()
    listener.close()
    for s in (client, server):
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return client, server


def ping_pong_us(rounds: int, gap_secs: float) -> list[float]:
    client, server = _pair()
    pid = os.fork()
    if pid == 0:  # echo on the server core
        try:
            client.close()
            os.sched_setaffinity(0, {SERVER_CPU})
            while data := server.recv(64):
                server.send(data)
        finally:
            os._exit(0)
    server.close()
    out = []
    try:
        for _ in range(rounds):
            t0 = time.perf_counter_ns()
            client.send(b"x")
            client.recv(64)
            out.append((time.perf_counter_ns() - t0) / 1000)
            if gap_secs:
                time.sleep(gap_secs)
    finally:
        client.close()
        os.waitpid(pid, 0)
    return out


def fsync_us(workdir: Path, rounds: int) -> list[float]:
    path = workdir / "fsync-probe"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    out = []
    try:
        for _ in range(rounds):
            os.write(fd, b"x" * 4096)
            t0 = time.perf_counter_ns()
            os.fdatasync(fd)
            out.append((time.perf_counter_ns() - t0) / 1000)
    finally:
        os.close(fd)
        path.unlink()
    return out


def send_cost_us(sockets: int, rounds: int) -> float:
    """Median µs per 1 KB ``send`` when one process on the server core writes to ``sockets``."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(sockets)
    readers = [socket.create_connection(listener.getsockname()) for _ in range(sockets)]
    writers = [listener.accept()[0] for _ in range(sockets)]
    listener.close()
    rd, wr = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(rd)
            for s in readers:
                s.close()
            os.sched_setaffinity(0, {SERVER_CPU})
            payload = b"x" * 1024
            per = []
            for _ in range(rounds):
                t0 = time.perf_counter_ns()
                for s in writers:
                    s.send(payload)
                per.append((time.perf_counter_ns() - t0) / 1000 / sockets)
                time.sleep(0.02)
            os.write(wr, str(statistics.median(per)).encode())
        finally:
            os._exit(0)
    os.close(wr)
    for s in writers:
        s.close()
    poller = select.epoll()
    for s in readers:
        s.setblocking(False)
        poller.register(s.fileno(), select.EPOLLIN)
    by_fd = {s.fileno(): s for s in readers}
    result = b""
    while True:
        for fd, _ in poller.poll(0.05):
            try:
                by_fd[fd].recv(1 << 16)
            except BlockingIOError:
                pass
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done:
            result = os.read(rd, 64)
            break
    os.close(rd)
    poller.close()
    for s in readers:
        s.close()
    return float(result or b"nan")


def run(workdir: Path, *, quick: bool) -> list[Row]:
    assert os.sched_getaffinity(0) == {GENERATOR_CPU}
    busy = ping_pong_us(300 if quick else 1000, 0.0)
    idle = ping_pong_us(100 if quick else 300, 0.02)
    sync = fsync_us(workdir, 100 if quick else 300)
    send = send_cost_us(1000, 20 if quick else 50)
    b50, b99 = quantiles(busy, (50, 99))
    i50, i99 = quantiles(idle, (50, 99))
    f50, f99 = quantiles(sync, (50, 99))
    return [
        Row(WORKLOAD, "loopback TCP ping-pong, core 1 ↔ core 0", "back to back p50 / p99 µs",
            b50, b99, "p99 {ref:,.0f} µs"),
        Row(WORKLOAD, "loopback TCP ping-pong, core 1 ↔ core 0", "20 ms idle gaps p50 / p99 µs",
            i50, i99, "p99 {ref:,.0f} µs"),
        Row(WORKLOAD, "fdatasync of a 4 KB append", "p50 / p99 µs", f50, f99, "p99 {ref:,.0f} µs"),
        Row(WORKLOAD, "1 KB send to 1,000 loopback sockets", "µs per send (median)", send, None,
            f"≈ {send * 1000 / 1000:.0f} ms of kernel time per message to 1,000"),
    ]  # fmt: skip
