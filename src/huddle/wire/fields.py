"""What the message types share: the format's common limits, the checks their
constructors make, and the readers their decoders use (JSON objects, typed members,
sequences, node ids in hex).  Internal to the wire package: its message modules
(membership, delivery, records, reports) import these; the package's ``__init__``
exports the limits.

Pure: no sockets, no clock.  A check raises :class:`~huddle.errors.LocalProtocolError`
(a message this node builds is wrong), a reader :class:`~huddle.errors.DecodeError`
(a peer sent it).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from typing import Any, Final, cast

import orjson

from ..errors import DecodeError, LocalProtocolError
from ..ids import NodeId

__all__ = [
    "HELO_KEY", "HELO_SIG", "LOWER_HEX_RE", "MAX_BEAT", "MAX_BODY", "MAX_LOST", "MAX_NAME", "MAX_SEQ",
    "PROTOCOL_VERSION", "TYPE_RE", "check", "check_text", "compact_json", "fast_json_object", "get_field",
    "get_number", "get_seq", "hex_octets", "json_object", "node_hex", "orjson_dumps", "orjson_loads",
    "valid_endpoint",
]

PROTOCOL_VERSION: Final = 1
HELO_KEY: Final = 32  # octets of an Ed25519 public key
HELO_SIG: Final = 64  # octets of an Ed25519 signature
MAX_BODY: Final = 1024 * 1024
MAX_NAME: Final = 255
MAX_SEQ: Final = 2**63 - 1
MAX_BEAT: Final = 60.0  # seconds: the longest heartbeat interval a node may announce
MAX_LOST: Final = 100  # the most heartbeats a node may allow to be lost

_ENDPOINT_RE: Final = re.compile(r"tcp://([A-Za-z0-9.\-]{1,253}|\[[0-9A-Fa-f:.]{2,45}\]):([0-9]{1,5})")
TYPE_RE: Final = re.compile(r"[a-z][a-z0-9_-]{0,31}")
LOWER_HEX_RE: Final = re.compile(r"[0-9a-f]*")

orjson_loads: Final[Callable[[str], Any]] = orjson.loads
orjson_dumps: Final[Callable[[Any], bytes]] = orjson.dumps


def valid_endpoint(text: str) -> bool:
    """True if ``text`` is ``tcp://HOST:PORT`` with a port in 1..65535."""
    m = _ENDPOINT_RE.fullmatch(text)
    return m is not None and 1 <= int(m.group(2)) <= 65535


def check(ok: bool, what: str) -> None:
    if not ok:
        raise LocalProtocolError(what)


def check_text(value: object, field: str, limit: int, *, empty: bool = True) -> None:
    check(isinstance(value, str), f"{field} must be a string")
    assert isinstance(value, str)
    check(empty or value != "", f"{field} must not be empty")
    if value.isascii():  # fast path: one octet per character, nothing to encode
        size = len(value)
    else:
        try:
            size = len(value.encode("utf-8"))
        except UnicodeEncodeError:
            raise LocalProtocolError(f"{field} is not valid Unicode text") from None
    check(size <= limit, f"{field} is longer than {limit} octets")


def compact_json(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def json_object(body: str, kind: str) -> dict[str, Any]:
    try:
        obj = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise DecodeError(f"{kind} body is not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise DecodeError(f"{kind} body must be a JSON object")
    return obj


def fast_json_object(body: str, kind: str) -> dict[str, Any]:
    """``json_object`` by orjson, for the bodies every node receives from every
    peer many times a second (RAWS, MEMB): about 4x faster than ``json``, and
    as strict (NaN and infinities refused; a lone surrogate refused too, an
    integer beyond 64 bits read as a float, which no integer field accepts)."""
    try:
        obj = orjson_loads(body)
    except ValueError as exc:  # orjson.JSONDecodeError, depth limit included
        raise DecodeError(f"{kind} body is not JSON: {exc}") from None
    if type(obj) is not dict:
        raise DecodeError(f"{kind} body must be a JSON object")
    return obj


def get_field(obj: dict[str, Any], key: str, kind: str, typ: type) -> Any:
    if key not in obj:
        raise DecodeError(f"{kind} body lacks {key!r}")
    value = obj[key]
    if not isinstance(value, typ) or (typ is int and isinstance(value, bool)):
        raise DecodeError(f"{kind} field {key!r} must be {typ.__name__}")
    return value



def get_number(obj: dict[str, Any], key: str, kind: str) -> float:
    value = obj.get(key)
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        raise DecodeError(f"{kind} field {key!r} must be a finite number")
    return float(value)



def get_seq(value: object, what: str, low: int = 1) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= MAX_SEQ:
        raise DecodeError(f"{what} must be an integer in {low}..2^63-1")
    return value


def node_hex(value: object, what: str) -> NodeId:
    # A peer's id comes in every member list, report and GSIP: made once (``_NodeIds``).
    node = _NODE_IDS.get(value) if type(value) is str else None
    if node is None:
        hex_octets(value, 16, what)  # 32 lowercase hex digits, or a DecodeError
        node = _NODE_IDS[cast(str, value)]
    return node



def hex_octets(value: object, size: int, what: str) -> bytes:
    if not isinstance(value, str) or len(value) != 2 * size:
        raise DecodeError(f"{what} must be {2 * size} lowercase hex digits")
    try:
        raw = bytes.fromhex(value)
    except ValueError:
        raise DecodeError(f"{what} must be {2 * size} lowercase hex digits") from None
    if raw.hex() != value:
        raise DecodeError(f"{what} must be {2 * size} lowercase hex digits")
    return raw



class _NodeIds(dict[str, NodeId]):
    """NodeIds by their 32 lowercase hex digits (checked before), each made
    when first asked for: every report, list and GSIP names the same peers,
    and making a NodeId of a row's text cost more than the rest of reading
    the report's admitted peers.  At
    most ``_NODE_IDS_KEPT`` (a report naming unknown peers by the thousand
    empties it, which costs the next reports what no cache would)."""

    __slots__ = ()

    def __missing__(self, text: str) -> NodeId:
        if len(self) >= _NODE_IDS_KEPT:
            self.clear()
        node = self[text] = bytes.__new__(NodeId, bytes.fromhex(text))
        return node


_NODE_IDS_KEPT: Final = 4096
_NODE_IDS: Final = _NodeIds()
