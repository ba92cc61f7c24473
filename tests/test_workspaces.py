"""A project's workspace and task attempts in git worktrees, through the real app in-process
(HTTP answers, actions, writer, migrations) against real git repositories in tmp_path."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from room.actions import auth as auth_actions
from room.actions import workspaces as workspace_actions
from room.actions.workspaces import work_dir
from room.errors import BadRequestError
from room.store import Tx
from room.store import members as members_store
from room.store.migrate import connect, migrate
from room.store.schema import MIGRATIONS
from tests.support.inproc import App, running_app
from tests.support.work import git

pytestmark = [  # real git repositories, worktrees and merges
    pytest.mark.slow,
    pytest.mark.usefixtures("hermetic_git"),
]


def make_repo(path: Path, **files: str) -> Path:
    path.mkdir(parents=True)
    git(path, "init", "-q", "-b", "main")
    git(path, "config", "user.name", "Owner")
    git(path, "config", "user.email", "owner@example.com")
    for name, text in {"README.md": "# app\n", **files}.items():
        (path / name).write_text(text)
    git(path, "add", "--all")
    git(path, "commit", "-q", "-m", "start")
    return path


@pytest.fixture(params=["sqlite", "postgresql"])
def app(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[App]:
    # The repositories these tests make are in tmp_path, outside the default roots (only
    # <data>/workspaces): the operator's setting allows them. On each store (``[postgresql]``:
    # a fresh database of the tests' private cluster).
    url = None if request.param == "sqlite" else str(request.getfixturevalue("pg_dsn"))
    with running_app(
        tmp_path / "data", workspace_roots=(str(tmp_path),), database_url=url
    ) as found:
        yield found


class Project:
    """A project made over HTTP with two agents (``be``, ``fe``) that act with their tokens."""

    def __init__(self, app: App, workspace: Path | None) -> None:
        self.app = app
        body: dict[str, Any] = {
            "name": f"项目{time.monotonic_ns()}",
            "agents": [
                {"role": "lead", "handle": "lead", "display_name": "负责人"},
                {"role": "backend", "handle": "be", "display_name": "后端"},
                {"role": "frontend", "handle": "fe", "display_name": "前端"},
            ],
        }
        if workspace is not None:
            body["workspace"] = str(workspace)
        status, data = self.owner("POST", "/api/projects", body)
        assert status == 201, data
        self.wire = data["project"]
        self.id = int(data["project"]["id"])
        self.tokens = {h: self._token(h) for h in ("lead", "be", "fe")}

    def _token(self, handle: str) -> str:
        def job(conn: sqlite3.Connection, tx: Tx) -> str:
            return auth_actions.issue_agent_token(conn, tx, str(self.id), handle)

        return self.app.write(job)

    def owner(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        return self.app.request(method, path, body, cookie=self.app.owner_cookie)

    def agent(self, handle: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        return self.app.request(method, path, body, token=self.tokens[handle])

    def plan(self, *items: tuple[str, str]) -> None:
        plan = {
            "goal": "做完",
            "items": [
                {"key": key, "title": f"做 {key}", "owner": owner, "depends_on": [],
                 "acceptance": [f"{key} 能用"]}
                for key, owner in items
            ],
        }  # fmt: skip
        status, data = self.owner("POST", f"/api/projects/{self.id}/plan", plan)
        assert status == 201, data

    def start(self, handle: str, key: str) -> dict[str, Any]:
        status, data = self.agent(handle, "POST", f"/api/projects/{self.id}/tasks/{key}/start", {})
        assert status == 200, data
        return dict(data["task"])

    def submit(self, handle: str, key: str, *files: str) -> dict[str, Any]:
        body = {"summary": "完成", "artifacts": list(files)}
        status, data = self.agent(
            handle, "POST", f"/api/projects/{self.id}/tasks/{key}/submit", body
        )
        assert status == 200, data
        return dict(data["task"])

    def review(self, key: str) -> tuple[int, Any]:
        body = {"results": [{"criterion": 1, "passed": True, "evidence": "看过了"}]}
        return self.owner("POST", f"/api/projects/{self.id}/tasks/{key}/review", body)

    def member(self, handle: str) -> Any:
        def read(conn: sqlite3.Connection, tx: Tx) -> Any:
            return members_store.by_handle(conn, self.id, handle)

        return self.app.write(read)

    def work_dir(self, handle: str) -> Any:
        return self.app.call(work_dir, self.app.core, self.member(handle))

    def notices(self) -> list[str]:
        status, data = self.owner("GET", f"/api/projects/{self.id}/messages?limit=200")
        assert status == 200
        return [m["body"] for m in data["messages"] if m["kind"] == "system"]


# -- the workspace ------------------------------------------------------------------------------


def _refusal(app: App, workspace: str) -> tuple[int, str]:
    status, data = app.request(
        "POST", "/api/projects", {"name": f"p{time.monotonic_ns()}", "workspace": workspace},
        cookie=app.owner_cookie,
    )  # fmt: skip
    return status, data["error"]["code"] if status != 201 else ""


def test_a_workspace_that_could_reach_the_database_or_does_not_exist_is_refused(
    app: App, tmp_path: Path
) -> None:
    data = app.settings.data.resolve()
    (data / "inside").mkdir()
    assert _refusal(app, str(data)) == (400, "workspace_is_data")
    assert _refusal(app, str(data / "inside")) == (400, "workspace_in_data")
    # The demo project's default folder, named by its path (tests/test_workspace_tenancy.py).
    assert _refusal(app, str(data / "workspaces" / "1")) == (409, "workspace_in_use")
    assert _refusal(app, str(tmp_path)) == (400, "workspace_contains_data")
    assert _refusal(app, str(tmp_path / "nowhere")) == (400, "workspace_missing")
    assert _refusal(app, "relative/path") == (400, "workspace_not_absolute")
    (tmp_path / "file.txt").write_text("x")
    assert _refusal(app, str(tmp_path / "file.txt")) == (400, "workspace_not_a_folder")
    # System folders and a home folder's own keys and settings: agents would read and change them.
    for system in ("/", "/etc", "/usr/lib", "/proc/self", str(Path.home())):
        assert _refusal(app, system) == (400, "workspace_system"), system
    dot = Path.home() / ".ssh"
    if dot.is_dir():
        assert _refusal(app, str(dot)) == (400, "workspace_system")
    # Outside the operator's roots (here tmp_path): refused.
    assert _refusal(app, "/srv") == (400, "workspace_outside_roots")
    _status, projects = app.request("GET", "/api/me", cookie=app.owner_cookie)
    assert [p["name"] for p in projects["projects"]] == ["演示项目"]  # nothing was created


def test_workspaces_stay_inside_the_operators_roots(tmp_path: Path) -> None:
    allowed, second, elsewhere = tmp_path / "allowed", tmp_path / "second", tmp_path / "elsewhere"
    (allowed / "app").mkdir(parents=True)
    second.mkdir()
    elsewhere.mkdir()
    (allowed / "escape").symlink_to(elsewhere)
    roots = (str(allowed), str(second))
    with running_app(tmp_path / "data", workspace_roots=roots) as app:
        assert _refusal(app, str(elsewhere)) == (400, "workspace_outside_roots")
        assert _refusal(app, str(allowed / "escape")) == (400, "workspace_outside_roots")
        assert _refusal(app, str(allowed / "app")) == (201, "")
        assert _refusal(app, str(second)) == (201, "")  # a root itself
        # A root holding another project's workspace is no longer free (a folder belongs to one
        # project).
        assert _refusal(app, str(allowed)) == (409, "workspace_in_use")
        # The default workspace in the data folder needs no root.
        status, _ = app.request("POST", "/api/projects", {"name": "默认"}, cookie=app.owner_cookie)
        assert status == 201


def test_a_stored_workspace_the_rules_now_refuse_reads_nothing(app: App, tmp_path: Path) -> None:
    """A workspace stored before today's rules (``/``) must not let evidence fingerprint the
    server's own files (room.sqlite) or anything else (issue 14, item 20)."""
    folder = tmp_path / "plain"
    folder.mkdir()
    project = Project(app, folder)
    project.plan(("api", "be"))
    project.start("be", "api")
    app.write(lambda c, tx: c.execute("UPDATE projects SET workspace = '/' WHERE id = ?",
                                      (project.id,)))  # fmt: skip
    workspace_actions.forget_info(app.core, project.id)
    database = str(app.settings.db_path.resolve()).lstrip("/")
    body = {"summary": "完成", "artifacts": [database]}
    status, data = project.agent("be", "POST", f"/api/projects/{project.id}/tasks/api/submit", body)
    assert (status, data["error"]["code"]) == (400, "workspace_refused"), data
    with pytest.raises(BadRequestError) as refused:
        project.work_dir("be")
    assert refused.value.code == "workspace_refused"
    _status, shown = project.owner("GET", f"/api/projects/{project.id}")
    assert shown["project"]["workspace"]["mode"] == "refused"


