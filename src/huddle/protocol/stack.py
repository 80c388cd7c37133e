"""The peer services a node hosts on its mesh, built in one place.

The node and the simulator both call :func:`build_services` and hand the list to
:class:`~huddle.protocol.mesh.Mesh`; a new peer service (protocol/service.py) is
one module and one line here.
"""

from __future__ import annotations

from collections.abc import Callable

from ..ids import NodeId
from ..limits import LogLimits
from .delivery import Delivery, DeliveryTiming
from .picture import PictureTiming, Reports
from .replication import EventStore, ReplicationTiming, Replicator
from .service import PeerService

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
) -> list[PeerService]:
    """The replicated log (when there is a ``store``), addressed delivery (when it has a
    timing) and the system picture's reports, in the order the mesh runs them.
    ``conn_counters`` is the driver's (messages, octets) sent on a connection."""
    services: list[PeerService] = []
    if store is not None:
        services.append(Replicator(uuid, store, now=now, timing=log_timing, limits=log_limits))
    addressed = None if delivery is None else Delivery(uuid, timing=delivery)
    if addressed is not None:
        services.append(addressed)
    services.append(Reports(uuid, now=now, timing=picture, conn_counters=conn_counters,
                            delivery_counters=None if addressed is None else addressed.counters))
    return services
