"""What a merge takes (room.rules.merging): junk patterns, their checks, the default choice and
the refusals, the commit message's trailers. Pure: no git, no server."""

from __future__ import annotations

import pytest

from room.errors import BadRequestError
from room.rules import merging
from room.rules.merging import DEFAULT_MERGE_IGNORE, Change, check_patterns, choose, junk_pattern

ZERO = "0" * 40


def change(path: str, status: str = "added", mode: str = "100644") -> Change:
    old = (mode, "1" * 40) if status != "added" else ("000000", ZERO)
    new = (mode, "2" * 40) if status != "deleted" else ("000000", ZERO)
    return Change(path, status, old[0], new[0], old[1], new[1], path)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("path", "pattern"),
    [
        ("src/__pycache__/calc.cpython-311.pyc", "__pycache__/"),
        ("calc.pyc", "*.pyc"),
        ("build.tmp", "*.tmp"),
        ("web/node_modules/left-pad/index.js", "node_modules/"),
        ("a/b/.DS_Store", ".DS_Store"),
        ("build/out.js", "build/"),
        ("pkg/room.egg-info/PKG-INFO", "*.egg-info/"),
        ("notes.txt~", "*~"),
    ],
)
def test_the_default_list_flags_generated_files(path: str, pattern: str) -> None:
    assert junk_pattern(path, DEFAULT_MERGE_IGNORE) == pattern


@pytest.mark.parametrize(
    "path",
    ["src/calc.py", "README.md", "src/build.py", "docs/building.md", "distance.py", "pyc.md"],
)
def test_the_default_list_leaves_real_work_alone(path: str) -> None:
    assert junk_pattern(path, DEFAULT_MERGE_IGNORE) is None


def test_pattern_forms() -> None:
    # a folder pattern never matches the file's own name
    assert junk_pattern("build", ["build/"]) is None
    assert junk_pattern("x/build/y", ["build/"]) == "build/"
    # a slash inside anchors at the top; ** crosses folders, * does not
    assert junk_pattern("docs/_build/index.html", ["docs/_build"]) == "docs/_build"
    assert junk_pattern("src/docs/_build/index.html", ["docs/_build"]) is None
    assert junk_pattern("src/a/b/gen/x.c", ["src/**/gen/"]) == "src/**/gen/"
    assert junk_pattern("src/a/b/x.gen", ["src/*.gen"]) is None
    assert junk_pattern("log3.txt", ["log[0-9].txt"]) == "log[0-9].txt"
    assert junk_pattern("loga.txt", ["log[!0-9].txt"]) == "log[!0-9].txt"
    # names with odd characters are only names
    assert junk_pattern("a\nb.tmp", ["*.tmp"]) == "*.tmp"
    assert junk_pattern("-rf.tmp", ["*.tmp"]) == "*.tmp"
    assert junk_pattern("x.py", []) is None


@pytest.mark.parametrize(
    ("patterns", "index", "reason"),
    [
        (["*.pyc", ""], 1, "empty"),
        (["/"], 0, "empty"),
        (["a\nb"], 0, "contains a control character"),
        (["a\\b"], 0, "contains a backslash"),
        ([" *.tmp"], 0, "leading or trailing space"),
        (["!keep.tmp"], 0, "negation (!) is not supported"),
        (["# note"], 0, "comments (#) are not supported"),
        (["log[0-9.txt"], 0, "unclosed ["),
        (["x" * 201], 0, "longer than 200 characters"),
        ([3], 0, "not a string"),
    ],
)
def test_bad_patterns_are_refused_naming_the_first(
    patterns: list[object], index: int, reason: str
) -> None:
    with pytest.raises(BadRequestError) as caught:
        check_patterns(patterns)
    assert caught.value.code == "bad_merge_ignore"
    details = caught.value.details
    assert (details["index"], details["position"], details["reason"]) == (index, index + 1, reason)
    assert details["problem"] in merging.PATTERN_PROBLEMS


def test_pattern_lists_are_bounded_and_deduplicated() -> None:
    assert check_patterns(["*.tmp", "build/", "*.tmp"]) == ("*.tmp", "build/")
    assert check_patterns([]) == ()
    with pytest.raises(BadRequestError) as caught:
        check_patterns(["*.x"] * 101)
    assert (caught.value.details["problem"], caught.value.details["reason"]) == (
        "too_many",
        "too many",
    )
    with pytest.raises(BadRequestError) as caught:
        check_patterns("*.tmp")
    assert caught.value.details["reason"] == "not a list"


