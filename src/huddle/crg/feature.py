"""CRG ScoreBoard for a huddle bout as a feature of the node (:class:`huddle.ports.Feature`):
``/WS`` (crg/ws_http.py) fed by the bout document's feature, and the ``--crg`` export and
import (crg/cli.py) under ``huddle bout``.

It reads the document through the document feature it is given (its desk, once it runs),
and hears the log's appends: if a CRG client listens, the pusher looks whether the
document changed and pushes what did (docs/crg.md, "/WS").
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from ..doc.feature import DocumentFeature
from ..doc.model import Element
from ..ports import ApiHandler, ClientOptions, FeatureBase, FeatureHost, Spawn, Subscriber
from ..protocol.events import LogAppended

if TYPE_CHECKING:  # aiohttp loads when a node serves, not with `huddle --help`
    from aiohttp import web

    from ..client import ApiClient
    from ..ports import Shown
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

    def commands(self, sub: Any, client_options: ClientOptions, epilog: str) -> dict[str, ApiHandler]:
        from .cli import add_crg_options  # noqa: PLC0415 - only the CLI adds commands

        bout = sub.add_parser(
            "bout", help="the bout as the sport's records: CRG ScoreBoard's game file",
            description="Export the bout to, or import it from, the game file CRG ScoreBoard 4.x/5.x saves "
            "(docs/crg.md).",
            epilog="examples:\n  huddle bout export --crg game.json\n  huddle bout import --crg game.json\n\n" + epilog,
            formatter_class=argparse.RawDescriptionHelpFormatter)
        actions = bout.add_subparsers(dest="bout_command", metavar="ACTION", required=True)
        for action, text in (("export", "write the bout to a file"), ("import", "record a file's bout in this one")):
            p = actions.add_parser(action, help=text)
            add_crg_options(p, required=True)
            client_options(p)
        return {"bout": _run}

    def facts(self) -> dict[str, object] | None:
        return None if self._hub is None else self._hub.facts()


async def _run(api: ApiClient, args: argparse.Namespace) -> Shown:
    from .cli import run_crg_export, run_crg_import  # noqa: PLC0415 - only the CLI runs commands

    return await (run_crg_export if args.bout_command == "export" else run_crg_import)(args, api)
