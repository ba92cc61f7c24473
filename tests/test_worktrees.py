"""Worktrees per task attempt, against real git repositories in tmp_path."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from room import worktrees as wt
from room.worktrees import BadRefNameError, WorktreeError

pytestmark = pytest.mark.timeout(60)

PROJECT_ID = 7
SLUG = "shop"


@pytest.fixture(autouse=True)
def _hermetic_git(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The machine's own git configuration must not change what these tests see."""
    config = tmp_path / "gitconfig"
    config.write_text("")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(config))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")


def git(cwd: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", *args], cwd=cwd, check=True, capture_output=True, text=True, timeout=20
    )
    return done.stdout.strip()


def commit(cwd: Path, message: str, **files: str) -> str:
    for name, text in files.items():
        (cwd / name).write_text(text)
    git(cwd, "add", "--all")
    git(cwd, "commit", "-q", "-m", message)
    return git(cwd, "rev-parse", "HEAD")


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    git(ws, "init", "-q", "-b", "main")
    git(ws, "config", "user.name", "Owner")
    git(ws, "config", "user.email", "owner@example.com")
    commit(ws, "start", **{"README.md": "hello\n", "app.py": "a = 1\nb = 2\nc = 3\n"})
    return ws


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return tmp_path / "worktrees"


def attempt(repo: Path, root: Path, key: str, n: int = 1) -> wt.Worktree:
    return wt.create_attempt(repo, root, PROJECT_ID, SLUG, key, n)


def assert_untouched(ws: Path, head: str) -> None:
    assert git(ws, "rev-parse", "HEAD") == head
    assert git(ws, "symbolic-ref", "--short", "HEAD") == "main"
    assert git(ws, "status", "--porcelain") == ""
    assert not (ws / ".git" / "MERGE_HEAD").exists()


# ---------------------------------------------------------------- inspect


def test_inspect_a_repository(repo: Path) -> None:
    info = wt.inspect(repo)
    assert info.mode == "worktrees"
    assert (info.reason_code, info.reason) == (None, None)
    assert info.root == repo.resolve()
    assert (info.branch, info.base) == ("main", "main")
    assert info.head == git(repo, "rev-parse", "HEAD")
    assert info.head_oneline == git(repo, "log", "--oneline", "-1")
    assert info.head_oneline.endswith(" start")
    assert info.clean is True

    (repo / "notes.txt").write_text("draft\n")
    (repo / "README.md").write_text("changed\n")
    info = wt.inspect(repo)
    assert info.mode == "worktrees"
    assert info.clean is False
    assert sorted(info.dirty_paths) == ["README.md", "notes.txt"]


def test_inspect_a_plain_folder_is_serial(tmp_path: Path) -> None:
    folder = tmp_path / "plain"
    folder.mkdir()
    info = wt.inspect(folder)
    assert info.mode == "serial"
    assert info.reason_code == "not_a_repository"
    assert info.reason == "工作区不是 git 仓库 (The workspace is not a git repository.)"
    assert info.head is None and info.base is None

    missing = wt.inspect(tmp_path / "nowhere")
    assert (missing.mode, missing.reason_code) == ("serial", "no_workspace")


def test_inspect_an_empty_repository_is_serial(tmp_path: Path) -> None:
    ws = tmp_path / "empty"
    ws.mkdir()
    git(ws, "init", "-q", "-b", "main")
    info = wt.inspect(ws)
    assert (info.mode, info.reason_code) == ("serial", "no_commits")
    assert info.reason is not None and info.reason.startswith("仓库还没有任何提交 (")
    assert info.branch == "main"


def test_inspect_detached_head_is_serial_unless_a_base_is_named(repo: Path) -> None:
    git(repo, "checkout", "-q", "--detach")
    info = wt.inspect(repo)
    assert (info.mode, info.reason_code) == ("serial", "detached_head")

    named = wt.inspect(repo, base="main")
    assert (named.mode, named.base, named.branch) == ("worktrees", "main", None)

    wrong = wt.inspect(repo, base="release")
    assert (wrong.mode, wrong.reason_code) == ("serial", "no_base_branch")
    assert wrong.reason is not None and "release" in wrong.reason


def test_inspect_a_subfolder_of_a_repository_is_serial(repo: Path) -> None:
    sub = repo / "docs"
    sub.mkdir()
    info = wt.inspect(sub)
    assert (info.mode, info.reason_code) == ("serial", "nested_repository")
    assert info.reason is not None and str(repo.resolve()) in info.reason


