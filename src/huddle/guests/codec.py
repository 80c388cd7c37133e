"""The Noam wire format: UDP marco / polo, and length-prefixed JSON messages.

A message on TCP (and, from huddle, on WebSocket) is its length in octets of
UTF-8, written as 6 decimal digits, then a JSON array (the lemmas count the
length in characters: read too, see FrameReader)::

    000042["event","guest1","topic1",[1,2,"potato"]]

Messages, as the Noam document defines them:

    ["marco", guest_name, room_name, dialect, lemma_version]        UDP, guest -> port 1030
    ["polo", room_name, tcp_port]                                   UDP, host -> the marco's origin
                                                                    (tcp_port a number, as the Noam
                                                                    host sends it; "7733" is read too)
    ["register", guest_name, guest_tcp_port, hears, speaks, dialect, lemma_version, options]
    ["event", guest_name, event_name, event_value]
    ["heartbeat", guest_name]
    ["heartbeat_ack", guest_name]

and one of huddle's, sent to a guest before it is disconnected for bad input::

    ["error", reason]

Pure: bytes in, messages out; no sockets here.
"""

from __future__ import annotations

import codecs
import json
import math
from dataclasses import dataclass, field
from typing import Any, Final

from ..errors import RemoteProtocolError

__all__ = [
    "MAX_FRAME",
    "Error",
    "Event",
    "FrameError",
    "FrameReader",
    "Heartbeat",
    "HeartbeatAck",
    "Marco",
    "Polo",
    "Register",
    "TextError",
    "character_ends",
    "decode_datagram",
    "decode_payload",
    "encode",
    "encode_datagram",
]

PREFIX: Final = 6
MAX_FRAME: Final = 999_999  # the most six digits can say
MAX_NAME: Final = 255  # octets of a guest, room or topic name


class FrameError(RemoteProtocolError):
    """A guest sent something that is not a Noam message (the reason says what)."""


class TextError(FrameError):
    """A message whose JSON is well formed but holds what cannot travel on: text
    that is not UTF-8 (a lone surrogate such as ``"\\ud800"``), NaN or an
    infinite number.  Refused whole, so nothing of it is recorded."""


@dataclass(frozen=True, slots=True)
class Marco:
    guest: str
    room: str
    dialect: str
    version: str


@dataclass(frozen=True, slots=True)
class Polo:
    room: str
    port: int


@dataclass(frozen=True, slots=True)
class Register:
    guest: str
    port: int  # the guest's own TCP port for the host to connect to (0: none; ignored on WebSocket)
    hears: tuple[str, ...]
    speaks: tuple[str, ...]
    dialect: str
    version: str
    heartbeat: float = 0.0  # seconds; 0: no heartbeats
    heartbeat_ack: bool = False
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Event:
    guest: str
    topic: str
    value: Any


@dataclass(frozen=True, slots=True)
class Heartbeat:
    guest: str


@dataclass(frozen=True, slots=True)
class HeartbeatAck:
    guest: str


@dataclass(frozen=True, slots=True)
class Error:
    reason: str


Message = Register | Event | Heartbeat | HeartbeatAck | Error


# --------------------------------------------------------------------------- encode


def _array(msg: Message | Marco | Polo) -> list[Any]:
    if isinstance(msg, Event):
        return ["event", msg.guest, msg.topic, msg.value]
    if isinstance(msg, Heartbeat):
        return ["heartbeat", msg.guest]
    if isinstance(msg, HeartbeatAck):
        return ["heartbeat_ack", msg.guest]
    if isinstance(msg, Register):
        # The options as the guest wrote them (a register read off the wire re-encodes as it came);
        # a heartbeat set without them is written as the document's example writes it.
        options = dict(msg.options)
        if msg.heartbeat and "heartbeat" not in options:
            options["heartbeat"] = f"{msg.heartbeat:g}"
            options["heartbeat_ack"] = "true" if msg.heartbeat_ack else "false"
        fields = ["register", msg.guest, msg.port, list(msg.hears), list(msg.speaks), msg.dialect, msg.version]
        # No options, no eighth item: the JavaScript, Ruby and Java lemmas send 7 (docs/guests.md).
        return [*fields, options] if options else fields
    if isinstance(msg, Error):
        return ["error", msg.reason]
    if isinstance(msg, Marco):
        return ["marco", msg.guest, msg.room, msg.dialect, msg.version]
    # A number, as the Noam host sends it: the Arduino lemma reads the port as a number only
    # (docs/guests.md, "What real lemmas forced"); the document's example has the string "7733".
    return ["polo", msg.room, msg.port]


