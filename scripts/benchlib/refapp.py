"""Reference for fan-out: a plain Starlette app with an in-memory broadcast loop.

Run as ``python -m benchlib.refapp --port P``, pinned to the server core by the caller. It speaks
just enough of the room protocol for the bench's clients: ``subscribe`` → ``subscribed``; ``send``
→ one ``message`` frame shaped like the server's (encoded once), written to every subscriber the
naive way — ``for ws in clients: await ws.send_text(text)`` — then an ``ack`` to the sender.
uvicorn runs with the same WebSocket implementation as the real server (websockets sans-I/O,
no compression). Nothing is stored.
"""

from __future__ import annotations

import argparse
import json

import uvicorn
from starlette.applications import Starlette
from starlette.routing import WebSocketRoute
from starlette.websockets import WebSocket, WebSocketDisconnect

from benchlib.shapes import ack_frame, message_frame


def create_app() -> Starlette:
    clients: set[WebSocket] = set()
    head = {"seq": 0}

    async def endpoint(ws: WebSocket) -> None:
        await ws.accept()
        try:
            while True:
                frame = json.loads(await ws.receive_text())
                if frame.get("type") == "subscribe":
                    clients.add(ws)
                    await ws.send_text(f'{{"type":"subscribed","head_seq":{head["seq"]}}}')
                elif frame.get("type") == "send":
                    head["seq"] += 1
                    seq, txn = head["seq"], frame["client_txn_id"]
                    text = message_frame(seq, frame["project_id"], frame["body"], txn)
                    for client in list(clients):
                        await client.send_text(text)
                    await ws.send_text(ack_frame(txn, seq))
        except WebSocketDisconnect:
            pass
        finally:
            clients.discard(ws)

    return Starlette(routes=[WebSocketRoute("/ws", endpoint)])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    uvicorn.run(
        create_app(),
        host="127.0.0.1",
        port=args.port,
        ws="websockets-sansio",
        ws_per_message_deflate=False,
        log_level="warning",
        lifespan="off",
    )


if __name__ == "__main__":
    main()
