"""Rate-limited logging: what a flood of bad input makes a node say, bounded.

One rule for every line that input can cause (refusals, drops, guests coming
and going): per *kind*, at most ``burst`` lines in a ``period`` of seconds; the
lines past that are left out and counted, and the next line written for that
kind says how many were.  A period starts with the first line written after
the previous one ended, so a kind that is quiet for a while logs its next
event at once.

Why a time rule and not a count rule (1, 10, 100, ...; every 1000th; powers of
two): a count rule either goes quiet for good on a long-lived node (after a
million refusals, the next line is at ten million: tomorrow's attack is never
seen) or writes without bound (every 1000th of a sustained flood is still
lines per second).  Per period, the log says within ``period`` seconds that
something is going on, and how much, whatever the rate.

Time is passed in (``now``), as in the protocol's state machines; kinds are a
fixed set named in code, never text a peer or guest chose, so the table stays
small.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

__all__ = ["RateLog"]


@dataclass(slots=True)
class _Window:
    ends: float  # the period's end: past it, the next line starts a new one
    written: int = 0  # lines written in this period
    left_out: int = 0  # lines left out since the last one written


class RateLog:
    """At most ``burst`` lines per ``period`` seconds for each kind (see the module);
    ``burst`` 0 leaves every line out and only counts them."""

    def __init__(self, logger: logging.Logger, *, period: float = 60.0, burst: int = 1) -> None:
        if period <= 0 or burst < 0:
            raise ValueError("RateLog needs period > 0 and burst >= 0 (0: every line left out, counted)")
        self.logger = logger
        self.period = period
        self.burst = burst
        self.left_out = 0  # lines left out in all, every kind
        self._windows: dict[str, _Window] = {}

    def due(self, kind: str, now: float) -> int | None:
        """None: leave this line out (counted); else write it, and say that this many
        lines of ``kind`` were left out before it."""
        w = self._windows.get(kind)
        if w is None or now >= w.ends:
            w = self._windows[kind] = _Window(now + self.period, left_out=w.left_out if w else 0)
        if w.written >= self.burst:
            w.left_out += 1
            self.left_out += 1
            return None
        w.written += 1
        left_out, w.left_out = w.left_out, 0
        return left_out

    def log(self, level: int, kind: str, now: float, msg: str, *args: object) -> bool:
        """Log ``msg % args`` at ``level`` if ``kind`` is due (with the count left out
        before it appended); False when it was left out."""
        left_out = self.due(kind, now)
        if left_out is None:
            return False
        if left_out:
            msg += f" ({left_out} more like this left out before)"
        self.logger.log(level, msg, *args)
        return True

    def warning(self, kind: str, now: float, msg: str, *args: object) -> bool:
        return self.log(logging.WARNING, kind, now, msg, *args)

    def info(self, kind: str, now: float, msg: str, *args: object) -> bool:
        return self.log(logging.INFO, kind, now, msg, *args)
