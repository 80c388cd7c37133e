"""Guests (Noam): the codec against the document's own bytes, and the room's rules."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from huddle.guests.codec import (
    Error,
    Event,
    FrameError,
    FrameReader,
    Heartbeat,
    HeartbeatAck,
    Marco,
    Polo,
    Register,
    decode_datagram,
    decode_payload,
    encode,
    encode_datagram,
)
from huddle.guests.room import Changed, Close, Emit, Room, SendTo
from huddle.limits import GuestLimits

# The document's examples, with its typographic quotes made plain.
EVENT = b'000042["event","guest1","topic1",[1,2,"potato"]]'
HEARTBEAT = b'000022["heartbeat","guest1"]'
HEARTBEAT_ACK = b'000026["heartbeat_ack","guest1"]'
REGISTER = (b'000112["register","guest1",4423,["topic1","topic2","topic3"],[],"java","0.2",'
            b'{"heartbeat":"2","heartbeat_ack":"true"}]')
MARCO = b'["marco","guest1","myRoom","java","0.2"]'
POLO = b'["polo","myRoom","7733"]'


def test_the_documents_examples_decode_and_encode_byte_for_byte() -> None:
    reader = FrameReader()
    msgs = reader.feed(REGISTER + EVENT + HEARTBEAT)
    assert msgs == [
        Register("guest1", 4423, ("topic1", "topic2", "topic3"), (), "java", "0.2", heartbeat=2.0, heartbeat_ack=True,
                 options={"heartbeat": "2", "heartbeat_ack": "true"}),
        Event("guest1", "topic1", [1, 2, "potato"]),
        Heartbeat("guest1"),
    ]
    assert encode(Event("guest1", "topic1", [1, 2, "potato"])) == EVENT
    assert encode(Heartbeat("guest1")) == HEARTBEAT
    assert encode(HeartbeatAck("guest1")) == HEARTBEAT_ACK
    assert FrameReader().feed(HEARTBEAT_ACK) == [HeartbeatAck("guest1")]
    assert decode_datagram(MARCO) == Marco("guest1", "myRoom", "java", "0.2")
    assert decode_datagram(POLO) == Polo("myRoom", 7733)
    # The port goes out as a number, as the Noam host sends it (the Arduino lemma reads no string):
    # docs/guests.md, "What real lemmas forced".
    assert encode_datagram(Polo("myRoom", 7733)) == b'["polo","myRoom",7733]'
    assert encode_datagram(Marco("guest1", "myRoom", "java", "0.2")) == MARCO


def test_a_stream_cut_anywhere_gives_the_same_messages() -> None:
    stream = REGISTER + EVENT + HEARTBEAT + EVENT
    for cut in range(1, len(stream)):
        reader = FrameReader()
        got = reader.feed(stream[:cut]) + reader.feed(stream[cut:])
        assert [type(m).__name__ for m in got] == ["Register", "Event", "Heartbeat", "Event"], cut
    reader = FrameReader()
    one_by_one = [m for b in stream for m in reader.feed(bytes([b]))]
    assert one_by_one == FrameReader().feed(stream)


def test_length_is_counted_in_octets_of_utf8() -> None:
    data = encode(Event("gäst", "tópico", "😀"))
    assert data[:6] == b"%06d" % len(data[6:]) and int(data[:6]) > len(data[6:].decode())
    assert FrameReader().feed(data) == [Event("gäst", "tópico", "😀")]


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(),
                    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(), kids, max_size=4), max_leaves=20))
def test_any_json_value_travels_unchanged(value: object) -> None:
    assert FrameReader().feed(encode(Event("g", "t", value))) == [Event("g", "t", value)]


@pytest.mark.parametrize(("data", "complaint"), [
    (b'00004x["heartbeat","g"]', "length as 6 digits"),
    (b'abcdef', "length as 6 digits"),
    (b'000005hello', "not JSON"),
    (b'000003\xff\xfe\xfd', "not UTF-8"),
    (b'000002{}', "JSON array"),
    (b'000009["dance"]', "unknown message type 'dance'"),
    (b'000017["event","g","t"]', "'event' has 4 items, got 3"),
    (b'000019["event",5,"t",[1]]', "guest_name must be a string"),
    (b'000018["event","g","",1]', "event_name must not be empty"),
    (b'000019["heartbeat","g",1]', "'heartbeat' has 2 items"),
    (b'000040["register","g",70000,[],[],"py","1",{}]', "TCP port must be 0..65535"),
    (b'000042["register","g",1,"topic1",[],"py","1",{}]', "hears must be a list"),
    (b'000054["register","g",1,[],[],"py","1",{"heartbeat":"fast"}]', "heartbeat must be a period"),
    (b'000059["register","g",1,[],[],"py","1",{"heartbeat_ack":"maybe"}]', "heartbeat_ack must be true or false"),
    (b'000037["register","g",1,[],[],"py","1",[1]]', "options must be a JSON object"),
])
def test_bad_frames_are_refused_with_the_reason(data: bytes, complaint: str) -> None:
    assert not data[:6].isdigit() or int(data[:6]) == len(data[6:]), "the test's own prefix is right"
    with pytest.raises(FrameError, match=complaint):
        FrameReader().feed(data)


def test_a_length_over_the_limit_is_refused_before_the_message_arrives() -> None:
    with pytest.raises(FrameError, match="2000 octets is over this host's limit of 1000"):
        FrameReader(max_frame=1000).feed(b"002000[")
    with pytest.raises(ValueError, match="at most 999999"):
        encode(Event("g", "t", "x" * 1_000_000))


def test_register_without_options_is_accepted_and_options_round_trip() -> None:
    assert decode_payload(b'["register","g",0,[],["a"],"c","1"]') == Register("g", 0, (), ("a",), "c", "1")
    r = Register("g", 5, ("x",), (), "python", "1", heartbeat=0.5, heartbeat_ack=False)
    assert FrameReader().feed(encode(r))[0] == Register("g", 5, ("x",), (), "python", "1", heartbeat=0.5,
                                                        options={"heartbeat": "0.5", "heartbeat_ack": "false"})
    assert FrameReader().feed(encode(Error("bad"))) == [Error("bad")]


# ------------------------------------------------------------------ the room


def reg(name: str, hears: tuple[str, ...] = (), heartbeat: float = 0.0, ack: bool = False) -> Register:
    return Register(name, 0, hears, (), "py", "1", heartbeat=heartbeat, heartbeat_ack=ack)


def test_marco_gets_polo_for_this_room_and_grabbed_free_guests_only() -> None:
    room = Room("derby", tcp_port=7733)
    assert room.marco(Marco("g1", "derby", "java", "0.2"), "10.0.0.5", 1.0) == Polo("derby", 7733)
    assert room.marco(Marco("free1", "", "java", "0.2"), "10.0.0.6", 1.0) is None
    assert room.marco(Marco("chess1", "chess", "js", "1"), "10.0.0.7", 1.0) is None
    assert list(room.free) == ["free1"] and list(room.others) == ["chess1"]
    assert room.others["chess1"].room == "chess"
    room.grab("free1")
    assert room.marco(Marco("free1", "", "java", "0.2"), "10.0.0.6", 2.0) == Polo("derby", 7733)
    assert "free1" not in room.free
    # Nobody hears stale marcos forever.
    room.tick(100.0)
    assert not room.others
    # A node of group "" has no room: only grabbed guests come in.
    assert Room("", tcp_port=1).marco(Marco("g", "", "j", "1"), "x", 0.0) is None


def test_events_reach_every_guest_that_hears_the_topic_but_not_the_speaker() -> None:
    room = Room("derby")
    assert room.received(1, reg("a", ("score",)), 0.0) == [Changed("a", True)]
    room.received(2, reg("b", ("score", "penalty")), 0.0)
    room.received(3, reg("c", ("penalty",)), 0.0)
    assert room.received(1, Event("a", "score", 3), 1.0) == [Emit("a", "score", 3)]
    assert room.guests["a"].speaks == {"score"}
    # The group's event comes back through the log: to b (hears it), not to a (said it), not to c.
    assert room.deliver("a", "score", 3, local_speaker=True) == [SendTo("b", Event("a", "score", 3))]
    # The same name on another node is another guest: it gets it.
    assert room.deliver("a", "score", 4, local_speaker=False) == [SendTo("a", Event("a", "score", 4)),
                                                                  SendTo("b", Event("a", "score", 4))]
    assert room.hears("penalty") and not room.hears("lineup")


def test_a_silent_guest_is_fired_after_twice_its_period_and_heartbeats_are_acknowledged() -> None:
    room = Room("derby")
    room.received(1, reg("a", heartbeat=2.0, ack=True), 10.0)
    room.received(2, reg("b", heartbeat=2.0), 10.0)
    assert room.received(1, Heartbeat("a"), 11.0) == [SendTo("a", HeartbeatAck("a"))]
    assert room.received(2, Heartbeat("b"), 11.0) == []
    assert room.next_deadline() == 15.0
    assert room.tick(14.9) == []
    room.received(2, Event("b", "x", 1), 13.0)  # any message is a sign of life
    assert room.tick(15.1) == [Close(1, "silent for more than 2 x 2 s"),
                               Changed("a", False, "fired: silent for more than 2 x 2 s")]
    assert list(room.guests) == ["b"] and room.fired == 1
    assert room.tick(17.1)[1] == Changed("b", False, "fired: silent for more than 2 x 2 s")


def test_bad_conduct_gets_an_error_and_a_disconnect_and_nothing_else_changes() -> None:
    room = Room("derby")
    assert room.received(9, Event("x", "t", 1), 0.0) == [Close(9, "event before register: register first", error=True)]
    room.received(1, reg("a", ("t",)), 0.0)
    room.received(2, reg("b", ("t",)), 0.0)
    out = room.received(1, Event("b", "t", 1), 1.0)
    assert out == [Close(1, "guest_name 'b' is not the registered 'a'", error=True),
                   Changed("a", False, "bad input: guest_name 'b' is not the registered 'a'")]
    assert list(room.guests) == ["b"] and room.errors == 2
    assert room.received(2, HeartbeatAck("b"), 1.0)[0].error  # type: ignore[union-attr]


def test_a_connected_guests_name_cannot_be_taken_until_it_leaves() -> None:
    room = Room("derby")
    room.received(1, reg("a", ("t",)), 0.0)
    out = room.received(2, reg("a", ("stolen",)), 5.0)
    assert len(out) == 1 and isinstance(out[0], Close) and out[0].conn == 2 and out[0].error
    assert "the name 'a' is taken" in out[0].reason
    assert room.guests["a"].conn == 1 and room.guests["a"].hears == {"t"} and room.counters.names_taken == 1
    assert room.deliver("x", "t", 1, local_speaker=False) == [SendTo("a", Event("x", "t", 1))]
    # On its own connection a guest may register again (it updates itself).
    assert room.received(1, reg("a", ("u",)), 6.0) == [Changed("a", True)]
    assert room.guests["a"].hears == {"u"}
    # Once it has left, the name is free.
    assert room.closed(1) == [Changed("a", False, "disconnected")]
    assert room.received(3, reg("a"), 7.0) == [Changed("a", True)] and room.guests["a"].conn == 3


def limited(**kw: Any) -> Room:
    return Room("derby", limits=GuestLimits(**kw))


def test_connections_are_capped_in_total_and_per_address_and_freed_on_close() -> None:
    room = limited(max_connections=3, max_connections_per_address=2)
    assert room.opened(1, "10.0.0.1", 0.0) == [] and room.opened(2, "10.0.0.1", 0.0) == []
    out = room.opened(3, "10.0.0.1", 0.0)
    assert [(a.conn, a.error) for a in out if isinstance(a, Close)] == [(3, True)]
    assert "from one address" in out[0].reason  # type: ignore[union-attr]
    assert room.opened(4, "10.0.0.2", 0.0) == []
    out = room.opened(5, "10.0.0.3", 0.0)
    assert len(out) == 1 and "3 guest connections open" in out[0].reason  # type: ignore[union-attr]
    assert (room.counters.refused_address_full, room.counters.refused_host_full) == (1, 1)
    room.closed(1)
    room.closed(1)  # twice is harmless
    assert room.opened(6, "10.0.0.1", 0.0) == []
    assert room.opened(7, "10.0.0.1", 0.0) != []


def test_a_connection_that_does_not_register_in_time_is_closed() -> None:
    room = limited(register_timeout=10.0)
    room.opened(1, "10.0.0.1", 0.0)
    room.opened(2, "10.0.0.1", 0.0)
    room.received(2, reg("a"), 1.0)
    assert room.next_deadline() == 10.0
    assert room.tick(9.9) == []
    out = room.tick(10.1)
    assert out == [Close(1, "no register within 10 s", error=True)] and room.counters.register_timeouts == 1
    assert list(room.guests) == ["a"] and room.tick(100.0) == [], "a registered guest without heartbeats stays"


def test_a_message_begun_and_not_finished_in_time_closes_the_connection() -> None:
    room = limited(frame_timeout=30.0)
    room.opened(1, "10.0.0.1", 0.0)
    room.received(1, reg("a"), 0.0)
    assert room.partial(1, 3, 1.0) == []  # part of a message came
    assert room.partial(1, 10, 20.0) == []  # more of it: still the same message, begun at 1.0
    assert room.next_deadline() == 31.0
    assert room.tick(30.9) == []
    out = room.tick(31.1)
    assert out == [Close(1, "a message begun was not whole within 30 s", error=True),
                   Changed("a", False, "bad input: a message begun was not whole within 30 s")]
    assert room.counters.frame_timeouts == 1 and not room.guests
    # A message completed in time resets the clock.
    room.opened(2, "10.0.0.1", 40.0)
    room.partial(2, 3, 41.0)
    room.partial(2, 0, 42.0)
    room.partial(2, 5, 70.0)
    room.received(2, reg("b"), 70.0)
    assert room.tick(95.0) == []


def test_incomplete_messages_past_the_budget_close_the_biggest_holder() -> None:
    room = limited(max_buffered_bytes=1000)
    for conn in (1, 2):
        room.opened(conn, "10.0.0.1", 0.0)
    assert room.partial(1, 900, 1.0) == []
    out = room.partial(2, 200, 1.0)
    assert [(a.conn, a.error) for a in out if isinstance(a, Close)] == [(1, True)]
    assert room.counters.buffer_full == 1
    assert room.partial(2, 700, 2.0) == [], "closing 1 gave its octets back"


def test_the_marco_lists_keep_the_most_recently_heard_names() -> None:
    room = limited(max_spotted=3)
    for i in range(5):
        room.marco(Marco(f"free{i}", "", "js", "1"), "10.0.0.9", float(i))
    room.marco(Marco("free2", "", "js", "1"), "10.0.0.9", 5.0)  # heard again: now the most recent
    room.marco(Marco("free5", "", "js", "1"), "10.0.0.9", 6.0)
    assert list(room.free) == ["free4", "free2", "free5"] and room.counters.spotted_forgotten == 3
    for i in range(4):
        room.marco(Marco(f"other{i}", "chess", "js", "1"), "10.0.0.9", 7.0)
    assert len(room.others) == 3 and room.counters.spotted_forgotten == 4
    room.tick(4.0 + 60.5)  # free4 unheard for more than 60 s
    assert list(room.free) == ["free2", "free5"]