def test_inspect_ignores_an_inherited_git_dir(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GIT_DIR", str(tmp_path / "elsewhere" / ".git"))
    info = wt.inspect(repo)
    assert (info.mode, info.head) == ("worktrees", git(repo, "--git-dir=.git", "rev-parse", "HEAD"))


# ---------------------------------------------------------------- create_attempt


def test_attempts_of_two_tasks_are_isolated(repo: Path, root: Path) -> None:
    head = git(repo, "rev-parse", "HEAD")
    login = attempt(repo, root, "login")
    search = attempt(repo, root, "search")

    assert (login.branch, search.branch) == ("room/shop/login-1", "room/shop/search-1")
    assert login.path == root.resolve() / "7" / "login-1"
    assert search.path == root.resolve() / "7" / "search-1"
    assert (login.base, login.fork_point, login.created) == ("main", head, True)
    assert git(login.path, "symbolic-ref", "--short", "HEAD") == "room/shop/login-1"
    assert (login.path / "app.py").read_text() == "a = 1\nb = 2\nc = 3\n"

    (login.path / "login.py").write_text("def login(): ...\n")
    (search.path / "app.py").write_text("a = 1\n")

    assert not (search.path / "login.py").exists()
    assert not (repo / "login.py").exists()
    assert (login.path / "app.py").read_text() == "a = 1\nb = 2\nc = 3\n"
    assert (repo / "app.py").read_text() == "a = 1\nb = 2\nc = 3\n"
    assert git(repo, "status", "--porcelain") == ""  # the workspace is not polluted
    assert git(search.path, "status", "--porcelain") == "M app.py"


def test_create_attempt_is_idempotent(repo: Path, root: Path) -> None:
    first = attempt(repo, root, "login")
    (first.path / "work.txt").write_text("in progress\n")
    git(repo, "commit", "-q", "--allow-empty", "-m", "base moved on")

    again = attempt(repo, root, "login")
    assert again.created is False
    assert (again.path, again.branch, again.fork_point) == (
        first.path,
        first.branch,
        first.fork_point,
    )
    assert (again.path / "work.txt").read_text() == "in progress\n"

    second = attempt(repo, root, "login", 2)
    assert (second.branch, second.created) == ("room/shop/login-2", True)
    assert second.fork_point == git(repo, "rev-parse", "HEAD")


def test_a_branch_without_worktree_is_checked_out_again_not_reset(repo: Path, root: Path) -> None:
    git(repo, "branch", "room/shop/login-1")
    kept = commit(repo, "on main", **{"main.txt": "x\n"})
    git(repo, "branch", "-f", "room/shop/login-1", kept)
    git(repo, "reset", "-q", "--hard", "HEAD~1")

    made = attempt(repo, root, "login")
    assert made.created is True
    assert git(made.path, "rev-parse", "HEAD") == kept
    assert (made.path / "main.txt").read_text() == "x\n"


@pytest.mark.parametrize(
    "key", ["", "~", "..", "/", "a\0b", "a\nb", "-", "x" * (wt.MAX_NAME_CHARS + 1)]
)
def test_unusable_task_keys_are_refused(repo: Path, root: Path, key: str) -> None:
    with pytest.raises(BadRefNameError) as caught:
        attempt(repo, root, key)
    assert caught.value.code == "bad_ref_name"
    assert caught.value.details["field"] == "task_key"
    assert not root.exists()
    assert git(repo, "branch", "--list", "room/*") == ""


@pytest.mark.parametrize("key", ["../x", "a b", "X", "a~b", "x.lock", "a..b", "@{u}"])
def test_odd_task_keys_are_sanitized_consistently(repo: Path, root: Path, key: str) -> None:
    branch, name = wt.attempt_names(PROJECT_ID, SLUG, key, 1)
    assert wt.attempt_names(PROJECT_ID, SLUG, key, 1) == (branch, name)
    assert branch == f"room/shop/{name}"
    stem = name.removesuffix("-1")
    assert stem.rsplit("-", 1)[1].isalnum() and len(stem.rsplit("-", 1)[1]) == 8
    assert set(stem) <= set("abcdefghijklmnopqrstuvwxyz0123456789-_")
    assert subprocess.run(["git", "check-ref-format", f"refs/heads/{branch}"]).returncode == 0

    made = attempt(repo, root, key)
    assert (made.branch, made.task_key) == (branch, key)
    assert made.path.parent == root.resolve() / "7"
    assert made.path.name == name


def test_sanitized_keys_never_collide_with_plain_ones(repo: Path, root: Path) -> None:
    plain = attempt(repo, root, "x")
    odd = attempt(repo, root, "../x")
    upper = attempt(repo, root, "X")
    assert len({plain.branch, odd.branch, upper.branch}) == 3
    assert len({plain.path, odd.path, upper.path}) == 3
    assert plain.branch == "room/shop/x-1"


def test_slug_and_attempt_rules() -> None:
    assert wt.attempt_names(7, "项目", "login", 3) == ("room/7/login-3", "login-3")
    assert wt.attempt_names(7, "", "login", 1)[0] == "room/7/login-1"
    assert wt.attempt_names(7, "my-shop", "login", 1)[0] == "room/my-shop/login-1"
    for bad in (0, -1):
        with pytest.raises(BadRefNameError):
            wt.attempt_names(7, "shop", "login", bad)
    with pytest.raises(BadRefNameError):
        wt.attempt_names(0, "shop", "login", 1)
    with pytest.raises(BadRefNameError):
        wt.attempt_names(7, "sh\0op", "login", 1)


def test_create_attempt_without_a_repository_says_why(tmp_path: Path, root: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(WorktreeError) as caught:
        wt.create_attempt(plain, root, PROJECT_ID, SLUG, "login", 1)
    assert caught.value.code == "not_a_repository"
    assert caught.value.http_status == 409
    assert "(The workspace is not a git repository.)" in caught.value.message


def test_create_attempt_refuses_a_root_inside_the_workspace(repo: Path) -> None:
    with pytest.raises(WorktreeError) as caught:
        wt.create_attempt(repo, repo / ".worktrees", PROJECT_ID, SLUG, "login", 1)
    assert caught.value.code == "worktree_failed"
    assert git(repo, "status", "--porcelain") == ""
    assert git(repo, "branch", "--list", "room/*") == ""


def test_create_attempt_leaves_a_foreign_folder_alone(repo: Path, root: Path) -> None:
    squatter = root / "7" / "login-1"
    squatter.mkdir(parents=True)
    (squatter / "mine.txt").write_text("keep me\n")
    with pytest.raises(WorktreeError) as caught:
        attempt(repo, root, "login")
    assert caught.value.code == "worktree_failed"
    assert "left alone" in caught.value.message
    assert (squatter / "mine.txt").read_text() == "keep me\n"
