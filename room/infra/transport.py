"""uvicorn's sans-I/O websockets protocol, plus a direct write path for pre-framed text.

Fan-out to a thousand sockets cannot afford a coroutine, an ASGI message dict and a frame
serialisation per socket. This subclass offers the ASGI app two extensions:
``scope["extensions"]["room.direct_write"]``, a function that writes an already-framed text
frame straight to the transport when the connection is open and writable, and returns False
otherwise (the caller then queues it and sends it the ordinary ASGI way); and
``scope["extensions"]["room.direct_watch"]``, which registers a callback told, at once and on
every change, whether the connection takes direct writes: ``(the socket, the transport's write
buffer, transport.write)`` while it is open (handshake done, no close
sent or received, transport not closing) and writable (below the transport's high-water mark),
``(None, None, None)`` otherwise. The state is worked out again after each event that can change
it (data received, an ASGI send, pause/resume writing, keepalive, shutdown, cut, loss), so the
fan-out reads one cached value per subscriber instead of six checks; it writes to the socket
itself only while the transport has nothing buffered, and gives the transport whatever the
socket did not take. The socket is offered only by asyncio's plain selector transport (not TLS,
not another loop), whose ``write`` does exactly this. Everything else — handshake, pings,
close, inbound frames and their limits — is uvicorn's and websockets' own.

A second extension, ``scope["extensions"]["room.cut"]``, closes a connection whose peer has
stopped reading: uvicorn's own close waits until the socket is writable again, which for a
stalled reader is never, so the TCP connection was never released. ``cut`` writes the close frame
behind whatever is still buffered, closes (flushing), and drops the connection if the peer has
not read it all within the grace. uvicorn's keepalive timeout (1011) gets the same drop.

:func:`http_protocol` gives uvicorn's h11 protocol a deadline for a request's headers: without
one, a client sending a header line every few seconds (slowloris) held its connection forever.

It also offers ``scope["extensions"]["room.body_into"]`` on a request with a ``Content-Length``
whose body is not all in yet: ``await body_into(view)`` fills ``view`` (a writable memoryview)
with the next body bytes, straight from the socket (``recv_into``, no copy through h11, no
64 KB ``http.request`` messages), and returns how many it wrote: all of ``len(view)`` unless the
body ends first; 0 once it has ended. While it is used the connection reads through a
:class:`asyncio.BufferedProtocol` that never reads past the declared length; when the last byte
is in, h11 is told the body is complete and the connection goes on as usual (keep-alive,
pipelining). A peer that closes before the body is complete raises Starlette's
``ClientDisconnect``, as ``request.stream()`` does.
Chunked bodies never get the extension: they go through h11 and ASGI as before.

Reading: uvicorn stops reading after every received message until the app takes it (an
``epoll_ctl`` pair per frame); here a connection stops only once ``READ_HIGH_MESSAGES`` messages
(or ``READ_HIGH_BYTES``) wait for the app, and reads again at the low marks, so what a peer can
make the server hold stays bounded. ``scope["extensions"]["room.receive_nowait"]`` returns the
next message's text when a text message is already queued (None otherwise: await ``receive``),
so the app takes a run of queued frames without a coroutine per frame.

If uvicorn or h11 changes shape, the extensions are simply absent and their users fall back to
the ordinary ASGI ways (the hub to ASGI sends, an upload to ``request.stream()``).
"""

from __future__ import annotations

import asyncio
import asyncio.selector_events
import functools
import logging
import socket
from collections import deque
from collections.abc import Callable, Sized
from typing import Any

import h11
from h11._readers import ContentLengthReader
from starlette.requests import ClientDisconnect
from uvicorn.protocols.http.h11_impl import H11Protocol, RequestResponseCycle
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.protocol import State

log = logging.getLogger(__name__)


def offers_direct_write(protocol: type[Any] | str) -> bool:
    """Whether a server running this websocket protocol (uvicorn's ``ws`` option: a class or a
    name) gives its connections the direct write path."""
    return isinstance(protocol, type) and issubclass(protocol, RoomWebSocketProtocol)


OnLink = Callable[
    [Any, Any, Any], None
]  # room.infra.frames.OnLink (the hub does not import this layer)
# The one transport whose write is "send now if nothing is buffered, else buffer": its socket may
# be written to directly under the same rule.
PLAIN_TRANSPORT: type | None = getattr(asyncio.selector_events, "_SelectorSocketTransport", None)

