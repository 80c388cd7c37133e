"""A node's room: the guests it hosts, as a pure state machine.

The driver (``server.py``) feeds it what happens — a marco heard, a message
or a closed connection from a guest, the group's events, the clock — and
carries out the actions it returns: send a message to a guest, close a
connection, record a guest's event in the group's log.  Time is passed in.

Rules (the Noam document, and what it leaves open):

- A marco whose room is this node's group gets a polo from one host of the
  group: the one ``chosen_host`` picks for the guest's name among this node
  (``me``) and the group's other live guest hosts (passed in); the others
  leave it (counted in ``marcos_left_to_others``).  Hosts earn their place
  (``_turn``): the same guest's marco again within ``marco_retry`` s means
  the host whose turn it was did not answer; that guest's next marco goes to
  its next host, and the host that missed ranks after the others, for every
  guest, for ``missed_for`` s (counted in ``marcos_unanswered``).  A free guest (room "")
  that this host has grabbed gets a polo from it.  Any other marco puts its
  guest on the free-guests or other-guests list.  Registration does not
  depend on the choice: a guest that registers here, chosen or not (two
  hosts' views of the group differed for a moment), is taken.
- ``register`` attaches a guest.  A name is one guest's while it is here: a
  registration under the name of a guest still connected is refused (an
  ``error``, then the connection is closed, counted in ``names_taken``) until
  that guest leaves or is fired — a lemma that lost its connection comes back
  once the host has noticed (its heartbeats stop: fired at 2 P; its
  connection closes).  Registering again on the guest's own connection
  updates it.
- Connections are bounded (``GuestLimits``): at most ``max_connections`` open
  at once and ``max_connections_per_address`` from one IP (a connection past
  either gets an ``error`` and is closed at once); one that has not registered
  within ``register_timeout`` s is closed, and so is one whose TCP message,
  once begun, is not whole within ``frame_timeout`` s.  Incomplete messages
  held for all connections together stay under ``max_buffered_bytes``: past
  it the connection holding the most is closed.
- The free and other-guests lists keep at most ``max_spotted`` names each;
  the least recently heard is forgotten first (counted).
- A registered guest's ``event`` becomes an event of the group (kind = the
  topic).  Every guest, on any node, whose hears list has the topic receives
  it as ``["event", speaker, topic, value]``; the speaker does not get its own
  event back.  Topics it speaks are added to its speaks list.
- Heartbeats: a guest that asked for period P is fired when nothing has been
  heard from it for 2 P (any message counts: the document has the lemma send
  a heartbeat P after its last message).  ``heartbeat_ack`` is sent for each
  heartbeat when asked for.
- The host's address changed (``moved``): every connection was made to the
  old address, which the host no longer has.  Each is closed (counted in
  ``closed_address_changed``) and its guest leaves; the guest finds the host
  again by marco, at its new address.
- A keyed room (``room_key``: a secured group's, docs/security.md) takes a
  ``register`` only when its options carry the room's key (``"room_key"``,
  compared in constant time, case, spaces and dashes aside); otherwise the
  guest gets an ``error``, its connection is closed, nothing of it is
  recorded (counted in ``room_key_refused``).  A keyed room that is also
  ``keyless`` (docs/guests.md, "Keyless guests") takes a ``register`` that
  gives no key at all too, its guest marked ``keyless`` (counted in
  ``keyless_admitted``); a key given and wrong is refused as before.
- Bad input (not a Noam message, a message before ``register``, a
  guest_name that is not the registered one) gets an ``error`` message and
  the connection is closed; other guests are not affected.
"""

from __future__ import annotations

import hmac
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from ..counters import Counters
from ..limits import GuestLimits
from ..security import GroupSecret
from .choice import chosen_host
from .codec import Error, Event, Heartbeat, HeartbeatAck, Marco, Message, Polo, Register

__all__ = ["Action", "Changed", "Close", "Emit", "GuestInfo", "Room", "RoomCounters", "SendTo", "Spotted"]


@dataclass(frozen=True, slots=True)
class SendTo:
    guest: str
    message: Message


@dataclass(frozen=True, slots=True)
class Close:
    conn: int
    reason: str
    error: bool = False  # say ["error", reason] first


@dataclass(frozen=True, slots=True)
class Emit:
    """Record a guest's event in the group's log."""

    guest: str
    topic: str
    value: Any


@dataclass(frozen=True, slots=True)
class Changed:
    """A guest joined (``joined`` true) or left / was fired."""

    guest: str
    joined: bool
    reason: str = ""


