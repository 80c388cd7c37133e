"""The composition root: one node = mesh state machine + ZeroMQ + discovery + API.

The driver is thin: it turns socket readiness and timers into calls on
:class:`~huddle.protocol.Mesh` and carries out the actions it returns.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import logging
import os
import resource
import signal
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .config import NodeConfig, parse_hostport
from .discovery import BeaconService, Interface, InterfaceAbsent, resolve_interface
from .discovery.interfaces import LOOPBACK, ipv4_interfaces
from .discovery.watch import Back, InterfaceWatch, Lost, Moved, WatchDecision
from .doc import DOC_KIND, DocEngine, OperationError, digest, jams
from .doc.engine import Key
from .errors import ConfigError, CutOffReadOnly, DataDirLocked, LocalProtocolError
from .guests.choice import HostLinks
from .guests.room import Room
from .ids import NodeId
from .log import SqliteStore
from .log.integrity import LogGuard
from .posts.model import Policy
from .posts.service import PostService, PostSettings
from .posts.store import PostStore
from .protocol import Connect, Disconnect, Event, Mesh, Notify, PeerInfo, Send
from .protocol.delivery import BufferFull, Delivery
from .protocol.events import BufferSpace, Counters, CutOff, LogAppended, PeerExcluded, stat_row
from .protocol.picture import Reports
from .protocol.replication import Replicator, canonical_json
from .protocol.stack import build_services
from .security import NOT_WIRED, OPEN_GROUP, NodeIdentity, load_or_create_identity
from .transport.naming import NamingClient
from .transport.zmq_transport import ZmqTransport
from .wire import LogRecord, encode_parts

if TYPE_CHECKING:
    from .discovery.mdns import MdnsService
    from .guests.server import GuestServer

__all__ = ["DataDir", "Node", "run_node"]

GUEST_KEY = "noam_guest"  # a guest's event in the log: {"noam_guest": name, "value": value}

log = logging.getLogger("huddle.node")

# A sender waits (async) while a peer's overflow queue is above this many messages.
BACKPRESSURE = 20_000
# How often the node writes a snapshot of its counters to its statistics rows.
STATS_INTERVAL = 10.0
# A ``document`` statistics row (the digest of the bout document as the node shows it) is written
# when the document changed, at most this often, and when the node stops.  A big document is
# digested less often: at most this share of the node's time goes to it.
DOC_ROW_INTERVAL = 10.0
DOC_ROW_SHARE = 0.01
# After a turn of the timer loop failed, the next comes this much later (no busy loop).
TICK_RETRY = 0.05
# How often the node looks at its interface's addresses (ifaddr), and at an --interface not there yet.
INTERFACE_POLL = 1.0


@dataclass(slots=True)
class DriverStats(Counters):
    """Failures the driver survived: an action it could not carry out (encode,
    send, connect), a received message whose handling raised, a turn of the
    timer loop that raised.  Each is counted, logged (rarely), and the node goes on."""

    action_failures: int = 0
    receive_failures: int = 0
    tick_failures: int = 0
    network_failures: int = 0  # following the interface failed (a bind, a discovery socket): retried
    address_changes: int = 0  # the interface's address changed: rebound, peers told, re-announced
    interface_lost: int = 0  # the interface had no IPv4 address any more
    interface_back: int = 0  # ... and then had the same one again


# The message types counted one by one in TrafficStats (docs/protocol.md 3); a received
# frame of any other type (malformed: it is dropped) is counted under OTHER_TRAFFIC.
TRAFFIC_TYPES = (b"HELO", b"PEER", b"MEMB", b"BOUT", b"GBYE", b"BEAT", b"TIME", b"RAWS", b"GSIP", b"XMSG",
                 b"CHAT", b"DMSG", b"DACK", b"BULK")
OTHER_TRAFFIC = b"other"


def _by_type() -> dict[bytes, int]:
    return dict.fromkeys((*TRAFFIC_TYPES, OTHER_TRAFFIC), 0)


@dataclass(slots=True)
class TrafficStats:
    """Octets of the mesh's messages, sent and received, by message type: what the
    heartbeats, the membership gossip and the log's replication each cost.  A message's
    octets are those of its frames after the sender's identity (type, body, and a BULK's
    head and data); sent counts what the transport accepted (the driver adds to
    ``sent`` itself, with a message's size worked out once however many peers it goes
    to).  Received types are a fixed set: an unknown type a peer sends is counted under
    ``other``, so a flood of made-up types cannot grow the table.  One dict increment
    per message."""

    sent: dict[bytes, int] = field(default_factory=_by_type)
    received: dict[bytes, int] = field(default_factory=_by_type)

    def count_received(self, frames: list[bytes]) -> None:
        """``frames`` as the ROUTER handed them over: the sender's identity first."""
        kind = frames[1] if len(frames) > 1 else b""
        octets = sum(map(len, frames)) - len(frames[0])
        received = self.received
        if kind in received:
            received[kind] += octets
        else:
            received[OTHER_TRAFFIC] += octets

    def as_dict(self) -> dict[str, dict[str, int]]:
        return {"sent": {k.decode(): v for k, v in self.sent.items()},
                "received": {k.decode(): v for k, v in self.received.items()}}


