"""Who hears the node's events, in order (docs/architecture.md, "The feature unit").

:class:`EventRoutes` keeps, per event type, the ordered list of its subscribers: the
ones the node gives (its own and its features'), then the statistics rows, then the
API's listeners.  A subscriber that returns True consumed the event: the ones after it
do not see it.
"""

from __future__ import annotations

import logging
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..log.stats import StatRows
from ..ports import Renderer, Subscriber
from ..protocol import Event, PeerInfo
from ..protocol.events import NOT_STATISTICS, json_row, stat_row

__all__ = ["EVENT_TYPES", "EventRoutes", "Listener", "snapshot_detail"]

log = logging.getLogger("huddle.node")

Listener = Callable[[Any], None]  # hears the core's events (Event) and the features' own
EVENT_TYPES: tuple[type, ...] = typing.get_args(Event)


class EventRoutes:
    """The node's events to their subscribers, the statistics rows and the listeners."""

    def __init__(self, renderers: Mapping[type, Renderer]) -> None:
        """``renderers``: the features' own event classes, each with its JSON."""
        self.renderers = dict(renderers)
        self.rows: StatRows | None = None  # the statistics rows, once the store is open
        self._listeners: tuple[Listener, ...] = ()  # replaced, never changed: no copy per event
        self._routes: dict[type, list[Subscriber]] = {}  # event type -> its subscribers, in order

    def add_listener(self, fn: Listener) -> Callable[[], None]:
        """Call ``fn(event)`` for every event; returns a function that removes it."""
        self._listeners += (fn,)  # a new tuple: an event being handed out keeps the one it started with

        def remove() -> None:
            if fn in self._listeners:
                k = self._listeners.index(fn)
                self._listeners = self._listeners[:k] + self._listeners[k + 1:]
        return remove

    def wire(self, subscribers: Sequence[tuple[tuple[type, ...], Subscriber]]) -> None:
        """Route each event type to ``subscribers`` in their order, then to the statistics
        rows (the core's events that are statistics, the features' own as the stream shows
        them), then to the listeners (the API's: every event, the features' own too)."""
        every, own = EVENT_TYPES, tuple(self.renderers)
        routes = [
            *subscribers,
            (tuple(kind for kind in every if not issubclass(kind, NOT_STATISTICS)), self._stat_row),
            (own, self._feature_row),
            ((*every, *own), self._to_listeners),
        ]
        self._routes = {kind: [fn for kinds, fn in routes if kind in kinds]
                        for kinds, _ in routes for kind in kinds}

    def publish(self, event: object) -> None:
        """Hand ``event`` to its subscribers, in order, until one consumes it."""
        for subscriber in self._routes.get(type(event), ()):
            if subscriber(event):
                return

    def _stat_row(self, event: Event) -> bool:
        if self.rows is not None:
            self.rows.event(stat_row(event))
        return False

    def _feature_row(self, event: object) -> bool:
        """A feature's event as a statistics row, rendered as the event stream shows it."""
        if self.rows is not None:
            self.rows.event(json_row(self.renderers[type(event)](event), getattr(event, "peer", None)))
        return False

    def _to_listeners(self, event: object) -> bool:
        for fn in self._listeners:
            try:
                fn(event)
            except Exception:  # a listener's bug must not stop the node
                log.exception("event listener failed")
        return False


def snapshot_detail(stats: dict[str, Any], log_stats: dict[str, Any], peers: Sequence[PeerInfo]) -> dict[str, Any]:
    """A ``snapshot`` statistics row's detail: the node's counters, the log's, and each peer's
    state and round trip (docs/export.md)."""
    return stats | {"log": log_stats, "peers": [
        {"uuid": str(p.uuid), "state": p.state, "rtt_ms": None if p.rtt is None else p.rtt * 1000} for p in peers]}
