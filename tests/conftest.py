from __future__ import annotations

import json
import os
import socket
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.support.inproc import App, owner_user, running_app
from tests.support.live_room import Room
from tests.support.llm_servers import TEST_API_KEY, OpenAIServer
from tests.support.nats import nats_server  # noqa: F401 (fixture: a private nats-server)
from tests.support.postgres import pg_cluster, pg_dsn  # noqa: F401 (fixtures: a private PostgreSQL)
from tests.support.server import ServerProcess, start_with_openai
from tests.support.task_world import World, make_world
from tests.support.work import Scripts
from tests.support.wsclient import Client

# The servers the tests start (subprocesses inherit it) refuse a write that takes a seq in a
# project it did not declare (docs/storage.md, "Lock order: the project first").
os.environ.setdefault("ROOM_DATABASE_CHECK_LOCKS", "1")

# What makes a test slow: a server in a subprocess, a browser, or a scripted model server with
# one. Such tests are marked ``slow`` here, so ``./scripts/test -m "not slow"`` is the quick
# inner loop (the pure core, the store, the app in-process).
SLOW_FIXTURES = frozenset({"server", "room", "room_server", "chromium", "owner"})
SLOW_NAMES = ("ServerProcess", "start_with_openai", "sync_playwright", "LiveRoom")


# Each test file's seconds in a recent run (scripts/file_seconds.py writes it), to hand the
# longest files to the workers first; a file not in it counts by its tests' marks.
FILE_SECONDS: dict[str, float] = json.loads(
    (Path(__file__).parent / "file_seconds.json").read_text(encoding="utf-8")
)
COST_BROWSER, COST_SLOW, COST_OTHER = 6.0, 2.5, 0.05


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    guess: dict[str, float] = {}
    for item in items:
        module = getattr(item, "module", None)
        uses = set(getattr(item, "fixturenames", ()))
        browser = item.get_closest_marker("browser") is not None
        if uses & SLOW_FIXTURES or browser or any(hasattr(module, name) for name in SLOW_NAMES):
            item.add_marker(pytest.mark.slow)
        slow = item.get_closest_marker("slow") is not None
        file = _file(item)
        guess[file] = guess.get(file, 0.0) + (
            COST_BROWSER if browser else COST_SLOW if slow else COST_OTHER
        )
    # The longest files first. Each file goes to one worker whole, in collection order
    # (./scripts/test: ``--dist loadfile --no-loadscope-reorder``; xdist would otherwise order
    # files by their number of tests, and hand the few long browser files out last, leaving the
    # other workers idle at the end). A file's own tests keep their order: the sort is stable.
    items.sort(key=lambda item: -FILE_SECONDS.get(_file(item), guess[_file(item)]))


def _file(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ServerProcess]:
    """A fresh server on its own data folder, stopped after the test."""
    proc = ServerProcess(tmp_path / "data").start()
    try:
        yield proc
    finally:
        proc.stop()


@pytest.fixture
def app(tmp_path: Path) -> Iterator[App]:
    """The real app in-process on its own data folder, the owner signed in; closed after the test.
    Modules that need other settings define their own ``app``."""
    with running_app(tmp_path / "data") as handle:
        yield handle


@pytest.fixture
def project(app: App) -> tuple[int, int]:
    """A project of the owner with a lead agent: (project id, the lead's member id)."""
    project_id, members, _ = app.project_with("输入", owner_user(app))
    return project_id, members["lead"].id


@pytest.fixture
def llm() -> Iterator[OpenAIServer]:
    """A local OpenAI-compatible server; tests script its replies (``llm.push``)."""
    with OpenAIServer(api_key=TEST_API_KEY) as server:
        yield server


@pytest.fixture
async def clients() -> AsyncIterator[list[Client]]:
    """Clients registered here are dropped when the test ends."""
    opened: list[Client] = []
    Client.registry = opened
    try:
        yield opened
    finally:
        Client.registry = None
        for client in opened:
            client.drop()


@pytest.fixture
def room(tmp_path: Path, llm: OpenAIServer) -> Iterator[Room]:
    """A server wired to the scripted ``llm``, with the owner signed in; stopped after the test."""
    server = start_with_openai(tmp_path / "data", llm)
    try:
        yield Room(server, llm)
    finally:
        server.stop()


@pytest.fixture
def hermetic_git(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Neither our git nor a server started after it reads the machine's git configuration
    (a module asks for it in ``pytestmark``: set up before ``room`` starts the server)."""
    config = tmp_path / "gitconfig"
    config.write_text("")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")


@pytest.fixture
def workspace_roots(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The repositories these tests make are in tmp_path, outside the default roots
    (<data>/workspaces): the operator's setting allows them (the server inherits it)."""
    monkeypatch.setenv("ROOM_WORKSPACE_ROOTS", str(tmp_path))


@pytest.fixture
def listener() -> Iterator[tuple[int, list[int]]]:
    """A TCP listener on the host's loopback: (port, connections accepted)."""
    accepted: list[int] = []
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            accepted.append(1)
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1], accepted
    finally:
        stop.set()
        thread.join()
        server.close()


@pytest.fixture
def scripts() -> Iterator[Scripts]:
    """Per-agent model scripts (tests.support.work); a step that raised fails the test."""
    found = Scripts()
    yield found
    assert not found.errors, found.errors


@pytest.fixture
def scripted_llm(scripts: Scripts) -> Iterator[OpenAIServer]:
    """A model server answering from ``scripts``. A module makes it the ``room`` fixture's by
    defining ``llm`` to return it."""
    with OpenAIServer(scripts.answer, api_key=TEST_API_KEY) as server:
        yield server


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    """A project on the real actions and database, no HTTP, no model (tests.support.task_world)."""
    async for found in make_world(tmp_path):
        yield found
