"""A folder belongs to one project (issue 24, item 3), through the real app in-process over
HTTP: two projects of two owners cannot share, nest or contain a workspace — set, given at
creation, raced for, or named as a research reference; default folders are their projects'
(and ``<data>/workspaces`` nobody's); a purged project releases its folder; the default roots
are ``<data>/workspaces`` only and the boot report says which roots are in effect."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from room.actions import projects as project_actions
from room.actions.workspaces import set_workspace
from room.doctor import collect
from room.errors import ConflictError
from room.rules.entities import Member, Project, User
from room.store import Tx
from room.store import members as members_store
from tests.support.inproc import App, owner_user, running_app

pytestmark = pytest.mark.slow  # real folders and git under the app, racing writes

BUDGET = {"tokens": 5000, "requests": 10, "seconds": 600, "steps": 10}


class Person:
    """A signed-in person (its session cookie) making requests of ``app``."""

    def __init__(self, app: App, cookie: str, user: User) -> None:
        self.app, self.cookie, self.user = app, cookie, user

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        return self.app.request(method, path, body, cookie=self.cookie)

    def create(self, name: str, workspace: Path | None = None) -> tuple[int, Any]:
        body: dict[str, Any] = {"name": name}
        if workspace is not None:
            body["workspace"] = str(workspace)
        return self.request("POST", "/api/projects", body)

    def new_project(self, name: str, workspace: Path | None = None) -> int:
        status, data = self.create(name, workspace)
        assert status == 201, data
        return int(data["project"]["id"])

    def set_workspace(self, project_id: int, path: Path | None) -> tuple[int, Any]:
        body = {"path": None if path is None else str(path)}
        return self.request("PUT", f"/api/projects/{project_id}/workspace", body)

    def workspace(self, project_id: int) -> dict[str, Any]:
        status, data = self.request("GET", f"/api/projects/{project_id}")
        assert status == 200, data
        return dict(data["project"]["workspace"])

    def projects(self) -> list[str]:
        _status, me = self.request("GET", "/api/me")
        return [p["name"] for p in me["projects"]]


def alice(app: App) -> Person:
    """The server's owner (signed in by running_app)."""
    return Person(app, app.owner_cookie, owner_user(app))


def bob(app: App) -> Person:
    """Another person with an account on the same server: another tenant."""
    user, cookie = app.new_user("bob", "小波")
    return Person(app, cookie, user)


def in_use(result: tuple[int, Any], path: Path) -> dict[str, Any]:
    """The ``workspace_in_use`` refusal's details, checked to name ``path`` (resolved)."""
    status, body = result
    assert status == 409, body
    assert body["error"]["code"] == "workspace_in_use", body
    details = dict(body["error"]["details"])
    assert details["path"] == str(path.resolve())
    return details


def hidden(result: tuple[int, Any], path: Path, name: str) -> None:
    """Refused as in use without a word about the project that holds the folder."""
    details = in_use(result, path)
    assert "project_id" not in details and "project_name" not in details
    assert name not in json.dumps(result[1], ensure_ascii=False)


@pytest.fixture
def work(tmp_path: Path) -> Path:
    root = tmp_path / "work"
    for folder in ("a/inner", "a/docs", "b", "ab", "free"):
        (root / folder).mkdir(parents=True)
    (root / "a" / "README.md").write_text("甲方的文件\n", encoding="utf-8")
    (root / "to-a").symlink_to(root / "a")
    return root


@pytest.fixture(params=["sqlite", "postgresql"])
def app(request: pytest.FixtureRequest, tmp_path: Path, work: Path) -> Iterator[App]:
    """The operator allows folders in ``work``; on each store (``[postgresql]``: a fresh
    database of the tests' private cluster)."""
    url = None if request.param == "sqlite" else str(request.getfixturevalue("pg_dsn"))
    with running_app(tmp_path / "data", workspace_roots=(str(work),), database_url=url) as handle:
        yield handle


@pytest.fixture
def plain(tmp_path: Path) -> Iterator[App]:
    """The default roots: ``<data>/workspaces`` only."""
    with running_app(tmp_path / "data") as handle:
        yield handle


def slots_of(app: App) -> Path:
    return app.settings.data.resolve() / "workspaces"


# -- setting a workspace ------------------------------------------------------------------------


