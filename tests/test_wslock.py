"""The lock a node holds on a shared workspace (room.infra.wslock; docs/cluster.md, "A shared
workspaces folder"): exclusive between processes, never waited for, counted within one node,
let go with the last user or the holder's death, and never taken through a symlink."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from room.actions.tenancy import default_workspace
from room.actions.workspaces import check_workspace
from room.errors import BadRequestError
from room.infra.wslock import WorkspaceLocks, lock_path, try_lock, unlock
from room.settings import Settings

pytestmark = pytest.mark.timeout(60)

PROBE = (
    "import sys; from pathlib import Path; from room.infra.wslock import try_lock; "
    "print('free' if try_lock(Path(sys.argv[1])) is not None else 'held')"
)


def other_process_finds(path: Path) -> str:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(path)], capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def test_another_process_finds_the_lock_held_until_the_last_user_leaves(tmp_path: Path) -> None:
    locks = WorkspaceLocks(tmp_path / "shared")
    path = lock_path(tmp_path / "shared", 7)
    assert other_process_finds(path) == "free"  # made on demand, taken and let go again
    assert locks.enter(7) and locks.enter(7)  # two turns of project 7 on this node
    assert other_process_finds(path) == "held"
    locks.leave(7)
    assert other_process_finds(path) == "held"  # one turn still runs here
    locks.leave(7)
    assert other_process_finds(path) == "free"
    assert locks.holding() == []


def test_a_node_finds_another_holding_it_and_waits_for_nothing(tmp_path: Path) -> None:
    path = lock_path(tmp_path, 3)
    held = try_lock(path)
    assert held is not None
    holder = subprocess.Popen(  # a second node: its own open of the file, refused at once
        [sys.executable, "-c", PROBE, str(path)], stdout=subprocess.PIPE, text=True
    )
    out, _ = holder.communicate(timeout=30)
    assert out.strip() == "held"
    assert not WorkspaceLocks(tmp_path).enter(3)  # another descriptor: refused here too
    unlock(held)
    assert other_process_finds(path) == "free"


def test_a_symlink_in_place_of_the_lock_file_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_text("not a lock")
    (tmp_path / "shared").mkdir()
    lock_path(tmp_path / "shared", 5).symlink_to(target)
    with pytest.raises(OSError):
        WorkspaceLocks(tmp_path / "shared").enter(5)
    assert target.read_text() == "not a lock"


@pytest.mark.parametrize("where", ["data", "inside", "around"])
def test_a_shared_workspaces_folder_stays_apart_from_the_data_folder(
    tmp_path: Path, where: str
) -> None:
    data = tmp_path / "srv" / "data"
    shared = {"data": data, "inside": data / "ws", "around": tmp_path / "srv"}[where]
    with pytest.raises(ValidationError, match="workspaces_dir"):
        Settings(data=data, workspaces_dir=shared)


def test_defaults_are_made_in_the_shared_folder_and_a_lock_is_no_workspace(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    settings = Settings(data=tmp_path / "data", workspaces_dir=shared)
    assert default_workspace(settings, 12) == shared.resolve() / "12"
    assert (
        default_workspace(Settings(data=tmp_path / "data"), 12)
        == (tmp_path / "data" / "workspaces" / "12").resolve()
    )
    assert WorkspaceLocks(shared.resolve()).enter(12)
    with pytest.raises(BadRequestError) as refused:  # the lock file cannot be a workspace
        check_workspace(settings, str(lock_path(shared.resolve(), 12)))
    assert refused.value.code == "workspace_not_a_folder"
