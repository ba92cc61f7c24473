"""A small client for external agent members, and ``room agent`` built on it.

An external agent (an agent member with ``driver: "external"``) connects to ``/ws`` with its
bearer token and receives ``inbox`` frames. For each batch this client:

1. confirms receipt (``received`` → the ledger says ``delivered``),
2. confirms consumption (``consume``, mode ``queue``) as its handler starts,
3. runs the handler, and posts its answer with a ``client_txn_id`` derived from the batch, so a
   retransmit after a reconnect is applied once, replying to the last message of the batch.

A delivery's files (``attachments``) are downloaded with the token into ``attachments_dir`` (for
``room agent``: ``.room/attachments/`` of the folder it runs in) before the handler runs, and each
gains a ``path`` the handler can open.

On every connection the server first lists the deliveries whose hand-off was interrupted
(``reconcile: true``): those this client already handled (it remembers them, optionally in a
state file) are confirmed with ``consume``; the others are asked for again with ``redeliver``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

log = logging.getLogger(__name__)

RECONNECT_MAX_SECS = 30.0
COMMAND_TIMEOUT_SECS = 600.0
MAX_REPLY_CHARS = 30_000


@dataclass
class Batch:
    """What a handler gets: the deliveries, each with its author's handle and name."""

    project_id: int
    deliveries: list[dict[str, Any]]

    @classmethod
    def build(
        cls, project_id: int, deliveries: list[dict[str, Any]], members: dict[int, dict[str, Any]]
    ) -> Batch:
        items = []
        for d in deliveries:
            author = members.get(d.get("author_id") or 0, {})
            items.append(
                {
                    **d,
                    "author_handle": d.get("author_handle") or author.get("handle"),
                    "author_name": d.get("author_name") or author.get("display_name"),
                }
            )
        return cls(project_id, items)

    def to_json(self) -> str:
        return json.dumps(
            {"project_id": self.project_id, "deliveries": self.deliveries},
            ensure_ascii=False,
            indent=2,
        )


Handler = Callable[[Batch], Awaitable[str | None]]


def ws_url(url: str) -> str:
    parts = urlsplit(url)
    scheme = {"http": "ws", "https": "wss", "ws": "ws", "wss": "wss"}.get(parts.scheme)
    if scheme is None or not parts.netloc:
        raise ValueError(f"not a server URL: {url!r}")
    return f"{scheme}://{parts.netloc}/ws"


@dataclass
class AgentClient:
    url: str
    token: str
    handler: Handler
    state_file: Path | None = None
    handled: set[int] = field(default_factory=set)
    members: dict[int, dict[str, Any]] = field(default_factory=dict)
    project_id: int | None = None
    attachments_dir: Path | None = None

    def __post_init__(self) -> None:
        if self.state_file is not None and self.state_file.exists():
            self.handled = set(json.loads(self.state_file.read_text() or "[]"))

    def _remember(self, ids: Sequence[int]) -> None:
        self.handled.update(ids)
        if self.state_file is not None:
            recent = sorted(self.handled)[-10_000:]
            tmp = self.state_file.with_suffix(".tmp")
            tmp.write_text(json.dumps(recent))
            tmp.replace(self.state_file)

    async def run(self, stop: asyncio.Event | None = None) -> None:
        """Serve until ``stop`` is set, reconnecting with backoff."""
        stop = stop or asyncio.Event()
        delay = 0.5
        while not stop.is_set():
            try:
                async with connect(
                    ws_url(self.url),
                    additional_headers={"Authorization": f"Bearer {self.token}"},
                    max_size=None,
                    compression=None,
                ) as ws:
                    delay = 0.5
                    await self._serve(ws, stop)
            except InvalidStatus as exc:
                log.error("the server refused the connection: %s", exc)
                raise
            except (OSError, ConnectionClosed) as exc:
                log.warning("connection lost (%s); reconnecting in %.1f s", exc, delay)
            if stop.is_set():
                return
            try:
                await asyncio.wait_for(stop.wait(), delay)
            except TimeoutError:
                pass
            delay = min(RECONNECT_MAX_SECS, delay * 2)

    async def _serve(self, ws: ClientConnection, stop: asyncio.Event) -> None:
        stopper = asyncio.ensure_future(stop.wait())
        try:
            while True:
                receiver = asyncio.ensure_future(ws.recv())
                done, _ = await asyncio.wait(
                    {receiver, stopper}, return_when=asyncio.FIRST_COMPLETED
                )
                if stopper in done:
                    receiver.cancel()
                    return
                frame = json.loads(receiver.result())
                await self._handle(ws, frame)
        finally:
            stopper.cancel()

    async def _handle(self, ws: ClientConnection, frame: dict[str, Any]) -> None:
        kind = frame.get("type")
        if kind == "hello":
            self.project_id = frame["identity"]["project_id"]
            await ws.send(json.dumps({"type": "subscribe", "project_id": self.project_id}))
        elif kind in ("subscribed", "members"):
            self.members = {m["id"]: m for m in frame["members"]}
        elif kind == "inbox":
            await self._inbox(ws, frame)
        elif kind == "error":
            log.warning("server error: %s %s", frame.get("code"), frame.get("message"))

    async def _inbox(self, ws: ClientConnection, frame: dict[str, Any]) -> None:
        deliveries = frame["deliveries"]
        ids = [d["delivery_id"] for d in deliveries]
        if frame.get("reconcile"):
            done = [i for i in ids if i in self.handled]
            again = [i for i in ids if i not in self.handled]
            if done:
                await ws.send(json.dumps({"type": "consume", "delivery_ids": done}))
            if again:
                await ws.send(json.dumps({"type": "redeliver", "delivery_ids": again}))
            return
        await ws.send(json.dumps({"type": "received", "delivery_ids": ids}))
        fresh = [d for d in deliveries if d["delivery_id"] not in self.handled]
        if not fresh:
            await ws.send(json.dumps({"type": "consume", "delivery_ids": ids}))
            return
        await ws.send(json.dumps({"type": "consume", "delivery_ids": ids, "mode": "queue"}))
        if self.attachments_dir is not None:
            await fetch_attachments(self.url, self.token, fresh, self.attachments_dir)
        batch = Batch.build(frame["project_id"], fresh, self.members)
        try:
            reply = await self.handler(batch)
        except Exception as exc:  # the agent's own failure is reported, not hidden
            log.exception("handler failed")
            reply = f"⚠️ 外部代理处理失败：{type(exc).__name__}: {exc}"
        if reply and reply.strip():
            await ws.send(
                json.dumps(
                    {
                        "type": "send",
                        "project_id": frame["project_id"],
                        "client_txn_id": f"agent-reply-{fresh[0]['delivery_id']}",
                        "body": reply.strip()[:MAX_REPLY_CHARS],
                        "reply_to": fresh[-1]["message_id"],
                        "as_plain_text": True,
                    },
                    ensure_ascii=False,
                )
            )
        self._remember(ids)


