"""A deterministic in-memory network for :class:`~huddle.protocol.Mesh` nodes.

Every node's actions are carried out on a simulated network with a simulated
clock: a ``Send`` is encoded to frames exactly as the ZeroMQ driver would and
delivered to the ROUTER of the node listening at the connection's endpoint
after ``latency`` seconds.  Nodes can be crashed, partitioned and restarted.
Used by the tests; no sockets, no sleeping.
"""

from __future__ import annotations

import contextlib
import hashlib
import heapq
import math
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .doc import DocEngine, to_xml
from .errors import DecodeError
from .gcutil import few_collections
from .ids import NodeId
from .limits import LogLimits
from .log.export import event_schema, write_tables
from .posts.peer import PostsPeer
from .protocol import Commit, Connect, Disconnect, Event, Mesh, Notify, Send, Timing
from .protocol.core import CoreServices, build_services
from .protocol.delivery import Delivery, DeliveryTiming
from .protocol.events import LogAppended, ServiceEvent, stat_row
from .protocol.logchain import LogSigner
from .protocol.logstate import ReplicationTiming
from .protocol.logstore import MemoryStore, canonical_json
from .protocol.picture import FeatureFacts, Pictures, Reports
from .protocol.picture_compute import PictureTiming
from .protocol.replication import Replicator
from .security import NodeIdentity
from .simlog import Origin, RangeStore
from .wire import Dack, Dmsg, Gsip, LogRecord, Message, Xmsg, decode, encode

__all__ = ["SimNetwork", "SimNode"]


