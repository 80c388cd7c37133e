"""The composition root: one node = mesh state machine + ZeroMQ + discovery + API + features.

The driver is thin: it turns socket readiness and timers into calls on
:class:`~huddle.protocol.Mesh` and carries out the actions it returns.  What
the node holds lives with its own package: the data directory
(:mod:`huddle.log.datadir`), the statistics rows (:mod:`huddle.log.stats`), the
mesh's driver: its actions carried out, frames fed in, the timer loop
(:mod:`huddle.driver`), the finders (:mod:`huddle.finders`), what the API shows
(:mod:`huddle.api.info`).  The capabilities with I/O of their own (posts, the bout
document, guests) are features (huddle/ports.py): the node loops over the list it is given, and
names none of them.  This module wires them, starts them in order and stops
them in reverse (one exit stack), and routes the protocol's events to an
ordered list of subscribers (:meth:`Node._wire_events`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import Callable, Coroutine, Iterable, Sequence
from typing import Any

from .api.info import log_summary, node_info, system_picture
from .config import NodeConfig, resolve_seed
from .discovery import Interface
from .discovery.follow import wait_interface
from .driver import MeshDriver
from .errors import ConfigError, CutOffReadOnly, NotRunning
from .finders import Finders
from .host.address import Following
from .host.events import EventRoutes
from .host.recording import Recorder
from .host.renewal import renew_identity_after
from .ids import NodeId
from .log import SqliteStore
from .log.datadir import DataDir
from .log.integrity import LogGuard
from .log.stats import STATS_INTERVAL, StatRows
from .memtune import raise_descriptor_limit
from .ports import Feature, LinkWatcher, Subscriber
from .protocol import Mesh, PeerInfo
from .protocol.core import CoreServices, build_services
from .protocol.events import BufferSpace, CutOff, PeerExcluded
from .protocol.ownseq import IdentityRetired
from .protocol.replication import Replicator
from .ratelog import RateLog
from .security import (
    GroupSecret,
    Keyring,
    NodeIdentity,
    TrustList,
    load_or_create_identity,
    node_id_for,
    own_id_refusal,
)
from .transport.rotation import KeyRotation
from .transport.zap import AllowList, MeshSecurity
from .transport.zmq_transport import ZmqTransport
from .wire import LogRecord

__all__ = ["Node", "run_node"]

log = logging.getLogger("huddle.node")


class Node:
    """A running huddle node.  Create, then ``await node.run()``."""

    def __init__(self, config: NodeConfig, *, features: Sequence[Feature] | None = None,
                 carried: list[tuple[str, str]] | None = None, renewed: dict[str, str] | None = None) -> None:
        """``features``: the capabilities it runs (huddle/ports.py; None: the default list,
        huddle/features.py).  ``carried`` and ``renewed``: what the node that ran before under
        the identity it retired left (:meth:`_renew_identity`): the events it recorded under
        numbers its peers held with other content, recorded again once this node records, and
        why it changed."""
        if features is None:
            from .features import default_features  # noqa: PLC0415 - the one list; node.py names no feature

            features = default_features()
        self.features: tuple[Feature, ...] = tuple(features)
        self._events = EventRoutes({k: fn for f in self.features for k, fn in f.event_renderers.items()})
        self._spawned: list[Coroutine[Any, Any, None]] = []  # the features' long tasks, run in the task group
        self.config = config
        self.renewed = renewed  # the previous identity and why it was retired (shown in info())
        self.retired: IdentityRetired | None = None  # this run's identity was retired: the next takes a new one
        self._new_identity = False  # made at this start: no window (nothing in its name anywhere)
        self.node_type = config.type_spec()
        self.data_dir = DataDir(config.data_dir)
        self.uuid: NodeId | None = None
        self.identity: NodeIdentity | None = None  # the node's keypair (DATA_DIR/node.key)
        self.security: MeshSecurity | None = None  # open, group or allow-list mode (transport/zap.py)
        self.rotation: KeyRotation | None = None  # the group secret's live rotation (None: an open group)
        self._mesh: Mesh | None = None
        self._store: SqliteStore | None = None
        self._rows: StatRows | None = None  # the statistics rows, in the store
        self._replicator: Replicator | None = None
        self._core: CoreServices | None = None  # the mesh's peer services, by name
        self._driver = MeshDriver(self.local_now, self._events.publish)  # attached to the mesh and transport by _start
        self._finders = Finders(self._driver.discovered)
        # Who follows the address and the group key: the features ask through follow_address, watch_keys.
        self._following = Following(self._finders, config.mesh.port_range, self._set_endpoint)
        self.follow_address, self.watch_keys = self._following.movers.append, self._following.key_watchers.append
        self._left = False  # the mesh said GBYE
        self.api_url: str | None = None
        self._recorder = Recorder(lambda: self._replicator, writable=self.check_writable, local_now=self.local_now,
                                  mesh_time=self.mesh_time, execute=self.execute, carried=list(carried or ()),
                                  renewed=renewed is not None)
        self.add_listener, self.publish = self._events.add_listener, self._events.publish
        self.emit, self.emit_many, self.record_soon = self._recorder.emit, self._recorder.emit_many, self._recorder.record_soon
        self.until_recording = self._recorder.until_recording
        self._stop = asyncio.Event()
        self._ready = asyncio.Event()
        self._base = time.time() - time.monotonic()
        self.started_at = 0.0
        self.driver_stats, self.traffic = self._driver.stats, self._driver.traffic
        self.accept_failures = 0  # connections a listening socket could not take: out of descriptors (EMFILE, ...)
        self._loop_lines = RateLog(log, period=60.0)

    def loop_exception(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        """The event loop's exception handler.  A listening socket that cannot accept
        (the process is out of descriptors: EMFILE, ENFILE, ...) is reported by asyncio
        with a traceback each time, for every one of the node's ports; here it is counted
        (``stats.accept_failures``) and said in one line a minute.  asyncio pauses that
        socket for a second and tries again: the node's own caps (docs/limits.md) are what
        keep descriptors free.  Anything else goes to asyncio's own handler."""
        if str(context.get("message", "")).startswith("socket.accept() out of system resource"):
            self.accept_failures += 1
            self._loop_lines.warning("accept", loop.time(), "a connection could not be accepted: %s (%d so far)",
                                     context.get("exception"), self.accept_failures)
            return
        loop.default_exception_handler(context)

    # ----------------------------------------------------------------- clock

    def local_now(self) -> float:
        """Local clock: monotonic, aligned with the wall clock at start-up."""
        return time.monotonic() + self._base

    def mesh_time(self) -> float:
        return self.mesh.mesh_time(self.local_now())

    @property
    def mesh(self) -> Mesh:
        if self._mesh is None:
            raise NotRunning("the node is not running")
        return self._mesh

    # ------------------------------------------------------------ public API

    def peers(self) -> list[PeerInfo]:
        return self.mesh.peers(self.local_now())

    def info(self) -> dict[str, Any]:
        stats = self._driver.counters(self._finders.stats())
        stats["log_forgeries"] = {str(peer): n for peer, n in self.replicator.forgeries.items()}
        stats["accept_failures"] = self.accept_failures
        stats["security"] = None if self.security is None else self.security.stats()
        out = node_info(self.mesh, identity=self.identity, node_type=self.node_type, mesh_time=self.mesh_time(),
                        started_at=self.started_at, read_only=self.read_only,
                        features={f.name: facts for f in self.features if (facts := f.facts()) is not None},
                        security=None if self.security is None else self.security.describe(), stats=stats)
        # Whether events are recorded now, and why not (starting, or this identity retired: protocol.md 12.1);
        # the identity this node took over from, if it retired one.
        replicator = self.replicator
        out["recording"] = replicator.recording
        out["not_recording"] = None if replicator.recording else replicator.why_not_recording()
        out["identity_renewed"] = self.renewed
        return out

    def system(self) -> dict[str, Any]:
        mesh, core = self.mesh, self._core
        assert core is not None  # built with the mesh
        return system_picture(mesh, core.reports, self.local_now(), self.mesh_time())

    def chat(self, text: str, to: NodeId | None = None) -> int:
        """Send a chat line now; returns the number of peers it went to."""
        return self._driver.send_chat(text, to)  # CHAT's fast path: no actions to carry out

    async def send_chat(self, text: str, to: NodeId | None = None, timeout: float = 5.0) -> int:
        """Like :meth:`chat`, but waits while a peer's send queue is long, so a
        fast sender loses nothing; a peer that stays full for ``timeout`` is skipped."""
        n = self.chat(text, to)
        await self._driver.wait_drained(to, timeout)
        return n

    # ---------------------------------------------------------- the event log

    @property
    def replicator(self) -> Replicator:
        """The event log's replication state machine (this node's records and its peers')."""
        if self._replicator is None:
            raise NotRunning("the node is not running")
        return self._replicator

    @property
    def store(self) -> SqliteStore:
        if self._store is None:
            raise NotRunning("the node is not running")
        return self._store

    @property
    def read_only(self) -> bool:
        """True while a read-only node type (e.g. console) is cut off."""
        return self.node_type.on_cut_off == "read-only" and self._mesh is not None and self._mesh.cut_off

    @property
    def carried(self) -> list[tuple[str, str]]:
        """The events to record once the node records (those of a retired identity among them)."""
        return self._recorder.carried

    def check_writable(self) -> None:
        """Raise CutOffReadOnly while a read-only node type is cut off."""
        if self.read_only:
            raise CutOffReadOnly(
                f"this {self.node_type.name} node is cut off from the group and read-only until a peer is back; "
                "nothing was recorded")

    def next_seq(self) -> int:
        """The sequence number this node's next event gets."""
        return self.replicator.next_seq

    def records_of(self, kind: str) -> Iterable[list[LogRecord]]:
        """The log's records of one kind, in batches (no order promised)."""
        return self.store.of_kind(kind)

    def stat_row(self, kind: str, detail: dict[str, Any]) -> None:
        """A feature's statistics row, at the mesh time now."""
        if self._rows is not None:
            self._rows.feature(self.mesh_time(), kind, detail)

    # ---------------------------------------------------- addressed messages

    def send_to(self, peer: NodeId, payload: bytes) -> int:
        """Queue an addressed message (:meth:`MeshDriver.send_to`)."""
        return self._driver.send_to(peer, payload)

    def queued_bulk(self, peer: NodeId) -> int:
        return self._driver.queued_bulk(peer)

    async def send_to_wait(self, peer: NodeId, payload: bytes, timeout: float = 10.0) -> int:
        """Queue an addressed message, waiting for room (:meth:`MeshDriver.send_to_wait`)."""
        return await self._driver.send_to_wait(peer, payload, timeout)

    def log_summary(self) -> dict[str, Any]:
        return log_summary(self.replicator)

    def exclude(self, peer: NodeId, reason: str) -> bool:
        """Exclude ``peer`` for good (persisted); False if it already was."""
        done = self.mesh.exclude(peer, reason, self.local_now())
        self.execute()
        return done

    @property
    def allow_list(self) -> AllowList | None:
        """Allow-list mode's trusted keys (None in the other modes)."""
        return None if self.security is None else self.security.allow

    @property
    def address(self) -> str:
        """The address the node listens on now: its interface's, followed when it moves."""
        return self._following.address

    @property
    def group_secret(self) -> GroupSecret | None:
        return self.config.group_secret if self.rotation is None else self.rotation.keyring.current

    def stop(self) -> None:
        """Ask the node to leave the mesh gracefully (GBYE) and stop."""
        self._stop.set()

    async def wait_ready(self) -> None:
        await self._ready.wait()

    # ------------------------------------------------------------------- run

    async def run(self, on_ready: Callable[[Node], None] | None = None) -> None:
        """Start everything, serve until :meth:`stop`, then stop everything.  Each part
        started is pushed on one exit stack; leaving it stops them in reverse order.
        It also returns when this identity was retired (:attr:`retired`; protocol.md 12.1):
        the data directory has a new one then, and :func:`run_node` starts a new node on it."""
        async with contextlib.AsyncExitStack() as stack:
            self.data_dir.lock()
            stack.callback(self.data_dir.unlock)
            stack.callback(self._renew_identity)  # after the store closed, before the unlock
            # A new identity (a new data directory, or one just taken): no peer can hold records in its name.
            self._new_identity = self.renewed is not None or not (self.data_dir.path / "node-id").exists()
            self.identity = load_or_create_identity(self.data_dir.path)
            self.uuid = self.data_dir.node_id(new=node_id_for(self.identity.public_key))
            if self.config.group_secret is not None and (why := own_id_refusal(self.uuid, self.identity,
                                                                               self.data_dir.path)):
                raise ConfigError(why)  # a legacy id: not admitted in a group with a secret
            keyring = Keyring.restore(self.data_dir.path, self.config.group_secret)  # a rotation's keys, if any
            if keyring is not None and keyring.current != self.config.group_secret:  # switched before a restart
                self.config = self.config.with_overrides(group_secret=keyring.current)
            self.security = MeshSecurity(self.config.group_secret, self.identity, allow_list=TrustList.load(
                self.data_dir.path) if self.config.allow_list else None, keyring=keyring)
            iface = await wait_interface(self.config.discovery.interface, self._stop)
            if iface is None:
                return  # stopped while waiting
            await self._start(stack, iface)
            self._ready.set()
            if on_ready is not None:
                on_ready(self)
            async with asyncio.TaskGroup() as tg:
                tasks = [tg.create_task(self._driver.run(STATS_INTERVAL, self._rows_due))]
                tasks += [tg.create_task(finder) for finder in self._finders.tasks()]
                tasks += [tg.create_task(run) for run in self._spawned]
                if self._following.follower is not None:
                    tasks.append(tg.create_task(self._following.follower.run()))
                tasks.append(tg.create_task(self._recorder.record_carried()))  # ends once the node records
                await self._stop.wait()
                for task in tasks:
                    task.cancel()

    async def _start(self, stack: contextlib.AsyncExitStack, iface: Interface) -> None:
        cfg, uuid = self.config, self.uuid
        assert uuid is not None  # run() read it
        self._following.iface = iface
        watchers = [w for f in self.features if (w := f.links(cfg)) is not None]  # guests' hosts: one per guest
        driver = self._driver
        driver.on_disconnect += [w.forget for w in watchers]
        transport = ZmqTransport(uuid, on_frames=driver.on_frames, on_stalled=driver.on_stalled,
                                 on_connect_failed=driver.on_connect_failed, limits=cfg.limits.mesh,
                                 on_link=_links_changed(watchers),
                                 curve=None if self.security is None else self.security.setup)
        if self.security is not None:
            self.security.attach(transport.guard, self._cut_key)
        stack.callback(transport.close)
        try:
            port = transport.bind(iface.ip, cfg.mesh.port, cfg.mesh.port_range)
        except Exception as exc:  # zmq.ZMQError: address in use, no free port
            raise ConfigError(f"cannot bind the ROUTER on {iface.ip}:{cfg.mesh.port or cfg.mesh.port_range}: {exc}") from None
        endpoint = f"tcp://{iface.ip}:{port}"
        self.started_at = time.time()
        guard = LogGuard(self.data_dir.path, cfg.group, uuid)
        store = self._store = guard.open()  # refuses a damaged log (LogDamaged names `huddle repair`)
        self._rows = self._events.rows = StatRows(store, guard)
        stack.callback(self._close_store, store, guard)
        returned = store.drop_returned(uuid)
        if returned:
            log.warning("dropped %d records in this node's name that came from peers: "
                        "its sequence continues what it wrote itself", returned)
        core = self._core = build_services(uuid, now=self.local_now(), store=store, log_limits=cfg.limits.log,
                                           delivery=cfg.delivery_timing(), conn_counters=transport.counters,
                                           log_signer=self.identity, log_secure=cfg.group_secret is not None,
                                           report_signer=self.identity,
                                           extra=[s for f in self.features for s in f.peer_services(uuid)],
                                           takers=[t for f in self.features for t in f.payload_takers()])
        mesh = self._mesh = Mesh(
            uuid, name=cfg.name, group=cfg.group, endpoint=endpoint,
            incarnation=os.urandom(8).hex(), now=self.local_now(), timing=cfg.mesh_timing(),
            excluded=self.data_dir.excluded(), node_type=self.node_type.name, rate=self.node_type.send_rate,
            limits=cfg.limits.mesh, guests=cfg.guests.marco_port if cfg.guests.enabled else 0, services=core.all(),
            identity=self.identity, secure=cfg.group_secret is not None,
        )
        driver.attach(mesh, transport, core)
        # The ROUTER's connections beyond the sessions bound to their address are closed after
        # the handshake timeout (transport/accepted.py): the transport asks the mesh which.
        transport.bound_by_address = mesh.bound_by_address
        transport.accepted.grace = mesh.timing.handshake_timeout
        stack.callback(self._leave)  # a start that fails half-way still says GBYE to the peers it met
        self._replicator = core.replicator
        allow = self.allow_list
        if allow is not None and self._replicator is not None:  # the trust list's keys are vouched for (12.2)
            self._replicator.vouch(node_id_for(k.public_key) for k in allow.trust.entries())
        # Nothing recorded until the peers have shown what they hold in this node's name
        # (a log restored from an older copy takes back what it lost: protocol.md 12.1).
        if not self._new_identity:
            self.replicator.hold_own(self.local_now(), cfg.limits.log.own_wait, cfg.limits.log.own_quiet)
        stack.callback(self._spawned_unrun)
        for feature in self.features:  # each one's driver: its closers on the stack, its tasks spawned
            await feature.start(stack, self._spawned.append, self)
        self._wire_events()
        transport.start(asyncio.get_running_loop())
        for seed in cfg.discovery.seeds:
            mesh.add_seed(resolve_seed(seed), self.local_now())
        await self._finders.start(stack, cfg, uuid=uuid, iface=iface, port=port, endpoint=endpoint)
        if self.security is not None and self.security.keyring is not None:  # transport/rotation.py
            following = self._following
            self.rotation = KeyRotation(self.security, transport, host=lambda: following.address, port=port,
                                        port_range=cfg.mesh.port_range, data_dir=self.data_dir.path,
                                        advertise=lambda p: following.advertise(transport, p, 2 * mesh.beat),
                                        changed=following.keys_changed)
            following.keys_changed(self.rotation.keyring)  # restarted during a rotation: both keys held
        from .api.http import start_api  # noqa: PLC0415 - aiohttp: imported when a node runs, not with huddle.node

        api_runner, self.api_url = await start_api(self, cfg.api.address, cfg.limits.api, token_dir=self.data_dir.path,
                                                   require_token=cfg.api.require_token)
        stack.push_async_callback(api_runner.cleanup)
        self._following.follow(cfg.discovery.interface or iface.name, port, transport, counts=self.driver_stats,
                               failed=self._network_failed)
        stack.callback(self._leave)  # stopping starts with GBYE, while everything still runs
        self.execute()
        log.info("node %s (%s) in group %r at %s, api %s", uuid.short, cfg.name, cfg.group, endpoint, self.api_url)
        assert self.identity is not None and self.security is not None  # loaded before anything starts
        said = self.security.describe()
        if "warning" in said:
            log.warning("%s; this node's key: %s", said["warning"], self.identity.fingerprint)
        else:
            log.info("mesh secured (CurveZMQ): %s mode, group key %s; this node's key: %s", said["mode"],
                     said["key_id"], self.identity.fingerprint)

    def _set_endpoint(self, endpoint: str) -> None:
        self.mesh.set_endpoint(endpoint, self.local_now())
        self.execute()

    def _network_failed(self, exc: Exception) -> None:
        self._driver.survived("network_failures", "following the network interface", exc)

    def _leave(self) -> None:
        """Say GBYE to every peer and close the connections (once)."""
        if self._mesh is not None and not self._left:
            self._left = True
            self._mesh.leave(self.local_now())
            self.execute()

    def _identity_retired(self, event: IdentityRetired) -> bool:
        """A peer showed a record in this node's name, signed with its key, that differs from its own:
        this identity's sequence was reused.  The node stops and starts again under a new one."""
        if self.retired is None:
            self.retired = event
            self._stop.set()
        return True

    def _renew_identity(self) -> None:
        """Once the store is closed, after a retirement: the events recorded under the retired
        identity since the start are taken out of the log (the group holds that identity's own
        records of those numbers, which it replays to the new identity as another source's) to
        be recorded again, and the node takes a new key and the id it gives, as ``huddle repair
        --new-identity`` does (the old id listed in ``previous-ids``, the old key kept aside)."""
        if self.retired is not None and self.uuid is not None:
            self._recorder.carried, self.renewed = renew_identity_after(
                self.data_dir.path, self.config.group, self.uuid, self.retired, self._recorder.carried)

    def _close_store(self, store: SqliteStore, guard: LogGuard) -> None:
        guard.note(store)  # the own-sequence mark follows what is durable
        store.close()

    # ---------------------------------------------------------------- the timer loop

    def _rows_due(self, now: float) -> None:
        """Every STATS_INTERVAL, from the timer loop: the statistics snapshot."""
        self._snapshot()

    def _snapshot(self) -> None:
        """A statistics row with the node's counters and each peer's state and RTT."""
        if self._rows is None or self._mesh is None:
            return
        detail = self.info()["stats"] | {"log": self.replicator.stats.as_dict(), "peers": [
            {"uuid": str(p.uuid), "state": p.state, "rtt_ms": None if p.rtt is None else p.rtt * 1000}
            for p in self.peers()
        ]}
        self._rows.snapshot(self.mesh_time(), detail)

    # ---------------------------------------------------------------- wiring

    def _cut_key(self, public_key: bytes) -> None:
        """A key left the allow-list: end that node's session now (its messages are dropped already)."""
        if self._mesh is not None:
            self._mesh.end_incarnation(node_id_for(public_key), "its key was removed from the allow-list",
                                       self.local_now())
            self._driver.execute()

    def execute(self) -> None:
        """Carry out the mesh's pending actions (a feature's service asked to send)."""
        self._driver.execute()

    def _spawned_unrun(self) -> None:
        """The features' tasks that never ran (a start failed before the task group): closed, not left."""
        for run in self._spawned:
            run.close()

    # ---------------------------------------------------------------- events

    def _wire_events(self) -> None:
        """Who hears the protocol's events, in this order.  A subscriber that returns
        True consumed the event: the ones after it do not see it.  The features'
        subscribers come first (posts consumes its peer service's events: Hydra's
        messages, BULKs, its peers); the API's listeners come last, and hear the
        features' own events (their ``event_renderers``) too."""
        routes: list[tuple[tuple[type, ...], Subscriber]] = []
        if self.node_type.on_cut_off == "empty":  # the log's part first: the features then read what it kept
            routes.append(((CutOff,), self._empty))
        routes += [sub for f in self.features for sub in f.subscriptions()]
        routes += [
            ((IdentityRetired,), self._identity_retired),
            ((PeerExcluded,), self._save_excluded),
            ((BufferSpace,), self._driver.wake_sender),
        ]
        self._events.wire(routes)

    def _save_excluded(self, event: PeerExcluded) -> bool:
        self.data_dir.save_excluded(self.mesh.excluded)
        return False

    def _empty(self, event: CutOff) -> bool:
        """Cut off, an ``empty`` node type drops every other node's events (store, log
        state; the document feature then makes its document again from what is left);
        its peers send them all again when it reconnects."""
        store, mesh, uuid = self._store, self._mesh, self.uuid
        if not event.cut_off or store is None or mesh is None or uuid is None:
            return False
        dropped = store.drop_others(uuid)
        self.replicator.reload(self.local_now())  # the same replicator, hosted by the mesh, reads the store afresh
        log.info("cut off: dropped %d events of other nodes (node type %s)", dropped, self.node_type.name)
        return False

    def name_of(self, uuid: NodeId) -> str:
        """A node's name as this node knows it (its short id if it knows none)."""
        mesh = self._mesh
        if mesh is not None:
            if uuid == mesh.uuid:
                return mesh.name
            for p in mesh.peers(self.local_now()):
                if p.uuid == uuid:
                    return p.name
        return uuid.short

def _links_changed(watchers: list[LinkWatcher]) -> Callable[[int, bool], None] | None:
    """What the transport calls on a link change: the features' watchers (None: no monitor needed)."""
    if len(watchers) < 2:
        return watchers[0].changed if watchers else None

    def changed(conn: int, up: bool) -> None:
        for watcher in watchers:
            watcher.changed(conn, up)
    return changed


def run_node(config: NodeConfig, on_ready: Callable[[Node], None] | None = None) -> None:
    """Run a node in the foreground until SIGINT / SIGTERM."""
    raise_descriptor_limit()

    async def main() -> None:
        cfg, node = config, Node(config)
        loop = asyncio.get_running_loop()
        while True:
            loop.set_exception_handler(node.loop_exception)
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, node.stop)
            await node.run(on_ready)
            if node.retired is None:
                return
            # Its identity retired (protocol.md 12.1): on again under the new one, the API on the same address.
            if node.api_url is not None:
                cfg = cfg.with_overrides(api=node.api_url.removeprefix("http://").removeprefix("https://"))
            node = Node(cfg, carried=node.carried, renewed=node.renewed)

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main())

