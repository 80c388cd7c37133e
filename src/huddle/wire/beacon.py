"""The UDP discovery beacon: a 30-octet datagram, or 32 with a member's pairing door.

    beacon  = magic version uuid port group-hash [door]
    magic   = %x48.44.4C         ; "HDL"
    version = %x01
    uuid    = 16OCTET            ; the sender's node id
    port    = 2OCTET             ; its ROUTER port, network byte order
    group-hash = 8OCTET          ; first 8 octets of SHA-256(UTF-8 group name)
    door    = 2OCTET             ; its pairing door's TCP port (1..65535), network byte order

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
_DOOR: Final = struct.Struct("!H")


def group_hash(group: str) -> bytes:
    """The 8-octet fingerprint of a group name carried in beacons."""
    return hashlib.sha256(group.encode("utf-8")).digest()[:8]


@dataclass(frozen=True, slots=True)
class Beacon:
    sender: NodeId
    port: int
    group_hash: bytes
    door: int = 0  # the sender's pairing door (0: none, the beacon has no trailer)

    def __post_init__(self) -> None:
        if not 1 <= self.port <= 65535:
            raise LocalProtocolError(f"beacon port {self.port} is not in 1..65535")
        if not 0 <= self.door <= 65535:
            raise LocalProtocolError(f"beacon door port {self.door} is not in 0..65535")
        if len(self.group_hash) != 8:
            raise LocalProtocolError("group hash must be 8 octets")


def pack(beacon: Beacon) -> bytes:
    packet = _FORMAT.pack(BEACON_MAGIC, BEACON_VERSION, bytes(beacon.sender), beacon.port, beacon.group_hash)
    return packet + _DOOR.pack(beacon.door) if beacon.door else packet


def unpack(data: bytes) -> Beacon:
    if len(data) not in {BEACON_SIZE, BEACON_SIZE + _DOOR.size}:
        raise DecodeError(f"a beacon is {BEACON_SIZE} octets ({BEACON_SIZE + _DOOR.size} with a door), got {len(data)}")
    magic, version, sender, port, ghash = _FORMAT.unpack_from(data)
    door = _DOOR.unpack_from(data, BEACON_SIZE)[0] if len(data) > BEACON_SIZE else 0
    if magic != BEACON_MAGIC:
        raise DecodeError("not a huddle beacon (bad magic)")
    if version != BEACON_VERSION:
        raise DecodeError(f"beacon version {version} is not supported (this node speaks {BEACON_VERSION})")
    if port == 0:
        raise DecodeError("beacon port 0 is invalid")
    if len(data) > BEACON_SIZE and door == 0:
        raise DecodeError("beacon door port 0 is invalid")
    return Beacon(sender=NodeId(sender), port=port, group_hash=ghash, door=door)
