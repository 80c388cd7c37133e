"""Hydra's server, sans I/O: a session per client, as edgenet/hydra's ``src/hydra_server.xml``
runs them, over the node's post store.

A client's session is made by its HELLO and ends with its GOODBYE, a command the server does
not expect (answered by ERROR, then closed, as Hydra's server does), or ``idle`` seconds of
silence.  Its states and the only moves between them are :data:`TRANSITIONS` (one table,
one :meth:`Session.move`, ``LocalProtocolError`` on any move not in it):

    START      no HELLO yet: a HELLO is answered HELLO-OK; anything else ERROR (500), no session
    CONNECTED  NEXT-OLDER / NEXT-NEWER set the current post (NEXT-OK) or clear it (NEXT-EMPTY);
               META, CHUNK of the current post; PING
    CLOSED     GOODBYE (GOODBYE-OK), an unexpected command or a failure (ERROR), or silence

Where Hydra's code is silent or would stop, huddle answers (docs/hydra.md): a frame that
does not decode gets ERROR 500 and changes nothing (Hydra's server leaves its loop); META or
CHUNK with no current post gets ERROR 500 and closes (Hydra's asserts); a post gone or
corrupt meanwhile, ERROR 404 or 502, and closes.  Post ids go out as Hydra writes them
(czmq's ``zdigest_string``: 40 uppercase hex digits) and are taken in either case.

Two views of a post (docs/hydra.md, "Post ids"): a Hydra node recomputes a post's digest from
its content, in uppercase, and with it its id, so a post huddle made (its digest in lowercase)
is filed there under another id.  So a client that is not a huddle node gets **Hydra's view**:
each post under its Hydra id (:func:`hydra_id`, the id Hydra will give it), its digest in
uppercase, no seal (which signs the digest as written); NEXT-OLDER / NEXT-NEWER take that id
and map it back.  A huddle client (its HELLO carries huddle's mark, wire.HUDDLE_MARK) gets
the posts as huddle holds them, seals and all.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from enum import Enum
from typing import Final

from ..errors import DecodeError, LocalProtocolError
from ..posts.model import HEAD, TAIL, CorruptContent, Post, UnknownPost, is_post_id, post_id
from ..posts.sync import Source
from .wire import HydraMsg, MsgId, Status, decode

__all__ = ["MAX_CHUNK", "TRANSITIONS", "HydraServer", "Session", "SessionState", "hydra_id", "meta_ok"]

# The most content one CHUNK-OK carries, whatever is asked: Hydra's own client asks for a
# post's whole content in one CHUNK of this size (CHUNK_SIZE in src/hydra_client.c); a longer
# post is fetched in several by a client that asks again.
MAX_CHUNK: Final = 10 * 1024 * 1024
WALK_EVERY: Final = 60.0  # seconds between two walks of the store for a Hydra id not known (HydraServer._huddle_id)


class SessionState(Enum):
    START = "start"
    CONNECTED = "connected"
    CLOSED = "closed"


# (from, to): why; the only moves a session makes.
TRANSITIONS: Final[dict[tuple[SessionState, SessionState], str]] = {
    (SessionState.START, SessionState.CONNECTED): "its HELLO",
    (SessionState.CONNECTED, SessionState.CLOSED): "GOODBYE, an unexpected command, a failure, or silence",
}


@dataclass(slots=True)
class Session:
    heard_at: float
    state: SessionState = SessionState.START
    current: str | None = None  # the post NEXT-OK named (lowercase id)
    hydra_view: bool = True  # a client that is not a huddle node: Hydra's ids and digests (the module docstring)

    def move(self, to: SessionState) -> None:
        if (self.state, to) not in TRANSITIONS:
            raise LocalProtocolError(f"a Hydra session cannot go from {self.state.value} to {to.value}")
        self.state = to


def hydra_id(post: Post) -> str:
    """The id a Hydra node gives ``post`` once it holds it (lowercase here): SHA1 over its
    metadata with the digest in uppercase, as ``hydra_post_set_data`` recomputes it from the
    content (czmq's ``zdigest_string``).  A post whose digest is in uppercase keeps its id."""
    return post_id(post.subject, post.timestamp, post.parent_id, post.mime_type, post.digest.upper())


def meta_ok(post: Post, *, hydra_view: bool = False) -> HydraMsg:
    """A post's META-OK: its metadata as it was hashed into its id, and its seal if it has one;
    in Hydra's view, its digest in uppercase (hashed into :func:`hydra_id`) and no seal."""
    seal = b""
    if post.sealed and not hydra_view:
        seal = bytes.fromhex(post.sha256) + bytes.fromhex(post.author) + post.public_key + post.signature
    return HydraMsg(MsgId.META_OK, subject=post.subject, timestamp=post.timestamp, parent_id=post.parent_id,
                    digest=post.digest.upper() if hydra_view else post.digest, mime_type=post.mime_type,
                    content_size=post.size, seal=seal)


def _error(status: Status, reason: str) -> HydraMsg:
    return HydraMsg(MsgId.ERROR, status=status, reason=reason[:255])


class HydraServer:
    """Answers every client of the node's Hydra ROUTER from one :class:`~huddle.posts.sync.Source`."""

    def __init__(self, source: Source, identity: str, nickname: str, *, max_sessions: int = 64,
                 idle: float = 60.0, max_chunk: int = MAX_CHUNK) -> None:
        self.source, self.identity, self.nickname = source, identity, nickname[:255]
        self.max_sessions, self.idle, self.max_chunk = max_sessions, idle, max_chunk
        self._local: dict[str, str] = {}  # Hydra id -> huddle's, of the posts whose two ids differ
        self._walked_at = -math.inf  # when the store was last walked to learn them all
        self.sessions: dict[bytes, Session] = {}
        self.counters: Counter[str] = Counter()

    def current(self, client: bytes) -> str | None:
        """The post a client's META or CHUNK would be about (None: none)."""
        session = self.sessions.get(client)
        return None if session is None else session.current

    def receive(self, client: bytes, frame: bytes, now: float) -> HydraMsg:
        """One frame from ``client`` (its routing id) -> the reply to send it."""
        try:
            msg = decode(frame)
        except DecodeError as exc:  # nothing changes: not the session, not its current post
            self.counters["malformed"] += 1
            return _error(Status.COMMAND_INVALID, f"malformed: {exc}")
        session = self.sessions.get(client)
        if session is None:
            if msg.id is not MsgId.HELLO:
                self.counters["invalid"] += 1
                return _error(Status.COMMAND_INVALID, f"say HELLO first (got {msg.id.name})")
            if len(self.sessions) >= self.max_sessions:
                self.counters["sessions_full"] += 1
                return _error(Status.RESOURCE_LOCKED, "too many Hydra sessions: try again later")
            session = self.sessions[client] = Session(now, hydra_view=not msg.huddle)
            session.move(SessionState.CONNECTED)
            self.counters["sessions"] += 1
            return HydraMsg(MsgId.HELLO_OK, identity=self.identity, nickname=self.nickname)
        session.heard_at = now
        reply = self._connected(session, msg)
        if reply.id in (MsgId.ERROR, MsgId.GOODBYE_OK):
            self._close(client, "goodbye" if reply.id is MsgId.GOODBYE_OK else "closed_on_error")
        return reply

    def _connected(self, session: Session, msg: HydraMsg) -> HydraMsg:
        if msg.id in (MsgId.NEXT_OLDER, MsgId.NEXT_NEWER):
            session.current = None
            ident = msg.ident if msg.ident in (HEAD, TAIL) else msg.ident.lower()
            if ident not in (HEAD, TAIL) and not is_post_id(ident):
                return HydraMsg(MsgId.NEXT_EMPTY)  # no such post: Hydra's server says the same
            if session.hydra_view and ident not in (HEAD, TAIL):
                ident = self._huddle_id(ident, session.heard_at)
            try:
                pid = self.source.older(ident) if msg.id is MsgId.NEXT_OLDER else self.source.newer(ident)
                named = self._hydra_id(pid) if session.hydra_view and pid is not None else pid
            except UnknownPost:
                pid = named = None
            if pid is None or named is None:
                return HydraMsg(MsgId.NEXT_EMPTY)
            session.current = pid
            return HydraMsg(MsgId.NEXT_OK, ident=named.upper())
        if msg.id is MsgId.PING:
            return HydraMsg(MsgId.PING_OK)
        if msg.id is MsgId.GOODBYE:
            return HydraMsg(MsgId.GOODBYE_OK)
        if msg.id not in (MsgId.META, MsgId.CHUNK):
            self.counters["invalid"] += 1
            return _error(Status.COMMAND_INVALID, f"{msg.id.name} is not expected here: session closed")
        pid = session.current
        if pid is None:
            self.counters["invalid"] += 1
            return _error(Status.COMMAND_INVALID, f"{msg.id.name} needs a current post (after NEXT-OK)")
        try:
            post = self.source.meta(pid)
            if msg.id is MsgId.META:
                self.counters["posts_served"] += 1
                return meta_ok(post, hydra_view=session.hydra_view)
            octets = min(msg.octets or self.max_chunk, self.max_chunk)  # 0: the rest (Hydra's hydra_post_fetch)
            data = self.source.read(pid, msg.offset, octets) if msg.offset < post.size else b""
        except UnknownPost:
            return _error(Status.NOT_FOUND, f"post {pid.upper()} is no longer here")
        except CorruptContent as exc:
            return _error(Status.INTERNAL_ERROR, str(exc))
        except OSError as exc:
            return _error(Status.INTERNAL_ERROR, f"cannot read the content here: {exc.strerror or exc}")
        self.counters["chunks_served"] += 1
        self.counters["octets_served"] += len(data)
        return HydraMsg(MsgId.CHUNK_OK, offset=msg.offset, content=data)

    def _hydra_id(self, pid: str) -> str:
        """The Hydra id of the post ``pid`` (remembered when it differs); UnknownPost."""
        hid = hydra_id(self.source.meta(pid))
        if hid != pid:
            self._local[hid] = pid
        return hid

    def _huddle_id(self, ident: str, now: float) -> str:
        """The post a Hydra client names ``ident``: huddle's id of it.  An id not named in a
        NEXT-OK since this server started may still be a Hydra id (Hydra's client asks from
        the post it holds): the store is walked to learn them all, at most once a
        :data:`WALK_EVERY` seconds (ids nobody gave out cost nothing more)."""
        if ident in self._local:
            return self._local[ident]
        try:
            self.source.meta(ident)
            return ident  # huddle's own id (a post whose two ids agree, or a huddle client)
        except UnknownPost:
            pass
        if now - self._walked_at < WALK_EVERY:
            return ident
        self._walked_at = now
        self.counters["hydra_ids_indexed"] += 1
        pid = self.source.older(HEAD)
        while pid is not None:
            self._hydra_id(pid)
            pid = self.source.older(pid)
        return self._local.get(ident, ident)

    def _close(self, client: bytes, why: str) -> None:
        session = self.sessions.pop(client, None)
        if session is not None:
            session.move(SessionState.CLOSED)
            self.counters[why] += 1

    def expire(self, now: float) -> None:
        """Close the sessions silent for ``idle`` seconds (Hydra's server's ``expired``)."""
        for client, session in list(self.sessions.items()):
            if now - session.heard_at >= self.idle:
                self._close(client, "expired")

    def next_deadline(self) -> float:
        return min((s.heard_at + self.idle for s in self.sessions.values()), default=math.inf)
