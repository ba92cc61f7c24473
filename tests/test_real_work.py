"""Agents doing real work through the real server and runtime: a server subprocess (its sandbox
probed at start), a local OpenAI-compatible server scripting each agent's tool calls, real git
repositories in tmp_path, and bubblewrap. Nothing of ours is mocked.

Each agent has its own script (:class:`Scripts`): a request is answered from the queue of the
agent it is for, read from its system prompt, so agents working at the same time cannot take
each other's steps (the helpers are tests.support.work's). When bubblewrap is missing the
sandboxed tests fail (``sandboxed`` is false and commands are refused), they are not skipped:
``scripts/test`` installs it.
"""

from __future__ import annotations

import functools
import hashlib
import os
import threading
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.support.inproc import wait_until
from tests.support.live_room import Room, agent_replies, eventually
from tests.support.llm_servers import OpenAIServer, Reply, openai_text
from tests.support.processes import running
from tests.support.work import (
    CALC,
    PYTHON,
    Scripts,
    agent,
    calls,
    git,
    git_workspace,
    patch_settings,
    plan,
    request,
    results_in,
    review,
    server_answers,
    start,
    task,
    worktree_of,
)

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("hermetic_git", "workspace_roots")]


@pytest.fixture
def llm(scripted_llm: OpenAIServer) -> OpenAIServer:
    """The ``room`` fixture's model server answers from ``scripts``."""
    return scripted_llm


# -- 1. an agent's whole task in its worktree ---------------------------------------------------


async def test_an_agent_works_in_its_worktree_and_acceptance_follows_the_file(
    room: Room, scripts: Scripts, tmp_path: Path
) -> None:
    repo = git_workspace(room, tmp_path)
    agent(room, "be")

    cited: list[int] = []

    def submit(body: dict[str, Any]) -> Reply:
        if not cited:  # the command this turn ran; a later submission cites the same one
            cited.append(results_in(body)["py"]["command_result_id"])
        return calls(("submit", "room_task_update", {
            "task": "api", "action": "submit", "summary": "add 能算 1+1",
            "artifacts": ["src/calc.py"], "commands": cited,
        }))  # fmt: skip

    scripts.push(
        "be",
        start("api"),
        calls(
            ("w", "fs_write", {"path": "src/calc.py", "content": CALC}),
            ("py", "shell", {"command": PYTHON}),
            ("gs", "shell", {"command": "git status --short --branch"}),
        ),
        submit,
        openai_text("做完了，请验收"),
    )
    plan(room, ("api", "be"))
    await eventually(lambda: agent_replies(room, "be"), timeout=30)
    told = scripts.told("be")
    assert told["start"]["ok"] is True, told["start"]
    attempt = task(room, "api")["attempt"]
    worktree, branch = Path(attempt["path"]), attempt["branch"]
    assert branch == f"room/{room.project}/api-1" and attempt["state"] == "open"

    # The file is in the attempt's worktree, and only there.
    assert told["w"]["ok"] is True and (worktree / "src/calc.py").read_text() == CALC
    assert not (repo / "src").exists() and git(repo, "status", "--porcelain") == ""
    # Both commands really ran, sandboxed, in the worktree: python imported the written file,
    # git saw the worktree's branch and its untracked file.
    py, gs = told["py"], told["gs"]
    assert (py["exit_code"], py["output"], py["sandboxed"], py["cwd_mode"]) == (
        0, "2\n", True, "worktree",
    )  # fmt: skip
    assert gs["exit_code"] == 0, gs["output"]
    assert gs["output"].splitlines() == [f"## {branch}", "?? src/"]

    # The submission carries the file and the recorded command.
    assert told["submit"]["ok"] is True, told["submit"]
    submitted = task(room, "api")
    assert submitted["state"] == "in_review"
    [artifact] = [e for e in submitted["evidence"] if e["kind"] == "artifact"]
    [command] = [e["command"] for e in submitted["evidence"] if e["kind"] == "command"]
    assert (artifact["path"], artifact["sha256"]) == ("src/calc.py", sha256(CALC))
    assert (command["id"], command["exit_code"], command["output_tail"]) == (cited[0], 0, "2\n")
    status, data = review(room, "api")
    assert (status, data["task"]["state"]) == (200, "accepted"), data

    # Reopened, resubmitted with the same evidence, then the file changes: no acceptance.
    status, data = request(room, "POST", f"/api/projects/{room.project}/tasks/api/reopen",
                           {"reason": "再确认一次"})  # fmt: skip
    assert (status, data["task"]["state"]) == (200, "changes_requested"), data
    scripts.push("be", submit, openai_text("重新提交了"))
    room.say("@be 请按原样重新提交")
    await eventually(lambda: task(room, "api")["state"] == "in_review", timeout=20)
    (worktree / "src/calc.py").write_text("def add(a, b):\n    return a - b\n")
    status, data = review(room, "api")
    assert (status, data["error"]["code"]) == (409, "artifact_changed"), data
    assert data["error"]["details"]["path"] == "src/calc.py"
    assert "src/calc.py" in data["error"]["message"]
    status, data = request(room, "POST", f"/api/projects/{room.project}/tasks/api/accept", {})
    assert (status, data["error"]["code"]) == (409, "artifact_changed"), data
    assert task(room, "api")["state"] == "in_review"
    board = room.get(f"/api/projects/{room.project}/tasks")
    [shown] = [t for t in board["tasks"] if t["key"] == "api"]
    latest = [e for e in shown["evidence"] if e["kind"] == "artifact" and e["revision"] == 2]
    assert [(e["path"], e["verification"]) for e in latest] == [("src/calc.py", "changed")]
    # Put back what was submitted: the same review now accepts it.
    (worktree / "src/calc.py").write_text(CALC)
    status, data = review(room, "api")
    assert (status, data["task"]["state"]) == (200, "accepted"), data


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# -- 2. two members, two tasks, one repository ------------------------------------------------


async def test_two_members_on_two_tasks_never_see_each_others_uncommitted_files(
    room: Room, scripts: Scripts, tmp_path: Path
) -> None:
    repo = git_workspace(room, tmp_path)
    both_wrote = threading.Barrier(2, timeout=20)

    def look(body: dict[str, Any]) -> Reply:
        # Asked only once this agent's write is done; answered once the other's is done too, so
        # each one looks while the other's file is on disk.
        assert results_in(body)["w"]["ok"] is True
        both_wrote.wait()
        return calls(
            ("list", "fs_list", {}),
            ("glob", "fs_glob", {"pattern": "**/*"}),
            ("ls", "shell", {"command": "ls -A"}),
        )

    for handle, name in (("be", "api.py"), ("fe", "ui.js")):
        agent(room, handle)
        scripts.push(
            handle,
            start("api" if handle == "be" else "ui"),
            calls(("w", "fs_write", {"path": name, "content": f"# {handle} 的草稿\n"})),
            look,
            openai_text("看完了"),
        )
    plan(room, ("api", "be"), ("ui", "fe"))
    await eventually(lambda: agent_replies(room, "be") and agent_replies(room, "fe"), timeout=40)

    trees = {key: Path(task(room, key)["attempt"]["path"]) for key in ("api", "ui")}
    assert trees["api"] != trees["ui"]
    for handle, key, mine, theirs in (("be", "api", "api.py", "ui.js"),
                                      ("fe", "ui", "ui.js", "api.py")):  # fmt: skip
        told = scripts.told(handle)
        listed = [e["name"] for e in told["list"]["entries"]]
        assert listed == ["README.md", mine], (handle, told["list"])
        assert sorted(told["glob"]["paths"]) == ["README.md", mine], (handle, told["glob"])
        ls = told["ls"]
        assert (ls["exit_code"], ls["sandboxed"]) == (0, True), ls
        assert ls["output"].split() == [".git", "README.md", mine], (handle, ls["output"])
        assert (trees[key] / mine).is_file() and not (trees[key] / theirs).exists()
    # The project's workspace shows neither: nothing reaches it until a person merges.
    assert sorted(p.name for p in repo.iterdir()) == [".git", "README.md"]
    assert git(repo, "status", "--porcelain") == ""


# -- 3. a workspace that is not a git repository ----------------------------------------------

HOLD = "date +%s.%N > a.start && sleep 2 && date +%s.%N > a.end"


async def test_a_non_git_workspace_says_serial_and_its_writers_take_turns(
    room: Room, scripts: Scripts
) -> None:
    detail = room.get(f"/api/projects/{room.project}")["project"]["workspace"]
    assert (detail["git"], detail["mode"], detail["reason_code"]) == (
        False, "serial", "not_a_repository",
    )  # fmt: skip
    assert "not a git repository" in detail["reason"]
    folder = Path(detail["path"])
    asked: dict[str, float | bool] = {}

    def write_while_held(body: dict[str, Any]) -> Reply:
        # Asked while be's command holds the writer lock (it has begun and not ended).
        deadline = time.monotonic() + 15
        while not (folder / "a.start").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        asked.update(at=time.time(), held=not (folder / "a.end").exists())
        return calls(("w", "fs_write", {"path": "b.txt", "content": "fe 写的\n"}))

    for handle, key, steps in (
        ("be", "api", [calls(("hold", "shell", {"command": HOLD}))]),
        ("fe", "ui", [write_while_held]),
    ):
        agent(room, handle)
        scripts.push(handle, start(key), *steps, openai_text("写好了"))
    plan(room, ("api", "be"), ("ui", "fe"))
    await eventually(lambda: agent_replies(room, "be") and agent_replies(room, "fe"), timeout=30)

    assert scripts.told("be")["hold"]["exit_code"] == 0
    assert scripts.told("be")["hold"]["cwd_mode"] == "serial"
    assert scripts.told("fe")["w"]["ok"] is True
    assert asked["held"] is True, "fe asked to write after be's command had ended"
    written = (folder / "b.txt").stat().st_mtime
    # fe's write waited for be's command to end: after a.end, well after it was asked for.
    assert written >= (folder / "a.end").stat().st_mtime
    assert written - float(asked["at"]) > 1.0
    notices = [m["body"] for m in room.messages() if m["kind"] == "system"]
    serial = [n for n in notices if "一次只允许一个写入者" in n]
    assert len(serial) == 1 and "not a git repository" in serial[0]
    assert [t["attempt"] for t in map(lambda k: task(room, k), ("api", "ui"))] == [None, None]


# -- 4. commands that try to get out ----------------------------------------------------------


BOMB = "bomb() { bomb | bomb & }; bomb; sleep 30"  # the forks go on while it sleeps
LOOP = "while :; do :; done"


@pytest.mark.slow
@pytest.mark.timeout(90)
async def test_commands_that_try_to_escape_fail_or_are_killed_and_the_server_stays_up(
    room: Room, scripts: Scripts, tmp_path: Path, listener: tuple[int, list[int]]
) -> None:
    git_workspace(room, tmp_path)
    patch_settings(room, {"limits": {"command_timeout_secs": 3}})
    # Secrets next to the worktrees (inside the data folder) and elsewhere on the host.
    beside = room.server.data / "worktrees" / str(room.project)
    beside.mkdir(parents=True)
    (beside / "x").write_text("SECRET-BESIDE\n")
    (tmp_path / "host.txt").write_text("SECRET-HOST\n")
    port, accepted = listener
    connect = f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), 2)\""
    tries = {
        "up": "cat ../x",
        "link": "ln -s ../x up && cat up",
        "shadowlink": "ln -s /etc/shadow s && cat s",
        "shadow": "cat /etc/shadow",
        "host": f"cat {tmp_path / 'host.txt'}",
        "data": "ls -A ../../..",
        "net": connect,
        "bomb": BOMB,
        "loop": LOOP,
    }
    agent(room, "be")
    scripts.push(
        "be",
        start("api"),
        calls(*((key, "shell", {"command": command}) for key, command in tries.items())),
        openai_text("都试过了"),
    )
    plan(room, ("api", "be"))
    await eventually(lambda: agent_replies(room, "be"), timeout=60)
    told = scripts.told("be")
    assert all(told[key]["sandboxed"] is True for key in tries), told
    for key in ("up", "link", "shadowlink", "shadow", "host"):
        result = told[key]
        assert result["exit_code"] not in (0, None), (key, result)
        assert "No such file" in result["output"] and "SECRET" not in result["output"], key
    assert "room.sqlite" not in told["data"]["output"]  # the data folder is hidden
    assert told["net"]["exit_code"] == 1 and accepted == []
    for key in ("bomb", "loop"):
        result = told[key]
        assert (result["killed"], result["exit_code"]) == ("timeout", None), (key, result)
        assert result["duration_secs"] < 3 + 2.5, (key, result)
    assert "Cannot fork" in told["bomb"]["output"]  # the process limit stopped the forks
    assert not running("bomb()") and not running(LOOP)  # nothing of them is left behind

    # The server stays up: it answers people, and the agent works again.
    server_answers(room)
    scripts.push("be", calls(("echo", "shell", {"command": "echo 还在"})), openai_text("还在"))
    room.say("@be 还在吗")
    await eventually(lambda: len(agent_replies(room, "be")) == 2, timeout=20)
    assert scripts.told("be")["echo"]["output"] == "还在\n"


# -- 5. purge --------------------------------------------------------------------------------


async def test_a_purge_keeps_the_worktrees_and_their_branches(
    room: Room, scripts: Scripts, tmp_path: Path
) -> None:
    repo = git_workspace(room, tmp_path)
    agent(room, "be")
    scripts.push(
        "be",
        start("api"),
        calls(("w", "fs_write", {"path": "draft.py", "content": "未提交的草稿\n"})),
        openai_text("先写到这里"),
    )
    plan(room, ("api", "be"))
    await eventually(lambda: agent_replies(room, "be"), timeout=30)
    attempt = task(room, "api")["attempt"]
    worktree, branch = Path(attempt["path"]), attempt["branch"]
    assert scripts.told("be")["w"]["ok"] is True
    base = f"/api/projects/{room.project}"
    await eventually(lambda: not room.get(f"{base}/members/{room.members['be']['id']}")["running"])

    room.post(f"{base}/lifecycle", {"op": "trash"})
    preview = room.get(f"{base}/cleanup-preview")
    [keep] = [k for k in preview["keep"] if k["what"] == "worktrees"]
    assert [w["branch"] for w in keep["worktrees"]] == [branch]
    result = room.post(f"{base}/purge", {"confirm_name": "演示项目", "confirmed": True})
    assert result["state"] == "purged", result

    # The project is gone; the member's unmerged work is not.
    assert room.server.request("GET", base, headers=room.owner.headers)[0] == 404
    assert (worktree / "draft.py").read_text() == "未提交的草稿\n"
    assert git(worktree, "rev-parse", "--abbrev-ref", "HEAD") == branch
    assert git(repo, "branch", "--list", branch, "--format=%(refname:short)") == branch
    assert str(worktree) in git(repo, "worktree", "list", "--porcelain")
    assert sorted(p.name for p in repo.iterdir()) == [".git", "README.md"]


# -- 6. bad input through the tools -----------------------------------------------------------


async def test_bad_input_gets_structured_errors_and_nothing_is_lost(
    room: Room, scripts: Scripts, tmp_path: Path
) -> None:
    repo = git_workspace(room, tmp_path)
    (repo / "keep.txt").write_text("原样保留\n")
    gbk = "中文说明".encode("gbk")
    (repo / "gbk.txt").write_bytes(gbk)
    (repo / os.fsdecode(b"name-\xff.txt")).write_bytes(b"odd\n")  # a name that is not UTF-8
    git(repo, "add", "--all")
    git(repo, "-c", "user.name=Owner", "-c", "user.email=owner@example.com",
        "commit", "-q", "-m", "files")  # fmt: skip
    agent(room, "be")
    scripts.push(
        "be",
        start("api"),
        calls(
            ("nul", "fs_write", {"path": "keep\u0000.txt", "content": "x"}),
            ("nulread", "fs_read", {"path": "keep.txt\u0000../../x"}),
            ("big", "fs_write", {"path": "keep.txt", "content": "x" * (10 * 1024 * 1024)}),
            ("gbk", "fs_read", {"path": "gbk.txt"}),
            ("gbkedit", "fs_edit", {"path": "gbk.txt", "old": "中文", "new": "英文"}),
            ("sur", "fs_write", {"path": "\udcff.txt", "content": "半个代理对 \ud800"}),
            ("nulcmd", "shell", {"command": "cat keep.txt\u0000; rm keep.txt"}),
            ("read", "fs_read", {"path": "keep.txt"}),
            ("list", "fs_list", {}),
            ("glob", "fs_glob", {"pattern": "*"}),
            ("search", "fs_search", {"pattern": "odd|保留"}),
            ("ls", "shell", {"command": "ls"}),
        ),
        openai_text("这些输入都被拒绝了"),
    )
    plan(room, ("api", "be"))
    await eventually(lambda: agent_replies(room, "be"), timeout=40)
    told = scripts.told("be")
    nul, nulread, big = told["nul"], told["nulread"], told["big"]
    assert (nul["error"], nul["details"]["path"]) == ("bad_path", "keep\u0000.txt")
    assert nul["details"]["hint"] and nulread["error"] == "bad_path"
    assert (big["error"], big["details"]["size_bytes"], big["details"]["limit_bytes"]) == (
        "content_too_large", 10 * 1024 * 1024, 1024 * 1024,
    )  # fmt: skip
    for key in ("gbk", "gbkedit"):
        assert (told[key]["error"], told[key]["details"]["offset"]) == ("not_utf8", 0), key
        assert "iconv" in told[key]["details"]["hint"]
    assert told["nulcmd"]["error"] == "bad_arguments"
    # Lone surrogates in the model's arguments (no text can hold them) arrive as U+FFFD: the
    # model is told what was written, and the turn goes on.
    assert (told["sur"]["ok"], told["sur"]["path"]) == (True, "\ufffd.txt"), told["sur"]
    assert (worktree_of(room) / "\ufffd.txt").read_text() == "半个代理对 \ufffd"
    # Nothing was lost: the model read the file as it was, and so does the disk.
    assert told["read"]["text"] == "原样保留\n"
    worktree = worktree_of(room)
    assert (worktree / "keep.txt").read_text() == "原样保留\n"
    assert (worktree / "gbk.txt").read_bytes() == gbk
    # No half-written or temporary file: only the one the model was told about.
    assert git(worktree, "status", "--porcelain") == '?? "\\357\\277\\275.txt"'
    # A file name that is not UTF-8 is listed, found and searched with its odd byte escaped.
    odd = "name-\\xff.txt"
    names = ["README.md", "gbk.txt", "keep.txt", odd, "\ufffd.txt"]
    assert [e["name"] for e in told["list"]["entries"]] == names
    assert told["glob"]["paths"] == names
    assert sorted((h["path"], h["text"]) for h in told["search"]["hits"]) == [
        ("keep.txt", "原样保留"), (odd, "odd"),
    ]  # fmt: skip
    assert told["ls"]["exit_code"] == 0 and "keep.txt" in told["ls"]["output"]


# -- 7. a folder swapped under a reader -------------------------------------------------------

SWAP_ROUND_READS = 100
SWAP_RACED_ROUNDS = 3  # rounds read while the swapper ran: a path-opening server leaks in these
SWAP_MAX_ROUNDS = 9  # a turn's tool calls are capped at 1000
# Swaps ``sub`` (a folder) with ``alt`` (a symlink to the data folder) until told to stop, and
# writes how many swaps it has made to swap.count every 16: the test reads it around each round
# of reads to know the swaps happened while the server was reading.
SWAP = (
    'python3 -c "import ctypes, os, time\n'
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "count = os.open('swap.count', os.O_WRONLY | os.O_CREAT, 0o644)\n"
    "end = time.monotonic() + 100\n"
    "swaps = 0\n"
    "while not os.path.exists('swap.stop') and time.monotonic() < end:\n"
    "    assert libc.renameat2(-100, b'sub', -100, b'alt', 2) == 0, ctypes.get_errno()\n"
    "    swaps += 1\n"
    "    if swaps % 16 == 0:\n"
    "        os.pwrite(count, b'%20d' % swaps, 0)\n\""
)
INSIDE = '{"inside": true}\n'


def side(read: dict[str, Any]) -> str:
    """Which side of the swap a read met: ``inside`` (the workspace's file), ``outside`` (any
    other text) or its refusal's code."""
    if not read.get("ok"):
        return str(read["error"])
    return "inside" if read["text"] == INSIDE else "outside"


@pytest.mark.timeout(150)
async def test_a_folder_swapped_by_one_agent_never_sends_anothers_read_outside(
    room: Room, scripts: Scripts
) -> None:
    """Issue 24, item 2, as found: one agent's ``shell`` swaps a folder of the shared workspace
    with a link to the server's data folder (``renameat2(RENAME_EXCHANGE)``) while a read-only
    agent reads a file through that folder. Read tools take no writer lock, so serial mode does
    not keep them apart; every read must give the workspace's file or a refusal.

    Whether swaps land during the reads is up to the scheduler (under load the swapper can sit
    still through a whole batch), so the reader measures it: it reads in rounds, takes the
    swapper's count before a round is handed out and after its results are back, and goes on
    until it has had :data:`SWAP_RACED_ROUNDS` rounds read while the count moved and has met
    both sides of the swap (the workspace's file and a refusal). A server that resolves the
    path and then opens it by name reads the data folder's file in such rounds (checked by
    breaking ``files.read`` that way: 2 to 153 of 300 reads leaked)."""
    folder = Path(room.get(f"/api/projects/{room.project}")["project"]["workspace"]["path"])
    data = room.server.data.resolve()
    secret = (data / "boot-report.json").read_text()
    (folder / "sub").mkdir()
    (folder / "sub" / "boot-report.json").write_text(INSIDE)
    (folder / "alt").symlink_to(data, target_is_directory=True)
    patch_settings(
        room, {"limits": {"tool_calls_per_turn": SWAP_ROUND_READS * SWAP_MAX_ROUNDS + 10}}
    )

    def swapped() -> int:
        try:
            return int((folder / "swap.count").read_text() or 0)
        except FileNotFoundError:
            return 0

    swaps: list[int] = []  # the swaps made during each round of reads
    reads: list[dict[str, Any]] = []  # every read's result, once the reading is over
    counted = [0]  # the swapper's count when the last round was handed out

    def read_while_swapping(body: dict[str, Any]) -> Reply:
        if reads:
            return openai_text("好的。")  # a later turn: the reading is over
        if swaps:
            swaps[-1] = swapped() - counted[0]
        else:
            wait_until(swapped, timeout=60)  # the swapper is under way
        told = results_in(body)
        done = [told[f"r{i}"] for i in range(SWAP_ROUND_READS * len(swaps))]
        met = {side(r) for r in done} - {"outside"}
        raced = sum(1 for n in swaps if n > 0)
        if len(swaps) == SWAP_MAX_ROUNDS or (raced >= SWAP_RACED_ROUNDS and len(met) >= 2):
            reads.extend(done)
            (folder / "swap.stop").touch()
            return openai_text("读完了")
        first = SWAP_ROUND_READS * len(swaps)
        counted[0] = swapped()
        swaps.append(0)
        # each call its own end_line: the same call three times would trip the repetition brake
        return calls(*[
            (f"r{i}", "fs_read", {"path": "sub/boot-report.json", "end_line": i + 1})
            for i in range(first, first + SWAP_ROUND_READS)
        ])  # fmt: skip

    agent(room, "be")
    agent(room, "doc", "docs")
    scripts.push("be", start("api"), calls(("swap", "shell", {"command": SWAP})),
                 openai_text("换完了"))  # fmt: skip
    scripts.push("doc", start("ui"), *[read_while_swapping] * (SWAP_MAX_ROUNDS + 1))
    plan(room, ("api", "be"), ("ui", "doc"))
    await eventually(lambda: agent_replies(room, "be") and agent_replies(room, "doc"), timeout=120)

    swap = scripts.told("be")["swap"]
    assert (swap["exit_code"], swap["sandboxed"]) == (0, True), swap
    inside = [r for r in reads if side(r) == "inside"]
    outside = [r for r in reads if side(r) == "outside"]
    refused = [side(r) for r in reads if not r.get("ok")]
    leaked = sum(1 for r in outside if r["text"] and secret.startswith(r["text"]))
    summary = (
        f"{len(outside)} outside ({leaked} the data folder's boot-report.json), "
        f"{len(inside)} inside, refused: {len(refused)} {set(refused)}; swaps in each round "
        f"of {SWAP_ROUND_READS} reads: {swaps}"
    )
    assert outside == [], summary
    assert set(refused) <= {"outside_workspace", "path_missing"}, summary
    raced = sum(1 for n in swaps if n > 0)
    assert raced >= SWAP_RACED_ROUNDS and inside and refused, summary  # the swaps raced the reads


