"""A hostile model against the server's own git (issue 24, item 1): through the real server, its
sandbox (bubblewrap) and real git, an agent played by a scripted model writes the repository
configuration that would make git run a program or work on another repository, and the server
then runs its own git there (inspecting the workspace, adding a worktree, diffing). Each case
ends with nothing written outside the sandbox and the other repository untouched.

Two ways in: a workspace that was a repository from the start (its ``.git`` is read-only to
commands, so every write must fail, and visibly), and the default workspace, which is no
repository until the agent's own ``git init`` — there the agent writes whatever it likes, and
the server must neither run it nor follow it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.live_room import Room, agent_replies, eventually
from tests.support.llm_servers import OpenAIServer, openai_text
from tests.support.work import (
    Scripts,
    agent,
    calls,
    git,
    git_workspace,
    plan,
    request,
    start,
    task,
)

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.slow,
    pytest.mark.timeout(90),
    pytest.mark.usefixtures("hermetic_git", "workspace_roots"),
]


@pytest.fixture
def llm(scripted_llm: OpenAIServer) -> OpenAIServer:
    """The ``room`` fixture's model server answers from ``scripts``."""
    return scripted_llm


# The configuration every case tries to get run: a smudge filter (worktree checkouts), a clean
# filter (status, add, diff) and a post-checkout hook, each leaving a marker on the host.
EVIL_CONFIG = """[filter "x"]
\tsmudge = "sh -c 'touch {out}/smudge; cat'"
\tclean = "sh -c 'touch {out}/clean; cat'"
"""
HOOK = "#!/bin/sh\ntouch {out}/hook\n"


def smuggle(how: str, out: Path, victim: Path) -> str:
    """The shell command that turns the (not yet a repository) workspace into one that asks
    for a program ``how``."""
    start = (
        "git init -q -b main && git config user.email e@example.com && git config user.name e"
        f" && cat > .git/evil.cfg <<'EOF'\n{EVIL_CONFIG.format(out=out)}EOF\n"
    )
    commit = (
        " && echo '* filter=x' > .gitattributes && echo hi > a.txt"
        " && git add -A && git commit -qm start; git log --oneline | head -1"
    )
    if how == "includeif_space":  # git config --list used to be split on whitespace
        return (start + "git config remote.o.url 'a b'"
                " && git config 'includeIf.hasconfig:remote.*.url:* *.path' evil.cfg" + commit)  # fmt: skip
    if how == "include_path":
        return start + "git config include.path evil.cfg" + commit
    if how == "hooks_path":
        hook = HOOK.format(out=out).replace("\n", "\\n")
        return (start + f"mkdir -p .git/h && printf '{hook}' > .git/h/post-checkout"
                " && chmod +x .git/h/post-checkout && git config core.hooksPath \"$PWD/.git/h\""
                + commit)  # fmt: skip
    if how == "git_symlink":  # the workspace's .git is another tenant's repository
        return f"ln -s {victim}/.git .git && ls -la .git"
    if how == "git_file":
        return f"printf 'gitdir: {victim}/.git\\n' > .git && cat .git"
    raise AssertionError(how)


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """Another tenant's repository on the same host, which no agent here may reach."""
    repo = tmp_path / "victim"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "secret.txt").write_text("another tenant's code\n")
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=V", "-c", "user.email=v@example.com", "commit", "-qm", "v")
    return repo


@pytest.fixture
def out(tmp_path: Path) -> Path:
    folder = tmp_path / "outside"
    folder.mkdir()
    return folder


def untouched(victim: Path, out: Path) -> None:
    assert sorted(p.name for p in out.iterdir()) == [], "a program ran on the host"
    assert git(victim, "worktree", "list", "--porcelain").count("worktree ") == 1
    assert git(victim, "for-each-ref", "--format=%(refname)") == "refs/heads/main"
    assert git(victim, "status", "--porcelain") == ""


