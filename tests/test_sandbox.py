"""room.infra.sandbox with the real bubblewrap, prlimit and processes: what a command can and cannot
do."""

from __future__ import annotations

import asyncio
import hashlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from room.errors import SandboxPathError, SandboxUnavailableError
from room.infra.sandbox import Sandbox, bwrap_argv, probe
from room.infra.supervise import GROUP_PREFIX, CommandLimits, sweep_orphans
from tests.support import processes

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(30), pytest.mark.slow]  # real processes

needs_bwrap = pytest.mark.skipif(
    shutil.which("bwrap") is None,
    reason="bubblewrap (bwrap) is not installed; scripts/test installs it (Debian: bubblewrap)",
)
HOST = Path("/")
QUICK = CommandLimits(timeout_secs=10, cpu_secs=5)


@pytest.fixture(scope="module")
def sandbox() -> Sandbox:
    found = probe()
    if shutil.which("bwrap") is not None:
        assert found.info.isolated, found.info.reason  # installed but refused: that is a failure
    return found


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    path = tmp_path / "ws"
    path.mkdir()
    return path


def unique_sleep() -> str:
    """A sleep length no other process on the machine uses, to find it in /proc."""
    return f"{100 + secrets.randbelow(10**6) / 10**7:.7f}"


@needs_bwrap
async def test_echo_and_exit_codes(sandbox: Sandbox, ws: Path) -> None:
    done = await sandbox.run("echo hello; echo oops >&2; exit 3", cwd=ws, limits=QUICK)
    assert done.sandboxed is True
    assert done.exit_code == 3
    assert done.output == "hello\noops\n"
    assert done.killed is None and not done.timed_out
    assert done.output_sha256 == hashlib.sha256(b"hello\noops\n").hexdigest()
    ok = await sandbox.run("true", cwd=ws, limits=QUICK)
    assert ok.exit_code == 0 and ok.ok


@needs_bwrap
async def test_python_runs(sandbox: Sandbox, ws: Path) -> None:
    done = await sandbox.run("python3 -c 'print(6 * 7)'", cwd=ws, limits=QUICK)
    assert (done.exit_code, done.output) == (0, "42\n")


@needs_bwrap
async def test_writes_only_inside_the_working_folder(sandbox: Sandbox, ws: Path) -> None:
    done = await sandbox.run(
        "echo made > inside.txt && mkdir sub && echo x > sub/y; "
        "echo no > ../outside.txt; echo no > /etc/evil; echo no > /root/evil; echo no > /usr/evil",
        cwd=ws,
        limits=QUICK,
    )
    assert (ws / "inside.txt").read_text() == "made\n"
    assert (ws / "sub" / "y").read_text() == "x\n"
    assert not (ws.parent / "outside.txt").exists()
    assert not (HOST / "etc" / "evil").exists() and not (HOST / "root" / "evil").exists()
    assert done.output.count("Read-only file system") >= 3, done.output


@needs_bwrap
async def test_parent_folder_is_read_only_outside_tmp(sandbox: Sandbox) -> None:
    # (under /tmp: test_writes_next_to_a_workspace_under_tmp_fail_where_the_model_sees_it)
    base = Path(tempfile.mkdtemp(prefix="room-sandbox-test-", dir="/var/tmp"))
    try:
        (base / "ws").mkdir()
        done = await sandbox.run("echo no > ../outside.txt", cwd=base / "ws", limits=QUICK)
        assert done.exit_code != 0
        assert "Read-only file system" in done.output
        assert not (base / "outside.txt").exists()
    finally:
        shutil.rmtree(base)


