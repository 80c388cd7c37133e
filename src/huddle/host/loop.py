"""The node's event-loop exception handler: a listening socket that cannot accept."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from ..ratelog import RateLog

__all__ = ["AcceptFailures"]

log = logging.getLogger("huddle.node")


class AcceptFailures:
    """The event loop's exception handler.  A listening socket that cannot accept (the
    process is out of descriptors: EMFILE, ENFILE, ...) is reported by asyncio with a
    traceback each time, for every one of the node's ports; here it is counted
    (``stats.accept_failures``) and said in one line a minute.  asyncio pauses that socket
    for a second and tries again: the node's own caps (docs/limits.md) are what keep
    descriptors free.  Anything else goes to asyncio's own handler."""

    def __init__(self) -> None:
        self.count = 0
        self._lines = RateLog(log, period=60.0)

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if str(context.get("message", "")).startswith("socket.accept() out of system resource"):
            self.count += 1
            self._lines.warning("accept", loop.time(), "a connection could not be accepted: %s (%d so far)",
                                context.get("exception"), self.count)
            return
        loop.default_exception_handler(context)