@pytest.mark.parametrize(
    "how", ["includeif_space", "include_path", "hooks_path", "git_symlink", "git_file"]
)
async def test_a_workspace_an_agent_made_a_repository_runs_nothing_it_wrote(
    room: Room,
    scripts: Scripts,
    how: str,
    out: Path,
    victim: Path,
) -> None:
    detail = room.get(f"/api/projects/{room.project}")["project"]["workspace"]
    assert (detail["mode"], detail["reason_code"]) == ("serial", "not_a_repository")
    folder = Path(detail["path"])
    agent(room, "evil")
    scripts.push(
        "evil", calls(("make", "shell", {"command": smuggle(how, out, victim)})), openai_text("好")
    )
    room.say("@evil 准备一下仓库")
    await eventually(lambda: agent_replies(room, "evil"), timeout=30)
    made = scripts.told("evil")["make"]
    assert made["sandboxed"] is True, made
    assert (folder / ".git").exists() or (folder / ".git").is_symlink(), made["output"]

    # The server looks at the workspace again (as after a restart): the owner sets it anew.
    status, data = request(room, "PUT", f"/api/projects/{room.project}/workspace", {"path": None})
    assert status == 200, data
    seen = data["workspace"]
    # A task start asks for a worktree: the server's git inspects, and would add one.
    scripts.push("evil", start("api"), openai_text("开始了"))
    plan(room, ("api", "evil"))
    await eventually(lambda: len(agent_replies(room, "evil")) >= 2, timeout=30)
    assert scripts.told("evil")["start"]["ok"] is True
    untouched(victim, out)
    assert seen["mode"] == "serial", seen
    if how in ("git_symlink", "git_file"):
        # The isolated git does not see where .git points: no repository there at all.
        assert seen["reason_code"] in ("not_a_repository", "repository_unreadable"), seen
    else:
        assert seen["reason_code"] == "unsafe_repository", seen
    assert task(room, "api")["attempt"] is None


async def test_a_repository_from_the_start_keeps_its_git_out_of_reach(
    room: Room,
    scripts: Scripts,
    tmp_path: Path,
    out: Path,
    victim: Path,
) -> None:
    repo = git_workspace(room, tmp_path)
    agent(room, "evil")
    evil = EVIL_CONFIG.format(out=out)
    attempts = {
        "include": "git config include.path evil.cfg",
        "hooks": "git config core.hooksPath /tmp",
        "common": f"cat >> \"$(git rev-parse --git-common-dir)/config\" <<'EOF'\n{evil}EOF",
        "own": f"cat >> \"$(git rev-parse --git-dir)/config.worktree\" <<'EOF'\n{evil}EOF",
        "point": f"printf 'gitdir: {victim}/.git\\n' > .git",
        "remove": "rm -f .git",
        "attributes": "echo '* filter=x' > .gitattributes && echo hi > b.txt",
    }
    command = "".join(f"{line}\necho {name}=$?\n" for name, line in attempts.items())
    scripts.push(
        "evil", start("api"), calls(("try", "shell", {"command": command})), openai_text("试过了")
    )
    plan(room, ("api", "evil"))
    await eventually(lambda: agent_replies(room, "evil"), timeout=30)
    tried = scripts.told("evil")["try"]
    assert tried["sandboxed"] is True and tried["cwd_mode"] == "worktree", tried
    codes = dict(
        line.split("=", 1)
        for line in tried["output"].splitlines()
        if line.split("=")[0] in attempts
    )
    # Every write into git's own files failed where the model can see it; the attributes file is
    # the agent's own work and was written.
    assert {k: v != "0" for k, v in codes.items()} == {
        **{name: True for name in attempts},
        "attributes": False,
    }, tried["output"]
    worktree = Path(task(room, "api")["attempt"]["path"])
    assert (worktree / ".git").is_file() and str(repo) in (worktree / ".git").read_text()
    # The server's own git works on the attempt: the diff and the board's stat.
    diff = room.get(f"/api/projects/{room.project}/tasks/api/diff")
    assert "b.txt" in diff["text"] and ".gitattributes" in diff["text"]
    board = room.get(f"/api/projects/{room.project}/tasks")
    [shown] = [t for t in board["tasks"] if t["key"] == "api"]
    assert {f["path"] for f in shown["attempt"]["diff_stat"]["files"]} == {
        ".gitattributes",
        "b.txt",
    }
    untouched(victim, out)
    assert "evil" not in (repo / ".git" / "config").read_text()
