"""Artifact evidence: workspace-relative paths resolved by the server, and their fingerprints."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from room.infra.evidence import (
    EVIDENCE_CODES,
    EvidenceError,
    clean_relative,
    inspect_artifact,
    verify_artifact,
)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("print('hi')\n", encoding="utf-8")
    (tmp_path / "secret.txt").write_text("outside the workspace\n", encoding="utf-8")
    return root


def refused(workspace: Path | str | None, raw: str) -> str:
    with pytest.raises(EvidenceError) as caught:
        inspect_artifact(workspace, raw)
    error = caught.value
    assert error.http_status == 400 and error.code in EVIDENCE_CODES
    assert error.details["hint"].endswith(")"), error.details  # says what to do, in both languages
    return error.code


def test_a_file_inside_is_fingerprinted(workspace: Path) -> None:
    found = inspect_artifact(workspace, "./src//app.py")
    data = (workspace / "src" / "app.py").read_bytes()
    assert found.path == "src/app.py" and found.real_path == "src/app.py"
    assert found.size == len(data)
    assert found.sha256 == hashlib.sha256(data).hexdigest()


@pytest.mark.parametrize(
    ("raw", "code"),
    [
        ("../secret.txt", "path_escapes"),
        ("src/../../secret.txt", "path_escapes"),
        ("src/../app.py", "path_escapes"),  # even a '..' that comes back inside: one spelling
        ("/etc/passwd", "absolute_path"),
        ("C:/Windows/win.ini", "absolute_path"),
        ("//server/share/x", "absolute_path"),
        ("src\\app.py", "bad_path"),
        ("", "bad_path"),
        ("   ", "bad_path"),
        (".", "bad_path"),
        ("src/a\x00b", "bad_path"),
        ("x" * 2000, "bad_path"),
        ("src/missing.py", "artifact_missing"),
        ("src", "not_a_file"),
    ],
)
def test_paths_are_refused_before_anything_is_read(workspace: Path, raw: str, code: str) -> None:
    assert refused(workspace, raw) == code


def test_the_absolute_path_of_a_file_inside_is_still_refused(workspace: Path) -> None:
    assert refused(workspace, str(workspace / "src" / "app.py")) == "absolute_path"


def test_a_symlink_pointing_outside_is_refused(workspace: Path) -> None:
    (workspace / "link.txt").symlink_to(workspace.parent / "secret.txt")
    (workspace / "outdir").symlink_to(workspace.parent, target_is_directory=True)
    assert refused(workspace, "link.txt") == "outside_workspace"
    assert refused(workspace, "outdir/secret.txt") == "outside_workspace"


def test_a_symlink_inside_resolves_to_its_target(workspace: Path) -> None:
    (workspace / "current").symlink_to(workspace / "src", target_is_directory=True)
    found = inspect_artifact(workspace, "current/app.py")
    assert (found.path, found.real_path) == ("current/app.py", "src/app.py")


def test_a_symlinked_workspace_is_resolved_first(workspace: Path, tmp_path: Path) -> None:
    alias = tmp_path / "alias"
    alias.symlink_to(workspace, target_is_directory=True)
    assert inspect_artifact(alias, "src/app.py").real_path == "src/app.py"


def test_a_fifo_is_not_read(workspace: Path) -> None:
    os.mkfifo(workspace / "pipe")
    assert refused(workspace, "pipe") == "not_a_file"  # reading it would block


def test_a_symlink_loop_is_refused(workspace: Path) -> None:
    (workspace / "a").symlink_to(workspace / "b")
    (workspace / "b").symlink_to(workspace / "a")
    assert refused(workspace, "a") == "artifact_missing"


def test_workspace_must_exist(tmp_path: Path) -> None:
    assert refused(None, "x") == "no_workspace"
    assert refused("", "x") == "no_workspace"
    assert refused(tmp_path / "nope", "x") == "workspace_missing"
    (tmp_path / "file").write_text("x")
    assert refused(tmp_path / "file", "x") == "workspace_missing"


def test_verification_notices_changes(workspace: Path) -> None:
    found = inspect_artifact(workspace, "src/app.py")
    assert verify_artifact(workspace, found.real_path, found.size, found.sha256) == "ok"
    (workspace / "src" / "app.py").write_text("print('changed')\n", encoding="utf-8")
    assert verify_artifact(workspace, found.real_path, found.size, found.sha256) == "changed"
    (workspace / "src" / "app.py").unlink()
    assert verify_artifact(workspace, found.real_path, found.size, found.sha256) == "missing"
    (workspace / "src" / "app.py").symlink_to(workspace.parent / "secret.txt")
    assert verify_artifact(workspace, found.real_path, found.size, found.sha256) == "refused"


segment = st.sampled_from(["a", "b", "src", ".", "..", "x.py", "é", "."])


@given(st.lists(segment, min_size=1, max_size=6))
def test_any_dotdot_component_is_refused_and_the_rest_normalise(parts: list[str]) -> None:
    raw = "/".join(parts)
    if ".." in parts:
        with pytest.raises(EvidenceError) as caught:
            clean_relative(raw)
        assert caught.value.code == "path_escapes"
    elif all(p == "." for p in parts):
        with pytest.raises(EvidenceError):
            clean_relative(raw)
    else:
        cleaned = clean_relative(raw)
        assert cleaned == "/".join(p for p in parts if p != ".")
        assert not cleaned.startswith("/") and ".." not in cleaned.split("/")
