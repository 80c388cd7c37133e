"""The API's door as data (huddle.api.guard): strict JSON, Host / Origin, and the
connection guard's cap and deadlines, with time passed in."""

from __future__ import annotations

import pytest

from huddle.api.guard import (
    ApiCounters,
    BadInput,
    ConnectionGuard,
    bad_text,
    host_allowed,
    is_loopback,
    origin_allowed,
    parse_json,
)
from huddle.limits import ApiLimits


@pytest.mark.parametrize(("raw", "why"), [
    (b'{"kind": "\\ud800", "body": 1}', "surrogate"),
    (b'{"kind": "k", "body": ["ok", {"\\udfff": 1}]}', "surrogate"),
    (b'{"body": NaN}', "NaN is not JSON"),
    (b'{"body": -Infinity}', "-Infinity is not JSON"),
    (b'{"body": 1e400}', "finite"),
    (b"[" * 40 + b"]" * 40, "nested deeper than 32"),
    (b"[" * 100_000 + b"]" * 100_000, "nested deeper than 32"),
    (b'{"a": "\xed\xa0\x80"}', "not UTF-8"),
    (b"{", "not valid JSON"),
    (b"1" * 5000, "not valid JSON"),  # an integer past Python's 4300 digits
])
def test_strict_json_refuses(raw: bytes, why: str) -> None:
    with pytest.raises(BadInput, match=why):
        parse_json(raw, 32)


def test_strict_json_takes_what_is_json() -> None:
    doc = b'{"kind": "k\\u00e9", "body": [1, 2.5, -3e10, null, true, {"x": "\\ud83d\\ude00"}]}'
    assert parse_json(doc, 32) == {"kind": "k\u00e9", "body": [1, 2.5, -3e10, None, True, {"x": "\U0001f600"}]}
    assert parse_json(b"[" * 32 + b"]" * 32, 32) is not None
    assert not bad_text("plain \U0001f600") and bad_text("a\ud800b")


@pytest.mark.parametrize(("host", "local", "allowed", "ok"), [
    ("127.0.0.1:8080", "127.0.0.1", (), True),
    ("localhost:8080", "127.0.0.1", (), True),
    ("[::1]:8080", "::1", (), True),
    ("LOCALHOST.", "127.0.0.1", (), True),
    ("192.168.1.5:8080", "192.168.1.5", (), True),
    ("evil.example:8080", "127.0.0.1", (), False),  # DNS rebinding: the page's own name
    ("localhost:8080", "192.168.1.5", (), False),
    ("10.0.0.1:8080", "192.168.1.5", (), False),
    ("huddle.example", "127.0.0.1", ("Huddle.Example",), True),
    ("", "127.0.0.1", (), False),
])
def test_host_must_name_the_api(host: str, local: str, allowed: tuple[str, ...], ok: bool) -> None:
    assert host_allowed(host, local, allowed) is ok


@pytest.mark.parametrize(("origin", "ok"), [
    ("http://127.0.0.1:8080", True),
    ("https://127.0.0.1:8080", True),
    ("http://127.0.0.1:9999", False),
    ("http://evil.example", False),
    ("null", False),
    ("file://", False),
])
def test_origin_must_be_the_apis_own(origin: str, ok: bool) -> None:
    assert origin_allowed(origin, "127.0.0.1:8080") is ok


def test_loopback() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("127.3.4.5") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("::") and not is_loopback("192.168.1.5")


def test_connection_cap_and_deadlines() -> None:
    counters = ApiCounters()
    guard: ConnectionGuard[str] = ConnectionGuard(ApiLimits(max_connections=3, idle_timeout=10.0), counters)
    assert [guard.open(k, 0.0) for k in "abcd"] == [True, True, True, False]
    assert counters.connections_refused == 1 and len(guard) == 3
    buffered = {"a": 0, "b": 0, "c": 0}
    guard.started("b", 1.0)  # b's request arrived; its answer is being written
    guard.started("c", 1.0)
    guard.finished("c", 5.0)  # c answered at 5: waits for its next request head until 15
    assert guard.sweep(9.9, buffered.__getitem__) == []
    assert guard.sweep(10.0, buffered.__getitem__) == ["a"]  # a never sent a complete head
    assert counters.idle_closed == 1
    buffered["b"] = 65536  # b's client stopped reading its answer
    assert guard.sweep(12.0, buffered.__getitem__) == []
    buffered["b"] = 30000  # it read some
    assert guard.sweep(20.0, buffered.__getitem__) == ["c"]
    assert guard.sweep(29.9, buffered.__getitem__) == []
    assert guard.sweep(30.0, buffered.__getitem__) == ["b"]  # no progress for 10 s
    assert counters.stalled_closed == 1 and counters.idle_closed == 2 and len(guard) == 0
    guard.close("b")  # the transport's own close after the sweep's: harmless
    assert guard.open("e", 31.0)


def test_one_address_holds_at_most_its_share() -> None:
    counters = ApiCounters()
    guard: ConnectionGuard[str] = ConnectionGuard(ApiLimits(max_connections=10, max_connections_per_address=3),
                                                  counters)
    assert [guard.open(f"x{i}", 0.0, "10.0.0.66") for i in range(5)] == [True, True, True, False, False]
    assert guard.open("honest", 0.0, "10.0.0.2") and counters.address_refused == 2
    guard.close("x0")
    assert guard.open("x5", 1.0, "10.0.0.66")  # a slot of its own came free
    assert guard.sweep(100.0, lambda key: 0) and len(guard) == 0  # all idle: swept, their slots free again
    assert guard.open("x6", 101.0, "10.0.0.66")


def test_connections_that_never_showed_the_token_make_room_for_a_newcomer() -> None:
    """Where the token is required, idle connections that never showed it do not hold anyone
    else's share: when the API is full the oldest of them is closed for the newcomer."""
    counters = ApiCounters()
    guard: ConnectionGuard[str] = ConnectionGuard(ApiLimits(max_connections=4, max_connections_per_address=4),
                                                  counters)
    assert guard.open("client", 0.0, "10.0.0.2", proven=False)
    guard.started("client", 0.5)
    guard.proved("client")  # its request showed the token
    guard.finished("client", 0.6)
    assert all(guard.open(k, t, "10.0.0.66", proven=False) for k, t in (("u1", 1.0), ("u2", 2.0), ("u3", 3.0)))
    guard.started("u2", 3.5)  # busy (its 401 being written): not closed for a newcomer
    assert guard.open("newcomer", 4.0, "10.0.0.3", proven=False)
    assert guard.evicted == ["u1"] and counters.unproven_closed == 1
    guard.evicted.clear()
    assert guard.open("next", 5.0, "10.0.0.4", proven=False) and guard.evicted == ["u3"]
    guard.evicted.clear()
    assert guard.open("again", 6.0, "10.0.0.5", proven=False) and guard.evicted == ["newcomer"]
    guard.evicted.clear()
    # Left: the proven client, busy u2, "next" and "again"; the oldest idle unproven one goes, never the client.
    assert guard.open("more", 7.0, "10.0.0.6", proven=False) and guard.evicted == ["next"]
    guard.evicted.clear()
    guard.started("again", 7.5)
    guard.started("more", 7.5)
    assert not guard.open("full", 8.0, "10.0.0.7", proven=False)  # only the proven and busy ones: refused
    assert counters.connections_refused == 1 and len(guard) == 4
