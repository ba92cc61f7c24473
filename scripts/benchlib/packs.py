"""Packs: ``room export`` and ``room import`` of a 1,000,000-message project vs ``sqlite3``'s
``.dump`` / ``.read`` of the same tables, in the same run (docs/packs.md).

The project is the history corpus (``benchlib.history.ensure_corpus``: the demo project filled
with raw rows, built once into ``.bench-cache/history-v<schema>-<count>/``; ``--quick`` uses
100,000 messages). Each side runs in its own process: ``room export 1 FILE`` and ``room import
FILE`` (into a fresh data folder made as the server makes one; the import also indexes every
message for search, as any write does), then ``sqlite3 DB ".dump T…"`` of the pack's tables and
``sqlite3 NEW ".read DUMP"`` into an empty file. Figures: rows per second for each (wall clock,
the target's measure), the same ratio in CPU seconds (user + system: what the machine's load
does not change), and the peak resident memory of the room processes (target: under 300 MB).

The peak is the child's own ``VmHWM`` (``/proc/self/status``), not ``ru_maxrss``: Linux keeps
``ru_maxrss`` across ``exec``, and ``subprocess`` starts the child with ``vfork``, so the child's
``ru_maxrss`` starts at the *bench's* own peak (the cached corpus build, say) and said nothing of
the import. The large files are removed at the end (a 1,000,000-message run writes ~6 GB).
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

from benchlib.corpus import make_data_folder
from benchlib.history import ensure_corpus
from benchlib.stats import Row
from room.rules.packs import PACK_TABLES

WORKLOAD = "packs"
ROOM = Path(__file__).resolve().parents[2]

_CHILD = """
import json, resource, sys, time
from room import cli
t0 = time.monotonic()
code = cli.main(sys.argv[1:])
secs = time.monotonic() - t0
use = resource.getrusage(resource.RUSAGE_SELF)
with open("/proc/self/status") as status:
    hwm = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))
print(json.dumps({"code": code, "secs": secs, "cpu": use.ru_utime + use.ru_stime,
                  "rss_mb": hwm / 1024}))
"""


def _children_cpu() -> float:
    use = resource.getrusage(resource.RUSAGE_CHILDREN)
    return use.ru_utime + use.ru_stime


def _room(*args: str) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(ROOM)}
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, *args], env=env, capture_output=True, text=True, check=True
    )
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    if result["code"] != 0:
        raise RuntimeError(f"room {args[0]} failed: {done.stderr[-500:]}")
    return result


def _timed(argv: list[str], stdout: Path | None = None) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one sqlite3 run."""
    cpu0, t0 = _children_cpu(), time.monotonic()
    if stdout is None:
        subprocess.run(argv, check=True, capture_output=True)
    else:
        with stdout.open("wb") as out:
            subprocess.run(argv, check=True, stdout=out)
    return time.monotonic() - t0, _children_cpu() - cpu0


def _pack_rows(pack: Path) -> int:
    """The row count on the pack's end line (read from its tail: the pack is ~1.3 GB)."""
    with pack.open("rb") as f:
        f.seek(max(0, pack.stat().st_size - 4096))
        tail = f.read()
    return int(json.loads(tail.rstrip(b"\n").rsplit(b"\n", 1)[-1])["rows"])


def run(workdir: Path, cache: Path, *, quick: bool) -> list[Row]:
    count = 100_000 if quick else 1_000_000
    data = ensure_corpus(cache, count)
    here = workdir / "packs"
    if here.exists():
        shutil.rmtree(here)
    here.mkdir(parents=True)
    try:
        return _measure(data, here, count)
    finally:
        shutil.rmtree(here, ignore_errors=True)


def _measure(data: Path, here: Path, count: int) -> list[Row]:
    pack = here / "project.roompack"
    target = here / "target"
    make_data_folder(target)
    exported = _room("export", "1", str(pack), "--data", str(data))
    rows = _pack_rows(pack)
    imported = _room("import", str(pack), "--data", str(target))
    size_mb = pack.stat().st_size / 1e6
    pack.unlink()
    shutil.rmtree(target)

    tables = [t.name for t in PACK_TABLES]
    dump = here / "dump.sql"
    dump_secs, dump_cpu = _timed(
        ["sqlite3", str(data / "room.sqlite"), ".dump " + " ".join(tables)], dump
    )
    with dump.open("rb") as f:
        ref_rows = sum(line.startswith(b"INSERT INTO") for line in f)
    read_secs, read_cpu = _timed(["sqlite3", str(here / "reference.sqlite"), f".read {dump}"])
    case = f"{count:,}-message project ({rows:,} rows, pack {size_mb:.0f} MB)"
    out = []
    for label, ours, ref, ref_cpu, reference in (
        ("export", exported, dump_secs, dump_cpu, ".dump"),
        ("import", imported, read_secs, read_cpu, ".read"),
    ):
        ours_rate, ref_rate = rows / ours["secs"], ref_rows / ref
        cpu_ratio = (ours["cpu"] / rows) / (ref_cpu / ref_rows)
        out += [
            Row(WORKLOAD, case, f"{label} rows/s", ours_rate, ref_rate,
                f"sqlite3 {reference}: {{ref:,.0f}} rows/s",
                note=f"{ours['secs']:.1f} s vs {ref:.1f} s"),
            Row(WORKLOAD, case, f"{label}: sqlite3 ÷ room (×)", ref_rate / ours_rate, None,
                target="≤ 3"),
            Row(WORKLOAD, case, f"{label}: CPU per row, room ÷ sqlite3 (×)", cpu_ratio, None,
                f"CPU {ours['cpu']:.1f} s vs {ref_cpu:.1f} s (user + system)"),
            Row(WORKLOAD, case, f"{label} peak RSS MB", ours["rss_mb"], None, target="≤ 300"),
        ]  # fmt: skip
    return out