def test_a_second_owner_cannot_take_the_same_an_inner_or_a_containing_folder(
    app: App, work: Path
) -> None:
    a, b = alice(app), bob(app)
    theirs = a.new_project("甲方项目", work / "a")
    mine = b.new_project("乙方项目")
    for folder in (work / "a", work / "a" / "inner", work, work / "to-a"):
        hidden(b.set_workspace(mine, folder), folder, "甲方项目")
    # Nothing was stored or audited; the other project still has its folder.
    assert b.workspace(mine)["default"] is True
    _status, audit = b.request("GET", f"/api/projects/{mine}/audit")
    assert [e for e in audit["events"] if e["action"] == "project.workspace"] == []
    assert a.workspace(theirs)["path"] == str((work / "a").resolve())
    # Compared by path parts: /work/ab is not inside /work/a.
    status, data = b.set_workspace(mine, work / "ab")
    assert status == 200, data
    assert data["workspace"]["path"] == str((work / "ab").resolve())
    # …and now the first owner cannot take the second one's folder either.
    hidden(a.set_workspace(theirs, work / "ab"), work / "ab", "乙方项目")


def test_a_member_of_the_other_project_is_told_which_project_holds_the_folder(
    app: App, work: Path
) -> None:
    a, b = alice(app), bob(app)
    theirs = a.new_project("甲方项目", work / "a")
    other = a.new_project("丙方项目")
    details = in_use(a.set_workspace(other, work / "a" / "inner"), work / "a" / "inner")
    assert (details["project_id"], details["project_name"]) == (theirs, "甲方项目")
    mine = b.new_project("乙方项目")
    hidden(b.set_workspace(mine, work / "a"), work / "a", "甲方项目")

    def join(conn: sqlite3.Connection, tx: Tx) -> None:
        members_store.insert(conn, project_id=theirs, kind="human", user_id=b.user.id,
                             role="member", handle="bob", display_name="小波", now=tx.now)  # fmt: skip

    app.write(join)
    details = in_use(b.set_workspace(mine, work / "a"), work / "a")
    assert details["project_name"] == "甲方项目"


def test_creating_a_project_in_a_taken_folder_is_refused_and_creates_nothing(
    app: App, work: Path
) -> None:
    a, b = alice(app), bob(app)
    a.new_project("甲方项目", work / "a")
    for folder in (work / "a", work / "a" / "inner", work):
        hidden(b.create("乙方项目", folder), folder, "甲方项目")
    assert b.projects() == []
    with app.db() as conn:
        assert conn.execute("SELECT count(*) FROM projects WHERE name = '乙方项目'").fetchone() == (
            0,
        )
    assert b.create("乙方项目", work / "b")[0] == 201


def test_two_requests_racing_for_one_folder_give_it_to_one_project(app: App, work: Path) -> None:
    """Both requests resolve their path and reach the writer while it is held, so any check
    made before the write would pass for both; the check in the write that stores the path
    sees the first one's write."""
    a, b = alice(app), bob(app)
    first, second = a.new_project("甲方项目"), b.new_project("乙方项目")

    def owners(conn: sqlite3.Connection, tx: Tx) -> list[Member | None]:
        return [members_store.for_user(conn, first, a.user.id),
                members_store.for_user(conn, second, b.user.id)]  # fmt: skip

    owner_a, owner_b = app.write(owners)
    assert owner_a is not None and owner_b is not None
    folder = str(work / "b")

    async def held(*requests: Awaitable[Any]) -> list[Any]:
        gate = threading.Event()
        blocker = asyncio.ensure_future(app.core.db.write(lambda conn, tx: gate.wait(10)))
        both = asyncio.gather(*requests, return_exceptions=True)
        await asyncio.sleep(0.5)  # both paths resolved, both writes queued behind the blocker
        gate.set()
        await blocker
        return await both

    def race_to_set() -> Awaitable[list[Any]]:
        return held(set_workspace(app.core, owner_a, folder),
                    set_workspace(app.core, owner_b, folder))  # fmt: skip

    def race_to_create() -> Awaitable[list[Any]]:
        return held(
            project_actions.create_project(app.core, a.user, name="丙", workspace=str(work / "ab")),
            project_actions.create_project(app.core, b.user, name="丁", workspace=str(work / "ab")),
        )

    races: list[Callable[[], Awaitable[list[Any]]]] = [race_to_set, race_to_create]
    for race in races:
        results = app.call(race)
        refused = [r for r in results if isinstance(r, ConflictError)]
        assert len(refused) == 1 and refused[0].code == "workspace_in_use", results
        assert len([r for r in results if isinstance(r, dict | Project)]) == 1, results
    with app.db() as conn:
        taken = dict(conn.execute("SELECT workspace, count(*) FROM projects GROUP BY workspace"))
    assert taken[str(work / "b")] == 1 and taken[str(work / "ab")] == 1


# -- default folders and the default roots ------------------------------------------------------


