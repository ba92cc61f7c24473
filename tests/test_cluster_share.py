"""What the nodes of a cluster share besides the log (docs/cluster.md): the attachments folder
(every node serves every attachment), the quota reservations of uploads under way (rows of the
database, so two nodes cannot both take the last of a project's quota, and a dead node's expire)
and presence (each node's people on the bus, merged: a person connected to one node shows
present on the other until that node stops saying so).

Two room servers on one private PostgreSQL and one private nats-server, real HTTP and WebSocket
clients on both."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import anyio
import psycopg
import pytest

from tests.support.nats import NatsServer
from tests.support.server import ServerProcess, Session
from tests.support.wsclient import Client, subscribed
from tests.test_attachments import png
from tests.test_cluster_bus import agent_token

# Two servers started per test on a machine whose cores are shared: more than the default.
pytestmark = pytest.mark.timeout(240)

WAIT = 20.0
QUOTA = 4096  # one 3000-byte upload fits what is left, two do not
RESERVATION_SECS = 9.0  # renewed every 3 s while an upload streams


def node(data: Path, dsn: str, bus: NatsServer, shared: Path) -> ServerProcess:
    env = {
        "ROOM_DATABASE_URL": dsn,
        "ROOM_BUS_URL": bus.url,
        "ROOM_ATTACHMENTS_DIR": str(shared),
        "ROOM_ATTACHMENT_PROJECT_BYTES": str(QUOTA),
        "ROOM_ATTACHMENT_RESERVATION_SECS": str(RESERVATION_SECS),
    }
    return ServerProcess(data, env=env)


def two_nodes(tmp_path: Path, dsn: str, bus: NatsServer) -> tuple[ServerProcess, ServerProcess]:
    shared = tmp_path / "shared-attachments"  # what the operator mounts on both (NFS …)
    a = node(tmp_path / "a", dsn, bus, shared).start()  # one after the other: 2 shared cores
    try:
        b = node(tmp_path / "b", dsn, bus, shared).start()
    except BaseException:
        a.stop()
        raise
    return a, b


def sign_in(server: ServerProcess) -> Session:
    return server.login(server.login_url.rsplit("/", 1)[-1])


def upload(server: ServerProcess, who: Session, name: str, content: bytes) -> tuple[int, Any]:
    query = urllib.parse.urlencode({"name": name})
    req = urllib.request.Request(
        f"{server.origin}/api/projects/1/attachments?{query}",
        data=content,
        headers={**who.headers, "Content-Type": "application/octet-stream"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def download(server: ServerProcess, who: Session, url: str) -> tuple[int, bytes]:
    req = urllib.request.Request(
        f"{server.origin}{url}", headers={"Cookie": f"room_session={who.cookie}"}
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def begin_upload(server: ServerProcess, who: Session, size: int, first: bytes) -> socket.socket:
    """An upload whose head and first bytes are sent, the rest held back."""
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
    sock.sendall(
        (
            f"POST /api/projects/1/attachments?name=slow.bin HTTP/1.1\r\n"
            f"Host: 127.0.0.1:{server.port}\r\nCookie: room_session={who.cookie}\r\n"
            f"X-CSRF-Token: {who.csrf}\r\nContent-Length: {size}\r\n\r\n"
        ).encode()
        + first
    )
    return sock


def reservations(dsn: str) -> list[tuple[int, float]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute("SELECT bytes, expires_at FROM upload_reservations").fetchall()
    return [(int(r[0]), float(r[1])) for r in rows]


def until_reserved(dsn: str, count: int) -> list[tuple[int, float]]:
    deadline = time.monotonic() + WAIT
    while len(found := reservations(dsn)) != count:
        assert time.monotonic() < deadline, f"reservations: {found}"
        time.sleep(0.02)
    return found


def test_an_upload_on_one_node_is_served_by_the_other_from_the_shared_folder(
    tmp_path: Path, pg_dsn: str, nats_server: NatsServer
) -> None:
    a, b = two_nodes(tmp_path, pg_dsn, nats_server)
    try:
        on_a, on_b = sign_in(a), sign_in(b)  # the owner, signed in on each node
        picture = png((200, 120), "blue")
        status, body = upload(a, on_a, "plan.png", picture)
        assert status == 201, body
        stored = body["attachment"]
        status, got = download(b, on_b, stored["url"])
        assert (status, got) == (200, picture)
        status, thumb = download(b, on_b, stored["thumb_url"])
        assert status == 200 and thumb.startswith((b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff"))
        # In the shared folder, by content; nothing in either node's own data folder, and no
        # temporary file left behind.
        shared = tmp_path / "shared-attachments"
        sha = hashlib.sha256(picture).hexdigest()
        assert (shared / sha[:2] / sha[2:]).read_bytes() == picture
        assert not (a.data / "attachments").exists() and not (b.data / "attachments").exists()
        assert list((shared / "tmp").iterdir()) == []

        # The same content uploaded on B is stored once, the file A wrote kept (not replaced
        # under a reader: same inode).
        inode = (shared / sha[:2] / sha[2:]).stat().st_ino
        status, again = upload(b, on_b, "same.png", picture)
        assert status == 201 and again["attachment"]["id"] != stored["id"]
        assert (shared / sha[:2] / sha[2:]).stat().st_ino == inode
        status, got = download(a, on_a, again["attachment"]["url"])
        assert (status, got) == (200, picture)
    finally:
        a.stop()
        b.stop()


def test_two_uploads_on_two_nodes_cannot_both_take_the_last_of_the_quota(
    tmp_path: Path, pg_dsn: str, nats_server: NatsServer
) -> None:
    a, b = two_nodes(tmp_path, pg_dsn, nats_server)
    try:
        on_a, on_b = sign_in(a), sign_in(b)
        size = 3000
        on_a_content, on_b_content = os.urandom(size), os.urandom(size)
        # A's upload has reserved its length and is still streaming when B's arrives.
        sock = begin_upload(a, on_a, size, on_a_content[:1000])
        try:
            [(held, _)] = until_reserved(pg_dsn, 1)
            assert held == size
            status, body = upload(b, on_b, "late.bin", on_b_content)
            assert status == 413, body
            assert (
                body["error"]["code"] == "project_quota"
                and body["error"]["details"]["used"] == size
            )
            sock.sendall(on_a_content[1000:])
            head = sock.recv(65536).split(b"\r\n", 1)[0]
            assert head.startswith(b"HTTP/1.1 201"), head
        finally:
            sock.close()
        assert reservations(pg_dsn) == []  # ended with its upload, in the same transaction
        # Exactly one fits: B's again (now the quota is taken by a stored file) is refused too.
        status, body = upload(b, on_b, "late.bin", on_b_content)
        assert status == 413 and body["error"]["details"]["used"] == size
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            sizes = conn.execute("SELECT size FROM attachments WHERE project_id = 1").fetchall()
        assert sizes == [(size,)]
    finally:
        a.stop()
        b.stop()


def test_a_dead_nodes_upload_reservation_expires(
    tmp_path: Path, pg_dsn: str, nats_server: NatsServer
) -> None:
    a, b = two_nodes(tmp_path, pg_dsn, nats_server)
    try:
        on_a, on_b = sign_in(a), sign_in(b)
        size = 3000
        sock = begin_upload(a, on_a, size, os.urandom(1000))
        try:
            until_reserved(pg_dsn, 1)
            a.kill9()  # mid-upload: nothing ends its reservation
        finally:
            sock.close()
        [(held, expires_at)] = reservations(pg_dsn)
        assert held == size
        content = os.urandom(size)
        # Refused while the dead node's reservation lives (renewed every 3 s until the kill),
        # taken once it expired. Whether an attempt falls before the expiry is the machine's
        # pace, not the test's: each answer is checked against the time it came back.
        deadline = time.monotonic() + RESERVATION_SECS + WAIT
        while True:
            status, body = upload(b, on_b, "after.bin", content)
            answered_at = time.time()
            if status == 201:
                break
            assert status == 413 and body["error"]["code"] == "project_quota", body
            assert time.monotonic() < deadline, "the dead node's reservation never expired"
            time.sleep(0.5)
        # It fitted only once the reservation had expired: an answer of 201 that came back
        # before the expiry would have been taken while the dead node's reservation held.
        assert answered_at >= expires_at
        assert reservations(pg_dsn) == []  # the expired one was deleted by the next reservation
    finally:
        a.stop()
        b.stop()


def presence_seen(client: Client) -> dict[str, str]:
    """The presence map as the client knows it: its snapshot, then each change in order."""
    seen: dict[str, str] = {}
    for frame in client.frames:
        if frame.get("type") in ("subscribed", "presence"):
            seen.update(frame.get("presence") or {})
    return seen


async def presence_where(client: Client, member_id: int, state: str) -> None:
    """Until the client's presence map shows ``member_id`` in ``state``."""
    with anyio.fail_after(WAIT):
        while presence_seen(client).get(str(member_id)) != state:
            await client.recv(timeout=WAIT)


