"""docs/cluster.md's walk from one node to three, run as written.

Every ``sh walkthrough`` block of the doc is read in order and each of its commands is run by
``bash`` (a ``room`` on the PATH that runs this checkout), with the doc's hosts, ports and
folders swapped for the test's own — each swap must find its text in the doc, so a changed
doc fails here rather than being tested half:

* PostgreSQL is the tests' private cluster (``createuser``/``createdb`` run against it as its
  superuser through ``PGHOST``/``PGPORT``/``PGUSER``; the role and database they make, which
  the nodes then use, are named apart from the harness's own ``room``); ``nats-server`` is the tests' private one, started with
  the flags the doc gives (checked, not run twice);
* the ``export`` lines set the commands' environment; ``ROOM_PUBLIC_URL`` is left out, because
  the test talks to each node at its own address (no balancer in front);
* a ``room serve`` runs in the background until its ``/healthz`` answers; every other command
  must exit 0.

Before the first block, the "server you have" is a SQLite server in ``srv/room`` with a message
and a picture; after the last, node 3 (which never saw SQLite) serves both — the message from
PostgreSQL, the picture from the shared folder — ``room cluster status`` lists three nodes up at
their addresses, the move made project 1 node 2's, and the backups hold the dump, the
attachments and node 1's ``node-id``, and the doc's sample of ``room doctor`` (its ``text
doctor`` block) has the shape of what ``room doctor`` printed in the walk: the same lines'
keys in the same order. The doc's nginx and Caddy samples are checked with ``nginx -t`` and
``caddy validate`` when those are installed."""

from __future__ import annotations

import io
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from PIL import Image

from tests.support.nats import NatsServer
from tests.support.postgres import SUPERUSER, PostgresCluster
from tests.support.procs import die_with_parent, free_port
from tests.support.server import ServerProcess

pytestmark = pytest.mark.timeout(420)  # a SQLite server and three nodes on 2 shared cores

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "cluster.md"
START_SECS = 90.0
NODES = ("10.0.0.11", "10.0.0.12", "10.0.0.13")
# The doc's role and database are both "room", as the harness's superuser is: the test's are
# named apart (and its cluster asks no password).
ROLE, DATABASE = "walk", "walkdb"
BUS_HOST = "db.internal:4222"
RUN = {"export", "createuser", "createdb", "nats-server", "room", "mkdir", "cp", "curl", "pg_dump",
       "tar"}  # fmt: skip