def test_the_review_lists_every_change_with_cited_and_junk_flags() -> None:
    changes = [
        change("src/calc.py"),
        change("src/__pycache__/calc.cpython-311.pyc"),
        change("old.txt", "deleted"),
        change("link", mode="120000"),
    ]
    files = merging.review_files(changes, {"src/calc.py"}, DEFAULT_MERGE_IGNORE)
    assert [(f["path"], f["status"], f["kind"], f["cited"], f["junk"], f["selected"])
            for f in files] == [
        ("src/calc.py", "added", "file", True, None, True),
        ("src/__pycache__/calc.cpython-311.pyc", "added", "file", False, "__pycache__/", False),
        ("old.txt", "deleted", "file", False, None, False),
        ("link", "added", "symlink", False, None, False),
    ]  # fmt: skip


def test_the_default_choice_is_the_cited_files_and_names_must_be_changes() -> None:
    changes = [change("src/calc.py"), change("build.tmp"), change("gone.py", "deleted")]
    included, left = choose(changes, None, {"src/calc.py", "not/changed.py"})
    assert [c.path for c in included] == ["src/calc.py"]
    assert [c.path for c in left] == ["build.tmp", "gone.py"]
    included, left = choose(changes, ["gone.py", "src/calc.py", "gone.py"], set())
    assert [c.path for c in included] == ["src/calc.py", "gone.py"]
    for bad in (["../etc/passwd"], ["src/calc.py", "--exec=x"], ["/abs"], ["src/calc.py\n"]):
        with pytest.raises(BadRequestError) as caught:
            choose(changes, bad, set())
        assert caught.value.code == "path_not_in_diff"
        assert caught.value.details["paths"] == [p for p in bad if p != "src/calc.py"]
    with pytest.raises(BadRequestError) as caught:
        choose(changes, [], {"src/calc.py"})
    assert caught.value.code == "nothing_selected"
    with pytest.raises(BadRequestError) as caught:
        choose(changes, None, set())  # nothing cited among the changes, nothing named
    assert caught.value.code == "nothing_selected"
    assert choose([], None, set()) == ((), ())  # nothing changed: nothing to choose


def test_a_file_replacing_a_folder_is_merged_only_with_the_folders_deletions() -> None:
    changes = [change("a", "added"), change("a/x", "deleted"), change("a/y", "deleted"),
               change("b/c", "added"), change("b", "deleted"), change("other.py")]  # fmt: skip
    for wanted, missing in ((["a"], ["a/x", "a/y"]), (["a", "a/x"], ["a/y"]), (["b/c"], ["b"])):
        with pytest.raises(BadRequestError) as caught:
            choose(changes, wanted, set())
        assert caught.value.code == "selection_incomplete"
        assert caught.value.details["paths"] == missing
    included, _ = choose(changes, ["a", "a/x", "a/y", "other.py"], set())
    assert [c.path for c in included] == ["a", "a/x", "a/y", "other.py"]
    assert [c.path for c in choose(changes, ["a/x"], set())[0]] == ["a/x"]  # a deletion alone


def test_the_digest_follows_content_not_order() -> None:
    a, b = change("a.py"), change("b.py")
    assert merging.digest([a, b]) == merging.digest([b, a])
    moved = Change("a.py", "added", "000000", "100644", ZERO, "3" * 40, "a.py")
    assert merging.digest([moved, b]) != merging.digest([a, b])


def test_the_commit_message_names_task_attempt_and_reviewer_on_trailer_lines() -> None:
    message = merging.commit_message(
        task_key="api", title="做 api\nReviewed-by: mallory", attempt=2, branch="room/p/api-2",
        reviewer="林 (lin) <lin@users.noreply.room.invalid>", included=1, left_out=3,
    )  # fmt: skip
    lines = message.splitlines()
    assert lines[0] == "api: 做 api Reviewed-by: mallory"  # a title cannot add a trailer line
    assert lines[-3:] == [
        "Room-Task: api",
        "Room-Attempt: 2 (room/p/api-2)",
        "Reviewed-by: 林 (lin) <lin@users.noreply.room.invalid>",
    ]
    assert "1 file(s) merged, 3 left out" in message
    assert [line for line in lines if line.startswith("Reviewed-by:")] == [lines[-1]]