def test_the_default_workspace_is_made_on_first_use_and_git_is_detected(
    app: App, tmp_path: Path
) -> None:
    plain = Project(app, None)
    default = app.settings.data.resolve() / "workspaces" / str(plain.id)
    assert plain.wire["workspace"] == {
        "path": str(default), "default": True, "git": False, "mode": "serial",
        "reason": plain.wire["workspace"]["reason"], "reason_code": "not_a_repository",
        "head": None, "base": None,
    }  # fmt: skip
    assert default.is_dir()
    repo = make_repo(tmp_path / "repo")
    gitted = Project(app, repo)
    _status, data = gitted.owner("GET", f"/api/projects/{gitted.id}")
    workspace = data["project"]["workspace"]
    assert (workspace["path"], workspace["default"], workspace["git"], workspace["mode"]) == (
        str(repo), False, True, "worktrees",
    )  # fmt: skip
    assert workspace["head"].endswith(" start")


def test_an_owner_changes_the_workspace_and_nobody_else_can(app: App, tmp_path: Path) -> None:
    project = Project(app, None)
    repo = make_repo(tmp_path / "repo")
    status, data = project.agent("lead", "PUT", f"/api/projects/{project.id}/workspace",
                                 {"path": str(repo)})  # fmt: skip
    assert (status, data["error"]["code"]) == (403, "human_only")
    status, data = project.owner("PUT", f"/api/projects/{project.id}/workspace",
                                 {"path": str(app.settings.data)})  # fmt: skip
    assert (status, data["error"]["code"]) == (400, "workspace_is_data")
    status, data = project.owner("PUT", f"/api/projects/{project.id}/workspace",
                                 {"path": str(repo)})  # fmt: skip
    assert status == 200 and data["workspace"]["mode"] == "worktrees"
    status, audit = project.owner("GET", f"/api/projects/{project.id}/audit")
    changed = [e for e in audit["events"] if e["action"] == "project.workspace"]
    assert len(changed) == 1 and changed[0]["detail"]["to"] == str(repo)


