#!/usr/bin/env python3
"""What a system-picture report costs its origin and a receiver, in one process, without
ZeroMQ or asyncio: CPU time per report of a 64-row report (one origin, 63 peers), to compare
changes to RAWS quickly (protocol.md 14, 14.1).

* origin:    a full report, and a one-row delta on it (``report_delta``), each signed
             (``sign_raws``, when the tree has it) and encoded once.
* receiver:  ``decode`` and ``Reports.receive`` of the full report and then of the delta,
             from the origin's own session (a full mesh: nothing passed on), 63 links;
             and of full reports relayed by another member (the signature checked, when the
             tree signs).

Figures are process CPU time per report, medians over ``--reps``.  Put the tree to measure
first on ``PYTHONPATH``: a tree without signed reports measures the same steps unsigned.
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from huddle.ids import NodeId
from huddle.protocol.picture import Reports

try:
    from huddle.protocol.picture_compute import PictureTiming, report_delta
except ImportError:  # a tree from before the picture's computation had a module of its own
    from huddle.protocol.picture import PictureTiming, report_delta  # type: ignore[attr-defined,no-redef]
from huddle.protocol.service import PeerFacts
from huddle.security import NodeIdentity
from huddle.wire import PeerStat, Raws, decode, encode

try:
    from huddle.wire import sign_raws
except ImportError:  # a tree from before signed reports (protocol.md 14.1): reports unsigned
    sign_raws = None

KEYS = [NodeIdentity.from_seed(hashlib.blake2b(i.to_bytes(4), digest_size=32).digest()) for i in range(64)]
IDS = [k.node_id for k in KEYS]
ORIGIN, ME, RELAY = KEYS[1], IDS[0], IDS[2]


class _View:
    excluded: dict[NodeId, str] = {}  # noqa: RUF012
    beat = 1.0

    phase_changes = dialled_afresh = 0  # no session went suspect, none dialled us afresh

    def departure(self, peer: NodeId) -> str | None:
        return None

    def heartbeat_after(self, when: float) -> float:
        return when


def _stat(peer: NodeId, state: str = "alive") -> PeerStat:
    return PeerStat(peer, 0.512, 0.0012, state, 310, 305, 48211, 47630, 12, 0, 0)


def _report(seq: int, peers: list[PeerStat]) -> Raws:
    return Raws(ORIGIN.node_id, ORIGIN.node_id, seq, "node-1", "standard", 1.0, 4, False, tuple(peers))


def _signed(msg: Raws) -> Raws:
    return msg if sign_raws is None else sign_raws(msg, ORIGIN.public_key, ORIGIN.sign)


def _receiver() -> Reports:
    r = Reports(ME, now=0.0, timing=PictureTiming(expire_after=1e9))
    r.attach(_View())  # type: ignore[arg-type]
    for i, peer in enumerate(IDS[1:]):
        r.peer_up(peer, i, 0.0, PeerFacts(deltas=True))
    return r


def _per(n: int, step: Callable[[int], Any]) -> float:
    t = time.process_time()
    for i in range(n):
        step(i)
    return (time.process_time() - t) / n * 1e6


def run(n: int) -> dict[str, float]:
    rows = [_stat(p) for p in IDS if p != ORIGIN.node_id]
    changed = [_stat(p, "suspect" if j == 5 else "alive") for j, p in enumerate(IDS) if p != ORIGIN.node_id]
    fulls: list[list[bytes]] = []
    deltas: list[list[bytes]] = []
    out = {
        "origin, full": _per(n, lambda i: fulls.append(encode(_signed(_report(1000 + 2 * i, rows))))),
        "origin, delta": _per(n, lambda i: deltas.append(encode(_signed(report_delta(  # type: ignore[arg-type]
            _report(1000 + 2 * i, rows), _report(1001 + 2 * i, changed), PictureTiming()))))),
    }
    r = _receiver()
    full_us = delta_us = 0.0
    for i in range(n):
        t0 = time.process_time()
        r.receive(ORIGIN.node_id, decode(fulls[i]), 1.0)
        t1 = time.process_time()
        r.receive(ORIGIN.node_id, decode(deltas[i]), 1.0)
        delta_us += time.process_time() - t1
        full_us += t1 - t0
    assert r.stats.reports_merged == n, r.stats
    out["receiver, full"] = full_us / n * 1e6
    out["receiver, delta"] = delta_us / n * 1e6
    relayed = [encode(replace(decode(f), sender=RELAY)) for f in fulls]  # type: ignore[type-var]
    r = _receiver()
    out["receiver, full relayed"] = _per(n, lambda i: r.receive(RELAY, decode(relayed[i]), 1.0))
    assert len(r.pictures.reports()) == 1
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reports", type=int, default=400, help="reports per step and repetition (default 400)")
    ap.add_argument("--reps", type=int, default=5, help="repetitions; the figure is their median (default 5)")
    args = ap.parse_args()
    runs = [run(args.reports) for _ in range(args.reps)]
    print(f"signed: {sign_raws is not None}; us of CPU per report, median of {args.reps}:")
    for name in runs[0]:
        print(f"  {name:24} {statistics.median(x[name] for x in runs):7.1f}")


if __name__ == "__main__":
    main()
