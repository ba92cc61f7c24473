"""Worktrees per task attempt, against real git repositories in tmp_path."""

from __future__ import annotations

import json
import os
import subprocess
from functools import partial
from pathlib import Path

import pytest

from room.infra import worktrees as wt
from room.infra.git import Git, GitFailedError, UnsafeRepositoryError, git_env
from room.infra.sandbox import probe
from room.infra.worktrees import BadRefNameError, WorktreeError
from tests.support.work import git

pytestmark = [  # real git, jailed and plain
    pytest.mark.timeout(60),
    pytest.mark.slow,
    pytest.mark.usefixtures("hermetic_git"),
]

PROJECT_ID = 7
SLUG = "shop"


def porcelain(cwd: Path) -> list[str]:
    """``git status --porcelain`` lines, sorted, with their leading spaces kept."""
    done = subprocess.run(
        ["git", "status", "--porcelain"],
        cwd=cwd,
        check=True,
        capture_output=True,
        text=True,
        timeout=20,
    )
    return sorted(done.stdout.splitlines())


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


class Ops:
    """The worktree functions with one way of running git bound: in the sandbox's jail (as
    the server runs them where bubblewrap works, which scripts/test installs) or plainly."""

    def __init__(self, git: Git) -> None:
        self.git = git
        self.inspect = partial(wt.inspect, git=git)
        self.create_attempt = partial(wt.create_attempt, git=git)
        self.list_attempts = partial(wt.list_attempts, git=git)
        self.diff_stat = partial(wt.diff_stat, git=git)
        self.diff = partial(wt.diff, git=git)
        self.commit_all = partial(wt.commit_all, git=git)
        self.merge = partial(wt.merge, git=git)


@pytest.fixture(scope="module", params=["jailed", "plain"])
def ops(request: pytest.FixtureRequest) -> Ops:
    if request.param == "plain":
        return Ops(Git())
    jail = probe().git_jail()
    assert jail is not None, "bubblewrap is missing or refused: scripts/test installs it"
    return Ops(Git(jail))


def attempt(ops: Ops, repo: Path, root: Path, key: str, n: int = 1) -> wt.Worktree:
    return ops.create_attempt(repo, root, PROJECT_ID, SLUG, key, n)


def assert_untouched(ws: Path, head: str) -> None:
    assert git(ws, "rev-parse", "HEAD") == head
    assert git(ws, "symbolic-ref", "--short", "HEAD") == "main"
    assert git(ws, "status", "--porcelain") == ""
    assert not (ws / ".git" / "MERGE_HEAD").exists()


# ---------------------------------------------------------------- inspect


def test_inspect_a_repository(ops: Ops, repo: Path) -> None:
    info = ops.inspect(repo)
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
    info = ops.inspect(repo)
    assert info.mode == "worktrees"
    assert info.clean is False
    assert sorted(info.dirty_paths) == ["README.md", "notes.txt"]


def test_inspect_a_plain_folder_is_serial(ops: Ops, tmp_path: Path) -> None:
    folder = tmp_path / "plain"
    folder.mkdir()
    info = ops.inspect(folder)
    assert info.mode == "serial"
    assert info.reason_code == "not_a_repository"
    assert info.reason == "工作区不是 git 仓库 (The workspace is not a git repository.)"
    assert info.head is None and info.base is None

    missing = ops.inspect(tmp_path / "nowhere")
    assert (missing.mode, missing.reason_code) == ("serial", "no_workspace")


def test_inspect_an_empty_repository_is_serial(ops: Ops, tmp_path: Path) -> None:
    ws = tmp_path / "empty"
    ws.mkdir()
    git(ws, "init", "-q", "-b", "main")
    info = ops.inspect(ws)
    assert (info.mode, info.reason_code) == ("serial", "no_commits")
    assert info.reason is not None and info.reason.startswith("仓库还没有任何提交 (")
    assert info.branch == "main"


