"""``huddle.Peer``: a Zyre-style peer in-process, asyncio-native (docs/peer-api.md).

    async with Peer("alice", config=config) as peer:   # or Peer("alice", zre=True)
        peer.join("chat")
        await peer.shout("chat", b"hello")
        async for event in peer.events():               # ENTER, JOIN, SHOUT, WHISPER, ...
            ...

Two sides, one object: on huddle's mesh (the default) a :class:`~huddle.node.Node` runs in
the same event loop, with the Peer's feature (:mod:`huddle.embed.mesh`) beside the default
ones, secured or open as its ``config`` says; with ``zre=True`` the zre package's driver
(:mod:`huddle.embed.zre`) speaks ZRE to Zyre and pyre peers and no node runs.  Either way
the events and the questions (``peers()``, ``peer_groups()``, ``peer_header()``) are the
:class:`~huddle.embed.events.Roster`'s, so a program moves between the two unchanged.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from types import TracebackType
from typing import TYPE_CHECKING, Final

from ..config import NodeConfig
from ..errors import LocalProtocolError, NoSuchPeer, NotRunning
from ..zre.codec import MsgId, ZreMessage
from ..zre.section import DEFAULT_ZRE_PORT
from .events import Known, PeerEvent, Roster, check_content
from .mesh import PeerFeature
from .zre import ZreSide

if TYPE_CHECKING:  # the node (pyzmq, aiohttp, zeroconf) loads as the mesh side starts
    from ..node import Node

__all__ = ["Peer"]

EVENTS: Final = 10_000  # events kept for a program that does not read them; more are counted and dropped
MAX_GROUP: Final = 255  # octets of a group's name (ZRE's string field)


class Peer:
    """One peer (the module docstring).  ``config``: the in-process node's settings on the mesh
    side (its group, its group secret or ``open=True``, its data directory, its interface); the
    Peer's ``name`` replaces the config's.  With ``zre=True``: ZRE beacons on UDP ``zre_port``,
    on ``interface`` (a name or an address; None: the default route's)."""

    def __init__(self, name: str, *, config: NodeConfig | None = None, zre: bool = False,
                 zre_port: int = DEFAULT_ZRE_PORT, interface: str | None = None, events: int = EVENTS) -> None:
        if not zre and config is None:
            raise LocalProtocolError("a Peer on huddle's mesh needs its node's config (its group, its secret or "
                                     "open=True, its data directory); or zre=True")
        self.name = name
        self._config = None if config is None else config.with_overrides(name=name)
        self._zre, self._zre_port, self._interface = zre, zre_port, interface
        self._headers: dict[str, str] = {}
        self._groups: list[str] = []
        self._events: asyncio.Queue[PeerEvent] = asyncio.Queue(maxsize=events)
        self.dropped = 0  # events not kept: the program did not read them
        self.roster = Roster(self._deliver, lambda: self._groups)
        self._side: ZreSide | None = None
        self._feature: PeerFeature | None = None
        self._node_task: asyncio.Task[None] | None = None
        self.node: Node | None = None  # the in-process node, on the mesh side once started
        self._uuid = ""

    # ---- start and stop ----

    def set_header(self, name: str, value: str) -> None:
        """A header its HELLO carries (Zyre's ``set_header``): set before :meth:`start`."""
        if self.started:
            raise LocalProtocolError("headers are set before the Peer starts (its HELLO carries them)")
        if not 0 < len(name.encode()) <= 255:
            raise ValueError("a header's name is 1 to 255 octets")
        self._headers[name] = value

    @property
    def started(self) -> bool:
        return self._side is not None or self._feature is not None

    async def start(self) -> None:
        if self.started:
            raise LocalProtocolError("the Peer is started already")
        if self._zre:
            side = ZreSide(name=self.name, headers=self._headers, groups=list(self._groups),
                           interface=self._interface, port=self._zre_port, roster=self.roster)
            await side.start()
            self._side, self._uuid = side, side.uuid.hex()
            return
        from ..features import default_features  # noqa: PLC0415 - the mesh side alone runs a node
        from ..node import Node  # noqa: PLC0415

        assert self._config is not None
        feature = PeerFeature(self.name, self._headers, self._groups, self.roster)
        node = Node(self._config, features=[*default_features(), feature])
        task = asyncio.create_task(node.run())
        ready = asyncio.create_task(node.wait_ready())
        await asyncio.wait({task, ready}, return_when=asyncio.FIRST_COMPLETED)
        if not ready.done():  # the node ended before it was ready: its error, raised here
            ready.cancel()
            await task
            raise NotRunning("the Peer's node stopped before it was ready")
        assert node.uuid is not None
        self._feature, self._node_task, self._uuid, self.node = feature, task, node.uuid.hex(), node

    async def stop(self) -> None:
        """Leave (a leaving beacon on ZRE, GBYE on the mesh) and close everything."""
        if self._side is not None:
            await self._side.stop()
            self._side = None
        if self._node_task is not None and self.node is not None:
            self.node.stop()
            await self._node_task
            self._node_task, self._feature, self.node = None, None, None
        self.roster.known.clear()  # no peer is known to a stopped Peer (it said it was leaving)

    async def __aenter__(self) -> Peer:
        await self.start()
        return self

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.stop()

    @property
    def endpoint(self) -> str:
        """Where its peers reach it (``tcp://IP:PORT``): its node's mesh endpoint, or its ZRE ROUTER's."""
        if self._side is not None:
            return self._side.driver.endpoint
        if self.node is not None:
            return self.node.mesh.endpoint
        raise NotRunning("the Peer is not started")

    @property
    def counters(self) -> Counter[str]:
        """What it refused and dropped: its feature's counters on the mesh, the ZRE driver's on ZRE."""
        if self._side is not None:
            return self._side.driver.counters
        return Counter() if self._feature is None else self._feature.counters

    @property
    def uuid(self) -> str:
        """Its id (32 hex digits): the node's on the mesh, a fresh UUID each start on ZRE."""
        if not self._uuid:
            raise NotRunning("the Peer is not started")
        return self._uuid

    # ---- groups ----

    def join(self, group: str) -> None:
        """Join ``group``: its peers' SHOUTs to it reach this Peer; a JOIN to every peer."""
        if not 0 < len(group.encode()) <= MAX_GROUP:
            raise ValueError(f"a group's name is 1 to {MAX_GROUP} octets")
        self._change(group, True)

    def leave(self, group: str) -> None:
        self._change(group, False)

    def _change(self, group: str, join: bool) -> None:
        if self._feature is not None:
            self._feature.change(group, join)  # it changes the list it was given, this Peer's
            return
        if self._side is not None:
            (self._side.driver.join if join else self._side.driver.leave)(group)
        if join and group not in self._groups:
            self._groups.append(group)
        elif not join and group in self._groups:
            self._groups.remove(group)

    def own_groups(self) -> list[str]:
        return list(self._groups)

    # ---- saying ----

    async def shout(self, group: str, data: bytes | str | list[bytes]) -> int:
        """SHOUT to every peer in ``group``; how many it went to.  At most 16 frames of at most
        255 KiB each (TooLarge, nothing sent)."""
        frames = check_content(data)
        if self._side is not None:
            return self._side.driver.shout(group, list(frames))
        return await self._mesh().send(self.roster.members(group), ZreMessage(MsgId.SHOUT, group=group,
                                                                              content=frames))

    async def whisper(self, peer: str, data: bytes | str | list[bytes]) -> None:
        """WHISPER to one peer that entered (its id, as the events name it); NoSuchPeer if none has that id."""
        frames = check_content(data)
        if peer not in self.roster.known:
            raise NoSuchPeer(f"no peer {peer!r} has entered (peers() lists those that have)")
        if self._side is not None:
            if not self._side.driver.whisper(bytes.fromhex(peer), list(frames)):
                raise NoSuchPeer(f"peer {peer!r} is gone")
            return
        await self._mesh().send([peer], ZreMessage(MsgId.WHISPER, content=frames))

    def _mesh(self) -> PeerFeature:
        if self._feature is None:
            raise NotRunning("the Peer is not started")
        return self._feature

    # ---- hearing ----

    def _deliver(self, event: PeerEvent) -> None:
        try:
            self._events.put_nowait(event)
        except asyncio.QueueFull:
            self.dropped += 1

    @property
    def waiting(self) -> int:
        """Events kept and not read yet."""
        return self._events.qsize()

    async def recv(self) -> PeerEvent:
        """The next event (waits for one)."""
        return await self._events.get()

    async def events(self) -> AsyncIterator[PeerEvent]:
        """Every event as it comes, until the caller stops iterating."""
        while True:
            yield await self._events.get()

    def __aiter__(self) -> AsyncIterator[PeerEvent]:
        return self.events()

    # ---- questions ----

    def peers(self) -> list[str]:
        """The ids of the peers that entered."""
        return list(self.roster.known)

    def peers_by_group(self, group: str) -> list[str]:
        return self.roster.members(group)

    def peer_groups(self) -> list[str]:
        """Every group a peer that entered is in."""
        return sorted({g for known in self.roster.known.values() for g in known.groups})

    def peer_name(self, peer: str) -> str:
        return self._known(peer).name

    def peer_address(self, peer: str) -> str:
        """Where it is reached (``tcp://IP:PORT``): its mesh endpoint, or its ZRE ROUTER's."""
        return self._known(peer).address

    def peer_header(self, peer: str, name: str) -> str | None:
        """A header its HELLO carried (None: not that one); NoSuchPeer if it has not entered."""
        return self._known(peer).headers.get(name)

    def _known(self, peer: str) -> Known:
        known = self.roster.known.get(peer)
        if known is None:
            raise NoSuchPeer(f"no peer {peer!r} has entered")
        return known

