"""The UDP discovery beacon: a fixed 30-octet datagram.

    beacon  = magic version uuid port group-hash
    magic   = %x48.44.4C         ; "HDL"
    version = %x01
    uuid    = 16OCTET            ; the sender's node id
    port    = 2OCTET             ; its ROUTER port, network byte order
    group-hash = 8OCTET          ; first 8 octets of SHA-256(UTF-8 group name)

Pure: no sockets.  :func:`unpack` raises :class:`DecodeError` and nothing else.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass
from typing import Final

from ..errors import DecodeError, LocalProtocolError
from ..ids import NodeId

__all__ = ["BEACON_SIZE", "BEACON_VERSION", "Beacon", "group_hash", "pack", "unpack"]

BEACON_MAGIC: Final = b"HDL"
BEACON_VERSION: Final = 1
_FORMAT: Final = struct.Struct("!3sB16sH8s")
BEACON_SIZE: Final = _FORMAT.size


def group_hash(group: str) -> bytes:
    """The 8-octet fingerprint of a group name carried in beacons."""
    return hashlib.sha256(group.encode("utf-8")).digest()[:8]


@dataclass(frozen=True, slots=True)
class Beacon:
    sender: NodeId
    port: int
    group_hash: bytes

    def __post_init__(self) -> None:
        if not 1 <= self.port <= 65535:
            raise LocalProtocolError(f"beacon port {self.port} is not in 1..65535")
        if len(self.group_hash) != 8:
            raise LocalProtocolError("group hash must be 8 octets")


def pack(beacon: Beacon) -> bytes:
    return _FORMAT.pack(BEACON_MAGIC, BEACON_VERSION, bytes(beacon.sender), beacon.port, beacon.group_hash)


def unpack(data: bytes) -> Beacon:
    if len(data) != BEACON_SIZE:
        raise DecodeError(f"a beacon is {BEACON_SIZE} octets, got {len(data)}")
    magic, version, sender, port, ghash = _FORMAT.unpack(data)
    if magic != BEACON_MAGIC:
        raise DecodeError("not a huddle beacon (bad magic)")
    if version != BEACON_VERSION:
        raise DecodeError(f"beacon version {version} is not supported (this node speaks {BEACON_VERSION})")
    if port == 0:
        raise DecodeError("beacon port 0 is invalid")
    return Beacon(sender=NodeId(sender), port=port, group_hash=ghash)
