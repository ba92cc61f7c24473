"""Packs: ``room export`` and ``room import`` of a 1,000,000-message project vs ``sqlite3``'s
``.dump`` / ``.read`` of the same tables, in the same run (docs/packs.md).

The project is the history corpus (``benchlib.history.ensure_corpus``: the demo project filled
with raw rows, cached). Each side runs in its own process: ``room export 1 FILE`` and ``room
import FILE`` (into a fresh data folder made as the server makes one; the import also indexes
every message for search, as any write does), then ``sqlite3 DB ".dump T…"`` of the pack's
tables and ``sqlite3 NEW ".read DUMP"`` into an empty file. Figures: rows per second for each,
and the peak resident memory (``ru_maxrss``) of the room processes (target: under 300 MB).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from benchlib.corpus import make_data_folder
from benchlib.history import ensure_corpus
from benchlib.stats import Row
from room.packs import PACK_TABLES

WORKLOAD = "packs"
ROOM = Path(__file__).resolve().parents[2]

_CHILD = """
import json, resource, sys, time
from room import cli
t0 = time.monotonic()
code = cli.main(sys.argv[1:])
secs = time.monotonic() - t0
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"code": code, "secs": secs, "rss_mb": rss}))
"""


def _room(*args: str) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(ROOM)}
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, *args], env=env, capture_output=True, text=True, check=True
    )
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if result["code"] != 0:
        raise RuntimeError(f"room {args[0]} failed: {done.stderr[-500:]}")
    return result


def _timed(argv: list[str], stdout: Path | None = None) -> float:
    t0 = time.monotonic()
    if stdout is None:
        subprocess.run(argv, check=True, capture_output=True)
    else:
        with stdout.open("wb") as out:
            subprocess.run(argv, check=True, stdout=out)
    return time.monotonic() - t0


def run(workdir: Path, cache: Path, *, quick: bool) -> list[Row]:
    count = 100_000 if quick else 1_000_000
    data = ensure_corpus(cache, count)
    here = workdir / "packs"
    if here.exists():
        import shutil

        shutil.rmtree(here)
    here.mkdir(parents=True)
    pack = here / "project.roompack"
    target = here / "target"
    make_data_folder(target)
    exported = _room("export", "1", str(pack), "--data", str(data))
    rows = int(json.loads(pack.read_bytes().rsplit(b"\n", 2)[-2])["rows"])
    imported = _room("import", str(pack), "--data", str(target))

    tables = [t.name for t in PACK_TABLES]
    dump = here / "dump.sql"
    dump_secs = _timed(["sqlite3", str(data / "room.sqlite"), ".dump " + " ".join(tables)], dump)
    ref_rows = sum(line.startswith(b"INSERT INTO") for line in dump.open("rb"))
    read_secs = _timed(["sqlite3", str(here / "reference.sqlite"), f".read {dump}"])
    size_mb = pack.stat().st_size / 1e6
    case = f"{count:,}-message project ({rows:,} rows, pack {size_mb:.0f} MB)"
    out = []
    for label, ours, ref, reference in (
        ("export", exported, dump_secs, ".dump"),
        ("import", imported, read_secs, ".read"),
    ):
        ours_rate, ref_rate = rows / ours["secs"], ref_rows / ref
        out += [
            Row(WORKLOAD, case, f"{label} rows/s", ours_rate, ref_rate,
                f"sqlite3 {reference}: {{ref:,.0f}} rows/s",
                note=f"{ours['secs']:.1f} s vs {ref:.1f} s"),
            Row(WORKLOAD, case, f"{label}: sqlite3 ÷ room (×)", ref_rate / ours_rate, None,
                target="≤ 3"),
            Row(WORKLOAD, case, f"{label} peak RSS MB", ours["rss_mb"], None, target="≤ 300"),
        ]  # fmt: skip
    return out
