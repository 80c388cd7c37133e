"""Fetching a Hydra node's posts with huddle's own sync client, sans I/O (docs/hydra.md).

huddle's :class:`~huddle.posts.sync.Client` runs the session (newest first, seals and limits
checked, chunks from where a partial file stops, asked again when they stop coming); this
module carries its messages over Hydra's wire and back.  Its FETCH goes out as Hydra's CHUNK
(offset, octets); Hydra's server answers each CHUNK with a CHUNK-OK, in order, on the one
connection, so :class:`Carrier` pairs each CHUNK-OK with the oldest CHUNK not yet answered and
gives the client the CONTENT of that FETCH's token.  Post ids go out in uppercase (Hydra's
server looks them up as it wrote them) and come in lowercased.  Its HELLO carries huddle's
mark (wire.HUDDLE_MARK): a huddle node's server then serves its posts as huddle holds them.
"""

from __future__ import annotations

from collections import deque

from ..errors import DecodeError
from ..posts.codec import (
    Chunk,
    Content,
    Error,
    Fetch,
    Goodbye,
    GoodbyeOk,
    Hello,
    HelloOk,
    HydraMessage,
    Meta,
    MetaOk,
    NextEmpty,
    NextNewer,
    NextOk,
    NextOlder,
)
from ..posts.model import HEAD, TAIL
from .wire import SEAL_OCTETS, HydraMsg, MsgId

__all__ = ["Carrier"]


def _ident(ident: str) -> str:
    return ident if ident in (HEAD, TAIL) else ident.upper()


def _seal(seal: bytes) -> tuple[bytes, bytes, bytes, bytes]:
    if not seal:
        return b"", b"", b"", b""
    a, b, c = SEAL_OCTETS[0], SEAL_OCTETS[0] + SEAL_OCTETS[1], SEAL_OCTETS[0] + SEAL_OCTETS[1] + SEAL_OCTETS[2]
    return seal[:a], seal[a:b], seal[b:c], seal[c:]


class Carrier:
    """One session's messages between huddle's sync client and Hydra's wire."""

    def __init__(self) -> None:
        self._asked: deque[int] = deque()  # the tokens of the CHUNKs sent and not yet answered, oldest first

    def out(self, msg: HydraMessage) -> HydraMsg:
        """A message of huddle's client as the Hydra message to send."""
        if isinstance(msg, Hello):
            return HydraMsg(MsgId.HELLO, identity=msg.identity, nickname=msg.nickname[:255], huddle=True)
        if isinstance(msg, NextOlder):
            return HydraMsg(MsgId.NEXT_OLDER, ident=_ident(msg.ident))
        if isinstance(msg, NextNewer):
            return HydraMsg(MsgId.NEXT_NEWER, ident=_ident(msg.ident))
        if isinstance(msg, Meta):
            return HydraMsg(MsgId.META)
        if isinstance(msg, Fetch):
            self._asked.append(msg.token)
            return HydraMsg(MsgId.CHUNK, offset=msg.offset, octets=msg.octets)
        if isinstance(msg, Chunk):
            return HydraMsg(MsgId.CHUNK, offset=msg.offset, octets=msg.octets)
        if isinstance(msg, Goodbye):
            return HydraMsg(MsgId.GOODBYE)
        raise ValueError(f"{type(msg).__name__} is not a client's command")

    def lost(self) -> None:
        """The CHUNKs in flight will not be answered (the message carrying one was not sent)."""
        self._asked.clear()

    def into(self, msg: HydraMsg) -> HydraMessage | None:
        """A Hydra server's message as huddle's client takes it; None: nothing for it (PING-OK).
        DecodeError: a message a server does not send."""
        match msg.id:
            case MsgId.HELLO_OK:
                return HelloOk(msg.identity, msg.nickname)
            case MsgId.NEXT_OK:
                return NextOk(msg.ident.lower())
            case MsgId.NEXT_EMPTY:
                return NextEmpty()
            case MsgId.META_OK:
                return MetaOk(msg.subject, msg.timestamp, msg.parent_id, msg.digest, msg.mime_type, msg.content_size,
                              *_seal(msg.seal))
            case MsgId.CHUNK_OK:
                # The answer to the oldest CHUNK in flight; one nobody asked for answers token 0,
                # which no FETCH has (the client refuses it as stale).
                token = self._asked.popleft() if self._asked else 0
                return Content(token, msg.offset, msg.content)
            case MsgId.GOODBYE_OK:
                return GoodbyeOk()
            case MsgId.ERROR:
                return Error(msg.status, msg.reason)
            case MsgId.PING_OK:
                return None
        raise DecodeError(f"a Hydra server does not send {msg.id.name}")
