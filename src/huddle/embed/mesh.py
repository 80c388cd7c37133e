"""A Peer on huddle's own mesh: the feature it adds to its in-process node (docs/peer-api.md).

The node's mesh is the Peer's network: every member of the huddle group is a peer it may
meet, and ZRE-style groups are attributes of the members, not meshes of their own.  As a
member is admitted (``PeerJoined``) this feature greets it with a HELLO (its name, groups and
headers); its HELLO makes it enter (:class:`~huddle.embed.events.Roster`).  JOIN and LEAVE go
to every member greeted, a SHOUT to each member in the group, a WHISPER to one: addressed
messages all (:mod:`huddle.embed.wire`), in order and exactly once on the mesh's delivery,
never in the log.  A member's session ending (``PeerLeft``) is its EXIT; going SUSPECT
(``PeerStateChanged``) its EVASIVE.  A HELLO from a member that entered already means it lost
this node on its side alone: it is greeted again (once a session).

Everything goes out through one queue and one task, so a member's HELLO always goes before
what follows it; a SHOUT's or WHISPER's caller waits until its messages are queued on the
mesh (or refused: the error is raised to it).  What this node is handed that is not a Peer's
payload, or comes from a member that has not entered, is counted and dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import Sequence
from typing import Final

from ..errors import DecodeError, HuddleError, NotRunning
from ..ids import NodeId
from ..ports import FeatureBase, FeatureHost, Spawn, Subscriber
from ..protocol.events import MessageReceived, PeerJoined, PeerLeft, PeerStateChanged
from ..zre.codec import MsgId, ZreMessage
from .events import Roster
from .wire import PREFIX, pack, unpack

__all__ = ["PeerFeature"]

log = logging.getLogger("huddle.embed")

SEND_WAIT: Final = 10.0  # seconds a message waits for room in a member's full buffer before it is refused

# One message to send: to whom, what (None: this node's HELLO, made as it goes), who waits for it.
_Item = tuple[NodeId, ZreMessage | None, asyncio.Future[None] | None]


class PeerFeature(FeatureBase):
    """The Peer's side of its node (the module docstring)."""

    name: Final = "peer"

    def __init__(self, peer_name: str, headers: dict[str, str], groups: list[str], roster: Roster) -> None:
        self.peer_name, self.headers, self.groups, self.roster = peer_name, headers, groups, roster
        self.counters: Counter[str] = Counter()
        self._greeted: set[NodeId] = set()  # members sent this node's HELLO: JOIN and LEAVE go to them
        self._answered: set[NodeId] = set()  # members greeted again after a HELLO of theirs, this session
        self._endpoints: dict[NodeId, str] = {}  # each admitted member's mesh endpoint
        self._out: asyncio.Queue[_Item] = asyncio.Queue()
        self._host: FeatureHost | None = None

    async def start(self, stack: contextlib.AsyncExitStack, spawn: Spawn, host: FeatureHost) -> None:
        self._host = host
        stack.callback(self._closed)
        spawn(self._sender())

    def subscriptions(self) -> Sequence[tuple[tuple[type, ...], Subscriber]]:
        return [((PeerJoined,), self._admitted), ((PeerLeft,), self._gone), ((PeerStateChanged,), self._state),
                ((MessageReceived,), self._received)]

    # ---- what the Peer says ----

    def change(self, group: str, join: bool) -> None:
        """Join or leave ``group``: a JOIN or LEAVE to every member greeted (the HELLOs to come name it or not)."""
        if (group in self.groups) == join:
            return
        if join:
            self.groups.append(group)
        else:
            self.groups.remove(group)
        msg = ZreMessage(MsgId.JOIN if join else MsgId.LEAVE, group=group)
        for member in self._greeted:
            self._out.put_nowait((member, msg, None))

    async def send(self, to: list[str], msg: ZreMessage) -> int:
        """Send ``msg`` to each of ``to`` (ids), waiting until each is queued on the mesh; raises
        what refused one (the others went).  Returns how many it went to."""
        if self._host is None:
            raise NotRunning("the Peer is not started")
        loop = asyncio.get_running_loop()
        waits = []
        for peer in to:
            done: asyncio.Future[None] = loop.create_future()
            self._out.put_nowait((NodeId.from_hex(peer), msg, done))
            waits.append(done)
        results = await asyncio.gather(*waits, return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result
        return len(waits)

    async def _sender(self) -> None:
        host = self._host
        assert host is not None
        while True:
            member, msg, done = await self._out.get()
            if msg is None:
                msg = ZreMessage(MsgId.HELLO, groups=tuple(self.groups), name=self.peer_name,
                                 headers=tuple(self.headers.items()))
                self._greeted.add(member)
            try:
                await host.send_to_wait(member, pack(msg), SEND_WAIT)
            except HuddleError as exc:
                self.counters["send_refused"] += 1
                if done is None:
                    log.debug("a Peer's %s to %s was not sent: %s", msg.id.name, member.short, exc)
                elif not done.done():
                    done.set_exception(exc)
                continue
            if done is not None and not done.done():
                done.set_result(None)

    def _closed(self) -> None:
        """The node stops: whoever waits for a message not sent is told."""
        while not self._out.empty():
            _, _, done = self._out.get_nowait()
            if done is not None and not done.done():
                done.set_exception(NotRunning("the Peer stopped before the message was sent"))

    # ---- what the mesh says ----

    def _admitted(self, event: PeerJoined) -> bool:
        self._endpoints[event.peer] = event.endpoint
        self._out.put_nowait((event.peer, None, None))  # this node's HELLO, made as it goes
        return False

    def _gone(self, event: PeerLeft) -> bool:
        self._greeted.discard(event.peer)
        self._answered.discard(event.peer)
        self._endpoints.pop(event.peer, None)
        self.roster.exit(str(event.peer))
        return False

    def _state(self, event: PeerStateChanged) -> bool:
        if event.state == "suspect":
            self.roster.evasive(str(event.peer))
        return False

    def _received(self, event: MessageReceived) -> bool:
        """A Peer's payload is taken here (True: the API's stream does not see it); others pass on."""
        if not event.payload.startswith(PREFIX):
            return False
        try:
            msg = unpack(event.payload)
        except DecodeError as exc:
            self.counters["malformed"] += 1
            log.debug("a Peer's payload from %s refused: %s", event.peer.short, exc)
            return True
        peer, roster = str(event.peer), self.roster
        if msg.id is MsgId.HELLO:
            if not roster.enter(peer, msg.name, msg.groups, dict(msg.headers), self._endpoints.get(event.peer, "")):
                # It greets again: it lost this node (its session ended on its side alone) and waits
                # for this node's HELLO to see it enter again.
                self.counters["hello_again"] += 1
                if event.peer not in self._answered:  # once a session: two such answers never ping-pong
                    self._answered.add(event.peer)
                    self._out.put_nowait((event.peer, None, None))
            return True
        if peer not in roster.known:
            self.counters["unknown_peer"] += 1
        elif msg.id is MsgId.JOIN:
            roster.join(peer, msg.group)
        elif msg.id is MsgId.LEAVE:
            roster.leave(peer, msg.group)
        elif msg.id is MsgId.SHOUT:
            if not roster.shout(peer, msg.group, msg.content):
                self.counters["shout_other_group"] += 1
        else:
            roster.whisper(peer, msg.content)
        return True

    def facts(self) -> dict[str, object] | None:
        return {"groups": len(self.groups), "peers": len(self.roster.known)}
