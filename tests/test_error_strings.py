"""Every error code the server can send has a text in both of the page's string tables (issue
14, item 9): the page translates errors from their code and shows raw server words only when a
code has no translation, which this test keeps from happening."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from room.infra.evidence import EVIDENCE_CODES, PATH_CODES
from room.infra.files import FILE_CODES
from room.infra.worktrees import WORKTREE_CODES
from room.rules.lifecycle import REASON_MESSAGES
from room.rules.routing import POOL_PICK_REFUSALS

ROOT = Path(__file__).resolve().parents[1]
TABLES = {"zh": ROOT / "web" / "strings-zh.js", "en": ROOT / "web" / "strings-en.js"}


def literal_codes() -> set[str]:
    """``code="…"`` in any call, ``code = "…"`` in an error class, and the first argument of the
    workspace rule's ``_refuse("…", …)`` and of ``/ws``'s ``error_frame("…", …)``, anywhere in
    room/."""
    codes: set[str] = set()
    for path in (ROOT / "room").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                for kw in node.keywords:
                    value = kw.value
                    if kw.arg == "code" and isinstance(value, ast.Constant):
                        codes.update([value.value] if isinstance(value.value, str) else [])
                func = node.func
                name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
                if name in ("_refuse", "error_frame") and node.args:
                    first = node.args[0]
                    if isinstance(first, ast.Constant) and isinstance(first.value, str):
                        codes.add(first.value)
            elif isinstance(node, ast.ClassDef):
                for stmt in node.body:
                    if (
                        isinstance(stmt, ast.Assign)
                        and isinstance(stmt.targets[0], ast.Name)
                        and stmt.targets[0].id == "code"
                        and isinstance(stmt.value, ast.Constant)
                    ):
                        codes.add(str(stmt.value.value))
    return codes


def server_codes() -> set[str]:
    # Codes chosen at run time from these tables (lifecycle refusals, pool picks, worktrees,
    # workspace paths, the file tools).
    tables = (
        REASON_MESSAGES,
        POOL_PICK_REFUSALS,
        WORKTREE_CODES,
        PATH_CODES,
        EVIDENCE_CODES,
        FILE_CODES,
    )
    return literal_codes() | {code for table in tables for code in table}


def table_codes(path: Path) -> set[str]:
    return set(re.findall(r'^\s*"error\.([a-z0-9_]+)":', path.read_text(encoding="utf-8"), re.M))


def test_the_scan_finds_the_codes_it_should() -> None:
    codes = server_codes()
    # A few from each source, so a broken scan cannot pass by finding nothing.
    assert {"not_author", "project_not_accepting", "rate_limited", "forged_author"} <= codes
    assert {"internal", "workspace_missing"} <= codes
    assert {"workspace_system", "restore_first", "outside_pool", "detached_head"} <= codes
    assert len(codes) > 150


def test_every_server_error_code_is_translated_in_both_languages() -> None:
    codes = server_codes()
    for lang, path in TABLES.items():
        missing = sorted(codes - table_codes(path))
        assert missing == [], f"{lang}: no error.<code> string for {missing}"