def test_the_default_roots_are_the_workspaces_folder_only(plain: App, tmp_path: Path) -> None:
    b = bob(plain)
    mine = b.new_project("乙方项目")
    slots = slots_of(plain)
    elsewhere, inside_data = tmp_path / "elsewhere", plain.settings.data / "inside"
    for folder in (slots / "shared", elsewhere, inside_data):
        folder.mkdir()
    # The temporary folder (a default root before) and the rest of the data folder.
    for folder in (elsewhere, inside_data):
        status, body = b.set_workspace(mine, folder)
        assert (status, body["error"]["code"]) == (400, "workspace_outside_roots")
    status, body = b.set_workspace(mine, slots / "shared")  # a folder of the workspaces folder
    assert status == 200, body
    assert (body["workspace"]["path"], body["workspace"]["default"]) == (
        str(slots / "shared"), False,
    )  # fmt: skip


def test_another_projects_default_folder_and_the_workspaces_folder_are_refused(
    plain: App,
) -> None:
    a, b = alice(plain), bob(plain)
    theirs = a.new_project("甲方项目")  # its default folder is made on first use
    mine = b.new_project("乙方项目")
    slots = slots_of(plain)
    default = slots / str(theirs)
    assert a.workspace(theirs) | {"path": str(default), "default": True} == a.workspace(theirs)
    (default / "src").mkdir()
    for folder in (default, default / "src"):
        hidden(b.set_workspace(mine, folder), folder, "甲方项目")
    # The workspaces folder holds every default: nobody's, not even for a member of them all.
    details = in_use(a.set_workspace(theirs, slots), slots)
    assert "project_name" not in details
    hidden(b.create("乙方第二个", default), default, "甲方项目")
    # As a research reference: the same.
    hidden(propose(b, mine, "dir", default / "src"), default / "src", "甲方项目")
    hidden(propose(b, mine, "dir", slots), slots, "甲方项目")
    # A project that works elsewhere still holds its default folder: it may go back to it.
    (slots / "shared").mkdir()
    assert a.set_workspace(theirs, slots / "shared")[0] == 200
    hidden(b.set_workspace(mine, default), default, "甲方项目")
    assert a.set_workspace(theirs, None)[0] == 200
    assert a.workspace(theirs)["path"] == str(default)


def test_a_later_project_gets_its_default_folder_nobody_could_take_before(plain: App) -> None:
    a, b = alice(plain), bob(plain)
    mine = b.new_project("乙方项目")
    slots = slots_of(plain)
    with plain.db() as conn:
        upcoming = int(conn.execute("SELECT max(id) FROM projects").fetchone()[0]) + 1
    for name in (str(upcoming), "007"):  # a default to come; digits no id is spelled as
        (slots / name).mkdir()
        status, body = b.set_workspace(mine, slots / name)
        details = in_use((status, body), slots / name)
        assert set(details) == {"path", "hint"}
    later = a.new_project("后来的项目")
    assert later == upcoming
    assert a.workspace(later) | {"path": str(slots / str(upcoming)), "default": True} == (
        a.workspace(later)
    )
    assert b.workspace(mine)["default"] is True


def test_a_trashed_project_keeps_its_folders_and_a_purged_one_releases_them(
    tmp_path: Path, work: Path
) -> None:
    data = tmp_path / "data"
    roots = (str(work), str(data / "workspaces"))
    with running_app(data, workspace_roots=roots) as app:
        a, b = alice(app), bob(app)
        theirs = a.new_project("甲方项目", work / "a")
        mine, later = b.new_project("乙方项目"), b.new_project("乙方后来")
        default = slots_of(app) / str(theirs)
        default.mkdir(parents=True)
        status, body = a.request("POST", f"/api/projects/{theirs}/lifecycle", {"op": "trash"})
        assert status == 200 and body["project"]["state"] == "trashed", body
        hidden(b.set_workspace(mine, work / "a"), work / "a", "甲方项目")
        hidden(b.set_workspace(later, default), default, "甲方项目")
        status, body = a.request("POST", f"/api/projects/{theirs}/purge",
                                 {"confirm_name": "甲方项目", "confirmed": True})  # fmt: skip
        assert status == 200, body
        assert b.set_workspace(mine, work / "a")[0] == 200
        assert b.set_workspace(later, default)[0] == 200
        assert b.workspace(later)["path"] == str(default)


def test_a_fork_starts_in_its_own_default_workspace(app: App, work: Path) -> None:
    a = alice(app)
    source = a.new_project("甲方项目", work / "a")
    status, fork = a.request("POST", f"/api/projects/{source}/fork", {})
    assert status == 201, fork
    fork_id = fork["project"]["id"]
    assert a.workspace(fork_id) | {"default": True} == a.workspace(fork_id)
    assert a.workspace(fork_id)["path"] == str(slots_of(app) / str(fork_id))
    assert a.workspace(source)["path"] == str((work / "a").resolve())