def test_inspect_detached_head_is_serial_unless_a_base_is_named(ops: Ops, repo: Path) -> None:
    git(repo, "checkout", "-q", "--detach")
    info = ops.inspect(repo)
    assert (info.mode, info.reason_code) == ("serial", "detached_head")

    named = ops.inspect(repo, base="main")
    assert (named.mode, named.base, named.branch) == ("worktrees", "main", None)

    wrong = ops.inspect(repo, base="release")
    assert (wrong.mode, wrong.reason_code) == ("serial", "no_base_branch")
    assert wrong.reason is not None and "release" in wrong.reason


def test_inspect_a_subfolder_of_a_repository_is_serial(ops: Ops, repo: Path) -> None:
    sub = repo / "docs"
    sub.mkdir()
    info = ops.inspect(sub)
    assert (info.mode, info.reason_code) == ("serial", "nested_repository")
    assert info.reason is not None and str(repo.resolve()) in info.reason


def test_inspect_ignores_an_inherited_git_dir(
    ops: Ops, repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GIT_DIR", str(tmp_path / "elsewhere" / ".git"))
    info = ops.inspect(repo)
    assert (info.mode, info.head) == ("worktrees", git(repo, "--git-dir=.git", "rev-parse", "HEAD"))


# ---------------------------------------------------------------- create_attempt


def test_attempts_of_two_tasks_are_isolated(ops: Ops, repo: Path, root: Path) -> None:
    head = git(repo, "rev-parse", "HEAD")
    login = attempt(ops, repo, root, "login")
    search = attempt(ops, repo, root, "search")

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
    assert porcelain(search.path) == [" M app.py"]


def test_create_attempt_is_idempotent(ops: Ops, repo: Path, root: Path) -> None:
    first = attempt(ops, repo, root, "login")
    (first.path / "work.txt").write_text("in progress\n")
    git(repo, "commit", "-q", "--allow-empty", "-m", "base moved on")

    again = attempt(ops, repo, root, "login")
    assert again.created is False
    assert (again.path, again.branch, again.fork_point) == (
        first.path,
        first.branch,
        first.fork_point,
    )
    assert (again.path / "work.txt").read_text() == "in progress\n"

    second = attempt(ops, repo, root, "login", 2)
    assert (second.branch, second.created) == ("room/shop/login-2", True)
    assert second.fork_point == git(repo, "rev-parse", "HEAD")


def test_a_branch_without_worktree_is_checked_out_again_not_reset(
    ops: Ops, repo: Path, root: Path
) -> None:
    git(repo, "branch", "room/shop/login-1")
    kept = commit(repo, "on main", **{"main.txt": "x\n"})
    git(repo, "branch", "-f", "room/shop/login-1", kept)
    git(repo, "reset", "-q", "--hard", "HEAD~1")

    made = attempt(ops, repo, root, "login")
    assert made.created is True
    assert git(made.path, "rev-parse", "HEAD") == kept
    assert (made.path / "main.txt").read_text() == "x\n"


@pytest.mark.parametrize(
    "key", ["", "~", "..", "/", "a\0b", "a\nb", "-", "x" * (wt.MAX_NAME_CHARS + 1)]
)
def test_unusable_task_keys_are_refused(ops: Ops, repo: Path, root: Path, key: str) -> None:
    with pytest.raises(BadRefNameError) as caught:
        attempt(ops, repo, root, key)
    assert caught.value.code == "bad_ref_name"
    assert caught.value.details["field"] == "task_key"
    assert not root.exists()
    assert git(repo, "branch", "--list", "room/*") == ""


@pytest.mark.parametrize("key", ["../x", "a b", "X", "a~b", "x.lock", "a..b", "@{u}"])
def test_odd_task_keys_are_sanitized_consistently(
    ops: Ops, repo: Path, root: Path, key: str
) -> None:
    branch, name = wt.attempt_names(PROJECT_ID, SLUG, key, 1)
    assert wt.attempt_names(PROJECT_ID, SLUG, key, 1) == (branch, name)
    assert branch == f"room/shop/{name}"
    stem = name.removesuffix("-1")
    assert stem.rsplit("-", 1)[1].isalnum() and len(stem.rsplit("-", 1)[1]) == 8
    assert set(stem) <= set("abcdefghijklmnopqrstuvwxyz0123456789-_")
    assert subprocess.run(["git", "check-ref-format", f"refs/heads/{branch}"]).returncode == 0

    made = attempt(ops, repo, root, key)
    assert (made.branch, made.task_key) == (branch, key)
    assert made.path.parent == root.resolve() / "7"
    assert made.path.name == name


def test_sanitized_keys_never_collide_with_plain_ones(ops: Ops, repo: Path, root: Path) -> None:
    plain = attempt(ops, repo, root, "x")
    odd = attempt(ops, repo, root, "../x")
    upper = attempt(ops, repo, root, "X")
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


def test_create_attempt_without_a_repository_says_why(ops: Ops, tmp_path: Path, root: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(WorktreeError) as caught:
        ops.create_attempt(plain, root, PROJECT_ID, SLUG, "login", 1)
    assert caught.value.code == "not_a_repository"
    assert caught.value.http_status == 409
    assert "(The workspace is not a git repository.)" in caught.value.message
    assert ops.list_attempts(plain, root, PROJECT_ID, SLUG) == ()

    with pytest.raises(WorktreeError) as caught:
        ops.create_attempt(tmp_path / "nowhere", root, PROJECT_ID, SLUG, "login", 1)
    assert caught.value.code == "no_workspace"
    assert not root.exists()


def test_create_attempt_refuses_a_root_inside_the_workspace(ops: Ops, repo: Path) -> None:
    with pytest.raises(WorktreeError) as caught:
        ops.create_attempt(repo, repo / ".worktrees", PROJECT_ID, SLUG, "login", 1)
    assert caught.value.code == "worktree_failed"
    assert git(repo, "status", "--porcelain") == ""
    assert git(repo, "branch", "--list", "room/*") == ""


def test_create_attempt_leaves_a_foreign_folder_alone(ops: Ops, repo: Path, root: Path) -> None:
    squatter = root / "7" / "login-1"
    squatter.mkdir(parents=True)
    (squatter / "mine.txt").write_text("keep me\n")
    with pytest.raises(WorktreeError) as caught:
        attempt(ops, repo, root, "login")
    assert caught.value.code == "worktree_failed"
    assert "left alone" in caught.value.message
    assert (squatter / "mine.txt").read_text() == "keep me\n"


# ---------------------------------------------------------------- diff_stat, diff


def test_diff_stat_and_diff_cover_commits_edits_and_new_files(
    ops: Ops, repo: Path, root: Path
) -> None:
    work = attempt(ops, repo, root, "login")
    commit(work.path, "first step", **{"login.py": "def login():\n    return True\n"})
    (work.path / "app.py").write_text("a = 1\nb = 20\nc = 3\n")  # unstaged edit
    (work.path / "notes.md").write_text("one\ntwo\nthree\n")  # untracked
    (work.path / "logo.bin").write_bytes(b"\0\1\2binary")
    git(repo, "commit", "-q", "--allow-empty", "-m", "base moved on")  # not part of the attempt

    stat = ops.diff_stat(work)
    assert stat.base == "main"
    assert stat.merge_base == work.fork_point
    by_path = {f.path: (f.added, f.deleted, f.binary) for f in stat.files}
    assert by_path == {
        "app.py": (1, 1, False),
        "login.py": (2, 0, False),
        "notes.md": (3, 0, False),
        "logo.bin": (None, None, True),
    }
    assert (stat.added, stat.deleted) == (6, 1)

    full = ops.diff(work)
    assert full.truncated is False
    assert "-b = 2\n+b = 20\n" in full.text
    assert "+++ b/notes.md\n" in full.text
    assert "Binary files /dev/null and b/logo.bin differ" in full.text

    # the agent's own index is untouched: the new files are still untracked there
    assert porcelain(work.path) == [" M app.py", "?? logo.bin", "?? notes.md"]


def test_diff_is_capped_with_a_marker(ops: Ops, repo: Path, root: Path) -> None:
    work = attempt(ops, repo, root, "big")
    (work.path / "big.txt").write_text("".join(f"line {i}\n" for i in range(5000)))
    capped = ops.diff(work, max_bytes=400)
    assert capped.truncated is True
    body, marker = capped.text.rsplit("[…", 1)
    assert len(body.encode()) <= 400
    assert body.endswith("\n")
    assert "diff truncated" in marker
    assert body.startswith("diff --git a/big.txt b/big.txt\n")


def test_diff_of_an_untouched_attempt_is_empty(ops: Ops, repo: Path, root: Path) -> None:
    work = attempt(ops, repo, root, "idle")
    stat = ops.diff_stat(work)
    assert (stat.files, stat.added, stat.deleted) == ((), 0, 0)
    assert ops.diff(work).text == ""


# ---------------------------------------------------------------- commit_all, merge


def test_commit_all_then_fast_forward(ops: Ops, repo: Path, root: Path) -> None:
    work = attempt(ops, repo, root, "login")
    (work.path / "login.py").write_text("def login(): ...\n")
    (work.path / "app.py").write_text("a = 1\n")

    done = ops.commit_all(work, "# Login\n\nadds login", "Agent Smith", "smith@agents.example")
    assert done.committed is True
    assert done.head == git(work.path, "rev-parse", "HEAD")
    assert done.head_oneline == git(work.path, "log", "--oneline", "-1")
    assert git(work.path, "log", "-1", "--format=%an <%ae>|%cn|%s") == (
        "Agent Smith <smith@agents.example>|Agent Smith|# Login"
    )
    assert git(work.path, "status", "--porcelain") == ""

    again = ops.commit_all(work, "nothing new", "Agent Smith", "smith@agents.example")
    assert (again.committed, again.head) == (False, done.head)

    before = git(repo, "rev-parse", "HEAD")
    merged = ops.merge(repo, work.branch, "ff", "unused for ff")
    assert merged.outcome == "fast_forward"
    assert (merged.before, merged.after) == (before, done.head)
    assert merged.head_oneline == git(repo, "log", "--oneline", "-1")
    assert git(repo, "rev-parse", "HEAD") == done.head
    assert (repo / "login.py").read_text() == "def login(): ...\n"
    assert git(repo, "status", "--porcelain") == ""

    assert ops.merge(repo, work.branch, "ff", "again").outcome == "up_to_date"


def test_commit_all_refuses_a_worktree_moved_off_its_branch(
    ops: Ops, repo: Path, root: Path
) -> None:
    work = attempt(ops, repo, root, "login")
    git(work.path, "checkout", "-q", "--detach")
    (work.path / "x.txt").write_text("x\n")
    with pytest.raises(WorktreeError) as caught:
        ops.commit_all(work, "work", "Agent", "agent@example.com")
    assert caught.value.code == "branch_mismatch"
    assert git(work.path, "status", "--porcelain") == "?? x.txt"


def test_merge_commit_when_the_base_moved(ops: Ops, repo: Path, root: Path) -> None:
    work = attempt(ops, repo, root, "login")
    (work.path / "login.py").write_text("def login(): ...\n")
    ops.commit_all(work, "login", "Agent", "agent@example.com")
    moved = commit(repo, "docs", **{"README.md": "hello, world\n"})

    refused = ops.merge(repo, work.branch, "ff", "unused")
    assert refused.outcome == "not_fast_forward"
    assert (refused.before, refused.after) == (moved, moved)
    assert_untouched(repo, moved)

    merged = ops.merge(
        repo,
        work.branch,
        "merge",
        "Merge task login (attempt 1)",
        author_name="Project Room",
        author_email="room@example.com",
    )
    assert merged.outcome == "merged"
    assert merged.before == moved and merged.after == git(repo, "rev-parse", "HEAD")
    parents = git(repo, "log", "-1", "--format=%P").split()
    assert parents == [moved, git(repo, "rev-parse", work.branch)]
    assert git(repo, "log", "-1", "--format=%s|%an") == "Merge task login (attempt 1)|Project Room"
    assert (repo / "login.py").exists() and (repo / "README.md").read_text() == "hello, world\n"
    assert git(repo, "status", "--porcelain") == ""


def test_merge_commit_mode_makes_a_commit_even_when_ff_is_possible(
    ops: Ops, repo: Path, root: Path
) -> None:
    work = attempt(ops, repo, root, "login")
    (work.path / "login.py").write_text("x\n")
    ops.commit_all(work, "login", "Agent", "agent@example.com")
    merged = ops.merge(repo, work.branch, "merge", "Merge login")
    assert merged.outcome == "merged"
    assert len(git(repo, "log", "-1", "--format=%P").split()) == 2
    assert git(repo, "log", "-1", "--format=%an") == "Owner"  # the workspace's own identity


def test_conflicting_merge_is_aborted_and_reports_paths(ops: Ops, repo: Path, root: Path) -> None:
    work = attempt(ops, repo, root, "login")
    (work.path / "app.py").write_text("a = 1\nb = 'theirs'\nc = 3\n")
    (work.path / "README.md").write_text("theirs\n")
    (work.path / "fine.txt").write_text("no conflict here\n")
    ops.commit_all(work, "login", "Agent", "agent@example.com")
    ours = commit(repo, "ours", **{"app.py": "a = 1\nb = 'ours'\nc = 3\n", "README.md": "ours\n"})
    (repo / "scratch.txt").write_text("an untracked file of the owner\n")

    result = ops.merge(repo, work.branch, "merge", "Merge login")
    assert result.outcome == "conflict"
    assert result.conflicts == ("README.md", "app.py")
    assert (result.before, result.after) == (ours, ours)

    assert git(repo, "rev-parse", "HEAD") == ours
    assert git(repo, "symbolic-ref", "--short", "HEAD") == "main"
    assert not (repo / ".git" / "MERGE_HEAD").exists()
    assert git(repo, "status", "--porcelain") == "?? scratch.txt"
    assert (repo / "app.py").read_text() == "a = 1\nb = 'ours'\nc = 3\n"
    assert not (repo / "fine.txt").exists()
    assert (repo / "scratch.txt").read_text() == "an untracked file of the owner\n"
    # the attempt's branch is untouched too
    assert git(repo, "rev-parse", work.branch) == git(work.path, "rev-parse", "HEAD")


def test_dirty_workspace_refuses_merge(ops: Ops, repo: Path, root: Path) -> None:
    work = attempt(ops, repo, root, "login")
    (work.path / "login.py").write_text("x\n")
    ops.commit_all(work, "login", "Agent", "agent@example.com")
    head = git(repo, "rev-parse", "HEAD")
    (repo / "README.md").write_text("the owner is editing this\n")

    for mode in ("ff", "merge"):
        with pytest.raises(WorktreeError) as caught:
            ops.merge(repo, work.branch, mode, "Merge login")
        assert caught.value.code == "workspace_dirty"
        assert caught.value.details["paths"] == ["README.md"]
    assert git(repo, "rev-parse", "HEAD") == head
    assert (repo / "README.md").read_text() == "the owner is editing this\n"
    assert not (repo / "login.py").exists()


def test_an_untracked_file_in_the_way_refuses_merge(ops: Ops, repo: Path, root: Path) -> None:
    work = attempt(ops, repo, root, "login")
    (work.path / "login.py").write_text("theirs\n")
    ops.commit_all(work, "login", "Agent", "agent@example.com")
    head = git(repo, "rev-parse", "HEAD")
    (repo / "login.py").write_text("the owner's own file\n")
    with pytest.raises(WorktreeError) as caught:
        ops.merge(repo, work.branch, "ff", "unused")
    assert caught.value.code == "workspace_dirty"
    assert "login.py" in caught.value.message
    assert git(repo, "rev-parse", "HEAD") == head
    assert (repo / "login.py").read_text() == "the owner's own file\n"


def test_merge_needs_the_base_checked_out_and_a_real_branch(
    ops: Ops, repo: Path, root: Path
) -> None:
    work = attempt(ops, repo, root, "login")
    with pytest.raises(WorktreeError) as caught:
        ops.merge(repo, "room/shop/nothing-1", "ff", "x")
    assert caught.value.code == "no_branch"
    git(repo, "checkout", "-q", "-b", "feature")
    with pytest.raises(WorktreeError) as caught:
        ops.merge(repo, work.branch, "ff", "x", base="main")
    assert caught.value.code == "base_not_checked_out"


# ---------------------------------------------------------------- list_attempts


def test_list_attempts_shows_what_is_kept(ops: Ops, repo: Path, root: Path) -> None:
    done = attempt(ops, repo, root, "login")
    (done.path / "login.py").write_text("x\n")
    ops.commit_all(done, "login", "Agent", "agent@example.com")
    ops.merge(repo, done.branch, "ff", "unused")

    busy = attempt(ops, repo, root, "search")
    (busy.path / "search.py").write_text("y\n")
    ops.commit_all(busy, "search", "Agent", "agent@example.com")
    (busy.path / "draft.txt").write_text("unsaved\n")

    idle = attempt(ops, repo, root, "idle")
    git(repo, "branch", "room/shop/old-1")  # a branch whose worktree is long gone
    other = ops.create_attempt(repo, root, 8, "other", "login", 1)  # another project
    git(repo, "commit", "-q", "--allow-empty", "-m", "base moved on")

    # the member "leaves": nothing is cleaned up, everything is listed
    rows = {row.branch: row for row in ops.list_attempts(repo, root, PROJECT_ID, SLUG)}
    assert set(rows) == {
        "room/shop/login-1",
        "room/shop/search-1",
        "room/shop/idle-1",
        "room/shop/old-1",
    }
    login, search = rows["room/shop/login-1"], rows["room/shop/search-1"]
    assert (login.path, login.ahead, login.behind, login.merged, login.dirty) == (
        done.path,
        0,
        1,
        True,
        False,
    )
    assert (search.path, search.ahead, search.behind, search.merged, search.dirty) == (
        busy.path,
        1,
        1,
        False,
        True,
    )
    assert search.head == git(busy.path, "rev-parse", "HEAD")
    assert (rows["room/shop/idle-1"].path, rows["room/shop/idle-1"].dirty) == (idle.path, False)
    old = rows["room/shop/old-1"]
    assert (old.path, old.name, old.dirty, old.missing, old.merged) == (
        None,
        "old-1",
        None,
        False,
        True,
    )
    for kept in (done, busy, idle, other):
        assert kept.path.is_dir()

    # without the slug only the worktrees under the project's folder are found
    by_folder = ops.list_attempts(repo, root, PROJECT_ID)
    assert {row.name for row in by_folder} == {"login-1", "search-1", "idle-1"}
    assert [row.branch for row in ops.list_attempts(repo, root, 8)] == ["room/other/login-1"]


def test_list_attempts_reports_a_vanished_folder(
    ops: Ops, repo: Path, root: Path, tmp_path: Path
) -> None:
    work = attempt(ops, repo, root, "login")
    work.path.rename(tmp_path / "moved-away")
    (row,) = ops.list_attempts(repo, root, PROJECT_ID)
    assert (row.branch, row.missing, row.dirty) == ("room/shop/login-1", True, None)
    with pytest.raises(WorktreeError) as caught:
        attempt(ops, repo, root, "login")
    assert caught.value.code == "worktree_failed"
    assert "git worktree prune" in caught.value.message


def test_every_reason_is_chinese_first_then_english() -> None:
    import re

    for code, text in wt.WORKTREE_CODES.items():
        assert re.fullmatch(r"[^()]*[\u4e00-\u9fff][^()]* \([A-Za-z][^()]+\.\)", text), code


def test_a_file_name_that_is_not_utf8_is_shown_not_fatal(ops: Ops, repo: Path, root: Path) -> None:
    """git reports such a name with lone surrogates; the stat and the dirty list say its odd
    bytes as ``\\xNN`` so the answer can be sent as JSON (a 500 on the board otherwise)."""
    work = attempt(ops, repo, root, "bytes")
    (work.path / os.fsdecode(b"caf\xe9.txt")).write_text("gbk name\n")
    stat = ops.diff_stat(work)
    assert [f.path for f in stat.files] == ["caf\\xe9.txt"]
    json.dumps([f.path for f in stat.files], ensure_ascii=False).encode("utf-8")  # sendable
    (repo / os.fsdecode(b"r\xe9sum\xe9.md")).write_text("x\n")
    info = ops.inspect(repo)
    assert "r\\xe9sum\\xe9.md" in info.dirty_paths


def test_a_repository_configured_to_run_programs_is_refused_not_run(
    ops: Ops, repo: Path, tmp_path: Path
) -> None:
    """A filter in the repository's own config (an agent could write one) never runs as the
    server: its git refuses the repository, and the workspace is serial with the reason."""
    marker = tmp_path / "ran"
    git(repo, "config", "filter.x.clean", f"sh -c 'touch {marker}; cat'")
    (repo / ".git" / "info").mkdir(exist_ok=True)
    (repo / ".git" / "info" / "attributes").write_text("* filter=x\n")
    (repo / "app.py").write_text("a = 9\nb = 2\nc = 3\n")  # same size: git must re-read it
    info = ops.inspect(repo)
    assert (info.mode, info.reason_code) == ("serial", "unsafe_repository")
    assert "filter.x.clean" in (info.reason or "")
    with pytest.raises(UnsafeRepositoryError):
        ops.git.run(repo, "status", "--porcelain")
    assert not marker.exists()


def test_git_gets_none_of_the_servers_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    env = git_env()
    assert "OPENAI_API_KEY" not in env and env["GIT_CONFIG_NOSYSTEM"] == "1"


@pytest.mark.parametrize(
    "key",
    [
        "includeIf.hasconfig:remote.*.url:* *.path",  # split on whitespace, it looked harmless
        "filter.a b.c.smudge",
        "include.path",
        "core.hooksPath",
        "diff.x y.textconv",
        "trace2.eventTarget",
        "credential.https://example.com.helper",
    ],
)
def test_a_key_that_runs_a_program_is_found_whatever_its_subsection_holds(
    ops: Ops, repo: Path, key: str
) -> None:
    git(repo, "config", key, "whatever")
    with pytest.raises(UnsafeRepositoryError) as caught:
        ops.git.run(repo, "status")
    # git lowercases the section and the variable, never the subsection
    section, _, rest = key.partition(".")
    sub, _, variable = rest.rpartition(".")
    spelled = ".".join(p for p in (section.lower(), sub, variable.lower()) if p)
    assert caught.value.details["keys"] == [spelled]
    assert ops.inspect(repo).reason_code == "unsafe_repository"


def test_harmless_keys_with_odd_subsections_are_not_refused(ops: Ops, repo: Path) -> None:
    git(repo, "config", "remote.o r.url", "a b")
    git(repo, "config", "branch.x y.path", "whatever")  # not include.path: a made-up variable
    assert ops.inspect(repo).mode == "worktrees"


def test_the_jail_keeps_what_a_repository_runs_inside_even_when_not_refused(
    repo: Path, tmp_path: Path
) -> None:
    """The second layer on its own: git's own command line (no configuration check) run in the
    jail, in a repository whose filter writes a file outside it. In the jail the filter cannot
    see that folder; run plainly, the same command line writes it (so this test can fail)."""
    out = tmp_path / "outside"
    out.mkdir()
    git(repo, "config", "filter.x.clean", f"sh -c 'touch {out}/clean; cat'")
    (repo / ".gitattributes").write_text("* filter=x\n")
    (repo / "app.py").write_text("a = 9\nb = 2\nc = 3\n")  # same size: git must re-read it
    jail = probe().git_jail()
    assert jail is not None, "bubblewrap is missing or refused: scripts/test installs it"
    for runner, expected in ((Git(jail), []), (Git(), ["clean"])):
        argv = runner.argv(repo, ["add", "--all"], ())
        done = subprocess.run(argv, cwd=repo, env=git_env(), capture_output=True, timeout=20)
        assert done.returncode == 0, done.stderr
        assert sorted(p.name for p in out.iterdir()) == expected, runner
        git(repo, "reset", "-q")


def test_the_jail_shows_git_nothing_of_the_host_but_what_it_binds(
    repo: Path, tmp_path: Path
) -> None:
    other = tmp_path / "other"
    other.mkdir()
    (other / "secret.txt").write_text("no\n")
    (repo / ".git").rename(tmp_path / "moved.git")
    (repo / ".git").write_text(f"gitdir: {tmp_path / 'moved.git'}\n")  # a repository elsewhere
    jail = probe().git_jail()
    assert jail is not None
    with pytest.raises(GitFailedError) as caught:
        Git(jail).run(repo, "status")
    assert "not a git repository" in caught.value.stderr
    Git().run(repo, "status")  # plainly, git follows the .git file
