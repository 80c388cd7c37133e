"""Hydra on its own wire as a feature of the node (docs/hydra.md).

With ``--zre``, the node speaks Hydra (edgenet/hydra) both ways:

* it serves its posts as Hydra's own server does, on a ROUTER on the node's ZRE interface (a
  free port), advertised in the node's ZRE HELLO as the header ``X-HYDRA = "tcp://host:port"``
  (``src/hydra.c``), so that a Hydra node, which dials only the ZRE peers that carry it,
  finds it (:mod:`huddle.hydra.driver`);
* it fetches the posts of the ZRE peers that carry ``X-HYDRA`` and are not peers of its own
  mesh into its store (:mod:`huddle.hydra.fetcher`).

It reads the posts feature's store and tells the ZRE feature its header; both are given to
it, posts start before it and it starts before the ZRE feature greets anyone (the default
list's order).  Without ``--zre`` it does nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Final

from ..ports import FeatureBase, FeatureHost, Spawn
from ..posts.feature import PostsFeature
from ..zre.feature import ZreFeature
from .wire import HYDRA_HEADER

if TYPE_CHECKING:  # pyzmq and the interface load only with --zre
    from .driver import HydraDriver
    from .fetcher import HydraFetcher

__all__ = ["HydraFeature"]


class HydraFeature(FeatureBase):
    """Hydra's server and client (the module docstring)."""

    name: Final = "hydra"

    def __init__(self, posts: PostsFeature, zre: ZreFeature) -> None:
        self._posts, self._zre = posts, zre
        self.driver: HydraDriver | None = None  # with --zre, once started
        self.fetcher: HydraFetcher | None = None  # with --zre, once the ZRE feature runs

    async def start(self, stack: contextlib.AsyncExitStack, spawn: Spawn, host: FeatureHost) -> None:
        cfg = host.config
        if not cfg.zre.enabled:
            return
        from .driver import HydraDriver  # noqa: PLC0415 - with --zre
        from .server import HydraServer  # noqa: PLC0415

        assert host.uuid is not None  # the node's id is set before its features start
        store = self._posts.service.store
        identity = bytes(host.uuid).hex().upper()  # Hydra's identity: a UUID in hex (zuuid_str)
        server = HydraServer(store, identity, cfg.name)
        driver = HydraDriver(server, store, cfg.zre.interface or cfg.discovery.interface)
        self._zre.headers[HYDRA_HEADER] = driver.start()
        stack.callback(driver.close)
        self.driver = driver
        spawn(driver.run())
        spawn(self._fetch(host, identity))

    async def _fetch(self, host: FeatureHost, identity: str) -> None:
        """Fetch from the Hydra nodes the ZRE feature meets, once it runs."""
        from .fetcher import HydraFetcher  # noqa: PLC0415 - with --zre

        while (zre := self._zre.driver) is None:
            await asyncio.sleep(0.2)
        fetcher = self.fetcher = HydraFetcher(self._posts.service, zre, identity, host.config.name,
                                              host.mesh.alive_peers)
        try:
            await fetcher.run()
        finally:
            fetcher.close()

    def facts(self) -> dict[str, object] | None:
        driver, fetcher = self.driver, self.fetcher
        if driver is None:
            return None
        fetched = {} if fetcher is None else {"peers": len(fetcher.peers), **{f"fetch_{k}": v for k, v in
                                                                             fetcher.counters.items()}}
        return {"endpoint": driver.endpoint, "open_sessions": len(driver.server.sessions), **driver.counters,
                **fetched}
