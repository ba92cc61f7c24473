"""The disk budget of the folder an agent writes in (issue 24, item 5), through the real server,
its sandbox and a scripted model: a command that fills the folder is stopped, a write past the
budget is refused with a clear error, cleaning up works, and the server stays up. And
:func:`room.infra.diskuse.disk_usage` itself."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from room.infra.diskuse import disk_usage
from tests.support.live_room import Room, agent_replies, eventually
from tests.support.llm_servers import OpenAIServer, openai_text
from tests.support.work import (
    Scripts,
    agent,
    calls,
    patch_settings,
    results_in,
    server_answers,
)

MIB = 1024 * 1024
pytestmark = [pytest.mark.timeout(90), pytest.mark.usefixtures("hermetic_git", "workspace_roots")]


@pytest.fixture
def llm(scripted_llm: OpenAIServer) -> OpenAIServer:
    """The ``room`` fixture's model server answers from ``scripts``."""
    return scripted_llm


def test_usage_counts_blocks_once_per_inode_and_never_follows_links(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.bin").write_bytes(os.urandom(300_000))
    os.link(tmp_path / "sub" / "a.bin", tmp_path / "hard.bin")  # the same blocks again
    with open(tmp_path / "sparse.bin", "wb") as sparse:
        sparse.truncate(50 * MIB)  # takes (almost) nothing
    outside = tmp_path.parent / f"{tmp_path.name}-outside"
    outside.mkdir()
    (outside / "big.bin").write_bytes(os.urandom(2 * MIB))
    (tmp_path / "link").symlink_to(outside)
    used = disk_usage(tmp_path)
    assert used.complete
    assert 300_000 <= used.bytes < 400_000, used
    assert used.files == 5  # sub, a.bin, hard.bin (counted once), sparse.bin, link
    assert disk_usage(tmp_path / "nowhere").bytes == 0


# The scratch /tmp is in memory: capped (sandbox_tmp_bytes, 256 MiB by default).
RAM = "head -c 300000000 /dev/zero > /tmp/big; echo rc=$?; wc -c < /tmp/big"


def fill(rounds: int) -> str:
    return (
        f"for i in $(seq {rounds}); do head -c 700000 /dev/urandom > f$i.bin && echo f$i.bin; sleep 0.5; done;"
        " echo filled"
    )


@pytest.mark.anyio
async def test_a_full_folder_stops_the_command_refuses_writes_and_can_be_cleaned(
    room: Room,
    scripts: Scripts,
) -> None:
    folder = Path(room.get(f"/api/projects/{room.project}")["project"]["workspace"]["path"])
    agent(room, "be")
    # With the default budget, the scratch /tmp's own cap is what stops a big write there.
    scripts.push("be", calls(("ram", "shell", {"command": RAM})), openai_text("满了"))
    room.say("@be 先把 /tmp 写满")
    await eventually(lambda: agent_replies(room, "be"), timeout=60)
    ram = scripts.told("be")["ram"]
    assert "No space left on device" in ram["output"] and "rc=1" in ram["output"], ram
    assert int(ram["output"].split()[-1]) <= 256 * MIB

    patch_settings(room, {"limits": {"workspace_disk_mib": 2}})
    scripts.push(
        "be",
        calls(("fill", "shell", {"command": fill(12)})),
        calls(
            ("write", "fs_write", {"path": "more.txt", "content": "x" * 1000}),
            ("clean", "shell", {"command": "rm -f f*.bin && echo cleaned"}),
        ),
        calls(("again", "fs_write", {"path": "more.txt", "content": "x" * 1000})),
        calls(("big", "shell", {"command": "head -c 3000000 /dev/zero > one.bin; echo rc=$?"})),
        openai_text("好了"),
    )
    room.say("@be 把工作区写满试试")
    await eventually(lambda: len(agent_replies(room, "be")) >= 2, timeout=60)
    told: dict[str, Any] = {}
    for request in scripts.seen["be"]:
        told.update(results_in(request))

    filled = told["fill"]
    assert filled["killed"] == "disk_budget" and "filled" not in filled["output"], filled
    assert filled["disk"]["budget_bytes"] == 2 * MIB and filled["disk"]["used_bytes"] > 2 * MIB
    assert "disk budget" in filled["disk"]["message"]
    made = filled["output"].split()
    assert 3 <= len(made) < 12, made  # stopped once past 2 MiB, well before the loop's end

    refused = told["write"]
    assert (refused["ok"], refused["error"]) == (False, "disk_budget_exceeded"), refused
    assert refused["details"]["budget_bytes"] == 2 * MIB
    assert "磁盘上限" in refused["message"]

    cleaned = told["clean"]
    assert (cleaned["exit_code"], cleaned["output"]) == (0, "cleaned\n"), cleaned
    again = told["again"]
    assert (again["ok"], again["created"]) == (True, True), again  # the refused one wrote nothing

    # One file can be no larger than what is left of the budget: the writer is stopped at it.
    big = told["big"]
    assert "rc=153" in big["output"] or "File size limit exceeded" in big["output"], big
    assert (folder / "one.bin").stat().st_size <= 2 * MIB
    server_answers(room)
