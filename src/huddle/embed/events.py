"""What a :class:`~huddle.embed.peer.Peer` hears, as Zyre names it (zyre_event.h: ENTER, EXIT,
JOIN, LEAVE, WHISPER, SHOUT, EVASIVE), and the bounds of what it says.  Pure: no I/O."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from types import MappingProxyType
from typing import Final

from ..errors import TooLarge

__all__ = ["MAX_FRAME", "MAX_FRAMES", "EventType", "Known", "PeerEvent", "Roster", "check_content"]

# What one SHOUT or WHISPER may hold, on either side: ZRE's bounds (zre/codec.py Bounds), what a
# ZRE peer's ROUTER takes; the mesh side keeps the same so a program moves between them unchanged.
MAX_FRAMES: Final = 16
MAX_FRAME: Final = 256 * 1024 - 1024  # a content frame; the rest of the message's room is its header


class EventType(Enum):
    ENTER = "ENTER"  # a peer entered: its name and headers are known
    EXIT = "EXIT"  # a peer left, or was lost
    JOIN = "JOIN"  # a peer joined a group
    LEAVE = "LEAVE"  # a peer left a group
    SHOUT = "SHOUT"  # a peer SHOUTed to a group this peer is in
    WHISPER = "WHISPER"  # a peer WHISPERed to this peer
    EVASIVE = "EVASIVE"  # a peer went silent (it may come back, or EXIT)


@dataclass(frozen=True, slots=True)
class PeerEvent:
    """One event: its type, the peer's id (32 hex digits) and name, and what the type carries:
    ``group`` (JOIN, LEAVE, SHOUT), ``frames`` (SHOUT, WHISPER), ``headers`` (ENTER)."""

    type: EventType
    peer: str
    name: str
    group: str = ""
    frames: tuple[bytes, ...] = ()
    headers: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def data(self) -> bytes:
        """The first frame of a SHOUT or WHISPER (b"" for the other types)."""
        return self.frames[0] if self.frames else b""


def check_content(data: bytes | str | list[bytes] | tuple[bytes, ...]) -> tuple[bytes, ...]:
    """A SHOUT's or WHISPER's content as frames (text is UTF-8), within the bounds; TooLarge if not."""
    if isinstance(data, str):
        data = data.encode()
    frames = (data,) if isinstance(data, bytes) else tuple(data)
    if not 1 <= len(frames) <= MAX_FRAMES:
        raise TooLarge(f"a message holds 1 to {MAX_FRAMES} frames, not {len(frames)}")
    for frame in frames:
        if len(frame) > MAX_FRAME:
            raise TooLarge(f"a frame of {len(frame)} octets; at most {MAX_FRAME} (a ZRE peer takes no more)")
    return frames


@dataclass(slots=True)
class Known:
    """A peer that entered: its name, groups and headers, and where it is reached (``tcp://IP:PORT``)."""

    name: str
    groups: set[str]
    headers: dict[str, str]
    address: str = ""


class Roster:
    """The peers that entered, and the events their moves make, the same on either side (mesh, ZRE).

    A peer enters once (ENTER, then a JOIN per group its greeting named, as Zyre reports
    them); a move of a peer that has not entered, or a JOIN to a group it is in, makes no
    event.  ``deliver`` is given each event; ``mine`` says which groups this peer is in (a
    SHOUT to another group makes none)."""

    def __init__(self, deliver: Callable[[PeerEvent], None], mine: Callable[[], Iterable[str]]) -> None:
        self.known: dict[str, Known] = {}
        self._deliver, self._mine = deliver, mine

    def _say(self, kind: EventType, peer: str, **what: object) -> None:
        self._deliver(PeerEvent(kind, peer, self.known[peer].name, **what))  # type: ignore[arg-type]

    def enter(self, peer: str, name: str, groups: Iterable[str], headers: Mapping[str, str], address: str = "") -> bool:
        if peer in self.known:
            return False
        self.known[peer] = Known(name, set(), dict(headers), address)
        self._say(EventType.ENTER, peer, headers=MappingProxyType(dict(headers)))
        for group in groups:
            self.join(peer, group)
        return True

    def join(self, peer: str, group: str) -> None:
        known = self.known.get(peer)
        if known is not None and group not in known.groups:
            known.groups.add(group)
            self._say(EventType.JOIN, peer, group=group)

    def leave(self, peer: str, group: str) -> None:
        known = self.known.get(peer)
        if known is not None and group in known.groups:
            known.groups.discard(group)
            self._say(EventType.LEAVE, peer, group=group)

    def exit(self, peer: str) -> None:
        if peer in self.known:
            self._say(EventType.EXIT, peer)
            del self.known[peer]

    def evasive(self, peer: str) -> None:
        if peer in self.known:
            self._say(EventType.EVASIVE, peer)

    def shout(self, peer: str, group: str, frames: tuple[bytes, ...]) -> bool:
        if peer not in self.known or group not in set(self._mine()):
            return False
        self._say(EventType.SHOUT, peer, group=group, frames=frames)
        return True

    def whisper(self, peer: str, frames: tuple[bytes, ...]) -> bool:
        if peer not in self.known:
            return False
        self._say(EventType.WHISPER, peer, frames=frames)
        return True

    def members(self, group: str) -> list[str]:
        """The peers that entered and are in ``group``."""
        return [peer for peer, known in self.known.items() if group in known.groups]
