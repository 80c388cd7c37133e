"""ZRE as a feature of the node (:class:`huddle.ports.Feature`), docs/zre.md.

With ``--zre`` (``[zre]``, read in :meth:`ZreFeature.start` alone): a ZRE node on the
node's interface (or ``[zre] interface``), its HELLO naming the node's group as a ZRE
group and carrying the header ``X-HUDDLE`` (the node's mesh endpoint).  A SHOUT to that
group becomes an event of kind ``zre.shout`` in the group's log; an event this node
records (any kind but ``zre.*``) goes out as a SHOUT of two frames, its kind and its body
(JSON text), to the ZRE peers in the group.  On every node: its route
(``GET /api/v1/zre/peers``: 409 without ``--zre``), its command (``huddle zre peers``)
and its facts (the beacon port and the number of ZRE peers, with ``--zre``).  A WHISPER
from a ZRE peer is an event of the API's stream (``zre_whisper``), not of the log;
``POST /api/v1/zre/whisper`` WHISPERs to one.  In a group with a secret it speaks CURVE
with v3 beacons, as Zyre does with a key, its keypair the node's own (its identity's, whose
public half the node shows anyway: the mesh's group-derived keys never travel); ``[zre] plain``
(``--zre-plain``) speaks in clear instead, for pyre and Zyre nodes without keys.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Final

from ..errors import HuddleError, NotRecording
from ..ports import ApiHandler, ClientOptions, FeatureBase, FeatureHost, Renderer, Spawn, Subscriber
from ..protocol.events import LogAppended

if TYPE_CHECKING:  # the driver (pyzmq sockets, the interface) loads only with --zre; aiohttp when a node serves
    from aiohttp import web

    from ..client import ApiClient
    from .driver import ZreDriver
    from .peer import ZrePeer

__all__ = ["SHOUT_KIND", "ZreFeature", "ZreWhispered", "content_json", "shout_body"]

log = logging.getLogger("huddle.zre")

SHOUT_KIND: Final = "zre.shout"
MAX_BRIDGED: Final = 64 * 1024  # octets of a SHOUT's content recorded in the log; a longer one is counted, not recorded
MAX_WAITING: Final = 1024  # SHOUTs heard and not yet recorded; more are counted (shout_backlog), not recorded
BATCH: Final = 256  # SHOUTs recorded in one transaction; the loop runs other work between batches


def content_json(content: tuple[bytes, ...]) -> dict[str, object]:
    """A message's frames as received: UTF-8 text, or base64 when a frame is not UTF-8
    (``encoding`` says which)."""
    try:
        return {"frames": [f.decode() for f in content], "encoding": "utf-8"}
    except UnicodeDecodeError:
        return {"frames": [base64.b64encode(f).decode() for f in content], "encoding": "base64"}


def shout_body(peer: ZrePeer, group: str, content: tuple[bytes, ...]) -> dict[str, object]:
    """A SHOUT as an event's body: who said it, to which group, and its frames."""
    return {"uuid": peer.uuid.hex(), "name": peer.name, "group": group, **content_json(content)}


@dataclass(frozen=True, slots=True)
class ZreWhispered:
    """A ZRE peer WHISPERed to this node: an event of the API's stream (``zre_whisper``), not of the log."""

    uuid: str
    name: str
    content: dict[str, object]
    time: float

    def to_json(self) -> dict[str, Any]:
        return {"type": "zre_whisper", "uuid": self.uuid, "name": self.name, **self.content, "time": self.time}


async def _command(api: ApiClient, args: argparse.Namespace) -> tuple[Any, str]:
    """``huddle zre peers``."""
    info = await api.zre_peers()
    lines = [f"ZRE node {info['uuid']} at {info['endpoint']}, beacons on {info['beacon_address']}:{info['port']}"]
    lines += [f"  {p['name'] or '?':<20} {p['state']:<8} {p['uuid']} {p['endpoint']} groups {','.join(p['groups'])}"
              for p in info["peers"]]
    return info, "\n".join(lines)


