"""People an operator administers: ``room users list|disable|enable|login-link`` beside a running
server (docs/operators.md), and who may create projects (setting ``project_creators``)."""

from __future__ import annotations

import contextlib
import io
import json
import sqlite3
import uuid
from pathlib import Path
from typing import Any

import anyio
import pytest
from websockets.exceptions import ConnectionClosed

from room.cli import main as room_main
from tests.support.server import ServerProcess
from tests.support.wsclient import Client, subscribed


def run_cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = room_main(list(argv))
    return code, out.getvalue(), err.getvalue()


async def _closed_with(client: Client, timeout: float) -> int | None:
    """Read until the server closes the socket; its close code (None: still open at timeout)."""
    with anyio.move_on_after(timeout):
        try:
            while True:
                await client.ws.recv()
        except ConnectionClosed:
            return client.ws.close_code
    return None


def _audit(data: Path) -> list[tuple[str, str, dict[str, Any]]]:
    db = sqlite3.connect(f"file:{data / 'room.sqlite'}?mode=ro", uri=True)
    try:
        rows = db.execute(
            "SELECT action, outcome, detail_json FROM audit_events"
            " WHERE action LIKE 'user.%'"
            " OR (action = 'project.create' AND outcome = 'refused') ORDER BY id"
        ).fetchall()
    finally:
        db.close()
    return [(a, o, json.loads(d)) for a, o, d in rows]


@pytest.mark.anyio
@pytest.mark.usefixtures("clients")
async def test_a_disabled_person_is_cut_off_at_once_and_keeps_their_history(
    tmp_path: Path,
) -> None:
    # The periodic credential re-check runs every 30 s here: a socket closed sooner was closed
    # by the server noticing the CLI's change (user_watch_secs), not by the re-check.
    server = ServerProcess(
        tmp_path / "data",
        env={"ROOM_CREDENTIAL_RECHECK_SECS": "30", "ROOM_PROJECT_CREATORS": "carol"},
    ).start()
    data = str(server.data)
    try:
        owner = server.login()
        pid = int(server.get_json("/api/me", cookie=owner.cookie)["projects"][0]["id"])
        bob = server.invite(owner, pid, "bob", "小博")

        # Who may create projects: the owner always, bob is not listed.
        assert server.get_json("/api/me", cookie=bob.cookie)["may_create_projects"] is False
        assert server.get_json("/api/me", cookie=owner.cookie)["may_create_projects"] is True
        status, body = server.request(
            "POST", "/api/projects", {"name": "鲍勃的项目"}, headers=bob.headers
        )
        assert (status, body["error"]["code"]) == (403, "not_a_creator")
        status, _ = server.request(
            "POST", "/api/projects", {"name": "主人的项目"}, headers=owner.headers
        )
        assert status == 201

        watcher = await subscribed(server, owner.cookie, pid)
        bob_socket = await subscribed(server, bob.cookie, pid)
        await bob_socket.send(
            {"type": "send", "project_id": pid, "client_txn_id": uuid.uuid4().hex, "body": "我在"}
        )
        ack = await bob_socket.wait_for("ack")

        code, out, _ = run_cli("users", "disable", "--data", data, "@bob")
        assert code == 0
        assert json.loads(out) == {
            "user": "bob", "changed": True, "sessions_ended": 1, "links_voided": 0,
        }  # fmt: skip
        assert await _closed_with(bob_socket, timeout=5.0) == 4401
        assert bob_socket.ws.close_reason == "account disabled"

        # Their next request is refused, with why.
        status, body = server.request("GET", "/api/me", cookie=bob.cookie)
        assert (status, body["error"]["code"]) == (401, "account_disabled")

        # The roster shows them disabled; they stay a member, their message stays theirs.
        frame = await watcher.wait_for(
            lambda f: (
                f["type"] == "members"
                and any(m["handle"] == "bob" and m.get("disabled") for m in f["members"])
            )
        )
        bob_member = next(m for m in frame["members"] if m["handle"] == "bob")
        assert bob_member["status"] == "active"
        history = server.get_json(f"/api/projects/{pid}/messages?limit=200", cookie=owner.cookie)
        mine = [m for m in history["messages"] if m["id"] == ack["message_id"]]
        assert [(m["author_id"], m["body"]) for m in mine] == [(bob_member["id"], "我在")]

        # Naming them in new work is refused with a diagnostic; @all leaves them out.
        await watcher.send(
            {"type": "send", "project_id": pid, "client_txn_id": uuid.uuid4().hex,
             "body": "@bob 请看一下"}
        )  # fmt: skip
        refusal = await watcher.wait_for("error")
        assert refusal["code"] == "mentions_unresolved"
        assert [
            (d["code"], d["name"], d["blocking"]) for d in refusal["details"]["diagnostics"]
        ] == [("disabled", "小博", True)]

        # Nor given a task: a plan naming them as owner is refused.
        item = {"key": "handover", "title": "交接", "owner": "bob", "acceptance": ["写完"]}
        status, body = server.request(
            "POST", f"/api/projects/{pid}/plan", {"goal": "交接", "items": [item]},
            headers=owner.headers,
        )  # fmt: skip
        assert (status, body["error"]["code"]) == (400, "plan_invalid")
        problems = body["error"]["details"]["problems"]
        assert [(p["code"], p["item"]) for p in problems] == [("inactive_owner", "handover")]
        assert "disabled" in problems[0]["message"]

        # A login link is refused while disabled; the list says so.
        code, _, err = run_cli("users", "login-link", "--data", data, "bob")
        assert code == 1 and "user_disabled" in err
        code, out, _ = run_cli("users", "list", "--data", data, "--json")
        people = {p["handle"]: p for p in json.loads(out)["users"]}
        assert people["bob"]["disabled_at"] is not None and people["bob"]["sessions"] == 0
        assert people["owner"]["disabled_at"] is None and people["owner"]["admin"] is True
        code, _, err = run_cli("users", "disable", "--data", data, "owner")
        assert code == 1 and "user_is_owner" in err

        # Enabled again: a fresh link signs them in, the roster drops the mark.
        assert run_cli("users", "enable", "--data", data, "bob")[0] == 0
        await watcher.wait_for(
            lambda f: (
                f["type"] == "members"
                and any(m["handle"] == "bob" and not m.get("disabled") for m in f["members"])
            )
        )
        code, out, _ = run_cli("users", "login-link", "--data", data, "bob")
        assert code == 0 and out.startswith(server.origin + "/login/")
        again = server.login(out.strip().rsplit("/", 1)[-1])
        assert again.user["handle"] == "bob"

        audited = [(a, o, d.get("handle")) for a, o, d in _audit(server.data)]
        assert audited == [
            ("project.create", "refused", "bob"),
            ("user.disable", "ok", "bob"),
            ("user.login_link", "refused", "bob"),
            ("user.disable", "refused", "owner"),
            ("user.enable", "ok", "bob"),
            ("user.login_link", "ok", "bob"),
        ]
    finally:
        server.stop()


def test_users_commands_refuse_an_unknown_person_with_a_structured_error(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data").start()
    server.stop()
    code, _, err = run_cli("users", "disable", "--data", str(server.data), "nobody")
    assert code == 1
    assert json.loads(err.splitlines()[-1])["code"] == "no_user"
