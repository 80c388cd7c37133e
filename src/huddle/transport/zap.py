"""CurveZMQ on the mesh's sockets, and who is let in (ZAP, ZeroMQ's authentication protocol).

In a group with a secret (docs/security.md), the ROUTER is a CURVE server whose keypair is
derived from the group secret, and every DEALER a CURVE client that knows the server's
public key.  The server's key never travels: a client without the secret cannot even start
a handshake the server will finish.  A client that does is then judged here, by the ZAP
handler this module binds on ``inproc://zeromq.zap.01`` in the transport's context, before
the connection carries a single message: its CURVE public key must be one of ``admitted``
(the group's client key, or in allow-list mode the trusted nodes' keys).  ZeroMQ stamps each
message of an admitted connection with the ``User-Id`` the handler gave it.

Every refusal is counted by reason (and, for ZAP's, by source address: ZAP sees the
client's IP; the socket monitor sees only the listening endpoint) and logged at most once
per :data:`LOG_EVERY` seconds and reason:

- ``key-not-admitted``: the client proved the group's server key but its own key is not
  admitted (ZAP said 400);
- ``wrong-server-key``: the client's handshake does not decrypt (it does not know the
  group's server key: an outsider, or a member of another secret);
- ``no-curve``: the client speaks ZeroMQ without CURVE (an open-mode node, a raw socket);
- ``handshake``: any other handshake failure the ROUTER's monitor reports (among them a
  client without CURVE that hung up on seeing the server's greeting before the server
  read its own).

A key removed from the allow-list is refused at its next handshake, and the messages of
connections it already has are dropped (``dropped_messages``): :meth:`CurveGuard.revoke`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import cast

import zmq

from ..ratelog import RateLog
from ..security import OPEN_GROUP, CurveKeypair, GroupSecret, Keyring, NodeIdentity, SecurityMode, TrustList
from ..security.trust import TrustedKey, curve_public, parse_public_key
from .accepted import monitor, monitor_events

__all__ = ["WORDS", "ZAP_ENDPOINT", "AllowList", "CurveGuard", "CurveSetup", "DialKey", "MeshSecurity", "RefusalStats"]

log = logging.getLogger("huddle.transport")

ZAP_ENDPOINT = "inproc://zeromq.zap.01"  # fixed by ZeroMQ (RFC 27)
ZAP_DOMAIN = b"huddle"
LOG_EVERY = 10.0  # seconds between two warnings of one reason
_FAILED = int(zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL)
_REASONS = {
    int(zmq.PROTOCOL_ERROR_ZMTP_CRYPTOGRAPHIC): "wrong-server-key",
    int(zmq.PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH): "no-curve",
}
# Each reason in words, as the log says it (the codes stay the counters' keys).
WORDS = {
    "key-not-admitted": "knows the group secret but its key is not admitted (not on the allow-list)",
    "wrong-server-key": "does not know this group's secret (another group's, or a retired one)",
    "no-curve": "has no group secret (an open node, or a plain ZeroMQ socket)",
    "handshake": "failed the secure handshake",
}


@dataclass(frozen=True, slots=True)
class DialKey:
    """What a DEALER dials with under one group secret: the server's public key and its own keypair."""

    key_id: str
    server: bytes
    client: CurveKeypair


@dataclass(frozen=True, slots=True)
class CurveSetup:
    """The keys of a secured mesh: the ROUTER's keypair, the keypair DEALERs dial with,
    and the client keys admitted (CURVE public key -> the ``User-Id`` its messages carry).
    ``dial``: during a rotation, every secret's keys to dial with, the one in use first
    (empty: ``server`` and ``client`` alone)."""

    server: CurveKeypair
    client: CurveKeypair
    admitted: dict[bytes, str]
    dial: tuple[DialKey, ...] = ()


