"""Docstrings that point somewhere: every Python name a docstring of room/ names exists, every
docs section it sends the reader to exists, and nothing sends the reader to an issue number.

Which text in a docstring is a Python name (the rule, kept small on purpose):

* a Sphinx role — ``:func:`…```, ``:class:``, ``:mod:``, ``:meth:``, ``:data:``, ``:attr:``,
  ``:exc:`` — always is, and its target must be one dotted name (``~`` and a trailing ``()``
  allowed);
* a double-backticked dotted name (``a.b``, ``a.b.c()``) is one when its first part is ``room``
  or a module or class the docstring's module can see (defines, imports, or a builtin such as
  ``str``);
* a double-backticked call of one bare name (``name()``) is one.

Everything else between double backticks is prose the reader types or reads, not a name to look
up: bare words (JSON keys, states, parameters, error codes), anything with a space, a slash, a
quote or a bracket (paths, shell, SQL, frames), and dotted words whose first part is no module or
class here (``table.column``, ``frame.field``, ``host.name``, ``file.ext``).

A name resolves like this: ``room.…`` by importing its longest importable prefix and walking the
rest as attributes; any other name from, in order, the enclosing classes, the module's names, the
builtins, the classes the module defines (a bare ``:meth:`flush```) and, for a dotted role or a
``:mod:``, a top-level module (``:class:`asyncio.BufferedProtocol```). A class's attributes include its annotated fields
(dataclasses, pydantic models, named tuples). There is no list of exceptions: a name that does
not resolve is written the way it resolves, or quoted when it is a string (``"room.body_into"``).
"""

from __future__ import annotations

import ast
import builtins
import importlib
import inspect
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
ROOM = ROOT / "room"
DOCS = ROOT / "docs"

ROLE = re.compile(r":(func|class|mod|meth|data|attr|exc):`([^`]*)`")
LITERAL = re.compile(r"(?<!`)``([^`]+)``(?!`)")
NAME = re.compile(r"~?[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*(?:\(\))?")
DOTTED = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+(?:\(\))?")
CALL = re.compile(r"[A-Za-z_]\w*\(\)")
# "issue 12", "issues 3 and 4", "Issue #7", "issue 16 item 1": the tracker is not the docs.
ISSUE = re.compile(r"\bissues?\s+#?\d+", re.IGNORECASE)
# (docs/tasks.md, "Attempts and worktrees") — a file of docs/ and, when given, one of its headings.
DOCS_LINK = re.compile(r"docs/([\w-]+\.md)(?:,\s+\"([^\"]+)\")?")


@dataclass(frozen=True)
class Reference:
    path: Path
    line: int
    text: str
    role: str | None  # "func", "class", … or None for a double-backticked name

    def __str__(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}: {self.text!r}"


@dataclass(frozen=True)
class Docstring:
    path: Path
    module: str
    classes: tuple[str, ...]  # the names of the classes around it, outermost first
    line: int
    text: str


def room_files() -> list[Path]:
    return sorted(ROOM.rglob("*.py"))


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def docstrings(path: Path) -> Iterator[Docstring]:
    tree = ast.parse(path.read_text(), str(path))
    module = module_name(path)

    def visit(node: ast.AST, classes: tuple[str, ...]) -> Iterator[Docstring]:
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                yield Docstring(path, module, classes, first.lineno, first.value.value)
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                yield from visit(child, (*classes, child.name))
            elif not isinstance(child, ast.expr):
                yield from visit(child, classes)

    yield from visit(tree, ())


MAIN = "room.__main__"  # importing it runs the command line: it is looked at, never imported


def load(module: str) -> ModuleType | None:
    return None if module == MAIN else importlib.import_module(module)


def import_walk(dotted: str) -> bool:
    """Whether ``dotted`` names something: its longest importable prefix, then attributes."""
    if dotted == MAIN or dotted.startswith(MAIN + "."):
        return dotted == MAIN
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        return attr_walk(found, parts[cut:])
    return False


def has_attribute(owner: Any, name: str) -> bool:
    if hasattr(owner, name):
        return True
    if inspect.isclass(owner):
        # fields without a default are annotations only (dataclasses, pydantic, NamedTuple)
        return any(name in getattr(base, "__annotations__", {}) for base in owner.__mro__)
    return False


def attr_walk(found: Any, parts: list[str]) -> bool:
    for part in parts:
        if not has_attribute(found, part):
            return False
        found = getattr(found, part, None)
    return True


def namespace(module: ModuleType | None) -> dict[str, Any]:
    """What a bare name in ``module`` may mean: its own names, then the builtins."""
    names: dict[str, Any] = dict(vars(builtins))
    if module is not None:
        names.update(vars(module))
    return names


def enclosing(doc: Docstring, module: ModuleType | None) -> list[Any]:
    """The classes around ``doc``, innermost first (up to one made inside a function, which the
    module does not hold)."""
    found: list[Any] = []
    owner: Any = module
    for name in doc.classes:
        owner = getattr(owner, name, None)
        if owner is None:
            break
        found.append(owner)
    return found[::-1]