@needs_bwrap
async def test_writes_next_to_a_workspace_under_tmp_fail_where_the_model_sees_it(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    """A workspace under /tmp has its parents made in the sandbox's private /tmp: a write there
    used to "succeed" (exit 0) into a copy that vanished with the command."""
    assert tmp_path.is_relative_to("/tmp")
    ws = tmp_path / "deep" / "ws"
    ws.mkdir(parents=True)
    done = await sandbox.run(
        "echo no > ../sibling.txt; echo a=$?; mkdir ../../made; echo b=$?;"
        " echo yes > /tmp/scratch.txt; echo c=$?; echo in > inside.txt; echo d=$?",
        cwd=ws,
        limits=QUICK,
    )
    codes = dict(
        line.split("=") for line in done.output.splitlines() if line[:2] in ("a=", "b=", "c=", "d=")
    )
    assert codes == {"a": "2", "b": "1", "c": "0", "d": "0"}, done.output
    assert done.output.count("Read-only file system") == 2, done.output
    assert not (ws.parent / "sibling.txt").exists() and not (tmp_path / "made").exists()
    assert (ws / "inside.txt").read_text() == "in\n"


@needs_bwrap
async def test_scratch_space_is_capped_and_dev_is_read_only(sandbox: Sandbox, ws: Path) -> None:
    """/tmp and /dev/shm live in the host's memory: each is capped, and /dev cannot hold files."""
    small = sandbox.configured(tmp_bytes=4 * 1024**2)
    done = await small.run(
        "head -c 3000000 /dev/zero > /tmp/a; echo a=$?;"
        " head -c 3000000 /dev/zero > /tmp/b; echo b=$?;"
        " head -c 6000000 /dev/zero > /dev/shm/c; echo c=$?;"
        " echo x > /dev/made; echo d=$?; echo ok > /dev/null; echo e=$?",
        cwd=ws,
        limits=QUICK,
    )
    codes = dict(line.split("=") for line in done.output.splitlines() if "=" in line[:2])
    assert codes == {"a": "0", "b": "1", "c": "1", "d": "2", "e": "0"}, done.output
    assert done.output.count("No space left on device") == 2, done.output
    assert "Read-only file system" in done.output


@needs_bwrap
async def test_a_command_is_nobody_when_the_server_is_root(sandbox: Sandbox, ws: Path) -> None:
    done = await sandbox.run("id -u; id -g; echo x > mine.txt", cwd=ws, limits=QUICK)
    expected = "65534" if os.geteuid() == 0 else str(os.geteuid())
    assert done.output.split()[:2] == [
        expected,
        expected if os.geteuid() == 0 else str(os.getegid()),
    ]
    # what it writes in its workspace belongs to the server outside (it can be cleaned up)
    assert (ws / "mine.txt").stat().st_uid == os.geteuid()


@needs_bwrap
async def test_secrets_are_not_readable_even_through_a_symlink(sandbox: Sandbox, ws: Path) -> None:
    assert os.geteuid() != 0 or os.access("/etc/shadow", os.R_OK)  # the host's root can read it
    (ws / "link").symlink_to("/etc/shadow")
    done = await sandbox.run(
        "cat /etc/shadow; cat link; ls /root/.ssh; echo done", cwd=ws, limits=QUICK
    )
    assert done.output.endswith("done\n")
    assert done.output.count("No such file or directory") == 3, done.output
    assert "root:" not in done.output


@needs_bwrap
async def test_hidden_data_folder_is_not_visible(sandbox: Sandbox, ws: Path) -> None:
    data = ws / ".room-data"
    data.mkdir()
    (data / "room.db").write_text("secret rows")
    (ws / "token.txt").write_text("sk-secret")
    sibling = ws.parent / "data"
    sibling.mkdir()
    (sibling / "room.db").write_text("secret rows")
    hiding = sandbox.configured(hidden=[data, ws / "token.txt", sibling])
    done = await hiding.run(
        "ls -A .room-data; cat token.txt; cat ../data/room.db; echo visible > notes.txt",
        cwd=ws,
        limits=QUICK,
    )
    assert "secret rows" not in done.output and "sk-secret" not in done.output, done.output
    assert "\nroom.db" not in "\n" + done.output  # `ls -A .room-data` lists nothing
    assert (ws / "notes.txt").read_text() == "visible\n"
    assert (data / "room.db").read_text() == "secret rows"  # covered, not touched
    shown = await sandbox.run("cat token.txt", cwd=ws, limits=QUICK)
    assert shown.output == "sk-secret"  # the same file without `hidden`: the test can fail


@needs_bwrap
async def test_network_only_when_asked(sandbox: Sandbox, ws: Path) -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    probe_cmd = (
        f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=3);"
        " print('connected')\""
    )
    try:
        off = await sandbox.run(probe_cmd, cwd=ws, network=False, limits=QUICK)
        on = await sandbox.run(probe_cmd, cwd=ws, network=True, limits=QUICK)
    finally:
        listener.close()
    assert off.exit_code != 0 and "ConnectionRefusedError" in off.output, off.output
    assert on.exit_code == 0 and on.output == "connected\n", on.output


