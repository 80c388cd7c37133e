"""A deterministic in-memory network for :class:`~huddle.protocol.Mesh` nodes.

Every node's actions are carried out on a simulated network with a simulated
clock: a ``Send`` is encoded to frames exactly as the ZeroMQ driver would and
delivered to the ROUTER of the node listening at the connection's endpoint
after ``latency`` seconds.  Nodes can be crashed, partitioned and restarted.
Used by the tests; no sockets, no sleeping.
"""

from __future__ import annotations

import contextlib
import heapq
import random
from collections.abc import Iterator
from dataclasses import dataclass, field

from .errors import DecodeError
from .ids import NodeId
from .protocol import Connect, Disconnect, Event, Mesh, Notify, Send, Timing
from .protocol.replication import MemoryStore, ReplicationTiming, Replicator
from .wire import Gsip, Message, Xmsg, decode, encode

__all__ = ["SimNetwork", "SimNode"]


@dataclass
class SimNode:
    mesh: Mesh
    events: list[Event] = field(default_factory=list)
    conns: dict[int, str] = field(default_factory=dict)
    up: bool = True
    clock_skew: float = 0.0
    store: MemoryStore | None = None

    @property
    def log(self) -> Replicator:
        assert self.mesh.replication is not None, "node was added without log=True"
        return self.mesh.replication


