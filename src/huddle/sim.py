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
from dataclasses import dataclass, field

from .errors import DecodeError
from .ids import NodeId
from .protocol import Connect, Disconnect, Event, Mesh, Notify, Send, Timing
from .protocol.replication import MemoryStore, ReplicationTiming, Replicator
from .wire import Message, decode, encode

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
    ) -> None:
        """``loss``, ``duplicate`` and ``jitter`` (extra random delay, which
        reorders) apply to the log's messages (XMSG, GSIP): ZeroMQ over TCP
        keeps one connection's messages in order and loses them only when a
        connection breaks or a queue fills, which these model."""
        self.now = 1_000_000.0
        self.latency = latency
        self.loss = loss
        self.duplicate = duplicate
        self.jitter = jitter
        self.rng = random.Random(seed)
        self.nodes: dict[str, SimNode] = {}  # by endpoint
        self._queue: list[tuple[float, int, str, list[bytes]]] = []
        self._counter = 0
        self.cut: set[frozenset[str]] = set()
        self.trace: list[tuple[str, str, Message]] | None = None  # (from, to, message) delivered, when recording
        self._next_port = 50000

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

    def deliver_raw(self, endpoint: str, frames: list[bytes], delay: float = 0.0) -> None:
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
                frames = encode(action.message)
                delay = self.latency
                if frames[1] in (b"XMSG", b"GSIP"):
                    if self.loss and self.rng.random() < self.loss:
                        continue
                    if self.jitter:
                        delay += self.rng.random() * self.jitter
                    if self.duplicate and self.rng.random() < self.duplicate:
                        self.deliver_raw(target, frames, delay + self.rng.random() * max(self.jitter, self.latency))
                self.deliver_raw(target, frames, delay)
            elif isinstance(action, Notify):
                node.events.append(action.event)

    def run(self, seconds: float, step: float = 0.05) -> None:
        """Advance the clock by ``seconds``, delivering messages and ticking nodes."""
        end = self.now + seconds
        for node in list(self.nodes.values()):
            self._run_actions(node)
        next_tick = self.now
        while True:
            next_msg = self._queue[0][0] if self._queue else end + 1
            t = min(next_msg, next_tick)
            if t > end:
                break
            self.now = t
            if next_msg <= next_tick:
                _, _, endpoint, frames = heapq.heappop(self._queue)
                target = self.nodes.get(endpoint)
                if target is not None and target.up:
                    if self.trace is not None:
                        with contextlib.suppress(DecodeError):
                            msg = decode(frames)
                            self.trace.append((self._name_of(msg.sender), target.mesh.name, msg))
                    target.mesh.receive(frames, self.local(target))
                    self._run_actions(target)
            else:
                for node in list(self.nodes.values()):
                    node.mesh.tick(self.local(node))
                    self._run_actions(node)
                next_tick = t + step
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