@dataclass(slots=True)
class RefusalStats:
    """Connections refused before their first message, and messages of revoked keys dropped
    (``stats.security`` of ``GET /api/v1/node``)."""

    refused_handshakes: int = 0
    by_reason: dict[str, int] = field(default_factory=dict)
    by_address: dict[str, int] = field(default_factory=dict)  # ZAP refusals; the newest addresses kept
    admitted_handshakes: int = 0
    dropped_messages: int = 0  # received on a connection whose key was removed from the allow-list

    def as_dict(self) -> dict[str, object]:
        return {"refused_handshakes": self.refused_handshakes, "by_reason": dict(self.by_reason),
                "by_address": dict(self.by_address), "admitted_handshakes": self.admitted_handshakes,
                "dropped_messages": self.dropped_messages}


class CurveGuard:
    """The ZAP handler and the handshake watch of one transport.  Made before the ROUTER
    binds (ZeroMQ asks the handler at each handshake; with ``ZAP_ENFORCE_DOMAIN`` a missing
    handler refuses everyone rather than admitting everyone).  Call from the asyncio thread."""

    def __init__(self, ctx: zmq.Context[zmq.Socket[bytes]], setup: CurveSetup, *, max_addresses: int) -> None:
        self.setup = setup
        self.server = setup.server  # the keypair the ROUTER binds with (the secret in use)
        # Keys to dial with, the one in use first; a handshake refused with one is tried with the next.
        self.dial: list[DialKey] = list(setup.dial) or [DialKey("", setup.server.public, setup.client)]
        self.admitted = dict(setup.admitted)
        self.revoked: set[str] = set()  # User-Ids whose messages are dropped
        self.stats = RefusalStats()
        self.max_addresses = max(1, max_addresses)
        self._warnings = RateLog(log, period=LOG_EVERY)
        self._zap: zmq.Socket[bytes] = ctx.socket(zmq.REP)
        self._zap.setsockopt(zmq.LINGER, 0)
        self._zap.bind(ZAP_ENDPOINT)
        self._ctx = ctx
        self._monitor: zmq.Socket[bytes] | None = None
        self._on_event: Callable[[int, int], None] | None = None
        self._router: zmq.Socket[bytes] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def secure_router(self, sock: zmq.Socket[bytes], events: int = 0,
                      on_event: Callable[[int, int], None] | None = None) -> None:
        """Make ``sock`` (before it binds) a CURVE server judged by this guard, and watch its handshakes.
        A socket has one monitor: ``on_event(event, value)`` is told of the monitor's other ``events``
        (the transport's accepted connections: transport/accepted.py)."""
        sock.setsockopt(zmq.CURVE_SERVER, 1)
        sock.setsockopt(zmq.CURVE_SECRETKEY, self.server.secret)
        sock.setsockopt(zmq.ZAP_DOMAIN, ZAP_DOMAIN)
        sock.setsockopt(zmq.ZAP_ENFORCE_DOMAIN, 1)
        self._router = sock
        self._on_event = on_event
        self._monitor = monitor(self._ctx, sock, _FAILED | events)

    def secure_dealer(self, sock: zmq.Socket[bytes], key: DialKey | None = None) -> DialKey:
        """Make ``sock`` (before it connects) a CURVE client of ``key`` (default: the secret in use's)."""
        key = key or self.dial[0]
        sock.setsockopt(zmq.CURVE_SERVERKEY, key.server)
        sock.setsockopt(zmq.CURVE_PUBLICKEY, key.client.public)
        sock.setsockopt(zmq.CURVE_SECRETKEY, key.client.secret)
        return key

    def dial_key(self, key_id: str) -> DialKey | None:
        return next((k for k in self.dial if k.key_id == key_id), None)

    def add_dial(self, key: DialKey, *, first: bool = False) -> None:
        """Dial with ``key`` too (``first``: before the others, the secret in use)."""
        self.dial = [k for k in self.dial if k.key_id != key.key_id]
        self.dial.insert(0 if first else len(self.dial), key)

    def drop_dial(self, key_id: str) -> None:
        self.dial = [k for k in self.dial if k.key_id != key_id] or self.dial

    def admit(self, curve_key: bytes, user_id: str) -> None:
        self.admitted[curve_key] = user_id
        self.revoked.discard(user_id)

    def revoke(self, curve_key: bytes) -> None:
        """Refuse ``curve_key`` from now on: at its next handshake, and every message of its
        connections already open."""
        user_id = self.admitted.pop(curve_key, None)
        if user_id is not None:
            self.revoked.add(user_id)

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        for sock, read in ((self._zap, self._zap_readable), (self._monitor, self._monitor_readable)):
            if sock is not None:
                loop.add_reader(cast(int, sock.getsockopt(zmq.FD)), read)
                loop.call_soon(read)  # edge-triggered: what came before add_reader

    def poll(self) -> None:
        """Safety net against a missed edge (a ZAP request unanswered holds a handshake)."""
        self._zap_readable()
        self._monitor_readable()

    def close(self) -> None:
        if self._router is not None:
            with contextlib.suppress(zmq.ZMQError):
                self._router.disable_monitor()
        for sock in (self._zap, self._monitor):
            if sock is None:
                continue
            if self._loop is not None:
                with contextlib.suppress(zmq.ZMQError, ValueError, RuntimeError):
                    self._loop.remove_reader(cast(int, sock.getsockopt(zmq.FD)))
            sock.close(linger=0)

    # ------------------------------------------------------------------ judging

    def _zap_readable(self) -> None:
        zap = self._zap
        while True:
            try:
                request = zap.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            except zmq.ZMQError as exc:  # closed under us
                log.debug("ZAP handler: %s", exc)
                return
            zap.send_multipart(self._judge(request))

    def _judge(self, request: list[bytes]) -> list[bytes]:
        """A ZAP reply (RFC 27): version, request id, status, text, user id, metadata."""
        if len(request) < 6 or request[0] != b"1.0":
            return [b"1.0", request[1] if len(request) > 1 else b"", b"500", b"bad ZAP request", b"", b""]
        request_id, address, mechanism = request[1], request[3].decode("utf-8", "replace"), request[5]
        key = request[6] if mechanism == b"CURVE" and len(request) == 7 else b""
        user_id = self.admitted.get(key) if len(key) == 32 else None
        if user_id is None:
            self._refused("key-not-admitted", address)
            return [b"1.0", request_id, b"400", b"key not admitted", b"", b""]
        self.stats.admitted_handshakes += 1
        return [b"1.0", request_id, b"200", b"OK", user_id.encode(), b""]

    def _monitor_readable(self) -> None:
        for event, value in monitor_events(self._monitor, "handshake"):
            if event & _FAILED:
                self._refused(_REASONS.get(value, "handshake"), "")
            elif self._on_event is not None:
                self._on_event(event, value)

    def _refused(self, reason: str, address: str) -> None:
        stats = self.stats
        stats.refused_handshakes += 1
        stats.by_reason[reason] = stats.by_reason.get(reason, 0) + 1
        if address:
            by_address = stats.by_address
            n = by_address.pop(address, 0) + 1  # re-inserted last: the most recent address
            while by_address and len(by_address) >= self.max_addresses:
                del by_address[next(iter(by_address))]
            by_address[address] = n
        self._warnings.warning(reason, time.monotonic(), "refused a mesh connection: %s %s (%s; %d refused so far)",
                               address or "a node", WORDS.get(reason, reason), reason, stats.refused_handshakes)