# -- 8. a brake holds the loop, not the team (issue 28, item 1) ------------------------------


def last_input(body: dict[str, Any]) -> str:
    return str(body["messages"][-1]["content"])


@pytest.mark.timeout(120)
async def test_a_brake_holds_the_loop_and_the_work_it_interrupted_resumes_when_cleared(
    room: Room, scripts: Scripts
) -> None:
    """A chatty lead answers an engineer's progress reports with the same line twice: the
    repetition brake holds the two of them, not the other engineer, who finishes its task while
    the brake stands. The held engineer's running turn stops at its next step, recorded braked
    with a notice naming it and its task; once a person clears the brake that turn's prompt is
    dispatched once more and the engineer finishes from its checkpoint. Short
    acknowledgements said again and again ("收到。", "收到") trip nothing."""
    base = f"/api/projects/{room.project}"
    folder = Path(room.get(base)["project"]["workspace"]["path"])
    agent(room, "be")
    agent(room, "fe", "frontend")
    room.route("lead")
    be_waits = threading.Event()  # be asked for its next step while the lead answers again
    progress: list[int] = []
    again = "@be 请继续，做完再汇报。"

    def lead(body: dict[str, Any]) -> Reply:
        said = last_input(body)
        if "你好" in said:
            return openai_text("收到。" if "一" in said else "收到")
        if "进度" in said:
            progress.append(1)
            if len(progress) == 2:
                assert be_waits.wait(30)
            return openai_text(again)
        return openai_text("好的。")

    scripts.push("lead", *[lead] * 20)

    # Acknowledgements repeated: no brake.
    def lead_replies(count: int) -> bool:
        return len(agent_replies(room, "lead")) >= count

    for count, word in enumerate(("一", "二", "三"), start=1):
        room.say(f"@lead 你好{word}")
        await eventually(functools.partial(lead_replies, count), timeout=20)
    assert [r["body"] for r in agent_replies(room, "lead")] == ["收到。", "收到", "收到"]
    assert room.get(f"{base}/brake")["brake"]["tripped"] is None

    def brake() -> dict[str, Any]:
        return dict(room.get(f"{base}/brake")["brake"])

    def lead_said_again() -> bool:
        return any(r["body"] == again for r in agent_replies(room, "lead"))

    def second_report(body: dict[str, Any]) -> Reply:
        wait_until(lead_said_again, timeout=30)
        return calls(("p2", "room_send", {"text": "@lead 进度二：接口写了一半"}))

    def write_while_braking(body: dict[str, Any]) -> Reply:
        be_waits.set()
        wait_until(lambda: brake()["tripped"], timeout=30)
        return calls(("w", "fs_write", {"path": "api.txt", "content": "接口的前一半\n"}))

    def resume(body: dict[str, Any]) -> Reply:
        context = "\n".join(str(m["content"]) for m in body["messages"])
        assert "被刹车" in context and "api.txt" in context, context[-2000:]
        return calls(("submit", "room_task_update", {
            "task": "api", "action": "submit", "summary": "接口写完了", "artifacts": ["api.txt"],
        }))  # fmt: skip

    scripts.push(
        "be",
        start("api"),
        calls(("p1", "room_send", {"text": "@lead 进度一：开始写接口"})),
        second_report,
        write_while_braking,
        resume,
        openai_text("api 做完了"),
    )

    def fe_writes(body: dict[str, Any]) -> Reply:
        wait_until(lambda: brake()["tripped"], timeout=30)  # works on while the brake stands
        return calls(("w", "fs_write", {"path": "ui.txt", "content": "界面\n"}))

    fe_submits = {
        "task": "ui",
        "action": "submit",
        "summary": "界面写完了",
        "artifacts": ["ui.txt"],
    }
    scripts.push(
        "fe",
        start("ui"),
        fe_writes,
        calls(("submit", "room_task_update", fe_submits)),
        openai_text("ui 做完了，请验收"),
    )
    plan(room, ("api", "be"), ("ui", "fe"))

    # The loop is held — the lead and be — and said so; fe is not.
    held = await eventually(lambda: (b := brake())["tripped"] and b, timeout=40)
    assert held["tripped"] == "repetition"
    assert sorted(m["handle"] for m in held["held_members"]) == ["be", "lead"]
    notices = [m["body"] for m in room.messages() if m["kind"] == "system"]
    [tripped] = [n for n in notices if "重复制动" in n]
    assert "@lead" in tripped and "@be" in tripped and "@fe" not in tripped
    assert "其他成员照常工作" in tripped

    # fe finishes its task while the brake stands.
    await eventually(lambda: agent_replies(room, "fe"), timeout=30)
    assert [r["body"] for r in agent_replies(room, "fe")] == ["ui 做完了，请验收"]
    assert task(room, "ui")["state"] == "in_review"
    assert scripts.told("fe")["submit"]["ok"] is True
    assert brake()["tripped"] == "repetition"

    # be's running turn stopped at its next step: braked, named with its task.
    stopped = await eventually(
        lambda: [m["body"] for m in room.messages() if "制动打断了 @be" in m["body"]], timeout=30
    )
    assert "api" in stopped[0]
    assert (folder / "api.txt").read_text() == "接口的前一半\n"  # its step ran, then it stopped
    assert task(room, "api")["state"] == "in_progress"
    with room.db() as conn:
        be_turns = conn.execute(
            "SELECT state FROM turns WHERE member_id = ? ORDER BY id", (room.members["be"]["id"],)
        ).fetchall()
    assert [t[0] for t in be_turns] == ["braked"]
    asked = len(scripts.seen["be"])
    await anyio.sleep(1.0)
    assert len(scripts.seen["be"]) == asked  # held: nothing dispatched to it

    # A person clears the brake: be continues from its checkpoint and finishes, once.
    room.post(f"{base}/brake/clear", {})

    def be_said() -> list[str]:
        return [r["body"] for r in agent_replies(room, "be")]

    await eventually(lambda: "api 做完了" in be_said(), timeout=30)
    assert be_said() == ["@lead 进度一：开始写接口", "@lead 进度二：接口写了一半", "api 做完了"]
    assert scripts.told("be")["submit"]["ok"] is True
    assert task(room, "api")["state"] == "in_review"
    cleared = [m["body"] for m in room.messages() if "制动已由人类解除" in m["body"]]
    assert len(cleared) == 1 and "@be" in cleared[0]
    await anyio.sleep(1.0)
    with room.db() as conn:
        be_turns = conn.execute(
            "SELECT state, brake_resume FROM turns WHERE member_id = ? ORDER BY id",
            (room.members["be"]["id"],),
        ).fetchall()
        resent = conn.execute(
            "SELECT count(*) FROM reconciliations WHERE reason LIKE 'the brake that stopped%'"
        ).fetchone()[0]
    assert [tuple(t) for t in be_turns] == [("braked", 2), ("completed", 0)]
    assert resent >= 1  # the prompt it took in, dispatched once more and recorded so
    assert not scripts.errors
