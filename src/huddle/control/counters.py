"""What the apps' routes refused (``GET /api/v1/apps`` -> ``stats``)."""

from __future__ import annotations

from dataclasses import dataclass

from ..counters import Counters

__all__ = ["AppsCounters"]


@dataclass(slots=True)
class AppsCounters(Counters):
    unknown_app: int = 0  # an order or a log read for an app this node does not run (404)
    bad_name: int = 0  # a name that cannot be an app's (400)
    bad_order: int = 0  # an order that is not start, stop or restart, or a bad log offset (400)
    bad_body: int = 0  # an order with a body: they take none (400, 413 when large)