@needs_bwrap
async def test_process_limit_stops_a_fork_loop(sandbox: Sandbox, ws: Path) -> None:
    mark = unique_sleep()
    program = (
        "import os, time\n"
        "n = 0\n"
        "try:\n"
        "    while n < 1000:\n"
        "        if os.fork() == 0:\n"
        f"            os.execv('/bin/sleep', ['sleep', '{mark}'])\n"
        "        n += 1\n"
        "except OSError as exc:\n"
        "    print('refused after', n, exc.errno)\n"
    )
    (ws / "forks.py").write_text(program)
    limits = CommandLimits(timeout_secs=10, cpu_secs=5, processes=16)
    done = await sandbox.run("python3 forks.py", cwd=ws, limits=limits)
    assert done.output.startswith("refused after "), done.output
    assert int(done.output.split()[2]) < 16
    assert processes.running(mark) == []  # its sleeping children went with it


@needs_bwrap
async def test_fork_bomb_is_contained(sandbox: Sandbox, ws: Path) -> None:
    name = f"bomb{secrets.token_hex(4)}"  # forked shells keep this in their command line
    limits = CommandLimits(timeout_secs=5, cpu_secs=5, processes=32)
    bomb = asyncio.ensure_future(
        # The main shell stays a second: `wait` could return once its own job ended, before
        # the bomb (still forking in the background) had reached the limit.
        sandbox.run(f"{name}() {{ {name} | {name} & }}; {name}; sleep 1", cwd=ws, limits=limits)
    )
    most = 0
    while not bomb.done():
        most = max(most, len(processes.running(name)))
        await asyncio.sleep(0.005)
    done = await bomb
    assert "Cannot fork" in done.output  # it hit the limit (dash gives up when a fork fails)
    assert most <= 32
    assert done.duration_secs < 5 + 2
    assert processes.running(name) == []
    fine = await asyncio.create_subprocess_exec("/bin/echo", "ok", stdout=asyncio.subprocess.PIPE)
    out, _ = await fine.communicate()
    assert out == b"ok\n"  # the server can still fork


@needs_bwrap
async def test_busy_loop_is_stopped_by_the_cpu_limit(sandbox: Sandbox, ws: Path) -> None:
    limits = CommandLimits(timeout_secs=20, cpu_secs=1)
    done = await sandbox.run("while true; do :; done", cwd=ws, limits=limits)
    assert done.killed == "SIGXCPU" and done.exit_code is None and not done.timed_out
    assert done.duration_secs < 10


@needs_bwrap
async def test_timeout_kills_the_command(sandbox: Sandbox, ws: Path) -> None:
    mark = unique_sleep()
    limits = CommandLimits(timeout_secs=0.5)
    done = await sandbox.run(f"echo started; sleep {mark}", cwd=ws, limits=limits)
    assert done.timed_out and done.killed == "timeout" and done.exit_code is None
    assert done.output == "started\n"
    assert done.duration_secs < 0.5 + 2
    assert processes.running(mark) == []


