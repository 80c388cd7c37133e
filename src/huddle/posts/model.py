"""A post: immutable metadata and a content of zero or more octets.

``post_id = sha1(subject ":" timestamp ":" parent_id ":" mime_type ":" digest)``
in hex, where ``digest`` is the SHA1 of the content in hex and ``parent_id``
is the empty string for a post without a parent.  The same post has the same
id on every node.  huddle writes its digests and ids in lowercase; a Hydra node
(czmq's ``zdigest_string``) in uppercase.  The digest and parent id are kept as
they were written, since they are hashed as text; the id is kept in lowercase
(docs/hydra.md).

huddle's addition (docs/security.md, "Sealed posts"): a post is **sealed** by its author.  The author signs
(Ed25519, its node key) the metadata together with a SHA-256 of the content (the SHA1
digest alone is collision-weak; it stays, as the Hydra id needs it) and its own id, and
the post carries the author's public key and that signature (:meth:`Post.seal_ok`).  The
author id is the one the key gives (``security.node_id_for``), so nobody can seal a post in
another node's name.  A post without a seal is a *legacy* post (an earlier huddle's, or one
of the Hydra sync's without the extension): accepted in open mode only.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ..errors import HuddleError
from ..ids import NodeId
from ..security import NodeIdentity, fingerprint, node_id_for, verify

__all__ = [
    "HEAD", "TAIL", "CorruptContent", "Policy", "Post", "PostAdded", "PostError", "Range", "UnknownPost",
    "is_post_id", "now_timestamp", "post_id",
]

_TIMESTAMP = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z\Z")
_HEX40 = re.compile(r"[0-9a-f]{40}\Z")
_HEX40_ONE_CASE = re.compile(r"([0-9a-f]{40}|[0-9A-F]{40})\Z")  # a digest or parent id as Hydra writes them too
_HEX64 = re.compile(r"[0-9a-f]{64}\Z")
_HEX32 = re.compile(r"[0-9a-f]{32}\Z")
_SEAL_CONTEXT = b"huddle post seal v1\x00"  # what a seal's signature is of: never anything else's
MAX_SUBJECT = 64 * 1024
MAX_MIME = 255


class PostError(HuddleError):
    """A post's metadata is not valid (bad timestamp, digest, id, ...)."""


class UnknownPost(KeyError):
    """The id is not (or no longer) a post of this store."""


class CorruptContent(Exception):
    """A post's content does not match its digest; the store has dropped it."""


# Where a walk through a store's posts starts: before the newest (NEXT-OLDER from HEAD)
# or before the oldest (NEXT-NEWER from TAIL).
HEAD = "HEAD"
TAIL = "TAIL"


def is_post_id(text: str) -> bool:
    return bool(_HEX40.match(text))


def _real_time(timestamp: str) -> bool:
    """A date and time that exist (no month 13, no 25:61)."""
    try:
        datetime.strptime(timestamp, "%Y-%m-%dT%H:%M:%SZ")
    except ValueError:
        return False
    return True


def now_timestamp(now: float) -> str:
    """``now`` (seconds since the epoch) as ``yyyy-mm-ddThh:mm:ssZ``."""
    return datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def post_id(subject: str, timestamp: str, parent_id: str, mime_type: str, digest: str) -> str:
    text = f"{subject}:{timestamp}:{parent_id}:{mime_type}:{digest}"
    return hashlib.sha1(text.encode("utf-8"), usedforsecurity=False).hexdigest()


