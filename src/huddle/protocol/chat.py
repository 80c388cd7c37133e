"""CHAT's fast paths (docs/architecture.md, "The CHAT fast path"): the commonest message,
decided on the raw frames, in and out, with no decoded ``Chat``, ``Notify`` or ``Send``.

What they take is counted exactly as the mesh's general path counts it; what they do not
take they leave untouched, for the general path to decide.  ``tests/test_chat_fast_path.py``
checks both paths decide, count and refuse alike.
"""

from __future__ import annotations

from ..errors import NoSuchPeer
from ..ids import NodeId
from ..wire import MAX_BODY, TAG_CHAT, Chat, encode_parts
from .clock import Clock
from .events import ChatReceived
from .parts import Stats
from .session import Phase
from .sessions import Sessions

__all__ = ["Chats"]


class Chats:
    """The CHAT fast paths of one mesh, over its session table."""

    def __init__(self, uuid: NodeId, sessions: Sessions, stats: Stats, clock: Clock) -> None:
        self.uuid = uuid
        self._sessions = sessions.by_uuid
        self._last_frame = sessions.last_frame
        self._counts = sessions.counts
        self.stats = stats
        self._clock = clock
        self.closed = False  # the mesh left: nothing is taken

    def receive(self, frames: list[bytes], now: float, source: str = "") -> ChatReceived | None:
        """An ALIVE peer's CHAT from its session's address (``source``, as ``Mesh.receive``
        takes it) whose body is UTF-8 within MAX_BODY: counted exactly as the general path
        counts it (received, chats, the peer heard, its messages and octets), and its event
        returned, for the caller to publish.

        None: this path does not take the message and has changed and counted nothing; the
        general path decides (and counts any refusal) as for every message: not a CHAT, a
        closed mesh, a sender with no session or one not ALIVE (a handshake, or a SUSPECT
        peer, which the general path makes ALIVE again), another address than its session's,
        a body too long or not UTF-8."""
        if len(frames) != 3 or frames[1] != TAG_CHAT or self.closed:
            return None
        s = self._sessions.get(frames[0])  # type: ignore[call-overload]
        if s is None or s.phase is not Phase.ALIVE or (source and s.source != source):
            return None
        body = frames[2]
        if len(body) > MAX_BODY:
            return None
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            return None
        stats = self.stats
        stats.received += 1
        stats.chats_received += 1
        uuid = s.uuid
        s.last_heard = self._last_frame[uuid] = now  # heard, for an ALIVE peer
        s.answered = True
        counts = self._counts[uuid]
        counts[0] += 1
        counts[1] += len(body)
        return ChatReceived(uuid, s.name, text, now + self._clock.offset)

    def frames(self, text: str, to: NodeId | None = None) -> tuple[list[bytes], list[int]]:
        """What ``Mesh.chat`` decides, as the frames to send (type and body, encoded once) and
        the connections to send them on (``to``'s, or every admitted peer's), counted as sent,
        with no ``Chat`` or ``Send`` queued: the caller hands them to the transport.  Raises
        NoSuchPeer (a LocalProtocolError) as ``Mesh.chat`` does (nothing counted)."""
        if type(text) is str and len(text) <= MAX_BODY and text.isascii():  # Chat's own fast check
            frames = [TAG_CHAT, text.encode("ascii")]
        else:
            frames = encode_parts(Chat(sender=self.uuid, text=text))  # checked whole, as chat() does
        conns = self.conns(to)
        self.stats.sent += len(conns)
        return frames, conns

    def conns(self, to: NodeId | None) -> list[int]:
        """The connections a chat line goes on: ``to``'s, or every admitted peer's."""
        if to is None:
            return [s.conn for s in self._sessions.values() if s.admitted]
        s = self._sessions.get(to)
        if s is None or not s.admitted:
            raise NoSuchPeer(f"no alive peer {to}")
        return [s.conn]
