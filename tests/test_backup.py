"""`room backup` of a live server while six senders write, and `room restore` into a new folder
that a second server then serves (docs/backup.md); the refusals write nothing."""

from __future__ import annotations

import io
import json
import os
import sqlite3
import stat
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from PIL import Image

from room.cli import EXIT_BAD_BACKUP, EXIT_NOT_EMPTY, EXIT_NOT_SERVED
from room.cli import main as room_main
from room.infra import blobs
from tests.support.live_room import Room, agent_replies, eventually
from tests.support.llm_servers import OpenAIServer, Reply, openai_text
from tests.support.server import ServerProcess, Session, start_with_openai

pytestmark = pytest.mark.timeout(180)

SENDERS = 6


def run_room(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "room", *args], capture_output=True, text=True, timeout=120
    )


def png(colour: str) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (96, 64), colour).save(out, "PNG")
    return out.getvalue()


def upload(server: ServerProcess, who: Session, project: int, name: str, content: bytes) -> Any:
    import urllib.parse
    import urllib.request

    req = urllib.request.Request(
        f"{server.origin}/api/projects/{project}/attachments?"
        + urllib.parse.urlencode({"name": name}),
        data=content,
        headers={**who.headers, "Content-Type": "application/octet-stream"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        assert r.status == 201
        return json.loads(r.read())["attachment"]


def fetch_bytes(server: ServerProcess, who: Session, url: str) -> bytes:
    import urllib.request

    req = urllib.request.Request(
        f"{server.origin}{url}", headers={"Cookie": f"room_session={who.cookie}"}
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        return bytes(r.read())


@dataclass
class Sender:
    """Posts notes to self (they wake no agent) until stopped; remembers each ack's time."""

    server: ServerProcess
    who: Session
    project: int
    handle: str
    acked: list[tuple[int, float]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        n = 0
        while not self.stop.is_set():
            n += 1
            status, body = self.server.request(
                "POST",
                f"/api/projects/{self.project}/messages",
                {"body": f"@{self.handle} 并发写入 {n}", "client_txn_id": uuid.uuid4().hex},
                headers=self.who.headers,
            )
            assert status == 201, body
            self.acked.append((int(body["message_id"]), time.time()))


@dataclass
class Backed:
    server: ServerProcess
    owner: Session
    project: int
    archive: Path
    picture: bytes
    picture_id: int
    first_ids: list[int]
    acked_before: set[int]
    acked: dict[str, list[int]]  # each sender's acked message ids, in the order acked
    stdout: str


@pytest.fixture(scope="module")
def backed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Backed]:
    root = tmp_path_factory.mktemp("backup")
    server = ServerProcess(root / "data").start()
    try:
        owner = server.login()
        me = server.get_json("/api/me", cookie=owner.cookie)
        project = int(me["projects"][0]["id"])
        base = f"/api/projects/{project}"
        first_ids = []
        for text in ("第一条：备份前的消息", "second message before the backup"):
            status, body = server.request(
                "POST", f"{base}/messages", {"body": text}, headers=owner.headers
            )
            assert status == 201, body
            first_ids.append(int(body["message_id"]))
        picture = png("teal")
        attachment = upload(server, owner, project, "图.png", picture)
        status, body = server.request(
            "POST",
            f"{base}/messages",
            {"body": "附件在此", "attachments": [attachment["id"]]},
            headers=owner.headers,
        )
        assert status == 201, body
        first_ids.append(int(body["message_id"]))
        item = {"key": "restore", "title": "恢复演练", "owner": "owner", "acceptance": ["能恢复"]}
        plan = {"goal": "备份演练", "items": [item]}
        status, body = server.request("POST", f"{base}/plan", plan, headers=owner.headers)
        assert status == 201, body
        status, body = server.request(
            "POST", f"{base}/memory/fact", {"text": "备份每天凌晨三点"}, headers=owner.headers
        )
        assert status == 201, body

        # Six senders, each a person of the project posting notes to self at once.
        people = [owner] + [
            server.invite(owner, project, f"sender{i}", f"写入者{i}") for i in range(1, SENDERS)
        ]
        senders = [Sender(server, who, project, who.user["handle"]) for who in people]
        threads = [threading.Thread(target=s.run, daemon=True) for s in senders]
        for thread in threads:
            thread.start()
        while min(len(s.acked) for s in senders) < 5:
            time.sleep(0.01)
        started = time.time()
        archive = root / "out" / "room.tar"
        done = run_room("backup", "--to", str(archive), "--data", str(server.data))
        time.sleep(0.2)
        for sender in senders:
            sender.stop.set()
        for thread in threads:
            thread.join(timeout=10)
        assert done.returncode == 0, done.stderr
        yield Backed(
            server=server,
            owner=owner,
            project=project,
            archive=archive,
            picture=picture,
            picture_id=int(attachment["id"]),
            first_ids=first_ids,
            acked_before={i for s in senders for i, at in s.acked if at < started},
            acked={s.handle: [i for i, _ in s.acked] for s in senders},
            stdout=done.stdout,
        )
    finally:
        server.stop()


def manifest_of(archive: Path) -> dict[str, Any]:
    with tarfile.open(archive) as tar:
        fh = tar.extractfile("manifest.json")
        assert fh is not None
        return dict(json.loads(fh.read()))


def test_the_archive_is_private_and_its_manifest_describes_it(backed: Backed) -> None:
    assert stat.S_IMODE(backed.archive.stat().st_mode) == 0o600
    assert [p.name for p in backed.archive.parent.iterdir()] == ["room.tar"]  # no temporaries
    manifest = manifest_of(backed.archive)
    assert manifest["format"] == "room-backup" and manifest["format_version"] == 1
    assert manifest["schema_version"] >= 1 and manifest["room_version"]
    assert manifest["counts"]["tasks"] == 1 and manifest["counts"]["memory_entries"] >= 1
    with tarfile.open(backed.archive) as tar:
        names = tar.getnames()
    assert names[0] == "room.sqlite" and names[-1] == "manifest.json"
    assert set(names) == {*manifest["files"], "manifest.json"}
    assert not any("search" in n or "workspaces" in n for n in names)
    assert {"search.sqlite", "workspaces", "settings"} <= set(manifest["not_included"])
    # The picture and its thumbnail, both read from the database's copy.
    assert manifest["attachments"] == {
        "folder": str((backed.server.data / "attachments").resolve()),
        "referenced": 2,
        "included": 2,
        "missing": [],
    }
    assert f"{manifest['counts']['messages']} messages" in backed.stdout


def test_a_restored_folder_serves_everything_the_backup_held(
    backed: Backed, tmp_path: Path
) -> None:
    target = tmp_path / "restored"
    done = run_room("restore", str(backed.archive), "--data", str(target))
    assert done.returncode == 0, done.stderr
    assert stat.S_IMODE(target.stat().st_mode) == 0o700
    assert stat.S_IMODE((target / "room.sqlite").stat().st_mode) == 0o600
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging left

    # Consistent at one instant: every message acked before the backup began is there, none
    # that was never acked, and each project's seq is gap-free (no half-committed batch).
    with sqlite3.connect(target / "room.sqlite") as conn:
        ids = {int(i) for (i,) in conn.execute("SELECT id FROM messages")}
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
        seqs = {}
        # Events, not messages: a thread summary's update on its root takes a seq too.
        for project_id, low, high, n in conn.execute(
            "SELECT project_id, min(seq), max(seq), count(*) FROM events GROUP BY project_id"
        ):
            assert (low, high) == (1, n), project_id
            seqs[int(project_id)] = int(n)
        message_seqs = [
            int(s)
            for (s,) in conn.execute(
                "SELECT seq FROM messages WHERE project_id = ? ORDER BY seq", (backed.project,)
            )
        ]
        assert conn.execute("SELECT count(*) FROM sessions").fetchone()[0] == 0
        written = {
            handle: [
                int(i)
                for (i,) in conn.execute(
                    "SELECT id FROM messages WHERE body LIKE :mine ORDER BY id",
                    {"mine": f"@{handle} 并发写入 %"},
                )
            ]
            for handle in backed.acked
        }
    assert set(backed.first_ids) | backed.acked_before <= ids
    assert len(backed.acked) == SENDERS and len(backed.acked_before) >= 5 * SENDERS
    # Each sender sends one message at a time: the backup holds a prefix of its acks, in order,
    # and nothing that was never acked.
    for handle, acked in backed.acked.items():
        assert written[handle] == acked[: len(written[handle])], handle
    # Attachment files byte-identical to the live server's.
    restored_files = {
        p.relative_to(target): p.read_bytes()
        for p in (target / "attachments").rglob("*")
        if p.is_file()
    }
    assert len(restored_files) == 2  # the picture and its thumbnail
    for relative, content in restored_files.items():
        assert (backed.server.data / relative).read_bytes() == content, relative

    restored = ServerProcess(target).start()
    try:
        # The old server's session does not work here: everyone was signed out.
        status, _ = restored.request("GET", "/api/me", cookie=backed.owner.cookie)
        assert status == 401
        owner = restored.login()
        base = f"/api/projects/{backed.project}"
        listed: list[dict[str, Any]] = []
        while True:  # every message, oldest first, page by page
            after = listed[-1]["seq"] if listed else 0
            page = restored.get_json(
                f"{base}/messages?after={after}&limit=200", cookie=owner.cookie
            )
            listed += page["messages"]
            if not page["has_newer"]:
                break
        assert [m["seq"] for m in listed] == message_seqs
        assert message_seqs[-1] <= seqs[backed.project]
        bodies = {m["body"] for m in listed}
        assert {"第一条：备份前的消息", "second message before the backup", "附件在此"} <= bodies
        picture = next(m for m in listed if m["body"] == "附件在此")["meta"]["attachments"][0]
        assert fetch_bytes(restored, owner, picture["url"]) == backed.picture
        board = restored.get_json(f"{base}/tasks", cookie=owner.cookie)
        assert "restore" in json.dumps(board, ensure_ascii=False)
        facts = restored.get_json(f"{base}/memory/fact", cookie=owner.cookie)
        assert "备份每天凌晨三点" in json.dumps(facts, ensure_ascii=False)
        # The search index was rebuilt from the restored database.
        deadline = time.monotonic() + 15
        while True:
            found = restored.get_json(
                f"{base}/search?q={quote('备份前的消息')}", cookie=owner.cookie
            )
            if "第一条" in json.dumps(found, ensure_ascii=False) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert "第一条" in json.dumps(found, ensure_ascii=False)
        report = json.loads((target / "boot-report.json").read_text(encoding="utf-8"))
        said = report["recovery"]["restored"]
        assert said["archive"] == str(backed.archive.resolve())
        assert said["sessions_ended"] >= 1
        assert said["counts"]["messages"] == len(ids)
        assert not (target / "restored.json").exists()
        assert restored.get_json("/api/recovery", cookie=owner.cookie)["restored"] == said
    finally:
        restored.stop()
    # A second start no longer says it was restored.
    again = ServerProcess(target).start()
    again.stop()
    report = json.loads((target / "boot-report.json").read_text(encoding="utf-8"))
    assert "restored" not in report["recovery"]


@pytest.mark.anyio
async def test_a_turn_running_at_the_backup_is_settled_by_the_restored_start(
    tmp_path: Path, llm: OpenAIServer
) -> None:
    server = start_with_openai(tmp_path / "data", llm)
    try:
        room = Room(server, llm)
        room.route("lead")
        llm.push(Reply(body=openai_text("太慢了").body, delay_secs=30))
        sent = room.say("@lead 做一件事")
        await eventually(lambda: len(llm.chat_requests) == 1)
        archive = tmp_path / "mid-turn.tar"
        done = run_room("backup", "--to", str(archive), "--data", str(server.data))
        assert done.returncode == 0, done.stderr
    finally:
        server.stop()
    with tarfile.open(archive) as tar, tempfile.TemporaryDirectory() as look:
        tar.extract("room.sqlite", look)
        with sqlite3.connect(Path(look) / "room.sqlite") as conn:
            assert conn.execute("SELECT state FROM turns").fetchall() == [("running",)]

    target = tmp_path / "restored"
    assert run_room("restore", str(archive), "--data", str(target)).returncode == 0
    llm.push(openai_text("恢复后完成"))
    restored = start_with_openai(target, llm)
    try:
        room.server, room.owner = restored, restored.login()
        await eventually(lambda: agent_replies(room, "lead"))
        assert [r["body"] for r in agent_replies(room, "lead")] == ["恢复后完成"]
        [delivery] = room.deliveries(sent["message_id"])
        assert delivery["state"] == "consumed"
        recovery = room.get("/api/recovery")
        assert recovery["turns_interrupted"] == 1 and recovery["redispatched"] == 1
        assert recovery["restored"]["archive"] == str(archive.resolve())
    finally:
        restored.stop()


def refused(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, dict[str, Any]]:
    code = room_main(list(args))
    err = capsys.readouterr().err
    return code, json.loads(err.strip().splitlines()[-1])


def test_restore_refuses_a_folder_that_is_not_empty(
    backed: Backed, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "busy"
    target.mkdir()
    (target / "notes.txt").write_text("mine", encoding="utf-8")
    code, error = refused(capsys, "restore", str(backed.archive), "--data", str(target))
    assert code == EXIT_NOT_EMPTY == error["exit"]
    assert error["code"] == "target_not_empty"
    assert sorted(p.name for p in target.iterdir()) == ["notes.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["busy"]


def test_restore_refuses_a_tampered_archive_and_writes_nothing(
    backed: Backed, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tampered = tmp_path / "tampered.tar"
    raw = bytearray(backed.archive.read_bytes())
    with tarfile.open(backed.archive) as tar:
        blob = next(m for m in tar.getmembers() if m.name.startswith("attachments/"))
    raw[blob.offset_data + 100] ^= 0xFF  # one byte of an attachment, the tar still well-formed
    tampered.write_bytes(bytes(raw))
    target = tmp_path / "new"
    code, error = refused(capsys, "restore", str(tampered), "--data", str(target))
    assert code == EXIT_BAD_BACKUP == error["exit"]
    assert error["code"] == "archive_checksum"
    assert error["details"]["member"] == blob.name
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tampered.tar"]


def rewrite_manifest(source: Path, target: Path, **changes: Any) -> None:
    manifest = {**manifest_of(source), **changes}
    with tarfile.open(source) as old, tarfile.open(target, "w") as new:
        for member in old.getmembers():
            if member.name == "manifest.json":
                raw = json.dumps(manifest).encode()
                member.size = len(raw)
                new.addfile(member, io.BytesIO(raw))
            else:
                new.addfile(member, old.extractfile(member))


@pytest.mark.parametrize(
    ("changes", "code"),
    [
        ({"format_version": 2}, "archive_version"),
        ({"schema_version": 10_000}, "archive_schema_too_new"),
        ({"format": "something-else"}, "archive_no_manifest"),
    ],
)
def test_restore_refuses_a_manifest_it_does_not_understand(
    backed: Backed,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    changes: dict[str, Any],
    code: str,
) -> None:
    odd = tmp_path / "odd.tar"
    rewrite_manifest(backed.archive, odd, **changes)
    status, error = refused(capsys, "restore", str(odd), "--data", str(tmp_path / "new"))
    assert (status, error["code"]) == (EXIT_BAD_BACKUP, code)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["odd.tar"]


def test_an_extra_member_is_refused(
    backed: Backed, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    odd = tmp_path / "odd.tar"
    with tarfile.open(backed.archive) as old, tarfile.open(odd, "w") as new:
        for member in old.getmembers():
            new.addfile(member, old.extractfile(member))
        evil = tarfile.TarInfo("../outside.txt")
        evil.size = 4
        new.addfile(evil, io.BytesIO(b"evil"))
    status, error = refused(capsys, "restore", str(odd), "--data", str(tmp_path / "new"))
    assert (status, error["code"]) == (EXIT_BAD_BACKUP, "archive_unexpected_member")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["odd.tar"]
    assert not (tmp_path.parent / "outside.txt").exists()


def test_attachments_in_attachments_dir_are_backed_up_and_restored_into_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shared = tmp_path / "shared"  # the server's attachments_dir, outside its data folder
    server = ServerProcess(tmp_path / "data", env={"ROOM_ATTACHMENTS_DIR": str(shared)}).start()
    try:
        owner = server.login()
        project = int(server.get_json("/api/me", cookie=owner.cookie)["projects"][0]["id"])
        picture = png("orange")
        attachment = upload(server, owner, project, "橙.png", picture)
        status, body = server.request(
            "POST",
            f"/api/projects/{project}/messages",
            {"body": "共享目录里的图", "attachments": [attachment["id"]]},
            headers=owner.headers,
        )
        assert status == 201, body
        archive = tmp_path / "room.tar"
        done = run_room(
            "backup", "--to", str(archive), "--data", str(server.data),
            "--attachments-dir", str(shared),
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
    finally:
        server.stop()
    stored = {
        p.relative_to(shared): p.read_bytes()
        for p in shared.rglob("*")
        if p.is_file() and p.parent.name != "tmp"
    }
    assert len(stored) == 2  # the picture and its thumbnail
    manifest = manifest_of(archive)
    assert manifest["attachments"]["folder"] == str(shared.resolve())
    assert manifest["attachments"]["included"] == 2

    # Restored with ROOM_ATTACHMENTS_DIR naming another folder, which holds files already
    # (a cluster's shared folder): the files go there by their content addresses, beside them.
    elsewhere = tmp_path / "elsewhere"
    theirs = blobs.put_bytes(elsewhere, b"another server's attachment")
    target = tmp_path / "restored"
    monkeypatch.setenv("ROOM_ATTACHMENTS_DIR", str(elsewhere))
    assert room_main(["restore", str(archive), "--data", str(target)]) == 0
    monkeypatch.delenv("ROOM_ATTACHMENTS_DIR")
    assert not (target / "attachments").exists()
    for relative, content in stored.items():
        assert (elsewhere / relative).read_bytes() == content, relative
    assert blobs.path_of(elsewhere, theirs).read_bytes() == b"another server's attachment"
    assert not [p for p in (elsewhere / "tmp").iterdir()]  # nothing left aside
    marker = json.loads((target / "restored.json").read_text(encoding="utf-8"))
    assert marker["attachments"]["restored_to"] == str(elsewhere.resolve())

    restored = ServerProcess(target, env={"ROOM_ATTACHMENTS_DIR": str(elsewhere)}).start()
    try:
        owner = restored.login()
        page = restored.get_json(f"/api/projects/{project}/messages", cookie=owner.cookie)
        sent = next(m for m in page["messages"] if m["body"] == "共享目录里的图")
        assert fetch_bytes(restored, owner, sent["meta"]["attachments"][0]["url"]) == picture
    finally:
        restored.stop()


def test_an_attachments_dir_inside_the_restored_folder_is_written_with_it(
    backed: Backed, tmp_path: Path
) -> None:
    target = tmp_path / "restored"
    files = target / "files"  # attachments_dir inside the data folder, not its default place
    done = run_room(
        "restore", str(backed.archive), "--data", str(target), "--attachments-dir", str(files)
    )
    assert done.returncode == 0, done.stderr
    assert f"attachment files (in {files})" in done.stdout
    assert not (target / "attachments").exists()
    restored = sorted(p.relative_to(files) for p in files.rglob("*") if p.is_file())
    live = sorted(
        p.relative_to(backed.server.data / "attachments")
        for p in (backed.server.data / "attachments").rglob("*")
        if p.is_file() and p.parent.name != "tmp"
    )
    assert restored == live and len(restored) == 2
    assert stat.S_IMODE(target.stat().st_mode) == 0o700
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging left


def test_postgres_is_refused_with_what_to_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = "postgresql://room:secret@127.0.0.1:1/room"
    archive = tmp_path / "pg.tar"
    code, said = refused(capsys, "backup", "--to", str(archive), "--database", url)
    assert code == EXIT_NOT_SERVED == said["exit"]
    assert said["run"][0].startswith("pg_dump --format=custom")
    assert "secret" not in json.dumps(said)
    assert not archive.exists()
    code, said = refused(
        capsys, "restore", str(archive), "--data", str(tmp_path / "d"), "--database", url
    )
    assert code == EXIT_NOT_SERVED and said["run"][0].startswith("pg_restore")
    assert sorted(os.listdir(tmp_path)) == []
    # A cluster's shared attachments folder is the one to tar.
    shared = tmp_path / "mnt" / "room-files"
    code, said = refused(
        capsys, "backup", "--to", str(archive), "--database", url,
        "--attachments-dir", str(shared),
    )  # fmt: skip
    assert code == EXIT_NOT_SERVED
    assert said["run"][1] == (
        f"tar -C '{shared.parent}' --exclude='room-files/tmp' -cf attachments.tar 'room-files'"
    )
    assert sorted(os.listdir(tmp_path)) == []


def test_scheduled_backups_keep_the_newest_and_show_their_age(
    backed: Backed, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server, folder = backed.server, tmp_path / "every"
    (tmp_path / "every").mkdir()
    (folder / "notes.txt").write_text("not a backup", encoding="utf-8")
    log = tmp_path / "every.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "room", "backup", "--data", str(server.data), "--to",
             str(folder), "--every", "0.0003", "--keep", "2"],
            stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while log.read_text().count("backed up") < 4 and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        proc.terminate()
        assert proc.wait(timeout=20) == 0
    text = log.read_text()
    assert text.count("backed up") >= 4 and "removed" in text, text
    names = sorted(p.name for p in folder.iterdir())
    assert len(names) == 3 and names[0] == "notes.txt", names  # two backups and the stranger
    assert all(n.startswith("room-") and n.endswith(".tar") for n in names[1:])
    last = json.loads((server.data / "last-backup.json").read_text(encoding="utf-8"))
    assert last["every_hours"] == 0.0003 and last["keep"] == 2
    assert Path(last["file"]).parent == folder.resolve() and Path(last["file"]).name == names[-1]
    assert stat.S_IMODE((server.data / "last-backup.json").stat().st_mode) == 0o600

    status, metrics = backed.server.request("GET", "/metrics", cookie=backed.owner.cookie)
    assert status == 200, metrics
    age = next(
        float(line.split()[-1])
        for line in str(metrics).splitlines()
        if line.startswith("room_backup_age_seconds ")
    )
    assert 0 <= age < 30

    assert room_main(["doctor", "--json", "--data", str(server.data)]) in (0, 4)
    summary = json.loads(capsys.readouterr().out)
    assert summary["backup"]["every_hours"] == 0.0003 and summary["backup"]["age_secs"] < 30
    assert not [p for p in summary["problems"] if "backup" in p]
    # Two periods without a backup: the schedule has stopped, and the doctor says so.
    stale = {**last, "at": time.time() - 3600}
    (server.data / "last-backup.json").write_text(json.dumps(stale), encoding="utf-8")
    assert room_main(["doctor", "--data", str(server.data)]) == 4
    assert "is `room backup --every` still running?" in capsys.readouterr().out


def test_backup_refuses_a_folder_as_its_file_and_a_folder_without_a_database(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert room_main(["backup", "--to", str(tmp_path), "--data", str(tmp_path / "d")]) == 1
    assert "is a folder" in capsys.readouterr().err
    archive = tmp_path / "b.tar"
    assert room_main(["backup", "--to", str(archive), "--data", str(tmp_path / "d")]) == 1
    assert "no database" in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == []
