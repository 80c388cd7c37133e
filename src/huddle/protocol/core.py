"""The core's peer services, built in one place and handed out typed.

The node and the simulator both call :func:`build_services` and hand
:meth:`CoreServices.all` to :class:`~huddle.protocol.mesh.Mesh`; each then takes the
services it needs from the :class:`CoreServices` by name (the driver delivery and the
reports, the node the replicator), never by looking one up by its class.

The core's services are the replicated log, addressed delivery and the system picture's
reports.  A service of a feature outside the protocol (posts: Hydra's payloads and BULK)
is built by its caller and given here: as ``extra`` services, run after the core's, and as
``takers`` of addressed payloads (protocol/service.py, ``PayloadTaker``).  A new core peer
service is one module and one field here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..ids import NodeId
from ..limits import LogLimits
from .delivery import Delivery, DeliveryTiming
from .logchain import LogSigner
from .logstate import ReplicationTiming
from .logstore import EventStore
from .picture import FeatureFacts, Reports
from .picture_compute import PictureTiming
from .replication import Replicator
from .service import PayloadTaker, PeerService

__all__ = ["CoreServices", "build_services"]


@dataclass(frozen=True, slots=True)
class CoreServices:
    """The peer services a mesh hosts: the core's by name (``replicator`` None: no log;
    ``delivery`` None: no addressed messages), then ``extra`` ones a caller gave."""

    replicator: Replicator | None
    delivery: Delivery | None
    reports: Reports
    extra: tuple[PeerService, ...] = ()

    def all(self) -> tuple[PeerService, ...]:
        """Every service, in the order the mesh runs them: the log, delivery, the reports, the extra ones."""
        core = (self.replicator, self.delivery, self.reports)
        return (*(s for s in core if s is not None), *self.extra)


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
    takers: Sequence[PayloadTaker] = (),
    extra: Sequence[PeerService] = (),
    facts: FeatureFacts | None = None,
) -> CoreServices:
    """The replicated log (when there is a ``store``), addressed delivery (when it has a
    timing) handing ``takers`` the payloads they claim, the system picture's reports and
    the ``extra`` services.  ``conn_counters`` is the driver's (messages, octets) sent on a
    connection.  ``log_signer`` signs this node's records (its key); ``log_secure``: a group
    secret is set, unsigned records are refused.  ``report_signer`` signs this node's RAWS
    reports (its key, whether or not it signs records: protocol.md 14.1); ``facts`` gives
    the node's features' facts, which its reports carry (14.1 ``ext``).  Payload takers
    without delivery are a ``ValueError``: they ride on it."""
    replicator = None
    if store is not None:
        replicator = Replicator(uuid, store, now=now, timing=log_timing, limits=log_limits, signer=log_signer,
                                secure=log_secure)
    addressed = None
    if delivery is not None:
        addressed = Delivery(uuid, timing=delivery, takers=takers)
    elif takers:
        raise ValueError("payload takers ride on addressed delivery: it needs a timing")
    reports = Reports(uuid, now=now, timing=picture, conn_counters=conn_counters,
                      delivery_counters=None if addressed is None else addressed.counters,
                      forgeries=None if replicator is None else replicator.forgeries.copy, signer=report_signer,
                      secure=log_secure, features=facts)
    return CoreServices(replicator, addressed, reports, tuple(extra))
