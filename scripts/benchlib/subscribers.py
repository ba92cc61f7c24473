"""Subscribers that time every live message and check its seq, for fan-out and resume.

Each ``message`` frame's body starts with ``probe <monotonic_ns> <realtime_ns>`` (the send time);
on receipt the subscriber records ``read`` latency (``monotonic_ns`` when the generator read the
socket minus the send time) and ``arrival`` latency (the kernel's ``SO_TIMESTAMPNS`` for the
read minus the send realtime): the first is what a client sees, the second excludes the
generator's own queueing, so the two together tell the server's share from the generator's.
Seqs are checked per subscriber: every frame must carry the next seq (gaps and duplicates are
counted). Frames are never JSON-decoded; fields are found with ``bytes.find``.
"""

from __future__ import annotations

import asyncio
from array import array

from benchlib.corpus import PROJECT_ID, parse_probe
from benchlib.wsraw import WsClient

_MESSAGE = b'{"type":"message","project_id":'
_SEQ = b'"seq":'
_SUBSCRIBED = b'{"type":"subscribed"'
_HEAD = b'"head_seq":'


class Recorder:
    """Latency samples shared by many subscribers; ``active`` turns recording on and off."""

    def __init__(self) -> None:
        self.read = array("q")
        self.arrival = array("q")
        self.active = False


class Subscriber:
    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self.client = WsClient(self.on_text, timestamps=True)
        self.subscribed = asyncio.get_running_loop().create_future()
        self.last_seq: int | None = None
        self.received = 0
        self.gaps = 0
        self.duplicates = 0

    async def start(self, port: int, headers: dict[str, str], since: int | None = None) -> None:
        await self.client.connect("127.0.0.1", port, headers=headers)
        extra = f',"since":{since}' if since is not None else ""
        self.client.send_text(f'{{"type":"subscribe","project_id":{PROJECT_ID}{extra}}}'.encode())
        if since is not None:
            self.last_seq = since

    def on_text(self, payload: bytes, now: int, arrival: int) -> None:
        if payload.startswith(_MESSAGE):
            s = payload.find(_SEQ, 30) + 6
            seq = int(payload[s : payload.find(b",", s)])
            self.check(seq)
            rec = self.recorder
            if rec.active:
                sent = parse_probe(payload)
                if sent is not None:
                    rec.read.append(now - sent[0])
                    if arrival:
                        rec.arrival.append(arrival - sent[1])
        elif payload.startswith(_SUBSCRIBED) and not self.subscribed.done():
            h = payload.find(_HEAD) + len(_HEAD)
            end = h
            while payload[end : end + 1].isdigit():
                end += 1
            self.subscribed.set_result(int(payload[h:end]))

    def check(self, seq: int) -> None:
        self.received += 1
        last = self.last_seq
        if last is None or seq == last + 1:
            self.last_seq = seq
        elif seq <= last:
            self.duplicates += 1
        else:
            self.gaps += seq - last - 1
            self.last_seq = seq


async def open_many(
    recorder: Recorder, port: int, headers: dict[str, str], count: int, *, parallel: int = 50
) -> list[Subscriber]:
    """``count`` live subscribers (no ``since``), opened ``parallel`` at a time."""
    subs: list[Subscriber] = []
    for first in range(0, count, parallel):
        batch = [Subscriber(recorder) for _ in range(min(parallel, count - first))]
        await asyncio.gather(*(s.start(port, headers) for s in batch))
        await asyncio.wait_for(asyncio.gather(*(s.subscribed for s in batch)), 30)
        subs += batch
    return subs
