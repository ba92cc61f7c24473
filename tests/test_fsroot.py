"""The descriptor-relative resolver (room.infra.fsroot): what a symlink may and may not lead to,
loops, files in the way, magic links, and that no descriptor is left open."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from room.errors import WorkspacePathError
from room.infra import fsroot
from room.infra.fsroot import Root, open_root


class Refused(WorkspacePathError):
    code = "test_refusal"

    def __init__(self, code: str, path: str, hint: str) -> None:
        super().__init__(code, path, hint, code)


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "src" / "pkg").mkdir(parents=True)
    (root / "src" / "app.py").write_text("app\n")
    (root / "src" / "pkg" / "util.py").write_text("util\n")
    (root / "README.md").write_text("# demo\n")
    (tmp_path / "secret.txt").write_text("secret\n")
    (tmp_path / "outdir").mkdir()
    (tmp_path / "outdir" / "app.py").write_text("outside\n")
    return root


@pytest.fixture
def root(ws: Path) -> Iterator[Root]:
    with open_root(ws.resolve(), given=str(ws)) as opened:
        yield opened


def read(root: Root, path: str) -> tuple[str, bytes]:
    """(real path, content) of a file, through the resolver."""
    with root.open(path.split("/"), kind="file", raw=path, error=Refused) as found:
        return "/".join(found.real), os.read(found.fd, 1000)


def refusal(call: object) -> str:
    assert callable(call)
    with pytest.raises(Refused) as caught:
        call()
    return caught.value.code


# -- symlinks that stay inside are followed ---------------------------------------------------


def test_relative_links_inside_are_followed_to_their_real_path(ws: Path, root: Root) -> None:
    (ws / "src" / "pkg" / "up").symlink_to("../app.py")
    (ws / "current").symlink_to("src", target_is_directory=True)
    (ws / "src" / "pkg" / "back").symlink_to("../../src/./pkg", target_is_directory=True)
    assert read(root, "src/pkg/up") == ("src/app.py", b"app\n")
    assert read(root, "current/pkg/util.py") == ("src/pkg/util.py", b"util\n")
    assert read(root, "src/pkg/back/back/util.py") == ("src/pkg/util.py", b"util\n")


def test_absolute_links_are_followed_only_under_the_roots_own_path(
    ws: Path, root: Root, tmp_path: Path
) -> None:
    (ws / "abs").symlink_to(ws.resolve() / "src" / "app.py")
    (ws / "absdir").symlink_to(ws.resolve() / "src", target_is_directory=True)
    assert read(root, "abs") == ("src/app.py", b"app\n")
    assert read(root, "absdir/pkg/util.py") == ("src/pkg/util.py", b"util\n")
    # the same folder spelled another way: through the name the caller gave it …
    alias = tmp_path / "alias"
    alias.symlink_to(ws, target_is_directory=True)
    (ws / "via-given").symlink_to(alias / "src" / "app.py")
    with open_root(ws.resolve(), given=str(alias)) as by_alias:
        assert read(by_alias, "via-given") == ("src/app.py", b"app\n")
    # … but not through an alias the walk cannot vouch for, nor out of it again with '..'
    assert refusal(lambda: read(root, "via-given")) == "outside_workspace"
    (ws / "climb").symlink_to(f"{ws.resolve()}/../secret.txt")
    assert refusal(lambda: read(root, "climb")) == "outside_workspace"


@pytest.mark.parametrize(
    ("target", "path"),
    [
        ("../secret.txt", "link"),  # relative, straight out
        ("src/../../secret.txt", "link"),  # '..' that climbs out after going down
        ("../ws/../secret.txt", "link"),  # out, back in, out again
        ("{tmp}/secret.txt", "link"),  # absolute, outside
        ("{tmp}/outdir", "link/app.py"),  # a folder outside, on the way
        ("/proc/self/root/etc/passwd", "link"),  # magic links are never reached
        ("/proc/self/cwd", "link/README.md"),
        ("/", "link/etc/passwd"),
    ],
)
def test_links_leading_outside_are_refused(
    ws: Path, root: Root, tmp_path: Path, target: str, path: str
) -> None:
    (ws / "link").symlink_to(target.format(tmp=tmp_path))
    assert refusal(lambda: read(root, path)) == "outside_workspace"
    assert refusal(lambda: root.locate(path.split("/"), kind="any", raw=path, error=Refused)) == (
        "outside_workspace"
    )


def test_a_link_back_into_the_workspace_by_its_parent_is_refused(ws: Path, root: Root) -> None:
    # '../ws/src' would come back inside; the walk never goes above the root to find out
    (ws / "roundabout").symlink_to("../ws/src", target_is_directory=True)
    assert refusal(lambda: read(root, "roundabout/app.py")) == "outside_workspace"


# -- loops, files in the way, odd files --------------------------------------------------------


def test_symlink_loops_and_long_chains_are_refused(ws: Path, root: Root) -> None:
    (ws / "a").symlink_to("b")
    (ws / "b").symlink_to("a")
    (ws / "self").symlink_to("self/x", target_is_directory=True)
    for path in ("a", "self/y"):
        with pytest.raises(Refused) as caught:
            read(root, path)
        assert caught.value.code == "path_missing"
        assert "loop" in caught.value.details["hint"]
    hops = fsroot.MAX_SYMLINK_HOPS
    for i in range(hops + 1):  # chain{i} -> chain{i+1} ... -> README.md
        (ws / f"chain{i}").symlink_to(f"chain{i + 1}" if i < hops else "README.md")
    assert read(root, "chain1") == ("README.md", b"# demo\n")  # exactly MAX_SYMLINK_HOPS links
    assert refusal(lambda: read(root, "chain0")) == "path_missing"  # one more


def test_a_file_in_the_middle_of_a_path_is_not_a_folder(ws: Path, root: Root) -> None:
    assert refusal(lambda: read(root, "README.md/x")) == "not_a_directory"
    with pytest.raises(Refused) as caught:
        root.open(["README.md"], kind="dir", raw="README.md", error=Refused)
    assert (
        caught.value.code == "not_a_directory" and "Name a folder" in caught.value.details["hint"]
    )
    assert refusal(lambda: read(root, "src")) == "not_a_file"
    (ws / "dotlink").symlink_to("src/.", target_is_directory=True)
    assert refusal(lambda: read(root, "dotlink")) == "not_a_file"  # a target ending on a folder
    assert refusal(lambda: read(root, "missing/x")) == "path_missing"


def test_fifos_are_refused_without_being_opened(ws: Path, root: Root) -> None:
    os.mkfifo(ws / "pipe")
    # A writer opening a FIFO waits until someone opens it for reading: were the resolver to
    # open it (even without blocking), the writer would go on.
    writer = threading.Thread(target=lambda: os.close(os.open(ws / "pipe", os.O_WRONLY)))
    writer.start()
    try:
        time.sleep(0.05)
        assert refusal(lambda: read(root, "pipe")) == "not_a_file"
        assert refusal(lambda: root.open(["pipe"], kind="any", raw="pipe", error=Refused)) == (
            "not_a_file"
        )
        time.sleep(0.05)
        assert writer.is_alive()  # still waiting for a reader: the resolver never was one
    finally:
        os.close(os.open(ws / "pipe", os.O_RDONLY | os.O_NONBLOCK))
        writer.join(timeout=5)
    assert not writer.is_alive()  # the test's own open released it: the check can tell


# -- folders, missing tails, creation -----------------------------------------------------------


def test_the_root_itself_is_handed_out_as_a_copy(root: Root) -> None:
    with root.open([], kind="dir", raw=".", error=Refused) as found:
        assert found.fd != root.fd and found.real == () and found.is_dir
    assert sorted(os.listdir(root.fd)) == ["README.md", "src"]  # still open


def test_locate_appends_a_missing_tail_and_follows_dangling_links_inside(
    ws: Path, root: Root, tmp_path: Path
) -> None:
    (ws / "later").symlink_to("src/not-yet", target_is_directory=True)
    (ws / "gone").symlink_to(tmp_path / "not-yet", target_is_directory=True)
    assert root.locate(["later", "a", "b.txt"], kind="any", raw="x", error=Refused) == (
        "src",
        "not-yet",
        "a",
        "b.txt",
    )
    assert root.locate(["current.py"], kind="file", raw="x", error=Refused) == ("current.py",)
    assert refusal(lambda: root.locate(["gone", "x"], kind="any", raw="x", error=Refused)) == (
        "outside_workspace"
    )
    assert not (tmp_path / "not-yet").exists()


def test_folders_are_made_inside_along_links_and_never_outside(
    ws: Path, root: Root, tmp_path: Path
) -> None:
    (ws / "later").symlink_to("src/not-yet", target_is_directory=True)
    with root.folder(["later", "a", "b"], create=True, raw="x", error=Refused) as made:
        assert made.real == ("src", "not-yet", "a", "b") and made.is_dir
    assert (ws / "src" / "not-yet" / "a" / "b").is_dir()
    (ws / "gone").symlink_to(tmp_path / "outdir", target_is_directory=True)
    assert refusal(lambda: root.folder(["gone", "new"], create=True, raw="x", error=Refused)) == (
        "outside_workspace"
    )
    assert sorted(p.name for p in (tmp_path / "outdir").iterdir()) == ["app.py"]
    assert refusal(lambda: root.folder(["nope", "x"], create=False, raw="x", error=Refused)) == (
        "path_missing"
    )


def test_open_root_refuses_a_component_that_became_a_symlink(ws: Path, tmp_path: Path) -> None:
    real = ws.resolve()
    moved = tmp_path / "moved"
    ws.rename(moved)
    ws.symlink_to(moved, target_is_directory=True)  # what was resolved is now a link
    with pytest.raises(OSError):
        open_root(real)
    with pytest.raises(ValueError):
        open_root(Path("relative"))


def test_no_descriptor_is_left_open(ws: Path, root: Root, tmp_path: Path) -> None:
    (ws / "loop").symlink_to("loop")
    (ws / "out").symlink_to(tmp_path / "outdir", target_is_directory=True)
    (ws / "inside").symlink_to("src", target_is_directory=True)

    def once() -> None:
        for path in ("src/app.py", "inside/pkg/util.py", "loop", "out/app.py", "README.md/x"):
            try:
                read(root, path)
            except Refused:
                pass
        root.open(["src", "pkg"], kind="dir", raw="x", error=Refused).close()
        root.locate(["inside", "new", "x"], kind="any", raw="x", error=Refused)

    once()  # anything lazily opened once is open now
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(50):
        once()
    assert len(os.listdir("/proc/self/fd")) == before


def test_a_root_without_links_refuses_every_symlink(ws: Path) -> None:
    # a research file reference: its folder is the root and the file itself the whole scope
    (ws / "sibling").symlink_to("README.md")
    (ws / "current").symlink_to("src", target_is_directory=True)
    with open_root(ws.resolve(), links=False) as strict:
        assert read(strict, "src/app.py") == ("src/app.py", b"app\n")
        assert refusal(lambda: read(strict, "sibling")) == "outside_workspace"
        assert refusal(lambda: read(strict, "current/app.py")) == "outside_workspace"