@pytest.mark.anyio
@pytest.mark.usefixtures("clients")
async def test_a_person_on_one_node_is_present_on_the_other_until_that_node_dies(
    tmp_path: Path, pg_dsn: str, nats_server: NatsServer
) -> None:
    a, b = await anyio.to_thread.run_sync(two_nodes, tmp_path, pg_dsn, nats_server)
    try:
        owner_a, owner_b = sign_in(a), sign_in(b)
        bob = a.invite(owner_a, 1, "bob", "Bob")  # signed in on A, no socket yet
        members = b.get_json("/api/projects/1", cookie=owner_b.cookie)["members"]
        bob_id = next(m["id"] for m in members if m["handle"] == "bob")
        owner_id = next(m["id"] for m in members if m["handle"] != "bob" and m["kind"] == "human")

        watcher = await subscribed(b, owner_b.cookie, 1)  # the owner, on B only
        assert watcher.frames[-1]["presence"][str(bob_id)] == "offline"

        on_a = await subscribed(a, bob.cookie, 1)  # Bob's one socket, on A only
        await presence_where(watcher, bob_id, "online")  # B heard it from A on the bus
        # A subscriber arriving on B now gets him in its snapshot; and A shows the owner, whose
        # only socket is on B, present too: the nodes agree.
        late = await subscribed(b, owner_b.cookie, 1)
        assert late.frames[-1]["presence"][str(bob_id)] == "online"
        await presence_where(on_a, owner_id, "online")

        # An external agent whose socket is on A only is there (idle) for B's watcher too.
        status, made = a.request(
            "POST", "/api/projects/1/members",
            {"role": "backend", "handle": "outside", "display_name": "外部", "driver": "external"},
            headers=owner_a.headers,
        )  # fmt: skip
        assert status == 201, made
        outside = int(made["member"]["id"])
        await presence_where(watcher, outside, "offline")
        token = await anyio.to_thread.run_sync(agent_token, a, pg_dsn, "outside")
        agent = await Client.open(a.ws_url, token=token)
        await agent.wait_for("hello")
        await presence_where(watcher, outside, "idle")

        a.kill9()  # no goodbye: B drops A's people when A's set lapses
        await presence_where(watcher, bob_id, "offline")
        await presence_where(watcher, outside, "offline")
        assert all(
            f["presence"].get(str(owner_id)) != "offline"
            for f in watcher.frames
            if f["type"] == "presence"
        )  # the owner's own socket on B kept them present throughout
        for client in (watcher, late):
            client.drop()
    finally:
        a.stop()
        b.stop()
