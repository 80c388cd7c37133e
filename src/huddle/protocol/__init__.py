"""Sans-I/O protocol state machines.  Time is passed in; actions come out."""

from .events import (
    Action,
    ChatReceived,
    ClockSynced,
    Commit,
    Connect,
    Disconnect,
    Event,
    Notify,
    PeerJoined,
    PeerLeft,
    PeerRefused,
    PeerStateChanged,
    Send,
)
from .mesh import Mesh, PeerInfo, Phase, Timing

__all__ = [
    "Action",
    "ChatReceived",
    "ClockSynced",
    "Commit",
    "Connect",
    "Disconnect",
    "Event",
    "Mesh",
    "Notify",
    "PeerInfo",
    "PeerJoined",
    "PeerLeft",
    "PeerRefused",
    "PeerStateChanged",
    "Phase",
    "Send",
    "Timing",
]
