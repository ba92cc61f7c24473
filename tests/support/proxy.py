"""A small TCP proxy for the cluster tests: one node's link to PostgreSQL or NATS goes through
it, so a test can cut that link, delay it and restore it while the other nodes' links stay up
(docs/cluster.md, "Tests").

* 127.0.0.1 only, on a free port; asyncio on a thread of its own (the tests block their own
  loop with synchronous HTTP calls: the proxy must go on meanwhile).
* :meth:`LinkProxy.cut` closes every open connection (both sides reset, as a network cut seen
  by the endpoints) and refuses new ones until :meth:`LinkProxy.restore`: the listener stays
  open (so no other process can take its port meanwhile) and resets each connection it
  accepts at once, which the clients see as ``connection reset`` on their first read.
* :meth:`LinkProxy.delay` holds every chunk, in both directions, ``secs`` after it was read
  before it is written on (order kept: a slow link, not a lossy one); ``delay(0)`` or
  :meth:`restore` ends it.
* :meth:`LinkProxy.cut_after` cuts the link at one chosen moment: once a connection sent a
  chunk holding ``request`` and its server answers with a chunk holding ``reply``, that answer
  is dropped and the link cut (as :meth:`cut`) — the server did the work, the client never
  hears of it (a PostgreSQL ``COMMIT`` that committed, its reply lost).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

CHUNK_BYTES = 65536
CALL_TIMEOUT_SECS = 10.0


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with an RST (SO_LINGER 0): the peer's next read fails, as on a cut cable."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


@dataclass(eq=False)
class _Pipe:
    """One proxied connection: the client's side and the upstream's."""

    client: asyncio.StreamWriter
    upstream: asyncio.StreamWriter
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    done: int = 0  # directions that ended with an EOF
    armed: bool = False  # it sent the request of a cut_after: the reply cuts the link

    def reset(self) -> None:
        for task in self.tasks:
            task.cancel()
        _reset(self.client)
        _reset(self.upstream)


@dataclass(eq=False)
class LinkProxy:
    """A proxy to ``host:port``; :meth:`start` then :meth:`stop` (or a context manager)."""

    target_host: str
    target_port: int
    port: int = 0
    accepted: int = 0  # connections accepted and forwarded (the tests check the link is used)
    refused: int = 0  # connections reset while cut
    _delay_secs: float = 0.0
    _cut: bool = False
    _cut_after: tuple[bytes, bytes] | None = None
    _loop: asyncio.AbstractEventLoop | None = None
    _thread: threading.Thread | None = None
    _server: asyncio.Server | None = None
    _pipes: set[_Pipe] = field(default_factory=set)

    # -- from the test's thread ------------------------------------------------------------

    def start(self) -> LinkProxy:
        ready = threading.Event()
        self._loop = asyncio.new_event_loop()

        def run() -> None:
            assert self._loop is not None
            asyncio.set_event_loop(self._loop)
            self._server = self._loop.run_until_complete(
                asyncio.start_server(self._accept, "127.0.0.1", self.port or 0)
            )
            self.port = int(self._server.sockets[0].getsockname()[1])
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, name=f"proxy-{self.target_port}", daemon=True)
        self._thread.start()
        if not ready.wait(CALL_TIMEOUT_SECS):
            raise RuntimeError("the proxy did not start")
        return self

    def url(self, url: str) -> str:
        """``url`` (``postgresql://…`` or ``nats://…`` to the target) through this proxy."""
        parts = urlsplit(url)
        assert parts.port == self.target_port, (url, self.target_port)
        netloc = parts.netloc.rsplit(":", 1)[0] + f":{self.port}"
        return urlunsplit(parts._replace(netloc=netloc))

    def cut(self) -> None:
        """Close every connection and refuse new ones until :meth:`restore`."""
        self._call(self._cut_now)

    def delay(self, secs: float) -> None:
        """Hold every chunk ``secs`` before passing it on (both directions, order kept)."""
        self._call(self._set_delay, secs)

    def cut_after(self, request: bytes, reply: bytes) -> None:
        """Cut the link (as :meth:`cut`) when a connection that sent ``request`` gets a chunk
        holding ``reply`` from the server, dropping that chunk; once (:meth:`is_cut` says when).
        Markers split over two chunks are not seen: pick short ones."""
        self._call(self._set_cut_after, (request, reply))

    def restore(self) -> None:
        """Accept and forward again, without delay."""
        self._call(self._restore_now)

    def is_cut(self) -> bool:
        return self._cut

    @property
    def open_links(self) -> int:
        return len(self._pipes)

    def stop(self) -> None:
        loop, self._loop = self._loop, None
        if loop is None:
            return

        async def shutdown() -> None:
            self._cut_now()
            if self._server is not None:
                self._server.close()

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(shutdown(), loop).result(CALL_TIMEOUT_SECS)
        loop.call_soon_threadsafe(loop.stop)
        if self._thread is not None:
            self._thread.join(CALL_TIMEOUT_SECS)
        loop.close()

    def __enter__(self) -> LinkProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _call(self, function: object, *args: object) -> None:
        assert self._loop is not None, "start() first"

        async def call() -> None:
            function(*args)  # type: ignore[operator]

        asyncio.run_coroutine_threadsafe(call(), self._loop).result(CALL_TIMEOUT_SECS)

    # -- on the proxy's loop ---------------------------------------------------------------

    def _cut_now(self) -> None:
        self._cut = True
        for pipe in list(self._pipes):
            pipe.reset()
        self._pipes.clear()

    def _set_delay(self, secs: float) -> None:
        self._delay_secs = max(0.0, secs)

    def _set_cut_after(self, markers: tuple[bytes, bytes]) -> None:
        self._cut_after = markers
        for pipe in self._pipes:
            pipe.armed = False

    def _restore_now(self) -> None:
        self._cut = False
        self._delay_secs = 0.0
        self._cut_after = None

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._cut:
            self.refused += 1
            _reset(writer)
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(self.target_host, self.target_port)
        except OSError:
            _reset(writer)
            return
        if self.is_cut():  # cut while connecting
            self.refused += 1
            _reset(writer)
            _reset(up_writer)
            return
        self.accepted += 1
        pipe = _Pipe(writer, up_writer)
        self._pipes.add(pipe)
        loop = asyncio.get_running_loop()
        pipe.tasks = [
            loop.create_task(self._forward(reader, up_writer, pipe, upstream=True)),
            loop.create_task(self._forward(up_reader, writer, pipe, upstream=False)),
        ]

    def _watch(self, data: bytes, pipe: _Pipe, upstream: bool) -> bool:
        """Whether ``data`` is the reply a :meth:`cut_after` waits for (then the link is cut)."""
        markers = self._cut_after
        if markers is None or not data:
            return False
        if upstream:
            pipe.armed = pipe.armed or markers[0] in data
            return False
        if pipe.armed and markers[1] in data:
            self._cut_after = None
            self._cut_now()
            return True
        return False

    async def _forward(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        pipe: _Pipe,
        *,
        upstream: bool,
    ) -> None:
        """Read chunks and write them on, each no sooner than the delay after it was read: a
        queue between a reading and a writing task, so a delay adds latency, not a cap on
        the throughput."""
        chunks: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def write() -> None:
            while True:
                due, data = await chunks.get()
                if not data:
                    with contextlib.suppress(OSError):
                        writer.write_eof()
                    return
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                writer.write(data)
                await writer.drain()

        writing = asyncio.get_running_loop().create_task(write())
        try:
            while True:
                data = await reader.read(CHUNK_BYTES)
                if self._watch(data, pipe, upstream):
                    return  # cut: this pipe was reset with the others
                chunks.put_nowait((time.monotonic() + self._delay_secs, data))
                if not data:
                    break
            await writing
        except (OSError, asyncio.IncompleteReadError):  # one side reset: so is the other
            writing.cancel()
            self._pipes.discard(pipe)
            pipe.reset()
            return
        finally:
            writing.cancel()
        pipe.done += 1
        if pipe.done == 2:  # both sides closed their half: the connection is over
            self._pipes.discard(pipe)
            pipe.client.close()
            pipe.upstream.close()
