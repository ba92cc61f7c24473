"""Workspace file operations (room.infra.files): real files in tmp_path, every refusal by its
code."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from room.errors import BadRequestError, FileToolError
from room.infra import files
from room.infra.evidence import resolve_inside


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "src" / "pkg").mkdir(parents=True)
    (root / "src" / "app.py").write_text("import os\n\ndef main():\n    return 1\n")
    (root / "src" / "pkg" / "util.py").write_text("def helper():\n    return 2\n")
    (root / "README.md").write_text("# demo\n")
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("def not_me\n")
    (tmp_path / "secret.txt").write_text("def secret\n")
    (tmp_path / "outdir").mkdir()
    return root


def refused(call: Callable[[], Any]) -> FileToolError:
    with pytest.raises(FileToolError) as caught:
        call()
    error = caught.value
    assert isinstance(error, BadRequestError) and error.http_status == 400
    assert error.code in files.FILE_CODES
    assert error.details["hint"].endswith(")"), error.details  # says what to do, in English too
    return error


def snapshot(root: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


# -- paths: the evidence rules, for every operation --------------------------------------------

BAD_PATHS = [
    ("../secret.txt", "path_escapes"),
    ("src/../../secret.txt", "path_escapes"),
    ("/etc/passwd", "absolute_path"),
    ("src/a\x00b.py", "bad_path"),
    ("src\\app.py", "bad_path"),
    ("", "bad_path"),
]
OPERATIONS: dict[str, Callable[[Path, str], Any]] = {
    "read": lambda ws, p: files.read(ws, p),
    "write": lambda ws, p: files.write(ws, p, "x"),
    "edit": lambda ws, p: files.edit(ws, p, "a", "b"),
    "patch": lambda ws, p: files.edit_patch(ws, p, [{"old": "a", "new": "b"}]),
    "list": lambda ws, p: files.list_dir(ws, p),
    "search": lambda ws, p: files.search(ws, "def", path=p),
}


@pytest.mark.parametrize("operation", sorted(OPERATIONS))
@pytest.mark.parametrize(("raw", "code"), BAD_PATHS)
def test_bad_paths_are_refused_by_every_operation(
    ws: Path, operation: str, raw: str, code: str
) -> None:
    before = snapshot(ws.parent)
    assert refused(lambda: OPERATIONS[operation](ws, raw)).code == code
    assert snapshot(ws.parent) == before


def test_symlinks_out_of_the_workspace_are_refused(ws: Path) -> None:
    (ws / "out.txt").symlink_to(ws.parent / "secret.txt")
    (ws / "outdir").symlink_to(ws.parent / "outdir", target_is_directory=True)
    assert refused(lambda: files.read(ws, "out.txt")).code == "outside_workspace"
    assert refused(lambda: files.list_dir(ws, "outdir")).code == "outside_workspace"
    assert refused(lambda: files.search(ws, "def", path="out.txt")).code == "outside_workspace"
    # creating a file under a link that leaves: refused, nothing appears outside
    assert refused(lambda: files.write(ws, "outdir/new.txt", "x")).code == "outside_workspace"
    assert refused(lambda: files.write(ws, "outdir/a/b.txt", "x")).code == "outside_workspace"
    assert list((ws.parent / "outdir").iterdir()) == []
    # writing to the link itself is refused too, and the target is untouched
    assert refused(lambda: files.write(ws, "out.txt", "pwned")).code == "symlink_refused"
    assert refused(lambda: files.edit(ws, "out.txt", "def", "x")).code == "symlink_refused"
    assert (ws.parent / "secret.txt").read_text() == "def secret\n"


def test_a_dangling_link_leading_outside_is_refused_for_new_files(ws: Path) -> None:
    (ws / "gone").symlink_to(ws.parent / "not-yet", target_is_directory=True)
    assert refused(lambda: files.write(ws, "gone/x.txt", "x")).code == "outside_workspace"
    assert not (ws.parent / "not-yet").exists()


def test_a_symlink_inside_is_read_through_but_never_written_through(ws: Path) -> None:
    (ws / "current").symlink_to(ws / "src", target_is_directory=True)
    (ws / "alias.py").symlink_to(ws / "src" / "app.py")
    assert files.read(ws, "current/app.py").text.startswith("import os")
    assert files.read(ws, "alias.py").total_lines == 4
    assert refused(lambda: files.write(ws, "alias.py", "x")).code == "symlink_refused"
    # a folder link inside is a folder inside: the file lands in its target
    assert files.write(ws, "current/new.py", "x = 1\n").created
    assert (ws / "src" / "new.py").read_text() == "x = 1\n"


def test_the_workspace_itself_must_exist(tmp_path: Path) -> None:
    assert refused(lambda: files.read(tmp_path / "nope", "a.txt")).code == "workspace_missing"
    assert refused(lambda: files.list_dir("", ".")).code == "no_workspace"


@pytest.fixture
def ws_with_exit(ws: Path) -> Path:
    (ws / "out").symlink_to(ws.parent, target_is_directory=True)
    return ws


segment = st.sampled_from(["a", "src", "pkg", "app.py", ".", "..", "", "out", "é", "x\x00", "b\\c"])


# The resolver only reads, so one workspace serves every example.
@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(parts=st.lists(segment, min_size=1, max_size=6), lead=st.sampled_from(["", "/", "C:/"]))
def test_the_resolver_returns_a_path_inside_or_a_documented_refusal(
    ws_with_exit: Path, parts: list[str], lead: str
) -> None:
    ws = ws_with_exit
    raw = lead + "/".join(parts)
    root = ws.resolve()
    for must_exist in (True, False):
        try:
            relative, real = resolve_inside(
                ws, raw, must_exist=must_exist, kind="any", error=files._refuse
            )
        except FileToolError as exc:
            assert exc.code in files.FILE_CODES
            continue
        assert real.is_relative_to(root), (raw, real)
        assert ".." not in relative.split("/") and not relative.startswith("/")


# -- list_dir ---------------------------------------------------------------------------------


def test_list_dir_lists_sorted_with_types_and_sizes(ws: Path) -> None:
    (ws / "link").symlink_to(ws / "README.md")
    listing = files.list_dir(ws)
    assert [(e.name, e.type, e.size) for e in listing.entries] == [
        ("README.md", "file", 7),
        ("link", "symlink", None),
        ("src", "dir", None),
    ]  # .git hidden
    assert not listing.truncated
    deep = files.list_dir(ws, "src", depth=2)
    assert [e.name for e in deep.entries] == ["app.py", "pkg", "pkg/util.py"]
    assert deep.to_dict()["entries"][0] == {"name": "app.py", "type": "file", "size": 36}


def test_list_dir_truncates_at_the_limit_and_checks_its_arguments(ws: Path) -> None:
    for i in range(12):
        (ws / f"f{i:02}.txt").write_text("x")
    listing = files.list_dir(ws, limit=5)
    assert len(listing.entries) == 5 and listing.truncated
    assert refused(lambda: files.list_dir(ws, depth=0)).code == "bad_argument"
    assert refused(lambda: files.list_dir(ws, limit=0)).code == "bad_argument"
    assert refused(lambda: files.list_dir(ws, "README.md")).code == "not_a_directory"
    assert refused(lambda: files.list_dir(ws, "nope")).code == "path_missing"


# -- glob and .gitignore ------------------------------------------------------------------------


@pytest.fixture
def ignoring(ws: Path) -> Path:
    (ws / ".gitignore").write_text("*.log\nbuild/\n!keep.log\n")
    (ws / "build").mkdir()
    (ws / "build" / "out.py").write_text("def built(): pass\n")
    (ws / "debug.log").write_text("def logged\n")
    (ws / "keep.log").write_text("def kept\n")
    (ws / "src" / "pkg" / ".gitignore").write_text("generated_*.py\n!keep.log\n*.txt\n")
    (ws / "src" / "pkg" / "generated_a.py").write_text("def generated(): pass\n")
    (ws / "src" / "pkg" / "notes.txt").write_text("def nested_ignored\n")
    (ws / "src" / "notes.txt").write_text("def only_pkg_ignores_txt\n")
    return ws


def test_glob_matches_with_double_star_and_respects_gitignore(ignoring: Path) -> None:
    found = files.glob(ignoring, "**/*.py")
    assert found.paths == ["src/app.py", "src/pkg/util.py"]  # build/ and generated_* ignored
    assert files.glob(ignoring, "*.log").paths == ["keep.log"]  # re-included by '!'
    assert files.glob(ignoring, "src/*.py").paths == ["src/app.py"]
    assert files.glob(ignoring, "**/*.txt").paths == ["src/notes.txt"]  # nested rules, nested only
    assert files.glob(ignoring, "nowhere/**").paths == []
    assert files.glob(ignoring, ".git/**").paths == []
    assert files.search(ignoring, "def", path=".git").hits == []  # not even when named
    assert refused(lambda: files.glob(ignoring, "../*")).code == "path_escapes"


def test_glob_truncates(ws: Path) -> None:
    for i in range(30):
        (ws / f"m{i:02}.md").write_text("x")
    result = files.glob(ws, "*.md", limit=10)
    assert result.truncated and result.paths == sorted(result.paths) and len(result.paths) == 10
    assert result.to_dict()["truncated"] is True


# -- read -------------------------------------------------------------------------------------


def test_read_returns_lines_with_their_range(ws: Path) -> None:
    whole = files.read(ws, "src/app.py")
    assert whole.text == "import os\n\ndef main():\n    return 1\n"
    assert (whole.start_line, whole.end_line, whole.total_lines) == (1, 4, 4)
    assert not whole.truncated and whole.size_bytes == 36
    part = files.read(ws, "src/app.py", start_line=3, end_line=99)
    assert (part.text, part.start_line, part.end_line) == ("def main():\n    return 1\n", 3, 4)
    (ws / "no-newline.txt").write_text("a\nb")
    assert files.read(ws, "no-newline.txt").total_lines == 2


def test_read_cuts_at_max_bytes_after_a_whole_line(ws: Path) -> None:
    (ws / "big.txt").write_text("".join(f"line {i:04}\n" for i in range(1000)))  # 10 bytes each
    cut = files.read(ws, "big.txt", max_bytes=95)
    assert cut.truncated and cut.end_line == 9 and cut.text.count("\n") == 9
    more = files.read(ws, "big.txt", start_line=cut.end_line + 1, max_bytes=95)
    assert more.text.startswith("line 0009\n")
    (ws / "long.txt").write_text("x" * 500)
    assert files.read(ws, "long.txt", max_bytes=100).text == "x" * 100


@pytest.mark.parametrize(
    ("start", "end"), [(0, None), (6, None), (3, 2)], ids=["zero", "past-end", "reversed"]
)
def test_read_refuses_a_bad_range(ws: Path, start: int, end: int | None) -> None:
    error = refused(lambda: files.read(ws, "src/app.py", start_line=start, end_line=end))
    assert error.code == "bad_range" and error.details["total_lines"] == 4


def test_read_refuses_binary_non_utf8_and_oversized_files(ws: Path) -> None:
    (ws / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    (ws / "noise.bin").write_bytes(bytes([1, 2, 3, 0xFF, 4, 5, 6, 7]) * 10)
    (ws / "latin1.txt").write_bytes("café crème\n".encode("latin-1"))
    assert refused(lambda: files.read(ws, "logo.png")).code == "binary_file"
    assert refused(lambda: files.read(ws, "noise.bin")).code == "binary_file"
    error = refused(lambda: files.read(ws, "latin1.txt"))
    assert error.code == "not_utf8" and error.details["offset"] == 3
    assert "UTF-8" in error.details["hint"]
    with (ws / "huge.txt").open("wb") as handle:
        handle.truncate(files.MAX_READ_FILE_BYTES + 1)
    assert refused(lambda: files.read(ws, "huge.txt")).code == "file_too_large"
    assert refused(lambda: files.read(ws, "src")).code == "not_a_file"
    assert refused(lambda: files.read(ws, "missing.py")).code == "path_missing"


def test_a_fifo_is_never_opened(ws: Path) -> None:
    os.mkfifo(ws / "pipe")
    assert refused(lambda: files.read(ws, "pipe")).code == "not_a_file"
    assert refused(lambda: files.write(ws, "pipe", "x")).code == "not_a_file"
    assert files.search(ws, "def").files_searched == 3  # walked past, not read


# -- search -----------------------------------------------------------------------------------


def test_search_finds_lines_and_skips_git_ignored_and_binary(ignoring: Path) -> None:
    (ignoring / "blob.bin").write_bytes(b"def \x00binary")
    (ignoring / "latin1.txt").write_bytes("def café\n".encode("latin-1"))
    result = files.search(ignoring, r"^def \w+")
    assert [(h.path, h.line, h.text) for h in result.hits] == [
        ("keep.log", 1, "def kept"),
        ("src/app.py", 3, "def main():"),
        ("src/notes.txt", 1, "def only_pkg_ignores_txt"),
        ("src/pkg/util.py", 1, "def helper():"),
    ]
    assert result.files_skipped == 2 and not result.truncated and not result.timed_out
    assert result.to_dict()["hits"][0] == {"path": "keep.log", "line": 1, "text": "def kept"}


def test_search_narrows_by_path_and_glob(ignoring: Path) -> None:
    assert [h.path for h in files.search(ignoring, "def", path="src/pkg").hits] == [
        "src/pkg/util.py"
    ]
    assert [h.path for h in files.search(ignoring, "def", glob="*.txt").hits] == ["src/notes.txt"]
    assert [h.path for h in files.search(ignoring, "def", glob="src/pkg/*").hits] == [
        "src/pkg/util.py"
    ]
    # a file named on its own is searched even where .gitignore would skip it
    assert files.search(ignoring, "def", path="debug.log").hits[0].text == "def logged"


def test_search_reports_one_hit_per_line_caps_lines_and_truncates(ws: Path) -> None:
    (ws / "many.txt").write_text("".join(f"hit hit {i}\n" for i in range(50)))
    (ws / "wide.txt").write_text("needle " + "y" * 5000 + "\n")
    result = files.search(ws, "hit", path="many.txt", limit=10)
    assert [h.line for h in result.hits] == list(range(1, 11)) and result.truncated
    wide = files.search(ws, "needle").hits[0]
    assert len(wide.text) == files.MAX_HIT_LINE_CHARS + 1 and wide.text.endswith("…")
    (ws / "crlf.txt").write_bytes(b"one\r\nneedle two\r\n")
    assert [(h.line, h.text) for h in files.search(ws, "two$", path="crlf.txt").hits] == []
    assert files.search(ws, r"two\r?$", path="crlf.txt").hits[0].text == "needle two"


def test_search_skips_files_over_the_size_limit(ws: Path) -> None:
    (ws / "large.txt").write_text("def big\n" * 1000)
    result = files.search(ws, "def big", max_file_bytes=1000)
    assert result.hits == [] and result.files_skipped == 1


def test_search_refuses_a_bad_regex_and_stops_a_runaway_one(ws: Path) -> None:
    assert refused(lambda: files.search(ws, "(unclosed")).code == "bad_regex"
    assert refused(lambda: files.search(ws, "x" * 5000)).code == "bad_regex"
    (ws / "evil.txt").write_text("a" * 5000 + "!\n")
    result = files.search(ws, r"(?:a|aa)+$", path="evil.txt", timeout_secs=0.2)
    assert result.timed_out and result.truncated and result.hits == []


# -- write ------------------------------------------------------------------------------------


def test_write_creates_folders_and_replaces_atomically(ws: Path) -> None:
    made = files.write(ws, "docs/new/guide.md", "# 指南\n")
    assert (made.path, made.bytes_written, made.created) == ("docs/new/guide.md", 9, True)
    assert (ws / "docs" / "new" / "guide.md").read_text() == "# 指南\n"
    (ws / "run.sh").write_text("#!/bin/sh\n")
    (ws / "run.sh").chmod(0o755)
    again = files.write(ws, "run.sh", "#!/bin/sh\necho hi\n")
    assert not again.created and (ws / "run.sh").read_text().endswith("echo hi\n")
    assert stat.S_IMODE((ws / "run.sh").stat().st_mode) == 0o755  # permissions kept
    assert not [p for p in ws.rglob("*.tmp")]  # no temporary file left behind
    assert made.to_dict() == {"path": "docs/new/guide.md", "bytes_written": 9, "created": True}


def test_a_10_mb_write_is_refused_and_nothing_is_written(ws: Path) -> None:
    before = snapshot(ws)
    error = refused(lambda: files.write(ws, "big/blob.txt", "x" * (10 * 1024 * 1024)))
    assert error.code == "content_too_large"
    assert error.details["limit_bytes"] == files.MAX_WRITE_BYTES
    assert str(files.MAX_WRITE_BYTES) in error.details["hint"]
    assert snapshot(ws) == before and not (ws / "big").exists()


def test_write_refuses_folders_and_files_in_the_way(ws: Path) -> None:
    assert refused(lambda: files.write(ws, "src", "x")).code == "is_directory"
    assert refused(lambda: files.write(ws, "README.md/x.txt", "x")).code == "not_a_directory"
    assert refused(lambda: files.write(ws, ".", "x")).code == "bad_path"
    assert (ws / "README.md").read_text() == "# demo\n"


# -- edit -------------------------------------------------------------------------------------


def test_edit_replaces_the_one_occurrence(ws: Path) -> None:
    result = files.edit(ws, "src/app.py", "return 1", "return 42")
    assert (ws / "src" / "app.py").read_text() == "import os\n\ndef main():\n    return 42\n"
    assert result.lines == [4] and result.bytes_written == 37


@pytest.mark.parametrize(("old", "count", "code"), [("nope", 0, "edit_no_match"),
                                                    ("def", 2, "edit_ambiguous")])  # fmt: skip
def test_edit_names_how_often_old_occurs(ws: Path, old: str, count: int, code: str) -> None:
    (ws / "two.py").write_text("def a(): pass\ndef b(): pass\n")
    error = refused(lambda: files.edit(ws, "two.py", old, "x"))
    assert (error.code, error.details["count"]) == (code, count)
    assert f"{count} times" in error.details["hint"]
    assert (ws / "two.py").read_text() == "def a(): pass\ndef b(): pass\n"


def test_edit_refuses_missing_binary_and_empty_old(ws: Path) -> None:
    (ws / "blob.bin").write_bytes(b"a\x00b")
    assert refused(lambda: files.edit(ws, "missing.py", "a", "b")).code == "path_missing"
    assert refused(lambda: files.edit(ws, "nodir/missing.py", "a", "b")).code == "path_missing"
    assert refused(lambda: files.edit(ws, "blob.bin", "a", "b")).code == "binary_file"
    assert refused(lambda: files.edit(ws, "src/app.py", "", "b")).code == "bad_argument"
    assert refused(lambda: files.edit(ws, "src", "a", "b")).code == "is_directory"


def test_edit_refuses_a_result_over_the_limit(ws: Path) -> None:
    error = refused(lambda: files.edit(ws, "src/app.py", "import os", "#" * 2000, max_bytes=1000))
    assert error.code == "content_too_large" and error.details["limit_bytes"] == 1000
    assert (ws / "src" / "app.py").read_text().startswith("import os")


def test_a_patch_applies_its_hunks_in_order(ws: Path) -> None:
    result = files.edit_patch(
        ws,
        "src/app.py",
        [
            {"old": "import os\n", "new": "import os\nimport sys\n"},
            {"old": "return 1", "new": "return sys.argv"},
            {"old": "import sys", "new": "import sys  # argv"},  # sees the first hunk's text
        ],
    )
    assert (ws / "src" / "app.py").read_text() == (
        "import os\nimport sys  # argv\n\ndef main():\n    return sys.argv\n"
    )
    assert result.lines == [1, 5, 2]


def test_a_patch_is_all_or_nothing(ws: Path) -> None:
    before = (ws / "src" / "app.py").read_bytes()
    hunks = [{"old": "import os", "new": "import re"}, {"old": "return 7", "new": "return 8"}]
    error = refused(lambda: files.edit_patch(ws, "src/app.py", hunks))
    assert (error.code, error.details["hunk"], error.details["count"]) == ("edit_no_match", 1, 0)
    assert error.details["hint"].startswith("hunk 1:")
    assert (ws / "src" / "app.py").read_bytes() == before


@pytest.mark.parametrize(
    "patch",
    [[], "old/new", [{"old": "a"}], [{"old": "a", "new": 1}], [{"old": "a", "new": "b", "x": 1}],
     [["a", "b"]], [{"old": "", "new": "b"}]],
)  # fmt: skip
def test_a_malformed_patch_is_refused(ws: Path, patch: Any) -> None:
    assert refused(lambda: files.edit_patch(ws, "src/app.py", patch)).code == "bad_patch"


GITIGNORE = ["*.log", "!keep.log", "build/", "/top.txt", "a/**/b", "doc?/*.md", "[Tt]mp*", "\\#x"]
name = st.sampled_from(
    ["a", "b", "build", "top.txt", "x.log", "keep.log", "docs", "r.md", "Tmp1", "#x"]
)


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(parts=st.lists(name, min_size=1, max_size=4), is_dir=st.booleans())
def test_the_fast_ignore_check_agrees_with_pathspec(
    tmp_path: Path, parts: list[str], is_dir: bool
) -> None:
    from dataclasses import replace

    from room.infra.filewalk import Ignores, ignores_for
    from room.infra.fsroot import open_root

    (tmp_path / ".gitignore").write_text("\n".join(GITIGNORE) + "\n")
    with open_root(tmp_path.resolve()) as root:
        fast = ignores_for(root, ".")
    assert fast.rules[0].anything is not None
    slow = Ignores(tuple(replace(r, anything=None) for r in fast.rules))
    path = "/".join(parts)
    assert fast.ignored(path, is_dir) == slow.ignored(path, is_dir)


def test_writes_into_git_metadata_are_refused(ws: Path) -> None:
    (ws / ".git").mkdir(exist_ok=True)
    (ws / ".git" / "config").write_text("[core]\n")
    for call in (
        lambda: files.write(ws, ".git/config", "[filter]\n"),
        lambda: files.write(ws, "sub/.git/hooks/pre-commit", "#!/bin/sh\n"),
        lambda: files.edit(ws, ".git/config", "[core]", "[filter]"),
    ):
        with pytest.raises(FileToolError) as caught:
            call()
        assert caught.value.code == "git_metadata"
    assert (ws / ".git" / "config").read_text() == "[core]\n"
    assert not (ws / "sub").exists()


def test_writes_reaching_git_metadata_through_a_link_are_refused(ws: Path) -> None:
    (ws / ".git" / "hooks").mkdir()
    (ws / "hooks").symlink_to(ws / ".git" / "hooks", target_is_directory=True)
    (ws / "meta").symlink_to(".git", target_is_directory=True)
    for call in (
        lambda: files.write(ws, "hooks/pre-commit", "#!/bin/sh\n"),
        lambda: files.write(ws, "meta/info/new/x", "x"),  # looked up before any folder is made
        lambda: files.edit(ws, "meta/config", "def", "x"),
    ):
        assert refused(call).code == "git_metadata"
    assert sorted(p.name for p in (ws / ".git").iterdir()) == ["config", "hooks"]
    assert list((ws / ".git" / "hooks").iterdir()) == []
    assert (ws / ".git" / "config").read_text() == "def not_me\n"
    # and a search that starts inside .git through a link finds nothing there, as by its name
    assert files.search(ws, "def", path="meta").hits == []


def test_walks_stop_at_their_depth_bound(ws: Path) -> None:
    from room.infra.filewalk import MAX_WALK_DEPTH

    shallow = ws.joinpath(*["d"] * (MAX_WALK_DEPTH - 1))
    deep = ws.joinpath(*["d"] * (MAX_WALK_DEPTH + 2))
    deep.mkdir(parents=True)
    (shallow / "found.txt").write_text("needle\n")
    (deep / "lost.txt").write_text("needle\n")
    hits = files.search(ws, "needle").hits
    assert [h.path.count("/") for h in hits] == [MAX_WALK_DEPTH - 1]
    assert files.glob(ws, "**/*.txt").paths == [hits[0].path]
    # the deep file is still there for a walk that starts nearer to it
    start = "/".join(["d"] * 10)
    found = [h.path.rpartition("/")[2] for h in files.search(ws, "needle", path=start).hits]
    assert found == ["lost.txt", "found.txt"]  # name order: the folder d before found.txt
