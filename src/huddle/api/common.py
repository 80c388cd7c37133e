"""What the API's modules share: the application keys, the door's state, the error answer.

Both :mod:`huddle.api.http` and :mod:`huddle.api.posts_http` import this module, and
it imports neither, so the two need not import each other.
"""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from ..limits import ApiLimits
from ..ratelog import RateLog
from .guard import ApiCounters, ConnectionGuard
from .ports import ApiNode

__all__ = ["NODE_KEY", "STATE_KEY", "ApiState", "error_response"]

log = logging.getLogger("huddle.api")

NODE_KEY: web.AppKey[ApiNode] = web.AppKey("node")


class ApiState:
    """The API's door: its limits, counters, connections and subscribers."""

    def __init__(self, limits: ApiLimits) -> None:
        self.limits = limits
        self.counters = ApiCounters()
        self.guard: ConnectionGuard[RequestHandler] = ConnectionGuard(limits, self.counters)
        self.transports: dict[RequestHandler, asyncio.Transport] = {}
        self.subscribers = 0
        self.exposed = False  # listening beyond loopback
        self.token: str | None = None  # required on every request but the login page's, when set
        self.refusals_log = RateLog(log, period=60.0)

    def refused(self, kind: str, message: str, *args: object) -> None:
        """Log a refusal, at most once a minute per kind."""
        self.refusals_log.warning(kind, asyncio.get_running_loop().time(), message, *args)

    def warning(self) -> str | None:
        if not self.exposed:
            return None
        return ("the API listens beyond loopback: it requires its token, but speaks plain HTTP, so anyone on the "
                "path can read what it answers and the token itself; prefer a TLS proxy in front of "
                "--api 127.0.0.1:PORT")


STATE_KEY: web.AppKey[ApiState] = web.AppKey("api_state")


def error_response(status: int, message: str) -> web.Response:
    """Every error the API gives: JSON ``{"error": message}`` with ``status``."""
    return web.json_response({"error": message}, status=status)
