"""Operator files in the data folder (docs/architecture.md, "Operators").

* ``boot-trace.jsonl`` — one line per start-up phase ``{ts, pid, phase, ok, detail}``; the last
  line of a good start is ``ready``, so a start that died shows how far it got.
* ``boot-report.json`` — what is really running: versions resolved from the live process (Python,
  the SQLite library, each dependency and the file it was imported from), registered tools,
  capability flags, providers and their availability, and a bounded history of activations.
* ``last-backup.json`` — the last backup ``room backup`` wrote of this folder: when, where, its
  size and rows, and the schedule it runs on (``every_hours``), read by ``/metrics`` and
  ``room doctor``.
* ``restored.json`` — left by ``room restore`` (room.actions.backup): the first start reports it
  (``recovery.restored`` in the boot report, a ``restored`` phase in the trace), then removes it.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import os
import platform
import sqlite3
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from room import __version__

DEPENDENCIES = (
    ("starlette", "starlette"),
    ("uvicorn", "uvicorn"),
    ("websockets", "websockets"),
    ("pydantic", "pydantic"),
    ("anyio", "anyio"),
    ("regex", "regex"),
    ("httpx", "httpx"),
    ("markdown-it-py", "markdown_it"),
    ("nh3", "nh3"),
    ("pillow", "PIL"),
    ("puremagic", "puremagic"),
    ("mcp", "mcp"),  # the SDK serving /mcp (room.mcp_server)
)
RESTORED = "restored.json"
LAST_BACKUP = "last-backup.json"
MAX_ACTIVATIONS = 20
MAX_TRACE_LINES = 2000


class BootTrace:
    def __init__(self, data: Path) -> None:
        self.path = data / "boot-trace.jsonl"
        self._trim()

    def phase(self, phase: str, ok: bool = True, **detail: Any) -> None:
        line = {"ts": time.time(), "pid": os.getpid(), "phase": phase, "ok": ok, "detail": detail}
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(line, ensure_ascii=False, default=str) + "\n")
            fh.flush()
            os.fsync(fh.fileno())

    def _trim(self) -> None:
        try:
            lines = self.path.read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            return
        if len(lines) > MAX_TRACE_LINES:
            self.path.write_text("\n".join(lines[-MAX_TRACE_LINES // 2 :]) + "\n", encoding="utf-8")


def read_trace(data: Path) -> list[dict[str, Any]]:
    path = data / "boot-trace.jsonl"
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    out = []
    for line in text.splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def last_start(trace: list[dict[str, Any]], pid: int | None = None) -> list[dict[str, Any]]:
    """The phases of the most recent start (from its last ``start`` line), or of the start of
    process ``pid``: while a server runs, a second instance refused at the lock writes its own
    lines after the running server's, and those say nothing about the running server."""
    for index in range(len(trace) - 1, -1, -1):
        line = trace[index]
        if line.get("phase") == "start" and pid in (None, line.get("pid")):
            return [p for p in trace[index:] if p.get("pid") == line.get("pid")]
    return trace if pid is None else []


def dependency_versions() -> dict[str, dict[str, str | None]]:
    found: dict[str, dict[str, str | None]] = {}
    for dist, module_name in DEPENDENCIES:
        module = sys.modules.get(module_name) or importlib.import_module(module_name)
        try:
            version: str | None = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            version = getattr(module, "__version__", None)
        found[dist] = {"version": version, "file": getattr(module, "__file__", None)}
    return found


def write_report(
    data: Path,
    *,
    settings: dict[str, Any],
    schema_version: int,
    tools: list[str],
    capabilities: dict[str, Any],
    providers: list[dict[str, Any]],
    recovery: dict[str, Any] | None = None,
    workspaces: dict[str, Any] | None = None,
    database: dict[str, Any] | None = None,
) -> dict[str, Any]:
    path = data / "boot-report.json"
    try:
        previous = json.loads(path.read_text(encoding="utf-8"))
        activations = list(previous.get("activations", []))
    except (FileNotFoundError, ValueError):
        activations = []
    activations.append({"ts": time.time(), "pid": os.getpid(), "version": __version__})
    report = {
        "room_version": __version__,
        "pid": os.getpid(),
        "started_at": time.time(),
        "python": {"version": platform.python_version(), "executable": sys.executable},
        "sqlite": {"library": sqlite3.sqlite_version, "module": sqlite3.__file__},
        # The store this process serves on (docs/storage.md): SQLite unless told.
        "database": database or {"backend": "sqlite", "version": sqlite3.sqlite_version},
        "dependencies": dependency_versions(),
        "schema_version": schema_version,
        "settings": settings,
        "tools": tools,
        "capabilities": capabilities,
        "providers": providers,
        "recovery": recovery or {},
        "workspaces": workspaces or {},
        "activations": activations[-MAX_ACTIVATIONS:],
    }
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(report, ensure_ascii=False, indent=2, default=str), encoding="utf-8")
    os.replace(tmp, path)
    return report


def update_report(data: Path, key: str, value: Any) -> None:
    """Replace one section of ``boot-report.json`` (a cluster node keeps its ``cluster`` view
    current there while it runs); nothing when the report is missing or unreadable."""
    path = data / "boot-report.json"
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    if not isinstance(report, dict):
        return
    report[key] = value
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(report, ensure_ascii=False, indent=2, default=str), encoding="utf-8")
    os.replace(tmp, path)


def _write_private(path: Path, facts: dict[str, Any] | str) -> None:
    """``facts`` as JSON (a string as it is) in ``path``, 0600, replaced atomically."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(
            facts if isinstance(facts, str) else json.dumps(facts, ensure_ascii=False, indent=2)
        )
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def node_id(data: Path) -> str:
    """This server's name among the servers of one database, kept in ``<data>/node-id`` and
    the same across its restarts (a data folder is one server's: its lock). A turn records the
    node that runs it; a start settles only its own node's turns (docs/storage.md)."""
    path = data / "node-id"
    try:
        found = path.read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        found = ""
    if found:
        return found
    made = uuid.uuid4().hex
    _write_private(path, made)
    return made


def write_restored(data: Path, facts: dict[str, Any]) -> None:
    """Say that ``data`` was restored from a backup, for its first start to report."""
    _write_private(data / RESTORED, facts)


def write_last_backup(data: Path, facts: dict[str, Any]) -> None:
    """Remember the backup just written of ``data`` (``at`` in Unix seconds)."""
    _write_private(data / LAST_BACKUP, facts)


def read_last_backup(data: Path) -> dict[str, Any] | None:
    """The last backup written of ``data``; None when there is none (or the note is
    unreadable)."""
    try:
        facts = json.loads((data / LAST_BACKUP).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return facts if isinstance(facts, dict) and isinstance(facts.get("at"), int | float) else None


def read_restored(data: Path) -> dict[str, Any] | None:
    """What ``room restore`` left for this start to report; None when the folder was not just
    restored (or the note is unreadable: it only informs)."""
    try:
        facts = json.loads((data / RESTORED).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return facts if isinstance(facts, dict) else None


def clear_restored(data: Path) -> None:
    """The restore has been reported (in the boot report just written): forget the note."""
    (data / RESTORED).unlink(missing_ok=True)
