"""What every private process a test starts needs: a free port on 127.0.0.1 and a parent-death
signal, so that a test process that dies (``kill -9``, a timeout, a killed pytest) does not leave
its servers running and polling for ever."""

from __future__ import annotations

import ctypes
import signal
import socket
from collections.abc import Callable

PR_SET_PDEATHSIG = 1


def free_port() -> int:
    """A port free on 127.0.0.1 now (another process may still take it before it is bound)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def die_with_parent(sig: signal.Signals) -> Callable[[], None]:
    """A ``preexec_fn`` that has the child sent ``sig`` when the thread that started it ends.
    Start such children from the test's main thread: a worker thread's exit would kill them."""

    def arm() -> None:  # runs in the child, between fork and exec
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, sig)

    return arm