class DataDir:
    """A node's directory: its persistent UUID and a lock against sharing."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock_fd: int | None = None

    def lock(self) -> None:
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"cannot create data dir {self.path}: {exc.strerror}") from None
        lock_path = self.path / "lock"
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise DataDirLocked(
                f"data dir {self.path} is in use by another huddle node (pid {holder}); "
                "give each node its own --data-dir"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._lock_fd = fd

    def unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def excluded(self) -> dict[NodeId, str]:
        """The nodes this node excluded, from ``excluded.json`` (kept for good)."""
        path = self.path / "excluded.json"
        if not path.exists():
            return {}
        try:
            raw = json.loads(path.read_text())
            return {NodeId.from_hex(k): str(v) for k, v in raw.items()}
        except (ValueError, AttributeError) as exc:
            raise ConfigError(f"{path} is corrupt ({exc}); fix or remove it (it lists excluded nodes)") from None

    def save_excluded(self, excluded: dict[NodeId, str]) -> None:
        path = self.path / "excluded.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({str(k): v for k, v in sorted(excluded.items())}, indent=1) + "\n")
        os.replace(tmp, path)

    def node_id(self) -> NodeId:
        """The UUID kept in ``node-id``; created on first use."""
        path = self.path / "node-id"
        if path.exists():
            text = path.read_text().strip()
            try:
                return NodeId.from_hex(text)
            except ValueError:
                raise ConfigError(f"{path} is corrupt ({text[:40]!r}); remove it to take a new UUID") from None
        node_id = NodeId.random()
        tmp = path.with_suffix(".tmp")
        tmp.write_text(f"{node_id}\n")
        os.replace(tmp, path)
        return node_id


Listener = Callable[[Event], None]


class Node:
    """A running huddle node.  Create, then ``await node.run()``."""

    def __init__(self, config: NodeConfig) -> None:
        self.config = config
        self.node_type = config.type_spec()
        self.data_dir = DataDir(config.data_dir)
        self.uuid: NodeId | None = None
        self.identity: NodeIdentity | None = None  # the node's keypair (DATA_DIR/node.key)
        self._mesh: Mesh | None = None
        self._store: SqliteStore | None = None
        self._guard: LogGuard | None = None  # the log's start-up check and own-sequence mark
        self._log: Replicator | None = None
        self._transport: ZmqTransport | None = None
        self._beacon: BeaconService | None = None
        self._mdns: MdnsService | None = None
        self._naming: NamingClient | None = None
        self._guests: GuestServer | None = None
        self._host_links: HostLinks | None = None  # with --guests: which connections to peers are down
        self._posts: PostService | None = None
        self.interface: Interface | None = None
        self._port = 0  # the ROUTER's port
        self._announce_due = False  # re-announcing after a network change failed: try again
        self.api_url: str | None = None
        self._listeners: list[Listener] = []
        self.doc = DocEngine()  # the bout document, made from the log's "doc" events
        self._doc_row_of: tuple[int, int] | None = None  # (engine, events) of the last document row
        self._doc_row_due = 0.0  # local time before which no document row is written
        self._space: dict[NodeId, asyncio.Event] = {}  # set when a full send buffer has room again
        self._stop = asyncio.Event()
        self._ready = asyncio.Event()
        self._base = time.time() - time.monotonic()
        self.started_at = 0.0
        self.driver_stats = DriverStats()
        self.traffic = TrafficStats()

    # ----------------------------------------------------------------- clock

    def local_now(self) -> float:
        """Local clock: monotonic, aligned with the wall clock at start-up."""
        return time.monotonic() + self._base

    def mesh_time(self) -> float:
        return self.mesh.mesh_time(self.local_now())

    @property
    def mesh(self) -> Mesh:
        if self._mesh is None:
            raise LocalProtocolError("the node is not running")
        return self._mesh

    # ------------------------------------------------------------ public API

    def add_listener(self, fn: Listener) -> Callable[[], None]:
        """Call ``fn(event)`` for every event; returns a function that removes it."""
        self._listeners.append(fn)
        return lambda: self._listeners.remove(fn) if fn in self._listeners else None

    def peers(self) -> list[PeerInfo]:
        return self.mesh.peers(self.local_now())

    def info(self) -> dict[str, Any]:
        mesh = self.mesh
        stats: dict[str, Any] = dict(mesh.stats.as_dict())
        if self._transport is not None:
            stats["send_dropped"] = self._transport.send_dropped
        stats["foreign_by_address"] = dict(mesh.blamed)
        if self._beacon is not None:
            stats["beacons"] = dict(self._beacon.stats)
        if self._mdns is not None:
            stats["mdns"] = dict(self._mdns.stats)
        if self._naming is not None:
            stats["naming"] = self._naming.stats.as_dict()
        reports, delivery = mesh.service(Reports), mesh.service(Delivery)
        if reports is not None:
            stats.update(reports.stats.as_dict())
        if delivery is not None:
            stats["delivery"] = delivery.stats.as_dict()
        stats["driver"] = self.driver_stats.as_dict()
        stats["traffic"] = self.traffic.as_dict()
        return {
            "uuid": str(mesh.uuid),
            "name": mesh.name,
            "group": mesh.group,
            "key": None if self.identity is None else self.identity.fingerprint,
            "public_key": None if self.identity is None else self.identity.public_key.hex(),
            "security": {"mode": "open", "warning": OPEN_GROUP},  # the only mode until issue 22 step 2
            "endpoint": mesh.endpoint,
            "time": self.mesh_time(),
            "clock_offset": mesh.offset,
            "clock_source": None if mesh.synced_with is None else str(mesh.synced_with),
            "started_at": self.started_at,
            "type": self.node_type.name,
            "on_cut_off": self.node_type.on_cut_off,
            "cut_off": mesh.cut_off,
            "read_only": self.read_only,
            "guests": None if self._guests is None else self._guests.ports(),
            "stats": stats,
        }

    def system(self) -> dict[str, Any]:
        """The system picture as this node computes it (same reports, same digest
        on every node), with round trips and rates beside it."""
        mesh = self.mesh
        now = self.local_now()
        reports = mesh.service(Reports)
        assert reports is not None
        return {"node": str(mesh.uuid), "time": self.mesh_time(), **reports.pictures.describe(now)}

    def chat(self, text: str, to: NodeId | None = None) -> int:
        """Send a chat line now; returns the number of peers it went to."""
        n = self.mesh.chat(text, self.local_now(), to)
        self._execute()
        return n

    async def send_chat(self, text: str, to: NodeId | None = None, timeout: float = 5.0) -> int:
        """Like :meth:`chat`, but waits while a peer's send queue is long, so a
        fast sender loses nothing; a peer that stays full for ``timeout`` is skipped."""
        n = self.chat(text, to)
        transport = self._transport
        if transport is not None and transport.any_backlog():
            targets = [to] if to is not None else self.mesh.alive_peers()
            for peer in targets:
                conn = self.mesh.conn_of(peer)
                if conn is not None and transport.backlog(conn) >= BACKPRESSURE:
                    await transport.wait_drained(conn, BACKPRESSURE // 2, timeout)
        return n

    # ---------------------------------------------------------- the event log

    @property
    def log(self) -> Replicator:
        if self._log is None:
            raise LocalProtocolError("the node is not running")
        return self._log

    @property
    def store(self) -> SqliteStore:
        if self._store is None:
            raise LocalProtocolError("the node is not running")
        return self._store

    @property
    def read_only(self) -> bool:
        """True while a read-only node type (e.g. console) is cut off."""
        return self.node_type.on_cut_off == "read-only" and self._mesh is not None and self._mesh.cut_off

    def _check_writable(self) -> None:
        if self.read_only:
            raise CutOffReadOnly(
                f"this {self.node_type.name} node is cut off from the group and read-only until a peer is back; "
                "nothing was recorded")

    def emit(self, kind: str, body: Any) -> LogRecord:
        """Record an event of this node: persisted, then sent to every peer.
        ``body`` is any JSON value.  Returns the record (source, seq, ...).
        Raises CutOffReadOnly on a read-only node type while cut off."""
        self._check_writable()
        # Checked whole (text, JSON, size, sequence) before it is recorded: a
        # LocalProtocolError here means nothing was.
        record = self.log.append(kind, self._body_text(body, 1), self.local_now(), self.mesh_time())
        self._execute()  # commits before anything is sent or returned
        return record

    def _body_text(self, body: Any, events: int) -> str:
        try:
            return canonical_json(body)
        except LocalProtocolError:
            self.log.stats.events_refused += events
            raise

    def emit_many(self, events: list[tuple[str, Any]]) -> list[LogRecord]:
        """Record several events in one transaction and as few messages as possible."""
        self._check_writable()
        now, stamp = self.local_now(), self.mesh_time()
        records = self.log.append_many([(kind, self._body_text(body, len(events))) for kind, body in events],
                                       now, stamp)
        self._execute()
        return records

    def apply_ops(self, ops: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Record document operations (normalised, see ``huddle.doc.ops``) as
        ``doc`` events, after checking each against the document as it is now
        (and as the previous ones leave it).  Raises ``OperationError`` and
        records nothing if any does not fit.  Returns, per operation, its
        source, sequence and the eids of the elements it adds."""
        self._check_writable()
        scratch = self.doc.document.clone()
        stamp = self.mesh_time()
        made: list[list[str]] = []
        for i, op in enumerate(ops):
            try:
                scratch.check(op)
            except OperationError as exc:
                raise OperationError(f"operation {i + 1}: {exc}" if len(ops) > 1 else str(exc)) from None
            key: Key = (stamp, bytes(self.log.uuid), self.log.next_seq + i)
            scratch.made = []
            scratch.apply(op, key)
            made.append([e.eid for e in scratch.made])
        records = self.emit_many([(DOC_KIND, op) for op in ops])
        return [{"source": str(r.source), "seq": r.seq, "timestamp": r.timestamp, "eids": eids}
                for r, eids in zip(records, made, strict=True)]

    # ---------------------------------------------------- addressed messages

    def send_to(self, peer: NodeId, payload: bytes) -> int:
        """Queue an addressed message; returns its sequence.  Raises NotIncluded,
        MessageTooLarge or BufferFull (nothing queued) at once."""
        delivery = self.mesh.service(Delivery)
        assert delivery is not None
        seq = delivery.send(peer, payload, self.local_now())  # a peer that is away gets it when it returns
        self._execute()
        return seq

    def send_bulk(self, peer: NodeId, head: bytes, data: bytes | memoryview) -> bool:
        """Send a BULK (``head``, then ``data`` as a frame of its own) to an admitted peer on
        its connection now, outside the addressed-message channel: not acknowledged, not
        re-sent.  False if the peer is not admitted (nothing sent)."""
        ok = self.mesh.send_bulk(peer, head, data)
        self._execute()
        return ok

    def queued_bulk(self, peer: NodeId) -> int:
        """Octets of BULK data sent to ``peer`` that are not yet on its connection (0 if
        it is not admitted): a peer that asks for content and does not read it grows this."""
        conn = self.mesh.conn_of(peer)
        transport = self._transport
        return 0 if conn is None or transport is None else transport.queued_large(conn)

    async def send_to_wait(self, peer: NodeId, payload: bytes, timeout: float = 10.0) -> int:
        """As :meth:`send_to`, but wait up to ``timeout`` seconds for room in a full buffer."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self.send_to(peer, payload)
            except BufferFull:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise
                event = self._space.setdefault(peer, asyncio.Event())
                event.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(event.wait(), min(left, 0.5))

    def start_jam(self) -> dict[str, Any]:
        """Start the upcoming jam now (its ``start`` is this node's mesh time)."""
        state = jams(self.doc.document.root)
        if state["active"] is not None:
            a = state["active"]
            raise OperationError(f"period {a['period']} jam {a['jam']} is being skated: stop it first")
        up = state["upcoming"]
        if up is None:
            raise OperationError("the bout is over: there is no jam to start")
        now = round(self.mesh_time(), 3)
        self.apply_ops([{"op": "set", "to": up, "attribute": "start", "value": repr(now)}])
        return jams(self.doc.document.root)

    def stop_jam(self) -> dict[str, Any]:
        """Stop the active jam now (its ``duration`` runs to this node's mesh time)."""
        active = jams(self.doc.document.root)["active"]
        if active is None:
            raise OperationError("no jam is being skated")
        duration = round(max(0.0, self.mesh_time() - active["start"]), 3)
        to = {"period": active["period"], "jam": active["jam"]}
        self.apply_ops([{"op": "set", "to": to, "attribute": "duration", "value": repr(duration)}])
        return jams(self.doc.document.root)

    def log_summary(self) -> dict[str, Any]:
        log = self.log
        return {
            "version_vector": {str(s): q for s, q in log.version_vector().items()},
            "events": log.held(),
            "gaps": {str(s): [list(r) for r in ranges] for s, ranges in log.gaps().items()},
            "stats": log.stats.as_dict(),
        }

    def stop(self) -> None:
        """Ask the node to leave the mesh gracefully (GBYE) and stop."""
        self._stop.set()

    async def wait_ready(self) -> None:
        await self._ready.wait()

    # ------------------------------------------------------------------- run

    async def run(self, on_ready: Callable[[Node], None] | None = None) -> None:
        cfg = self.config
        self.data_dir.lock()
        try:
            await self._run(cfg, on_ready)
        finally:
            self.data_dir.unlock()

    async def _run(self, cfg: NodeConfig, on_ready: Callable[[Node], None] | None) -> None:
        if cfg.group_secret is not None:
            raise ConfigError(NOT_WIRED)
        self.uuid = uuid = self.data_dir.node_id()
        self.identity = load_or_create_identity(self.data_dir.path)
        found = await self._wait_interface(cfg.interface)
        if found is None:
            return  # stopped while waiting
        self.interface = iface = found
        if cfg.guests:  # a host whose connection drops stops answering its guests' marcos at once
            self._host_links = HostLinks()
        transport = ZmqTransport(uuid, on_frames=self._on_frames, on_stalled=self._on_stalled,
                                 on_connect_failed=self._on_connect_failed, limits=cfg.limits.mesh,
                                 on_link=None if self._host_links is None else self._host_links.changed)
        self._transport = transport
        api_runner = None
        try:
            try:
                port = transport.bind(iface.ip, cfg.port, cfg.port_range)
            except Exception as exc:  # zmq.ZMQError: address in use, no free port
                raise ConfigError(f"cannot bind the ROUTER on {iface.ip}:{cfg.port or cfg.port_range}: {exc}") from None
            endpoint = f"tcp://{iface.ip}:{port}"
            self._port = port
            self.started_at = time.time()
            self._guard = LogGuard(self.data_dir.path, cfg.group, uuid)
            self._store = self._guard.open()  # refuses a damaged log (LogDamaged names `huddle repair`)
            returned = self._store.drop_returned(uuid)
            if returned:
                log.warning("dropped %d records in this node's name that came from peers: "
                            "its sequence continues what it wrote itself", returned)
            services = build_services(uuid, now=self.local_now(), store=self._store, log_limits=cfg.limits.log,
                                      delivery=cfg.delivery_timing(), conn_counters=transport.counters)
            self._mesh = Mesh(
                uuid, name=cfg.name, group=cfg.group, endpoint=endpoint,
                incarnation=os.urandom(8).hex(), now=self.local_now(), timing=cfg.timing(),
                excluded=self.data_dir.excluded(), node_type=self.node_type.name, rate=self.node_type.send_rate,
                limits=cfg.limits.mesh, guests=cfg.guest_marco_port if cfg.guests else 0, services=services,
            )
            self._log = self._mesh.service(Replicator)
            for batch in self._store.of_kind(DOC_KIND):
                self.doc.load(batch)
            loop = asyncio.get_running_loop()
            transport.start(loop)
            for seed in cfg.seeds:
                self._mesh.add_seed(_resolve_seed(seed), self.local_now())
            if cfg.beacon:
                self._beacon = BeaconService(
                    uuid=uuid, group=cfg.group, router_port=port, interface=iface,
                    address=cfg.beacon_address, port=cfg.beacon_port, interval=cfg.beacon_interval,
                    on_peer=self._discovered,
                )
                try:
                    await self._beacon.start()
                except OSError as exc:
                    raise ConfigError(f"cannot open the beacon socket on port {cfg.beacon_port}: {exc.strerror}") from None
            if cfg.mdns:
                from .discovery.mdns import MdnsService  # noqa: PLC0415 - zeroconf: only with --mdns

                self._mdns = MdnsService(
                    uuid=uuid, name=cfg.name, group=cfg.group, router_port=port, interface=iface,
                    service_type=cfg.mdns_type, on_peer=self._discovered,
                )
                await self._mdns.start()
            if cfg.naming:
                naming = NamingClient(
                    uuid=uuid, name=cfg.name, group=cfg.group, endpoint=endpoint, brokers=cfg.naming,
                    interval=cfg.naming_interval, timeout=cfg.naming_timeout, on_peer=self._discovered,
                    limits=cfg.limits.naming,
                )
                await naming.start()  # closes itself if no broker answers
                self._naming = naming
            if cfg.guests:
                await self._start_guests(cfg, iface.ip)
            self._start_posts(cfg)
            from .api.http import start_api  # noqa: PLC0415 - aiohttp: imported when a node runs, not with huddle.node

            api_runner, self.api_url = await start_api(self, cfg.api, cfg.limits.api, token_dir=self.data_dir.path,
                                                       require_token=cfg.api_require_token)
            self._execute()
            log.info(
                "node %s (%s) in group %r at %s, api %s",
                uuid.short, cfg.name, cfg.group, endpoint, self.api_url,
            )
            log.warning("%s; this node's key: %s", OPEN_GROUP, self.identity.fingerprint)
            self._ready.set()
            if on_ready is not None:
                on_ready(self)
            async with asyncio.TaskGroup() as tg:
                tasks = [tg.create_task(self._ticker())]
                if self._beacon is not None:
                    tasks.append(tg.create_task(self._beacon.run()))
                if self._posts is not None:
                    tasks.append(tg.create_task(self._posts.run()))
                if iface != LOOPBACK:
                    tasks.append(tg.create_task(self._watch_interface(cfg.interface or iface.name, iface)))
                await self._stop.wait()
                for task in tasks:
                    task.cancel()
                self._document_row(self.local_now(), final=True)  # the document as the node leaves it
        finally:
            if self._mesh is not None:
                self._mesh.leave(self.local_now())
                self._execute()
            if self._beacon is not None:
                self._beacon.close()
            if self._guests is not None:
                await self._guests.close()
            if self._naming is not None:
                await self._naming.close()
            if self._mdns is not None:
                with contextlib.suppress(Exception):  # leaving: a failing goodbye must not hide the real exit
                    await asyncio.wait_for(self._mdns.close(), 3.0)
            if api_runner is not None:
                await api_runner.cleanup()
            transport.close()
            if self._store is not None:
                if self._guard is not None:
                    self._guard.note(self._store)
                self._store.close()
            if self._posts is not None:
                self._posts.close()

    # ---------------------------------------------------------------- the network

    async def _wait_interface(self, spec: str | None) -> Interface | None:
        """The interface to use; ``--interface NAME`` with no IPv4 address yet is waited
        for (no time limit: a node started before the Wi-Fi joins comes up when it does),
        with one log line.  None if the node is stopped while it waits."""
        try:
            return resolve_interface(spec)
        except InterfaceAbsent as exc:
            log.warning("%s: waiting for it (the node starts when it has an address)", exc)
        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), INTERFACE_POLL)
            try:
                iface = resolve_interface(spec)
            except InterfaceAbsent:
                continue
            log.warning("interface %s is here, with %s: starting", iface.name, iface.ip)
            return iface
        return None

    async def _watch_interface(self, spec: str, iface: Interface) -> None:
        """Look at the interface's addresses every INTERFACE_POLL seconds and follow them."""
        watch = InterfaceWatch(spec, iface)
        while True:
            await asyncio.sleep(INTERFACE_POLL)
            try:
                change = watch.observe(ipv4_interfaces())
                if change is not None:
                    await self._network_changed(change)
                elif self._announce_due and not watch.lost:
                    await self._announce(watch.current)
            except Exception as exc:  # a socket that cannot be opened now: the next look tries again
                self._survived("network_failures", "following the network interface", exc)

    async def _network_changed(self, change: WatchDecision) -> None:
        stats = self.driver_stats
        if isinstance(change, Lost):
            stats.interface_lost += 1
            log.warning("interface %s has no IPv4 address now: waiting for it (peers will find this node "
                        "silent and take it back when it returns)", change.name)
            return
        if isinstance(change, Back):
            stats.interface_back += 1
            log.warning("interface %s has its address %s again", change.interface.name, change.interface.ip)
            await self._announce(change.interface)
            return
        assert isinstance(change, Moved)
        transport, old, new = self._transport, change.old, change.new
        assert transport is not None
        try:
            port = transport.bind(new.ip, self._port, self.config.port_range)
        except Exception:  # the port is taken on the new address: another one
            port = transport.bind(new.ip, 0, self.config.port_range)
        transport.unbind(old.ip, self._port)  # also closes peers' stale connections to the old address
        self._port, self.interface = port, new
        endpoint = f"tcp://{new.ip}:{port}"
        stats.address_changes += 1
        log.warning("interface %s moved from %s to %s: now at %s; telling the peers", new.name, old.ip, new.ip,
                    endpoint)
        self.mesh.set_endpoint(endpoint, self.local_now())
        self._execute()
        if self._naming is not None:
            self._naming.set_endpoint(endpoint)
        await self._announce(new)

    async def _announce(self, iface: Interface) -> None:
        """Beacon and mDNS from ``iface`` afresh, with the ROUTER's port; the guest servers
        listen on its address (docs/guests.md, "Address changes")."""
        self._announce_due = True
        if self._beacon is not None:
            await self._beacon.move(iface, self._port)
        if self._mdns is not None:
            await self._mdns.move(iface, self._port)
        if self._guests is not None and self._guests.host != iface.ip:
            await self._guests.move(iface.ip)
            log.warning("the guest servers moved to %s: TCP %d, WebSocket %d", iface.ip, self._guests.tcp_port,
                        self._guests.ws_port)
        self._announce_due = False

    # ---------------------------------------------------------------- posts (Hydra)

    def _start_posts(self, cfg: NodeConfig) -> None:
        settings = PostSettings(policy=Policy.parse(cfg.posts_policy), chunk_size=cfg.posts_chunk,
                                interval=cfg.posts_interval)
        self._posts = PostService(self, PostStore(self.data_dir.path), settings, self._publish,
                                  limits=cfg.limits.posts)

    @property
    def posts(self) -> PostService:
        if self._posts is None:
            raise LocalProtocolError("the node is not running")
        return self._posts

    # ---------------------------------------------------------------- guests

    async def _start_guests(self, cfg: NodeConfig, host: str) -> None:
        from .guests.server import GuestServer, GuestSettings  # noqa: PLC0415 - aiohttp: only with --guests

        mesh, links = self._mesh, self._host_links
        assert mesh is not None and links is not None  # the mesh starts before the guests

        def hosts() -> list[bytes]:  # one host per guest (docs/guests.md): ALIVE and still connected
            return links.live((p, mesh.conn_of(p)) for p in mesh.guest_hosts())

        server = GuestServer(
            Room(cfg.group, me=mesh.uuid, limits=cfg.limits.guests),
            GuestSettings(host=host, marco_port=cfg.guest_marco_port, tcp_port=cfg.guest_port,
                          ws_port=cfg.guest_ws_port, max_frame=cfg.guest_max_message),
            on_event=self._guest_event, clock=self.local_now,
            hosts=hosts, links=links,
        )
        try:
            await server.start()
        except OSError as exc:
            await server.close()
            raise ConfigError(
                f"cannot open the guest ports (marco UDP {cfg.guest_marco_port}, TCP {cfg.guest_port}, "
                f"WebSocket {cfg.guest_ws_port}) on {host}: {exc.strerror or exc}; "
                "pick others with --guest-port / --guest-ws-port (0: a free one)") from None
        self._guests = server

    @property
    def guests(self) -> GuestServer | None:
        return self._guests

    def _guest_event(self, guest: str, topic: str, value: Any) -> None:
        """A guest of ours spoke: its event becomes the group's (kind = topic)."""
        self.emit(topic, {GUEST_KEY: guest, "value": value})

    def _to_guests(self, record: LogRecord) -> None:
        guests = self._guests
        if guests is None or not guests.room.hears(record.kind):
            return
        body = json.loads(record.body)
        if isinstance(body, dict) and set(body) == {GUEST_KEY, "value"} and isinstance(body[GUEST_KEY], str):
            guests.deliver(body[GUEST_KEY], record.kind, body["value"], local_speaker=record.source == self.uuid)
        else:  # a node's own event: the node speaks it, under its name
            guests.deliver(self._name_of(record.source), record.kind, body, local_speaker=False)

    def _name_of(self, uuid: NodeId) -> str:
        mesh = self._mesh
        if mesh is not None:
            if uuid == mesh.uuid:
                return mesh.name
            for p in mesh.peers(self.local_now()):
                if p.uuid == uuid:
                    return p.name
        return uuid.short

    def _snapshot(self) -> None:
        """A statistics row with the node's counters and each peer's state and RTT."""
        if self._store is None or self._mesh is None:
            return
        detail = self.info()["stats"] | {"log": self.log.stats.as_dict(), "peers": [
            {"uuid": str(p.uuid), "state": p.state, "rtt_ms": None if p.rtt is None else p.rtt * 1000}
            for p in self.peers()
        ]}
        self._store.add_stat(self.mesh_time(), "snapshot", None, json.dumps(detail))
        self._store.commit()
        if self._guard is not None:
            self._guard.note(self._store)  # the own-sequence mark follows what is durable

    def _document_row(self, now: float, *, final: bool = False) -> None:
        """A ``document`` statistics row, if the bout document changed since the
        last one: how many ``doc`` events it is made of and the digest of what
        the node shows.  The pipeline's replay makes the document again from
        the node's exported events and checks the digest (docs/export.md)."""
        if self._store is None or (now < self._doc_row_due and not final):
            return
        engine = self.doc
        state = (id(engine), len(engine))
        if state == self._doc_row_of:
            return
        t0 = time.perf_counter()
        doc = engine.document
        detail = {"doc_events": len(engine), "applied": doc.applied, "dropped": len(doc.dropped),
                  "digest": digest(doc.root)}
        cost = time.perf_counter() - t0
        self._store.add_stat(self.mesh_time(), "document", None, json.dumps(detail))
        self._store.commit()
        self._doc_row_of = state
        self._doc_row_due = now + max(DOC_ROW_INTERVAL, cost / DOC_ROW_SHARE)

    async def _ticker(self) -> None:
        mesh = self.mesh
        transport = self._transport
        assert transport is not None
        next_snapshot = self.local_now()
        while True:
            now = self.local_now()
            try:
                if now >= next_snapshot:
                    next_snapshot = now + STATS_INTERVAL
                    self._snapshot()
                    self._document_row(now)
                transport.poll()
                mesh.tick(now)
                self._execute()
                delay = max(0.0, mesh.next_deadline(now) - self.local_now())
            except Exception as exc:  # a bug or a bad input must not stop the node's clock
                self._survived("tick_failures", "a turn of the timer loop", exc)
                delay = TICK_RETRY
            await asyncio.sleep(delay)

    def _survived(self, counter: str, what: str, exc: Exception) -> None:
        """Count a failure the driver survived; log it when its count passes 1, 10, 100, ..."""
        n = getattr(self.driver_stats, counter) + 1
        setattr(self.driver_stats, counter, n)
        if n & (n - 1) == 0:  # 1, 2, 4, 8, ...: rarer and rarer
            log.error("survived a failure of %s (%d so far): %r", what, n, exc,
                      exc_info=exc if n == 1 else None)

    # ---------------------------------------------------------------- wiring

    def _on_frames(self, batch: list[list[bytes]], sources: list[str]) -> None:
        mesh = self._mesh
        if mesh is None:
            return
        now = self.local_now()
        count = self.traffic.count_received
        for frames, source in zip(batch, sources, strict=True):
            try:
                count(frames)
                mesh.receive(frames, now, source)
            except Exception as exc:  # one message must not cost the others of the batch
                self._survived("receive_failures", "handling a received message", exc)
        self._execute()

    def _on_connect_failed(self, conn: int) -> None:
        if self._mesh is not None:
            self._mesh.connect_failed(conn, self.local_now())
            self._execute()

    def _on_stalled(self, conn: int) -> None:
        if self._mesh is not None:
            self._mesh.not_responding(conn, self.local_now())
            self._execute()

    def _discovered(self, peer: NodeId, endpoint: str) -> None:
        if self._mesh is not None:
            self._mesh.discovered(peer, endpoint, self.local_now())
            self._execute()

    def _execute(self) -> None:
        mesh = self._mesh
        transport = self._transport
        if mesh is None or transport is None:
            return
        last_msg: object = None
        frames: list[bytes] = []
        octets = 0
        sent = self.traffic.sent
        try:
            actions = mesh.take_actions()
        except Exception as exc:
            self._survived("action_failures", "taking the protocol's actions", exc)
            return
        for action in actions:
            try:
                if isinstance(action, Send):
                    if action.message is not last_msg:  # a live XMSG goes to every peer: encode it once
                        frames = encode_parts(action.message)
                        octets = sum(map(len, frames))
                        last_msg = action.message
                    if transport.send(action.conn, frames):
                        kind = frames[0]  # one of TRAFFIC_TYPES (we encoded it), or a type added since
                        sent[kind] = sent.get(kind, 0) + octets
                elif isinstance(action, Notify):
                    self._publish(action.event)
                elif isinstance(action, Connect):
                    transport.connect(action.conn, action.endpoint)
                elif isinstance(action, Disconnect):
                    transport.disconnect(action.conn, action.flush)
                    if self._host_links is not None:
                        self._host_links.forget(action.conn)
            except Exception as exc:  # one action that cannot be carried out must not stop the others
                self._survived("action_failures", f"an action ({type(action).__name__})", exc)

    def exclude(self, peer: NodeId, reason: str) -> bool:
        """Exclude ``peer`` for good (persisted); False if it already was."""
        done = self.mesh.exclude(peer, reason, self.local_now())
        self._execute()
        return done

    def _empty(self) -> None:
        """Cut off, an ``empty`` node type drops every other node's events (store,
        log state, document); its peers send them all again when it reconnects."""
        store, mesh, uuid = self._store, self._mesh, self.uuid
        if store is None or mesh is None or uuid is None:
            return
        dropped = store.drop_others(uuid)
        self.log.reload(self.local_now())  # the same replicator, hosted by the mesh, reads the store afresh
        self.doc = DocEngine()
        for batch in store.of_kind(DOC_KIND):
            self.doc.load(batch)
        log.info("cut off: dropped %d events of other nodes (node type %s)", dropped, self.node_type.name)

    def _publish(self, event: Event) -> None:
        if self._posts is not None and self._posts.handle(event):
            return  # a Hydra sync message: the post service's, not the event stream's
        if isinstance(event, PeerExcluded) and self._mesh is not None:
            self.data_dir.save_excluded(self._mesh.excluded)
        if isinstance(event, BufferSpace):
            space = self._space.get(event.peer)
            if space is not None:
                space.set()
        if isinstance(event, CutOff) and event.cut_off and self.node_type.on_cut_off == "empty":
            self._empty()
        if isinstance(event, LogAppended):
            for run, _ in event.runs:
                for record in run:
                    if record.kind == DOC_KIND:
                        self.doc.add(record)
                    if self._guests is not None:
                        self._to_guests(record)
        row = stat_row(event) if self._store is not None else None
        if row is not None and self._store is not None:
            self._store.add_stat(*row)
            self._store.commit()
        for fn in list(self._listeners):
            try:
                fn(event)
            except Exception:  # a listener's bug must not stop the node
                log.exception("event listener failed")


