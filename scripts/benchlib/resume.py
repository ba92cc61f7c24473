"""Resume: clients reconnecting with 10,000 missed messages each while a live stream continues.

A server on a data folder pre-filled with ``PREFILL`` messages; ``LIVE`` subscribers and an
open-loop stream of ``STREAM_PER_SEC`` messages/s. First a baseline phase measures the live
subscribers' send→receive latency alone; then ``CLIENTS`` clients open one after another
(``OPENS_PER_SEC``), each subscribing with ``since = head − MISSED`` (head: the stream's last
acked seq), while the live subscribers keep measuring. Per resuming client: the time from opening
the socket to receiving the last missed message (the ``head_seq`` of its ``subscribed`` answer),
and, until the end of the run, every seq it gets — replayed in ``batch`` frames or live — must be
the next one: gaps and duplicates are counted, and each must end at the final head.
"""

from __future__ import annotations

import asyncio
import re
import shutil
import time
from array import array
from pathlib import Path

from benchlib.corpus import fill_messages, make_data_folder
from benchlib.opensend import OpenLoopSender
from benchlib.serverproc import RoomServer
from benchlib.stats import Row, quantiles
from benchlib.subscribers import Recorder, Subscriber, open_many
from benchlib.wsraw import WsClient

WORKLOAD = "resume"
MISSED = 10_000
PREFILL = 12_000
STREAM_PER_SEC = 20.0
OPENS_PER_SEC = 5.0
_BATCH = b'{"type":"batch"'
_BATCH_SEQ = re.compile(rb'\{"type":"message","project_id":\d+,"seq":(\d+)')


class Resumer(Subscriber):
    """A subscriber opened with ``since``: times its catch-up and checks every seq it gets."""

    def __init__(self) -> None:
        super().__init__(Recorder())  # its own recorder, never active: live latency is not its job
        self.opened_at = 0
        self.caught_up_at = 0
        self.target: int | None = None
        self.done = asyncio.get_running_loop().create_future()

    async def open(self, port: int, headers: dict[str, str], since: int) -> None:
        self.opened_at = time.monotonic_ns()
        await self.start(port, headers, since)

    def on_text(self, payload: bytes, now: int, arrival: int) -> None:
        if payload.startswith(_BATCH):
            for found in _BATCH_SEQ.finditer(payload):
                self.check(int(found.group(1)))
        else:
            super().on_text(payload, now, arrival)
        if self.target is None and self.subscribed.done():
            self.target = self.subscribed.result()
        if (
            not self.caught_up_at
            and self.target is not None
            and self.last_seq is not None
            and self.last_seq >= self.target
        ):
            self.caught_up_at = now
            self.done.set_result(None)


async def _measure(
    server: RoomServer, live: int, clients: int, baseline: float
) -> tuple[dict[str, float], dict[str, list[float]]]:
    recorder = Recorder()
    subs = await open_many(recorder, server.port, server.headers, live)
    sender = OpenLoopSender([], STREAM_PER_SEC, prefix="r")
    stream_client = WsClient(sender.on_text)
    await stream_client.connect("127.0.0.1", server.port, headers=server.headers)
    sender.clients = [stream_client]
    reconnect_secs = clients / OPENS_PER_SEC
    total = 1.0 + baseline + reconnect_secs + 3.0
    stream = asyncio.ensure_future(sender.run(total))

    await asyncio.sleep(1.0)  # warm-up
    recorder.active = True
    await asyncio.sleep(baseline)
    base_read, base_arrival = list(recorder.read), list(recorder.arrival)
    recorder.read, recorder.arrival = array("q"), array("q")

    resumers: list[Resumer] = []
    phase_start = time.monotonic()
    for i in range(clients):
        head = sender.log.ack_seq[-1] if sender.log.ack_seq else PREFILL
        resumer = Resumer()
        resumers.append(resumer)
        await resumer.open(server.port, server.headers, max(0, head - MISSED))
        await asyncio.sleep(max(0.0, phase_start + (i + 1) / OPENS_PER_SEC - time.monotonic()))
    await asyncio.wait([asyncio.ensure_future(_wait(r.done)) for r in resumers], timeout=60)
    log = await stream
    await sender.drain(10)
    await asyncio.sleep(1.0)
    recorder.active = False
    during_read, during_arrival = list(recorder.read), list(recorder.arrival)
    final_head = max(log.ack_seq) if log.ack_seq else 0

    catch_up = [(r.caught_up_at - r.opened_at) / 1e6 for r in resumers if r.caught_up_at]
    bad_end = sum(1 for r in resumers if r.last_seq != final_head)
    figures = {
        "resume_p50_ms": quantiles(catch_up, (50,))[0],
        "resume_p99_ms": quantiles(catch_up, (99,))[0],
        "resume_max_ms": max(catch_up, default=float("nan")),
        "not_caught_up": float(clients - len(catch_up)),
        "gaps": float(sum(r.gaps for r in resumers)),
        "duplicates": float(sum(r.duplicates for r in resumers)),
        "wrong_end": float(bad_end),
        "live_gaps_dups": float(sum(s.gaps + s.duplicates for s in subs)),
        "base_p99_ms": quantiles(base_read, (99,))[0] / 1e6,
        "during_p99_ms": quantiles(during_read, (99,))[0] / 1e6,
        "base_p50_ms": quantiles(base_read, (50,))[0] / 1e6,
        "during_p50_ms": quantiles(during_read, (50,))[0] / 1e6,
        "base_arrival_p99_ms": quantiles(base_arrival, (99,))[0] / 1e6,
        "during_arrival_p99_ms": quantiles(during_arrival, (99,))[0] / 1e6,
        "replayed": float(sum(r.received for r in resumers)),
    }
    for client in [*(s.client for s in subs), *(r.client for r in resumers), stream_client]:
        client.close()
    return figures, {"catch_up_ms": catch_up}


async def _wait(future: asyncio.Future[None]) -> None:
    await future


def run(workdir: Path, *, quick: bool) -> list[Row]:
    live, clients, baseline = (100, 20, 3.0) if quick else (100, 50, 10.0)
    data = workdir / "resume"
    shutil.rmtree(data, ignore_errors=True)
    make_data_folder(data)
    fill_messages(data, PREFILL)
    server = RoomServer(data).start()
    try:
        fig, detail = asyncio.run(_measure(server, live, clients, baseline))
    finally:
        server.stop()
        shutil.rmtree(data, ignore_errors=True)
    case = f"{clients} clients × {MISSED:,} missed, {STREAM_PER_SEC:g} msg/s stream"
    extra = {**fig, **detail}
    return [
        Row(WORKLOAD, case, "open → last missed p50 ms", fig["resume_p50_ms"], extra=extra),
        Row(WORKLOAD, case, "open → last missed p99 ms", fig["resume_p99_ms"], None,
            f"max {fig['resume_max_ms']:.0f} ms", "≤ 100"),
        Row(WORKLOAD, case, "gaps + duplicates + wrong end", fig["gaps"] + fig["duplicates"]
            + fig["wrong_end"] + fig["not_caught_up"] + fig["live_gaps_dups"], target="≤ 0"),
        Row(WORKLOAD, case, f"live p99 ms ({live} subscribers) during reconnects",
            fig["during_p99_ms"], fig["base_p99_ms"], "without reconnects: {ref:.2f} ms", "≤ 5"),
    ]  # fmt: skip