def _json(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")


def encode(msg: Message) -> bytes:
    """``msg`` with its 6-digit length prefix.  Raises ValueError if it is too long."""
    payload = _json(_array(msg))
    if len(payload) > MAX_FRAME:
        raise ValueError(f"a Noam message holds at most {MAX_FRAME} octets, this one is {len(payload)}")
    return b"%06d" % len(payload) + payload


def encode_datagram(msg: Marco | Polo) -> bytes:
    """A marco or polo: a bare JSON array, no length prefix."""
    return _json(_array(msg))


# --------------------------------------------------------------------------- decode


def _text(value: Any, what: str, *, empty: bool = True) -> str:
    if not isinstance(value, str):
        raise FrameError(f"{what} must be a string, got {type(value).__name__}")
    if not empty and not value:
        raise FrameError(f"{what} must not be empty")
    if len(value.encode("utf-8", "surrogatepass")) > MAX_NAME:
        raise FrameError(f"{what} is longer than {MAX_NAME} octets")
    return value


def _topics(value: Any, what: str) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise FrameError(f"{what} must be a list of topics")
    return tuple(_text(t, f"a topic in {what}", empty=False) for t in value)


def _port(value: Any) -> int:
    # The document's example has a number; a string of digits is taken too.
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 65535:
        raise FrameError(f"a TCP port must be 0..65535, got {value!r}")
    return value


def _flag(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    raise FrameError(f"heartbeat_ack must be true or false, got {value!r}")


def _period(value: Any) -> float:
    try:
        period = float(value)
    except (TypeError, ValueError):
        raise FrameError(f"heartbeat must be a period in seconds, got {value!r}") from None
    if isinstance(value, bool) or not 0 <= period <= 3600:  # NaN fails the range too
        raise FrameError(f"heartbeat must be 0..3600 seconds, got {value!r}")
    return period


def _no_constant(name: str) -> Any:
    raise TextError(f"{name} is not a JSON number: send a finite number")


def _finite(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise TextError(f"the number {text[:40]} is too large to travel")
    return number


def _loads(text: str, what: str) -> Any:
    """JSON text -> a value that re-encodes as UTF-8 JSON, or FrameError.

    ``json.loads`` takes ``"\\ud800"`` (a lone surrogate), ``NaN`` and ``1e999``;
    none of them can be written back out (to the log, to other guests), so the
    message is refused here, whole, before anything of it is kept."""
    try:
        value = json.loads(text, parse_constant=_no_constant, parse_float=_finite)
    except TextError:
        raise
    except (ValueError, RecursionError):
        raise FrameError(f"the {what} is not JSON") from None
    if "\\" in text:  # only an escape can make a lone surrogate out of valid UTF-8
        try:
            _json(value)
        except UnicodeEncodeError:
            raise TextError(f"the {what} holds text that is not UTF-8 (a lone surrogate, such as \\ud800)") from None
        except (ValueError, RecursionError):
            raise FrameError(f"the {what} is not JSON") from None
    return value


_ARITY: Final = {"register": 8, "event": 4, "heartbeat": 2, "heartbeat_ack": 2, "error": 2}


def decode_payload(payload: bytes) -> Message:
    """One message's JSON array (without its prefix)."""
    try:
        text = payload.decode("utf-8")
    except UnicodeDecodeError:
        raise FrameError("the message is not UTF-8") from None
    value = _loads(text, "message")
    if not isinstance(value, list) or not value or not isinstance(value[0], str):
        raise FrameError("a message is a JSON array that starts with its type")
    kind = value[0]
    if kind not in _ARITY:
        raise FrameError(f"unknown message type {kind!r}")
    # register's options are optional ("Optional field"): 7 items are taken too.
    if len(value) != _ARITY[kind] and not (kind == "register" and len(value) == 7):
        raise FrameError(f"{kind!r} has {_ARITY[kind]} items, got {len(value)}")
    if kind == "event":
        return Event(_text(value[1], "guest_name", empty=False), _text(value[2], "event_name", empty=False), value[3])
    if kind == "heartbeat":
        return Heartbeat(_text(value[1], "guest_name", empty=False))
    if kind == "heartbeat_ack":
        return HeartbeatAck(_text(value[1], "guest_name", empty=False))
    if kind == "error":
        return Error(str(value[1])[:1000])
    options = value[7] if len(value) == 8 else {}
    if options is None:
        options = {}
    if not isinstance(options, dict):
        raise FrameError("options must be a JSON object")
    return Register(
        guest=_text(value[1], "guest_name", empty=False),
        port=_port(value[2]),
        hears=_topics(value[3], "hears"),
        speaks=_topics(value[4], "speaks"),
        dialect=_text(value[5], "dialect"),
        version=_text(value[6], "lemma_version"),
        heartbeat=_period(options["heartbeat"]) if "heartbeat" in options else 0.0,
        heartbeat_ack=_flag(options["heartbeat_ack"]) if "heartbeat_ack" in options else False,
        options=options,
    )


def decode_datagram(data: bytes) -> Marco | Polo:
    """A UDP marco or polo."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise FrameError("the datagram is not JSON text") from None
    value = _loads(text, "datagram")
    if not isinstance(value, list) or not value:
        raise FrameError("a datagram is a JSON array")
    if value[0] == "marco":
        if len(value) != 5:
            raise FrameError(f"'marco' has 5 items, got {len(value)}")
        return Marco(_text(value[1], "guest_name", empty=False), _text(value[2], "room_name"),
                     _text(value[3], "dialect"), _text(value[4], "lemma_version"))
    if value[0] == "polo":
        if len(value) != 3:
            raise FrameError(f"'polo' has 3 items, got {len(value)}")
        return Polo(_text(value[1], "room_name"), _port(value[2]))
    raise FrameError(f"not a marco or polo: {str(value[0])[:40]!r}")


def _is_json(payload: bytes) -> bool:
    try:
        json.loads(payload.decode("utf-8"))
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return False
    return True


def character_ends(data: bytes, length: int) -> tuple[int | None, int | None]:
    """Where a payload of ``length`` ends in ``data`` (octets from the payload's
    first one) if the length counts UTF-16 code units (JavaScript's and Java's
    ``String.length``) or characters (Ruby's): ``None`` where ``data`` does not
    hold that many yet, or the count ends inside a character."""
    text = codecs.getincrementaldecoder("utf-8")().decode(data, final=False)  # raises UnicodeDecodeError
    by_char = len(text[:length].encode("utf-8")) if len(text) >= length else None
    units = text.encode("utf-16-le", "surrogatepass")
    by_unit = None
    if len(units) >= 2 * length:
        try:
            by_unit = len(units[:2 * length].decode("utf-16-le").encode("utf-8"))
        except UnicodeDecodeError:  # the count ends between the two halves of a surrogate pair
            by_unit = None
    return by_unit, by_char


class FrameReader:
    """Splits a TCP byte stream into messages.  ``feed`` returns the complete
    messages; it raises FrameError at the first bad one (the connection should
    then be closed: the stream cannot be resynchronised).

    The length prefix counts octets (the document, the Noam host, the Arduino
    lemma) or characters (the JavaScript and Java lemmas count UTF-16 code units,
    the Ruby lemma code points: a message with non-ASCII text is longer in octets
    than it says).  The octet reading is tried first; when its payload is not JSON
    text at all and holds non-ASCII octets, the character readings are tried, and
    the one whose payload is JSON text is taken.  A JSON array ends at exactly one
    place (its closing bracket), so at most one reading can give JSON text: the
    readings cannot be confused (docs/guests.md, "Length in octets or in characters").
    ``by_characters`` counts the messages taken under a character reading."""

    def __init__(self, max_frame: int = MAX_FRAME) -> None:
        self.max_frame = max_frame
        self._buf = bytearray()
        self.by_characters = 0

    def feed(self, data: bytes) -> list[Message]:
        self._buf += data
        out: list[Message] = []
        while len(self._buf) >= PREFIX:
            head = bytes(self._buf[:PREFIX])
            if not head.isdigit():
                raise FrameError(f"a message starts with its length as 6 digits, got {head!r}")
            length = int(head)
            if length > self.max_frame:
                raise FrameError(f"a message of {length} octets is over this host's limit of {self.max_frame}")
            if len(self._buf) < PREFIX + length:
                break
            taken = self._take(length)
            if taken is None:
                break  # counted in characters: the rest has not come yet
            end, msg = taken
            del self._buf[:end]
            out.append(msg)
        return out

    def _take(self, length: int) -> tuple[int, Message] | None:
        """The message whose prefix says ``length`` and where it ends in the buffer, or
        None if that is not known yet; raises FrameError if it is not a Noam message
        under any reading (or is JSON text under one but not a Noam message)."""
        octets = bytes(self._buf[PREFIX:PREFIX + length])
        try:
            return PREFIX + length, decode_payload(octets)
        except FrameError:
            if octets.isascii() or _is_json(octets):
                raise  # every reading agrees, or the octets' one is JSON: as the document
        held = bytes(self._buf[PREFIX:PREFIX + self.max_frame])
        try:
            by_unit, by_char = character_ends(held, length)
        except UnicodeDecodeError:
            raise FrameError("the message is not UTF-8") from None
        for end in (by_unit, by_char):
            if end is not None and _is_json(held[:end]):
                self.by_characters += 1
                return PREFIX + end, decode_payload(held[:end])
        if by_char is None and len(held) < self.max_frame:
            return None  # a longer reading may still complete
        raise FrameError(f"the length prefix says {length}: the message is not JSON text when that counts "
                         "octets, nor when it counts characters")

    @property
    def pending(self) -> int:
        return len(self._buf)