class ZreFeature(FeatureBase):
    """ZRE (the module docstring)."""

    name: Final = "zre"
    event_renderers: Mapping[type, Renderer] = MappingProxyType({ZreWhispered: ZreWhispered.to_json})

    def __init__(self) -> None:
        self.driver: ZreDriver | None = None  # with --zre, once started
        self.headers: dict[str, str] = {}  # more headers of the HELLO, set by features that start before it
        self._host: FeatureHost | None = None
        self._waiting: list[tuple[str, Any]] = []  # SHOUTs heard, to record (at most MAX_WAITING)
        self._wake = asyncio.Event()

    async def start(self, stack: contextlib.AsyncExitStack, spawn: Spawn, host: FeatureHost) -> None:
        cfg = host.config
        if not cfg.zre.enabled:
            return
        from .driver import ZreDriver  # noqa: PLC0415 - with --zre

        assert host.uuid is not None  # the node's id is set before its features start
        self._host = host
        identity, secured = host.identity, cfg.group_secret is not None
        curve = identity.curve() if secured and identity is not None and not cfg.zre.plain else None
        driver = ZreDriver(uuid=bytes(host.uuid), name=cfg.name, group=cfg.group,
                           headers={"X-HUDDLE": host.mesh.endpoint, **self.headers},
                           interface=cfg.zre.interface or cfg.discovery.interface,
                           port=cfg.zre.port, on_shout=self._shouted, on_whisper=self._whispered, curve=curve)
        if secured and curve is None:
            log.warning("ZRE in clear in a secured group (--zre-plain): what ZRE peers and this node say to each "
                        "other, the SHOUTs of the group's events among it, crosses the network unencrypted "
                        "(docs/zre.md, \"CURVE\")")
        await driver.start()
        stack.callback(driver.close)
        self.driver = driver
        spawn(driver.run())
        spawn(self._recorder())

    def _shouted(self, peer: ZrePeer, group: str, content: tuple[bytes, ...]) -> None:
        """A SHOUT from a ZRE peer: one to this node's group goes into the log."""
        host, driver = self._host, self.driver
        if host is None or driver is None or group != host.config.group:
            return
        if sum(len(f) for f in content) > MAX_BRIDGED:
            driver.counters["shout_too_large"] += 1
            return
        if len(self._waiting) >= MAX_WAITING:
            driver.counters["shout_backlog"] += 1  # a flood faster than the log records: bounded, counted
            return
        self._waiting.append((SHOUT_KIND, shout_body(peer, group, content)))
        self._wake.set()

    async def _recorder(self) -> None:
        """Record the SHOUTs heard, in batches of one transaction each, yielding between them
        (one commit per SHOUT would let a flood hold the node's loop).  While the node cannot
        record (its start-up window, a read-only node cut off) they wait, bounded."""
        host, driver = self._host, self.driver
        assert host is not None and driver is not None
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self._waiting:
                batch = self._waiting[:BATCH]
                try:
                    host.check_writable()
                    host.emit_many(batch)
                except NotRecording:
                    await asyncio.sleep(0.2)  # the start-up window: try again
                    continue
                except HuddleError as exc:  # cut off read-only, a body the log refuses: counted, dropped
                    driver.counters["shout_not_recorded"] += len(batch)
                    log.debug("%d ZRE SHOUTs were not recorded: %s", len(batch), exc)
                del self._waiting[:len(batch)]
                await asyncio.sleep(0)

    def _whispered(self, peer: ZrePeer, content: tuple[bytes, ...]) -> None:
        """A WHISPER from a ZRE peer goes to the API's event stream (it is addressed, not the group's)."""
        host = self._host
        if host is not None:
            host.publish(ZreWhispered(peer.uuid.hex(), peer.name, content_json(content), host.mesh_time()))

    def subscriptions(self) -> Sequence[tuple[tuple[type, ...], Subscriber]]:
        return [((LogAppended,), self._log_appended)]

    def _log_appended(self, event: LogAppended) -> bool:
        """Each event this node records (its own, not a bridged SHOUT) is SHOUTed to the group."""
        driver, host = self.driver, self._host
        if driver is None or host is None:
            return False
        for record, frm in event.records:
            if frm is None and not record.kind.startswith("zre."):
                driver.shout(host.config.group, [record.kind.encode(), record.body.encode()])
        return False

    def routes(self, app: web.Application) -> None:
        from ..api.zre_http import add_zre_routes  # noqa: PLC0415 - aiohttp: when a node serves

        add_zre_routes(app, self)

    def commands(self, sub: Any, client_options: ClientOptions, epilog: str) -> dict[str, ApiHandler]:
        zre = sub.add_parser(
            "zre", help="ZRE (Zyre, pyre): the ZRE peers a node started with --zre knows",
            description="A node started with --zre speaks ZRE (RFC 36, as Zyre speaks it): it beacons on UDP "
            "port 5670 (--zre-port), greets the Zyre and pyre peers it hears, and bridges SHOUTs to its group "
            "into the group's log (docs/zre.md).", epilog=epilog)
        zre.add_argument("what", nargs="?", choices=("peers",), default="peers", help="what to show (peers)")
        client_options(zre)
        return {"zre": _command}

    def facts(self) -> dict[str, object] | None:
        driver = self.driver
        return None if driver is None else {"port": driver.port, "peers": len(driver.links),
                                            "curve": driver.curve is not None}
