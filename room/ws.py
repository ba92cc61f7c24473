"""The ``/ws`` endpoint: authenticate, subscribe with resume, and dispatch client frames.

A connection keeps reading while its earlier sends commit: a ``send`` is validated and queued
with the writer, and its ack is pushed when the commit lands. Every bad frame is answered with
``{type: "error", code, message}`` and the socket stays open; oversize frames (1009) and invalid
UTF-8 (1007) are closed by the websockets protocol itself.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from functools import partial
from typing import Any

from starlette.websockets import WebSocket, WebSocketDisconnect

from room import __version__
from room.actions import chatter, message_edits, presence, unread
from room.actions import deliveries as delivery_actions
from room.actions import messages as message_actions
from room.actions import reactions as reaction_actions
from room.actions import relay as relay_actions
from room.actions import search as search_actions
from room.actions import turns as turn_actions
from room.agents import drafts
from room.auth import (
    SESSION_COOKIE,
    Identity,
    authenticate_session,
    authenticate_token,
    identity_from_headers,
)
from room.errors import AuthError, ForbiddenError, NotFoundError, RateLimitedError, RoomError
from room.infra.fanout import Subscription
from room.infra.frames import CLOSE_SIGNED_OUT
from room.infra.outbox import Outbox
from room.rules import protocol as p
from room.rules import resume
from room.rules.entities import Member
from room.rules.ledger import DeliveryState
from room.rules.ops import members_for, project_for, viewer_kind
from room.services import ProjectRoster, Services
from room.store import auth as auth_store
from room.store import deliveries as deliveries_store
from room.store import members as members_store
from room.store import messages as messages_store
from room.store import subscriptions as subscriptions_store

log = logging.getLogger(__name__)

CLOSE_POLICY = 1008
CLOSE_UNAUTHENTICATED = 4401
AUTH_TIMEOUT_SECS = 10.0
REPLAY_PAGE = 500  # events per batch frame: small enough that live traffic interleaves
REPLAY_SEND_SECS = 30.0
# Sends of one connection queued for commit and not yet acked. Past it the connection stops taking
# frames until its commits catch up; once room.infra.transport.READ_HIGH_MESSAGES more wait, it
# stops reading, so an overloaded server keeps the backlog in the kernel's socket buffers (and the
# client's), not as Python objects competing for the CPU.
MAX_INFLIGHT_SENDS = 256


async def ws_endpoint(websocket: WebSocket) -> None:
    core: Services = websocket.app.state.core
    origin = websocket.headers.get("origin")
    if origin is not None and origin.rstrip("/") not in core.settings.allowed_origins:
        log.warning("refused WebSocket from origin %s", origin)
        await websocket.close(code=CLOSE_POLICY)  # before accept: an HTTP 403
        return
    try:
        identity = await identity_from_headers(core, websocket.headers, websocket.cookies)
    except AuthError:
        await websocket.close(code=CLOSE_POLICY)
        return
    await websocket.accept()
    core.hub.connections += 1
    try:
        await _serve(core, websocket, identity)
    finally:
        core.hub.connections -= 1


async def _serve(core: Services, websocket: WebSocket, identity: Identity | None) -> None:
    connection = Connection(core, websocket, identity)
    secret = websocket.cookies.get(SESSION_COOKIE) if identity and identity.user else None
    if secret is None:
        await connection.run()
        return
    session = auth_store.digest(secret)
    core.hub.presence.attach_session(session, connection.outbox)
    try:
        # Sign-out closes only the sockets attached when it runs: one that signed out between
        # the check above and the attach is caught by checking again now.
        try:
            await authenticate_session(core, secret)
        except AuthError:
            await websocket.close(code=CLOSE_SIGNED_OUT, reason="signed out")
            return
        await connection.run()
    finally:
        core.hub.presence.detach_session(session, connection.outbox)


def _nothing_queued() -> None:
    return None


def _current(roster: ProjectRoster, member_id: int) -> Member:
    """The member ``member_id`` of ``roster``, refused once they left."""
    member = roster.member(member_id)
    if member is None or member.status == "left":
        raise ForbiddenError("you are not a member of this project", code="not_member")
    return member


class Connection:
    def __init__(self, core: Services, websocket: WebSocket, identity: Identity | None) -> None:
        self.core = core
        self.websocket = websocket
        self.identity = identity
        extensions = websocket.scope.get("extensions") or {}
        self.outbox = Outbox(
            self._send_text,
            self._close,
            limit=core.settings.outbox_frames,
            limit_bytes=core.settings.outbox_bytes,
            direct=extensions.get("room.direct_write"),
            flusher=core.hub.flusher,
            name=f"{websocket.client}",
            stall_secs=core.settings.ws_stall_secs,
            watch=extensions.get("room.direct_watch"),
        )
        self.subscriptions: dict[int, Subscription] = {}
        self.member_ids: dict[int, int] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._handlers: dict[str, Callable[[Any], Awaitable[None]]] = {
            "auth": self.on_auth,
            "subscribe": self.on_subscribe,
            "unsubscribe": self.on_unsubscribe,
            "send": self.on_send,
            "edit": self.on_edit,
            "delete": self.on_delete,
            "react": self.on_react,
            "history": self.on_history,
            "typing": self.on_typing,
            "read": self.on_read,
            "preview": self.on_preview,
            "receipts": self.on_receipts,
            "received": self.on_received,
            "consume": self.on_consume,
            "redeliver": self.on_redeliver,
            "search": self.on_search,
            "ping": self.on_ping,
        }
        # Names this socket's hand-offs to an external agent, after the node (server) that
        # holds the socket: a start of another server leaves them alone (docs/storage.md).
        node = core.db.node
        self.handoff = f"{node}:{uuid.uuid4().hex}" if node else uuid.uuid4().hex
        self._inflight = 0
        self._send_room = asyncio.Event()
        self._send_room.set()
        self.external_member: int | None = None

    async def _send_text(self, text: str) -> None:
        await self.websocket.send({"type": "websocket.send", "text": text})

    async def _close(self, code: int, reason: str) -> None:
        cut = (self.websocket.scope.get("extensions") or {}).get("room.cut")
        if cut is not None:  # never waits on a peer that stopped reading (room.infra.transport)
            cut(code, reason, self.core.settings.ws_stall_secs)
            return
        await self.websocket.close(code=code, reason=reason)

    def push(self, frame: dict[str, Any]) -> None:
        self.outbox.push(p.encode(frame))

    # -- main loop -------------------------------------------------------------------------

    async def run(self) -> None:
        self.outbox.start()
        agent_sessions: list[str] = []
        person: int | None = None
        try:
            if self.identity is None and not await self._await_auth():
                return
            assert self.identity is not None
            if self.identity.user is not None:
                person = self.identity.user.id
                if self.core.hub.presence.attach_person(person, self.outbox):
                    await presence.person_changed(self.core, person)
            if self.identity.agent is not None:
                # Leaving revokes the agent's tokens and closes what they opened; a token
                # revoked where the server does not hear it is found by the re-check.
                agent_sessions.append(self.core.hub.presence.agent_session(self.identity.agent.id))
                if self.identity.credential is not None:
                    agent_sessions.append(
                        self.core.hub.presence.token_session(self.identity.credential)
                    )
                for key in agent_sessions:
                    self.core.hub.presence.attach_session(key, self.outbox)
            self._hello()
            await self._attach_external()
            # Frames already queued are taken without a coroutine each (room.infra.transport), and a
            # frame that needs no wait is handled without one (_dispatch).
            receive_nowait = (self.websocket.scope.get("extensions") or {}).get(
                "room.receive_nowait", _nothing_queued
            )
            while not self.outbox.closed:
                text = receive_nowait()
                if text is None:
                    message = await self.websocket.receive()
                    if message["type"] == "websocket.disconnect":
                        break
                    text = message.get("text")
                    if text is None:
                        self.push(p.error_frame("bad_frame", "binary frames are not accepted"))
                        continue
                handling = self._dispatch(text)
                if handling is not None:
                    await handling
        except WebSocketDisconnect:
            pass
        finally:
            if person is not None and self.core.hub.presence.detach_person(person, self.outbox):
                unread.forget(self.core, person)
                await presence.person_changed(self.core, person)
            for key in agent_sessions:
                self.core.hub.presence.detach_session(key, self.outbox)
            for sub in self.subscriptions.values():
                self.core.hub.unsubscribe(sub)
            if self.external_member is not None:
                self.core.inboxes.close(self.external_member, self._offer)
                assert self.identity is not None and self.identity.agent is not None
                presence.schedule(self.core, self.identity.agent.project_id)
                await delivery_actions.socket_lost(self.core, self.external_member, self.handoff)
            for task in list(self._tasks):
                task.cancel()
            await self.outbox.aclose()

    async def _await_auth(self) -> bool:
        try:
            async with asyncio.timeout(AUTH_TIMEOUT_SECS):
                message = await self.websocket.receive()
        except TimeoutError:
            await self._close(CLOSE_UNAUTHENTICATED, "authenticate within 10 s")
            return False
        text = message.get("text") if message["type"] == "websocket.receive" else None
        try:
            if text is None:
                raise AuthError("send an auth frame first")
            frame = p.parse_client_frame(text)
            if not isinstance(frame, p.AuthFrame):
                raise AuthError("send an auth frame first")
            self.identity = await authenticate_token(self.core, frame.token)
        except RoomError as exc:
            req_id = p.req_id_of(text) if text is not None else None
            self.push(p.error_frame(exc.code, exc.message, req_id))
            await asyncio.sleep(0)  # let the outbox write the error before the close
            await self._close(CLOSE_UNAUTHENTICATED, exc.message[:100])
            return False
        return True

    def _hello(self) -> None:
        assert self.identity is not None
        self.push(
            {
                "type": "hello",
                "server_version": __version__,
                "identity": self.identity.to_wire(),
                "max_frame_bytes": self.core.settings.max_frame_bytes,
            }
        )

    def _dispatch(self, text: str) -> Coroutine[Any, Any, None] | None:
        """Handle one client frame: at once when it needs no wait (a send whose member and
        roster are cached and whose connection has room), else the coroutine to await."""
        req_id = None
        try:
            frame = p.parse_client_frame(text)
            req_id = frame.req_id
            if type(frame) is p.SendFrame and self._send_at_once(frame):
                return None
        except Exception as exc:
            self._failed(exc, text, req_id)
            return None
        return self._handle(frame, text)

    async def _handle(self, frame: p.ClientFrame, text: str) -> None:
        try:
            await self._handlers[frame.type](frame)
        except Exception as exc:
            self._failed(exc, text, frame.req_id)

    def _failed(self, exc: Exception, text: str, req_id: str | None) -> None:
        """Answer a frame that failed: its error, or ``internal`` for a bug."""
        if isinstance(exc, RoomError):
            if req_id is None:  # the frame did not parse: echo what can be read of it
                req_id = p.req_id_of(text)
            self.push(p.error_frame(exc.code, exc.message, req_id, **exc.details))
        else:
            log.error("frame handler failed", exc_info=exc)
            self.push(p.error_frame("internal", "the server failed on this frame", req_id))

    def _spawn(self, coro: Awaitable[None], req_id: str | None) -> None:
        async def guarded() -> None:
            try:
                await coro
            except RoomError as exc:
                self.push(p.error_frame(exc.code, exc.message, req_id, **exc.details))
            except Exception:
                log.exception("frame task failed")
                self.push(p.error_frame("internal", "the server failed on this frame", req_id))

        task = asyncio.get_running_loop().create_task(guarded())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- external agents -----------------------------------------------------------------------

    async def _attach_external(self) -> None:
        agent = self.identity.agent if self.identity else None
        if agent is None or agent.driver != "external":
            return
        self.external_member = agent.id
        self.core.inboxes.open(agent.id, self._offer)
        presence.schedule(self.core, agent.project_id)
        unsettled = await self.core.db.read(lambda conn: deliveries_store.unsettled(conn, agent.id))
        if unsettled:
            self._push_inbox(agent.project_id, unsettled, reconcile=True)
        await self._offer(agent.id)

    async def _offer(self, member_id: int) -> None:
        items = await delivery_actions.offer(self.core, member_id, self.handoff)
        if items:
            self._push_inbox(items[0].project_id, items, reconcile=False)

    def _push_inbox(self, project_id: int, items: list[Any], *, reconcile: bool) -> None:
        self.push(
            {
                "type": "inbox",
                "project_id": project_id,
                "reconcile": reconcile,
                "deliveries": [i.to_wire() for i in items],
            }
        )

    def _external(self) -> int:
        if self.external_member is None:
            raise ForbiddenError(
                "only an external agent's connection confirms deliveries", code="not_external"
            )
        return self.external_member

    def _agent_project(self) -> int | None:
        """The project of this connection's agent (declared to the writer), if it is one."""
        if self.identity and self.identity.agent:
            return self.identity.agent.project_id
        return None

    async def on_received(self, frame: p.ReceivedFrame) -> None:
        await turn_actions.confirm_external(
            self.core,
            self._external(),
            frame.delivery_ids,
            DeliveryState.DELIVERED,
            project_id=self._agent_project(),
        )

    async def on_consume(self, frame: p.ConsumeFrame) -> None:
        member_id = self._external()
        cap = project_id = None
        if self.identity and self.identity.agent:
            project_id = self.identity.agent.project_id
            cap = (await turn_actions.limits(self.core, project_id)).agent_turn_cap
        await turn_actions.confirm_external(
            self.core,
            member_id,
            frame.delivery_ids,
            DeliveryState.CONSUMED,
            frame.mode,
            turn_cap=cap,
            project_id=project_id,
        )

    async def on_redeliver(self, frame: p.RedeliverFrame) -> None:
        member_id = self._external()
        await turn_actions.confirm_external(
            self.core,
            member_id,
            frame.delivery_ids,
            DeliveryState.PENDING,
            project_id=self._agent_project(),
        )
        await self._offer(member_id)

    # -- membership ----------------------------------------------------------------------------

    async def member(self, project_id: int) -> Member:
        """This connection's member in a project, fresh from the roster cache."""
        return (await self.member_and_roster(project_id))[0]

    async def member_and_roster(self, project_id: int) -> tuple[Member, ProjectRoster]:
        assert self.identity is not None
        member_id = self.member_ids.get(project_id)
        if member_id is None:
            member_id = await self._lookup_member(project_id)
            self.member_ids[project_id] = member_id
        roster = self.core.rosters.peek(project_id) or await self.core.rosters.get(project_id)
        return _current(roster, member_id), roster

    def _cached_member(self, project_id: int) -> tuple[Member, ProjectRoster] | None:
        """:meth:`member_and_roster` when both are cached (None: await that)."""
        member_id = self.member_ids.get(project_id)
        roster = self.core.rosters.peek(project_id) if member_id is not None else None
        if roster is None or member_id is None:
            return None
        return _current(roster, member_id), roster

    async def _lookup_member(self, project_id: int) -> int:
        assert self.identity is not None
        if self.identity.agent is not None:
            if self.identity.agent.project_id != project_id:
                raise ForbiddenError("this token belongs to another project", code="not_member")
            return self.identity.agent.id
        user = self.identity.user
        assert user is not None
        found = await self.core.db.read(
            lambda conn: members_store.for_user(conn, project_id, user.id)
        )
        if found is None:
            raise NotFoundError("no such project, or you are not in it", code="not_member")
        return found.id

    # -- handlers ------------------------------------------------------------------------------

    async def on_auth(self, frame: p.AuthFrame) -> None:
        raise AuthError("already authenticated", code="already_authenticated")

    async def on_ping(self, frame: p.PingFrame) -> None:
        self.push({"type": "pong", "req_id": frame.req_id})

    async def on_subscribe(self, frame: p.SubscribeFrame) -> None:
        project_id = frame.project_id
        member = await self.member(project_id)
        old = self.subscriptions.pop(project_id, None)
        if old is not None:
            self.core.hub.unsubscribe(old)
        # Register before reading the head: whatever commits from here on is buffered.
        sub = self.core.hub.subscribe(project_id, self.outbox, member.id)
        self.subscriptions[project_id] = sub
        try:
            await self._start_subscription(frame, member, sub)
        except BaseException:
            self.core.hub.unsubscribe(sub)
            self.subscriptions.pop(project_id, None)
            raise

    async def _start_subscription(
        self, frame: p.SubscribeFrame, member: Member, sub: Subscription
    ) -> None:
        project_id = frame.project_id

        project, members, cursors = await self.core.db.read(
            partial(subscriptions_store.snapshot, project_id=project_id)
        )
        assert project is not None
        roster = await self.core.rosters.get(project_id)
        reason = resume.resync_reason(
            since=frame.since,
            epoch=frame.epoch,
            head_seq=project.last_seq,
            current_epoch=project.epoch,
        )
        if reason is not None:
            self.core.hub.unsubscribe(sub)
            del self.subscriptions[project_id]
            self.push(
                {
                    "type": "resync_required",
                    "req_id": frame.req_id,
                    "project_id": project_id,
                    "epoch": project.epoch,
                    "head_seq": project.last_seq,
                    "reason": reason,
                }
            )
            return
        self.push(
            {
                "type": "subscribed",
                "req_id": frame.req_id,
                # The workspace object as last inspected (no git on this path; HTTP answers
                # inspect it, see room.actions.workspaces).
                "project": project_for(
                    project,
                    viewer_kind(member),
                    {"workspace": self.core.workspaces[project.id]}
                    if project.id in self.core.workspaces
                    else None,
                ),
                "you": member.id,
                "members": members_for(members, project.state, member),
                "read_cursors": {str(k): v for k, v in cursors.items()},
                "presence": presence.snapshot(self.core, project_id, roster, project.state),
                "since": frame.since,
                "head_seq": project.last_seq,
            }
        )
        last = resume.replay_from(frame.since, project.last_seq)
        if frame.since is not None:
            last = await self._replay(sub, last)
        await relay_actions.go_live(
            self.core.hub, self.core.relay, sub, last, partial(self._replay, sub)
        )
        # An answer streaming now: its draft, after the replay (room.agents.drafts: forgotten
        # before the answer is posted, so never beside the message it becomes).
        if sub.active:
            for draft in drafts.current(self.core, project_id):
                self.outbox.push(draft)

    async def _replay(self, sub: Subscription, last: int) -> int:
        """Send the subscription's events after ``last`` from the database, a page at a time;
        the last seq sent."""
        project_id = sub.project_id
        while True:
            page = await self.core.db.read(
                partial(
                    messages_store.replay,
                    project_id=project_id,
                    after_seq=last,
                    limit=REPLAY_PAGE,
                )
            )
            if not sub.active:  # cut meanwhile (the member left): replay no further
                return last
            if page:
                last = page[-1][0]
                self.outbox.push(
                    f'{{"type":"batch","project_id":{project_id},"frames":['
                    + ",".join(f for _, f in page)
                    + "]}"
                )
            if len(page) < REPLAY_PAGE or self.outbox.closed:
                return last
            # Read the next page only once this one left for the socket: a client that
            # does not read holds at most a page or two, not the whole backlog.
            if not await self.outbox.wait_sent(REPLAY_SEND_SECS):
                self.outbox.cut("slow consumer during replay; resume with since")
                return last

    async def on_unsubscribe(self, frame: p.UnsubscribeFrame) -> None:
        sub = self.subscriptions.pop(frame.project_id, None)
        if sub is not None:
            self.core.hub.unsubscribe(sub)
        self.push({"type": "unsubscribed", "req_id": frame.req_id, "project_id": frame.project_id})

    async def on_send(self, frame: p.SendFrame) -> None:
        if self._inflight >= MAX_INFLIGHT_SENDS:
            self._send_room.clear()
            await self._send_room.wait()
        member, roster = await self.member_and_roster(frame.project_id)
        self._queue_send(frame, member, roster)

    def _send_at_once(self, frame: p.SendFrame) -> bool:
        """:meth:`on_send` without a coroutine when nothing needs waiting for: the connection
        has room for another send in flight, and its member and the roster are cached."""
        if self._inflight >= MAX_INFLIGHT_SENDS:
            return False
        cached = self._cached_member(frame.project_id)
        if cached is None:
            return False
        self._queue_send(frame, *cached)
        return True

    def _queue_send(self, frame: p.SendFrame, member: Member, roster: ProjectRoster) -> None:
        message_actions.queue_send(
            self.core,
            member,
            roster,
            partial(self._acked, frame),
            client_txn_id=frame.client_txn_id,
            body=frame.body,
            reply_to=frame.reply_to,
            chips=frame.chips,
            as_plain_text=frame.as_plain_text,
            attachments=frame.attachments,
        )
        self._inflight += 1

    def _acked(
        self,
        frame: p.SendFrame,
        ack: message_actions.Ack | None,
        error: BaseException | None,
    ) -> None:
        self._inflight -= 1
        if self._inflight <= MAX_INFLIGHT_SENDS // 2:
            self._send_room.set()
        if error is None:
            assert ack is not None
            self.outbox.push(ack.to_text(frame.client_txn_id, frame.req_id))
        elif isinstance(error, RoomError):
            details = {"client_txn_id": frame.client_txn_id, **error.details}
            self.push(p.error_frame(error.code, error.message, frame.req_id, **details))
        else:
            log.error("send failed", exc_info=error)
            self.push(
                p.error_frame(
                    "internal", "the send failed", frame.req_id, client_txn_id=frame.client_txn_id
                )
            )

    async def on_edit(self, frame: p.EditFrame) -> None:
        member = await self.member(frame.project_id)
        result = await message_edits.edit_message(
            self.core, member, frame.message_id, frame.body, as_plain_text=frame.as_plain_text
        )
        self.push(
            {
                "type": "ack",
                "req_id": frame.req_id,
                "message_id": result["id"],
                "seq": result["event_seq"],
                "duplicate": False,
            }
        )

    async def on_delete(self, frame: p.DeleteFrame) -> None:
        member = await self.member(frame.project_id)
        result = await message_edits.delete_message(self.core, member, frame.message_id)
        self.push(
            {
                "type": "ack",
                "req_id": frame.req_id,
                "message_id": result["id"],
                "seq": result["event_seq"],
                "duplicate": False,
            }
        )

    async def on_react(self, frame: p.ReactFrame) -> None:
        member = await self.member(frame.project_id)
        result = await reaction_actions.react(
            self.core, member, frame.message_id, frame.emoji, remove=frame.remove
        )
        self.push(
            {"type": "ack", "req_id": frame.req_id, "duplicate": not result["changed"], **result}
        )

    async def on_history(self, frame: p.HistoryFrame) -> None:
        await self.member(frame.project_id)

        async def answer() -> None:
            frames, has_more = await self.core.db.read(
                lambda conn: messages_store.history(
                    conn, frame.project_id, frame.before, frame.limit
                )
            )
            req = f',"req_id":{p.encode(frame.req_id)}' if frame.req_id is not None else ""
            self.outbox.push(
                f'{{"type":"history","project_id":{frame.project_id}{req},'
                f'"before":{p.encode(frame.before)},"has_more":{p.encode(has_more)},'
                f'"messages":[{",".join(frames)}]}}'
            )

        self._spawn(answer(), frame.req_id)

    async def on_typing(self, frame: p.TypingFrame) -> None:
        member = await self._hinting_member(frame.project_id)
        if member is not None:
            chatter.typing(self.core, member, frame.active, exclude=self.outbox)

    async def on_read(self, frame: p.ReadFrame) -> None:
        if frame.unread:  # a person's act, answered (an ack or an error), never dropped
            cursor = await chatter.mark_unread(
                self.core, await self.member(frame.project_id), frame.seq
            )
            self.push({"type": "ack", "req_id": frame.req_id, "read_cursor": cursor})
            return
        hinting = await self._hinting_member(frame.project_id)
        if hinting is not None:
            await chatter.mark_read(self.core, hinting, frame.seq)

    async def _hinting_member(self, project_id: int) -> Member | None:
        """The member behind a typing hint or read cursor; None (the hint is dropped without
        an answer) once they left: a page sends these on its own, and they mean nothing now."""
        try:
            return await self.member(project_id)
        except ForbiddenError as exc:
            if exc.code == "not_member" and project_id in self.member_ids:
                return None
            raise

    async def on_preview(self, frame: p.PreviewFrame) -> None:
        member = await self.member(frame.project_id)
        # Resolving a draft costs the event loop; a page asks once typing pauses, a flood waits.
        wait_ms = self.core.chatter.take((member.id, "preview"))
        if wait_ms:
            raise RateLimitedError("previewing too fast; slow down", retry_after_ms=wait_ms)
        roster = await self.core.rosters.get(frame.project_id)
        addressing = message_actions.resolve_recipients(
            member, frame.body, list(frame.chips), roster
        )
        self.push(
            {
                "type": "preview",
                "req_id": frame.req_id,
                "project_id": frame.project_id,
                **addressing.to_wire(roster),
                # What the recipients line says when it names nobody (or everyone).
                "everyone": addressing.resolution.everyone,
                "humans_only": addressing.resolution.humans_only_group,
            }
        )

    async def on_search(self, frame: p.SearchFrame) -> None:
        member = await self.member(frame.project_id)
        kinds = frame.kind.split(",") if isinstance(frame.kind, str) else frame.kind

        async def answer() -> None:
            body = await search_actions.search(
                self.core,
                member,
                frame.q,
                kinds=[k.strip() for k in kinds if k.strip()] if kinds else None,
                by=frame.by,
                since=frame.since,
                until=frame.until,
                limit=frame.limit,
                markdown=True,
            )
            self.push(
                {
                    "type": "search_results",
                    "req_id": frame.req_id,
                    "project_id": frame.project_id,
                    **body,
                }
            )

        self._spawn(answer(), frame.req_id)

    async def on_receipts(self, frame: p.ReceiptsFrame) -> None:
        await self.member(frame.project_id)

        rows = await self.core.db.read(
            partial(
                subscriptions_store.receipts,
                project_id=frame.project_id,
                message_id=frame.message_id,
            )
        )
        if rows is None:
            raise NotFoundError("no such message in this project", code="no_message")
        self.push(
            {
                "type": "receipts",
                "req_id": frame.req_id,
                "project_id": frame.project_id,
                "message_id": frame.message_id,
                "deliveries": rows,
            }
        )
