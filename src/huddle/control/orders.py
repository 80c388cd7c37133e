"""Orders to another node's apps and to the node itself, as signed addressed messages
(docs/protocol.md 17; docs/control.md, "Orders from any node").  Pure: octets in, octets out.

An order and its result each travel as one addressed message (section 13: in order, once,
acknowledged, re-sent across lost frames and reconnections) whose payload is

    PREFIX kind public-key signature body

``PREFIX`` (``AA C0``) hands it to the control feature (a payload taker, as Hydra's ``AA A0``
goes to posts); ``kind`` is 1 (an order) or 2 (its result); ``public-key`` (32 octets) is the
sender's Ed25519 node key and ``signature`` (64 octets) its signature of

    "huddle control v1" %x00 kind sender body

with ``sender`` the 16 octets of the sending node's id: an order is good only from the node
that signed it, on its own channel (a peer cannot relay another's).  ``body`` is a JSON
object in UTF-8 (:class:`Order`, :class:`Result`).  :func:`decode` checks the form, the key
(it must give the sender's id), the signature and the group; the receiver checks the rest
(membership, the time window, replays: :mod:`huddle.control.remote`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Final

from ..ids import NodeId
from ..security.identity import NodeIdentity, node_id_for, verify
from .section import APP_NAME

__all__ = ["APP_ACTIONS", "KIND_ORDER", "KIND_RESULT", "LIST", "LOGS", "MAX_AFTER", "MAX_PAYLOAD", "NODE_ACTIONS",
           "PREFIX", "Order",
           "Refused", "Result", "decode", "encode"]

PREFIX: Final = b"\xaa\xc0"  # control's mark, as AA A0 is Hydra's (protocol.md 15.1)
KIND_ORDER: Final = 1
KIND_RESULT: Final = 2
MAX_PAYLOAD: Final = 8192  # octets of one order or result, all told (a result carries a node's app list)
_DOMAIN: Final = b"huddle control v1\x00"
_KEY: Final = 32
_SIG: Final = 64
_HEAD: Final = len(PREFIX) + 1 + _KEY + _SIG
_ORDER_ID = re.compile(r"[0-9a-f]{32}")

APP_ACTIONS: Final = ("start", "stop", "restart")  # of one app, named
NODE_ACTIONS: Final = ("stop", "shutdown", "reboot")  # of the node (Safir's node orders)
LIST: Final = "apps"  # not an order: the target's app list, asked for its details (never recorded)
LOGS: Final = "logs"  # not an order: a chunk of an app's output after an offset (never recorded)
MAX_AFTER: Final = 1 << 62  # the largest output offset a logs read may name


class Refused(ValueError):
    """A control message refused: ``reason`` is the counter it goes to (``malformed``,
    ``oversized``, ``forged``, ``other_group``)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Order:
    """What the asking node wants done: ``action`` on ``app`` (``start``, ``stop``, ``restart``),
    or on the node (``app`` empty: ``stop``, ``shutdown``, ``reboot``), or ``apps`` (its list),
    or ``logs`` of ``app`` (its output after offset ``after``; None: the log file's tail).
    ``at`` is the asking node's mesh time, ``id`` 32 hex digits, unique."""

    id: str
    group: str
    target: NodeId
    action: str
    app: str
    at: float
    after: int | None = None

    def body(self) -> dict[str, Any]:
        body = {"id": self.id, "group": self.group, "target": self.target.hex(), "action": self.action,
                "app": self.app, "at": self.at}
        return body if self.after is None else body | {"after": self.after}  # "after": a logs read's alone

    def what(self) -> str:
        """The order in words: ``app stop scoreboard``, ``node shutdown``."""
        if self.action == LIST:
            return "apps"
        return f"app {self.action} {self.app}" if self.app else f"node {self.action}"


@dataclass(frozen=True, slots=True)
class Result:
    """The target's answer to order ``id``: an HTTP status (200 done, 404 unknown app, 409
    refused, 400 malformed) and what it says (the app's status, or ``error``)."""

    id: str
    group: str
    status: int
    answer: dict[str, Any]

    def body(self) -> dict[str, Any]:
        return {"id": self.id, "group": self.group, "status": self.status, "answer": self.answer}


