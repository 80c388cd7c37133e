"""The ROUTER's incoming connections before a verified HELO: at most so many, and not for long.

libzmq neither tells which connection a message came on nor lets one accepted
connection of a ROUTER be closed.  What it does tell, through a socket monitor,
is each connection's descriptor when it is accepted (``EVENT_ACCEPTED``) and when
it ends (``EVENT_DISCONNECTED`` / ``EVENT_CLOSED``).  From the descriptor the
kernel gives the peer's address (``getpeername``) and how long the connection
has received nothing (Linux ``TCP_INFO``: ``tcpi_last_data_recv``); and
``shutdown(SHUT_RDWR)`` on it ends the connection in a way libzmq sees as the
peer leaving: it closes its own descriptor and forgets the connection.  The
descriptor is borrowed for these calls (a socket object around it, detached
again), never duplicated (a node at its descriptor limit has none to spare) and
never closed (it is libzmq's).

Which connections may stay is the mesh's knowledge: per source address, the
sessions whose HELO it accepted from there (``bound``).  The connections from an
address beyond that many are *unproven* — a peer still in its handshake, or one
that never says anything.  :class:`AcceptedConns` (sans-I/O: ``now`` passed in)
keeps the accepted connections by descriptor and decides:

- on accept: a connection that would make its address's unproven connections more
  than ``max-unproven-connections-per-address``, or all addresses' more than
  ``max-unproven-connections``, is closed at once (``refused``);
- each sweep: at an address with more connections than bound sessions, the excess
  among those open longer than the handshake timeout is closed (``closed_idle``),
  the ones that received nothing for longest first.  Honest peers send a BEAT every
  heartbeat on their connection, so a silent one is the likeliest not to be theirs;
  an honest connection closed by mistake costs its DEALER a reconnect (ZeroMQ
  reconnects on its own within its reconnect interval).

The module's I/O helpers (:func:`peer_of`, :func:`silence_of`, :func:`shut`) are
the few system calls on a borrowed descriptor; the transport calls them.
"""

from __future__ import annotations

import contextlib
import logging
import math
import socket
import struct
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

import zmq

from ..counters import Counters
from ..limits import MeshLimits

log = logging.getLogger("huddle.transport")

__all__ = ["EVENTS", "AcceptedConns", "AcceptedStats", "monitor", "peer_of", "shut", "silence_of"]

# The ROUTER monitor's events this module follows (their value: the connection's descriptor).
EVENTS = int(zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED | zmq.EVENT_CLOSED)

SWEEP_EVERY = 1.0  # seconds between two sweeps while connections are tracked
# Linux struct tcp_info: tcpi_last_data_recv (milliseconds since data last came) is the
# u32 at octet 52 (8 octets of u8 fields, then rto, ato, snd_mss, rcv_mss, unacked,
# sacked, lost, retrans, fackets, last_data_sent, last_ack_sent).
_TCP_INFO = getattr(socket, "TCP_INFO", None)
_LAST_DATA_RECV = 52
_TCP_INFO_LEN = 104


@dataclass(slots=True)
class AcceptedStats(Counters):
    """What the node did about incoming mesh connections (``stats.mesh_connections``)."""

    accepted: int = 0  # connections the ROUTER accepted (the monitor reported)
    refused: int = 0  # closed at once: their address, or all addresses, at the unproven cap
    closed_idle: int = 0  # closed after the handshake timeout: beyond the sessions bound to their address
    open: int = 0  # tracked now
    unproven: int = 0  # of them beyond their address's bound sessions, at the last accept or sweep
    stale: int = 0  # descriptors found no longer to be such a connection (an end the monitor did not report)


@dataclass(slots=True)
class _Conn:
    address: str
    at: float  # accepted (the transport's clock)


