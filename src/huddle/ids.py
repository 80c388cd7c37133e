"""Identifiers: node UUIDs."""

from __future__ import annotations

import uuid as _uuid

__all__ = ["CONN_MARK", "CONN_SUFFIX", "NodeId", "address_of"]

# A DEALER's routing identity is its node's 16-octet UUID followed by CONN_SUFFIX random octets of
# its own (docs/protocol.md 2.1): no two connections share one, so no connection can hold another's.
# The receiving transport hands the UUID on as the sender frame and the suffix with the address
# the message came from, as "<address>#<suffix in hex>": a message's *source* names its connection.
CONN_SUFFIX = 8
CONN_MARK = "#"


def address_of(source: str) -> str:
    """The address part of a message's source (the whole of it for an older node's connection,
    whose routing identity is its bare UUID): what per-address bounds and blame count by."""
    return source.partition(CONN_MARK)[0]


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