Action = SendTo | Close | Emit | Changed


@dataclass(slots=True)
class GuestInfo:
    name: str
    conn: int
    transport: str  # "tcp" or "ws"
    address: str  # the guest's IP
    port: int  # its own TCP port for the host to send on (0: use the registration connection)
    hears: frozenset[str]
    speaks: set[str]
    dialect: str
    version: str
    heartbeat: float
    ack: bool
    registered_at: float
    last_heard: float
    received: int = 0
    sent: int = 0
    keyless: bool = False  # taken into a keyed room without its key (Room.keyless): its events say so


    def as_dict(self, now: float) -> dict[str, Any]:
        return {
            "name": self.name, "transport": self.transport, "address": self.address, "port": self.port,
            "hears": sorted(self.hears), "speaks": sorted(self.speaks), "dialect": self.dialect,
            "version": self.version, "heartbeat": self.heartbeat, "heartbeat_ack": self.ack,
            "connected_for": round(now - self.registered_at, 3), "silent_for": round(now - self.last_heard, 3),
            "events_in": self.received, "events_out": self.sent, "keyless": self.keyless,
        }


@dataclass(slots=True)
class Spotted:
    """A guest heard only by its marco: free (room "") or another room's."""

    name: str
    room: str
    dialect: str
    version: str
    address: str
    last_seen: float

    def as_dict(self, now: float) -> dict[str, Any]:
        return {"name": self.name, "room": self.room, "dialect": self.dialect, "version": self.version,
                "address": self.address, "seen_ago": round(now - self.last_seen, 3)}


ROOM_KEY_OPTION = "room_key"  # the member of register's options that carries the room key


def room_key_for(group: GroupSecret) -> str:
    """A secured group's room key as people type it (``GroupSecret.room_key_text``)."""
    return group.room_key_text()


def room_key_matches(given: object, expected: str) -> bool:
    """Is ``given`` (what a guest sent) the room key ``expected``?  Case, spaces and dashes do
    not matter; compared in constant time in the key's content."""
    if not isinstance(given, str):
        return False
    typed = "".join(given.split()).replace("-", "").upper()
    return hmac.compare_digest(typed.encode("utf-8", "replace"), expected.replace("-", "").encode("ascii"))


@dataclass(slots=True)
class RoomCounters(Counters):
    """What the room refused or forgot (served in ``GET /api/v1/guests`` -> ``stats``)."""

    refused_host_full: int = 0  # connections refused: max_connections were open
    refused_address_full: int = 0  # connections refused: max_connections_per_address from that IP
    register_timeouts: int = 0  # connections closed for not registering within register_timeout
    frame_timeouts: int = 0  # connections closed for a message not whole within frame_timeout
    buffer_full: int = 0  # connections closed as incomplete messages went past max_buffered_bytes
    names_taken: int = 0  # registrations refused: the name is a connected guest's
    spotted_forgotten: int = 0  # names dropped from the free / other lists past max_spotted
    marcos_left_to_others: int = 0  # marcos for this room not answered: another host of the group is chosen
    closed_address_changed: int = 0  # connections closed because the host's address changed (moved)
    room_key_refused: int = 0  # registrations refused: a keyed room, and not its key in register's options
    keyless_admitted: int = 0  # registrations taken into a keyed, keyless room without a key (marked keyless)
    marcos_unanswered: int = 0  # a guest's marco came again within marco_retry: its host's turn went unanswered


@dataclass(slots=True)
class _Conn:
    """A TCP or WebSocket connection, registered or not."""

    address: str
    opened: float
    pending: int = 0  # octets of an incomplete message held for it
    frame_since: float | None = None  # when its incomplete message began


@dataclass(frozen=True, slots=True)
class _Turn:
    """A guest's last marco for this room: when, whose turn it was, and the hosts that
    missed it since its marcos began coming in quick succession."""

    at: float
    host: bytes
    skipped: frozenset[bytes]


