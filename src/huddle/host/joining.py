"""Joining a peer while the node runs: ``huddle join HOST:PORT`` (``POST /api/v1/peers/join``;
docs/protocol.md 5.1, "Seeds added at runtime").

The address is resolved (a host name too, without holding up the event loop) and dialled as a
seed added at runtime (protocol/seeds.py): with our HELO, signed, over the mesh's own connection
(CurveZMQ with the group's keys in a secured group), retried with the seeds' back-off.  The join
answers once a peer is admitted there, once it refuses us, or when the time given runs out: then,
as ``serf join`` does, it has failed and leaves nothing behind (the seed is dropped, its
connection closed), and the operator may ask again.  A seed that answered stays one, as
``--seed``'s do: the node dials it again if its peer goes.

Every join is counted in the mesh's counters (``joins``, ``joins_refused``, ``joins_timed_out``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Callable, Iterable
from typing import Any, Final

from ..config import parse_hostport, resolve_seed
from ..errors import ConfigError
from ..protocol import Mesh, PeerInfo
from ..protocol.seeds import JoinFailed, TooManySeeds

__all__ = ["JOIN_TIMEOUT", "MAX_ADDRESS", "Joining", "add_seeds", "join_peer", "joined", "resolve_address"]

log = logging.getLogger("huddle.node")

JOIN_TIMEOUT: Final = 5.0  # seconds a join waits for the peer's admission, unless told otherwise
MAX_ADDRESS: Final = 261  # characters of HOST:PORT (a DNS name of 253, a colon, a port)
_RECHECK: Final = 0.25  # seconds between two looks at the seed when no event comes


async def resolve_address(address: str, timeout: float) -> str:
    """``HOST:PORT`` as the mesh's ``tcp://IP:PORT`` (IPv4, as ``--seed``), the host resolved
    within ``timeout`` seconds; ConfigError saying why not."""
    if len(address) > MAX_ADDRESS or not address.isprintable():
        raise ConfigError(f"address must be HOST:PORT, at most {MAX_ADDRESS} printable characters")
    host, port = parse_hostport(address, "address")
    if port == 0:
        raise ConfigError(f"address {address!r} needs a port other than 0")
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(timeout):
            infos = await loop.getaddrinfo(host, port, family=socket.AF_INET, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:  # socket.gaierror among them; a label too long for IDNA
        raise ConfigError(f"cannot resolve {host!r}: {getattr(exc, 'strerror', None) or exc}") from None
    except TimeoutError:
        raise ConfigError(f"cannot resolve {host!r}: no answer in {timeout:g} s") from None
    return f"tcp://{infos[0][4][0]}:{port}"


def joined(mesh: Mesh, endpoint: str, now: float) -> PeerInfo | str | None:
    """Whether a join of ``endpoint`` is done: the peer admitted there (or that answered its
    seed from another endpoint), the reason it refused us, or None (not yet)."""
    seed = mesh.seeds.get(endpoint)
    for p in mesh.peers(now):
        if p.state in ("alive", "suspect") and (p.endpoint == endpoint or (seed is not None and seed.peer == p.uuid)):
            return p
    return None if seed is None else seed.refused


async def join_peer(mesh: Mesh, address: str, *, timeout: float, now: Callable[[], float],
                    execute: Callable[[], None], listen: Callable[[Callable[[Any], None]], Callable[[], None]]
                    ) -> PeerInfo:
    """Dial ``address`` (HOST:PORT) as a seed added at runtime and wait up to ``timeout`` seconds
    for its peer's admission.  ``execute`` carries out the mesh's actions; ``listen`` hears the
    node's events (a look at the seed after each).  Raises ConfigError (a bad address, this node's
    own), TooManySeeds, or JoinFailed (refused: 409; no answer: 504)."""
    stats = mesh.stats
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout  # the name's resolution included
    try:
        endpoint = await resolve_address(address, timeout)
        if endpoint == mesh.endpoint:
            raise ConfigError(f"{address} is this node's own endpoint")
    except ConfigError:
        stats.joins_refused += 1
        raise
    already = joined(mesh, endpoint, now())
    if isinstance(already, PeerInfo):  # a peer already: nothing to dial
        stats.joins += 1
        return already
    try:
        mesh.add_seed(endpoint, now(), runtime=True)
    except TooManySeeds:
        stats.joins_refused += 1
        raise
    stats.joins += 1
    execute()
    changed = asyncio.Event()
    stop = listen(lambda _event: changed.set())
    try:
        while (done := joined(mesh, endpoint, now())) is None and (left := deadline - loop.time()) > 0:
            changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), min(left, _RECHECK))
    finally:
        stop()
    seed = mesh.seeds.get(endpoint)
    if not isinstance(done, PeerInfo) or (seed is not None and seed.peer is None):
        mesh.seeds.drop(endpoint)  # given up, or its peer was admitted by another way: no seed left awaiting
        execute()
    if isinstance(done, PeerInfo):
        log.info("joined %s (%s) at %s", done.name, done.uuid.short, endpoint)
        return done
    if done is not None:
        log.info("join %s: refused (%s)", address, done)
        raise JoinFailed(f"{address} refused us: {done}", 409)
    stats.joins_timed_out += 1
    log.info("join %s: no answer in %g s", address, timeout)
    raise JoinFailed(f"no answer from {address} in {timeout:g} s")


def add_seeds(mesh: Mesh, seeds: Iterable[str], now: float) -> None:
    """The seeds given at start (``--seed``, ``[discovery] seed``), each resolved and dialled."""
    for seed in seeds:
        mesh.add_seed(resolve_seed(seed), now)


class Joining:
    """The node's runtime joins: ``mesh`` gives its mesh (once it runs), ``now`` its local clock,
    ``execute`` carries out the mesh's actions, ``listen`` hears its events."""

    def __init__(self, mesh: Callable[[], Mesh], now: Callable[[], float], execute: Callable[[], None],
                 listen: Callable[[Callable[[Any], None]], Callable[[], None]]) -> None:
        self._mesh, self._now, self._execute, self._listen = mesh, now, execute, listen

    async def join(self, address: str, timeout: float = JOIN_TIMEOUT) -> PeerInfo:
        """Dial ``address`` (HOST:PORT) as a seed added at runtime: its peer, once admitted within
        ``timeout`` seconds (:func:`join_peer`)."""
        return await join_peer(self._mesh(), address, timeout=timeout, now=self._now, execute=self._execute,
                               listen=self._listen)