class SimNetwork:
    def __init__(
        self,
        *,
        latency: float = 0.001,
        seed: int = 0,
        loss: float = 0.0,
        duplicate: float = 0.0,
        jitter: float = 0.0,
        wire: bool = True,
    ) -> None:
        """``wire`` false hands messages over as objects, skipping the codec
        (faster, for large runs).  ``loss``, ``duplicate`` and ``jitter`` (extra random delay, which
        reorders) apply to the log's messages (XMSG, GSIP): ZeroMQ over TCP
        keeps one connection's messages in order and loses them only when a
        connection breaks or a queue fills, which these model."""
        self.now = 1_000_000.0
        self.latency = latency
        self.loss = loss
        self.duplicate = duplicate
        self.jitter = jitter
        self.wire = wire
        self.rng = random.Random(seed)
        self.nodes: dict[str, SimNode] = {}  # by endpoint
        self._queue: list[tuple[float, int, str, list[bytes] | Message]] = []
        self._counter = 0
        self.cut: set[frozenset[str]] = set()
        self.trace: list[tuple[str, str, Message]] | None = None  # (from, to, message) delivered, when recording
        self._next_port = 50000
        self._next_tick = self.now

    # ------------------------------------------------------------------ nodes

    def add(
        self,
        name: str,
        group: str = "",
        *,
        uuid: NodeId | None = None,
        timing: Timing | None = None,
        skew: float = 0.0,
        endpoint: str | None = None,
        log: bool = False,
        store: MemoryStore | None = None,
        log_timing: ReplicationTiming | None = None,
    ) -> SimNode:
        if endpoint is None:
            endpoint = f"tcp://10.0.0.1:{self._next_port}"
            self._next_port += 1
        node_id = uuid or NodeId(self.rng.randbytes(16))
        mesh = Mesh(
            node_id, name=name, group=group, endpoint=endpoint,
            incarnation=self.rng.randbytes(8).hex(), now=self.now + skew, timing=timing,
        )
        node = SimNode(mesh=mesh, clock_skew=skew)
        if log or store is not None:
            node.store = store if store is not None else MemoryStore()
            mesh.replication = Replicator(node_id, node.store, now=self.now + skew, timing=log_timing)
        self.nodes[endpoint] = node
        return node

    def restart(self, node: SimNode, *, lose_data: bool = False, rejoin: SimNode | None = None) -> SimNode:
        """Start a crashed node again: same UUID and store, or (``lose_data``) a
        new UUID and an empty store.  ``rejoin`` is a node to discover at once."""
        if node.up:
            self.crash(node)
        fresh = self.add(
            node.mesh.name, node.mesh.group,
            uuid=None if lose_data else node.mesh.uuid, timing=node.mesh.timing, skew=node.clock_skew,
            log=node.store is not None, store=None if lose_data else node.store,
            log_timing=None if node.mesh.replication is None else node.mesh.replication.timing,
        )
        if rejoin is not None:
            fresh.mesh.discovered(rejoin.mesh.uuid, rejoin.mesh.endpoint, self.local(fresh))
        return fresh

    def local(self, node: SimNode) -> float:
        return self.now + node.clock_skew

    def crash(self, node: SimNode) -> None:
        """The process dies: no GBYE, queued messages lost."""
        node.up = False
        del self.nodes[node.mesh.endpoint]

    def stop(self, node: SimNode) -> None:
        """Graceful stop: GBYE to everyone."""
        node.mesh.leave(self.local(node))
        self._run_actions(node)
        node.up = False
        del self.nodes[node.mesh.endpoint]

    def partition(self, a: SimNode, b: SimNode) -> None:
        self.cut.add(frozenset((a.mesh.endpoint, b.mesh.endpoint)))

    def heal(self) -> None:
        self.cut.clear()

    # -------------------------------------------------------------- stepping

    def deliver_raw(self, endpoint: str, frames: list[bytes] | Message, delay: float = 0.0) -> None:
        """Queue frames (or, without the codec, a message) for the node at ``endpoint``."""
        self._counter += 1
        heapq.heappush(self._queue, (self.now + delay, self._counter, endpoint, frames))

    def _run_actions(self, node: SimNode) -> None:
        for action in node.mesh.take_actions():
            if isinstance(action, Connect):
                node.conns[action.conn] = action.endpoint
            elif isinstance(action, Disconnect):
                node.conns.pop(action.conn, None)
            elif isinstance(action, Send):
                target = node.conns.get(action.conn)
                if target is None:
                    continue
                if frozenset((node.mesh.endpoint, target)) in self.cut:
                    continue
                msg = action.message
                payload: list[bytes] | Message = encode(msg) if self.wire else msg
                delay = self.latency
                if isinstance(msg, (Xmsg, Gsip)):
                    if self.loss and self.rng.random() < self.loss:
                        continue
                    if self.jitter:
                        delay += self.rng.random() * self.jitter
                    if self.duplicate and self.rng.random() < self.duplicate:
                        self.deliver_raw(target, payload, delay + self.rng.random() * max(self.jitter, self.latency))
                self.deliver_raw(target, payload, delay)
            elif isinstance(action, Notify):
                node.events.append(action.event)

    def run(self, seconds: float, step: float = 0.05) -> None:
        """Advance the clock by ``seconds``, delivering messages and ticking nodes."""
        end = self.now + seconds
        for node in list(self.nodes.values()):
            self._run_actions(node)
        next_tick = max(self._next_tick, self.now)
        while True:
            next_msg = self._queue[0][0] if self._queue else end + 1
            t = min(next_msg, next_tick)
            if t > end:
                break
            self.now = t
            if next_msg <= next_tick:
                _, _, endpoint, payload = heapq.heappop(self._queue)
                target = self.nodes.get(endpoint)
                if target is not None and target.up:
                    if isinstance(payload, list):
                        if self.trace is not None:
                            with contextlib.suppress(DecodeError):
                                msg = decode(payload)
                                self.trace.append((self._name_of(msg.sender), target.mesh.name, msg))
                        target.mesh.receive(payload, self.local(target))
                    else:
                        target.mesh.handle(payload, self.local(target))
                    self._run_actions(target)
            else:
                for node in list(self.nodes.values()):
                    node.mesh.tick(self.local(node))
                    self._run_actions(node)
                next_tick = t + step
        self._next_tick = next_tick
        self.now = end

    def _name_of(self, uuid: bytes) -> str:
        for node in self.nodes.values():
            if node.mesh.uuid == uuid:
                return node.mesh.name
        return "?"

    def settle(self, timeout: float, predicate: object) -> bool:
        """Run until ``predicate()`` is true or ``timeout`` simulated seconds pass."""
        assert callable(predicate)
        deadline = self.now + timeout
        while self.now < deadline:
            if predicate():
                return True
            self.run(0.05)
        return bool(predicate())


