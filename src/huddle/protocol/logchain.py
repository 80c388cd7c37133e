"""Every log record verifiable back to its source's key: a hash chain per source
and signed heads (docs/security.md, "Signed log"; docs/protocol.md 12.5).  Pure.

Per source, ``h_0`` is 32 zero octets and ``h_n = SHA-256(h_{n-1} || e_n)``,
where ``e_n`` is record n's canonical encoding: source (16 octets), sequence
(8, big-endian), timestamp (IEEE double), the kind's length (4), the kind and
the body in UTF-8.  Hops and receipt metadata are not in it: they differ from
copy to copy.  ``h_{n-1}`` has a fixed size and ``e_n`` says its own lengths, so
two different histories give one hash only through a SHA-256 collision.  (SHA-256,
not BLAKE2b: OpenSSL's is about a third faster per record here, and a catch-up
hashes every record.)

A source signs a *head* ``(source, seq, h_seq)`` with its Ed25519 key once per
batch it emits.  A batch of one source's records ``a..b`` travels with
``h_{a-1}`` and the head at ``b``: the receiver recomputes ``h_a..h_b`` (one hash
per record), checks that the head's key gives ``source`` (:func:`node_id_for`),
and verifies one signature.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from itertools import repeat
from operator import add
from typing import Final, Protocol

from ..ids import NodeId
from ..log.model import GENESIS, RECORD_HEAD  # h_0 of every source; e_n's head
from ..security import key_derived, node_id_for, verify
from ..wire import LogHead, LogRecord, RecordBatch

__all__ = [
    "GENESIS", "LogSigner", "chain_hashes", "check_batch", "check_heads", "head_message", "key_bound", "sign_head",
]

_DOMAIN: Final = b"huddle log head v1\x00"


class LogSigner(Protocol):
    """What signs this node's heads: its key (a :class:`~huddle.security.NodeIdentity`)."""

    @property
    def public_key(self) -> bytes: ...

    def sign(self, message: bytes) -> bytes: ...


def key_bound(source: NodeId) -> bool:
    """Is ``source`` shaped as a key-derived id (an RFC 9562 version-8 UUID, as
    :func:`node_id_for` gives)?  Such a source's records travel signed."""
    return key_derived(source)


def chain_hashes(prev: bytes, records: Sequence[LogRecord]) -> list[bytes]:
    """``h_a..h_b`` of consecutive ``records`` of one source, from ``prev`` = ``h_{a-1}``."""
    if isinstance(records, RecordBatch):
        return _batch_hashes(prev, records)
    out: list[bytes] = []
    append, pack, sha = out.append, RECORD_HEAD.pack, hashlib.sha256
    h = prev
    last_kind: str | None = None
    kind, size = b"", 0
    for r in records:
        if r.kind is not last_kind:  # a batch's records mostly share one kind: encode it once
            last_kind = r.kind
            kind = last_kind.encode()
            size = len(kind)
        h = sha(h + pack(r.source, r.seq, r.timestamp, size) + kind + r.body.encode()).digest()
        append(h)
    return out


def _batch_hashes(prev: bytes, batch: RecordBatch) -> list[bytes]:
    """:func:`chain_hashes` of a decoded batch, from its columns: each record's encoding
    made by ``map`` (no Python code per record), then hashed in turn."""
    n = len(batch)
    kinds = [batch.kind.encode()] * n if batch.kind is not None else list(map(str.encode, batch.kinds))
    heads = map(RECORD_HEAD.pack, repeat(bytes(batch.source), n), batch.seqs, batch.stamps, map(len, kinds))
    out: list[bytes] = []
    append, sha = out.append, hashlib.sha256
    h = prev
    for e in map(add, map(add, heads, kinds), map(str.encode, batch.bodies)):
        h = sha(h + e).digest()
        append(h)
    return out


def head_message(source: NodeId, seq: int, chain: bytes) -> bytes:
    """The octets a head's signature signs (domain-separated from anything else the key signs)."""
    return _DOMAIN + bytes(source) + seq.to_bytes(8, "big") + chain


def sign_head(signer: LogSigner, source: NodeId, seq: int, chain: bytes) -> LogHead:
    return LogHead(source, seq, chain, signer.sign(head_message(source, seq, chain)), signer.public_key)


def check_batch(prev: bytes, records: Sequence[LogRecord], head: LogHead) -> list[bytes] | str:
    """The chain hashes of ``records`` (one source's consecutive records, ending at
    ``head``, after ``prev``), or what is wrong: then none of them may be kept."""
    if not records:
        return "a head with no records"
    source = records[0].source
    if head.source != source:
        return "a head of another source"
    if records[-1].seq != head.seq:
        return f"a head at {head.seq} for records ending at {records[-1].seq}"
    if records[0].seq == 1 and prev != GENESIS:
        return "a chain that does not start at the genesis hash"
    if node_id_for(head.key) != source:
        return "a head whose key does not give its source's id"
    hashes = chain_hashes(prev, records)
    if hashes[-1] != head.chain:
        return "records that do not hash to their head (altered or forged)"
    if not verify(head.key, head_message(source, head.seq, head.chain), head.signature):
        return "a head whose signature does not verify"
    return hashes


def check_heads(
    heads: Sequence[tuple[bytes, LogHead]], runs: Sequence[tuple[NodeId, int, Sequence[LogRecord]]], own: NodeId,
    *, own_signed: bool, strict: bool,
) -> dict[int, tuple[list[bytes], LogHead]] | str:
    """Per run of one XMSG (its ``heads``, its records cut into ``runs`` of one source)
    that is signed, its chain hashes and head; or what makes the message a forgery (then
    none of it may be kept).  Runs of ``own`` (the receiver's source) are checked only when
    the receiver signs (``own_signed``: else they are dropped as its own); ``strict``: a
    key-bound source's records must be signed."""
    by_source = {h.source: (prev, h) for prev, h in heads}
    if len(by_source) != len(heads):
        return "two heads for one source"
    out: dict[int, tuple[list[bytes], LogHead]] = {}
    seen: set[NodeId] = set()
    for i, (s, _lo, run) in enumerate(runs):
        signed = by_source.get(s)
        if s == own and (signed is None or not own_signed):  # dropped as ours, unless signed
            seen.add(s)
            continue
        if signed is None:
            if strict and key_bound(s):
                return "unsigned records of a key-bound source"
            continue
        if s in seen:
            return "a signed source's records in more than one run"
        seen.add(s)
        prev, head = signed
        hashes = check_batch(prev, run, head)
        if isinstance(hashes, str):
            return hashes
        out[i] = (hashes, head)
    if len(seen) < len(by_source) and any(s not in seen for s in by_source):
        return "a head for records the message does not carry"
    return out