@dataclass
class SimNode:
    mesh: Mesh
    services: CoreServices  # what its mesh hosts, by name
    posts: PostsPeer | None = None  # posts' peer service (with a delivery timing: it rides on it)
    events: list[Event] = field(default_factory=list)
    handed: list[ServiceEvent] = field(default_factory=list)  # what services handed their drivers (posts)
    conns: dict[int, str] = field(default_factory=dict)
    up: bool = True
    clock_skew: float = 0.0
    store: MemoryStore | RangeStore | None = None

    @property
    def log(self) -> Replicator:
        log = self.services.replicator
        assert log is not None, "node was added without log=True"
        return log

    @property
    def delivery(self) -> Delivery:
        delivery = self.services.delivery
        assert delivery is not None, "node was added without a delivery timing"
        return delivery

    @property
    def reports(self) -> Reports:
        return self.services.reports

    @property
    def pictures(self) -> Pictures:
        return self.reports.pictures


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
        log_events: bool = True,
    ) -> None:
        """``wire`` false hands messages over as objects, skipping the codec
        (faster, for large runs); ``log_events`` false does not keep the nodes'
        ``LogAppended`` notifications (large runs).  ``loss``, ``duplicate`` and ``jitter`` (extra random delay, which
        reorders) apply to the log's and addressed messages (XMSG, GSIP, DMSG, DACK): ZeroMQ over TCP
        keeps one connection's messages in order and loses them only when a
        connection breaks or a queue fills, which these model."""
        self.now = 1_000_000.0
        self.latency = latency
        self.loss = loss
        self.duplicate = duplicate
        self.jitter = jitter
        self.wire = wire
        self.log_events = log_events
        self.rng = random.Random(seed)
        self.nodes: dict[str, SimNode] = {}  # by endpoint
        self._queue: list[tuple[float, int, str, list[bytes] | Message, str]] = []  # (at, n, to, payload, from)
        self._counter = 0
        self.cut: set[frozenset[str]] = set()
        self.one_way: set[tuple[str, str]] = set()  # (from, to) endpoints whose messages are dropped
        self.trace: list[tuple[str, str, Message]] | None = None  # (from, to, message) delivered, when recording
        self._next_port = 50000
        self._next_tick = self.now
        self.tick = 0.05  # how often every node's timers run, in simulated seconds
        self._keys: dict[NodeId, NodeIdentity] = {}  # each node's key, kept across its restarts

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
        store: MemoryStore | RangeStore | None = None,
        log_timing: ReplicationTiming | None = None,
        delivery: DeliveryTiming | None = None,
        node_type: str = "standard",
        picture: PictureTiming | None = None,
        rate: int = 0,
        log_signer: LogSigner | None = None,
        log_limits: LogLimits | None = None,
        facts: FeatureFacts | None = None,
    ) -> SimNode:
        if endpoint is None:
            # Each node on a host of its own, as on a real network: the mesh binds a
            # session to the address its HELO came from (protocol.md 8.6).
            k = self._next_port - 50000
            endpoint = f"tcp://10.0.{k // 250}.{k % 250 + 1}:{self._next_port}"
            self._next_port += 1
        # Every node has a key (data: drawn from the run's seed).  A new node takes the id its key
        # gives; a node added under a given UUID (a restart, a test's fixed id) keeps the key it had.
        if uuid is None:
            identity = NodeIdentity.from_seed(hashlib.blake2b(self.rng.randbytes(16), digest_size=32).digest())
            node_id = identity.node_id
        elif isinstance(log_signer, NodeIdentity) and log_signer.node_id == uuid:
            node_id, identity = uuid, log_signer  # the key that gives the id asked for
        else:
            node_id = uuid
            identity = self._keys.get(uuid) or NodeIdentity.from_seed(hashlib.blake2b(uuid, digest_size=32).digest())
        self._keys[node_id] = identity
        if log_signer is None and identity.node_id == node_id and not isinstance(store, RangeStore):
            # As a node does: it signs its records when its key gives its id.  A RangeStore (the
            # large runs' compressed log) keeps no chains, so its nodes stay unsigned.
            log_signer = identity
        if log and store is None:
            store = MemoryStore()
        posts = None if delivery is None else PostsPeer(node_id)  # Hydra's payloads ride on delivery
        services = build_services(node_id, now=self.now + skew, store=store, log_timing=log_timing,
                                  log_limits=log_limits, delivery=delivery, picture=picture, log_signer=log_signer,
                                  report_signer=identity, takers=() if posts is None else (posts,),
                                  extra=() if posts is None else (posts,), facts=facts)
        mesh = Mesh(
            node_id, name=name, group=group, endpoint=endpoint,
            incarnation=self.rng.randbytes(8).hex(), now=self.now + skew, timing=timing,
            node_type=node_type, rate=rate, services=services.all(), identity=identity,
        )
        node = SimNode(mesh=mesh, services=services, posts=posts, clock_skew=skew, store=store)
        self.nodes[endpoint] = node
        return node

    def restart(self, node: SimNode, *, lose_data: bool = False, rejoin: SimNode | None = None) -> SimNode:
        """Start a crashed node again: same UUID and store, or (``lose_data``) a
        new UUID and an empty store.  ``rejoin`` is a node to discover at once."""
        if node.up:
            self.crash(node)
        store = node.store
        if lose_data:
            store = RangeStore(store.origin) if isinstance(store, RangeStore) else None
        fresh = self.add(
            node.mesh.name, node.mesh.group, endpoint=self.same_host(node),
            uuid=None if lose_data else node.mesh.uuid, timing=node.mesh.timing, skew=node.clock_skew,
            log=node.store is not None, store=store,
            log_timing=None if node.store is None else node.log.timing,
            log_limits=None if node.store is None else node.log.limits,
            delivery=None if (d := node.services.delivery) is None else d.timing,
            node_type=node.mesh.node_type, picture=node.pictures.timing, rate=node.mesh.rate,
        )
        if rejoin is not None:
            fresh.mesh.discovered(rejoin.mesh.uuid, rejoin.mesh.endpoint, self.local(fresh))
        return fresh

    def same_host(self, node: SimNode) -> str:
        """A new endpoint on ``node``'s host: where its process listens after a restart."""
        host = node.mesh.endpoint.removeprefix("tcp://").rpartition(":")[0]
        self._next_port += 1
        return f"tcp://{host}:{self._next_port - 1}"

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

    def block(self, src: SimNode, dst: SimNode) -> None:
        """Drop everything ``src`` sends to ``dst`` (a firewall open one way
        only: ``dst`` still reaches ``src``)."""
        self.one_way.add((src.mesh.endpoint, dst.mesh.endpoint))

    def heal(self) -> None:
        self.cut.clear()
        self.one_way.clear()

    # -------------------------------------------------------------- stepping

    def deliver_raw(self, endpoint: str, frames: list[bytes] | Message, delay: float = 0.0, source: str = "") -> None:
        """Queue frames (or, without the codec, a message) for the node at ``endpoint``,
        arriving from the address ``source`` (a host, as ZeroMQ's Peer-Address gives it)."""
        self._counter += 1
        heapq.heappush(self._queue, (self.now + delay, self._counter, endpoint, frames, source))

    def _run_actions(self, node: SimNode) -> None:
        last: Message | None = None  # a message sent to several peers is encoded once, as the node does
        encoded: list[bytes] | Message = []
        host = node.mesh.endpoint.removeprefix("tcp://").rpartition(":")[0]
        for action in node.mesh.take_actions():
            if isinstance(action, Connect):
                node.conns[action.conn] = action.endpoint
            elif isinstance(action, Disconnect):
                node.conns.pop(action.conn, None)
            elif isinstance(action, Send):
                target = node.conns.get(action.conn)
                if target is None:
                    continue
                if frozenset((node.mesh.endpoint, target)) in self.cut or (node.mesh.endpoint, target) in self.one_way:
                    continue
                msg = action.message
                if msg is not last:
                    last, encoded = msg, encode(msg) if self.wire else msg
                payload = encoded
                delay = self.latency
                if isinstance(msg, (Xmsg, Gsip, Dmsg, Dack)):
                    if self.loss and self.rng.random() < self.loss:
                        continue
                    if self.jitter:
                        delay += self.rng.random() * self.jitter
                    if self.duplicate and self.rng.random() < self.duplicate:
                        self.deliver_raw(target, payload, delay + self.rng.random() * max(self.jitter, self.latency),
                                         host)
                self.deliver_raw(target, payload, delay, host)
            elif isinstance(action, Commit):
                action.store.commit()  # before the sends after it, as the driver does
            elif isinstance(action, Notify):
                event = action.event
                if isinstance(event, ServiceEvent):
                    node.handed.append(event)
                elif self.log_events or not isinstance(event, LogAppended):
                    node.events.append(event)

    def run(self, seconds: float, step: float | None = None) -> None:
        """Advance the clock by ``seconds``, delivering messages and ticking nodes
        every ``step`` (default :attr:`tick`) simulated seconds."""
        step = self.tick if step is None else step
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
                self._deliver_next()
            else:
                for node in list(self.nodes.values()):
                    node.mesh.tick(self.local(node))
                    self._run_actions(node)
                next_tick = t + step
        self._next_tick = next_tick
        self.now = end

    def _deliver_next(self) -> SimNode | None:
        """Hand the first queued message to its node (now); returns that node, if it is up."""
        _, _, endpoint, payload, source = heapq.heappop(self._queue)
        target = self.nodes.get(endpoint)
        if target is None or not target.up:
            return None
        if isinstance(payload, list):
            if self.trace is not None:
                with contextlib.suppress(DecodeError):
                    msg = decode(payload)
                    self.trace.append((self._name_of(msg.sender), target.mesh.name, msg))
            target.mesh.receive(payload, self.local(target), source)
        else:
            target.mesh.handle(payload, self.local(target), source)
        self._run_actions(target)
        return target

    def run_on_deadlines(self, seconds: float) -> dict[str, int]:
        """Advance the clock by ``seconds`` as the node's driver does (driver.py): each node's
        timers run when its mesh's ``next_deadline`` is due, asked after each of its ticks and
        each message it handles, instead of every fixed step as :meth:`run` does.  Returns how
        many times each node ticked, by name: what an idle node's wake-ups cost is counted so."""
        end = self.now + seconds
        due: dict[str, float] = {}  # endpoint -> simulated time of its next tick
        ticks: dict[str, int] = {}
        for endpoint, node in list(self.nodes.items()):
            self._run_actions(node)
            due[endpoint] = node.mesh.next_deadline(self.local(node)) - node.clock_skew
            ticks[node.mesh.name] = 0
        while True:
            next_msg = self._queue[0][0] if self._queue else math.inf
            endpoint, next_tick = min(due.items(), key=lambda item: item[1], default=("", math.inf))
            t = min(next_msg, next_tick)
            if t > end:
                break
            self.now = t
            if next_msg <= next_tick:
                target = self._deliver_next()
                if target is not None and target.mesh.endpoint in due:
                    soon = target.mesh.next_deadline(self.local(target)) - target.clock_skew
                    due[target.mesh.endpoint] = min(due[target.mesh.endpoint], soon)
                continue
            ticking = self.nodes.get(endpoint)
            if ticking is None or not ticking.up:
                del due[endpoint]
                continue
            ticking.mesh.tick(self.local(ticking))
            self._run_actions(ticking)
            ticks[ticking.mesh.name] += 1
            due[endpoint] = max(t + 1e-6, ticking.mesh.next_deadline(self.local(ticking)) - ticking.clock_skew)
        self.now = end
        return ticks

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
            self.run(self.tick)
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
    reference: dict[Any, Any] | None = None
    ref_name = ""
    for node in nodes:
        store = node.store
        assert store is not None
        log = node.log
        name = node.mesh.name
        gaps = log.gaps()
        if gaps:
            problems.append(f"{name} has gaps: {dict(list(gaps.items())[:3])}")
        held: dict[Any, Any]
        if isinstance(store, RangeStore):
            problems += [f"{name}: {c}" for c in store.conflicts[:3] + store.overlaps[:3]]
            held = store.holdings()
            count = store.count()
        else:
            held = {(bytes(r.source), r.seq): (r.timestamp, r.kind, r.body) for r in store.all_records()}
            count = len(held)
        if count != log.held():
            problems.append(f"{name} counts {log.held()} records but stores {count}")
        if reference is None:
            reference, ref_name = held, name
            continue
        if held != reference:
            differ = sorted(k for k in held.keys() | reference.keys() if held.get(k) != reference.get(k))
            first = differ[0]
            problems.append(
                f"{name} differs from {ref_name} at {len(differ)} keys, first {first!r}: "
                f"{held.get(first)!r} against {reference.get(first)!r}"
            )
    return problems


