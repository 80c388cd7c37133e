"""Orders from any node as a feature of the node (:class:`huddle.ports.Feature`): the operator's
orders to another node's apps and to the node itself (docs/control.md, "Orders from any node").

* its peer service (:class:`~huddle.control.carrier.OrdersPeer`), taking the ``AA C0``
  addressed payloads (control/orders.py), added to the mesh;
* its driver (:class:`~huddle.control.remote.OrderDesk`), made in ``start``: it asks, runs
  and records orders, reading the apps feature's supervisor when an order comes; a
  shutdown or reboot command ordered runs once the node stopped (its closer is pushed before
  the apps feature's, so it runs after the apps stopped);
* its routes (:mod:`huddle.api.orders_http`) and its command (``huddle control``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from ..errors import LocalProtocolError
from ..ids import NodeId
from ..ports import ApiHandler, ClientOptions, FeatureBase, FeatureHost, Spawn, Subscriber
from ..protocol.service import PayloadTaker, PeerService
from .carrier import OrderPayload, OrdersPeer
from .feature import AppsFeature

if TYPE_CHECKING:  # the driver and the routes load when a node runs, not with `huddle --help`
    from aiohttp import web

    from .remote import OrderDesk

__all__ = ["OrdersFeature"]


class OrdersFeature(FeatureBase):
    """Orders to any node (the module docstring); ``apps`` is the node's apps feature."""

    name: Final = "control"

    def __init__(self, apps: AppsFeature) -> None:
        self._apps = apps
        self._peer: OrdersPeer | None = None
        self._desk: OrderDesk | None = None

    @property
    def desk(self) -> OrderDesk:
        """The running order desk (what the routes use)."""
        if self._desk is None:
            raise LocalProtocolError("the node is not running")
        return self._desk

    def peer_services(self, uuid: NodeId) -> Sequence[PeerService]:
        self._peer = OrdersPeer()
        return [self._peer]

    def payload_takers(self) -> Sequence[PayloadTaker]:
        return [] if self._peer is None else [self._peer]  # control's payloads (AA C0) come here

    async def start(self, stack: contextlib.AsyncExitStack, spawn: Spawn, host: FeatureHost) -> None:
        from .remote import OrderDesk  # noqa: PLC0415 - loaded as the node starts, not with the CLI

        assert self._peer is not None, "peer_services() comes before start()"
        apps = self._apps
        desk = self._desk = OrderDesk(host, self._peer, lambda: apps.supervisor, host.config.control)
        stack.push_async_callback(desk.after_stop)  # the last of the closers pushed so far: after the apps stop

    def subscriptions(self) -> Sequence[tuple[tuple[type, ...], Subscriber]]:
        return [((OrderPayload,), self.desk.handle)]  # the orders' payloads go to the desk alone

    def routes(self, app: web.Application) -> None:
        from ..api.orders_http import add_order_routes  # noqa: PLC0415 - aiohttp: when a node serves

        add_order_routes(app, self)

    def commands(self, sub: Any, client_options: ClientOptions, epilog: str) -> dict[str, ApiHandler]:
        from .orders_cli import add_parsers, run  # noqa: PLC0415 - small; its client loads when it runs

        add_parsers(sub, client_options, epilog)
        return {"control": run}
