"""What isolation costs a command: ``room.infra.sandbox`` running ``true`` vs a plain
``subprocess``.

All in the same run, ``RUNS`` times each, p50 and p95 in milliseconds:

* the reference: ``subprocess.run(["true"])``;
* the same through asyncio (``create_subprocess_exec``), the runner's own spawn path;
* the pieces of a sandboxed command, each spawned plainly: ``prlimit … sh -c true``,
  ``bwrap`` with the runner's layout (network off, then on) running ``true``;
* the whole :meth:`room.infra.sandbox.Sandbox.run` (network off and on), and the unsandboxed
  fallback.

The issue's target is ≤ 30 ms added at p50 (sandboxed ``run`` minus plain ``subprocess``).
"""

from __future__ import annotations

import asyncio
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path

from benchlib.stats import Row, quantiles

WORKLOAD = "sandbox (room.infra.sandbox)"
RUNS = 50
QUICK_RUNS = 20


def _time_sync(fn: Callable[[], object], runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1000)
    return out


async def _time_async(fn: Callable[[], Awaitable[object]], runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        await fn()
        out.append((time.perf_counter() - t0) * 1000)
    return out


def run(workdir: Path, *, quick: bool = False) -> list[Row]:
    from room.infra.sandbox import bwrap_argv, probe
    from room.infra.supervise import CommandLimits

    runs = QUICK_RUNS if quick else RUNS
    sandbox = probe()
    no_bwrap = probe(bwrap="/nonexistent/bwrap")
    limits = CommandLimits()
    ws = Path(tempfile.mkdtemp(prefix="sandbox-", dir=workdir))

    def quiet(argv: list[str], *, check: bool = True) -> None:
        subprocess.run(
            argv, check=check, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env={}
        )

    series: dict[str, list[float]] = {}

    series["plain subprocess.run(true)"] = _time_sync(
        lambda: quiet(["true"]),
        runs,
    )

    async def asyncio_true() -> None:
        proc = await asyncio.create_subprocess_exec("true", stdout=subprocess.PIPE)
        await proc.communicate()

    series["asyncio create_subprocess_exec(true)"] = asyncio.run(_time_async(asyncio_true, runs))
    prlimit = sandbox.info.prlimit or "prlimit"
    series["prlimit … sh -c true"] = _time_sync(
        lambda: quiet(
            [prlimit, "--cpu=60", "--as=2147483648", "--", "/bin/sh", "-c", "true"], check=False
        ),
        runs,
    )
    rows_note = ""
    if sandbox.info.isolated and sandbox.info.bwrap:
        for network in (False, True):
            argv = bwrap_argv(
                sandbox.info.bwrap, ["/bin/true"], cwd=ws, writable=(), network=network
            )
            series[f"bwrap layout true (network {'on' if network else 'off'})"] = _time_sync(
                partial(quiet, argv), runs
            )
        for network in (False, True):
            series[f"Sandbox.run(true) (network {'on' if network else 'off'})"] = asyncio.run(
                _time_async(
                    partial(sandbox.run, "true", cwd=ws, network=network, limits=limits),
                    runs,
                )
            )
    else:
        rows_note = f"no isolation here: {sandbox.info.reason}"
    series["Sandbox.run(true) unsandboxed"] = asyncio.run(
        _time_async(
            lambda: no_bwrap.run("true", cwd=ws, limits=limits, allow_unsandboxed=True), runs
        )
    )

    rows = []
    for case, values in series.items():
        p50, p95 = quantiles(values, [50, 95])
        rows.append(Row(WORKLOAD, case, "p50 ms", p50, reference_label=f"{runs} runs"))
        rows.append(Row(WORKLOAD, case, "p95 ms", p95, reference_label=f"{runs} runs"))
    plain50 = quantiles(series["plain subprocess.run(true)"], [50])[0]
    key = "Sandbox.run(true) (network off)"
    if key in series:
        added = quantiles(series[key], [50])[0] - plain50
        rows.append(
            Row(WORKLOAD, "sandboxed vs plain", "added p50 ms", added, plain50,
                reference_label="plain p50 ms", target="≤ 30")
        )  # fmt: skip
    elif rows_note:
        rows.append(Row(WORKLOAD, "sandboxed vs plain", "added p50 ms", None, note=rows_note))
    return rows
