"""The private PostgreSQL of the tests (tests/support/postgres.py): it starts, gives each test an
empty database of its own, fails loudly without its binaries and leaves no process behind."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest

from tests.support.postgres import (
    PostgresCluster,
    PostgresMissingError,
    find_bin_dir,
)

ROOT = Path(__file__).resolve().parent.parent


def test_each_test_gets_an_empty_database_of_its_own(
    pg_cluster: PostgresCluster, pg_dsn: str
) -> None:
    with psycopg.connect(pg_dsn) as conn:
        assert conn.execute("SHOW server_encoding").fetchone() == ("UTF8",)
        assert conn.execute("SHOW lc_collate").fetchone() == ("C",)
        tables = conn.execute(
            "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'"
        ).fetchone()
        assert tables == (0,)
        conn.execute("CREATE TABLE mine (id bigint PRIMARY KEY)")
    other = pg_cluster.create_database()
    try:
        with psycopg.connect(pg_cluster.dsn(other)) as conn:
            found = conn.execute("SELECT to_regclass('public.mine') IS NULL").fetchone()
            assert found == (True,)
    finally:
        pg_cluster.drop_database(other)
    assert pg_cluster.dsn("x").startswith("postgresql://room@127.0.0.1:")
    assert int(pg_cluster.version.split(".")[0]) >= 13


def test_the_server_does_not_run_as_root(pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn) as conn:  # the backend lives as long as the connection
        row = conn.execute("SELECT pg_backend_pid()").fetchone()
        assert row is not None
        uid = os.stat(f"/proc/{row[0]}").st_uid
    assert uid != 0


def test_missing_binaries_fail_with_the_package_to_install(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("ROOM_PG_BIN", raising=False)
    with pytest.raises(PostgresMissingError, match="install Debian's package `postgresql`"):
        find_bin_dir(debian_root=tmp_path / "nowhere")


def test_stop_leaves_no_process_and_no_folder() -> None:
    cluster = PostgresCluster(find_bin_dir()).start()
    folder, pid = cluster.folder, cluster.pid
    assert folder is not None and pid is not None and cluster.running
    started = time.perf_counter()
    cluster.stop()
    assert time.perf_counter() - started < 5
    assert not folder.exists()
    assert not Path(f"/proc/{pid}").exists()


_DIE_HARD = """
import os, signal, sys
from tests.support.postgres import PostgresCluster, find_bin_dir
cluster = PostgresCluster(find_bin_dir()).start()
print(cluster.pid, cluster.folder, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.slow  # a second interpreter and two clusters: about 5 s
def test_a_killed_test_process_takes_its_server_with_it() -> None:
    done = subprocess.run(
        [sys.executable, "-c", _DIE_HARD], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == -9, done.stderr
    pid_text, folder = done.stdout.split()
    deadline = time.monotonic() + 10
    while Path(f"/proc/{pid_text}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not Path(f"/proc/{pid_text}").exists(), "the postmaster outlived its test process"
    # The next cluster's start (this one, or another xdist worker's meanwhile) sweeps the
    # folder the dead process left.
    PostgresCluster(find_bin_dir()).start().stop()
    assert not Path(folder).exists()