# --------------------------------------------------------------------------- scenarios


@dataclass
class ScenarioResult:
    seed: int
    converged: bool
    problems: list[str]
    events: int
    nodes: int
    sim_seconds: float
    stats: dict[str, int]
    rerun: str


def check_converged(nodes: list[SimNode]) -> list[str]:
    """Every live node holds exactly the same records, with no gaps; returns what differs."""
    problems: list[str] = []
    reference: dict[tuple[bytes, int], tuple[float, str, str]] | None = None
    ref_name = ""
    for node in nodes:
        assert node.store is not None
        log = node.log
        gaps = log.gaps()
        if gaps:
            problems.append(f"{node.mesh.name} has gaps: {dict(list(gaps.items())[:3])}")
        held = {
            (bytes(r.source), r.seq): (r.timestamp, r.kind, r.body)
            for r in node.store.all_records()
        }
        if len(held) != log.held():
            problems.append(f"{node.mesh.name} counts {log.held()} records but stores {len(held)}")
        if reference is None:
            reference, ref_name = held, node.mesh.name
            continue
        if held != reference:
            missing = len(reference.keys() - held.keys())
            extra = len(held.keys() - reference.keys())
            changed = sum(1 for k in held.keys() & reference.keys() if held[k] != reference[k])
            problems.append(
                f"{node.mesh.name} differs from {ref_name}: {missing} missing, {extra} extra, {changed} changed"
            )
    return problems


