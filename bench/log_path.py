#!/usr/bin/env python3
"""The signed log's hot paths in one process, without ZeroMQ or asyncio: CPU
time per event of an origin and of a receiver, to compare changes to the log
quickly (``log_throughput.py`` needs three processes and a quiet machine).

* origin:   ``Replicator.append_many`` of ``--batch`` events (bodies through
            ``canonical_json``, as ``Node.emit_many`` does), ``take_actions``
            (stage, sign a head per 500) and its commit (synchronous=FULL), and
            ``encode_parts`` of each XMSG once (two peers share it, as in the
            driver).  A real ``SqliteStore`` in a temporary directory.
* receiver: ``decode`` of those frames, ``Replicator.receive`` (strict record
            checks, the chain and one signature per batch verified, staged),
            ``take_actions`` and the commit it hands out.

Each repetition uses fresh stores; figures are thread CPU time
(``time.thread_time``) per event, medians over ``--reps``.  Put the tree to
measure first on ``PYTHONPATH``.
"""

from __future__ import annotations

import argparse
import inspect
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, ClassVar

from huddle.log import SqliteStore
from huddle.protocol.replication import Replicator
from huddle.security import NodeIdentity
from huddle.wire import decode, encode_parts

try:
    from huddle.protocol.logstore import canonical_json
except ImportError:  # a tree from before the store contract had a module of its own
    from huddle.protocol.replication import canonical_json  # type: ignore[attr-defined,no-redef]


class _View:
    excluded: ClassVar[dict[Any, str]] = {}

    def mesh_time(self, now: float) -> float:
        return now

    def end_incarnation(self, peer: Any, reason: str, now: float) -> bool:
        raise AssertionError(f"excluded {peer}: {reason}")


def carry_out(actions: list[Any]) -> list[Any]:
    """Commit as the driver does (a tree whose replicator commits itself hands out no Commit)."""
    for action in actions:
        store = getattr(action, "store", None)
        if store is not None:
            store.commit()
    return actions


def body_of(i: int) -> dict[str, Any]:
    """log_throughput.py's event body: about 70 octets of canonical JSON."""
    return {"jam": i // 1000, "skater": f"{i % 97:02d}", "code": "X", "i": i, "note": "penalty box"}


def one(n: int, batch: int, tmp: Path) -> tuple[float, float]:
    origin_id, peer_id, other_id = NodeIdentity.generate(), NodeIdentity.generate(), NodeIdentity.generate()
    a, b = origin_id.node_id, peer_id.node_id
    origin = Replicator(a, SqliteStore(tmp / "origin.db", "g"), now=0.0, signer=origin_id)
    origin.attach(_View())  # type: ignore[arg-type]
    origin.peer_up(b, 1, 0.0)
    origin.peer_up(other_id.node_id, 2, 0.0)
    carry_out(origin.take_actions())
    batches = [[("bench.tick", body_of(i)) for i in range(j + 1, min(n, j + batch) + 1)] for j in range(0, n, batch)]
    frames: list[list[bytes]] = []
    # Node.emit_many says its bodies are canonical_json's (where append_many can be told so).
    told = {"canonical": True} if "canonical" in inspect.signature(origin.append_many).parameters else {}
    sender = bytes(a)
    t0 = time.thread_time()
    for events in batches:
        origin.append_many([(kind, canonical_json(body)) for kind, body in events], 1.0, 1000.0, **told)
        last = None
        for action in carry_out(origin.take_actions()):
            msg = getattr(action, "message", None)
            if msg is not None and msg is not last:
                last = msg
                parts = encode_parts(msg)
                if parts[0] == b"XMSG":
                    frames.append([sender, *parts])
    t_origin = time.thread_time() - t0

    peer = Replicator(b, SqliteStore(tmp / "peer.db", "g"), now=0.0, signer=peer_id)
    peer.attach(_View())  # type: ignore[arg-type]
    peer.peer_up(a, 1, 0.0)
    carry_out(peer.take_actions())
    t0 = time.thread_time()
    for f in frames:
        peer.receive(a, decode(f), 2.0)
        carry_out(peer.take_actions())
    t_peer = time.thread_time() - t0
    assert peer.sources[a].contig == n, (peer.sources[a], peer.stats)
    assert peer.stats.forgeries == 0
    return t_origin / n * 1e6, t_peer / n * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=100_000, help="events per repetition (default 100000)")
    ap.add_argument("--batch", type=int, default=500, help="events per append_many call (default 500)")
    ap.add_argument("--reps", type=int, default=5, help="repetitions, each on fresh stores (default 5)")
    args = ap.parse_args()
    origin, peer = [], []
    for _ in range(args.reps):
        with tempfile.TemporaryDirectory(prefix="huddle-logpath-") as tmp:
            o, p = one(args.events, args.batch, Path(tmp))
        origin.append(o)
        peer.append(p)
        print(f"origin {o:5.2f} us/event   receiver {p:5.2f} us/event", flush=True)
    print(f"MEDIAN origin {statistics.median(origin):.2f} us/event, receiver {statistics.median(peer):.2f} us/event "
          f"({args.events} events, batches of {args.batch}, {args.reps} reps)")


if __name__ == "__main__":
    main()
