"""The log's vocabulary: what is held of one source, and how a record is encoded
for its digest and its chain hash.

Storage (:mod:`huddle.log.store`) and the replication protocol
(:mod:`huddle.protocol.replication`) both speak it; it lives here, below
both, so that storage imports no protocol.
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

__all__ = ["GENESIS", "RECORD_HEAD", "SourceState"]

# A record's encoding, as its store digest and its chain hash cover it: this head (source,
# sequence, timestamp, the kind's length), then the kind and the body in UTF-8; and the chain
# hash before a source's first record (docs/protocol.md 12.5).
RECORD_HEAD: Final = struct.Struct(">16sqdI")
GENESIS: Final = bytes(32)


@dataclass(slots=True)
class SourceState:
    """What is held of one source: the contiguous prefix ``1..contig``, and
    ``ahead``, sorted disjoint ranges ``(first, last)`` held beyond a gap.
    Ranges, not sets of numbers, so a gap of a million costs nothing."""

    contig: int = 0
    ahead: list[tuple[int, int]] = field(default_factory=list)

    @property
    def top(self) -> int:
        """The highest sequence held."""
        return self.ahead[-1][1] if self.ahead else self.contig

    def count(self) -> int:
        return self.contig + sum(last - first + 1 for first, last in self.ahead)

    def holds(self, seq: int) -> bool:
        return seq <= self.contig or any(a <= seq <= b for a, b in self.ahead)

    def add(self, first: int, last: int) -> list[tuple[int, int]]:
        """Mark ``first..last`` held; returns the sub-ranges that were not held before."""
        if last <= self.contig:
            return []
        if first == self.contig + 1 and not self.ahead:  # the common case: the prefix grows
            self.contig = last
            return [(first, last)]
        cur = max(first, self.contig + 1)
        new: list[tuple[int, int]] = []
        for a, b in self.ahead:
            if b < cur:
                continue
            if a > last:
                break
            if a > cur:
                new.append((cur, min(last, a - 1)))
            cur = b + 1
            if cur > last:
                break
        if cur <= last:
            new.append((cur, last))
        if new:
            merged: list[tuple[int, int]] = []
            for a, b in sorted(self.ahead + new):
                if merged and a <= merged[-1][1] + 1:
                    merged[-1] = (merged[-1][0], max(merged[-1][1], b))
                else:
                    merged.append((a, b))
            while merged and merged[0][0] <= self.contig + 1:
                self.contig = max(self.contig, merged.pop(0)[1])
            self.ahead = merged
        return new

    def opens_range(self, first: int, last: int) -> bool:
        """True if holding ``first..last`` would add a range to ``ahead`` (it
        touches neither the prefix nor a range held beyond it)."""
        if first <= self.contig + 1:
            return False
        ahead = self.ahead
        i = bisect.bisect_left(ahead, (first, 0))
        if i > 0 and ahead[i - 1][1] + 1 >= first:
            return False
        return not (i < len(ahead) and ahead[i][0] <= last + 1)

    def missing(self) -> list[tuple[int, int]]:
        """The gaps: ranges below the highest held sequence that are not held."""
        out = []
        prev = self.contig
        for a, b in self.ahead:
            out.append((prev + 1, a - 1))
            prev = b
        return out

    @classmethod
    def of(cls, seqs: Iterable[int]) -> SourceState:
        """The state holding exactly ``seqs`` (in increasing order)."""
        st = cls()
        run: list[int] = []
        for q in seqs:
            if run and q == run[1] + 1:
                run[1] = q
            else:
                if run:
                    st.add(run[0], run[1])
                run = [q, q]
        if run:
            st.add(run[0], run[1])
        return st
