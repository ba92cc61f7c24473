"""The client side of the room's MCP server (``/mcp``, :mod:`room.mcp_server`), with the official
``mcp`` SDK: ``room mcp`` and ``room agent --mcp`` (docs/agents.md, "Coding agents over MCP").

* :func:`bridge` — ``room mcp --url … --token …``: an MCP server on stdin/stdout for clients that
  only start stdio servers, relaying every JSON-RPC message to ``/mcp`` (Streamable HTTP, the
  token in ``Authorization``) and back. The bridge adds nothing and decides nothing: the room
  authenticates, authorizes and answers.
* :func:`run_coding_agent` — ``room agent --mcp … -- COMMAND``: waits for the member's unread
  deliveries (subscribed to ``room://inbox``), takes them by reading it (delivered → consumed, as
  ``room agent`` confirms them), and runs COMMAND once per batch with the batch as JSON on stdin,
  a temporary MCP config naming the room (``{mcp_config}`` in the arguments, and
  ``ROOM_MCP_CONFIG`` in its environment), in the worktree of the member's task when it has one
  (``room://task``), else where it was started. The command speaks in the room through its tools
  (``room_send`` …); its stdout is not posted. A failure (non-zero exit, timeout) is posted as a
  warning replying to the batch's last message.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import sys
import tempfile
import warnings
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx2
import mcp_types as types
from mcp.client.session import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPDeprecationWarning
from mcp.shared.inbound import (
    MCP_METHOD_HEADER,
    MCP_NAME_HEADER,
    MCP_PROTOCOL_VERSION_HEADER,
    NAME_BEARING_METHODS,
    encode_header_value,
)
from mcp.shared.message import ClientMessageMetadata, SessionMessage

log = logging.getLogger(__name__)

MCP_PATH = "/mcp"
SERVER_KEY = "room"  # the server's name in an MCP config file
CONFIG_PLACEHOLDER = "{mcp_config}"
COMMAND_TIMEOUT_SECS = 1800.0
POLL_SECS = 30.0  # a missed notification costs at most this long
RECONNECT_MAX_SECS = 30.0
PROTOCOL_HEADER = MCP_PROTOCOL_VERSION_HEADER


def mcp_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"not a server URL: {url!r}")
    return f"{parts.scheme}://{parts.netloc}{MCP_PATH}"


def http_client(token: str) -> httpx2.AsyncClient:
    # Long reads: the server holds the notification stream open.
    return httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {token}"}, timeout=httpx2.Timeout(30, read=300)
    )


def mcp_config(url: str, token: str) -> dict[str, Any]:
    """An MCP config naming the room (the ``mcpServers`` shape Claude Code's ``--mcp-config``
    and most clients read)."""
    return {
        "mcpServers": {
            SERVER_KEY: {
                "type": "http",
                "url": mcp_url(url),
                "headers": {"Authorization": f"Bearer {token}"},
            }
        }
    }


# -- room mcp: the stdio bridge -------------------------------------------------------------------


async def bridge(url: str, token: str) -> None:
    """Relay MCP between this process's stdin/stdout and the room's ``/mcp`` until stdin ends."""
    version: str | None = None

    async with (
        http_client(token) as http,
        stdio_server() as (local_read, local_write),
        streamable_http_client(mcp_url(url), http_client=http) as (remote_read, remote_write),
        anyio.create_task_group() as tg,
    ):

        async def up() -> None:
            async for item in local_read:
                if isinstance(item, Exception):
                    log.warning("unreadable message from the client: %s", item)
                    continue
                headers = http_headers(item, version)
                if headers:
                    item = SessionMessage(item.message, ClientMessageMetadata(headers=headers))
                await remote_write.send(item)
            tg.cancel_scope.cancel()  # the client closed stdin: done

        async def down() -> None:
            nonlocal version
            async for item in remote_read:
                if isinstance(item, Exception):
                    log.warning("the room's side failed: %s", item)
                    continue
                version = _negotiated(item) or version
                await local_write.send(item)
            tg.cancel_scope.cancel()

        tg.start_soon(up)
        tg.start_soon(down)


def http_headers(item: SessionMessage, negotiated: str | None) -> dict[str, str]:
    """The HTTP headers the SDK's own client sends with this message over Streamable HTTP: on
    protocol 2026-07-28 each request names its version (in ``_meta``), method and target; on a
    handshake version every message after ``initialize`` carries the negotiated version."""
    message = item.message
    if not isinstance(message, types.JSONRPCRequest | types.JSONRPCNotification):
        return {PROTOCOL_HEADER: negotiated} if negotiated else {}
    params = message.params if isinstance(message.params, dict) else {}
    meta = params.get("_meta")
    modern = meta.get(types.PROTOCOL_VERSION_META_KEY) if isinstance(meta, dict) else None
    if isinstance(modern, str):
        headers = {PROTOCOL_HEADER: modern, MCP_METHOD_HEADER: message.method}
        name_key = NAME_BEARING_METHODS.get(message.method)
        if name_key is not None and isinstance(name := params.get(name_key), str):
            headers[MCP_NAME_HEADER] = encode_header_value(name)
        return headers
    if negotiated and message.method != "initialize":
        return {PROTOCOL_HEADER: negotiated}
    return {}


def _negotiated(item: SessionMessage) -> str | None:
    message = item.message
    if isinstance(message, types.JSONRPCResponse) and isinstance(message.result, dict):
        found = message.result.get("protocolVersion")
        return str(found) if isinstance(found, str) else None
    return None


def run_bridge(url: str, token: str) -> int:
    logging.basicConfig(level="WARNING", format="room mcp: %(message)s", stream=sys.stderr)
    try:
        asyncio.run(bridge(url, token))
    except KeyboardInterrupt:
        return 0
    return 0


# -- room agent --mcp: a coding agent per batch ----------------------------------------------------


@contextlib.asynccontextmanager
async def session(url: str, token: str, **options: Any) -> AsyncIterator[ClientSession]:
    async with (
        http_client(token) as http,
        streamable_http_client(mcp_url(url), http_client=http) as (read, write),
        ClientSession(read, write, **options) as client,
    ):
        await client.initialize()
        yield client


async def read_json(client: ClientSession, uri: str) -> dict[str, Any]:
    contents = (await client.read_resource(uri)).contents
    text = (
        contents[0].text if contents and isinstance(contents[0], types.TextResourceContents) else ""
    )
    data = json.loads(text or "{}")
    return data if isinstance(data, dict) else {}


def command_argv(argv: Sequence[str], config_path: Path) -> list[str]:
    return [arg.replace(CONFIG_PLACEHOLDER, str(config_path)) for arg in argv]


class RefusedError(Exception):
    """The room refused the token (401/403): retrying cannot help."""


async def check_token(url: str, token: str) -> None:
    """Ask ``/mcp`` once, outside MCP, whether it takes the token (its error body says why not)."""
    async with http_client(token) as http:
        answer = await http.post(mcp_url(url), json={})
    if answer.status_code in (401, 403):
        try:
            error = answer.json()["error"]
            why = f"{error['code']}: {error['message']}"
        except (ValueError, KeyError, TypeError):
            why = f"HTTP {answer.status_code}"
        raise RefusedError(why)


async def run_coding_agent(
    url: str,
    token: str,
    argv: Sequence[str],
    *,
    timeout_secs: float = COMMAND_TIMEOUT_SECS,
    stop: asyncio.Event | None = None,
) -> None:
    """Serve the member until ``stop`` is set (or forever): one COMMAND run per batch. A lost
    connection is made again with backoff (as ``room agent`` does); a refused token ends it
    (:class:`RefusedError`)."""
    stop = stop or asyncio.Event()
    delay = 0.5
    while not stop.is_set():
        await check_token(url, token)
        try:
            await _serve(url, token, argv, timeout_secs, stop)
            return
        except RefusedError:
            raise
        except Exception as exc:  # the server went away, a stream broke: connect again
            log.warning("connection lost (%s); connecting again in %.1f s", exc, delay)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), delay)
        delay = min(RECONNECT_MAX_SECS, delay * 2)


async def _serve(
    url: str, token: str, argv: Sequence[str], timeout_secs: float, stop: asyncio.Event
) -> None:
    wake = asyncio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ResourceUpdatedNotification):
            wake.set()

    async with session(url, token, message_handler=on_message) as client:
        with warnings.catch_warnings():
            # Handshake-era subscription; the SDK warns that protocol 2026-07-28 replaces it.
            warnings.simplefilter("ignore", MCPDeprecationWarning)
            await client.subscribe_resource("room://inbox")
        while not stop.is_set():
            wake.clear()
            batch = await read_json(client, "room://inbox")
            if batch.get("deliveries"):
                await _run_once(client, url, token, argv, batch, timeout_secs)
                continue  # more may have come meanwhile
            stopper = asyncio.ensure_future(stop.wait())
            woken = asyncio.ensure_future(wake.wait())
            try:
                await asyncio.wait(
                    {stopper, woken}, timeout=POLL_SECS, return_when="FIRST_COMPLETED"
                )
            finally:
                stopper.cancel()
                woken.cancel()


async def _run_once(
    client: ClientSession,
    url: str,
    token: str,
    argv: Sequence[str],
    batch: dict[str, Any],
    timeout_secs: float,
) -> None:
    task = await read_json(client, "room://task")
    where = task.get("workdir") or {}
    cwd = Path(where["path"]) if where.get("mode") == "worktree" and where.get("path") else None
    if cwd is not None and not cwd.is_dir():  # the server's worktree is not on this machine
        log.warning("the task's worktree %s is not here; running where room agent started", cwd)
        cwd = None
    with tempfile.TemporaryDirectory(prefix="room-mcp-") as folder:
        config = Path(folder) / "mcp.json"
        fd = os.open(config, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # it holds the token
        with os.fdopen(fd, "w") as out:
            json.dump(mcp_config(url, token), out)
        command = command_argv(argv, config)
        log.info("running %s for %d message(s) in %s", command[0], len(batch["deliveries"]),
                 cwd or Path.cwd())  # fmt: skip
        failure = await _run_command(command, cwd, config, batch, timeout_secs)
    if failure is not None:
        last = batch["deliveries"][-1]
        await client.call_tool("room_send", {"text": failure, "reply_to": last["message_id"]})


async def _run_command(
    command: list[str],
    cwd: Path | None,
    config: Path,
    batch: dict[str, Any],
    timeout_secs: float,
) -> str | None:
    """Run one batch; the warning to post when it failed (the batch is taken: a command that
    could not run must say so in the room, never leave it silently consumed)."""
    name = command[0]
    try:
        proc = await asyncio.create_subprocess_exec(
            *command,
            stdin=asyncio.subprocess.PIPE,
            stdout=None,  # the agent's own output stays on this terminal
            cwd=cwd,
            env={**os.environ, "ROOM_MCP_CONFIG": str(config)},
        )
    except OSError as exc:
        return f"⚠️ 命令 {name} 无法启动：{exc.strerror or exc}"
    try:
        await asyncio.wait_for(
            proc.communicate(json.dumps(batch, ensure_ascii=False).encode()), timeout_secs
        )
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return f"⚠️ 命令 {name} 超过 {timeout_secs:.0f} 秒未结束，已终止。"
    if proc.returncode != 0:
        return f"⚠️ 命令 {name} 以退出码 {proc.returncode} 结束。"
    return None


def run_agent_mcp(url: str, token: str, argv: Sequence[str]) -> int:
    logging.basicConfig(level="INFO", format="%(asctime)s room agent: %(message)s")
    try:
        asyncio.run(run_coding_agent(url, token, argv))
    except KeyboardInterrupt:
        return 0
    except RefusedError as exc:
        print(f"room agent: the server refused the token ({exc})", file=sys.stderr)
        return 1
    return 0
