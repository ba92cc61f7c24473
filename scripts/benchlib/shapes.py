"""The ``message`` frame the reference servers broadcast, shaped like the real server's."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime


def message_frame(seq: int, project_id: int, body: str, client_txn_id: str) -> str:
    """One ``{"type": "message", …}`` frame, the same fields and size as the server's."""
    now = datetime.fromtimestamp(time.time(), UTC).isoformat(timespec="milliseconds")
    message = {
        "id": seq,
        "project_id": project_id,
        "seq": seq,
        "author_id": 1,
        "kind": "chat",
        "body": body,
        "html": f"<p>{body}</p>\n",
        "reply_to": None,
        "reply_excerpt": None,
        "mentions": [],
        "client_txn_id": client_txn_id,
        "created_at": now.replace("+00:00", "Z"),
        "edited_at": None,
        "deleted": False,
    }
    return json.dumps(
        {"type": "message", "project_id": project_id, "seq": seq, "message": message},
        ensure_ascii=False,
        separators=(",", ":"),
    )


def ack_frame(client_txn_id: str, seq: int) -> str:
    return json.dumps(
        {
            "type": "ack",
            "client_txn_id": client_txn_id,
            "message_id": seq,
            "seq": seq,
            "duplicate": False,
        },
        separators=(",", ":"),
    )
