"""Exceptions raised by huddle.

Every error says whose fault it is: :class:`LocalProtocolError` means this
program asked for something the protocol does not allow; :class:`RemoteProtocolError`
(and its :class:`DecodeError`) means a peer sent something we cannot accept.  What was
asked and why it failed is a type of its own where callers answer it differently (the
API maps errors to HTTP statuses by type, in one table: api/http.py ``ERROR_STATUS``):
the node not running, a peer it cannot send to, something too large.
"""

from __future__ import annotations

__all__ = [
    "ConfigError",
    "CutOffReadOnly",
    "DataDirLocked",
    "DecodeError",
    "HuddleError",
    "LocalProtocolError",
    "NoSuchPeer",
    "NotRecording",
    "NotRunning",
    "ProtocolError",
    "RemoteProtocolError",
    "TooLarge",
]


class HuddleError(Exception):
    """Base class of every error huddle raises on purpose."""


class ProtocolError(HuddleError):
    """A rule of the huddle protocol was broken."""


class LocalProtocolError(ProtocolError):
    """This node tried to do something the protocol forbids (our fault)."""


class NotRunning(LocalProtocolError):
    """The node is not running (not started yet, or stopped): what was asked of it needs it running."""


class NoSuchPeer(LocalProtocolError):
    """The peer named is not one this node can send to now (unknown, or not admitted)."""


class TooLarge(LocalProtocolError):
    """What this node was asked to send or record is larger than a limit allows."""


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
