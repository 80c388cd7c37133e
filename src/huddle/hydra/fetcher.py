"""Fetching the posts of the Hydra nodes a ZRE node meets: a DEALER per such peer.

Hydra's own node dials only the ZRE peers whose HELLO carries ``X-HYDRA`` (``src/hydra.c``,
on ENTER); so does this one, once a second looking at the ZRE peers that are ready, and:

- not a peer of the node's own mesh (huddle nodes of the group share posts on the mesh's
  faster path, docs/protocol.md 15);
- only an endpoint ``tcp://IP:PORT`` on the ZRE interface's network (as the ZRE driver
  takes a HELLO's endpoint): a header cannot send the node elsewhere.

A session is huddle's own sync client (posts/sync.py) carried by :mod:`huddle.hydra.fetch`.
Hydra has no NEWS: a session that went through every post runs again ``resync`` seconds
later; one that failed or left posts behind (a cut, a refusal for now), ``posts.interval``
seconds later, from where its files stop.  The range a peer's sessions went through is
kept in memory.  A peer that leaves ZRE ends its session (its partial files stay).
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import itertools
import logging
import re
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final

import zmq
import zmq.asyncio

from ..errors import DecodeError
from ..posts.model import Range
from ..posts.service import PostService
from ..posts.sync import Client, ClientAction, Complete, Discard, Finished, Release, SendMsg, WriteChunk
from ..zre.driver import ZreDriver
from ..zre.peer import PeerState
from .fetch import Carrier
from .wire import HYDRA_HEADER, decode, encode

__all__ = ["RESYNC", "HydraFetcher"]

log = logging.getLogger("huddle.hydra")

_ENDPOINT = re.compile(r"tcp://(\d{1,3}(?:\.\d{1,3}){3}):(\d{1,5})\Z")
RESYNC: Final = 10.0  # seconds between two sessions with a peer that went through everything


@dataclass(slots=True)
class _Peer:
    endpoint: str
    task: asyncio.Task[None] | None = None
    due: float = 0.0  # when its next session may start
    range: Range | None = None


class HydraFetcher:
    """The node's Hydra client (the module docstring)."""

    def __init__(self, service: PostService, zre: ZreDriver, identity: str, nickname: str,
                 mesh_peers: Callable[[], Iterable[bytes]], *, resync: float = RESYNC,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.service, self.zre, self.identity, self.nickname = service, zre, identity, nickname
        self._mesh_peers, self.resync, self._clock = mesh_peers, resync, clock
        self.peers: dict[bytes, _Peer] = {}
        self.counters: Counter[str] = Counter()
        self._tokens = itertools.count(1 << 40)  # apart from the mesh sessions' (they never meet)
        self._ctx = zmq.asyncio.Context()

    def close(self) -> None:
        for peer in self.peers.values():
            if peer.task is not None:
                peer.task.cancel()
        self._ctx.destroy(linger=0)

    async def run(self) -> None:
        """Once a second: start the sessions due, end those of peers gone."""
        while True:
            self.step(self._clock())
            await asyncio.sleep(1.0)

    def step(self, now: float) -> None:
        ready = {uuid: link.peer for uuid, link in self.zre.links.items()
                 if link.peer.state in (PeerState.READY, PeerState.EVASIVE) and HYDRA_HEADER in link.peer.headers}
        mesh = set(self._mesh_peers())
        for uuid in list(self.peers):
            if uuid not in ready or uuid in mesh:
                task = self.peers.pop(uuid).task
                if task is not None:
                    task.cancel()
        for uuid, zpeer in ready.items():
            if uuid in mesh:
                continue
            peer = self.peers.get(uuid)
            if peer is None:
                endpoint = zpeer.headers[HYDRA_HEADER]
                if not self._acceptable(endpoint):
                    self.counters["endpoint_refused"] += 1
                    continue
                peer = self.peers[uuid] = _Peer(endpoint)
            if (peer.task is None or peer.task.done()) and now >= peer.due:
                peer.task = asyncio.ensure_future(self._session(uuid, peer))

    def _acceptable(self, endpoint: str) -> bool:
        m = _ENDPOINT.match(endpoint)
        if m is None or not 0 < int(m[2]) <= 65535:
            return False
        try:
            return ipaddress.IPv4Address(m[1]) in self.zre.interface.network
        except ValueError:
            return False

    async def _session(self, uuid: bytes, peer: _Peer) -> None:
        s, store = self.service.settings, self.service.store
        client = Client(store, self.identity, self.nickname, range=peer.range, policy=s.policy,
                        chunk_size=s.chunk_size, window=s.window, timeout=s.timeout, retry_after=s.retry_after,
                        tokens=self._tokens, limits=self.service.limits, require_seal=s.require_seal)
        carrier = Carrier()
        dealer = self._ctx.socket(zmq.DEALER)
        dealer.setsockopt(zmq.LINGER, 0)
        dealer.setsockopt(zmq.MAXMSGSIZE, s.chunk_size + 256 * 1024)  # a CHUNK-OK, or a META-OK's subject
        dealer.connect(peer.endpoint)
        tx: zmq.Socket[bytes] = zmq.Socket.shadow(dealer.underlying)  # sends that fail at once, not in a future
        self.counters["sessions"] += 1
        finished: Finished | None = None
        try:
            finished = self._carry(client.start(self._clock()), tx, carrier)
            while finished is None:
                if await dealer.poll(250):
                    frames = await dealer.recv_multipart()
                    try:
                        if len(frames) != 1:
                            raise DecodeError(f"a Hydra message is one frame, not {len(frames)}")
                        msg = carrier.into(decode(frames[0]))
                    except DecodeError as exc:
                        self.counters["malformed_in"] += 1
                        log.debug("a malformed Hydra message from %s: %s", peer.endpoint, exc)
                        continue
                    if msg is not None:
                        finished = self._carry(client.receive(msg, self._clock()), tx, carrier)
                        continue
                finished = self._carry(client.tick(self._clock()), tx, carrier)
        except OSError as exc:  # the disk failed: stop, keep what is written
            log.error("cannot store posts fetched from Hydra node %s: %s", peer.endpoint, exc)
            self._carry(client.stop(f"cannot write here: {exc.strerror or exc}"), tx, carrier)
        finally:
            if finished is None:  # cancelled, or the disk failed: the claim goes, the partial file stays
                with contextlib.suppress(OSError):
                    self._carry(client.abort("stopped"), tx, carrier)
            dealer.close(linger=0)
        self._finished(peer, finished)

    def _finished(self, peer: _Peer, finished: Finished | None) -> None:
        now = self._clock()
        if finished is not None and finished.complete:
            peer.range, peer.due = finished.range, now + self.resync
        else:
            self.counters["sessions_failed"] += 1
            if finished is not None:
                log.info("Hydra sync with %s ended: %s", peer.endpoint, finished.reason)
            peer.due = now + self.service.settings.interval

    def _carry(self, actions: list[ClientAction], dealer: zmq.Socket[bytes], carrier: Carrier) -> Finished | None:
        store, done = self.service.store, None
        for a in actions:
            if isinstance(a, SendMsg):
                try:
                    dealer.send(encode(carrier.out(a.msg)), zmq.NOBLOCK)
                except zmq.Again:  # not connected yet, or its queue is full: asked again later
                    carrier.lost()
                    self.counters["send_dropped"] += 1
            elif isinstance(a, WriteChunk):
                store.write_chunk(a.pid, a.offset, a.data)
                self.counters["octets_fetched"] += len(a.data)
            elif isinstance(a, Complete):
                if store.complete(a.post):
                    self.counters["posts_fetched"] += 1
                    self.service.added(a.post)  # the event, and NEWS to the mesh's peers
                elif not store.holds(a.post.id):
                    self.counters["bad_content"] += 1
            elif isinstance(a, Release):
                store.release(a.pid)
            elif isinstance(a, Discard):
                store.discard(a.pid)
            elif isinstance(a, Finished):
                done = a
        return done