async def check_cancel(sandbox: Sandbox, ws: Path, *, allow_unsandboxed: bool = False) -> None:
    mark = unique_sleep()
    cancel = asyncio.Event()
    command = f"sleep {mark} & (sleep {mark} &) ; sh -c 'sleep {mark}' & sleep {mark}"
    running = asyncio.ensure_future(
        sandbox.run(command, cwd=ws, cancel=cancel, allow_unsandboxed=allow_unsandboxed)
    )
    for _ in range(100):
        if len(processes.running(mark)) >= 4:
            break
        await asyncio.sleep(0.05)
    assert len(processes.running(mark)) >= 4  # the command and its (grand)children are running
    asked = time.monotonic()
    cancel.set()
    done = await running
    assert time.monotonic() - asked < 2
    assert done.killed == "stopped" and done.exit_code is None and not done.timed_out
    assert processes.running(mark) == []


@needs_bwrap
async def test_cancel_stops_the_whole_command_within_two_seconds(
    sandbox: Sandbox, ws: Path
) -> None:
    await check_cancel(sandbox, ws)


@needs_bwrap
async def test_output_keeps_head_and_tail(sandbox: Sandbox, ws: Path) -> None:
    limits = CommandLimits(timeout_secs=10, output_bytes=1000)
    done = await sandbox.run("echo FIRST; seq 1 20000; echo LAST", cwd=ws, limits=limits)
    whole = b"FIRST\n" + b"".join(b"%d\n" % i for i in range(1, 20001)) + b"LAST\n"
    assert done.output_bytes == len(whole)
    assert done.output_sha256 == hashlib.sha256(whole).hexdigest()
    assert done.output.startswith("FIRST\n1\n2\n") and done.output.endswith("19999\n20000\nLAST\n")
    assert f"…[truncated {len(whole) - 1000} bytes]…" in done.output
    assert done.truncated_bytes == len(whole) - 1000
    assert done.tail.endswith("20000\nLAST\n") and len(done.tail) <= 2048