def encode(identity: NodeIdentity, sender: NodeId, message: Order | Result) -> bytes:
    """The payload of an addressed message carrying ``message``, signed by ``identity``."""
    kind = KIND_ORDER if isinstance(message, Order) else KIND_RESULT
    body = json.dumps(message.body(), separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    signature = identity.sign(_DOMAIN + bytes([kind]) + bytes(sender) + body)
    payload = PREFIX + bytes([kind]) + identity.public_key + signature + body
    if len(payload) > MAX_PAYLOAD:
        raise Refused("oversized", f"a control message is at most {MAX_PAYLOAD} octets, this one {len(payload)}")
    return payload


def decode(payload: bytes, sender: NodeId, group: str) -> Order | Result:
    """The order or result ``sender`` sent, or :class:`Refused` (the reason its counter)."""
    if len(payload) > MAX_PAYLOAD:
        raise Refused("oversized", f"{len(payload)} octets, over {MAX_PAYLOAD}")
    if len(payload) <= _HEAD or not payload.startswith(PREFIX) or payload[2] not in (KIND_ORDER, KIND_RESULT):
        raise Refused("malformed", "cut short, or not an order or a result")
    kind = payload[2]
    key, signature, body = payload[3:3 + _KEY], payload[3 + _KEY:_HEAD], payload[_HEAD:]
    if node_id_for(key) != sender or not verify(key, _DOMAIN + bytes([kind]) + bytes(sender) + body, signature):
        raise Refused("forged", f"not signed by {sender.short}'s key")
    try:
        doc = json.loads(body.decode("utf-8"))
    except ValueError:
        raise Refused("malformed", "its body is not JSON in UTF-8") from None
    if not isinstance(doc, dict):
        raise Refused("malformed", "its body is not a JSON object")
    if doc.get("group") != group:
        raise Refused("other_group", f"an order of group {str(doc.get('group'))[:40]!r}, not {group!r}")
    return _order(doc) if kind == KIND_ORDER else _result(doc)


def _order(doc: dict[str, Any]) -> Order:
    fields = {"id", "group", "target", "action", "app", "at"}
    if set(doc) != fields and not (set(doc) == fields | {"after"} and doc["action"] == LOGS):
        raise Refused("malformed", "an order has id, group, target, action, app and at (and a logs read, after)")
    oid, target, action, app, at = doc["id"], doc["target"], doc["action"], doc["app"], doc["at"]
    after = doc.get("after")
    if after is not None and (not isinstance(after, int) or isinstance(after, bool) or not 0 <= after <= MAX_AFTER):
        raise Refused("malformed", "a logs read's after is an offset: an integer, 0 or more")
    if not (isinstance(oid, str) and _ORDER_ID.fullmatch(oid) and isinstance(target, str)
            and isinstance(at, (int, float)) and not isinstance(at, bool) and isinstance(app, str)):
        raise Refused("malformed", "an order's fields have the wrong types")
    try:
        node = NodeId.from_hex(target)
    except ValueError:
        raise Refused("malformed", "an order's target is not a node id") from None
    if app and not (APP_NAME.fullmatch(app) and action in (*APP_ACTIONS, LOGS)):
        raise Refused("malformed", "an app's order is start, stop or restart (or a logs read) of an app's name")
    if not app and action not in (*NODE_ACTIONS, LIST):
        raise Refused("malformed", "a node's order is stop, shutdown or reboot")
    return Order(oid, doc["group"], node, action, app, float(at), after)


def _result(doc: dict[str, Any]) -> Result:
    if set(doc) != {"id", "group", "status", "answer"}:
        raise Refused("malformed", "a result has id, group, status and answer")
    oid, status, answer = doc["id"], doc["status"], doc["answer"]
    if not (isinstance(oid, str) and _ORDER_ID.fullmatch(oid) and isinstance(status, int)
            and not isinstance(status, bool) and 100 <= status <= 599 and isinstance(answer, dict)):
        raise Refused("malformed", "a result's fields have the wrong types")
    return Result(oid, doc["group"], status, answer)
