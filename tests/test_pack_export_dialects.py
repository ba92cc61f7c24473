"""A project's pack (docs/packs.md) on either store: the same scenario through the in-process app
on SQLite and on PostgreSQL exports the same parts, with the same columns and the same number
of rows, and the messages' bodies in seq order; the pack imported again and the project forked
take fresh ids that later rows (numbered by PostgreSQL's sequences) do not collide with."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

from tests.support.inproc import owner_user, running_app


def export_of(data: Path, url: str | None) -> list[dict[str, Any]]:
    """The parts of the pack of a project with three messages, one edited: name, columns, rows."""
    with running_app(data, database_url=url) as app:
        project_id, members, _ = app.project_with("打包", owner_user(app))
        path = f"/api/projects/{project_id}"
        # The echo lead would answer in the background, in time for one export and not the
        # other: paused, the timeline holds exactly what the test sends.
        lead = members["lead"].id
        assert app.request("POST", f"{path}/members/{lead}/pause", {},
                           cookie=app.owner_cookie)[0] == 200  # fmt: skip
        ids = []
        for body in ("第一条", "第二条 @lead", "第三条"):
            status, sent = app.request(
                "POST", f"{path}/messages", {"body": body, "client_txn_id": uuid.uuid4().hex},
                cookie=app.owner_cookie,
            )  # fmt: skip
            assert status == 201, sent
            ids.append(sent["message_id"])
        response = app.client.get(
            f"{path}/export", headers={"Cookie": f"room_session={app.owner_cookie}"}
        )
        assert response.status_code == 200, response.text
        # Imported and forked on the same store, then written to: no id is taken twice.
        made = app.client.post(
            "/api/projects/import?name=再导入",
            content=response.content,
            headers={
                "Origin": app.settings.origin,
                "Cookie": f"room_session={app.owner_cookie}",
                "X-CSRF-Token": app.csrf[app.owner_cookie],
            },
        )
        assert made.status_code == 201, made.text
        status, forked = app.request(
            "POST", f"{path}/fork", {"name": "分叉"}, cookie=app.owner_cookie
        )
        assert status == 201, forked
        for copy in (made.json()["project"]["id"], forked["project"]["id"]):
            member = app.request("GET", f"/api/projects/{copy}", cookie=app.owner_cookie)[1]
            assert member["project"]["state"] in ("active", "paused")
            for project in (copy, project_id):
                status, sent = app.request(
                    "POST", f"/api/projects/{project}/messages",
                    {"body": "之后", "client_txn_id": uuid.uuid4().hex}, cookie=app.owner_cookie,
                )  # fmt: skip
                assert status in (201, 409), sent  # 409: an imported project lands paused
    lines = [json.loads(line) for line in response.content.splitlines()]
    assert lines[0]["kind"] == "room.project-pack"
    parts: list[dict[str, Any]] = []
    for line in lines[1:]:
        if isinstance(line, dict) and "part" in line:
            parts.append({"part": line["part"], "columns": line["columns"], "rows": []})
        elif isinstance(line, list) and parts:
            parts[-1]["rows"].append(line)
    return parts


def test_both_stores_export_the_same_pack(tmp_path: Path, pg_dsn: str) -> None:
    on_sqlite = export_of(tmp_path / "sqlite", None)
    on_postgres = export_of(tmp_path / "postgresql", pg_dsn)
    shape = [(p["part"], p["columns"], len(p["rows"])) for p in on_sqlite]
    assert [(p["part"], p["columns"], len(p["rows"])) for p in on_postgres] == shape

    def bodies(parts: list[dict[str, Any]]) -> list[str]:
        messages = next(p for p in parts if p["part"] == "messages")
        at = messages["columns"].index("body")
        return [row[at] for row in messages["rows"] if row[at].startswith("第")]

    assert bodies(on_postgres) == bodies(on_sqlite) == ["第一条", "第二条 @lead", "第三条"]