def run_scenario(
    *,
    seed: int,
    nodes: int = 8,
    events: int = 200,
    loss: float = 0.0,
    duplicate: float = 0.0,
    jitter: float = 0.0,
    partitions: int = 0,
    crashes: int = 0,
    settle: float = 60.0,
    export: str | None = None,
    export_format: str = "parquet",
    wire: bool = True,
) -> ScenarioResult:
    """Run one randomised scenario from ``seed`` and check the log invariants.

    Nodes join in a random order through random introducers; ``events`` are
    originated by random nodes at random times over a few seconds while
    ``partitions`` random cuts open and heal and ``crashes`` random nodes die
    (half of them losing their data, which gives them a new UUID) and restart.
    Then the network heals and traffic settles; every live node must hold
    exactly the same records, with no gaps, including every record a node
    persisted before it crashed with its data intact.
    """
    import json as _json

    rng = random.Random(seed)
    net = SimNetwork(seed=seed, latency=0.001 + rng.random() * 0.004, loss=loss, duplicate=duplicate, jitter=jitter,
                     wire=wire)
    fast = Timing(heartbeat_interval=0.5, suspect_after=1.5, gone_after=3.0, handshake_timeout=2.0)
    live = [net.add(f"n{i}", "sim", log=True, timing=fast) for i in range(nodes)]
    for i, node in enumerate(live[1:], 1):
        other = live[rng.randrange(i)]
        node.mesh.discovered(other.mesh.uuid, other.mesh.endpoint, net.now)
    duration = 5.0
    actions: list[tuple[float, str]] = [(rng.random() * duration, "event") for _ in range(events)]
    actions += [(rng.random() * duration, "partition") for _ in range(partitions)]
    actions += [(rng.random() * duration, "crash") for _ in range(crashes)]
    actions.sort()
    persisted: dict[tuple[bytes, int], str] = {}  # records of nodes whose data survives
    lost_uuids: set[bytes] = set()
    start = net.now
    for at, what in actions:
        net.run(max(0.0, start + at - net.now))
        if what == "event":
            node = rng.choice(live)
            local = net.local(node)
            body = _json.dumps({"n": rng.randrange(10**6)})
            rec = node.log.append(rng.choice(["score", "penalty", "lineup"]), body, local, node.mesh.mesh_time(local))
            persisted[(bytes(rec.source), rec.seq)] = body
        elif what == "partition":
            a, b = rng.sample(live, 2) if len(live) > 1 else (live[0], live[0])
            net.partition(a, b)
            heal_at = net.now + rng.random() * 4.0
            net.run(0.0)
            actions.append((heal_at - start, "heal"))
            actions.sort()
        elif what == "heal":
            net.heal()
        elif what == "crash" and len(live) > 1:
            victim = rng.choice(live)
            lose = rng.random() < 0.5
            net.crash(victim)
            live.remove(victim)
            if lose:
                lost_uuids.add(bytes(victim.mesh.uuid))
            net.run(rng.random() * 2.0)
            other = rng.choice(live)
            live.append(net.restart(victim, lose_data=lose, rejoin=other))
    net.heal()
    # Discovery keeps running in a real network (beacons): everyone hears everyone.
    def rediscover() -> None:
        for node in live:
            for other in live:
                if other is not node:
                    node.mesh.discovered(other.mesh.uuid, other.mesh.endpoint, net.local(node))
    deadline = net.now + settle
    problems = ["not run"]
    while net.now < deadline:
        rediscover()
        net.run(1.0)
        problems = check_converged(live)
        if not problems:
            break
    if not problems:
        # Everything a node persisted is present (a crash that kept the data loses nothing;
        # the records of a node that lost its data survive on the others, if any had them).
        held = {(bytes(r.source), r.seq): r.body for r in live[0].store.all_records()} if live[0].store else {}
        for key, body in persisted.items():
            if key[0] in lost_uuids:
                continue
            if held.get(key) != body:
                problems.append(f"persisted record {key[0].hex()[:8]}#{key[1]} is missing or changed")
                break
    if export is not None:
        export_nodes(live, export, export_format)
    stats: dict[str, int] = {}
    for node in live:
        for k, v in node.log.stats.as_dict().items():
            stats[k] = stats.get(k, 0) + v
    flags = f"--nodes {nodes} --events {events} --seed {seed}"
    if loss:
        flags += f" --loss {loss}"
    if partitions:
        flags += f" --partitions {partitions}"
    if crashes:
        flags += f" --crashes {crashes}"
    return ScenarioResult(
        seed=seed, converged=not problems, problems=problems, events=len(persisted), nodes=nodes,
        sim_seconds=net.now - start, stats=stats, rerun=f"huddle simulate {flags}",
    )


def export_nodes(nodes: list[SimNode], out: str, fmt: str = "parquet") -> None:
    """Write each node's log as ``huddle export`` would, one directory per node."""
    from pathlib import Path

    from .log.export import write_tables

    for node in nodes:
        store = node.store
        assert store is not None
        name = str(node.mesh.uuid)
        group_name = node.mesh.group

        def batches(store: MemoryStore = store, name: str = name, group_name: str = group_name) -> Iterator[
            list[dict[str, object]]
        ]:
            batch: list[dict[str, object]] = []
            for source in sorted(store.records):
                for seq in sorted(store.records[source]):
                    r = store.records[source][seq]
                    frm, at = store.receipts[(source, seq)]
                    batch.append({
                        "node": name, "group": group_name, "source": str(source), "seq": seq,
                        "timestamp": r.timestamp, "kind": r.kind, "body": r.body, "hops": r.hops,
                        "received_at": at, "received_from": None if frm is None else str(frm),
                    })
                    if len(batch) >= 10_000:
                        yield batch
                        batch = []
            if batch:
                yield batch

        write_tables(Path(out) / name, fmt, batches(), [])
