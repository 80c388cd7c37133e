"""The node's mesh stack, made in order as it starts: the transport (its ROUTER bound on
the interface), the log, the peer services (the protocol's and the features'), the mesh
over them, and the driver attached to all three (docs/architecture.md, "The node").

:func:`open_mesh` pushes each part's closer on the node's exit stack as it makes it, so a
start that fails half-way closes what it opened (and says GBYE to the peers it met)."""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..config import NodeConfig, NodeType
from ..discovery import Interface
from ..driver import MeshDriver
from ..errors import ConfigError
from ..ids import NodeId
from ..log import SqliteStore
from ..log.datadir import DataDir
from ..log.integrity import LogGuard
from ..log.stats import StatRows
from ..ports import Feature, LinkWatcher, Subscriber
from ..protocol import Mesh
from ..protocol.core import CoreServices, build_services
from ..protocol.events import LogAppended
from ..protocol.picture import FORGET_KIND
from ..ratelog import RateLog
from ..security import NodeIdentity, node_id_for
from ..transport.zap import MeshSecurity
from ..transport.zmq_transport import ZmqTransport
from ..wire import Departed

__all__ = ["Members", "MeshParts", "Whom", "feature_facts", "links_changed", "name_in", "open_mesh"]

log = logging.getLogger("huddle.node")


@dataclass(frozen=True, slots=True)
class MeshParts:
    """What :func:`open_mesh` made."""

    transport: ZmqTransport
    port: int  # the ROUTER's
    endpoint: str  # tcp://IP:PORT
    store: SqliteStore
    rows: StatRows  # the statistics rows, in the store
    core: CoreServices  # the mesh's peer services, by name
    mesh: Mesh


@dataclass(frozen=True, slots=True)
class Whom:
    """Who the node is and where it runs: what the mesh stack is made for."""

    uuid: NodeId
    identity: NodeIdentity
    security: MeshSecurity
    node_type: NodeType
    data_dir: DataDir
    new_identity: bool  # no peer can hold records in its name: no start-up window


def open_mesh(stack: contextlib.ExitStack | contextlib.AsyncExitStack, cfg: NodeConfig, who: Whom, iface: Interface,
              *, driver: MeshDriver, features: Sequence[Feature], now: Callable[[], float],
              leave: Callable[[], None]) -> MeshParts:
    """Make the mesh stack on ``iface`` (the module docstring); ``leave()`` says GBYE."""
    uuid = who.uuid
    made: list[Mesh] = []  # the mesh, once made

    def cut_key(public_key: bytes) -> None:
        """A key left the allow-list: end that node's session now (its messages are dropped already)."""
        for mesh in made:
            mesh.end_incarnation(node_id_for(public_key), "its key was removed from the allow-list", now())
            driver.execute()

    watchers = [w for f in features if (w := f.links(cfg)) is not None]  # guests' hosts: one per guest
    driver.on_disconnect += [w.forget for w in watchers]
    transport = ZmqTransport(uuid, on_frames=driver.on_frames, on_stalled=driver.on_stalled,
                             on_connect_failed=driver.on_connect_failed, limits=cfg.limits.mesh,
                             on_link=links_changed(watchers), curve=who.security.setup)
    who.security.attach(transport.guard, cut_key)
    stack.callback(transport.close)
    try:
        port = transport.bind(iface.ip, cfg.mesh.port, cfg.mesh.port_range)
    except Exception as exc:  # zmq.ZMQError: address in use, no free port
        raise ConfigError(f"cannot bind the ROUTER on {iface.ip}:{cfg.mesh.port or cfg.mesh.port_range}: {exc}") from None
    endpoint = f"tcp://{iface.ip}:{port}"
    guard = LogGuard(who.data_dir.path, cfg.group, uuid)
    store = guard.open()  # refuses a damaged log (LogDamaged names `huddle repair`)
    stack.callback(_close_store, store, guard)
    returned = store.drop_returned(uuid)
    if returned:
        log.warning("dropped %d records in this node's name that came from peers: "
                    "its sequence continues what it wrote itself", returned)
    core = build_services(uuid, now=now(), store=store, log_limits=cfg.limits.log, delivery=cfg.delivery_timing(),
                          conn_counters=transport.counters, log_signer=who.identity,
                          log_secure=cfg.group_secret is not None, report_signer=who.identity,
                          extra=[s for f in features for s in f.peer_services(uuid)],
                          takers=[t for f in features for t in f.payload_takers()],
                          facts=lambda: feature_facts(features))
    mesh = Mesh(
        uuid, name=cfg.name, group=cfg.group, endpoint=endpoint,
        incarnation=os.urandom(8).hex(), now=now(), timing=cfg.mesh_timing(),
        excluded=who.data_dir.excluded(), node_type=who.node_type.name, rate=who.node_type.send_rate,
        limits=cfg.limits.mesh, guests=cfg.guests.marco_port if cfg.guests.enabled else 0, services=core.all(),
        identity=who.identity, secure=cfg.group_secret is not None, tags=cfg.tags,
    )
    driver.attach(mesh, transport, core)
    made.append(mesh)
    # The ROUTER's connections beyond the sessions bound to their address are closed after
    # the handshake timeout (transport/accepted.py): the transport asks the mesh which.
    transport.bound_by_address = mesh.bound_by_address
    transport.accepted.grace = mesh.timing.handshake_timeout
    stack.callback(leave)  # a start that fails half-way still says GBYE to the peers it met
    replicator, allow = core.replicator, who.security.allow
    assert replicator is not None  # built with a store
    if allow is not None:  # the trust list's keys are vouched for (12.2)
        replicator.vouch(node_id_for(k.public_key) for k in allow.trust.entries())
    # Nothing recorded until the peers have shown what they hold in this node's name
    # (a log restored from an older copy takes back what it lost: protocol.md 12.1).
    if not who.new_identity:
        replicator.hold_own(now(), cfg.limits.log.own_wait, cfg.limits.log.own_quiet)
    return MeshParts(transport, port, endpoint, store, StatRows(store, guard), core, mesh)


