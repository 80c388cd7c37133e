"""The mDNS service type huddle announces and browses, checked and written in full.

Both the configuration (which refuses a bad ``--mdns-type`` at start) and
:mod:`huddle.discovery.mdns` use it; it lives here, below both and outside the discovery package, so that
discovery does not import the configuration and the configuration (which
Spark's workers import) pulls in neither zeroconf nor ifaddr.
"""

from __future__ import annotations

import re

from .errors import ConfigError

__all__ = ["normalise_mdns_type"]

_MDNS_TYPE = re.compile(r"^_[A-Za-z0-9-_]{1,62}\._(tcp|udp)\.local\.$")


def normalise_mdns_type(text: str) -> str:
    """``_huddle._tcp`` -> ``_huddle._tcp.local.``; a clear error for anything that is not a service type."""
    t = text.strip()
    if not t.endswith("."):
        t += "."
    if not t.endswith(".local."):
        t += "local."
    if not _MDNS_TYPE.match(t):
        raise ConfigError(f"mDNS service type {text!r} must look like _name._tcp (e.g. _huddle._tcp)")
    return t
