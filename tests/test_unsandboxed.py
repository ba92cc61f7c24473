"""Commands without a sandbox need two people to agree: the server's operator
(``allow_unsandboxed_commands``) and the project's owner (the ``unsandboxed`` setting)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from room.agents.tools import ToolContext, WorkEnv
from room.agents.work_tools import NotIsolatedError, _shell
from room.infra.sandbox import Sandbox, SandboxInfo
from room.store import Tx
from room.store import members as members_store
from room.store import projects as projects_store
from tests.support.inproc import running_app

NO_SANDBOX = Sandbox(SandboxInfo(False, "no bwrap binary", None, "/usr/bin/prlimit", None))


@pytest.mark.parametrize(("operator", "owner"), [(False, True), (True, False), (False, False)])
def test_a_command_without_a_sandbox_is_refused_unless_both_allow_it(
    tmp_path: Path, operator: bool, owner: bool
) -> None:
    with running_app(tmp_path / "data", allow_unsandboxed_commands=operator) as app:

        def setup(conn: sqlite3.Connection, tx: Tx) -> int:
            projects_store.update_settings(conn, 1, {"unsandboxed": owner}, tx.now)
            lead = projects_store.lead_of(conn, 1)
            assert lead is not None
            return lead

        lead_id = app.write(setup, locks=(1,))
        lead = app.call(app.core.db.read, lambda conn: members_store.get(conn, lead_id))
        assert lead is not None
        ctx = ToolContext(app.core, lead, 0, "call-1", {}, WorkEnv(NO_SANDBOX))
        with pytest.raises(NotIsolatedError) as caught:
            app.call(_shell, ctx, {"command": "echo hi"})
        assert caught.value.code == "not_isolated"
        assert "allow_unsandboxed_commands" in caught.value.message
