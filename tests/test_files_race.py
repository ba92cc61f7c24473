"""Issue 24, item 2: the file tools and artifact evidence cannot be raced out of the workspace.

A second process swaps a real folder inside the workspace with a symlink to a folder outside
(``renameat2(RENAME_EXCHANGE)``, atomic, as fast as it can) while the test calls one operation
thousands of times on a path through that folder. The outside folder holds a file of the same
name with a secret in it. Every call must give the inside content or a clean refusal; none may
show the secret, and the writers must leave the outside folder exactly as it was.

The path is ``sub/inner/…`` so the swapped folder is never the last component: ``O_NOFOLLOW``
on the final open alone does not guard it (what the old resolve-then-open code relied on). Each
test also checks that the swap really raced it (some calls refused, some answered from inside),
so a swapper that never ran cannot make it pass.
"""

from __future__ import annotations

import ctypes
import errno
import hashlib
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from room.errors import WorkspacePathError
from room.infra import files
from room.infra.evidence import inspect_artifact, verify_artifact

pytestmark = pytest.mark.slow  # thousands of calls beside a swapping process

CALLS = 2_000
SECRET = b"SECRET server data\nstate: A\n"
INSIDE = b"inside the workspace\nstate: A\n"
RENAME_EXCHANGE = 2
AT_FDCWD = -100
# What a raced call may answer instead of the content: the link leads outside, or the path kept
# changing under the walk (too many looks).
REFUSALS = {"outside_workspace", "path_missing", "artifact_missing"}

SWAPPER = r"""
import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
a, b, stop = os.fsencode(sys.argv[1]), os.fsencode(sys.argv[2]), sys.argv[3]
deadline = time.monotonic() + float(sys.argv[4])
swaps = 0
print("ready", flush=True)
while not os.path.exists(stop) and time.monotonic() < deadline:
    for _ in range(50):
        if libc.renameat2(-100, a, -100, b, 2) != 0:
            print("error", ctypes.get_errno(), flush=True)
            sys.exit(1)
        swaps += 1
print(swaps, flush=True)
"""


@dataclass(frozen=True)
class Race:
    ws: Path
    outside: Path
    tmp: Path


def _exchange(a: Path, b: Path) -> int:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.renameat2(AT_FDCWD, os.fsencode(a), AT_FDCWD, os.fsencode(b), RENAME_EXCHANGE) != 0:
        return ctypes.get_errno()
    return 0


@pytest.fixture(params=["absolute", "relative"])
def race(tmp_path: Path, request: pytest.FixtureRequest) -> Race:
    ws = tmp_path / "ws"
    (ws / "sub" / "inner").mkdir(parents=True)
    (ws / "sub" / "inner" / "boot-report.json").write_bytes(INSIDE)
    (ws / "README.md").write_text("# demo\n")
    outside = tmp_path / "data"
    (outside / "inner").mkdir(parents=True)
    (outside / "inner" / "boot-report.json").write_bytes(SECRET)
    (outside / "inner" / "only-outside.txt").write_bytes(SECRET)
    target = outside if request.param == "absolute" else Path("../data")
    (ws / "alt").symlink_to(target, target_is_directory=True)
    if (code := _exchange(ws / "sub", ws / "alt")) != 0:
        pytest.skip(f"renameat2(RENAME_EXCHANGE) is not available here: {errno.errorcode[code]}")
    assert _exchange(ws / "sub", ws / "alt") == 0  # back: sub is the real folder again
    assert (ws / "sub").is_dir() and not (ws / "sub").is_symlink()
    return Race(ws, outside, tmp_path)


def _outside_state(outside: Path) -> dict[str, tuple[bytes, int, int]]:
    """Every name under the outside folder with its bytes, inode and mtime: a write that went
    through the link shows as a new name, new bytes or a new inode (an atomic replace)."""
    state = {}
    for path in sorted(outside.rglob("*")):
        info = path.lstat()
        body = path.read_bytes() if path.is_file() else b""
        state[str(path.relative_to(outside))] = (body, info.st_ino, info.st_mtime_ns)
    return state


def swapping(race: Race) -> AbstractContextManager[Counter[str]]:
    """Swap ``sub`` and ``alt`` in the workspace beside the body; afterwards
    ``counts["swaps"]`` says how many exchanges were made."""
    return _swapping_pair(race, race.ws / "sub", race.ws / "alt")


