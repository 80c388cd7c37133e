"""The peer services a node hosts on its mesh, built in one place.

The node and the simulator both call :func:`build_services` and hand the list to
:class:`~huddle.protocol.mesh.Mesh`; a new peer service of the protocol
(protocol/service.py) is one module and one line here.  The services of the node's
features (posts: huddle/ports.py) come from the caller, after the protocol's own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..ids import NodeId
from ..limits import LogLimits
from .delivery import Delivery, DeliveryTiming
from .logchain import LogSigner
from .picture import PictureTiming, Reports
from .replication import EventStore, ReplicationTiming, Replicator
from .service import PayloadTaker, PeerService

__all__ = ["build_services"]


def build_services(
    uuid: NodeId,
    *,
    now: float,
    store: EventStore | None = None,
    log_timing: ReplicationTiming | None = None,
    log_limits: LogLimits | None = None,
    delivery: DeliveryTiming | None = None,
    picture: PictureTiming | None = None,
    conn_counters: Callable[[int], tuple[int, int]] | None = None,
    log_signer: LogSigner | None = None,
    log_secure: bool = False,
    report_signer: LogSigner | None = None,
    extra: Sequence[PeerService] = (),
    takers: Sequence[PayloadTaker] = (),
) -> list[PeerService]:
    """The replicated log (when there is a ``store``), addressed delivery (when it has a
    timing), the system picture's reports, then the ``extra`` services of the node's
    features, in the order the mesh runs them; ``takers`` take the addressed payloads that
    start with their prefix (posts: Hydra's), so they need delivery.  ``conn_counters`` is
    the driver's (messages, octets) sent on a connection.
    ``log_signer`` signs this node's records (its key); ``log_secure``: a group secret is set,
    unsigned records are refused.  ``report_signer`` signs this node's RAWS reports (its key, whether
    or not it signs records: protocol.md 14.1)."""
    services: list[PeerService] = []
    replicator = None
    if store is not None:
        replicator = Replicator(uuid, store, now=now, timing=log_timing, limits=log_limits, signer=log_signer,
                                secure=log_secure)
        services.append(replicator)
    addressed = None
    if delivery is not None:
        addressed = Delivery(uuid, timing=delivery, takers=takers)
        services.append(addressed)
    elif takers:
        raise ValueError("payload takers ride on addressed delivery: give it a timing")
    services.append(Reports(uuid, now=now, timing=picture, conn_counters=conn_counters,
                            delivery_counters=None if addressed is None else addressed.counters,
                            forgeries=None if replicator is None else replicator.forgeries.copy, signer=report_signer,
                            secure=log_secure))
    services.extend(extra)
    return services