def resolves(ref: Reference, doc: Docstring, module: ModuleType | None) -> bool:
    if NAME.fullmatch(ref.text) is None:
        return False
    text = ref.text.removeprefix("~").removesuffix("()")
    if text == "room" or text.startswith("room."):
        return import_walk(text)
    first, *rest = text.split(".")
    names = namespace(module)
    for owner in enclosing(doc, module):
        if has_attribute(owner, first) and attr_walk(getattr(owner, first, None), rest):
            return True
    if first in names and attr_walk(names[first], rest):
        return True
    if not rest:
        defined = [value for value in names.values() if inspect.isclass(value)]
        if any(cls.__module__ == doc.module and has_attribute(cls, first) for cls in defined):
            return True
    # a module of its own: a dotted role (``asyncio.BufferedProtocol``), or a bare ``:mod:``
    return (ref.role == "mod" or (ref.role is not None and bool(rest))) and import_walk(text)


def python_names(doc: Docstring, module: ModuleType | None) -> Iterator[Reference]:
    """The Python names ``doc`` mentions, by the rule in this module's docstring."""
    names = namespace(module)
    for match in ROLE.finditer(doc.text):
        line = doc.line + doc.text.count("\n", 0, match.start())
        # a role's target is a name, whatever it looks like: one that is not one fails
        yield Reference(doc.path, line, match.group(2), role=match.group(1))
    for match in LITERAL.finditer(doc.text):
        text = match.group(1)
        line = doc.line + doc.text.count("\n", 0, match.start())
        if CALL.fullmatch(text):
            yield Reference(doc.path, line, text, role=None)
        elif DOTTED.fullmatch(text):
            first = text.split(".", 1)[0]
            value = names.get(first)
            if first == "room" or inspect.ismodule(value) or inspect.isclass(value):
                yield Reference(doc.path, line, text, role=None)


def all_references() -> Iterator[tuple[Reference, bool]]:
    for path in room_files():
        for doc in docstrings(path):
            module = load(doc.module)
            for ref in python_names(doc, module):
                yield ref, resolves(ref, doc, module)


def test_every_name_in_a_docstring_exists() -> None:
    checked = list(all_references())
    unresolved = [str(ref) for ref, ok in checked if not ok]
    assert len(checked) > 300  # the rule still finds the names it is meant to check
    assert not unresolved, "names that do not exist:\n" + "\n".join(unresolved)


def test_the_rule_checks_names_and_leaves_prose() -> None:
    doc = Docstring(
        ROOM / "actions" / "attachments.py",
        "room.actions.attachments",
        (),
        1,
        ":func:`room.actions.tasks.record_command_result` moved and ``blobs.detect`` is gone;\n"
        ":func:`upload` and ``room.infra.blobs.detect_bytes()`` exist; :func:`room.actions.\n"
        "tenancy.ensure_free` is no name. ``meta.attachments``, ``blobs``, ``<data>/blobs``\n"
        "and ``request.stream()`` are prose. :func:`inspect` is no function here;\n"
        ":class:`fractions.Fraction` is one of the standard library's.",
    )
    module = load(doc.module)
    found = {(ref.line, ref.text): resolves(ref, doc, module) for ref in python_names(doc, module)}
    assert found == {
        (1, "room.actions.tasks.record_command_result"): False,
        (1, "blobs.detect"): False,
        (2, "upload"): True,
        (2, "room.infra.blobs.detect_bytes()"): True,
        (2, "room.actions.\ntenancy.ensure_free"): False,
        (4, "inspect"): False,
        (5, "fractions.Fraction"): True,
    }


def headings(path: Path) -> set[str]:
    return {
        line.lstrip("#").strip()
        for line in path.read_text().splitlines()
        if re.match(r"#{1,6} ", line)
    }


def test_every_docs_section_named_in_room_exists() -> None:
    missing, sections = [], 0
    for path in room_files():
        text = path.read_text()
        for match in DOCS_LINK.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            file, heading = match.group(1), match.group(2)
            target = DOCS / file
            if heading is not None:
                sections += 1
                # a heading may wrap across lines of a docstring or a comment
                heading = re.sub(r"\s*\n\s*(?:#\s*)?", " ", heading)
            if not target.exists() or (heading is not None and heading not in headings(target)):
                missing.append(f"{path.relative_to(ROOT)}:{line}: {match.group(0)!r}")
    assert sections > 20  # the links are still written the way DOCS_LINK reads them
    assert not missing, "docs sections that do not exist:\n" + "\n".join(missing)


def test_no_issue_numbers_in_room_or_docs() -> None:
    for written in ("issue 12", "Issue #7", "issues 3 and 4", "(issue 16 item 1)"):
        assert ISSUE.search(written), written
    # room/'s docstrings and comments (and any string: a reader cannot follow one there either),
    # and the docs' prose; CHANGELOG.md is history and may name the issues it closed.
    paths = [*room_files(), *sorted(DOCS.glob("*.md")), ROOT / "README.md"]
    found = []
    for path in paths:
        text = path.read_text()
        for match in ISSUE.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            found.append(f"{path.relative_to(ROOT)}:{line}: {match.group(0)!r}")
    assert not found, "issue numbers (link the docs section instead):\n" + "\n".join(found)