def sim_doc_op(r: LogRecord) -> dict[str, Any]:
    """The document operation a simulated event stands for (a function of its
    kind and sequence): jam starts, lineups, jam removals and text appends,
    which collide across sources and so exercise the ordering rules."""
    n = r.seq
    jam = {"period": 1 + (n // 7) % 2, "jam": 1 + n % 5}
    if r.kind == "score":
        return {"op": "set", "to": jam, "attribute": "start", "value": str(n)}
    if r.kind == "lineup":
        return {"op": "add", "to": jam, "children": [{"tag": "lineup", "attrs": {"number": str(n % 30)}}]}
    if n % 4 == 0:
        return {"op": "remove", "to": jam}
    return {"op": "add", "to": {"team": "home"}, "text": r.source.short[:1]}


def check_documents(nodes: list[SimNode], seed: int) -> list[str]:
    """Every node's bout document, built from its records delivered in its own
    random order with duplicates, is the same XML."""
    rng = random.Random(seed)
    reference: str | None = None
    for node in nodes:
        store = node.store
        assert isinstance(store, RangeStore)
        records = [store.origin.record(s, q) for s in store.segments for a, b in store.ranges(s)
                   for q in range(a, b + 1)]
        records += rng.sample(records, len(records) // 5)
        rng.shuffle(records)
        engine = DocEngine()
        for r in records:
            engine.add(LogRecord(r.source, r.seq, r.timestamp, "doc", canonical_json(sim_doc_op(r)), r.hops))
        xml = to_xml(engine.document.root, eids=True)
        if reference is None:
            reference = xml
        elif xml != reference:
            return [f"{node.mesh.name}'s document differs from {nodes[0].mesh.name}'s"]
    return []


# Documents are compared after runs of up to this many events.
DOC_CHECK_MAX = 20_000
# Large runs originate events in this many bursts (each a RecordRun) instead of one by one.
MAX_APPENDS = 2000


def run_scenario(
    *,
    seed: int,
    nodes: int = 8,
    events: int = 200,
    appends: int | None = None,
    loss: float = 0.0,
    duplicate: float = 0.0,
    jitter: float = 0.0,
    partitions: int = 0,
    crashes: int = 0,
    settle: float = 60.0,
    export: str | None = None,
    export_format: str = "parquet",
    wire: bool = True,
    progress: Callable[[str], None] | None = None,
) -> ScenarioResult:
    """Run one randomised scenario from ``seed`` and check the log invariants.

    Nodes join in a random order through random introducers; ``events`` are
    originated by random nodes at random times over a few seconds, in
    ``appends`` bursts (default: one by one up to 2000 events, else 2000
    bursts of random sizes), while ``partitions`` random cuts open and heal
    and ``crashes`` random nodes die (half of them losing their data, which
    gives them a new UUID) and restart.  Then the network heals and traffic
    settles; every live node must hold exactly the same records, with no
    gaps, including every record of a node whose data survived.
    """
    with few_collections():
        return _run_scenario(
            seed=seed, nodes=nodes, events=events, appends=appends, loss=loss, duplicate=duplicate,
            jitter=jitter, partitions=partitions, crashes=crashes, settle=settle, export=export,
            export_format=export_format, wire=wire, progress=progress,
        )


def _run_scenario(
    *,
    seed: int,
    nodes: int,
    events: int,
    appends: int | None,
    loss: float,
    duplicate: float,
    jitter: float,
    partitions: int,
    crashes: int,
    settle: float,
    export: str | None,
    export_format: str,
    wire: bool,
    progress: Callable[[str], None] | None,
) -> ScenarioResult:
    say = progress or (lambda _text: None)
    rng = random.Random(seed)
    if appends is None:
        appends = min(events, MAX_APPENDS)
    appends = max(0, min(appends, events))
    net = SimNetwork(seed=seed, latency=0.001 + rng.random() * 0.004, loss=loss, duplicate=duplicate, jitter=jitter,
                     wire=wire, log_events=events <= 100_000)
    if nodes > 50:
        net.tick = 0.2  # the timers are in tenths of seconds; ticking 200 nodes 20 times a second costs
    origin = Origin()
    fast = Timing(heartbeat_interval=0.5, suspect_after=1.5, gone_after=3.0, handshake_timeout=2.0)
    # Bursts go in XMSGs as large as the message size allows, not the node's 500 records (kept for latency).
    log_timing = None if appends == events else ReplicationTiming(batch_records=10_000)
    live = [net.add(f"n{i}", "sim", store=RangeStore(origin), timing=fast, log_timing=log_timing)
            for i in range(nodes)]
    for i, node in enumerate(live[1:], 1):
        other = live[rng.randrange(i)]
        node.mesh.discovered(other.mesh.uuid, other.mesh.endpoint, net.now)
    duration = 5.0
    if appends == events:
        sizes = [1] * events
    else:
        cuts = sorted(rng.sample(range(1, events), appends - 1)) if appends > 1 else []
        sizes = [b - a for a, b in zip([0, *cuts], [*cuts, events], strict=True)]
    actions: list[tuple[float, str, int]] = [(rng.random() * duration, "event", n) for n in sizes]
    actions += [(rng.random() * duration, "partition", 0) for _ in range(partitions)]
    actions += [(rng.random() * duration, "crash", 0) for _ in range(crashes)]
    actions.sort()
    lost_uuids: set[bytes] = set()
    start = net.now
    originated = 0
    for at, what, n in actions:
        net.run(max(0.0, start + at - net.now))
        if what == "event":
            node = rng.choice(live)
            local = net.local(node)
            stamp = node.mesh.mesh_time(local)
            run = origin.register(node.mesh.uuid, node.log.next_seq, n, stamp)
            if n == 1:  # one by one, as a real node does
                r = run[0]
                node.log.append(r.kind, r.body, local, stamp)
            else:
                node.log.append_run(run, local)
            originated += n
        elif what == "partition":
            a, b = rng.sample(live, 2) if len(live) > 1 else (live[0], live[0])
            net.partition(a, b)
            heal_at = net.now + rng.random() * 4.0
            net.run(0.0)
            actions.append((heal_at - start, "heal", 0))
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
    say(f"originated {originated} events; {net.now - start:.1f} simulated s")
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
    say(f"{'settled' if not problems else 'did not settle'} after {net.now - start:.1f} simulated s")
    if not problems:
        # Everything a node persisted is present (a crash that kept the data loses nothing;
        # the records of a node that lost its data survive on the others, if any had them).
        store = live[0].store
        assert isinstance(store, RangeStore)
        for source in origin.sources():
            if bytes(source) not in lost_uuids and store.ranges(source) != [(1, origin.top(source))]:
                problems.append(f"{source.short}: persisted 1..{origin.top(source)}, "
                                f"but the nodes hold {store.ranges(source)}")
        if events <= DOC_CHECK_MAX:
            problems += check_documents(live, seed)
    if export is not None:
        export_nodes(live, export, export_format)
        say(f"exported {len(live)} nodes' logs to {export}")
    stats: dict[str, int] = {}
    for node in live:
        for k, v in node.log.stats.as_dict().items():
            stats[k] = stats.get(k, 0) + v
    flags = f"--nodes {nodes} --events {events} --seed {seed}"
    if appends != min(events, MAX_APPENDS):
        flags += f" --appends {appends}"
    if loss:
        flags += f" --loss {loss}"
    if duplicate:
        flags += f" --duplicate {duplicate}"
    if jitter:
        flags += f" --jitter {jitter}"
    if partitions:
        flags += f" --partitions {partitions}"
    if crashes:
        flags += f" --crashes {crashes}"
    return ScenarioResult(
        seed=seed, converged=not problems, problems=problems, events=originated, nodes=nodes,
        sim_seconds=net.now - start, stats=stats, rerun=f"huddle simulate {flags}",
    )


def export_nodes(nodes: list[SimNode], out: str, fmt: str = "parquet") -> int:
    """Write each node's log as ``huddle export`` would, one directory per node;
    returns the number of rows.  A simulated log is written column-wise, so
    millions of rows cost no Python object each."""
    total = 0
    for node in nodes:
        name = str(node.mesh.uuid)
        store = node.store
        stats = [
            {"node": name, "group": node.mesh.group, "ts": ts, "event": kind,
             "peer": None if peer is None else str(peer), "detail": detail}
            for ts, kind, peer, detail in filter(None, map(stat_row, node.events))
        ]
        if isinstance(store, RangeStore):
            batches: Iterator[Any] = _range_tables(store, name, node.mesh.group)
        else:
            assert store is not None
            batches = iter([_memory_rows(store, name, node.mesh.group)])
        total += write_tables(Path(out) / name, fmt, batches, stats)
    return total


def _memory_rows(store: MemoryStore, node: str, group: str) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for source in sorted(store.records):
        for seq in sorted(store.records[source]):
            r = store.records[source][seq]
            frm, at = store.receipts[(source, seq)]
            rows.append({
                "node": node, "group": group, "source": str(source), "seq": seq,
                "timestamp": r.timestamp, "kind": r.kind, "body": r.body, "hops": r.hops,
                "received_at": at, "received_from": None if frm is None else str(frm),
            })
    return rows


def _range_tables(store: RangeStore, node: str, group: str, rows: int = 1_000_000) -> Iterator[Any]:
    """Arrow tables of at most ``rows`` rows, one segment piece at a time."""
    import pyarrow as pa  # noqa: PLC0415 - pyarrow: deferred, only an export needs it

    schema = event_schema()
    for source in sorted(store.segments):
        for seg in store.segments[source]:
            for first in range(seg.first, seg.last + 1, rows):
                last = min(seg.last, first + rows - 1)
                n = last - first + 1
                cols = store.origin.columns(source, first, last)
                yield pa.table({
                    "node": pa.repeat(pa.scalar(node), n),
                    "group": pa.repeat(pa.scalar(group), n),
                    "source": pa.repeat(pa.scalar(str(source)), n),
                    "seq": cols["seq"],
                    "timestamp": cols["timestamp"],
                    "kind": cols["kind"],
                    "body": cols["body"],
                    "hops": pa.repeat(pa.scalar(seg.hops, pa.int32()), n),
                    "received_at": pa.repeat(pa.scalar(seg.received_at, pa.float64()), n),
                    "received_from": pa.repeat(pa.scalar(
                        None if seg.received_from is None else str(seg.received_from), pa.string()), n),
                }, schema=schema)