@contextmanager
def _swapping_pair(race: Race, a: Path, b: Path) -> Iterator[Counter[str]]:
    stop = race.tmp / "stop"
    counts: Counter[str] = Counter()
    proc = subprocess.Popen(
        [sys.executable, "-c", SWAPPER, str(a), str(b), str(stop), "50"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        time.sleep(0.05)  # let it get going
        yield counts
        stop.touch()
        out, _ = proc.communicate(timeout=10)
        assert proc.returncode == 0, out
        counts["swaps"] = int(out.split()[-1])
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)


Outcome = str  # "inside", "outside", or the code of a refusal


def _refusal(exc: WorkspacePathError) -> Outcome:
    return exc.code


def _read(ws: Path, i: int) -> Outcome:
    text = files.read(ws, "sub/inner/boot-report.json").text.encode()
    return "outside" if b"SECRET" in text else "inside" if text == INSIDE else f"odd:{text!r}"


def _list(ws: Path, i: int) -> Outcome:
    names = [e.name for e in files.list_dir(ws, "sub", depth=2).entries]
    if "inner/only-outside.txt" in names:
        return "outside"
    return "inside" if "inner/boot-report.json" in names else f"odd:{names}"


def _glob(ws: Path, i: int) -> Outcome:
    paths = files.glob(ws, "sub/**").paths
    if any("only-outside" in p for p in paths):
        return "outside"
    return "inside" if paths == ["sub/inner/boot-report.json"] else f"odd:{paths}"


def _search(ws: Path, i: int) -> Outcome:
    result = files.search(ws, "SECRET|inside", path="sub")
    if any("SECRET" in h.text for h in result.hits):
        return "outside"
    texts = [h.text for h in result.hits]
    return "inside" if texts == ["inside the workspace"] else f"odd:{texts}"


def _write(ws: Path, i: int) -> Outcome:
    # alternately into the swapped folder's child, and into folders the write must make
    path = f"sub/inner/w{i % 7}.txt" if i % 2 else f"sub/made{i % 5}/deeper/w.txt"
    files.write(ws, path, f"write {i}\n")
    return "inside"


def _edit(ws: Path, i: int) -> Outcome:
    try:
        files.edit(ws, "sub/inner/boot-report.json", "state: A", "state: B")
    except WorkspacePathError as exc:
        if exc.code != "edit_no_match":
            raise
        files.edit(ws, "sub/inner/boot-report.json", "state: B", "state: A")
    return "inside"


_SECRET_SHA = hashlib.sha256(SECRET).hexdigest()
_INSIDE_SHA = hashlib.sha256(INSIDE).hexdigest()


def _fingerprint(ws: Path, i: int) -> Outcome:
    found = inspect_artifact(ws, "sub/inner/boot-report.json")
    if found.sha256 == _SECRET_SHA:
        return "outside"
    return "inside" if (found.sha256, found.real_path) == (_INSIDE_SHA, "sub/inner/boot-report.json") else f"odd:{found}"  # fmt: skip


def _verify(ws: Path, i: int) -> Outcome:
    # recorded as the outside file: "ok" would mean the outside file was read and matched
    verdict = verify_artifact(ws, "sub/inner/boot-report.json", len(SECRET), _SECRET_SHA)
    return {"ok": "outside", "changed": "inside"}.get(verdict, verdict)


OPERATIONS: dict[str, Callable[[Path, int], Outcome]] = {
    "read": _read,
    "list": _list,
    "glob": _glob,
    "search": _search,
    "write": _write,
    "edit": _edit,
    "fingerprint": _fingerprint,
    "verify": _verify,
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("operation", list(OPERATIONS))
def test_a_folder_swapped_for_a_link_outside_is_never_gone_through(
    race: Race, operation: str
) -> None:
    before = _outside_state(race.outside)
    outcomes: Counter[Outcome] = Counter()
    call = OPERATIONS[operation]
    with swapping(race) as swapper:
        for i in range(CALLS):
            try:
                outcomes[call(race.ws, i)] += 1
            except WorkspacePathError as exc:
                outcomes[_refusal(exc)] += 1
    summary = f"{operation}: {dict(outcomes)} over {swapper['swaps']} swaps"
    assert outcomes["outside"] == 0, summary
    assert _outside_state(race.outside) == before, summary  # nothing made, changed or replaced
    assert sum(outcomes.values()) == CALLS
    # every answer is the inside content or a documented refusal …
    assert set(outcomes) - {"inside"} <= REFUSALS | {"refused", "missing"}, summary
    # … and the swap really raced the calls: both states were met
    assert outcomes["inside"] > 0, summary
    assert CALLS - outcomes["inside"] > 0, summary
    assert swapper["swaps"] > CALLS, summary


# -- a research reference outside the workspace ---------------------------------------------------


def test_a_reference_folder_swapped_after_its_check_is_never_read_through(tmp_path: Path) -> None:
    """A research run reads a ``dir`` reference at the real path bound when it was proposed,
    checked again before each read (``readable_target``). The reference may lie in a folder
    agents write (another project's workspace): one swapping a folder above it for a link to
    the server's data between that check and the read must not redirect the read."""
    from room.agents.research_tools import ReferenceMovedError, _in_root
    from room.rules.research import ScopeRef
    from room.settings import Settings

    data = tmp_path / "server-data"
    (data / "lib").mkdir(parents=True)
    (data / "lib" / "boot-report.json").write_bytes(SECRET)
    shared = tmp_path / "shared"
    (shared / "vendor" / "lib").mkdir(parents=True)
    (shared / "vendor" / "lib" / "boot-report.json").write_bytes(INSIDE)
    (shared / "alt").symlink_to(data, target_is_directory=True)
    settings = Settings(data=data, workspace_roots=(str(tmp_path),))
    real = str((shared / "vendor" / "lib").resolve())
    ref = ScopeRef(7, "dir", real, real=real)
    race = Race(shared / "vendor", data, tmp_path)
    outcomes: Counter[Outcome] = Counter()
    with _swapping_pair(race, shared / "vendor", shared / "alt") as swapper:
        for _ in range(CALLS):
            try:
                text = _in_root(settings, "fs_read", ref, "boot-report.json", {})["text"]
                outcomes["outside" if "SECRET" in text else "inside"] += 1
            except ReferenceMovedError:
                outcomes["moved"] += 1
            except WorkspacePathError as exc:
                outcomes[exc.code] += 1
    summary = f"reference: {dict(outcomes)} over {swapper['swaps']} swaps"
    assert outcomes["outside"] == 0, summary
    assert set(outcomes) <= {"inside", "moved", "workspace_missing", "path_missing"}, summary
    assert outcomes["inside"] > 0 and outcomes["moved"] > 0, summary
