"""The bout document as a feature of the node (:class:`huddle.ports.Feature`): everything
of the shared document and its jams that plugs into a node, in one place.

* its desk (:class:`~huddle.doc.desk.DocumentDesk`), made as the node starts from the
  log's ``doc`` records, and recording operations through the feature host;
* its subscriptions: each run of records new in the log goes to the desk; cut off, a node
  of an ``empty`` type makes the document again from what its log kept (the node drops
  the other nodes' records first: its subscriber of the cut-off comes ahead of the
  features');
* its ``document`` statistics row, when one is due, every STATS_INTERVAL and once more as
  the node stops (the pipeline's replay checks its digest: docs/export.md);
* its routes (:mod:`huddle.api.doc_http`), its command (:mod:`huddle.doc.cli`) and its
  facts (how many ``doc`` events, how many dropped, how many operations refused, the digest of
  the document).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from ..errors import NotRunning
from ..log.stats import STATS_INTERVAL
from ..ports import ApiHandler, ClientOptions, FeatureBase, FeatureHost, Spawn, Subscriber
from ..protocol.events import CutOff, LogAppended
from .desk import DocumentDesk, Recording
from .model import digest
from .ops import DOC_KIND

if TYPE_CHECKING:  # the routes load when a node serves, not with `huddle --help`
    from aiohttp import web

__all__ = ["DocumentFeature"]


class DocumentFeature(FeatureBase):
    """The shared bout document (the module docstring)."""

    name: Final = "doc"

    def __init__(self) -> None:
        self._desk: DocumentDesk | None = None
        self._host: FeatureHost | None = None
        self._empties = False  # an `empty` node type: cut off, it keeps only its own records
        self._digest: tuple[tuple[int, int], str] | None = None  # (engine, events) -> its digest, for facts()

    @property
    def desk(self) -> DocumentDesk:
        """The running desk (what the routes read and write)."""
        if self._desk is None:
            raise NotRunning("the node is not running")
        return self._desk

    async def start(self, stack: contextlib.AsyncExitStack, spawn: Spawn, host: FeatureHost) -> None:
        uuid = host.uuid
        assert uuid is not None  # the node's id is set before its features start
        me = bytes(uuid)
        self._host = host
        self._empties = host.config.type_spec().on_cut_off == "empty"
        desk = self._desk = DocumentDesk(Recording(writable=host.check_writable, stamp=host.mesh_time,
                                                   origin=lambda: (me, host.next_seq()), record=host.emit_many))
        desk.reload(host.records_of(DOC_KIND))
        stack.callback(self._row, final=True)  # the document as the node leaves it (before its log closes)
        spawn(self._rows())

    async def _rows(self) -> None:
        """A ``document`` statistics row every STATS_INTERVAL, when one is due (:meth:`DocumentDesk.row`)."""
        while True:
            self._row()
            await asyncio.sleep(STATS_INTERVAL)

    def _row(self, *, final: bool = False) -> None:
        host, desk = self._host, self._desk
        if host is not None and desk is not None:
            detail = desk.row(host.local_now(), final=final)
            if detail is not None:
                host.stat_row("document", detail)

    def subscriptions(self) -> Sequence[tuple[tuple[type, ...], Subscriber]]:
        subs: list[tuple[tuple[type, ...], Subscriber]] = [((LogAppended,), self._log_appended)]
        if self._empties:
            subs.append(((CutOff,), self._cut_off))
        return subs

    def _log_appended(self, event: LogAppended) -> bool:
        desk = self.desk
        for run, _ in event.runs:
            desk.take(run)
        return False

    def _cut_off(self, event: CutOff) -> bool:
        """Cut off, an ``empty`` node type dropped every other node's events: the document is
        made again from what its log kept (its peers send the rest again when it reconnects)."""
        host = self._host
        if event.cut_off and host is not None:
            self.desk.reload(host.records_of(DOC_KIND))
        return False

    def routes(self, app: web.Application) -> None:
        from ..api.doc_http import add_doc_routes  # noqa: PLC0415 - aiohttp: when a node serves

        add_doc_routes(app, self)

    def commands(self, sub: Any, client_options: ClientOptions, epilog: str) -> dict[str, ApiHandler]:
        from .cli import add_parser, run  # noqa: PLC0415 - only the CLI adds commands

        add_parser(sub, client_options, epilog)
        return {"doc": run}

    def facts(self) -> dict[str, object] | None:
        desk = self._desk
        if desk is None:
            return None
        engine = desk.engine
        doc, state = engine.document, (id(engine), len(engine))
        if self._digest is None or self._digest[0] != state:  # digested again only once it changed
            self._digest = (state, digest(doc.root))
        return {"events": len(engine), "dropped": len(doc.dropped), "refused": desk.refused, "digest": self._digest[1]}