def _user_id(public_key: bytes) -> str:
    return public_key.hex()


class AllowList:
    """Allow-list mode: the trusted keys (``DATA_DIR/trusted-keys`` and this node's own) are
    the only client keys admitted.  A change takes effect at once and is written to the file;
    a removed key is revoked (:meth:`CurveGuard.revoke`) and ``cut(public_key)`` is told, so
    that the mesh ends that node's session."""

    def __init__(self, trust: TrustList, identity: NodeIdentity) -> None:
        self.trust = trust
        self.own = identity.public_key
        self.guard: CurveGuard | None = None
        self.cut: Callable[[bytes], None] = lambda public_key: None

    def admitted(self) -> dict[bytes, str]:
        """CURVE public key -> User-Id (the Ed25519 key in hex) for every trusted key."""
        keys = [self.own, *(k.public_key for k in self.trust.entries())]
        return {curve_public(k): _user_id(k) for k in keys}

    def attach(self, guard: CurveGuard, cut: Callable[[bytes], None]) -> None:
        self.guard, self.cut = guard, cut

    def listed(self) -> list[dict[str, str]]:
        return [k.as_dict() for k in self.trust.entries()]

    def add(self, text: str, name: str = "") -> TrustedKey:
        """Trust the key ``text`` (64 hex digits); ConfigError if it is not a key."""
        key = parse_public_key(text)
        trusted = self.trust.add(key, name)
        if self.guard is not None:
            self.guard.admit(curve_public(key), _user_id(key))
        return trusted

    def remove(self, text: str) -> TrustedKey | None:
        """Stop trusting the listed key ``text`` (hex or fingerprint); None if none is listed so.
        This node's own key is always trusted (it is not in the file)."""
        found = self.trust.find(text)
        if found is None:
            return None
        self.trust.remove(found.public_key)
        if found.public_key != self.own:
            if self.guard is not None:
                self.guard.revoke(curve_public(found.public_key))
            self.cut(found.public_key)
        return found