def walkthrough() -> list[str]:
    """The commands of the doc's ``sh walkthrough`` blocks, in order (continuations joined,
    comments and blank lines dropped)."""
    commands = []
    for block in re.findall(r"```sh walkthrough\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S):
        text = block.replace("\\\n", " ")
        commands += [line.strip() for line in text.splitlines() if line.strip()[:1] not in "#"]
    return commands


def swaps(tmp: Path, ports: list[int], pg_port: int, nats_port: int) -> dict[str, str]:
    """The doc's text → the test's, for each node, the database and bus hosts, the folders."""
    found: dict[str, str] = {}
    for ip, port in zip(NODES, ports, strict=True):
        found[f"--host {ip} --port 8470"] = f"--host 127.0.0.1 --port {port}"
        found[f"http://{ip}:8470/"] = f"http://127.0.0.1:{port}/"
    return found | {
        "createuser room": f"createuser {ROLE}",
        "createdb --owner room room": f"createdb --owner {ROLE} {DATABASE}",
        "postgresql://room:PASSWORD@db.internal/room": (
            f"postgresql://{ROLE}@127.0.0.1:{pg_port}/{DATABASE}"
        ),
        BUS_HOST: f"127.0.0.1:{nats_port}",
        "/srv/": f"{tmp}/srv/",
        " /srv ": f" {tmp}/srv ",
        "/mnt/room-shared": f"{tmp}/mnt/room-shared",
        "/backups": f"{tmp}/backups",
    }


def swapped(command: str, table: dict[str, str]) -> str:
    for old, new in table.items():
        command = command.replace(old, new)
    return command


def test_the_walkthrough_names_only_commands_this_test_runs() -> None:
    commands = walkthrough()
    assert commands, "docs/cluster.md has no sh walkthrough block"
    assert {c.split()[0] for c in commands} <= RUN, commands
    text = "\n".join(commands)
    for old in swaps(Path("/t"), [1, 2, 3], 4, 5):
        assert old in text, f"docs/cluster.md's walkthrough no longer says {old!r}"
    exports = {shlex.split(c)[1].split("=", 1)[0] for c in commands if c.startswith("export ")}
    assert exports == {
        "ROOM_DATABASE_URL", "ROOM_BUS_URL", "ROOM_ATTACHMENTS_DIR", "ROOM_PUBLIC_URL",
    }  # fmt: skip
    # The harness's nats-server is started with these flags (tests/support/nats.py).
    assert [c for c in commands if c.startswith("nats-server")] == [
        "nats-server -a 10.0.0.10 -p 4222"
    ]


def doctor_shape(text: str) -> list[str]:
    """The keys of ``room doctor``'s lines in order (``data``, ``server``, …, ``database``,
    ``pdf``, ``backup``): a run of peer lines counts as one ``  node``, ``PROBLEM`` lines are
    left out (the sample shows one, the healthy walk none) and the last line is the verdict."""
    keys: list[str] = []
    lines = text.rstrip("\n").splitlines()
    for line in lines[:-1]:
        if line.startswith("  node "):
            key = "  node"
        else:
            found = re.match(r"([a-z][a-z ]*|PROBLEM):(\s|$)", line)
            assert found, f"a line of room doctor without a key: {line!r}"
            key = found.group(1)
        if key != "PROBLEM" and not (keys and key == keys[-1] == "  node"):
            keys.append(key)
    assert lines[-1] in ("healthy", "needs attention"), lines[-1]
    return [*keys, "(verdict)"]


def test_the_doctor_sample_is_a_whole_output() -> None:
    """The sample's own shape: every line has a key, PROBLEM lines come right before the
    verdict, which is "needs attention" when there are any (the comparison with a real
    output is in the walk)."""
    (sample,) = doc_blocks("text doctor")
    shape = doctor_shape(sample)
    assert shape[:2] == ["data", "server"] and "database" in shape and "peers" in shape
    lines = sample.rstrip("\n").splitlines()
    problems = [n for n, line in enumerate(lines) if line.startswith("PROBLEM:")]
    assert problems == list(range(len(lines) - 1 - len(problems), len(lines) - 1)), lines
    assert lines[-1] == ("needs attention" if problems else "healthy")


def png() -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (80, 48), "purple").save(out, "PNG")
    return out.getvalue()


@pytest.fixture
def shim(tmp_path: Path) -> Path:
    """A folder with a ``room`` that runs this checkout's."""
    folder = tmp_path / "bin"
    folder.mkdir()
    room = folder / "room"
    room.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m room "$@"\n')
    room.chmod(0o755)
    return folder


@pytest.fixture
def cleanup_role(pg_cluster: PostgresCluster) -> Iterator[None]:
    """The doc's role and database, made by its commands, gone after the test."""
    yield
    with psycopg.connect(pg_cluster.dsn("postgres"), autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)".encode())
        conn.execute(f"DROP ROLE IF EXISTS {ROLE}".encode())


def healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as r:
            return bool(r.status == 200)
    except OSError:
        return False