@dataclass(slots=True)
class Room:
    room: str  # the group's name
    tcp_port: int = 0  # what polo tells guests to connect to
    me: bytes = b""  # this node's UUID: its rendezvous weight decides which guests it answers
    spotted_for: float = 60.0  # a free or other guest unheard this long is dropped from the lists
    room_key: str = ""  # a keyed room's key (room_key_for): register must carry it ("": any guest is taken)
    keyless: bool = False  # a keyed room takes a register giving no key too, its guest marked keyless
    marco_retry: float = 10.0  # a guest's marco heard again within this many s: its last went unanswered
    missed_for: float = 300.0  # a host that left a marco unanswered ranks last this long, for every guest
    guests: dict[str, GuestInfo] = field(default_factory=dict)
    free: dict[str, Spotted] = field(default_factory=dict)
    others: dict[str, Spotted] = field(default_factory=dict)
    grabbed: set[str] = field(default_factory=set)
    limits: GuestLimits = field(default_factory=GuestLimits)
    counters: RoomCounters = field(default_factory=RoomCounters)
    _conns: dict[int, str] = field(default_factory=dict)  # registration connection -> guest
    _open: dict[int, _Conn] = field(default_factory=dict)  # every connection opened() and not yet closed
    _per_address: dict[str, int] = field(default_factory=dict)
    _buffered: int = 0  # sum of _open[*].pending
    _turns: dict[str, _Turn] = field(default_factory=dict)  # guest -> its last marco for this room (max_spotted)
    _missed: dict[bytes, float] = field(default_factory=dict)  # host -> when it last left a marco unanswered
    fired: int = 0
    errors: int = 0

    @property
    def is_keyless(self) -> bool:
        """A keyed room that takes guests without its key too (an open room is not keyed at all)."""
        return self.keyless and self.room_key != ""

    def keyless_guest(self, name: str) -> bool:
        """Is ``name`` a guest here that was taken without the room key?"""
        g = self.guests.get(name)
        return g is not None and g.keyless

    # ---------------------------------------------------------------- discovery

    def marco(self, m: Marco, address: str, now: float, hosts: Collection[bytes] = ()) -> Polo | None:
        """``hosts``: the UUIDs of the group's other live nodes that host guests."""
        if m.room == self.room and self.room != "":
            if hosts and self._turn(m.guest, now, [self.me, *hosts]) != self.me:
                self.counters.marcos_left_to_others += 1
                return None
            return Polo(self.room, self.tcp_port)
        if m.room == "":
            if m.guest in self.grabbed:
                return Polo(self.room, self.tcp_port)
            self._spot(self.free, Spotted(m.guest, m.room, m.dialect, m.version, address, now))
        else:
            self._spot(self.others, Spotted(m.guest, m.room, m.dialect, m.version, address, now))
        return None

    def _turn(self, guest: str, now: float, hosts: list[bytes]) -> bytes:
        """Which of ``hosts`` (this node among them) answers this marco of ``guest``.

        Every host of the group hears the same marcos and decides alike.  A guest that got
        its polo registers and stops marcoing; one whose marco went unanswered marcos again
        within its lemma's interval (1 to 5 s).  So a marco heard within ``marco_retry`` s of
        the same guest's last one says that the host whose turn that was did not answer (a
        host that announces guests and never answers, or a polo lost): that host is *missed*.
        The guest's next marco goes to the next host in its order, never to one that missed
        it (when every host has, the round starts again), and a host that missed any guest
        in the last ``missed_for`` s ranks after every host that did not, for every guest:
        a host counts first in the choice only while it is seen answering.  The order is
        otherwise the rendezvous weights' (``chosen_host``)."""
        last = self._turns.pop(guest, None)
        skip: frozenset[bytes] = frozenset()
        if last is not None and now - last.at <= self.marco_retry:
            # (No exception for a marco heard twice at once, from a guest on two interfaces: a
            # threshold in time would be crossed at one host and not another, and the hosts
            # would then disagree; counted as a miss, every host hands the guest on alike.)
            self._missed[last.host] = now
            self.counters.marcos_unanswered += 1
            skip = last.skipped | {last.host}
        missed = self._missed
        for h, at in list(missed.items()):
            if now - at > self.missed_for:
                del missed[h]
        rest = [h for h in hosts if h not in skip]
        if not rest:  # every host has missed this guest: a new round
            rest, skip = hosts, frozenset()
        fresh = [h for h in rest if h not in missed]
        host = chosen_host(guest, fresh or rest)
        assert host is not None
        self._turns[guest] = _Turn(now, host, skip)
        while len(self._turns) > self.limits.max_spotted:
            del self._turns[next(iter(self._turns))]
        return host

    def missed_since(self, now: float) -> set[bytes]:
        """The hosts seen leaving a marco unanswered in the last ``missed_for`` s."""
        return {h for h, at in self._missed.items() if now - at <= self.missed_for}

    def _spot(self, spotted: dict[str, Spotted], s: Spotted) -> None:
        spotted.pop(s.name, None)  # put back at the end: each list stays least recently heard first
        spotted[s.name] = s
        while len(spotted) > self.limits.max_spotted:
            del spotted[next(iter(spotted))]
            self.counters.spotted_forgotten += 1

    def grab(self, name: str) -> None:
        """Take a free guest into this room: its next marco gets a polo."""
        self.grabbed.add(name)
        self.free.pop(name, None)

    # -------------------------------------------------------------- connections

    def opened(self, conn: int, address: str, now: float) -> list[Action]:
        """A TCP or WebSocket connection came in: taken, or closed with an error
        when the host, or that address, has as many as it takes."""
        lim = self.limits
        if len(self._open) >= lim.max_connections:
            self.counters.refused_host_full += 1
            return [Close(conn, f"this host has {lim.max_connections} guest connections open: try later", error=True)]
        if self._per_address.get(address, 0) >= lim.max_connections_per_address:
            self.counters.refused_address_full += 1
            return [Close(conn, f"this host takes at most {lim.max_connections_per_address} guest connections "
                                f"from one address: try later", error=True)]
        self._open[conn] = _Conn(address, now)
        self._per_address[address] = self._per_address.get(address, 0) + 1
        return []

    def partial(self, conn: int, pending: int, now: float) -> list[Action]:
        """After a read: ``pending`` octets of an incomplete message are held for ``conn``."""
        c = self._open.get(conn)
        if c is None:
            return []
        self._buffered += pending - c.pending
        c.pending = pending
        if not pending:
            c.frame_since = None
            return []
        if c.frame_since is None:
            c.frame_since = now
        if self._buffered <= self.limits.max_buffered_bytes:
            return []
        self.counters.buffer_full += 1
        biggest = max(self._open, key=lambda k: self._open[k].pending)
        return self._refuse(biggest, f"this host holds {self.limits.max_buffered_bytes} octets of incomplete "
                                     "messages for its guests: send smaller messages")

    def received(self, conn: int, msg: Message, now: float, *, transport: str = "tcp",
                 address: str = "") -> list[Action]:
        if isinstance(msg, Register):
            return self._register(conn, msg, now, transport, address)
        name = self._conns.get(conn)
        if name is None:
            return self.bad(conn, f"{type(msg).__name__.lower()} before register: register first")
        g = self.guests[name]
        if isinstance(msg, Error):
            return [self._close(conn, f"the guest said: {msg.reason}"), *self._remove(name, f"error: {msg.reason}")]
        if isinstance(msg, HeartbeatAck):
            return self.bad(conn, "heartbeat_ack goes from host to guest")
        if msg.guest != name:
            return self.bad(conn, f"guest_name {msg.guest!r} is not the registered {name!r}")
        g.last_heard = now
        if isinstance(msg, Heartbeat):
            return [SendTo(name, HeartbeatAck(name))] if g.ack else []
        assert isinstance(msg, Event)
        g.received += 1
        g.speaks.add(msg.topic)
        return [Emit(name, msg.topic, msg.value)]

    def closed(self, conn: int) -> list[Action]:
        """A connection closed (whoever closed it; again is harmless): its guest leaves."""
        self._untrack(conn)
        name = self._conns.get(conn)
        if name is None:
            return []
        return self._remove(name, "disconnected")

    def send_failed(self, name: str) -> list[Action]:
        """Writing to a guest failed: it is fired (it goes back to discovery)."""
        if name not in self.guests:
            return []
        self.fired += 1
        return [self._close(self.guests[name].conn, "send failed"), *self._remove(name, "fired: send failed")]

    def moved(self, reason: str) -> list[Action]:
        """The host's address changed: close every connection (registered or not); its
        guest, if any, leaves with ``reason``."""
        out: list[Action] = []
        for conn in list(self._open):
            self.counters.closed_address_changed += 1
            out.append(self._close(conn, reason))
            name = self._conns.get(conn)
            if name is not None:
                out.extend(self._remove(name, reason))
        return out

    def fire(self, name: str, reason: str) -> list[Action]:
        if name not in self.guests:
            return []
        self.fired += 1
        return [self._close(self.guests[name].conn, reason), *self._remove(name, f"fired: {reason}")]

    # -------------------------------------------------------------------- events

    def deliver(self, speaker: str, topic: str, value: Any, *, local_speaker: bool) -> list[Action]:
        """A group event: to every guest here that hears ``topic`` (not to the
        guest that said it, when it is ours)."""
        out: list[Action] = []
        for g in self.guests.values():
            if topic in g.hears and not (local_speaker and g.name == speaker):
                g.sent += 1
                out.append(SendTo(g.name, Event(speaker, topic, value)))
        return out

    def hears(self, topic: str) -> bool:
        """Whether any guest here hears ``topic``."""
        return any(topic in g.hears for g in self.guests.values())

    def tick(self, now: float) -> list[Action]:
        out: list[Action] = []
        for g in list(self.guests.values()):
            if g.heartbeat and now - g.last_heard > 2 * g.heartbeat:
                out += self.fire(g.name, f"silent for more than 2 x {g.heartbeat:g} s")
        lim = self.limits
        for conn, c in list(self._open.items()):
            if conn not in self._conns and now - c.opened > lim.register_timeout:
                self.counters.register_timeouts += 1
                out += self._refuse(conn, f"no register within {lim.register_timeout:g} s")
            elif c.frame_since is not None and now - c.frame_since > lim.frame_timeout:
                self.counters.frame_timeouts += 1
                out += self._refuse(conn, f"a message begun was not whole within {lim.frame_timeout:g} s")
        for spotted in (self.free, self.others):
            while spotted:  # least recently heard first: stop at the first one heard lately
                first = next(iter(spotted.values()))
                if now - first.last_seen <= self.spotted_for:
                    break
                del spotted[first.name]
        return out

    def next_deadline(self) -> float | None:
        times = [g.last_heard + 2 * g.heartbeat for g in self.guests.values() if g.heartbeat]
        lim = self.limits
        for conn, c in self._open.items():
            if conn not in self._conns:
                times.append(c.opened + lim.register_timeout)
            if c.frame_since is not None:
                times.append(c.frame_since + lim.frame_timeout)
        return min(times) if times else None

    # ----------------------------------------------------------------- internals

    def _register(self, conn: int, m: Register, now: float, transport: str, address: str) -> list[Action]:
        out: list[Action] = []
        known = self._conns.get(conn)
        if known is not None and known != m.guest:
            return self.bad(conn, f"this connection is guest {known!r}; register {m.guest!r} on its own connection")
        keyless = self.is_keyless and ROOM_KEY_OPTION not in m.options
        if self.room_key and not keyless and not room_key_matches(m.options.get(ROOM_KEY_OPTION), self.room_key):
            self.counters.room_key_refused += 1
            return self._refuse(conn, "this room is keyed: give its room key in register's options as "
                                      f"{ROOM_KEY_OPTION!r} (the group's organiser has it); nothing was recorded")
        old = self.guests.get(m.guest)
        if old is not None and old.conn != conn:
            self.counters.names_taken += 1
            return self._refuse(conn, f"the name {m.guest!r} is taken by a guest connected here: pick another, or "
                                      "register again once it has left or been fired")
        self.guests[m.guest] = GuestInfo(
            name=m.guest, conn=conn, transport=transport, address=address,
            port=m.port if transport == "tcp" else 0, hears=frozenset(m.hears), speaks=set(m.speaks),
            dialect=m.dialect, version=m.version, heartbeat=m.heartbeat, ack=m.heartbeat_ack,
            registered_at=now, last_heard=now, keyless=keyless,
        )
        if keyless and known is None:
            self.counters.keyless_admitted += 1
        self._conns[conn] = m.guest
        self.free.pop(m.guest, None)
        self.others.pop(m.guest, None)
        out.append(Changed(m.guest, True))
        return out

    def _remove(self, name: str, reason: str) -> list[Action]:
        g = self.guests.pop(name, None)
        if g is None:
            return []
        self._conns.pop(g.conn, None)
        return [Changed(name, False, reason)]

    def bad(self, conn: int, reason: str) -> list[Action]:
        self.errors += 1
        return self._refuse(conn, reason)

    def _refuse(self, conn: int, reason: str) -> list[Action]:
        """``["error", reason]`` to ``conn``, which is closed; its guest, if any, leaves."""
        out: list[Action] = [self._close(conn, reason, error=True)]
        name = self._conns.get(conn)
        if name is not None:
            out += self._remove(name, f"bad input: {reason}")
        return out

    def _close(self, conn: int, reason: str, *, error: bool = False) -> Close:
        self._untrack(conn)
        return Close(conn, reason, error)

    def _untrack(self, conn: int) -> None:
        c = self._open.pop(conn, None)
        if c is None:
            return
        self._buffered -= c.pending
        left = self._per_address[c.address] - 1
        if left:
            self._per_address[c.address] = left
        else:
            del self._per_address[c.address]