# Received messages a connection queues for the app before it stops reading the socket, and the
# level they must drain to before it reads again: what a peer can make the server hold is these
# plus one read of the transport (256 KiB of frames at most) and one partial frame. Below them it
# keeps reading, with no epoll_ctl call per message; past them the backlog waits in the kernel's
# socket buffers and the peer's (backpressure).
READ_HIGH_MESSAGES = 32
READ_HIGH_BYTES = 256 * 1024  # characters of text, or bytes
READ_LOW_MESSAGES = 8
READ_LOW_BYTES = 64 * 1024


class RoomWebSocketProtocol(WebSocketsSansIOProtocol):
    _sock: socket.socket | None = None  # the raw socket, when the transport is asyncio's plain one
    _buffer: Sized = b""  # that transport's write buffer
    _queued_bytes = 0  # characters (text) and bytes (binary) of the messages queued for the app
    _watcher: OnLink | None = None
    _linked = False  # what the watcher was last told

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        if PLAIN_TRANSPORT is not None and type(transport) is PLAIN_TRANSPORT:
            # Its socket, and its write buffer (made once, changed in place: empty means
            # nothing waits, as its own write checks), read without a call per frame.
            sock = getattr(transport, "_sock", None)
            buffer = getattr(transport, "_buffer", None)
            if isinstance(sock, socket.socket) and isinstance(buffer, bytearray | deque):
                self._sock, self._buffer = sock, buffer

    def handle_connect(self, event: Any) -> None:
        super().handle_connect(event)
        extensions: dict[str, Any] = self.scope.setdefault("extensions", {})
        extensions["room.direct_write"] = self.direct_write
        extensions["room.direct_watch"] = self.direct_watch
        extensions["room.cut"] = self.cut
        extensions["room.receive_nowait"] = self.receive_nowait

    # -- the cached direct-write state ------------------------------------------------------------

    def direct_watch(self, on_change: OnLink) -> None:
        self._watcher = on_change
        self._linked = False
        self._relink()

    def _relink(self) -> None:
        """Work the direct-write state out again and tell the watcher when it changed."""
        watcher = self._watcher
        if watcher is None:
            return
        sock = self._sock
        transport = self.transport
        linked = (
            sock is not None
            and not self.close_sent
            and not self.disconnected
            and self.writable.is_set()
            and self.handshake_complete
            and self.initial_response is None
            and self.conn.state is State.OPEN
            and not transport.is_closing()
        )
        if linked == self._linked:
            return
        self._linked = linked
        if linked:
            assert sock is not None
            watcher(sock, self._buffer, transport.write)
        else:
            watcher(None, None, None)

    def data_received(self, data: bytes) -> None:
        try:
            super().data_received(data)
        finally:
            self._relink()

    async def send(self, message: Any) -> None:
        try:
            await super().send(message)
        finally:
            self._relink()

    def pause_writing(self) -> None:
        super().pause_writing()
        self._relink()

    def resume_writing(self) -> None:
        super().resume_writing()
        self._relink()

    def shutdown(self) -> None:
        try:
            super().shutdown()
        finally:
            self._relink()

    _drop_timer: asyncio.TimerHandle | None = None

    def cut(self, code: int, reason: str, grace_secs: float) -> None:
        """Close now, without waiting for the socket to be writable: the close frame goes behind
        what is buffered, the transport flushes and closes, and after ``grace_secs`` whatever the
        peer has not read is dropped with the connection."""
        if self.disconnected:
            return
        if not self.close_sent and self.conn.state is State.OPEN:
            self.conn.send_close(code, reason)
            self.transport.write(b"".join(self.conn.data_to_send()))
            self.close_sent = True
            self.queue.put_nowait({"type": "websocket.disconnect", "code": code, "reason": reason})
        self.stop_keepalive()
        self.transport.close()
        self._relink()
        self._drop_later(grace_secs)

    def send_receive_event_to_app(self) -> None:
        # uvicorn's own logs a traceback for each text frame that is not UTF-8 — before sign-in,
        # anyone could fill the log. The same close (1007), one quiet line. And it stops reading
        # after every message until the app has taken it (two epoll_ctl calls per frame); here
        # reading stops only past a high-water mark (READ_HIGH_MESSAGES).
        data = self.frames[0] if len(self.frames) == 1 else b"".join(self.frames)
        self.frames = []
        if self.close_sent:  # the app is past its close: uvicorn's discards it too
            return
        if self.curr_msg_data_type != "text":
            self._queue_received({"type": "websocket.receive", "bytes": data}, len(data))
            return
        try:
            text = data.decode()
        except UnicodeDecodeError as exc:
            log.info("closing %s: a text frame is not UTF-8 (%s)", self.client, exc.reason)
            self.conn.send_close(1007, "invalid UTF-8")
            self.handle_parser_exception()
            return
        self._queue_received({"type": "websocket.receive", "text": text}, len(text))

    def _queue_received(self, message: Any, size: int) -> None:
        """Queue a received message for the app; stop reading once the queue is past its
        high-water mark (see :data:`READ_HIGH_MESSAGES`)."""
        self.queue.put_nowait(message)
        self._queued_bytes += size
        if not self.read_paused and (
            self.queue.qsize() >= READ_HIGH_MESSAGES or self._queued_bytes >= READ_HIGH_BYTES
        ):
            self.read_paused = True
            self.transport.pause_reading()

    _stash: Any = None  # a message receive_nowait took that was not text: receive's next

    def receive_nowait(self) -> str | None:
        """The next message's text when it is a text message already queued, else None (and
        ``receive`` is awaited as usual): a connection takes a run of queued frames without a
        coroutine per frame."""
        if self._stash is not None or self.queue.empty():
            return None
        message = self.queue.get_nowait()
        self._took(message)
        text: str | None = message.get("text") if message["type"] == "websocket.receive" else None
        if text is None:
            self._stash = message
        return text

    async def receive(self) -> Any:
        if self._stash is not None:
            message, self._stash = self._stash, None
            return message
        message = await self.queue.get()
        self._took(message)
        return message

    def _took(self, message: Any) -> None:
        """A message left the queue: count it out, and read again once at the low marks."""
        if message["type"] == "websocket.receive":
            text = message.get("text")
            self._queued_bytes -= len(text) if text is not None else len(message["bytes"] or b"")
        if (
            self.read_paused
            and self.queue.qsize() <= READ_LOW_MESSAGES
            and self._queued_bytes <= READ_LOW_BYTES
        ):
            self.read_paused = False
            self.transport.resume_reading()

    def keepalive_timeout(self) -> None:
        super().keepalive_timeout()  # fails the connection (1011) and closes the transport
        self._relink()
        self._drop_later(self.ping_timeout or 20.0)

    def _drop_later(self, grace_secs: float) -> None:
        if self._drop_timer is None:
            self._drop_timer = self.loop.call_later(grace_secs, self._drop)

    def _drop(self) -> None:
        if not self.disconnected:
            log.info("dropping a connection that read nothing more: %s", self.client)
            self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._drop_timer is not None:
            self._drop_timer.cancel()
            self._drop_timer = None
        super().connection_lost(exc)
        self._relink()

    _direct_open = False  # handshake done and accepted: checked once

    def direct_write(self, wire: bytes) -> bool:
        # Called once per connection per loop turn that has frames for it: few, cheap checks.
        if self.close_sent or self.disconnected or not self.writable.is_set():
            return False
        if not self._direct_open:
            if not self.handshake_complete or self.initial_response is not None:
                return False
            self._direct_open = True
        transport = self.transport
        if self.conn.state is not State.OPEN or transport.is_closing():
            return False
        transport.write(wire)
        return True


