"""The pairing door's messages (docs/protocol.md 16), and fingerprints as people type them.

One ZeroMQ frame each way, on a CurveZMQ session to the door:

    message  = magic version command body
    magic    = %x48.50.52          ; "HPR"
    version  = %x01
    command  = "P" / "W" / "R" / "A"
    ; P  PAIR      newcomer -> door  body: JSON {"key": 64 hex, "name": STR, "node": 32 hex, "group": STR}
    ; W  PENDING   door -> newcomer  body: JSON {"fingerprint": STR}
    ; R  REFUSED   door -> newcomer  body: UTF-8 text, the reason
    ; A  ACCEPTED  door -> newcomer  body: UTF-8 text, the group file (security/group.py file_text)

At most :data:`MAX_MESSAGE` octets (the door's socket refuses larger ones).  Pure:
:func:`decode` raises :class:`~huddle.errors.DecodeError` and nothing else.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Final

from ..errors import DecodeError
from ..security.codes import ALPHABET
from ..wire import MAX_GROUP, MAX_NAME

__all__ = ["MAX_MESSAGE", "Accepted", "BadFingerprint", "Message", "Pair", "Pending", "Refused", "decode", "encode",
           "normalise_fingerprint"]

MAGIC: Final = b"HPR\x01"
MAX_MESSAGE: Final = 4096
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_HEX32 = re.compile(r"^[0-9a-f]{32}$")
_TYPO: Final = {"O": "0", "I": "1", "L": "1"}


class BadFingerprint(ValueError):
    """Not a whole fingerprint (16 characters of Crockford base32)."""


def normalise_fingerprint(text: str) -> str:
    """``XXXX-XXXX-XXXX-XXXX`` from a fingerprint as typed (any case, spaces or dashes, O for 0, I or L
    for 1).  Only a whole one: a prefix would let an attacker grind a key whose fingerprint starts so."""
    cleaned = "".join(_TYPO.get(c, c) for c in "".join(text.split()).replace("-", "").upper())
    if len(cleaned) != 16 or any(c not in ALPHABET for c in cleaned):
        raise BadFingerprint(f"{text!r} is not a whole key fingerprint (XXXX-XXXX-XXXX-XXXX, 16 characters)")
    return "-".join(cleaned[i:i + 4] for i in range(0, 16, 4))


@dataclass(frozen=True, slots=True)
class Pair:
    """A newcomer asks to join ``group``: its Ed25519 key, its name, the node id its key gives."""

    public_key: bytes
    name: str
    node_id: str
    group: str


@dataclass(frozen=True, slots=True)
class Pending:
    fingerprint: str


@dataclass(frozen=True, slots=True)
class Refused:
    reason: str


@dataclass(frozen=True, slots=True)
class Accepted:
    group_file: str  # never logged, never shown


Message = Pair | Pending | Refused | Accepted


def encode(message: Message) -> bytes:
    match message:
        case Pair(public_key, name, node_id, group):
            body = json.dumps({"key": public_key.hex(), "name": name, "node": node_id, "group": group},
                              ensure_ascii=False).encode()
            command = b"P"
        case Pending(fp):
            body, command = json.dumps({"fingerprint": fp}).encode(), b"W"
        case Refused(reason):
            body, command = reason.encode(), b"R"
        case Accepted(text):
            body, command = text.encode(), b"A"
    data = MAGIC + command + body
    if len(data) > MAX_MESSAGE:
        raise ValueError(f"a pairing message is at most {MAX_MESSAGE} octets")
    return data


def _pair(body: bytes) -> Pair:
    try:
        raw = json.loads(body)
    except (UnicodeDecodeError, ValueError):
        raise DecodeError("PAIR: the body is not JSON") from None
    if not isinstance(raw, dict) or set(raw) != {"key", "name", "node", "group"}:
        raise DecodeError("PAIR: expected {key, name, node, group}")
    key, name, node, group = raw["key"], raw["name"], raw["node"], raw["group"]
    if not (isinstance(key, str) and _HEX64.match(key)):
        raise DecodeError("PAIR: key must be 64 lower-case hex digits")
    if not (isinstance(node, str) and _HEX32.match(node)):
        raise DecodeError("PAIR: node must be 32 lower-case hex digits")
    if not (isinstance(name, str) and 0 < len(name.encode()) <= MAX_NAME and name.isprintable()):
        raise DecodeError(f"PAIR: name must be 1..{MAX_NAME} octets of printable text")
    if not (isinstance(group, str) and len(group.encode()) <= MAX_GROUP):
        raise DecodeError(f"PAIR: group must be at most {MAX_GROUP} octets")
    return Pair(bytes.fromhex(key), name, node, group)


def decode(data: bytes) -> Message:
    """One pairing message; DecodeError if it is not one."""
    if len(data) > MAX_MESSAGE:
        raise DecodeError(f"a pairing message is at most {MAX_MESSAGE} octets, got {len(data)}")
    if len(data) < 5 or data[:4] != MAGIC:
        raise DecodeError("not a pairing message (bad magic or version)")
    command, body = data[4:5], data[5:]
    try:
        if command == b"P":
            return _pair(body)
        if command == b"W":
            raw = json.loads(body)
            if not isinstance(raw, dict) or set(raw) != {"fingerprint"} or not isinstance(raw["fingerprint"], str):
                raise DecodeError("PENDING: expected {fingerprint}")
            return Pending(normalise_fingerprint(raw["fingerprint"]))
        if command == b"R":
            return Refused(body.decode())
        if command == b"A":
            return Accepted(body.decode())
    except ValueError as exc:  # UnicodeDecodeError, JSON's, BadFingerprint
        raise DecodeError(f"a pairing message's body does not parse: {exc}") from None
    raise DecodeError(f"unknown pairing command {command!r}")
