"""Messages written and searched through a real app (tests.support.inproc), for the search
tests on either side of the indexer."""

from __future__ import annotations

import sqlite3
import urllib.parse
from typing import Any

from room.actions.messages import append_message
from room.rules.entities import Member
from room.store import Tx
from tests.support.inproc import App


def write_message(app: App, project_id: int, author: Member, body: str) -> int:
    """A chat message through the timeline's append (no recipients: no agent answers)."""

    def job(conn: sqlite3.Connection, tx: Tx) -> int:
        message_id, _, _ = append_message(
            conn, tx, project_id=project_id, author_id=author.id, kind="chat", body=body, html=""
        )
        return message_id

    return app.write(job, locks=(project_id,))


def search(app: App, project_id: int, cookie: str | None = None, **params: Any) -> Any:
    status, body = search_status(app, project_id, cookie, **params)
    assert status == 200, body
    return body


def search_status(
    app: App, project_id: int, cookie: str | None = None, **params: Any
) -> tuple[int, Any]:
    query = urllib.parse.urlencode(params, doseq=True)
    return app.request(
        "GET", f"/api/projects/{project_id}/search?{query}", cookie=cookie or app.owner_cookie
    )


def found_ids(body: Any) -> list[int]:
    return [r["id"] for r in body["results"]]