@dataclass(frozen=True, slots=True)
class Post:
    subject: str
    timestamp: str
    parent_id: str  # "" for none
    mime_type: str
    digest: str
    size: int
    # The seal (all four, or none: a legacy post): SHA-256 of the content (hex), the author's
    # node id (32 hex digits, the one its key gives), its Ed25519 public key and signature.
    sha256: str = ""
    author: str = ""
    public_key: bytes = b""
    signature: bytes = b""

    def __post_init__(self) -> None:
        if len(self.subject.encode("utf-8", "surrogatepass")) > MAX_SUBJECT:
            raise PostError(f"subject longer than {MAX_SUBJECT} octets")
        if not _TIMESTAMP.match(self.timestamp) or not _real_time(self.timestamp):
            raise PostError(f"timestamp {self.timestamp!r} is not ISO 8601 UTC (yyyy-mm-ddThh:mm:ssZ)")
        if self.parent_id and not _HEX40_ONE_CASE.match(self.parent_id):
            raise PostError(f"parent id {self.parent_id!r} is not a post id (40 hex digits of one case)")
        if not self.mime_type or len(self.mime_type) > MAX_MIME or not self.mime_type.isascii() \
                or "/" not in self.mime_type or any(c.isspace() for c in self.mime_type):
            raise PostError(f"MIME type {self.mime_type!r} is not TYPE/SUBTYPE")
        if not _HEX40_ONE_CASE.match(self.digest):
            raise PostError(f"digest {self.digest!r} is not a SHA1 in hex (40 digits of one case)")
        if not 0 <= self.size < 2**63:
            raise PostError(f"size {self.size} out of range")
        any_seal = self.sealed or self.sha256 or self.author or self.public_key
        if any_seal and not (_HEX64.match(self.sha256) and _HEX32.match(self.author)
                             and len(self.public_key) == 32 and len(self.signature) == 64):
            raise PostError("a post's seal needs a SHA-256 (64 hex digits), an author id (32 hex digits), "
                            "a public key (32 octets) and a signature (64 octets)")

    def matches(self, digest: str, size: int) -> bool:
        """Is ``digest`` (a SHA1 in hex, either case) and ``size`` the content's?"""
        return digest.lower() == self.digest.lower() and size == self.size

    @property
    def sealed(self) -> bool:
        """Does the post carry a seal (whether or not it is good)?"""
        return bool(self.signature)

    def sealed_part(self) -> bytes:
        """The octets the author signs: every field of the metadata but the seal's signature,
        each with its length (so no two posts sign the same octets)."""
        fields = (self.subject, self.timestamp, self.parent_id, self.mime_type, self.digest, str(self.size),
                  self.sha256, self.author)
        raw = [f.encode("utf-8", "surrogatepass") for f in fields] + [self.public_key]
        return _SEAL_CONTEXT + b"".join(len(f).to_bytes(4, "big") + f for f in raw)

    def seal_ok(self) -> bool:
        """A sealed post whose author id is the one its key gives and whose signature is good."""
        return (self.sealed and str(node_id_for(self.public_key)) == self.author
                and verify(self.public_key, self.sealed_part(), self.signature))

    def seal(self, identity: NodeIdentity, sha256: str) -> Post:
        """This post sealed by ``identity`` (its author), with the content's SHA-256 (hex)."""
        unsigned = dataclasses.replace(self, sha256=sha256, author=str(identity.node_id),
                                       public_key=identity.public_key, signature=b"\0" * 64)
        return dataclasses.replace(unsigned, signature=identity.sign(unsigned.sealed_part()))

    @property
    def id(self) -> str:
        return post_id(self.subject, self.timestamp, self.parent_id, self.mime_type, self.digest)

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "subject": self.subject, "timestamp": self.timestamp,
                "parent_id": self.parent_id or None, "mime_type": self.mime_type,
                "digest": self.digest, "size": self.size, "sealed": self.sealed,
                "sha256": self.sha256 or None, "author": self.author or None,
                "public_key": self.public_key.hex() or None, "signature": self.signature.hex() or None,
                "author_key": fingerprint(self.public_key) if self.sealed else None}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Post:
        try:
            post = cls(subject=str(data["subject"]), timestamp=str(data["timestamp"]),
                       parent_id=str(data.get("parent_id") or ""), mime_type=str(data["mime_type"]),
                       digest=str(data["digest"]), size=int(data["size"]), sha256=str(data.get("sha256") or ""),
                       author=str(data.get("author") or ""),
                       public_key=bytes.fromhex(str(data.get("public_key") or "")),
                       signature=bytes.fromhex(str(data.get("signature") or "")))
        except (KeyError, TypeError, ValueError) as exc:
            raise PostError(f"bad post metadata: {exc}") from None
        if "id" in data and data["id"] != post.id:
            raise PostError(f"post id {data['id']} does not match its metadata ({post.id})")
        return post


@dataclass(frozen=True, slots=True)
class Policy:
    """What to fetch: ``all``; ``newest`` (only the server's ``limit`` newest posts: a session
    stops after that many); ``budget`` (no post that would take the store's content past
    ``limit`` octets; such a post is passed over for good)."""

    mode: str = "all"
    limit: int = 0

    def __post_init__(self) -> None:
        if self.mode not in ("all", "newest", "budget"):
            raise ValueError(f"policy must be all, newest:N or budget:OCTETS, not {self.mode!r}")
        if self.limit < 0 or (self.mode == "newest" and self.limit == 0):
            raise ValueError("newest:N needs N >= 1; a budget must be >= 0")

    @classmethod
    def parse(cls, text: str) -> Policy:
        mode, sep, n = text.partition(":")
        if mode == "all" and not sep:
            return cls()
        if mode not in ("newest", "budget"):
            raise ValueError(f"policy must be all, newest:N or budget:OCTETS[kmg], not {text!r}")
        units = {"k": 1024, "m": 1024**2, "g": 1024**3}
        mult = units.get(n[-1:].lower(), 1)
        digits = n[:-1] if mult > 1 else n
        if not digits.isdigit():
            raise ValueError(f"policy must be all, newest:N or budget:OCTETS[kmg], not {text!r}")
        return cls(mode, int(digits) * mult)


@dataclass(frozen=True, slots=True)
class Range:
    oldest: str
    newest: str


@dataclass(frozen=True, slots=True)
class PostAdded:
    """A Hydra post is new in this node's store: added here (``peer`` None) or fetched from
    ``peer``.  The posts feature's event (posts/feature.py renders it for the event stream)."""

    post: dict[str, Any]  # Post.to_json(): id, subject, timestamp, parent_id, mime_type, digest, size
    peer: NodeId | None
    time: float

    def to_json(self) -> dict[str, Any]:
        return {"type": "post_new", **self.post, "from": None if self.peer is None else str(self.peer),
                "time": self.time}
