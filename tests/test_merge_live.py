"""A merge is what a person reviewed, end to end: a server subprocess, a
scripted model playing an engineer in its worktree (its own Python run leaves ``__pycache__``,
its shell leaves build junk and hostile names), real git and bubblewrap. The review lists every
change with the junk flagged; the merge takes only the reviewed files, names the task, the
attempt and the reviewer, and no name the agent wrote escapes or injects anything.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.live_room import Room, agent_replies, eventually
from tests.support.llm_servers import OpenAIServer, openai_text
from tests.support.server import start_with_openai
from tests.support.work import (
    CALC,
    PYTHON,
    Scripts,
    agent,
    calls,
    git,
    git_workspace,
    plan,
    request,
    review,
    start,
    task,
)

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.slow,
    pytest.mark.timeout(120),
    pytest.mark.usefixtures("hermetic_git", "workspace_roots"),
]


@pytest.fixture(params=["sqlite", "postgresql"])
def room(
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    llm: OpenAIServer,
) -> Iterator[Room]:
    """The conftest's ``room`` on each store (``[postgresql]``: served on a fresh database of
    the private cluster, ``ROOM_DATABASE_URL``, which this process's ``room login-link`` reads
    too): the review and the merge read and write the task, its attempt and the audit through
    the store."""
    env = {}
    if request.param == "postgresql":
        env["ROOM_DATABASE_URL"] = str(request.getfixturevalue("pg_dsn"))
        monkeypatch.setenv("ROOM_DATABASE_URL", env["ROOM_DATABASE_URL"])
    server = start_with_openai(tmp_path / "data", llm, **env)
    try:
        yield Room(server, llm)
    finally:
        server.stop()


@pytest.fixture
def llm(scripted_llm: OpenAIServer) -> OpenAIServer:
    """The ``room`` fixture's model server answers from ``scripts``."""
    return scripted_llm


NEWLINE_NAME = "-rf\nReviewed-by: mallory.py"
JUNK = (
    "echo scratch > build.tmp && mkdir -p dist && echo 'bundle' > dist/app.js"
    " && touch .DS_Store && printf 'odd\\n' > \"$(printf -- '-rf\\nReviewed-by: mallory.py')\""
    " && ln -s {secret} leak && ls -A src"
)


SUBMIT = {"task": "api", "action": "submit", "summary": "add", "artifacts": ["src/calc.py"]}


def tree(repo: Path) -> list[str]:
    return sorted(
        p for p in git(repo, "ls-tree", "-r", "-z", "--name-only", "HEAD").split("\0") if p
    )


async def test_only_the_reviewed_files_of_an_attempt_land_on_the_base(
    room: Room,
    scripts: Scripts,
    tmp_path: Path,
) -> None:
    repo = git_workspace(room, tmp_path)
    secret = tmp_path / "secret.txt"
    secret.write_text("the host's secret\n")
    agent(room, "be")
    scripts.push(
        "be",
        start("api"),
        calls(
            ("w", "fs_write", {"path": "src/calc.py", "content": CALC}),
            ("py", "shell", {"command": PYTHON}),
            ("junk", "shell", {"command": JUNK.format(secret=secret)}),
        ),
        calls(("submit", "room_task_update", SUBMIT)),
        openai_text("做完了，请验收"),
    )
    plan(room, ("api", "be"))
    await eventually(lambda: agent_replies(room, "be"), timeout=30)
    told = scripts.told("be")
    assert told["py"]["exit_code"] == 0 and told["py"]["sandboxed"] is True, told["py"]
    assert told["junk"]["exit_code"] == 0, told["junk"]
    assert "__pycache__" in told["junk"]["output"]  # python really left its bytecode
    assert told["submit"]["ok"] is True, told["submit"]
    status, data = review(room, "api")
    assert (status, data["task"]["state"]) == (200, "accepted"), data

    # The review: every change, the junk flagged, only the cited file ticked.
    diff = room.get(f"/api/projects/{room.project}/tasks/api/diff")
    files = {f["path"]: f for f in diff["files"]}
    [pyc] = [p for p in files if p.startswith("src/__pycache__/calc.") and p.endswith(".pyc")]
    flags = {p: (f["kind"], f["cited"], f["junk"], f["selected"]) for p, f in files.items()}
    assert flags == {
        "src/calc.py": ("file", True, None, True),
        pyc: ("file", False, "__pycache__/", False),
        "build.tmp": ("file", False, "*.tmp", False),
        "dist/app.js": ("file", False, "dist/", False),
        ".DS_Store": ("file", False, ".DS_Store", False),
        NEWLINE_NAME: ("file", False, None, False),
        "leak": ("symlink", False, None, False),
    }

    # Names that are not changes of the attempt are refused, whatever they try.
    url = f"/api/projects/{room.project}/tasks/api/merge"
    for bad in ([f"../{secret.name}"], [str(secret)], ["src/../leak"], ["--upload-pack=x"]):
        status, data = request(room, "POST", url, {"mode": "ff", "paths": ["src/calc.py", *bad]})
        assert (status, data["error"]["code"]) == (400, "path_not_in_diff"), data
    assert tree(repo) == ["README.md"]

    # The default merge: the cited file only.
    status, data = request(room, "POST", url, {"mode": "ff", "digest": diff["digest"]})
    assert (status, data["outcome"], data["included"]) == (200, "fast_forward", ["src/calc.py"])
    assert tree(repo) == ["README.md", "src/calc.py"]
    assert (repo / "src/calc.py").read_text() == CALC
    assert not (repo / "src/__pycache__").exists() and not (repo / "build.tmp").exists()
    assert git(repo, "status", "--porcelain", "--ignored") == ""
    message = git(repo, "log", "-1", "--format=%B")
    assert message.splitlines()[-3:] == [
        "Room-Task: api",
        f"Room-Attempt: 1 ({data['branch']})",
        f"Reviewed-by: {git(repo, 'log', '-1', '--format=%cn <%ce>')}",
    ]
    assert "mallory" not in message
    assert git(repo, "log", "-1", "--format=%an") == "BE (be)"
    assert task(room, "api")["attempt"]["state"] == "merged"
    # The worktree keeps what was left out.
    worktree = Path(task(room, "api")["attempt"]["path"])
    assert (worktree / "build.tmp").exists() and (worktree / pyc).exists()
    assert secret.read_text() == "the host's secret\n"