class MeshSecurity:
    """How a node's mesh is secured: its mode, the keyring, the allow-list (allow-list mode),
    the keys its transport uses (``setup``, None in open mode) and, once the transport is made,
    its guard.  What ``GET /api/v1/node`` shows under ``security``."""

    def __init__(self, secret: GroupSecret | None, identity: NodeIdentity, *, allow_list: TrustList | None,
                 keyring: Keyring | None = None) -> None:
        """``keyring``: the secrets held (a node that rotated before: Keyring.restore); default ``secret`` alone."""
        self.keyring = keyring if keyring is not None or secret is None else Keyring(secret)
        self.identity = identity
        self.allow = None if allow_list is None else AllowList(allow_list, identity)
        self.guard: CurveGuard | None = None
        if self.keyring is None:
            self.mode, self.setup = SecurityMode.OPEN, None
            return
        group = self.keyring.current
        self.mode = SecurityMode.GROUP if self.allow is None else SecurityMode.ALLOW_LIST
        dial = tuple(self.dial_key(s) for s in self.keyring.secrets())
        if self.allow is None:
            admitted = dict(a for a in map(self.admission, self.keyring.secrets()) if a is not None)
        else:
            admitted = self.allow.admitted()
        self.setup = CurveSetup(server=group.curve_server(), client=dial[0].client, admitted=admitted, dial=dial)

    def dial_key(self, secret: GroupSecret) -> DialKey:
        """How a DEALER dials under ``secret``: its server key, and the group's client keypair
        (group mode) or this node's own (allow-list mode, where client keys are node keys)."""
        client = secret.curve_client() if self.allow is None else self.identity.curve()
        return DialKey(secret.key_id, secret.curve_server().public, client)

    def admission(self, secret: GroupSecret) -> tuple[bytes, str] | None:
        """The client key ``secret`` has ZAP admit and its User-Id (None in allow-list mode:
        there the trusted node keys are admitted whatever the secret)."""
        if self.allow is not None:
            return None
        return secret.curve_client().public, f"group:{secret.key_id}"

    def attach(self, guard: CurveGuard | None, cut: Callable[[bytes], None]) -> None:
        """The transport's guard; ``cut(public_key)`` ends the session of a node whose key was removed."""
        self.guard = guard
        if self.allow is not None and guard is not None:
            self.allow.attach(guard, cut)

    def describe(self) -> dict[str, object]:
        out: dict[str, object] = {"mode": self.mode.value}
        if self.keyring is None:
            out["warning"] = OPEN_GROUP
        else:
            out["key_id"] = self.keyring.key_id
        if self.allow is not None:
            out["trusted_keys"] = len(self.allow.trust.entries())
        if self.guard is not None:
            out["refused_handshakes"] = self.guard.stats.refused_handshakes
        return out

    def stats(self) -> dict[str, object] | None:
        return None if self.guard is None else self.guard.stats.as_dict()
