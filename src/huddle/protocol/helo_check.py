"""The identity checks of a HELO (protocol.md 4.1): a pure function, before any state is touched.

Given the HELO, the connection it came from, the session its sender has here (if any) and
this node's own settings, :func:`check_helo` says why the HELO's identity does not hold, or
None if it does.  It changes nothing: the mesh counts and logs a refusal, and goes on with a
HELO that passed.
"""

from __future__ import annotations

from typing import NamedTuple

from ..ids import NodeId, address_of
from ..security import fingerprint, key_derived, node_id_for, verify
from ..wire import Helo
from ..wire.messages import helo_signed
from .session import Session

__all__ = ["Refusal", "check_helo"]


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