def test_an_owner_naming_the_default_workspace_gets_the_default_back(app: App) -> None:
    """The page shows the default workspace's path; an owner who types it back (or any spelling
    that resolves to it) gets the default, not a stored path inside the data folder that every
    later use refuses (workspace_refused)."""
    project = Project(app, None)
    default = app.settings.data.resolve() / "workspaces" / str(project.id)
    for spelling in (str(default), f"{default}/", str(default / ".." / str(project.id))):
        status, data = project.owner("PUT", f"/api/projects/{project.id}/workspace",
                                     {"path": spelling})  # fmt: skip
        assert status == 200, data
        assert (data["workspace"]["path"], data["workspace"]["default"]) == (str(default), True)
        assert data["workspace"]["mode"] == "serial"
        assert project.work_dir("lead").path == default


# -- attempts -----------------------------------------------------------------------------------


def test_each_started_task_gets_its_own_worktree_and_members_never_see_each_others_work(
    app: App, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "repo")
    project = Project(app, repo)
    project.plan(("api", "be"), ("ui", "fe"))
    api = project.start("be", "api")
    project.start("fe", "ui")
    assert api["attempt"]["state"] == "open" and api["attempt"]["attempt"] == 1
    assert api["attempt"]["branch"].endswith("/api-1") and api["attempt"]["base"] == "main"
    be, fe = project.work_dir("be"), project.work_dir("fe")
    assert (be.mode, be.task_key, be.branch) == ("worktree", "api", api["attempt"]["branch"])
    assert str(be.path) == api["attempt"]["path"] and fe.path != be.path
    assert git(be.path, "rev-parse", "--abbrev-ref", "HEAD") == api["attempt"]["branch"]
    assert app.settings.data.resolve() / "worktrees" in be.path.parents

    (be.path / "api.py").write_text("def api(): ...\n")
    (fe.path / "ui.js").write_text("export {}\n")
    assert not (fe.path / "api.py").exists() and not (be.path / "ui.js").exists()
    assert not (repo / "api.py").exists() and not (repo / "ui.js").exists()
    assert git(repo, "status", "--porcelain") == ""

    status, board = project.owner("GET", f"/api/projects/{project.id}/tasks")
    stats = {t["key"]: t["attempt"]["diff_stat"] for t in board["tasks"]}
    assert stats["api"]["files"] == [{"path": "api.py", "added": 1, "deleted": 0, "binary": False}]
    assert [f["path"] for f in stats["ui"]["files"]] == ["ui.js"]
    status, diff = project.owner("GET", f"/api/projects/{project.id}/tasks/api/diff")
    assert status == 200 and "+def api(): ..." in diff["text"] and not diff["truncated"]


