"""Operator files and commands: boot trace, boot report, /healthz, room doctor, the CLI, and the
recovery report, kept for server admins."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import socket
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from starlette.websockets import WebSocketDisconnect

from room.cli import EXIT_UNHEALTHY, build_parser, main
from room.infra.boot import last_start, read_trace
from room.infra.frames import CLOSE_SIGNED_OUT
from room.infra.pdfpreview import PdfPreviewer
from room.infra.sandbox import probe
from room.infra.transport import offers_direct_write
from room.rules.protocol import CLIENT_FRAME_TYPES
from room.store import auth as auth_store
from tests.support.inproc import App, error, owner_user, running_app
from tests.support.server import ServerProcess
from tests.support.wsclient import Client


def run_cli(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(list(argv))
    return code, out.getvalue()


def test_a_good_start_leaves_a_trace_a_report_and_a_healthy_doctor(server: ServerProcess) -> None:
    phases = [line["phase"] for line in last_start(read_trace(server.data))]
    assert phases[0] == "start" and phases[-1] == "ready"
    assert {"lock", "migrate", "seed", "attachments", "reconcile", "report"} <= set(phases)
    report = json.loads((server.data / "boot-report.json").read_text())
    assert server.proc is not None
    assert report["pid"] == server.proc.pid
    assert report["sqlite"]["library"]
    for name in (
        "starlette",
        "uvicorn",
        "websockets",
        "pydantic",
        "nh3",
        "markdown-it-py",
        "pillow",
        "puremagic",
    ):
        dep = report["dependencies"][name]
        assert dep["version"] and Path(dep["file"]).exists()
    assert "room_send" in report["tools"]
    assert next(p["name"] for p in report["providers"]) == "builtin"
    assert report["providers"][0]["available"] is True
    assert report["activations"][-1]["pid"] == server.proc.pid
    status, health = server.request("GET", "/healthz")
    assert status == 200 and health["ok"] is True
    # The store is named (only SQLite is served so far: docs/storage.md).
    assert report["database"] == {"backend": "sqlite", "version": report["sqlite"]["library"]}
    assert health["database"] == report["database"]
    # No bus on a server alone (docs/operators.md, "Health"): said plainly, nothing degraded.
    assert health["bus"] == {"configured": False} and health["degraded"] == []
    code, text = run_cli("doctor", "--data", str(server.data))
    assert code == 0, text
    assert "running, pid" in text and "healthy" in text
    if probe().info.isolated and shutil.which("pdftoppm"):  # PDFs drawn in the sandbox
        assert report["capabilities"]["pdf_previews"] == "on"
        assert "pdf:      on: a PDF's first page is drawn by poppler in the sandbox" in text
    code, text = run_cli("doctor", "--data", str(server.data), "--json")
    summary = json.loads(text)
    assert summary["problems"] == [] and summary["database"]["quick_check"] == "ok"


@pytest.mark.anyio
async def test_the_served_report_flags_what_room_serve_does(server: ServerProcess) -> None:
    report = json.loads((server.data / "boot-report.json").read_text())
    assert report["capabilities"] == {
        "group_commit": report["settings"]["max_batch"] > 1,
        "direct_fanout": True,  # room serve runs room.infra.transport's protocol
        "external_agents": True,
        "frame_types": list(CLIENT_FRAME_TYPES),
        "sandbox": report["capabilities"]["sandbox"],
        # The same answer as a previewer made here with this machine's sandbox and poppler.
        "pdf_previews": PdfPreviewer(probe()).reason or "on",
    }
    # What `room serve` found on this machine: the same answer as a probe here (the tests'
    # machine has bubblewrap), so the shell tool's isolation is not claimed without checking.
    found = probe().info
    assert report["capabilities"]["sandbox"] == {
        "isolated": found.isolated,
        "reason": found.reason or None,
        "process_limit": found.process_limit,
    }
    assert report["settings"]["max_batch"] > 1
    # An external agent really connects: its token authenticates on /ws.
    agent = await Client.open(server.ws_url)
    await agent.send({"type": "auth", "token": server.agent_token("演示项目", "lead")})
    hello = await agent.wait_for("hello")
    assert hello["identity"]["kind"] == "agent"
    await agent.close()


def test_the_report_flags_read_the_running_objects(tmp_path: Path) -> None:
    # No group commit, and a test client's websockets without the direct write path.
    with running_app(tmp_path / "data", max_batch=1) as app:
        report = json.loads((app.settings.data / "boot-report.json").read_text())
        flags = report["capabilities"]
        server = app.client.app.state.server  # type: ignore[attr-defined]
        assert flags["group_commit"] is (app.core.db.max_batch > 1) is False
        assert flags["direct_fanout"] is offers_direct_write(server.ws_protocol) is False
        assert flags["frame_types"] == list(CLIENT_FRAME_TYPES)
        assert flags["external_agents"] is True
        _, members, token = app.project_with("flags", owner_user(app))
        with app.client.websocket_connect("/ws", headers={"Origin": app.settings.origin}) as ws:
            ws.send_json({"type": "auth", "token": token})
            hello = ws.receive_json()
        assert hello["type"] == "hello" and hello["identity"]["member_id"] == members["lead"].id


def test_a_start_that_died_shows_how_far_it_got(server: ServerProcess, tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "room", "serve", "--data", str(server.data), "--port", "0"],
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert result.returncode == 3
    phases = last_start(read_trace(server.data))
    assert [p["phase"] for p in phases] == ["start", "lock"]
    assert phases[-1]["ok"] is False and "in use by pid" in phases[-1]["detail"]["error"]
    # doctor judges the running server by its own start (it is healthy) and shows the refused
    # second instance without counting it as a problem (issue 14, item 23).
    code, text = run_cli("doctor", "--data", str(server.data))
    assert code == 0 and "healthy" in text and "PROBLEM" not in text, text
    assert "last start: start →" in text and "→ ready" in text
    assert f"refused:  a later start (pid {phases[0]['pid']}) stopped at 'lock'" in text


def test_doctor_on_an_empty_folder_needs_attention(tmp_path: Path) -> None:
    code, text = run_cli("doctor", "--data", str(tmp_path / "nothing"))
    assert code == 4
    assert "no database" in text


def test_login_link_and_member_token_work_while_the_server_runs(server: ServerProcess) -> None:
    code, link = run_cli("login-link", "--data", str(server.data))
    assert code == 0 and link.strip().startswith(f"{server.origin}/login/")
    session = server.login(link.strip().rsplit("/", 1)[-1])
    assert session.user["handle"] == "owner"
    code, token = run_cli("member", "token", "--data", str(server.data), "演示项目", "lead")
    assert code == 0 and len(token.strip()) >= 40 and "\n" not in token.strip()
    code, token_by_id = run_cli("member", "token", "--data", str(server.data), "1", "@lead")
    assert code == 0 and token_by_id != token
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code, _ = run_cli("member", "token", "--data", str(server.data), "演示项目", "owner")
    assert code == 1 and "humans sign in with a login link" in err.getvalue()


def test_help_documents_every_command() -> None:
    parser = build_parser()
    text = parser.format_help()
    for command in ("serve", "doctor", "login-link", "member", "agent"):
        assert command in text
    with pytest.raises(SystemExit), contextlib.redirect_stdout(io.StringIO()) as out:
        main(["member", "token", "--help"])
    assert "PROJECT" in out.getvalue() and "HANDLE" in out.getvalue()


def test_recovery_is_for_server_admins_only(app: App) -> None:
    bob, bob_cookie = app.new_user("bob", "Bob")
    _, _, token = app.project_with("恢复", owner_user(app), bob)
    assert app.request("GET", "/api/recovery", cookie=app.owner_cookie)[0] == 200
    assert error(app.request("GET", "/api/recovery", cookie=bob_cookie)) == (403, "admin_only")
    assert error(app.request("GET", "/api/recovery", token=token)) == (403, "admin_only")


# -- agent tokens: rotate and revoke without retiring the handle (issue 14, item 25) --------------


REVOKED = "this token is unknown or revoked"


def _auth(app: App, token: str) -> dict[str, Any]:
    """The hello frame, or how the server closed the socket."""
    try:
        with app.client.websocket_connect("/ws", headers={"Origin": app.settings.origin}) as ws:
            ws.send_json({"type": "auth", "token": token})
            frame: dict[str, Any] = ws.receive_json()
            return frame
    except WebSocketDisconnect as closed:
        return {"closed": closed.code, "reason": closed.reason}


def test_an_owner_rotates_and_revokes_an_agents_tokens_and_its_open_socket_closes(
    tmp_path: Path,
) -> None:
    with running_app(tmp_path / "data") as app:
        owner = owner_user(app)
        plain, plain_cookie = app.new_user("bo", "小博")
        pid, members, old = app.project_with("令牌", owner, plain)
        lead = members["lead"]
        path = f"/api/projects/{pid}/members/{lead.id}/token"
        with app.client.websocket_connect("/ws", headers={"Origin": app.settings.origin}) as ws:
            ws.send_json({"type": "auth", "token": old})
            assert ws.receive_json()["type"] == "hello"
            status, body = app.request("POST", path, cookie=app.owner_cookie)
            assert status == 200
            new = body["token"]
            with pytest.raises(WebSocketDisconnect) as closed:
                while True:
                    ws.receive_json()
            assert closed.value.code == CLOSE_SIGNED_OUT
        assert _auth(app, old) == {"closed": CLOSE_SIGNED_OUT, "reason": REVOKED}
        assert _auth(app, new)["identity"]["member_id"] == lead.id
        # Only an owner, and only for an agent.
        assert error(app.request("POST", path, cookie=plain_cookie)) == (403, "not_owner")
        human = f"/api/projects/{pid}/members/{members['bo'].id}/token"
        assert error(app.request("POST", human, cookie=app.owner_cookie)) == (409, "not_agent")
        status, body = app.request("DELETE", path, cookie=app.owner_cookie)
        assert (status, body) == (200, {"revoked": 1})
        assert _auth(app, new) == {"closed": CLOSE_SIGNED_OUT, "reason": REVOKED}
        status, detail = app.request("GET", f"/api/projects/{pid}/members/{lead.id}",
                                     cookie=app.owner_cookie)  # fmt: skip
        assert status == 200 and detail["member"]["handle"] == "lead"
        _, log = app.request("GET", f"/api/projects/{pid}/audit", cookie=app.owner_cookie)
        actions = [entry["action"] for entry in log["events"]]
        assert "member.token" in actions and "member.revoke_tokens" in actions


def test_the_cli_rotates_and_revokes_while_the_server_runs(server: ServerProcess) -> None:
    def live(token: str) -> bool:
        conn = sqlite3.connect(f"file:{server.data / 'room.sqlite'}?mode=ro", uri=True)
        try:
            return auth_store.token_member(conn, token) is not None
        finally:
            conn.close()

    _, first = run_cli("member", "token", "--data", str(server.data), "演示项目", "lead")
    _, second = run_cli("member", "token", "--data", str(server.data), "演示项目", "lead")
    assert not live(first.strip()) and live(second.strip())
    code, text = run_cli("member", "revoke", "--data", str(server.data), "演示项目", "@lead")
    assert code == 0 and text.strip() == "revoked 1 token(s) of @lead"
    assert not live(second.strip())


# -- Prometheus metrics (issue 14, item 27) -------------------------------------------------------


def _scrape(app: App, cookie: str | None = None, token: str | None = None) -> tuple[int, str]:
    headers = {"Origin": app.settings.origin}
    if cookie is not None:
        headers["Cookie"] = f"room_session={cookie}"
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    response = app.client.get("/metrics", headers=headers)
    return response.status_code, response.text


def test_metrics_are_for_server_admins_and_count_what_the_server_did(tmp_path: Path) -> None:
    with running_app(tmp_path / "data") as app:
        _plain, plain_cookie = app.new_user("bo", "小博")
        pid, _members, token = app.project_with("指标", owner_user(app))
        assert _scrape(app, cookie=plain_cookie)[0] == 403
        assert _scrape(app, token=token)[0] == 403
        assert _scrape(app)[0] == 401
        for n in range(3):
            status, _ = app.request("POST", f"/api/projects/{pid}/messages",
                                    {"body": f"第 {n} 条", "client_txn_id": f"m{n}"},
                                    cookie=app.owner_cookie)  # fmt: skip
            assert status in (200, 201)
        with app.client.websocket_connect("/ws", headers={"Origin": app.settings.origin}) as ws:
            ws.send_json({"type": "auth", "token": token})
            assert ws.receive_json()["type"] == "hello"
            status, text = _scrape(app, cookie=app.owner_cookie)
        assert status == 200
        families = {f.name: f for f in text_string_to_metric_families(text)}
        value = {f: [(s.name, s.labels, s.value) for s in families[f].samples] for f in families}
        assert value["room_connections"] == [("room_connections", {}, 1.0)]
        assert value["room_messages"][0][2] >= 3
        states = {labels["state"]: v for _, labels, v in value["room_deliveries"]}
        assert sum(states.values()) >= 3  # each message reached the lead
        buckets = [s for s in value["room_writer_batch_size"] if s[0].endswith("_bucket")]
        assert buckets[-1][1]["le"] == "+Inf" and buckets[-1][2] >= 3
        commits = dict((s[0], s[2]) for s in value["room_writer_commit_seconds"])
        assert commits["room_writer_commit_seconds_count"] == buckets[-1][2]
        assert commits["room_writer_commit_seconds_sum"] > 0
        for family in ("room_subscribers", "room_turns", "room_model_calls", "room_model_tokens"):
            assert family in families, family


def test_cli_writes_beside_a_running_server_leave_every_lifecycle_operation_working(
    server: ServerProcess, tmp_path: Path
) -> None:
    """``room export``/``import`` and ``room risk`` write the database beside the running
    server; the server's next writes (messages, notices, every lifecycle step) must not collide
    on an id it counted before (ids come from the database in each transaction)."""
    owner = server.login()
    project = int(server.get_json("/api/me", cookie=owner.cookie)["projects"][0]["id"])

    def post(path: str, body: dict[str, Any]) -> tuple[int, Any]:
        return server.request("POST", path, body, headers=owner.headers)

    for n in range(3):  # the server counts its ids: messages, events, deliveries, audit
        assert post(f"/api/projects/{project}/messages", {"body": f"消息 {n}"})[0] == 201
    data = ["--data", str(server.data)]
    pack = tmp_path / "p.roompack"

    def cli(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "room", *argv, *data],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip

    assert cli("export", str(project), str(pack)).returncode == 0
    for copy in ("副本一", "副本二"):
        done = cli("import", str(pack), "--name", copy)
        assert done.returncode == 0, done.stderr
    assert cli("risk").returncode in (0, 1), "risk exits 1 only when it found red risks"
    # The first write after them is a lone job (no batch to retry it in): a lifecycle step.
    every = ("pause", "resume", "archive", "restore", "resume", "complete", "restore", "abandon")
    for op in (*every, "restore", "trash", "restore"):
        body: dict[str, Any] = {"op": op}
        if op == "complete":
            body["actual_hours"] = 3
        status, answer = post(f"/api/projects/{project}/lifecycle", body)
        assert status == 200 and answer.get("outcome", "ok") == "ok", (op, answer)
    status, answer = post(f"/api/projects/{project}/lifecycle", {"op": "resume"})
    assert status == 200, answer
    assert post(f"/api/projects/{project}/messages", {"body": "还在"})[0] == 201


def modes(folder: Path) -> dict[str, str]:
    """The permission bits of ``folder`` (as ``.``) and of what lies directly in it."""
    found = {".": f"{stat.S_IMODE(folder.stat().st_mode):04o}"}
    for entry in folder.iterdir():
        found[entry.name] = f"{stat.S_IMODE(entry.lstat().st_mode):04o}"
    return found


def test_the_data_folder_is_its_owners_alone(server: ServerProcess) -> None:
    owner = server.login()
    project = int(server.get_json("/api/me", cookie=owner.cookie)["projects"][0]["id"])
    status, _ = server.request(
        "POST", f"/api/projects/{project}/messages", {"body": "私密"}, headers=owner.headers
    )
    assert status == 201
    found = modes(server.data)
    assert found["."] == "0700"
    assert {"room.sqlite", "boot-report.json", "workspaces"} <= set(found)
    wider = {
        name: mode for name, mode in found.items() if name != "." and mode not in ("0600", "0700")
    }
    assert wider == {}, "made under umask 077: files 0600, folders 0700"
    _, out = run_cli("doctor", "--data", str(server.data), "--json")
    assert not [p for p in json.loads(out)["problems"] if "others may read" in p]


def test_a_folder_left_readable_is_flagged_and_narrowed_at_start(tmp_path: Path) -> None:
    data = tmp_path / "data"
    ServerProcess(data).start().stop()
    os.chmod(data, 0o755)
    os.chmod(data / "room.sqlite", 0o644)  # as releases before made them
    code, out = run_cli("doctor", "--data", str(data), "--json")
    flagged = [p for p in json.loads(out)["problems"] if "others may read" in p]
    assert code == EXIT_UNHEALTHY and len(flagged) == 1
    assert "is 0755" in flagged[0] and "room.sqlite is 0644" in flagged[0]
    proc = ServerProcess(data).start()
    try:
        found = modes(data)
        assert (found["."], found["room.sqlite"]) == ("0700", "0600")
        start = [p for p in read_trace(data) if p.get("phase") == "start"][-1]
        tightened = start["detail"]["tightened"]
        # (and the journal files the doctor's reading made beside the 0644 database)
        assert {f"{data} 0755 → 0700", f"{data / 'room.sqlite'} 0644 → 0600"} <= set(tightened)
        assert all(line.endswith(("→ 0700", "→ 0600")) for line in tightened)
    finally:
        proc.stop()
    code, out = run_cli("doctor", "--data", str(data), "--json")
    assert not [p for p in json.loads(out)["problems"] if "others may read" in p]


def test_the_harness_restarts_a_server_whose_port_another_process_took(tmp_path: Path) -> None:
    """tests.support.server: a port found free may be taken before the server binds it; the
    harness must not take another server's /healthz for this one's (a test then signed in to
    the wrong server and got 401)."""
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        port = taken.getsockname()[1]
        proc = ServerProcess(tmp_path / "data", port=port).start()
        try:
            assert proc.port != port
            assert proc.get_json("/api/me", cookie=proc.login().cookie)["projects"]
        finally:
            proc.stop()
    finally:
        taken.close()