def test_a_workspace_outside_narrowed_roots_still_lets_the_purge_preview_answer(
    tmp_path: Path, work: Path
) -> None:
    data = tmp_path / "data"
    with running_app(data, workspace_roots=(str(work),)) as app:
        theirs = alice(app).new_project("甲方项目", work / "a")
    (tmp_path / "other").mkdir()
    with running_app(data, workspace_roots=(str(tmp_path / "other"),)) as app:
        a = alice(app)
        assert a.workspace(theirs)["mode"] == "refused"
        assert a.request("POST", f"/api/projects/{theirs}/lifecycle", {"op": "trash"})[0] == 200
        status, preview = a.request("GET", f"/api/projects/{theirs}/cleanup-preview")
        assert status == 200, preview
        kept = {item["what"]: item for item in preview["keep"]}
        assert kept["workspace"]["path"] == str((work / "a").resolve())
        assert kept["worktrees"]["worktrees"] == []


# -- research references ------------------------------------------------------------------------


def propose(person: Person, project_id: int, kind: str, target: Path) -> tuple[int, Any]:
    status, ref = person.request("POST", f"/api/projects/{project_id}/memory/reference",
                                 {"ref_kind": kind, "target": str(target)})  # fmt: skip
    assert status == 201, ref
    body = {"question": "启动为什么慢？", "scope": {"references": [ref["entry"]["id"]]},
            "members": ["lead"], "budget": BUDGET}  # fmt: skip
    status, run = person.request("POST", f"/api/projects/{project_id}/research", body)
    if status == 409:
        assert run["error"]["details"]["field"] == "scope.references"
        assert run["error"]["details"]["reference"] == ref["entry"]["id"]
    return status, run


def test_research_references_into_another_projects_workspace_are_refused(
    app: App, work: Path
) -> None:
    a, b = alice(app), bob(app)
    theirs = a.new_project("甲方项目", work / "a")
    mine = b.new_project("乙方项目", work / "b")
    (work / "b" / "notes").mkdir()
    hidden(propose(b, mine, "dir", work / "a" / "docs"), work / "a" / "docs", "甲方项目")
    hidden(propose(b, mine, "dir", work), work, "甲方项目")  # contains it
    hidden(propose(b, mine, "dir", work / "to-a"), work / "a", "甲方项目")  # by a symlink
    readme = work / "a" / "README.md"
    hidden(propose(b, mine, "file", readme), readme, "甲方项目")
    with app.db() as conn:
        assert conn.execute("SELECT count(*) FROM research_runs").fetchone() == (0,)
        refused = conn.execute(
            "SELECT count(*) FROM audit_events WHERE action = 'research_propose'"
            " AND outcome = 'refused' AND detail_json LIKE '%workspace_in_use%'"
        ).fetchone()
    assert refused == (4,)
    # Inside the project's own workspace, and a folder nobody holds: proposed.
    assert propose(b, mine, "dir", work / "b" / "notes")[0] == 201
    assert propose(b, mine, "dir", work / "free")[0] == 201
    # A member of the holding project is told which one it is.
    other = a.new_project("丙方项目")
    details = in_use(propose(a, other, "dir", work / "a" / "docs"), work / "a" / "docs")
    assert (details["project_id"], details["project_name"]) == (theirs, "甲方项目")


# -- the operator's view ------------------------------------------------------------------------


def report_of(app: App) -> dict[str, Any]:
    return dict(json.loads((app.settings.data / "boot-report.json").read_text(encoding="utf-8")))


def test_the_boot_report_lists_the_roots_in_effect_and_older_overlaps(
    tmp_path: Path, work: Path
) -> None:
    data = tmp_path / "data"
    with running_app(data) as app:
        assert report_of(app)["workspaces"] == {
            "roots": [str(slots_of(app))], "source": "default",
            "defaults": str(slots_of(app)), "shared": False,
            "overlaps": {"count": 0, "pairs": []},
        }  # fmt: skip
        owner = owner_user(app)
        first, _, _ = app.project_with("旧甲", owner)
        second, _, _ = app.project_with("旧乙", owner)

        # Two folders nested before a folder belonged to one project (written as an older
        # version would have).
        def older(conn: sqlite3.Connection, tx: Tx) -> None:
            for project_id, folder in ((first, work / "a"), (second, work / "a" / "inner")):
                conn.execute("UPDATE projects SET workspace = ? WHERE id = ?",
                             (str(folder), project_id))  # fmt: skip

        app.write(older)
    with running_app(data, workspace_roots=(str(work), str(tmp_path / "more"))) as app:
        assert report_of(app)["workspaces"] == {
            "roots": [str(work), str(tmp_path / "more")], "source": "setting",
            "defaults": str(slots_of(app)), "shared": False,
            "overlaps": {"count": 1, "pairs": [{"projects": [first, second],
                                                "paths": [str(work / "a"),
                                                          str(work / "a" / "inner")]}]},
        }  # fmt: skip
        problems = collect(app.settings)["problems"]
        assert any("1 pairs of live projects share workspace folders" in p for p in problems)
