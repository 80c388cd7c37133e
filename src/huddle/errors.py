"""Exceptions raised by huddle.

Every error says whose fault it is: :class:`LocalProtocolError` means this
program asked for something the protocol does not allow; :class:`RemoteProtocolError`
(and its :class:`DecodeError`) means a peer sent something we cannot accept.
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "CutOffReadOnly",
    "DataDirLocked",
    "DecodeError",
    "HuddleError",
    "LocalProtocolError",
    "NotRecording",
    "ProtocolError",
    "RemoteProtocolError",
]


class HuddleError(Exception):
    """Base class of every error huddle raises on purpose."""


class ProtocolError(HuddleError):
    """A rule of the huddle protocol was broken."""


class LocalProtocolError(ProtocolError):
    """This node tried to do something the protocol forbids (our fault)."""


class RemoteProtocolError(ProtocolError):
    """A peer sent something the protocol forbids (their fault)."""


class DecodeError(RemoteProtocolError):
    """Bytes received from the network are not a valid huddle message or beacon."""


class ConfigError(HuddleError):
    """A configuration value or command-line flag is invalid."""


class DataDirLocked(HuddleError):
    """Another running node already owns this data directory."""


class CutOffReadOnly(HuddleError):
    """This node's type keeps it read-only while it is cut off from every peer."""


class NotRecording(HuddleError):
    """This node records no event for the moment: it is starting (its peers are showing
    what they hold in its name) or taking a new identity (docs/protocol.md 12.1)."""