BODY_INTO = "room.body_into"


class _BodyReceiver(asyncio.BufferedProtocol):
    """The protocol a connection reads through while a body is received into the app's buffer:
    ``recv_into`` the app's view, never more than what is left of the declared length."""

    def __init__(self, owner: H11Protocol, reader: ContentLengthReader) -> None:
        self.owner = owner
        self.reader = reader  # h11's, for the body: told it is complete at the end
        self.left = reader._remaining
        self.view: memoryview | None = None
        self.filled = 0
        self.waiter: asyncio.Future[int] | None = None

    def get_buffer(self, sizehint: int) -> memoryview:
        assert self.view is not None  # reading is paused whenever there is no view
        return self.view[self.filled : self.filled + self.left]

    def buffer_updated(self, nbytes: int) -> None:
        self.filled += nbytes
        self.left -= nbytes
        assert self.view is not None
        if self.left == 0 or self.filled == len(self.view):
            self.owner.transport.pause_reading()
            waiter, self.view = self.waiter, None
            if waiter is not None and not waiter.done():
                waiter.set_result(self.filled)

    def _fail(self, exc: BaseException) -> None:
        waiter, self.view = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)

    def eof_received(self) -> bool | None:
        self._fail(ClientDisconnect(f"the peer closed with {self.left} bytes of the body unsent"))
        return None  # the transport closes itself

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(ClientDisconnect(f"the connection was lost with {self.left} bytes unsent"))
        self.owner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.owner.pause_writing()

    def resume_writing(self) -> None:
        self.owner.resume_writing()


