"""The peer services a node hosts on its mesh, built in one place.

The node and the simulator both call :func:`build_services` and hand the list to
:class:`~huddle.protocol.mesh.Mesh`; a new peer service (protocol/service.py) is
one module and one line here.

It is the one module under protocol/ that knows a service outside it (posts:
tests/test_layers.py gives it a layer of its own, "stack").
"""

from __future__ import annotations

from collections.abc import Callable

from ..ids import NodeId
from ..limits import LogLimits
from ..posts.peer import PostsPeer
from .delivery import Delivery, DeliveryTiming
from .logchain import LogSigner
from .logstate import ReplicationTiming
from .logstore import EventStore
from .picture import PictureTiming, Reports
from .replication import Replicator
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
    log_signer: LogSigner | None = None,
    log_secure: bool = False,
    report_signer: LogSigner | None = None,
) -> list[PeerService]:
    """The replicated log (when there is a ``store``), addressed delivery and posts (when
    delivery has a timing: posts ride on it) and the system picture's reports, in the order
    the mesh runs them.  ``conn_counters`` is the driver's (messages, octets) sent on a connection.
    ``log_signer`` signs this node's records (its key); ``log_secure``: a group secret is set,
    unsigned records are refused.  ``report_signer`` signs this node's RAWS reports (its key, whether
    or not it signs records: protocol.md 14.1)."""
    services: list[PeerService] = []
    replicator = None
    if store is not None:
        replicator = Replicator(uuid, store, now=now, timing=log_timing, limits=log_limits, signer=log_signer,
                                secure=log_secure)
        services.append(replicator)
    posts = addressed = None
    if delivery is not None:
        posts = PostsPeer(uuid)
        addressed = Delivery(uuid, timing=delivery, takers=[posts])  # Hydra's payloads go to posts
        services.append(addressed)
    services.append(Reports(uuid, now=now, timing=picture, conn_counters=conn_counters,
                            delivery_counters=None if addressed is None else addressed.counters,
                            forgeries=None if replicator is None else replicator.forgeries.copy, signer=report_signer,
                            secure=log_secure))
    if posts is not None:
        services.append(posts)
    return services
