"""Sending messages (editing and deleting them: :mod:`room.actions.message_edits`; read cursors
and typing: :mod:`room.actions.chatter`).

Every write: validate → one transaction (message + mentions + delivery rows + event) → commit →
publish to the hub → wake the runtime (docs/architecture.md, "The path of one send"). Recipients
come only from the mention resolver plus one rule for a message that mentions nobody: a person's
goes to the lead agent, an agent's to nobody (docs/architecture.md, "Mentions and recipients";
shared/mentions/SPEC.md).

Delivery rows are written for agent recipients: the ledger tracks hand-off to agent sessions.
Humans are reached through their mentions and read cursors.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any, NamedTuple

from room.actions import attachments as attachment_actions
from room.actions import threads as thread_actions
from room.errors import (
    BadRequestError,
    ConflictError,
    ForbiddenError,
    MentionsUnresolvedError,
    NotFoundError,
    RateLimitedError,
    TxnConflictError,
)
from room.rules import ledger
from room.rules import mentions as mention_rules
from room.rules.attachments import wire as attachment_wire
from room.rules.effects import Broadcast, Publish, Wake
from room.rules.entities import Member
from room.rules.lifecycle import ActorKind, ProjectState, posting_open
from room.rules.protocol import encode
from room.rules.render import plain_text, render
from room.services import ProjectRoster, Services
from room.store import Appends, Tx
from room.store import attachments as attachments_store
from room.store import brakes as brakes_store
from room.store import deliveries as deliveries_store
from room.store import messages as messages_store
from room.store import projects as projects_store
from room.store import threads as threads_store
from room.store.db import UNKNOWN, Prefetch, Sent, WriteJob
from room.store.dialect import Connection

log = logging.getLogger(__name__)

# json.dumps(text, ensure_ascii=False) of one string, without building an encoder per call.
_encode_string = json.encoder.encode_basestring

# Derived once from the lifecycle table: the send path checks strings, not enums.
POSTING_STATES = {
    "human": frozenset(s.value for s in ProjectState if posting_open(s, ActorKind.MEMBER)),
    "agent": frozenset(s.value for s in ProjectState if posting_open(s, ActorKind.AGENT)),
}

_PENDING = ledger.DeliveryState.PENDING  # read once (an enum's attributes are slow to read)

# Diagnostics that stop a send unless the sender explicitly sends as plain text.
BLOCKING_DIAGNOSTICS = frozenset(
    {"needs_boundary", "ambiguous", "unknown", "departed", "disabled", "all_not_allowed"}
)


class Ack(NamedTuple):
    """What a send is acknowledged with (a tuple: built once per send, several times faster
    than a frozen dataclass)."""

    message_id: int
    seq: int
    duplicate: bool
    frame: str

    def to_text(self, client_txn_id: str, req_id: str | None) -> str:
        """The ``ack`` frame (built directly: one per send)."""
        req = "" if req_id is None else f',"req_id":{_encode_string(req_id)}'
        return (
            f'{{"type":"ack","client_txn_id":{_encode_string(client_txn_id)},'
            f'"message_id":{self.message_id},"seq":{self.seq},'
            f'"duplicate":{"true" if self.duplicate else "false"}{req}}}'
        )


@dataclass(frozen=True, slots=True)
class Addressing:
    """Who a draft reaches: the resolver's output plus the rule for a message that mentions
    nobody (a person's goes to the lead agent)."""

    resolution: mention_rules.Resolution
    mentioned: tuple[int, ...]
    recipients: tuple[int, ...]  # agents that get a delivery row
    blocking: tuple[mention_rules.Diagnostic, ...]
    to_lead_by_default: bool  # on the wire: ``default_routed``

    def to_wire(self, roster: ProjectRoster) -> dict[str, Any]:
        return {
            "mentioned": list(self.mentioned),
            "recipients": list(self.recipients),
            "agents_reached": len(self.recipients),
            "default_routed": self.to_lead_by_default,
            "diagnostics": [
                {
                    "code": d.code,
                    "name": d.name,
                    "start": d.start,
                    "end": d.end,
                    "hint": d.hint,
                    "candidates": [int(c) for c in d.candidates if c.isdigit()],
                    "blocking": d.code in BLOCKING_DIAGNOSTICS,
                }
                for d in self.resolution.diagnostics
            ],
            "mentions": [
                {"member_id": int(m.member_id), "start": m.start, "end": m.end, "via": m.via}
                for m in self.resolution.mentions
            ],
        }


def resolve_recipients(
    sender: Member, body: str, chips: list[int], roster: ProjectRoster
) -> Addressing:
    """Resolve mentions and add the lead agent to a person's message that mentions nobody
    (docs/architecture.md, "Mentions and recipients"). Pure given the roster.

    A message that names only its sender (`@me 记一下`) is a note to self: it named someone,
    so it is not routed to the lead (shared/mentions/SPEC.md §7)."""
    resolution = mention_rules.resolve(body, roster.roster, str(sender.id), [str(c) for c in chips])
    mentioned: tuple[int, ...] = ()
    blocking: tuple[mention_rules.Diagnostic, ...] = ()
    note_to_self = False
    if resolution.mentioned:  # most messages name nobody: no generator runs for them
        mentioned = tuple(sorted(int(m) for m in resolution.mentioned if int(m) != sender.id))
    if roster.disabled and mentioned:
        resolution, mentioned = _without_disabled(resolution, mentioned, roster)
    if resolution.diagnostics:
        blocking = tuple(d for d in resolution.diagnostics if d.code in BLOCKING_DIAGNOSTICS)
        note_to_self = any(d.code == "self" for d in resolution.diagnostics)
    targets = list(mentioned)
    to_lead_by_default = False
    if (
        not targets
        and not note_to_self
        and sender.kind == "human"
        and not resolution.humans_only_group
        and not resolution.everyone
        and roster.lead_id is not None
        and roster.lead_id != sender.id
    ):
        lead = roster.member(roster.lead_id)
        if lead is not None and lead.status != "left":
            targets = [lead.id]
            to_lead_by_default = True
    recipients = []
    for member_id in targets:
        member = roster.member(member_id)
        if member is not None and member.kind == "agent" and member.status != "left":
            recipients.append(member_id)
    return Addressing(resolution, mentioned, tuple(recipients), blocking, to_lead_by_default)


def _without_disabled(
    resolution: mention_rules.Resolution, mentioned: tuple[int, ...], roster: ProjectRoster
) -> tuple[mention_rules.Resolution, tuple[int, ...]]:
    """People whose accounts are disabled are not reached: one named on purpose (by name or
    chip) is a blocking ``disabled`` diagnostic; one in ``@all``/``@humans`` is left out."""
    diagnostics = list(resolution.diagnostics)
    named: set[int] = set()
    for m in resolution.mentions:
        member_id = int(m.member_id)
        if (
            member_id in roster.disabled
            and m.via not in ("all", "humans")
            and member_id not in named
        ):
            named.add(member_id)
            person = roster.member(member_id)
            name = person.display_name if person is not None else m.member_id
            diagnostics.append(
                # A diagnostic (SPEC §7, translated as diag.<code>), not an error code.
                mention_rules.Diagnostic(
                    "disabled",
                    name,
                    m.start,
                    m.end,
                    f"{name} 的账号已停用，不会收到这条消息",
                    (m.member_id,),
                )
            )
    kept = tuple(m for m in mentioned if m not in roster.disabled)
    return replace(resolution, diagnostics=tuple(diagnostics)), kept


_PLAIN_HEAD = b"None|[]|0|"  # _digest's head for a send with no reply, chips, flag or files


def _digest(
    body: str, reply_to: int | None, chips: list[int], plain: bool, files: list[int]
) -> str:
    """What a retransmit must repeat exactly (same client_txn_id, same content)."""
    if reply_to is None and not chips and not plain and not files:
        head = _PLAIN_HEAD  # most sends: the same bytes, not formatted again
    else:
        head = f"{reply_to}|{sorted(set(chips)) if chips else '[]'}|{int(plain)}|".encode()
        if files:
            head += f"{files}|".encode()
    return hashlib.blake2b(head + body.encode(), digest_size=16).hexdigest()


def check_body(core: Services, body: str, has_attachments: bool = False) -> str:
    if not body.strip() and not has_attachments:
        raise BadRequestError("a message needs some text", code="empty_body")
    if len(body) > core.settings.max_body_chars:
        raise BadRequestError(
            f"a message may hold at most {core.settings.max_body_chars} characters",
            code="body_too_long",
            limit=core.settings.max_body_chars,
        )
    return body


SendDone = Callable[[Ack | None, BaseException | None], None]


class StaleRosterError(ConflictError):
    """The roster a send was addressed with changed before its job ran (a member joined or
    left, in this process or another): the send is addressed again with the new roster."""

    code = "roster_changed"


# How many times a send is addressed again when its roster changed under it each time.
STALE_ROSTER_RETRIES = 3


def submit_send(
    core: Services, sender: Member, roster: ProjectRoster, **kwargs: Any
) -> asyncio.Future[Ack]:
    """Validate and queue a send; the future resolves with the ack after its commit.

    Raises at once (nothing queued) for bad input, rate limiting and unresolved mentions.
    The keyword arguments are :func:`_send_job`'s.
    """
    future: asyncio.Future[Ack] = asyncio.get_running_loop().create_future()

    def done(ack: Ack | None, error: BaseException | None) -> None:
        if future.done():
            return
        if error is not None:
            future.set_exception(error)
        else:
            assert ack is not None
            future.set_result(ack)

    queue_send(core, sender, roster, done, **kwargs)
    return future


def queue_send(
    core: Services,
    sender: Member,
    roster: ProjectRoster,
    on_done: SendDone,
    *,
    retries: int = STALE_ROSTER_RETRIES,
    **kwargs: Any,
) -> None:
    """:func:`submit_send` that calls ``on_done(ack, error)`` after the commit instead of
    resolving a future (a connection's sends: no future, no extra loop turn per ack).

    A send whose roster changed before its job ran (:class:`StaleRosterError`) is addressed
    again with the fresh roster (at most ``retries`` times, not rate limited again); its
    caller sees only the final outcome."""
    job, prefetch = _send_job(core, sender, roster, **kwargs)

    def done(ack: Ack | None, error: BaseException | None) -> None:
        if isinstance(error, StaleRosterError) and retries > 0:
            core.rosters.invalidate(sender.project_id)
            readdress = _readdress(core, sender, on_done, retries - 1, kwargs)
            asyncio.get_running_loop().create_task(readdress)
            return
        on_done(ack, error)

    core.db.submit_then(job, done, appends=True, prefetch=prefetch, locks=(sender.project_id,))


async def _readdress(
    core: Services, sender: Member, on_done: SendDone, retries: int, kwargs: dict[str, Any]
) -> None:
    try:
        fresh = await core.rosters.get(sender.project_id)
        member = fresh.member(sender.id) or sender
        again = {**kwargs, "rate_limited": False}
        queue_send(core, member, fresh, on_done, retries=retries, **again)
    except Exception as exc:  # refused with the new roster (a member left …): said to the caller
        on_done(None, exc)


def _send_job(
    core: Services,
    sender: Member,
    roster: ProjectRoster,
    *,
    client_txn_id: str,
    body: str,
    reply_to: int | None = None,
    chips: list[int] | None = None,
    as_plain_text: bool = False,
    kind: str = "chat",
    meta: dict[str, Any] | None = None,
    rate_limited: bool = True,
    attachments: list[int] | None = None,
) -> tuple[WriteJob[Ack], tuple[Prefetch, Any]]:
    """Validate a send and make its write job (submitted with ``appends=True``) and the
    batch lookup of its ``client_txn_id``.

    Everything that needs no database runs here, before the job is queued; the job itself is
    the steps of one send inside the batch's transaction (docs/architecture.md, "The path of
    one send")."""
    chips = chips or []
    files = attachments or []
    check_draft(core, sender, roster, body, chips, rate_limited, bool(files))
    addressing = address(sender, body, chips, roster, as_plain_text)
    html = render(body)
    digest = _digest(body, reply_to, chips, as_plain_text, files)
    # What other parts of the server do with a message once it is stored (a requirement
    # change): registered on the services, each runs as its own write after this one commits.
    follow_ups = [make for hook in core.send_hooks if (make := hook(sender, body))]
    project_id = sender.project_id
    mention_rows = [(int(m.member_id), m.via) for m in addressing.resolution.mentions]

    def job(conn: Connection, tx: Tx) -> Ack:
        appends = tx.appends
        earlier = _earlier_send(conn, appends, sender.id, client_txn_id)
        if earlier is not None:
            return _retransmit_ack(earlier, digest, client_txn_id)
        state = check_posting(conn, sender, appends)
        if roster.version is not None:
            # Under the project's lock: no other transaction changes the roster until the
            # commit, so a version that still matches is the roster the message reaches.
            found = projects_store.roster_version(conn, project_id, appends)
            if found != roster.version:
                raise StaleRosterError(
                    "the project's members changed; addressing the message again",
                    version=found,
                )
        excerpt = _reply_excerpt(conn, project_id, reply_to) if reply_to else None
        root_id = threads_store.root_of(conn, reply_to) if reply_to else None
        full_meta = meta
        if files:  # the sender's own unsent uploads in this project, or the send is refused
            rows = attachment_actions.check_owned(conn, sender, files)
            full_meta = {**(meta or {}), "attachments": [attachment_wire(r) for r in rows]}
        message_id, seq, obj = append_message(
            conn,
            tx,
            project_id=project_id,
            author_id=sender.id,
            kind=kind,
            body=body,
            html=html,
            reply_to=reply_to,
            reply_excerpt=excerpt,
            mentions=addressing.mentioned,
            client_txn_id=client_txn_id,
            txn_digest=digest,
            meta=full_meta,
        )
        if files:
            attachments_store.set_message(conn, files, message_id)
        if root_id is not None:
            thread_actions.record_reply(
                conn, tx, project_id=project_id, root_id=root_id, message_id=message_id,
                sender=sender,
            )  # fmt: skip
        if sender.kind == "human":
            # The loop brake counts agent turns since the last human message.
            brakes_store.reset_agent_turns(conn, tx, project_id)
        _store_recipients(conn, tx, project_id, message_id, mention_rows, addressing, roster, state)
        for make in follow_ups:
            tx.emit(make(message_id))
        if appends is not None:
            appends.remember_sent(sender.id, client_txn_id, (message_id, seq, digest, obj))
        return Ack(message_id, seq, False, obj)

    return job, (messages_store.find_txns, (sender.id, client_txn_id))


def check_draft(
    core: Services,
    sender: Member,
    roster: ProjectRoster,
    body: str,
    chips: list[int],
    rate_limited: bool,
    has_attachments: bool = False,
) -> None:
    """Refuse a draft before anything is queued: its text (which may be empty when files are
    attached), a sender who left, a chip naming a non-member, or (when ``rate_limited``) a
    sender over the send rate."""
    check_body(core, body, has_attachments)
    if sender.status == "left":
        raise ForbiddenError("you have left this project", code="member_left")
    for chip in chips:
        member = roster.member(chip)
        if member is None:
            raise BadRequestError(f"chip {chip} is not a member of this project", code="bad_chip")
    if rate_limited:
        wait_ms = core.limiter.take(sender.id)
        if wait_ms:
            raise RateLimitedError("sending too fast; slow down", retry_after_ms=wait_ms)


def address(
    sender: Member, body: str, chips: list[int], roster: ProjectRoster, as_plain_text: bool
) -> Addressing:
    """:func:`resolve_recipients`, refusing a draft with unresolved mentions unless the sender
    sends it as plain text."""
    addressing = resolve_recipients(sender, body, chips, roster)
    if addressing.blocking and not as_plain_text:
        raise MentionsUnresolvedError(
            "some @mentions are unresolved; fix them or send as plain text",
            diagnostics=addressing.to_wire(roster)["diagnostics"],
        )
    return addressing


def _earlier_send(
    conn: Connection, appends: Appends | None, sender_id: int, client_txn_id: str
) -> Sent | None:
    """The message an earlier send with this ``client_txn_id`` stored, if any. With
    ``appends=True`` the batch is asked first (it knows its own sends and the prefetched
    lookups)."""
    if appends is not None:
        known = appends.sent(sender_id, client_txn_id)
        if known is not UNKNOWN:
            return known
    return messages_store.find_txn(conn, sender_id, client_txn_id)


def _retransmit_ack(earlier: Sent, digest: str, client_txn_id: str) -> Ack:
    """A retransmit is acknowledged with the original; reusing the id for other content is
    refused."""
    message_id, seq, old_digest, frame = earlier
    if old_digest != digest:
        raise TxnConflictError(
            "this client_txn_id was already used for a different message",
            client_txn_id=client_txn_id,
            message_id=message_id,
        )
    return Ack(message_id, seq, True, frame)


def _store_recipients(
    conn: Connection,
    tx: Tx,
    project_id: int,
    message_id: int,
    mention_rows: list[tuple[int, str]],
    addressing: Addressing,
    roster: ProjectRoster,
    state: str,
) -> None:
    """The message's mention rows and its agents' delivery rows (``held`` while the project or
    the agent is paused), and the wake-up of the agents it reached with a ``pending`` one (a
    held delivery waits for the resume, which wakes its agent)."""
    appends = tx.appends
    if mention_rows:
        messages_store.insert_mentions(conn, message_id, mention_rows, appends)
    recipients = addressing.recipients
    if not recipients:
        return
    states = [(r, initial_state(roster, r, state)) for r in recipients]
    deliveries_store.insert_many(
        conn,
        project_id=project_id,
        message_id=message_id,
        recipients=states,
        now=tx.now,
        appends=appends,
    )
    woken = tuple(r for r, initial in states if initial == _PENDING)
    if woken:
        tx.emit(Wake(project_id, woken))


def append_message(
    conn: Connection,
    tx: Tx,
    *,
    project_id: int,
    author_id: int | None,
    kind: str,
    body: str,
    html: str,
    reply_to: int | None = None,
    reply_excerpt: dict[str, Any] | None = None,
    mentions: Iterable[int] = (),
    client_txn_id: str | None = None,
    txn_digest: str | None = None,
    meta: dict[str, Any] | None = None,
) -> tuple[int, int, str]:
    """Append a message to a project's timeline inside the caller's transaction: the next seq,
    the row, its pre-encoded wire object, its stream event, and its publication (an effect).
    Returns (message id, seq, wire object)."""
    appends = tx.appends
    seq = projects_store.next_seq(conn, project_id, tx.now, appends)
    message_id = tx.next_id(conn, "messages")
    obj = messages_store.message_object(
        message_id=message_id,
        project_id=project_id,
        seq=seq,
        author_id=author_id,
        kind=kind,
        body=body,
        html=html,
        reply_to=reply_to,
        reply_excerpt=reply_excerpt,
        mentions=mentions,
        client_txn_id=client_txn_id,
        created_at=tx.now,
        meta=meta,
    )
    messages_store.insert(
        conn,
        message_id=message_id,
        project_id=project_id,
        seq=seq,
        author_id=author_id,
        kind=kind,
        body=body,
        reply_to=reply_to,
        client_txn_id=client_txn_id,
        txn_digest=txn_digest,
        frame=obj,
        now=tx.now,
        appends=appends,
    )
    messages_store.insert_event(
        conn,
        project_id=project_id,
        seq=seq,
        kind="message",
        message_id=message_id,
        frame=None,
        now=tx.now,
        appends=appends,
    )
    tx.emit(Publish(project_id, seq, messages_store.event_frame(project_id, seq, obj)))
    return message_id, seq, obj


def publish_deliveries(
    tx: Tx,
    rows: Sequence[tuple[int, int, int, int]],
    state: str,
    mode: str | None = None,
    reason: str | None = None,
    reason_code: str | None = None,
) -> None:
    """Announce ledger changes after the commit: one ``delivery`` frame per (delivery id,
    project id, message id, recipient id) row, for the labels under each message."""
    if not rows:
        return
    for delivery_id, project_id, message_id, recipient_id in rows:
        tx.emit(
            Broadcast(
                project_id,
                encode(
                    {
                        "type": "delivery",
                        "project_id": project_id,
                        "message_id": message_id,
                        "recipient_id": recipient_id,
                        "delivery_id": delivery_id,
                        "state": state,
                        "mode": mode,
                        "reason": reason,
                        "reason_code": reason_code,
                        "reason_detail": ledger.detail_of(reason_code, reason),
                    }
                ),
            )
        )


def initial_state(roster: ProjectRoster, member_id: int, project_state: str) -> str:
    """The state a new delivery to ``member_id`` starts in (``held`` while the project or the
    agent is paused)."""
    member = roster.member(member_id)
    return ledger.initial_state(project_state, member.status if member else "active")


def _reply_excerpt(conn: Connection, project_id: int, reply_to: int) -> dict[str, Any]:
    """Who and what a reply answers, shown above it (a message still waiting in the batch is
    written first: see room.store.db.WriterConnection)."""
    row = messages_store.get_row(conn, reply_to)
    if row is None or row["project_id"] != project_id:
        raise NotFoundError("the message you reply to is not in this project", code="bad_reply_to")
    return excerpt_of(row)


def excerpt_of(row: dict[str, Any]) -> dict[str, Any]:
    """The quote a reply carries of the message it answers: its author and seq and its text as
    plain words (``room.rules.render.plain_text``); nothing of a deleted message's text."""
    if row["deleted_at"] is not None:
        return {"author_id": row["author_id"], "seq": row["seq"], "excerpt": "", "deleted": True}
    return {"author_id": row["author_id"], "seq": row["seq"], "excerpt": plain_text(row["body"])}


async def send_message(
    core: Services, sender: Member, *, client_txn_id: str, body: str, **kwargs: Any
) -> Ack:
    roster = await core.rosters.get(sender.project_id)
    return await submit_send(core, sender, roster, client_txn_id=client_txn_id, body=body, **kwargs)


def check_posting(conn: Connection, member: Member, appends: Appends | None = None) -> str:
    """The project's state, if ``member`` may post or change messages in it now."""
    state = projects_store.state_of(conn, member.project_id, appends) or "purged"
    if state not in POSTING_STATES[member.kind]:
        raise ConflictError(
            f"the project is {state}; it does not accept messages now",
            code="project_not_accepting",
            state=state,
        )
    return state
