"""HELO identity (protocol.md 4.1): ours built and signed, theirs checked.

:class:`Greeting` is what this node says of itself in every HELO, signed with its key.
:func:`check_helo` is the identity check of a HELO received, a pure function run before any
state is touched: given the HELO, the connection it came from, the session its sender has here (if any) and
this node's own settings, :func:`check_helo` says why the HELO's identity does not hold, or
None if it does.  It changes nothing: the mesh counts and logs a refusal, and goes on with a
HELO that passed.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import NamedTuple

from ..ids import NodeId, address_of
from ..security import NodeIdentity, fingerprint, key_derived, node_id_for, verify
from ..wire import Group, Helo, NodeTags, helo_signed
from .session import Session

__all__ = ["Greeting", "Refusal", "check_helo"]


@dataclass(frozen=True, slots=True)
class Greeting:
    """What this node says of itself in every HELO (and the BOUT that follows it), and the
    key that signs it."""

    uuid: NodeId
    name: str
    group: str
    incarnation: str
    node_type: str
    beat: float
    lost: int  # the heartbeats we allow to be lost: peers wait beat * (lost + 1) before counting us gone
    rate: int
    guests: int  # our marco port when we host Noam guests (0: we do not)
    identity: NodeIdentity
    tags: NodeTags = dataclasses.field(default_factory=dict, hash=False)  # our tags (protocol.md 4.1, "Tags")

    def check(self, endpoint: str) -> None:
        """Raise as :class:`Helo` does if our HELO could not say ``endpoint`` (nor the rest)."""
        Helo(sender=self.uuid, endpoint=endpoint, name=self.name, incarnation=self.incarnation,
             node_type=self.node_type, beat=self.beat, lost=self.lost, rate=self.rate, tags=self.tags)

    @property
    def bout(self) -> Group:
        """Our BOUT: the group we are in (raises as :class:`Group` does on a bad name)."""
        return Group(sender=self.uuid, group=self.group)

    def helo(self, endpoint: str, *, reply: bool, peers: int, deltas: bool, now: float, to: NodeId | None) -> Helo:
        """Our HELO from ``endpoint``, signed at ``now`` for ``to`` (None: a seed, whose id we do
        not know), saying ``peers`` admitted peers."""
        helo = Helo(
            sender=self.uuid,
            endpoint=endpoint,
            name=self.name,
            incarnation=self.incarnation,
            reply=reply,
            peers=peers,
            node_type=self.node_type,
            beat=self.beat,
            lost=self.lost,
            rate=self.rate,
            guests=self.guests,
            deltas=deltas,
            tags=self.tags,
            key=self.identity.public_key,
            sig=bytes(64),  # replaced by the signature of the rest below
            at=max(0, round(now * 1000)),
            to=to,
        )
        return dataclasses.replace(helo, sig=self.identity.sign(helo_signed(helo)))


class Refusal(NamedTuple):
    """Why a HELO was refused; ``misaddressed``: it was signed for another node (a stale
    endpoint, or a copy sent on), counted apart from forgeries."""

    reason: str
    misaddressed: bool = False


def check_helo(m: Helo, now: float, source: str, session: Session | None, *, me: NodeId, secure: bool,
               window: float) -> Refusal | None:
    """Why the identity of ``m`` (from ``source``, "" unknown; ``session``: its sender's here)
    does not hold, or None: an id a key gives (RFC 9562 version 8) comes with that key and its
    signature, signed within ``window`` seconds of ``now`` for ``me``; with ``secure`` (a group
    secret) every id does; a session keeps its key."""
    s = session
    derived = key_derived(m.sender)
    if not m.key:
        if derived:
            return Refusal("a key-derived id without its key")
        if secure:
            return Refusal("no key (a group with a secret admits key-derived ids only)")
        if s is not None and s.key:
            return Refusal("no key, where its session has one")
        return None  # a legacy id in open mode: admitted, unverified
    if m.to is not None and m.to != me:
        return Refusal(f"meant for {m.to.short}", misaddressed=True)
    skew = m.at / 1000.0 - now
    if abs(skew) > window:
        return Refusal(f"signed at a time {skew:+.0f} s from ours (window {window:g} s)")
    if s is not None and s.key and s.key != m.key:
        return Refusal(f"another key ({fingerprint(m.key)}) than its session's ({fingerprint(s.key)})")
    if node_id_for(m.key) != m.sender and (derived or secure):
        return Refusal(f"the key {fingerprint(m.key)} does not give this id")
    if (s is not None and s.incarnation == m.incarnation and s.helo_at and source and s.source
            and address_of(source) != address_of(s.source) and m.at <= s.helo_at):
        # Only where it would move the session: from its own address HELOs may cross on two
        # connections (a probe's, the session's) and arrive out of order, harmlessly.
        return Refusal("a HELO of its session no newer than the last, from another address")
    if not verify(m.key, helo_signed(m), m.sig):
        return Refusal("bad signature")
    return None