def http_protocol(header_timeout_secs: float) -> type[H11Protocol]:
    """uvicorn's h11 protocol with a deadline for each request's headers, and the
    ``"room.body_into"`` extension (see the module's docstring)."""

    class RoomHttpProtocol(H11Protocol):
        _header_timer: asyncio.TimerHandle | None = None
        _offered: RequestResponseCycle | None = None  # the cycle the extension was offered to
        _receiver: _BodyReceiver | None = None

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.conn.their_state is not h11.IDLE:  # the headers are in (or an upgrade)
                self._disarm()

        def handle_events(self) -> None:
            super().handle_events()
            cycle: RequestResponseCycle | None = getattr(self, "cycle", None)
            if (
                cycle is not None
                and cycle is not self._offered
                and cycle.more_body
                and self.conn.their_state is h11.SEND_BODY
                and type(getattr(self.conn, "_reader", None)) is ContentLengthReader
            ):
                self._offered = cycle
                extensions: dict[str, Any] = cycle.scope.setdefault("extensions", {})
                extensions[BODY_INTO] = functools.partial(self._body_into, cycle)

        async def _body_into(self, cycle: RequestResponseCycle, view: memoryview) -> int:
            """Fill ``view`` with the next bytes of ``cycle``'s body (see the module's doc)."""
            filled = 0
            if cycle.body:  # what h11 had already handed over
                filled = min(len(view), len(cycle.body))
                view[:filled] = cycle.body[:filled]
                del cycle.body[:filled]
            if filled == len(view) or not cycle.more_body or cycle.disconnected:
                if cycle.disconnected and cycle.more_body and filled < len(view):
                    raise ClientDisconnect("the connection was lost before the body was all in")
                return filled
            if self._receiver is None:
                reader = self.conn._reader
                assert type(reader) is ContentLengthReader and self.cycle is cycle
                self._receiver = _BodyReceiver(self, reader)
                self.flow.read_paused = True  # uvicorn's flow control stands aside meanwhile
                self.transport.pause_reading()
                self.transport.set_protocol(self._receiver)
            receiver = self._receiver
            receiver.view, receiver.filled = view, filled
            receiver.waiter = self.loop.create_future()
            self.transport.resume_reading()
            try:
                filled = await receiver.waiter
            finally:
                receiver.waiter = receiver.view = None
            if receiver.left == 0:
                self._body_done(receiver)
            return filled

        def _body_done(self, receiver: _BodyReceiver) -> None:
            """The declared body is all in: h11 is told so, and the connection reads as usual."""
            self._receiver = None
            receiver.reader._remaining = 0
            self.transport.set_protocol(self)
            self.handle_events()  # h11: EndOfMessage; uvicorn: the request's last message
            self.flow.read_paused = False
            self.transport.resume_reading()

        def on_response_complete(self) -> None:
            if self._receiver is not None:  # answered before the body was all in: not read on
                self.transport.close()
            super().on_response_complete()
            if not self.transport.is_closing():
                self._arm()  # the next request on this kept-alive connection gets its own

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _arm(self) -> None:
            self._disarm()
            self._header_timer = self.loop.call_later(header_timeout_secs, self._expired)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _expired(self) -> None:
            self._header_timer = None
            if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
                log.info("closing %s: no complete request headers in %ss", self.client,
                         header_timeout_secs)  # fmt: skip
                self.transport.close()

    return RoomHttpProtocol
