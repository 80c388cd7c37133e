"""The composition root: one node = mesh state machine + ZeroMQ + discovery + API + features.

It wires and orders; what it holds lives with its own package: the data directory
(:mod:`huddle.log.datadir`), the mesh's driver (:mod:`huddle.driver`), the finders
(:mod:`huddle.finders`), what the API shows (:mod:`huddle.api.info`), and the parts
made for it (:mod:`huddle.host`): its identity, its mesh stack, its own events'
recording, the routing of its events, who follows its address and group key.  The
capabilities with I/O of their own (posts, the bout document, guests, ...) are features
(huddle/ports.py): the node loops over the list it is given and names none of them.
It starts them in order and stops them in reverse (one exit stack).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import time
from collections.abc import Callable, Coroutine, Iterable, Sequence
from typing import Any

from .api.info import log_summary, node_info, system_picture
from .config import NodeConfig
from .discovery import Interface
from .discovery.follow import wait_interface
from .driver import MeshDriver
from .errors import CutOffReadOnly, NotRunning
from .finders import Finders
from .host.address import Following
from .host.events import EventRoutes, snapshot_detail
from .host.identity import load_identity, say_security
from .host.joining import Joining, add_seeds
from .host.loop import AcceptFailures
from .host.mesh import Members, Whom, name_in, open_mesh
from .host.narrate import Narrator, say_stopped
from .host.recording import Recorder
from .host.renewal import renew_identity_after
from .ids import NodeId
from .log import SqliteStore
from .log.datadir import DataDir
from .log.stats import STATS_INTERVAL, StatRows
from .memtune import raise_descriptor_limit
from .ports import Feature, Subscriber
from .protocol import Mesh, PeerInfo
from .protocol.core import CoreServices
from .protocol.events import BufferSpace, CutOff, PeerExcluded
from .protocol.ownseq import IdentityRetired
from .protocol.replication import Replicator
from .security import GroupSecret, NodeIdentity
from .transport.rotation import KeyRotation
from .transport.zap import AllowList, MeshSecurity
from .wire import LogRecord

__all__ = ["Node", "run_node"]

log = logging.getLogger("huddle.node")


class Node:
    """A running huddle node.  Create, then ``await node.run()``."""

    def __init__(self, config: NodeConfig, *, features: Sequence[Feature] | None = None,
                 carried: list[tuple[str, str]] | None = None, renewed: dict[str, str] | None = None) -> None:
        """``features``: the capabilities it runs (huddle/ports.py; None: the default list, huddle/features.py).
        ``carried`` and ``renewed``: what the node that ran before under the identity it retired left (:meth:`_renew_identity`):
        the events it recorded under numbers its peers held with other content, recorded again, and why it changed."""
        config.require_secured()  # a group secret, or open mode chosen (docs/security.md, "Secure by default")
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
        self.members = Members(lambda: self._core, self.local_now)  # failed and left ones, forgetting (14.2)
        self._driver = MeshDriver(self.local_now, self._events.publish)  # attached to the mesh and transport by _start
        self._finders = Finders(self._driver.discovered)
        self.advertise_door = self._finders.advertise_door  # the features ask this, follow_address, watch_keys
        self._following = Following(self._finders, config.mesh.port_range, self._set_endpoint)
        self.follow_address, self.watch_keys = self._following.movers.append, self._following.key_watchers.append
        self._left = False  # the mesh said GBYE
        self.api_url: str | None = None
        self._recorder = Recorder(lambda: self._replicator, writable=self.check_writable, local_now=self.local_now,
                                  mesh_time=self.mesh_time, execute=self.execute, carried=list(carried or ()),
                                  renewed=renewed is not None)
        self.add_listener, self.publish = self._events.add_listener, self._events.publish
        self.join = Joining(lambda: self.mesh, self.local_now, self.execute, self.add_listener).join  # huddle join
        self.emit, self.emit_many, self.record_soon = self._recorder.emit, self._recorder.emit_many, self._recorder.record_soon
        self.until_recording = self._recorder.until_recording
        self._stop = asyncio.Event()
        self._ready = asyncio.Event()
        self._base = time.time() - time.monotonic()
        self.started_at = 0.0
        self.driver_stats, self.traffic = self._driver.stats, self._driver.traffic
        # Addressed messages (MeshDriver.send_to ...): queued, or waiting for room; BULKs queued.
        self.send_to, self.send_to_wait, self.queued_bulk = (self._driver.send_to, self._driver.send_to_wait,
                                                             self._driver.queued_bulk)
        self.loop_exception = AcceptFailures()  # the event loop's handler: counts what could not be accepted

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
        stats["accept_failures"] = self.loop_exception.count
        stats["security"] = None if self.security is None else self.security.stats()
        out = node_info(self.mesh, identity=self.identity, node_type=self.node_type, mesh_time=self.mesh_time(),
                        started_at=self.started_at, read_only=self.read_only,
                        features={f.name: facts for f in self.features if (facts := f.facts()) is not None},
                        security=None if self.security is None else self.security.describe(), stats=stats)
        # Whether it records now (protocol.md 12.1); the identity it took over from, if it retired one.
        return out | self._recorder.describe() | {"identity_renewed": self.renewed}

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
            raise CutOffReadOnly(f"this {self.node_type.name} node is cut off from the group and read-only until a "
                                 "peer is back; nothing was recorded")

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
        """Ask the node to leave the mesh gracefully (GBYE) and stop.  Its lock says so at once:
        a node started on its data directory meanwhile waits for it rather than refusing."""
        self.data_dir.stopping()
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
            stack.callback(lambda: say_stopped(self.uuid, self.config.name, self.started_at, self.retired is not None,
                                               self.data_dir.path))  # the last thing done, once all is closed
            self.data_dir.lock()
            stack.callback(self.data_dir.unlock)
            stack.callback(self._renew_identity)  # after the store closed, before the unlock
            me = load_identity(self.data_dir, self.config, renewed=self.renewed is not None)
            self.identity, self.uuid, self.config, self.security, self._new_identity = (
                me.keys, me.uuid, me.config, me.security, me.new)
            iface = await wait_interface(self.config.discovery.interface, self._stop)
            if iface is None:
                return  # stopped while waiting
            await self._start(stack, iface)
            self._ready.set()
            if on_ready is not None:
                on_ready(self)
            async with asyncio.TaskGroup() as tg:
                tasks = [tg.create_task(self._driver.run(STATS_INTERVAL, self._snapshot))]
                tasks += [tg.create_task(finder) for finder in self._finders.tasks()]
                tasks += [tg.create_task(run) for run in self._spawned]
                if self._following.follower is not None:
                    tasks.append(tg.create_task(self._following.follower.run()))
                tasks.append(tg.create_task(self._recorder.record_carried()))  # ends once the node records
                await self._stop.wait()
                for task in tasks:
                    task.cancel()

    async def _start(self, stack: contextlib.AsyncExitStack, iface: Interface) -> None:
        cfg, uuid, identity, security = self.config, self.uuid, self.identity, self.security
        assert uuid is not None and identity is not None and security is not None  # run() read them
        self._following.iface = iface
        who = Whom(uuid, identity, security, self.node_type, self.data_dir, self._new_identity)
        parts = open_mesh(stack, cfg, who, iface, driver=self._driver, features=self.features, now=self.local_now,
                          leave=self._leave)
        transport, port, endpoint, mesh = parts.transport, parts.port, parts.endpoint, parts.mesh
        self.started_at = time.time()
        self._store, self._rows, self._core, self._mesh = parts.store, parts.rows, parts.core, mesh
        self._events.rows, self._replicator = parts.rows, parts.core.replicator
        stack.callback(self._spawned_unrun)
        for feature in self.features:  # each one's driver: its closers on the stack, its tasks spawned
            await feature.start(stack, self._spawned.append, self)
        self._wire_events()
        transport.start(asyncio.get_running_loop())
        add_seeds(mesh, cfg.discovery.seeds, self.local_now())
        await self._finders.start(stack, cfg, uuid=uuid, iface=iface, port=port, endpoint=endpoint)
        self.rotation = self._following.rotation(security, transport, port, self.data_dir.path, 2 * mesh.beat)
        from .api.http import start_api  # noqa: PLC0415 - aiohttp: imported when a node runs, not with huddle.node

        api_runner, self.api_url = await start_api(self, cfg.api.address, cfg.limits.api, token_dir=self.data_dir.path,
                                                   require_token=cfg.api.require_token)
        stack.push_async_callback(api_runner.cleanup)
        self._following.follow(cfg.discovery.interface or iface.name, port, transport, counts=self.driver_stats,
                               failed=self._network_failed)
        stack.callback(self._leave)  # stopping starts with GBYE, while everything still runs
        self.execute()
        log.info("node %s (%s) in group %r at %s, api %s, data in %s", uuid.short, cfg.name, cfg.group, endpoint,
                 self.api_url, self.data_dir.path)
        say_security(security, identity)

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
        """Once the store is closed, after a retirement: a new identity (host/renewal.py)."""
        if self.retired is not None and self.uuid is not None:
            self._recorder.carried, self.renewed = renew_identity_after(
                self.data_dir.path, self.config.group, self.uuid, self.retired, self._recorder.carried)

    def _snapshot(self, now: float) -> None:
        """Every STATS_INTERVAL, from the timer loop: a statistics row with the node's
        counters and each peer's state and RTT."""
        if self._rows is not None and self._mesh is not None:
            self._rows.snapshot(self.mesh_time(), snapshot_detail(self.info()["stats"], self.replicator.stats.as_dict(),
                                                                  self.peers()))

    def execute(self) -> None:
        """Carry out the mesh's pending actions (a feature's service asked to send)."""
        self._driver.execute()

    def _spawned_unrun(self) -> None:
        """The features' tasks that never ran (a start failed before the task group): closed, not left."""
        for run in self._spawned:
            run.close()

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
            *Narrator().subscriptions(), *self.members.subscriptions(),
        ]
        self._events.wire(routes)

    def _save_excluded(self, event: PeerExcluded) -> bool:
        self.data_dir.save_excluded(self.mesh.excluded)
        return False

    def _empty(self, event: CutOff) -> bool:
        """Cut off, an ``empty`` node type keeps only its own events (:meth:`Recorder.keep_own_only`)."""
        if event.cut_off and self._store is not None and self._mesh is not None and self.uuid is not None:
            self._recorder.keep_own_only(self._store, self.uuid, self.node_type.name)
        return False

    def name_of(self, uuid: NodeId) -> str:
        """A node's name as this node knows it (its short id if it knows none)."""
        return uuid.short if self._mesh is None else name_in(self._mesh, uuid, self.local_now())


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