def _resolve_seed(seed: str) -> str:
    """``HOST:PORT`` -> ``tcp://IP:PORT`` (peers are kept by IP octets)."""
    host, port = parse_hostport(seed, "seed")
    if port == 0:
        raise ConfigError(f"seed {seed!r} needs a port")
    try:
        infos = socket.getaddrinfo(host, port, socket.AF_INET, socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise ConfigError(f"cannot resolve seed host {host!r}: {exc.strerror}") from None
    ip = str(infos[0][4][0])
    return f"tcp://{ip}:{port}"


def raise_descriptor_limit(want: int = 65536) -> int:
    """Raise this process's soft limit on open descriptors towards its hard limit
    (at most ``want``); returns the soft limit now in force.  Every peer, guest and
    API client connected to a node costs a descriptor, and desktop systems start
    processes with a soft limit of 1024: a crowd, or a flood, must meet the node's
    own caps (docs/limits.md) long before the kernel's."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = want if hard == resource.RLIM_INFINITY else min(hard, want)
    if soft != resource.RLIM_INFINITY and soft < target:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
    return soft


def run_node(config: NodeConfig, on_ready: Callable[[Node], None] | None = None) -> None:
    """Run a node in the foreground until SIGINT / SIGTERM."""
    raise_descriptor_limit()

    async def main() -> None:
        node = Node(config)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, node.stop)
        await node.run(on_ready)

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main())

