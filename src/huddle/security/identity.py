"""A node's own keypair: Ed25519 (PyNaCl, i.e. libsodium), kept in its data directory.

The same key has a CurveZMQ form (X25519, libsodium's conversion) for encrypted mesh
connections, a fingerprint for people, and a node id derived from it for groups where
ids must be self-certifying (a node cannot claim an id its key does not give).  A new
data directory takes that id; one made before keeps its random, legacy id (docs/security.md).
"""

from __future__ import annotations

import hashlib
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

from nacl.exceptions import BadSignatureError
from nacl.signing import SigningKey, VerifyKey

from ..errors import ConfigError
from ..ids import NodeId
from .codes import fingerprint
from .files import read_private, write_private

__all__ = ["KEY_FILE", "CurveKeypair", "NodeIdentity", "key_derived", "load_or_create_identity", "node_id_for", "own_id_refusal",
           "renew_identity", "verify"]

KEY_FILE = "node.key"
_HEADER = "# huddle node key (Ed25519 seed, hex). Private: whoever holds it can speak as this node.\n"
_LINE = re.compile(r"^ed25519:([0-9a-f]{64})$")


@dataclass(frozen=True, slots=True)
class CurveKeypair:
    """A CurveZMQ keypair: 32-octet X25519 keys (libzmq takes them raw or Z85-encoded)."""

    public: bytes
    secret: bytes

    def __repr__(self) -> str:  # never print the secret half
        return f"CurveKeypair(public={self.public.hex()})"


def node_id_for(public_key: bytes) -> NodeId:
    """The node id a public key gives: a hash of it shaped as an RFC 9562 version-8 UUID."""
    raw = bytearray(hashlib.blake2b(public_key, digest_size=16, person=b"huddle-node-id").digest())
    raw[6] = (raw[6] & 0x0F) | 0x80  # version 8: custom
    raw[8] = (raw[8] & 0x3F) | 0x80  # the RFC 9562 variant
    return NodeId(bytes(raw))


def key_derived(node_id: bytes) -> bool:
    """Is ``node_id`` shaped as :func:`node_id_for` makes ids (an RFC 9562 version-8
    UUID)?  Such an id is admitted, and its records and posts kept, only with the key
    that gives it; a random (version-4) id is a legacy one."""
    return len(node_id) == 16 and (node_id[6] >> 4) == 8 and (node_id[8] >> 6) == 2


class NodeIdentity:
    """This node's signing key and what derives from it."""

    __slots__ = ("_key",)

    def __init__(self, key: SigningKey) -> None:
        self._key = key

    @classmethod
    def generate(cls) -> NodeIdentity:
        return cls(SigningKey.generate())

    @classmethod
    def from_seed(cls, seed: bytes) -> NodeIdentity:
        """The key a 32-octet seed gives (the simulator's nodes: keys as reproducible data)."""
        return cls(SigningKey(seed))

    @property
    def public_key(self) -> bytes:
        """The Ed25519 public key, 32 octets."""
        return bytes(self._key.verify_key)

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.public_key)

    @property
    def node_id(self) -> NodeId:
        return node_id_for(self.public_key)

    def sign(self, message: bytes) -> bytes:
        """A 64-octet Ed25519 signature of ``message``."""
        return bytes(self._key.sign(message).signature)

    def curve(self) -> CurveKeypair:
        """The same key as a CurveZMQ (X25519) keypair."""
        return CurveKeypair(public=bytes(self._key.verify_key.to_curve25519_public_key()),
                            secret=bytes(self._key.to_curve25519_private_key()))

    def file_text(self) -> str:
        return f"{_HEADER}ed25519:{bytes(self._key).hex()}\n"

    def __repr__(self) -> str:
        return f"NodeIdentity({self.fingerprint})"


def verify(public_key: bytes, message: bytes, signature: bytes) -> bool:
    """Does ``signature`` sign ``message`` under the Ed25519 ``public_key``?"""
    try:
        VerifyKey(public_key).verify(message, signature)
    except (BadSignatureError, ValueError, TypeError):
        return False
    return True


def load_or_create_identity(data_dir: Path) -> NodeIdentity:
    """The key in ``DATA_DIR/node.key``, created (0600) on first use.  A key file others
    may read, or one that does not parse, is refused with a :class:`ConfigError`."""
    path = data_dir / KEY_FILE
    if not path.exists() and not path.is_symlink():
        identity = NodeIdentity.generate()
        write_private(path, identity.file_text())
        return identity
    text = read_private(path, "the node key")
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("#")]
    match = _LINE.match(lines[0]) if len(lines) == 1 else None
    if match is None:
        raise ConfigError(f"the node key {path} is damaged; restore it from a backup, or remove it to give this "
                          "node a new key (its peers will see a new key for it)")
    return NodeIdentity(SigningKey(bytes.fromhex(match.group(1))))


def renew_identity(data_dir: Path) -> NodeIdentity:
    """A new key in ``DATA_DIR/node.key``; the old file, if any, is kept aside as
    ``node.key.previous-<time>`` (still 0600), as ``huddle repair`` keeps old ids in
    ``previous-ids``: what the old key signed can still be checked against it."""
    path = data_dir / KEY_FILE
    if path.exists():
        os.replace(path, data_dir / f"{KEY_FILE}.previous-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}")
    identity = NodeIdentity.generate()
    write_private(path, identity.file_text())
    return identity


def own_id_refusal(node_id: NodeId, identity: NodeIdentity, data_dir: Path) -> str | None:
    """Why a node with ``node_id`` and this key may not join a group with a secret (None:
    it may): there, ids must be the ones their keys give (docs/protocol.md 4.1)."""
    if node_id == identity.node_id:
        return None
    return (f"this node's id {node_id} is not the one its key gives (its data directory {data_dir} was made "
            "before ids were derived from keys, or its node.key was replaced), and a group with a secret admits "
            f"only ids their key gives. Run `huddle repair --new-identity --data-dir {data_dir}` (a new key and "
            "the id it gives; the old id is kept in previous-ids, the old key beside node.key, and the group "
            "keeps the old id's records), or start this node with a new --data-dir.")
