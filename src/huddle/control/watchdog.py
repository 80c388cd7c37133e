"""The apps' watchdog: kills every app's process group once the node that started them is gone.

Run by path (``python -I watchdog.py``, so it loads nothing of huddle) in a session of its own,
its standard input a pipe from the node: ``+PGID`` lines name a group the node started, ``-PGID``
one that is gone.  The node alone holds the pipe's other end, so when the node ends, however it
ends (``kill -9`` too), the kernel closes it: the watchdog reads end-of-file, sends SIGKILL to
every group still named, and exits.  A node that stops cleanly names no group by then.

A parent-death signal on each app's own process (docs/control.md) reaches the app alone; this
reaches its children and grandchildren too, as long as they stay in its process group.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys


def main() -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # only the end of its input ends it
    groups: set[int] = set()
    for line in sys.stdin.buffer:
        text = line.strip()
        if text[:1] in (b"+", b"-") and text[1:].isdigit():
            pgid = int(text[1:])
            if pgid > 1:
                (groups.add if text[:1] == b"+" else groups.discard)(pgid)
    for pgid in groups:
        with contextlib.suppress(OSError):  # gone already (ESRCH), or not ours
            os.killpg(pgid, signal.SIGKILL)
    return 0


if __name__ == "__main__":
    sys.exit(main())
