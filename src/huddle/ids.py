"""Identifiers: node UUIDs."""

from __future__ import annotations

import uuid as _uuid

__all__ = ["NodeId"]


class NodeId(bytes):
    """A node's identity: exactly 16 octets (a binary UUID).

    It is a ``bytes`` so it can be used directly as a ZeroMQ routing identity;
    ``str()`` gives the 32 lowercase hex digits used in the API and logs.
    """

    __slots__ = ()

    def __new__(cls, raw: bytes) -> NodeId:
        if len(raw) != 16:
            raise ValueError(f"a node id is 16 octets, got {len(raw)}")
        return super().__new__(cls, raw)

    @classmethod
    def random(cls) -> NodeId:
        return cls(_uuid.uuid4().bytes)

    @classmethod
    def from_hex(cls, text: str) -> NodeId:
        """Parse 32 hex digits (dashes allowed, as in a UUID string)."""
        cleaned = text.strip().replace("-", "")
        if len(cleaned) != 32:
            raise ValueError(f"a node id is 32 hex digits, got {text!r}")
        try:
            return cls(bytes.fromhex(cleaned))
        except ValueError:
            raise ValueError(f"a node id is 32 hex digits, got {text!r}") from None

    def __str__(self) -> str:
        return self.hex()

    def __repr__(self) -> str:
        return f"NodeId({self.hex()!r})"

    @property
    def short(self) -> str:
        """The first 8 hex digits, for humans."""
        return self.hex()[:8]