@pytest.mark.usefixtures("cleanup_role")
def test_one_node_to_three_as_the_doc_says(
    tmp_path: Path, shim: Path, pg_cluster: PostgresCluster, nats_server: NatsServer
) -> None:
    # The server you have: SQLite in srv/room, a message and a picture in project 1.
    single = ServerProcess(tmp_path / "srv" / "room").start()
    try:
        owner = single.login()
        project = int(single.get_json("/api/me", cookie=owner.cookie)["projects"][0]["id"])
        assert project == 1  # the doc moves project 1
        picture = png()
        request = urllib.request.Request(
            f"{single.origin}/api/projects/1/attachments?name=p.png",
            data=picture,
            headers={**owner.headers, "Content-Type": "application/octet-stream"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=30) as r:
            attachment = json.loads(r.read())["attachment"]
        status, body = single.request(
            "POST", "/api/projects/1/messages",
            {"body": "单机时代的消息", "attachments": [attachment["id"]]}, headers=owner.headers,
        )  # fmt: skip
        assert status == 201, body
    finally:
        single.stop()  # "Stop it": the doc's step 4

    ports = [free_port() for _ in NODES]
    table = swaps(tmp_path, ports, pg_cluster.port, nats_server.port)
    env = {
        **os.environ,
        "PATH": f"{shim}:{os.environ['PATH']}",
        "PYTHONPATH": str(ROOT),
        "PGHOST": "127.0.0.1",
        "PGPORT": str(pg_cluster.port),
        "PGUSER": SUPERUSER,
    }
    env = {k: v for k, v in env.items() if not k.startswith("ROOM_")}
    servers: list[subprocess.Popen[bytes]] = []
    said: dict[str, str] = {}
    try:
        for command in walkthrough():
            line = swapped(command, table)
            word = command.split()[0]
            if word == "nats-server":
                continue  # the harness's (the flags are checked above)
            if word == "export":
                name, value = shlex.split(line)[1].split("=", 1)
                if name != "ROOM_PUBLIC_URL":  # no balancer here: each node at its address
                    env[name] = value
                continue
            if command.startswith("room serve"):
                port = int(line.split("--port ")[1].split()[0])
                with (tmp_path / f"serve-{port}.log").open("wb") as log:  # the child keeps it
                    servers.append(
                        subprocess.Popen(
                            ["bash", "-c", f"exec {line}"],
                            env=env,
                            stdout=log,
                            stderr=subprocess.STDOUT,
                            preexec_fn=die_with_parent(signal.SIGKILL),
                        )
                    )
                deadline = time.monotonic() + START_SECS
                while not healthy(port):
                    assert servers[-1].poll() is None, (tmp_path / f"serve-{port}.log").read_text()
                    assert time.monotonic() < deadline, f"{command}: not healthy"
                    time.sleep(0.1)
                continue
            done = subprocess.run(
                ["bash", "-c", line], env=env, capture_output=True, text=True, timeout=120
            )
            assert done.returncode == 0, f"{command}\n{done.stdout}\n{done.stderr}"
            said[command] = done.stdout

        ids = [(tmp_path / "srv" / f).joinpath("node-id").read_text().strip()
               for f in ("room", "room-2", "room-3")]  # fmt: skip
        # /healthz on each node says PostgreSQL.
        for ip in NODES:
            health = json.loads(said[f"curl -fsS http://{ip}:8470/healthz"])
            assert health["ok"] is True and health["database"]["backend"] == "postgresql"
        # `room cluster status`: the three nodes up at their addresses; node 1 home of project 1
        # (its node-id kept from the SQLite days).
        status_text = said["room cluster status --data /srv/room"]
        for node, port in zip(ids, ports, strict=True):
            assert re.search(rf"node {node}( \(this data folder's\))?: up at 127\.0\.0\.1:{port}",
                             status_text), status_text  # fmt: skip
        assert f"node {ids[0]} (this data folder's): up" in status_text
        assert "home of 1 project(s) (1 " in status_text
        doctor = said["room doctor --data /srv/room"]
        assert "peers:\n" in doctor and doctor.endswith("healthy\n"), doctor
        # The doc's sample of doctor's output: the same lines' keys in the same order.
        (sample,) = doc_blocks("text doctor")
        assert doctor_shape(doctor) == doctor_shape(sample), f"room doctor printed:\n{doctor}"
        for node, port in zip(ids, ports, strict=True):
            assert f"  node {node}" in doctor and f"up at 127.0.0.1:{port}" in doctor, doctor
        # `room cluster move`: project 1's home is node 2 now.
        url = env["ROOM_DATABASE_URL"]
        with psycopg.connect(url) as conn:
            home = conn.execute("SELECT home_node FROM projects WHERE id = 1").fetchone()
        assert home == (ids[1],)

        # Node 3 never saw SQLite: it serves the old message and its picture (shared folder).
        link = subprocess.run(
            ["bash", "-c", f"room login-link --data {tmp_path}/srv/room-3"],
            env=env, capture_output=True, text=True, timeout=60, check=True,
        ).stdout.strip()  # fmt: skip
        node3 = ServerProcess(tmp_path / "srv" / "room-3", port=ports[2])
        visitor = node3.login(link.rsplit("/", 1)[-1])
        page = node3.get_json("/api/projects/1/messages", cookie=visitor.cookie)
        old = next(m for m in page["messages"] if m["body"] == "单机时代的消息")
        fetched = urllib.request.Request(
            f"{node3.origin}{old['meta']['attachments'][0]['url']}",
            headers={"Cookie": f"room_session={visitor.cookie}"},
        )
        with urllib.request.urlopen(fetched, timeout=10) as r:
            assert r.read() == picture

        # What to back up: the dump, the shared attachments, node 1's folder with its node-id.
        backups = tmp_path / "backups"
        listed = subprocess.run(
            ["pg_restore", "--list", str(backups / "room.pgdump")],
            capture_output=True, text=True, timeout=60, check=True,
        ).stdout  # fmt: skip
        assert "TABLE DATA public messages" in listed
        with tarfile.open(backups / "attachments.tar") as tar:
            names = tar.getnames()
        sha = urllib.parse.unquote(str(attachment.get("sha256", "")))
        assert any(n.startswith("attachments/") and n.count("/") == 2 for n in names), names
        if sha:
            assert f"attachments/{sha[:2]}/{sha[2:]}" in names
        with tarfile.open(backups / "web-1.tar") as tar:
            assert "room/node-id" in tar.getnames()
    finally:
        for proc in servers:
            proc.send_signal(signal.SIGTERM)
        for proc in servers:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def doc_blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)


