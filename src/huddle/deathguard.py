"""A child process that dies with its parent: Linux's parent-death signal.

:func:`death_guard` gives the ``preexec_fn`` that a child runs as its last step before exec:
``prctl(PR_SET_PDEATHSIG, SIG)``, so the kernel sends SIG to the child when the thread that
spawned it ends, even when that process is killed with SIGKILL; and if the parent died before
the guard was set, the child exits at once.  libc is looked up when the guard is made, before
the fork, so the child only calls it.  None off Linux (no such signal there).

Used for the apps and handlers a node supervises (docs/control.md) and for the JVM of
``huddle pipeline serve`` (docs/pipeline.md).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Callable
from typing import Final

__all__ = ["death_guard"]

_PR_SET_PDEATHSIG: Final = 1  # prctl(2)


def death_guard(signum: signal.Signals = signal.SIGKILL) -> Callable[[], None] | None:
    """The child's guard (the module docstring): ``signum`` when its parent dies."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    parent = os.getpid()

    def guard() -> None:
        prctl(_PR_SET_PDEATHSIG, int(signum), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the guard was set
            os._exit(1)

    return guard
