"""Wire formats: the ZeroMQ message codec and the UDP beacon.  Pure, no I/O."""

from .beacon import BEACON_SIZE, Beacon, group_hash, pack, unpack
from .messages import (
    MAX_BODY,
    PROTOCOL_VERSION,
    RESERVED_TYPES,
    Beat,
    Bout,
    Chat,
    Gbye,
    Helo,
    Message,
    Peer,
    Time,
    decode,
    encode,
    valid_endpoint,
)

__all__ = [
    "BEACON_SIZE",
    "MAX_BODY",
    "PROTOCOL_VERSION",
    "RESERVED_TYPES",
    "Beacon",
    "Beat",
    "Bout",
    "Chat",
    "Gbye",
    "Helo",
    "Message",
    "Peer",
    "Time",
    "decode",
    "encode",
    "group_hash",
    "pack",
    "unpack",
    "valid_endpoint",
]