@pytest.mark.skipif(shutil.which("nginx") is None, reason="nginx is not installed")
def test_the_nginx_sample_passes_nginx_t(tmp_path: Path) -> None:
    (site,) = doc_blocks("nginx")
    for needed in ("location = /ws", "proxy_set_header Upgrade $http_upgrade;", "upstream room_nodes",
                   *(f"server {ip}:8470" for ip in NODES)):  # fmt: skip
        assert needed in site
    certs = tmp_path / "certs"
    certs.mkdir()
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
         "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1", "-keyout", str(certs / "privkey.pem"),
         "-out", str(certs / "fullchain.pem")],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    for old, new in {
        "    listen [::]:443 ssl http2;\n": "",
        "listen 443 ssl http2;": f"listen 127.0.0.1:{free_port()} ssl http2;",
        "/etc/letsencrypt/live/room.example.com/": f"{certs}/",
    }.items():
        assert old in site
        site = site.replace(old, new)
    user = "user root;\n" if os.geteuid() == 0 else ""
    conf = tmp_path / "nginx.conf"
    conf.write_text(
        f"{user}pid {tmp_path}/nginx.pid;\nerror_log {tmp_path}/error.log;\n"
        "events { worker_connections 64; }\n"
        f"http {{\n    access_log {tmp_path}/access.log;\n"
        + "".join(
            f"    {kind}_temp_path {tmp_path}/{kind};\n"
            for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
        )
        + f"{site}\n}}\n"
    )
    done = subprocess.run(
        ["nginx", "-t", "-p", str(tmp_path), "-c", str(conf), "-e", str(tmp_path / "error.log")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "syntax is ok" in done.stderr


@pytest.mark.skipif(shutil.which("caddy") is None, reason="caddy is not installed")
def test_the_caddy_sample_passes_caddy_validate(tmp_path: Path) -> None:
    (site,) = doc_blocks("caddy")
    assert "health_uri /healthz" in site
    assert all(f"{ip}:8470" in site for ip in NODES)
    caddyfile = tmp_path / "Caddyfile"
    caddyfile.write_text(site)
    home = {"HOME": str(tmp_path), "XDG_DATA_HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path)}
    done = subprocess.run(
        ["caddy", "validate", "--config", str(caddyfile), "--adapter", "caddyfile"],
        capture_output=True, text=True, timeout=60, env={**os.environ, **home},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "Valid configuration" in done.stdout + done.stderr
