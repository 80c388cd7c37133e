"""The pairing door's requests (huddle/pairing/requests.py) and messages (huddle/pairing/codec.py),
pure: time passed in (docs/security.md, "Pairing")."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from huddle.errors import DecodeError, LocalProtocolError
from huddle.pairing.codec import (
    MAX_MESSAGE,
    Accepted,
    BadFingerprint,
    Pair,
    Pending,
    Refused,
    decode,
    encode,
    normalise_fingerprint,
)
from huddle.pairing.requests import TRANSITIONS, Answer, Requests, State, transition
from huddle.security import NodeIdentity, fingerprint


def _key(i: int) -> bytes:
    return NodeIdentity.from_seed(i.to_bytes(32, "big")).public_key


def _ask(reqs: Requests, now: float, i: int, address: str = "10.0.0.1") -> Answer:
    return reqs.ask(now, _key(i), f"dev{i}", "00" * 16, address)


def test_a_request_waits_then_is_accepted_and_only_its_key_is_given_the_secret() -> None:
    reqs = Requests(ttl=60)
    assert _ask(reqs, 0, 1) is Answer.PENDING
    assert _ask(reqs, 2, 1) is Answer.PENDING, "asking again refreshes the same request"
    listed = reqs.pending(3)
    assert [r.fingerprint for r in listed] == [fingerprint(_key(1))]
    assert listed[0].as_dict(3)["age"] == 3.0
    assert reqs.accept(4, fingerprint(_key(2))) is None, "no request of that key"
    assert reqs.accept(4, fingerprint(_key(1))) is not None
    assert reqs.pending(4) == [], "accepted: no longer listed"
    assert _ask(reqs, 5, 1) is Answer.ACCEPTED
    assert reqs.accepted_key(fingerprint(_key(1))) == _key(1)
    assert _ask(reqs, 5, 2) is Answer.PENDING, "another key is not accepted"
    assert reqs.accepted_key(fingerprint(_key(2))) is None
    assert reqs.stats.as_dict() | {} == {"requests": 2, "pending": 1, "accepted": 1, "refused": 0, "expired": 0,
                                         "rate_limited": 0, "malformed": 0}


def test_a_refused_request_leaves_nothing_but_is_refused_at_once_within_the_ttl() -> None:
    reqs = Requests(ttl=60)
    _ask(reqs, 0, 1)
    assert reqs.refuse(1, fingerprint(_key(1))) is not None
    assert reqs.pending(1) == [] and reqs.stats.pending == 0
    assert reqs.accept(1, fingerprint(_key(1))) is None, "nothing left to accept"
    assert _ask(reqs, 30, 1) is Answer.REFUSED, "asking again within the TTL"
    assert reqs.pending(30) == []
    assert _ask(reqs, 62, 1) is Answer.PENDING, "the refusal is remembered for a TTL only"


def test_requests_expire_whole() -> None:
    reqs = Requests(ttl=60)
    _ask(reqs, 0, 1)
    _ask(reqs, 10, 2)
    assert [r.name for r in reqs.pending(59)] == ["dev1", "dev2"]
    assert [r.name for r in reqs.pending(60)] == ["dev2"]
    assert reqs.accept(60, fingerprint(_key(1))) is None
    assert reqs.accept(61, fingerprint(_key(2))) is not None
    reqs.expire(121 + 60)
    assert _ask(reqs, 200, 2) is Answer.PENDING, "an acceptance expires too: asked again, it waits"
    assert reqs.stats.expired == 2


def test_caps_and_the_rate_bound_new_requests_and_are_counted() -> None:
    reqs = Requests(ttl=600, max_pending=4, per_address=2, rate=0.5, burst=8)
    assert [_ask(reqs, 0, i, "10.0.0.1") for i in range(3)] == [Answer.PENDING] * 2 + [Answer.LIMITED]
    assert [_ask(reqs, 0, i, f"10.0.0.{i}") for i in range(3, 6)] == [Answer.PENDING] * 2 + [Answer.LIMITED]
    assert len(reqs.pending(0)) == 4 and reqs.stats.rate_limited == 2
    assert _ask(reqs, 0, 0) is Answer.PENDING, "a request already listed is still answered"
    # The rate: a burst, then one every 2 s.
    fast = Requests(ttl=600, max_pending=100, per_address=100, rate=0.5, burst=3)
    answers = [_ask(fast, 0, i) for i in range(5)]
    assert answers == [Answer.PENDING] * 3 + [Answer.LIMITED] * 2
    assert _ask(fast, 1.9, 10) is Answer.LIMITED
    assert _ask(fast, 4.0, 11) is Answer.PENDING


def test_a_request_another_member_accepted_goes_and_is_not_listed_again() -> None:
    reqs = Requests(ttl=60)
    _ask(reqs, 0, 1)
    reqs.elsewhere(1, fingerprint(_key(1)))
    assert reqs.pending(1) == []
    assert _ask(reqs, 2, 1) is Answer.PENDING and reqs.pending(2) == []


def test_the_refusal_memory_is_bounded() -> None:
    reqs = Requests(ttl=600, max_pending=100, per_address=100, burst=100, memory=3)
    for i in range(5):
        _ask(reqs, 0, i)
        reqs.refuse(0, fingerprint(_key(i)))
    assert _ask(reqs, 1, 0) is Answer.PENDING, "the oldest refusal was forgotten"
    assert _ask(reqs, 1, 4) is Answer.REFUSED


def test_a_move_not_in_the_table_is_refused() -> None:
    assert transition(State.PENDING, "accept") is State.ACCEPTED
    for state in State:
        for move in ("ask", "accept", "refuse", "expire", "elsewhere"):
            if (state, move) not in TRANSITIONS:
                with pytest.raises(LocalProtocolError):
                    transition(state, move)
    with pytest.raises(LocalProtocolError):
        transition(State.ACCEPTED, "refuse")


# ------------------------------------------------------------------ the codec

def test_fingerprints_are_read_as_people_type_them_and_only_whole() -> None:
    fp = fingerprint(_key(1))
    assert normalise_fingerprint(fp.lower().replace("-", " ")) == fp
    with pytest.raises(BadFingerprint):
        normalise_fingerprint(fp[:9])
    with pytest.raises(BadFingerprint):
        normalise_fingerprint(fp[:-1] + "U")


_names = st.text(st.characters(categories=("L", "N", "P", "Zs")), min_size=1, max_size=20).filter(str.isprintable)


@given(st.binary(min_size=32, max_size=32), _names, st.binary(min_size=16, max_size=16), st.text(max_size=30))
def test_pair_round_trips(key: bytes, name: str, node: bytes, group: str) -> None:
    message = Pair(key, name, node.hex(), group)
    assert decode(encode(message)) == message


@given(st.text(max_size=500))
def test_answers_round_trip(text: str) -> None:
    for message in (Refused(text), Accepted(text)):
        assert decode(encode(message)) == message
    assert decode(encode(Pending(fingerprint(_key(1))))) == Pending(fingerprint(_key(1)))


@given(st.binary(max_size=MAX_MESSAGE + 10))
def test_any_octets_decode_or_raise_decode_error(data: bytes) -> None:
    with contextlib.suppress(DecodeError):
        decode(data)


@given(st.sampled_from([b"P", b"W"]), st.binary(max_size=200))
def test_bad_bodies_are_decode_errors(command: bytes, body: bytes) -> None:
    with contextlib.suppress(DecodeError):
        decode(b"HPR\x01" + command + body)


def test_oversized_and_foreign_messages_are_refused() -> None:
    with pytest.raises(DecodeError):
        decode(b"HPR\x01A" + b"x" * MAX_MESSAGE)
    with pytest.raises(DecodeError):
        decode(b"HDL\x01P{}")
    with pytest.raises(DecodeError, match="expected"):
        decode(b'HPR\x01P{"key": "00"}')


# ------------------------------------------------------------------ the beacon's door (docs/protocol.md 9)

def test_a_beacon_may_carry_a_door_and_anything_else_is_malformed() -> None:
    from huddle.ids import NodeId
    from huddle.wire.beacon import BEACON_SIZE, Beacon, group_hash, pack, unpack

    plain = Beacon(NodeId(b"\x01" * 16), 5000, group_hash("g"))
    with_door = Beacon(NodeId(b"\x01" * 16), 5000, group_hash("g"), door=6000)
    assert len(pack(plain)) == BEACON_SIZE == 30 and unpack(pack(plain)) == plain
    assert len(pack(with_door)) == 32 and unpack(pack(with_door)) == with_door
    for bad in (pack(plain) + b"\x00", pack(with_door) + b"\x00", pack(plain) + b"\x00\x00"):
        with pytest.raises(DecodeError):
            unpack(bad)
