"""CRG ScoreBoard for a huddle bout as a feature of the node (:class:`huddle.ports.Feature`):
``/WS`` (crg/ws_http.py) fed by the bout document's feature, and the ``--crg`` export and
import (crg/cli.py) under ``huddle bout``.

It reads the document through the document feature it is given (its desk, once it runs),
and hears the log's appends: if a CRG client listens, the pusher looks whether the
document changed and pushes what did (docs/crg.md, "/WS").
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

from ..doc.feature import DocumentFeature
from ..doc.model import Element
from ..ports import FeatureBase, FeatureHost, Spawn, Subscriber
from ..protocol.events import LogAppended

if TYPE_CHECKING:  # aiohttp loads when a node serves, not with `huddle --help`
    from aiohttp import web

    from .ws_http import CrgHub

__all__ = ["CrgFeature"]


class CrgFeature(FeatureBase):
    """CRG ScoreBoard's game files and WebSocket (the module docstring)."""

    name: Final = "crg"

    def __init__(self, doc: DocumentFeature) -> None:
        self._doc = doc
        self._hub: CrgHub | None = None

    def _source(self) -> tuple[Element, object]:
        engine = self._doc.desk.engine
        doc = engine.document  # made again here if events arrived out of order
        return doc.root, (id(engine), id(doc), len(engine))

    @property
    def hub(self) -> CrgHub:
        if self._hub is None:
            from .ws_http import CrgHub  # noqa: PLC0415 - aiohttp: when a node serves

            self._hub = CrgHub()
        return self._hub

    async def start(self, stack: contextlib.AsyncExitStack, spawn: Spawn, host: FeatureHost) -> None:
        hub = self.hub
        hub.source = self._source
        if host.config.crg.ws_writable:
            hub.write = self._doc.desk.apply_ops  # the document started before this feature (the list's order)
        spawn(hub.run())

    def subscriptions(self) -> Sequence[tuple[tuple[type, ...], Subscriber]]:
        return [((LogAppended,), self._log_appended)]

    def _log_appended(self, event: LogAppended) -> bool:
        if self._hub is not None:
            self._hub.changed()
        return False

    def routes(self, app: web.Application) -> None:
        from .ws_http import add_crg_routes  # noqa: PLC0415 - aiohttp: when a node serves

        add_crg_routes(app, self.hub)

    def facts(self) -> dict[str, object] | None:
        return None if self._hub is None else self._hub.facts()

