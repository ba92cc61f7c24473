"""Which core the server runs on and which the load generator runs on, and how a process is
pinned there (with the raised open-file limit every workload needs).

A leaf module: the server process (:mod:`benchlib.serverproc`), the profiler that samples it
(:mod:`benchlib.profiler`) and the in-process references all import the cores from here, so none
of them has to import another for two constants.
"""

from __future__ import annotations

import os
import resource
from collections.abc import Callable

SERVER_CPU = 0
GENERATOR_CPU = 1
NOFILE = 16384


def raise_nofile() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = min(NOFILE, hard) if hard != resource.RLIM_INFINITY else NOFILE
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


def pin_to(cpu: int) -> Callable[[], None]:
    """A ``preexec_fn`` pinning the child to ``cpu`` with the raised open-file limit."""

    def preexec() -> None:
        os.sched_setaffinity(0, {cpu})
        raise_nofile()

    return preexec


def pin_generator() -> None:
    """Pin this (load generator) process to its own core; threads started later inherit it."""
    os.sched_setaffinity(0, {GENERATOR_CPU})
    raise_nofile()