_FACT_FAILURES = RateLog(log, period=60.0)


def feature_facts(features: Sequence[Feature]) -> dict[str, dict[str, object] | None]:
    """Each feature's facts now, by name, for the node's reports (protocol.md 14.1 ``ext``).  A
    feature whose ``facts()`` raises says nothing this time (logged, at most a line a minute):
    a feature's bug must not stop the picture's reports."""
    out: dict[str, dict[str, object] | None] = {}
    for f in features:
        try:
            out[f.name] = f.facts()
        except Exception as exc:
            _FACT_FAILURES.log(logging.ERROR, f.name, time.monotonic(), "the %s feature's facts() failed: %r", f.name,
                               exc)
    return out


def links_changed(watchers: list[LinkWatcher]) -> Callable[[int, bool], None] | None:
    """What the transport calls on a link change: the features' watchers (None: no monitor needed)."""
    if len(watchers) < 2:
        return watchers[0].changed if watchers else None

    def changed(conn: int, up: bool) -> None:
        for watcher in watchers:
            watcher.changed(conn, up)
    return changed


def name_in(mesh: Mesh, uuid: NodeId, now: float) -> str:
    """A node's name as ``mesh`` knows it (its short id if it knows none)."""
    if uuid == mesh.uuid:
        return mesh.name
    return next((p.name for p in mesh.peers(now) if p.uuid == uuid), uuid.short)


class Members:
    """The system picture's members as an operator handles them (protocol.md 14.2, "Member
    states"): the peers this node lost and still names, whether a member may be forgotten,
    and the log's ``forget`` events, ours or a peer's, applied to this node's reports."""

    def __init__(self, core: Callable[[], CoreServices | None], local_now: Callable[[], float]) -> None:
        self._core = core  # the mesh's peer services (None: not started)
        self._now = local_now

    def lost_peers(self) -> dict[NodeId, Departed]:
        """The peers this node lost and still names in its reports (failed or left, since when)."""
        core = self._core()
        return {} if core is None else core.reports.lost_peers()

    def departed_state(self, peer: NodeId) -> str | None:
        """``failed`` or ``left`` if the system picture shows ``peer`` so: what may be forgotten."""
        core = self._core()
        return None if core is None else core.reports.departed_state(peer)

    def subscriptions(self) -> list[tuple[tuple[type, ...], Subscriber]]:
        return [((LogAppended,), self._forgets)]

    def _forgets(self, event: LogAppended) -> bool:
        """The node a ``forget`` event names is forgotten in our reports until it returns."""
        core = self._core()
        if core is not None:
            for record, _ in event.records:
                if record.kind == FORGET_KIND:
                    core.reports.forget_event(record.body, self._now())
        return False


def _close_store(store: SqliteStore, guard: LogGuard) -> None:
    guard.note(store)  # the own-sequence mark follows what is durable
    store.close()