def test_a_non_git_workspace_works_serially_and_says_so_once(app: App, tmp_path: Path) -> None:
    folder = tmp_path / "plain"
    folder.mkdir()
    project = Project(app, folder)
    project.plan(("api", "be"), ("ui", "fe"))
    assert project.start("be", "api")["attempt"] is None
    assert project.start("fe", "ui")["attempt"] is None
    where = project.work_dir("be")
    assert (where.mode, where.path) == ("serial", folder)
    assert where.reason is not None and "not a git repository" in where.reason
    serial = [n for n in project.notices() if "一次只允许一个写入者" in n]
    assert len(serial) == 1 and "not a git repository" in serial[0]
    _status, listed = project.owner("GET", f"/api/projects/{project.id}/worktrees")
    assert (listed["mode"], listed["attempts"]) == ("serial", [])


def _accepted(project: Project, repo: Path, key: str, owner: str, name: str, text: str) -> Path:
    project.start(owner, key)
    path = project.work_dir(owner).path
    (path / name).write_text(text)
    project.submit(owner, key, name)
    status, data = project.review(key)
    assert status == 200 and data["task"]["state"] == "accepted", data
    return Path(path)


def test_merging_an_accepted_task_fast_forwards_the_base_branch(app: App, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    project = Project(app, repo)
    project.plan(("api", "be"))
    _accepted(project, repo, "api", "be", "api.py", "def api(): ...\n")
    status, data = project.agent("lead", "POST", f"/api/projects/{project.id}/tasks/api/merge",
                                 {"mode": "ff"})  # fmt: skip
    assert status == 403
    status, data = project.owner("POST", f"/api/projects/{project.id}/tasks/api/merge",
                                 {"mode": "ff"})  # fmt: skip
    assert status == 200, data
    assert (data["outcome"], data["conflicts"]) == ("fast_forward", [])
    assert (repo / "api.py").read_text() == "def api(): ...\n"
    assert git(repo, "log", "-1", "--format=%an <%ae>") == (
        "后端 (be) <be@users.noreply.room.invalid>"
    )
    assert git(repo, "status", "--porcelain") == ""
    status, found = project.owner("GET", f"/api/projects/{project.id}/tasks/api")
    task = found["task"]
    assert task["attempt"]["state"] == "merged"
    assert any("合并到 `main`" in n for n in project.notices())


def test_a_conflicting_merge_reports_the_paths_and_leaves_the_base_clean(
    app: App, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "repo", **{"app.py": "v = 0\n"})
    project = Project(app, repo)
    project.plan(("api", "be"))
    _accepted(project, repo, "api", "be", "app.py", "v = 1\n")
    (repo / "app.py").write_text("v = 2\n")
    git(repo, "commit", "-qam", "owner edits app.py")
    before = git(repo, "rev-parse", "HEAD")
    status, data = project.owner("POST", f"/api/projects/{project.id}/tasks/api/merge",
                                 {"mode": "merge"})  # fmt: skip
    assert status == 200, data
    assert (data["outcome"], data["conflicts"]) == ("conflict", ["app.py"])
    assert git(repo, "rev-parse", "HEAD") == before and git(repo, "status", "--porcelain") == ""
    assert (repo / "app.py").read_text() == "v = 2\n"
    assert any("有冲突" in n and "`app.py`" in n for n in project.notices())
    status, found = project.owner("GET", f"/api/projects/{project.id}/tasks/api")
    task = found["task"]
    assert task["attempt"]["state"] == "open"


def _junk_attempt(project: Project, repo: Path) -> Path:
    """An accepted ``api`` whose worktree holds the cited file beside generated junk, an
    uncited change and a deletion."""
    path = _accepted(project, repo, "api", "be", "api.py", "def api(): ...\n")
    (path / "__pycache__").mkdir()
    (path / "__pycache__" / "api.cpython-311.pyc").write_bytes(b"\x00\xffcode")
    (path / "build.tmp").write_text("scratch\n")
    (path / "notes.md").write_text("what I tried\n")
    (path / "README.md").unlink()
    return path


def test_the_review_lists_every_change_and_flags_generated_junk(app: App, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    project = Project(app, repo)
    project.plan(("api", "be"))
    _junk_attempt(project, repo)
    status, diff = project.owner("GET", f"/api/projects/{project.id}/tasks/api/diff")
    assert status == 200, diff
    files = {f["path"]: (f["status"], f["cited"], f["junk"], f["selected"]) for f in diff["files"]}
    assert files == {
        "README.md": ("deleted", False, None, False),
        "__pycache__/api.cpython-311.pyc": ("added", False, "__pycache__/", False),
        "api.py": ("added", True, None, True),
        "build.tmp": ("added", False, "*.tmp", False),
        "notes.md": ("added", False, None, False),
    }
    assert "+scratch" in diff["text"] and "-# app" in diff["text"]  # the full diff, junk too
    assert len(diff["digest"]) == 64 and "__pycache__/" in diff["ignore"]
    assert (diff["base"], diff["state"]) == ("main", "open")


def test_a_merge_takes_the_cited_files_by_default_and_names_the_review(
    app: App, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "repo")
    project = Project(app, repo)
    project.plan(("api", "be"))
    path = _junk_attempt(project, repo)
    _status, review = project.owner("GET", f"/api/projects/{project.id}/tasks/api/diff")
    status, data = project.owner("POST", f"/api/projects/{project.id}/tasks/api/merge",
                                 {"mode": "ff", "digest": review["digest"]})  # fmt: skip
    assert status == 200, data
    assert (data["outcome"], data["included"]) == ("fast_forward", ["api.py"])
    assert sorted(data["left_out"]) == [
        "README.md", "__pycache__/api.cpython-311.pyc", "build.tmp", "notes.md",
    ]  # fmt: skip
    assert git(repo, "ls-tree", "-r", "--name-only", "HEAD").split() == ["README.md", "api.py"]
    assert git(repo, "status", "--porcelain", "--ignored") == ""
    author, committer, trailers = git(
        repo, "log", "-1", "--format=%an <%ae>%n%cn <%ce>%n%(trailers:only,unfold)"
    ).split("\n", 2)
    assert author == "后端 (be) <be@users.noreply.room.invalid>"
    assert trailers.splitlines() == [
        "Room-Task: api", f"Room-Attempt: 1 ({data['branch']})", f"Reviewed-by: {committer}",
    ]  # fmt: skip
    assert committer.endswith("@users.noreply.room.invalid>") and "(be)" not in committer
    # The attempt keeps what was not merged.
    assert (path / "build.tmp").exists() and (path / "notes.md").exists()
    assert any("合并了 1 个文件" in n and "4 个未选的改动" in n for n in project.notices())
    status, found = project.owner("GET", f"/api/projects/{project.id}/tasks/api")
    task = found["task"]
    assert task["attempt"]["state"] == "merged"


def test_a_merge_takes_the_ticked_files_and_refuses_names_outside_the_diff(
    app: App, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "repo")
    project = Project(app, repo)
    project.plan(("api", "be"))
    _junk_attempt(project, repo)
    url = f"/api/projects/{project.id}/tasks/api/merge"
    for bad in (["api.py", "../repo/README.md"], ["/etc/passwd"], ["--exec=x"], ["api.py\n"],
                [".git/config"], ["main.py"]):  # fmt: skip
        status, data = project.owner("POST", url, {"mode": "merge", "paths": bad})
        assert (status, data["error"]["code"]) == (400, "path_not_in_diff"), data
        assert data["error"]["details"]["paths"] == [p for p in bad if p != "api.py"]
    status, data = project.owner("POST", url, {"mode": "ff", "paths": []})
    assert (status, data["error"]["code"]) == (400, "nothing_selected")
    status, data = project.owner("POST", url, {"mode": "ff", "digest": "0" * 64})
    assert (status, data["error"]["code"]) == (409, "diff_changed")
    status, data = project.owner("POST", url, {"mode": "ff", "paths": "api.py"})
    assert (status, data["error"]["code"]) == (400, "bad_body")
    assert git(repo, "log", "--oneline").count("\n") == 0  # nothing was merged by any of them

    status, data = project.owner(
        "POST", url, {"mode": "merge", "paths": ["api.py", "notes.md", "README.md"]}
    )
    assert (status, data["outcome"]) == (200, "merged"), data
    assert git(repo, "ls-tree", "-r", "--name-only", "HEAD").split() == ["api.py", "notes.md"]
    merge_commit = git(repo, "log", "-1", "--format=%an|%P|%(trailers:key=Room-Task,valueonly)")
    author, parents, task_key = merge_commit.split("|")
    assert len(parents.split()) == 2 and task_key.strip() == "api" and "(be)" not in author


def test_a_file_that_replaces_a_folder_needs_the_folders_deletion(app: App, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    (repo / "docs").mkdir()
    (repo / "docs" / "a.md").write_text("a\n")
    git(repo, "add", "--all")
    git(repo, "commit", "-qm", "docs")
    project = Project(app, repo)
    project.plan(("api", "be"))
    path = _accepted(project, repo, "api", "be", "api.py", "def api(): ...\n")
    (path / "docs" / "a.md").unlink()
    (path / "docs").rmdir()
    (path / "docs").write_text("one file now\n")
    url = f"/api/projects/{project.id}/tasks/api/merge"
    status, data = project.owner("POST", url, {"paths": ["api.py", "docs"]})
    assert (status, data["error"]["code"]) == (400, "selection_incomplete"), data
    assert data["error"]["details"]["paths"] == ["docs/a.md"]
    assert (repo / "docs" / "a.md").exists()
    status, data = project.owner("POST", url, {"paths": ["api.py", "docs", "docs/a.md"]})
    assert (status, data["outcome"]) == (200, "fast_forward"), data
    assert (repo / "docs").read_text() == "one file now\n"


def test_a_cited_file_changed_after_acceptance_is_not_merged(app: App, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    project = Project(app, repo)
    project.plan(("api", "be"))
    path = _accepted(project, repo, "api", "be", "api.py", "def api(): ...\n")
    (path / "api.py").write_text("def api(): evil\n")
    status, data = project.owner("POST", f"/api/projects/{project.id}/tasks/api/merge", {})
    assert (status, data["error"]["code"]) == (409, "artifact_changed"), data
    assert data["error"]["details"]["files"] == [{"path": "api.py", "verification": "changed"}]
    assert git(repo, "ls-tree", "-r", "--name-only", "HEAD").split() == ["README.md"]


def test_owners_edit_the_junk_patterns_with_checked_values(app: App, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    project = Project(app, repo)
    project.plan(("api", "be"))
    _junk_attempt(project, repo)
    url = f"/api/projects/{project.id}/settings"
    status, data = project.owner("PATCH", url, {"merge_ignore": ["*.md", "bad\npattern"]})
    assert (status, data["error"]["code"]) == (400, "bad_merge_ignore"), data
    assert data["error"]["details"] == {
        "index": 1, "position": 2, "pattern": "bad\npattern", "problem": "control",
        "reason": "contains a control character",
    }  # fmt: skip
    status, data = project.agent("lead", "PATCH", url, {"merge_ignore": ["*.md"]})
    assert (status, data["error"]["code"]) == (403, "human_only")
    status, data = project.owner("PATCH", url, {"merge_ignore": ["*.md", "*.md"]})
    assert status == 200, data
    assert data["settings"]["merge_ignore"] == ["*.md"] and data["settings"]["merge_ignore_set"]
    _status, diff = project.owner("GET", f"/api/projects/{project.id}/tasks/api/diff")
    flagged = {f["path"]: f["junk"] for f in diff["files"]}
    assert flagged["notes.md"] == "*.md" and flagged["build.tmp"] is None
    status, data = project.owner("PATCH", url, {"merge_ignore": None})
    assert status == 200 and not data["settings"]["merge_ignore_set"]
    assert data["settings"]["merge_ignore"] == data["settings"]["merge_ignore_default"]
    assert "*.tmp" in data["settings"]["merge_ignore"]


def test_a_file_changed_after_submission_refuses_acceptance_naming_it(
    app: App, tmp_path: Path
) -> None:
    repo = make_repo(tmp_path / "repo")
    project = Project(app, repo)
    project.plan(("api", "be"))
    project.start("be", "api")
    path = project.work_dir("be").path
    (path / "api.py").write_text("def api(): ...\n")
    project.submit("be", "api", "api.py")
    (path / "api.py").write_text("def api(): broken\n")
    status, data = project.review("api")
    assert (status, data["error"]["code"]) == (409, "artifact_changed")
    assert data["error"]["details"]["path"] == "api.py" and "api.py" in data["error"]["message"]
    status, found = project.owner("GET", f"/api/projects/{project.id}/tasks/api")
    task = found["task"]
    assert task["state"] == "in_review"
    (path / "api.py").unlink()
    status, data = project.owner("POST", f"/api/projects/{project.id}/tasks/api/accept", {})
    assert (status, data["error"]["code"]) == (409, "artifact_changed")


def test_a_departed_members_worktree_is_kept_and_purge_lists_it(app: App, tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    project = Project(app, repo)
    project.plan(("api", "be"))
    project.start("be", "api")
    path = project.work_dir("be").path
    (path / "draft.py").write_text("wip\n")
    be = project.member("be")
    status, data = project.owner("POST", f"/api/projects/{project.id}/members/{be.id}/leave", {})
    assert status == 200, data
    status, listed = project.owner("GET", f"/api/projects/{project.id}/worktrees")
    [kept] = listed["attempts"]
    assert (kept["task"], kept["state"], kept["dirty"], kept["path"]) == (
        "api", "kept", True, str(path),
    )  # fmt: skip
    status, preview = project.owner("GET", f"/api/projects/{project.id}/cleanup-preview")
    assert status == 200, preview
    [keep] = [k for k in preview["keep"] if k["what"] == "worktrees"]
    assert [w["branch"] for w in keep["worktrees"]] == [kept["branch"]]
    assert (path / "draft.py").read_text() == "wip\n"


def test_the_migration_adds_task_attempts_after_a_backup(tmp_path: Path) -> None:
    path = tmp_path / "room.sqlite"
    conn = connect(path)
    before = MIGRATIONS[: [m.name for m in MIGRATIONS].index("0006_task_attempts")]
    for migration in before:
        conn.executescript(migration.sql)
    conn.execute(f"PRAGMA user_version = {len(before)}")
    conn.close()
    conn = connect(path)
    migrate(conn, path, now=time.time())
    columns = {r[1] for r in conn.execute("PRAGMA table_info(task_attempts)")}
    assert {"task_id", "attempt", "member_id", "branch", "path", "base", "state"} <= columns
    assert list((tmp_path / "backups").glob(f"room-v{len(before)}-*.sqlite"))
