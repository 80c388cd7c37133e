"""Guests: programs that join a node's room with the Noam protocol (UDP marco /
polo, length-prefixed JSON over TCP or WebSocket) without running a node."""

from .codec import FrameError, FrameReader, decode_datagram, decode_payload, encode, encode_datagram
from .room import Room

__all__ = ["FrameError", "FrameReader", "Room", "decode_datagram", "decode_payload", "encode", "encode_datagram"]
