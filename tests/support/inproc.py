"""The real app in-process (Starlette's TestClient runs its lifespan: lock, migrations, writer,
runtime), for tests that need to reach into the core or inject tools and faults."""

from __future__ import annotations

import functools
import re
import sqlite3
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from starlette.testclient import TestClient

from room.actions import auth as auth_actions
from room.actions.projects import AgentSpec, insert_project
from room.agents.tools import Tool
from room.app import RoomServer, create_app
from room.rules.entities import Member, User
from room.services import Services
from room.settings import Settings
from room.store import Tx
from room.store import auth as auth_store
from room.store import members as members_store
from room.store.pg import PgConnection
from room.store.pg import connect as pg_connect

T = TypeVar("T")


@dataclass
class App:
    client: TestClient
    settings: Settings
    owner_cookie: str
    csrf: dict[str, str]  # cookie → csrf token

    @property
    def core(self) -> Services:
        core: Services = self.client.app.state.core  # type: ignore[attr-defined]
        return core

    def call(self, fn: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
        portal = self.client.portal
        assert portal is not None
        return portal.call(functools.partial(fn, *args, **kwargs))

    def write(
        self, job: Callable[[sqlite3.Connection, Tx], T], *, locks: tuple[int, ...] = ()
    ) -> T:
        """``job`` in the writer, declaring ``locks``: the projects it takes a seq in (the
        tests' writer refuses an undeclared one, docs/storage.md "Lock order: the project
        first")."""
        return self.call(self.core.db.write, job, locks=locks)

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        cookie: str | None = None,
        token: str | None = None,
    ) -> tuple[int, Any]:
        headers = {"Origin": self.settings.origin}
        if cookie is not None:
            headers["Cookie"] = f"room_session={cookie}"
            headers["X-CSRF-Token"] = self.csrf[cookie]
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        response = self.client.request(method, path, json=body, headers=headers)
        try:
            return response.status_code, response.json()
        except ValueError:
            return response.status_code, response.text

    def login(self, secret: str, **form: str) -> str:
        response = self.client.post(
            "/login",
            data={"secret": secret, **form},
            headers={"Origin": self.settings.origin},
            follow_redirects=False,
        )
        assert response.status_code == 303, response.text
        cookie = re.search(r"room_session=([^;]+)", response.headers["set-cookie"])
        assert cookie is not None
        self.client.cookies.clear()
        value = cookie.group(1)
        me = self.client.get("/api/me", headers={"Cookie": f"room_session={value}"}).json()
        self.csrf[value] = me["csrf_token"]
        return value

    def new_user(self, handle: str, name: str) -> tuple[User, str]:
        """A person with an account and a session (no project yet)."""

        def job(conn: sqlite3.Connection, tx: Tx) -> tuple[User, str]:
            user_id = auth_store.insert_user(
                conn, handle=handle, display_name=name, is_admin=False, now=tx.now
            )
            secret = auth_actions.create_login_link(conn, tx, user_id, 30)
            user = auth_store.get_user(conn, user_id)
            assert user is not None
            return user, secret

        user, secret = self.write(job)
        return user, self.login(secret)

    def project_with(
        self, name: str, owner: User, member: User | None = None
    ) -> tuple[int, dict[str, Member], str]:
        """A project with ``owner``, optionally a plain ``member``, and an agent (with token)."""

        def job(conn: sqlite3.Connection, tx: Tx) -> tuple[int, dict[str, Member], str]:
            project_id, _ = insert_project(
                conn,
                tx,
                owner,
                name=name,
                goal="",
                workspace=None,
                agents=[AgentSpec("lead", "lead", "负责人")],
            )
            if member is not None:
                members_store.insert(
                    conn,
                    project_id=project_id,
                    kind="human",
                    user_id=member.id,
                    role="member",
                    handle=member.handle,
                    display_name=member.display_name,
                    now=tx.now,
                )
            token = auth_actions.issue_agent_token(conn, tx, str(project_id), "lead")
            found = {m.handle: m for m in members_store.list_for_project(conn, project_id)}
            return project_id, found, token

        return self.write(job)

    def db(self) -> Any:
        """A connection of the test's own to the app's store, as a context manager: SQLite's
        file, or the PostgreSQL database (``database_url``; closed at the block's end)."""
        if self.settings.database_url is not None:
            return _pg_db(self.settings.database_url)
        return sqlite3.connect(self.settings.db_path)


@contextmanager
def _pg_db(url: str) -> Iterator[PgConnection]:
    conn = pg_connect(url)
    try:
        yield conn
    finally:
        conn.close()


@contextmanager
def running_app(
    data: Path,
    *,
    env: Mapping[str, str] | None = None,
    tools: Mapping[str, Tool] | None = None,
    **settings: Any,
) -> Iterator[App]:
    # The lock-order check on (docs/storage.md, "Lock order: the project first"): a write that
    # takes a seq in a project it did not declare fails its test.
    settings.setdefault("database_check_locks", True)
    config = Settings(data=data, port=8470, send_rate_per_sec=1000, send_burst=2000, **settings)
    server = RoomServer(config)
    app = create_app(config, server, env=env or {}, tools=tools)
    with TestClient(app, base_url=config.origin) as client:
        assert server.opened is not None
        handle = App(client, config, "", {})
        handle.owner_cookie = handle.login(server.opened.login_secret)
        yield handle


def owner_user(app: App) -> User:
    def job(conn: sqlite3.Connection, tx: Tx) -> User:
        return auth_actions.ensure_owner(conn, tx)

    return app.write(job)


def post(app: App, path: str, body: Any = None) -> tuple[int, Any]:
    """POST as the signed-in owner; no body sends an empty object."""
    return app.request("POST", path, {} if body is None else body, cookie=app.owner_cookie)


def error(result: tuple[int, Any]) -> tuple[int, str]:
    """(status, error code) of a refused request."""
    status, body = result
    return status, body["error"]["code"]


class Team:
    """A project of ``app`` with its owner, a plain member (小张) and the default agents; requests
    as each of them."""

    def __init__(self, app: App, name: str) -> None:
        self.app = app
        member, self.member_cookie = app.new_user("zhang", "小张")
        self.id, self.members, self.token = app.project_with(name, owner_user(app), member)

    def owner(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        return self.app.request(method, path, body, cookie=self.app.owner_cookie)

    def member(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        return self.app.request(method, path, body, cookie=self.member_cookie)

    def agent(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        return self.app.request(method, path, body, token=self.token)


def wait_until(check: Callable[[], Any], timeout: float = 10.0) -> Any:
    """``check()``'s first true value, polled every 50 ms (the app's loop runs in its thread)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("condition not met in time")
