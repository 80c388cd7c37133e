"""A Peer on a ZRE network (``Peer(..., zre=True)``): the zre package's driver, in-process.

Zyre's and pyre's peers are this Peer's peers: it beacons on UDP (``port``, default 5670)
to its interface's broadcast address and speaks ZRE as docs/zre.md says, with as many
groups as it joins (JOIN and LEAVE to every peer, its status one more each time).  No huddle
node runs: nothing is recorded, no data directory is used, and the Peer's id is a fresh
random UUID each start, as Zyre's is.  The driver's moves become the Roster's events.
"""

from __future__ import annotations

import asyncio
import contextlib

from ..ids import NodeId
from ..zre.driver import ZreDriver
from ..zre.peer import ZrePeer
from .events import Roster

__all__ = ["ZreSide"]


class ZreSide:
    """The driver, started and stopped, its peers' moves told to the roster."""

    def __init__(self, *, name: str, headers: dict[str, str], groups: list[str], interface: str | None, port: int,
                 roster: Roster) -> None:
        self.roster, self.uuid = roster, NodeId.random()
        self.driver = ZreDriver(uuid=bytes(self.uuid), name=name, group="", headers=headers, interface=interface,
                                port=port, on_shout=self._shouted, on_whisper=self._whispered, on_peer=self._moved)
        for group in groups:
            self.driver.join(group)  # no peer yet: its HELLOs will name them
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        try:
            await self.driver.start()
        except BaseException:
            self.driver.close()  # what it opened (its ROUTER, before the beacon port) is closed, not left to the GC
            raise
        self._task = asyncio.create_task(self.driver.run())

    async def stop(self) -> None:
        """A leaving beacon, then everything closed."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        self.driver.close()

    def _moved(self, peer: ZrePeer, what: str, group: str) -> None:
        uuid, roster = peer.uuid.hex(), self.roster
        if what == "enter":
            roster.enter(uuid, peer.name, sorted(peer.groups), peer.headers, peer.endpoint)
        elif what == "join":
            roster.join(uuid, group)
        elif what == "leave":
            roster.leave(uuid, group)
        elif what == "evasive":
            roster.evasive(uuid)
        elif what == "exit":
            roster.exit(uuid)

    def _shouted(self, peer: ZrePeer, group: str, content: tuple[bytes, ...]) -> None:
        if not self.roster.shout(peer.uuid.hex(), group, content):
            self.driver.counters["shout_other_group"] += 1

    def _whispered(self, peer: ZrePeer, content: tuple[bytes, ...]) -> None:
        self.roster.whisper(peer.uuid.hex(), content)
