from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.support.inproc import App, owner_user, running_app
from tests.support.live_room import Room
from tests.support.llm_servers import TEST_API_KEY, OpenAIServer
from tests.support.postgres import pg_cluster, pg_dsn  # noqa: F401 (fixtures: a private PostgreSQL)
from tests.support.server import ServerProcess, start_with_openai
from tests.support.wsclient import Client

# What makes a test slow: a server in a subprocess, a browser, or a scripted model server with
# one. Such tests are marked ``slow`` here, so ``./scripts/test -m "not slow"`` is the quick
# inner loop (the pure core, the store, the app in-process).
SLOW_FIXTURES = frozenset({"server", "room", "room_server", "chromium", "owner"})
SLOW_NAMES = ("ServerProcess", "start_with_openai", "sync_playwright", "LiveRoom")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        module = getattr(item, "module", None)
        uses = set(getattr(item, "fixturenames", ()))
        if (
            uses & SLOW_FIXTURES
            or item.get_closest_marker("browser") is not None
            or any(hasattr(module, name) for name in SLOW_NAMES)
        ):
            item.add_marker(pytest.mark.slow)


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