async def fetch_attachments(
    url: str, token: str, deliveries: list[dict[str, Any]], folder: Path
) -> None:
    """Download the deliveries' files into ``folder`` (streamed, in a thread; one already there
    with the right size is kept) and give each attachment its local ``path``. A file that cannot
    be had keeps no ``path`` (the handler still sees its ``url``)."""
    wanted = [a for d in deliveries for a in d.get("attachments") or ()]
    if wanted:
        await asyncio.to_thread(_download, url.rstrip("/"), token, wanted, folder)


def _download(base: str, token: str, wanted: list[dict[str, Any]], folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    with httpx.Client(headers={"Authorization": f"Bearer {token}"}) as http:
        for item in wanted:
            name = Path(str(item.get("name") or "file")).name or "file"
            target = folder / f"{int(item['id'])}-{name}"
            try:
                if not target.is_file() or target.stat().st_size != item.get("size"):
                    part = target.with_name(target.name + ".part")
                    with http.stream("GET", f"{base}{item['url']}") as response:
                        response.raise_for_status()
                        with part.open("wb") as out:
                            for chunk in response.iter_bytes():
                                out.write(chunk)
                    part.replace(target)
            except (httpx.HTTPError, OSError) as exc:
                log.warning("attachment %s not downloaded: %s", item.get("id"), exc)
                continue
            item["path"] = str(target)


def command_handler(argv: Sequence[str], timeout_secs: float = COMMAND_TIMEOUT_SECS) -> Handler:
    """Run ``argv`` per batch, the batch as JSON on stdin; its stdout is the reply."""

    async def handle(batch: Batch) -> str | None:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=None,  # the command's diagnostics go to our stderr
        )
        try:
            out, _ = await asyncio.wait_for(
                proc.communicate(batch.to_json().encode()), timeout_secs
            )
        except TimeoutError:
            proc.kill()
            await proc.wait()
            return f"⚠️ 命令 {argv[0]} 超过 {timeout_secs:.0f} 秒未结束，已终止。"
        text = out.decode("utf-8", "replace").strip()
        if proc.returncode != 0:
            return f"⚠️ 命令 {argv[0]} 以退出码 {proc.returncode} 结束。" + (
                f"\n\n{text}" if text else ""
            )
        return text or None

    return handle


def run_agent_command(
    url: str, token: str, argv: Sequence[str], state_file: Path | None = None
) -> int:
    logging.basicConfig(level="INFO", format="%(asctime)s room agent: %(message)s")
    client = AgentClient(
        url,
        token,
        command_handler(argv),
        state_file=state_file,
        attachments_dir=Path.cwd() / ".room" / "attachments",
    )
    try:
        asyncio.run(client.run())
    except KeyboardInterrupt:
        return 0
    except InvalidStatus:
        print("room agent: the server refused the token or origin", file=sys.stderr)
        return 1
    return 0