class AcceptedConns:
    """The accepted connections by descriptor, and which of them to close.  No I/O."""

    def __init__(self, limits: MeshLimits, grace: float = 5.0) -> None:
        """``grace``: seconds a connection may stay unproven (the mesh's handshake timeout)."""
        self.max_total = limits.max_unproven_connections
        self.max_per_address = limits.max_unproven_connections_per_address
        self.grace = grace
        self.stats = AcceptedStats()
        self._conns: dict[int, _Conn] = {}
        self._by_address: dict[str, int] = {}
        self._next_sweep = -math.inf

    def __len__(self) -> int:
        return len(self._conns)

    def address_of(self, fd: int) -> str | None:
        c = self._conns.get(fd)
        return None if c is None else c.address

    def unproven(self, bound: Mapping[str, int]) -> int:
        """Connections beyond the sessions ``bound`` to their address, over all addresses."""
        return sum(max(0, n - bound.get(a, 0)) for a, n in self._by_address.items())

    def accepted(self, fd: int, address: str, now: float, bound: Mapping[str, int]) -> bool:
        """Connection ``fd`` from ``address`` was accepted.  False: it is over a cap and must
        be closed now (it is not kept)."""
        self.gone(fd)  # a descriptor reused before its end was reported
        self.stats.accepted += 1
        here = self._by_address.get(address, 0) + 1 - bound.get(address, 0)
        total = self.unproven(bound) + (1 if here > 0 else 0)
        if here > self.max_per_address or total > self.max_total:
            self.stats.refused += 1
            return False
        self._conns[fd] = _Conn(address, now)
        self._by_address[address] = self._by_address.get(address, 0) + 1
        self.stats.open, self.stats.unproven = len(self._conns), total
        if self._next_sweep == -math.inf:
            self._next_sweep = now + SWEEP_EVERY
        return True

    def gone(self, fd: int) -> bool:
        """Connection ``fd`` ended (or is no longer one: ``stale``).  False if it was not tracked."""
        c = self._conns.pop(fd, None)
        if c is None:
            return False
        n = self._by_address[c.address] - 1
        if n:
            self._by_address[c.address] = n
        else:
            del self._by_address[c.address]
        self.stats.open = len(self._conns)
        return True

    def due(self, now: float) -> bool:
        return bool(self._conns) and now >= self._next_sweep

    def to_close(self, now: float, bound: Mapping[str, int], silence: Callable[[int, float], float]) -> list[int]:
        """The connections to close now: at each address, those beyond its bound sessions among
        the ones open at least ``grace`` seconds, silent longest first.  ``silence(fd, age)``:
        seconds ``fd`` has received nothing (``age``: how long it is open, its upper bound).
        The caller closes them and reports each end through :meth:`gone` (or the monitor does)."""
        self._next_sweep = now + SWEEP_EVERY
        self.stats.unproven = self.unproven(bound)
        if not self.stats.unproven:
            return []
        old: dict[str, list[int]] = {}
        for fd, c in self._conns.items():
            if now - c.at >= self.grace and self._by_address[c.address] > bound.get(c.address, 0):
                old.setdefault(c.address, []).append(fd)
        out: list[int] = []
        for address, fds in old.items():
            excess = self._by_address[address] - bound.get(address, 0)
            fds.sort(key=lambda fd: silence(fd, now - self._conns[fd].at), reverse=True)
            out += fds[:excess]
        return out


def monitor(ctx: zmq.Context[zmq.Socket[bytes]], sock: zmq.Socket[bytes], events: int) -> zmq.Socket[bytes]:
    """Our end of a monitor of ``sock`` for ``events``, with no high-water mark: libzmq's I/O
    thread sends the events, and a flood of connections must neither block it nor lose an
    end (the queue is read at each turn of the event loop; an event is a few dozen octets)."""
    endpoint = f"inproc://huddle-monitor-{id(sock):x}"
    sock.monitor(endpoint, events)
    pair: zmq.Socket[bytes] = ctx.socket(zmq.PAIR)
    try:
        pair.setsockopt(zmq.LINGER, 0)
        pair.setsockopt(zmq.RCVHWM, 0)  # set before connecting: the inproc pipe takes it then
        pair.connect(endpoint)
    except zmq.ZMQError:
        pair.close(linger=0)
        raise
    return pair


def monitor_events(pair: zmq.Socket[bytes] | None, what: str) -> Iterator[tuple[int, int]]:
    """The events queued on a monitor's end ``pair`` (read until none is left), as libzmq
    writes them: a 16-bit event and a 32-bit value (a descriptor, or an error number), then
    the endpoint, which is not read.  A socket closed under us ends it (logged as ``what``)."""
    if pair is None:
        return
    while True:
        try:
            frames = pair.recv_multipart(zmq.NOBLOCK)
        except zmq.Again:
            return
        except zmq.ZMQError as exc:  # closed under us
            log.debug("%s monitor: %s", what, exc)
            return
        if len(frames) == 2 and len(frames[0]) == 6:  # else not a monitor event
            event, value = struct.unpack("=HI", frames[0])
            yield event, value


# ------------------------------------------------------------- a borrowed descriptor


@contextlib.contextmanager
def _borrowed(fd: int) -> Iterator[socket.socket]:
    """A socket object around libzmq's descriptor ``fd``, detached (not closed) after.
    Raises OSError if ``fd`` is not a socket (any more)."""
    sock = socket.socket(fileno=fd)
    try:
        yield sock
    finally:
        sock.detach()


def peer_of(fd: int, ports: Mapping[int, object] | set[int]) -> str | None:
    """The peer address of ``fd`` if it is a TCP connection accepted on one of ``ports`` (the
    ROUTER's); None if it is not (closed, or the number reused for something else)."""
    try:
        with _borrowed(fd) as sock:
            if sock.type != socket.SOCK_STREAM or sock.family not in (socket.AF_INET, socket.AF_INET6):
                return None
            if sock.getsockname()[1] not in ports:
                return None
            return str(sock.getpeername()[0])
    except OSError:
        return None


def silence_of(fd: int, age: float) -> float:
    """Seconds connection ``fd`` has received no data (Linux: TCP_INFO; elsewhere, or if it
    cannot be asked: ``age``, how long it is open)."""
    if _TCP_INFO is None:
        return age
    try:
        with _borrowed(fd) as sock:
            info = sock.getsockopt(socket.IPPROTO_TCP, _TCP_INFO, _TCP_INFO_LEN)
    except OSError:
        return age
    if len(info) < _LAST_DATA_RECV + 4:
        return age
    return float(struct.unpack_from("=I", info, _LAST_DATA_RECV)[0]) / 1000.0


def shut(fd: int, address: str, ports: Mapping[int, object] | set[int]) -> bool:
    """End connection ``fd`` (``shutdown``, libzmq closes it) if it still is the one from
    ``address`` accepted on ``ports``.  False if it is not (then nothing is done)."""
    if peer_of(fd, ports) != address:
        return False
    try:
        with _borrowed(fd) as sock:
            sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        return False
    return True