@needs_bwrap
async def test_environment_is_not_inherited(
    sandbox: Sandbox, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-must-not-leak")
    done = await sandbox.run("env", cwd=ws, limits=QUICK, env={"PROJECT": "demo"})
    names = {line.split("=", 1)[0] for line in done.output.splitlines()}
    assert "sk-test-must-not-leak" not in done.output
    assert "OPENAI_API_KEY" not in names
    assert "PROJECT=demo" in done.output.splitlines()
    assert {"PATH", "HOME", "LANG", "TERM"} <= names


@needs_bwrap
async def test_bad_working_folder_is_refused(sandbox: Sandbox, tmp_path: Path) -> None:
    with pytest.raises(SandboxPathError) as caught:
        await sandbox.run("true", cwd=tmp_path / "missing")
    assert caught.value.code == "sandbox_bad_path"


def test_layout_never_binds_the_whole_root(ws: Path) -> None:
    off = bwrap_argv("bwrap", ["true"], cwd=ws, writable=(), network=False)
    on = bwrap_argv("bwrap", ["true"], cwd=ws, writable=(), network=True)
    pairs = list(zip(off, off[1:], off[2:], strict=False))
    assert ("--ro-bind", "/", "/") not in pairs and ("--bind", "/", "/") not in pairs
    assert ("--bind", str(ws), str(ws)) in pairs
    assert "--unshare-all" in off and "--share-net" not in off and "--share-net" in on
    assert not any(arg.endswith(("shadow", "sudoers", "npmrc", "ssh")) for arg in off)


@pytest.fixture
def no_bwrap() -> Sandbox:
    return probe(bwrap="/nonexistent/bwrap")


async def test_unsandboxed_is_refused_unless_allowed(no_bwrap: Sandbox, ws: Path) -> None:
    assert no_bwrap.info.isolated is False and "bwrap" in no_bwrap.info.reason
    with pytest.raises(SandboxUnavailableError) as caught:
        await no_bwrap.run("touch ran", cwd=ws, limits=QUICK)
    assert caught.value.code == "sandbox_unavailable"
    assert not (ws / "ran").exists()
    done = await no_bwrap.run("touch ran; echo hi", cwd=ws, limits=QUICK, allow_unsandboxed=True)
    assert done.sandboxed is False and done.exit_code == 0 and done.output == "hi\n"
    assert (ws / "ran").exists()


async def test_unsandboxed_still_scrubs_env_and_limits(
    no_bwrap: Sandbox, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-must-not-leak")
    done = await no_bwrap.run("env; ulimit -t", cwd=ws, limits=QUICK, allow_unsandboxed=True)
    assert "OPENAI_API_KEY" not in done.output
    assert done.output.splitlines()[-1] == "5"  # the CPU limit is set


async def test_unsandboxed_cancel_stops_the_whole_group(no_bwrap: Sandbox, ws: Path) -> None:
    await check_cancel(no_bwrap, ws, allow_unsandboxed=True)


@pytest.fixture(scope="module", autouse=True)
def no_leftover_cgroups() -> Iterator[None]:
    yield
    parent = probe().info.pids_cgroup
    if parent is not None:
        mine = list(parent.glob(f"room-sandbox-{os.getpid()}-*"))
        assert mine == [], "a command's cgroup was left behind"


@needs_bwrap
async def test_a_protected_git_folder_stays_read_only_inside_the_working_folder(
    sandbox: Sandbox, ws: Path
) -> None:
    """Whoever writes a repository's .git decides what the server's own git runs (a filter, a
    merge driver): a command may write its working folder but not its .git."""
    (ws / ".git").mkdir()
    (ws / ".git" / "config").write_text("[core]\n")
    done = await sandbox.run(
        "echo ok > note.txt; echo '[filter \"x\"]' >> .git/config; mv .git .g; ls -a",
        cwd=ws,
        protected=[ws / ".git"],
    )
    assert (ws / "note.txt").read_text() == "ok\n"  # the folder itself is writable
    assert (ws / ".git" / "config").read_text() == "[core]\n"
    assert not (ws / ".g").exists() and ".git" in done.output


def dead_pid() -> int:
    """A pid that no process has now (a child that ran and was reaped)."""
    probe_child = subprocess.Popen(["true"])
    probe_child.wait()
    return probe_child.pid


def test_leftovers_of_a_dead_server_are_killed_and_their_groups_removed(tmp_path: Path) -> None:
    """What a server killed mid-command left running (bubblewrap's parent-death signal misses a
    sandbox a few milliseconds old) is killed at the next start; a live server's group is not
    touched."""
    parent = probe().info.pids_cgroup
    if parent is None:
        pytest.skip("no pids cgroup to make command groups in")
    marker = unique_sleep()
    dead = parent / f"{GROUP_PREFIX}{dead_pid()}-{secrets.token_hex(6)}"
    live = parent / f"{GROUP_PREFIX}{os.getpid()}-{secrets.token_hex(6)}"
    empty = parent / f"{GROUP_PREFIX}{dead_pid()}-{secrets.token_hex(6)}"
    for group in (dead, live, empty):
        group.mkdir()
    left = subprocess.Popen(["sleep", marker])
    kept = subprocess.Popen(["sleep", marker])
    try:
        (dead / "cgroup.procs").write_text(str(left.pid))
        (live / "cgroup.procs").write_text(str(kept.pid))
        swept = sweep_orphans(parent)
        assert left.wait(timeout=5) == -signal.SIGKILL
        # Another server starting meanwhile may sweep the same groups: what counts is that they
        # are gone, whoever removed them (and that this sweep killed what it found).
        assert swept.processes >= 1
        assert not dead.exists() and not empty.exists()
        assert live.exists() and kept.poll() is None  # a running server's command lives on
    finally:
        for proc in (left, kept):
            proc.kill()
            proc.wait()
        for group in (dead, live, empty):
            for _ in range(100):
                try:
                    group.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.01)
    assert processes.running(marker) == []
