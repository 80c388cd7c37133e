"""Noam lemmas as their authors wrote them: every message in the exact octets each lemma
library (and the Noam host) sends, decoded and re-encoded by huddle; lengths counted in
octets and in characters; the JavaScript lemma's WebSocket; the Arduino lemma's heartbeat.

The golden octets are copied from the libraries' own tests or built exactly as their
builders build them (the comment beside each names the repository and path)."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from conftest import free_port
from hypothesis import given
from hypothesis import strategies as st

from huddle.guests.codec import (
    Event,
    FrameError,
    FrameReader,
    Heartbeat,
    HeartbeatAck,
    Marco,
    Message,
    Polo,
    Register,
    character_ends,
    decode_datagram,
    encode,
    encode_datagram,
)
from huddle.guests.room import Changed, Close, Room, SendTo
from huddle.guests.server import GuestServer, GuestSettings, in_code_units

# --------------------------------------------------------------------------- golden octets

# (what the lemma sends, what huddle reads, what huddle writes back out for it)
GOLDEN_FRAMES: list[tuple[str, bytes, Message, bytes]] = [
    # noam-io/lemma-javascript, spec/MessageBuilderSpec.js ("builds a registration message"), with the
    # prefix src/EventSender.js puts before it (zeroPad(message.length, 6)); 7 items, no options.
    ("js register", b'000070["register","lemma_id_1",0,["headlights"],["speed","rpm"],"web","1.0"]',
     Register("lemma_id_1", 0, ("headlights",), ("speed", "rpm"), "web", "1.0"),
     b'000070["register","lemma_id_1",0,["headlights"],["speed","rpm"],"web","1.0"]'),
    # noam-io/lemma-javascript, spec/MessageBuilderSpec.js ("builds an event message") + src/EventSender.js
    ("js event", b'000049["event","lemma_id_1","event_name","event_value"]',
     Event("lemma_id_1", "event_name", "event_value"),
     b'000049["event","lemma_id_1","event_name","event_value"]'),
    # noam-io/lemma-ruby, spec/noam_lemma/message/register_spec.rb (DEVICE_TYPE and VERSION from
    # lib/noam_lemma.rb: "ruby-script", "0.2.1"); 7 items.
    ("ruby register", b'000066["register","an_id",1234,["e1"],["e2","e3"],"ruby-script","0.2.1"]',
     Register("an_id", 1234, ("e1",), ("e2", "e3"), "ruby-script", "0.2.1"),
     b'000066["register","an_id",1234,["e1"],["e2","e3"],"ruby-script","0.2.1"]'),
    # noam-io/lemma-ruby, spec/noam_lemma/message/playable_spec.rb
    ("ruby event", b'000032["event","host","event","value"]', Event("host", "event", "value"),
     b'000032["event","host","event","value"]'),
    # noam-io/lemma-java, lemma-lib/src/main/java/lemma/library/MessageBuilder.java (buildRegister: dialect
    # "java", version "1.1", no options) framed by .../TCPProtocol.java ("%06d%s", message.length()).
    ("java register", b'000055["register","lemma_id",5555,["e1"],["e2"],"java","1.1"]',
     Register("lemma_id", 5555, ("e1",), ("e2",), "java", "1.1"),
     b'000055["register","lemma_id",5555,["e1"],["e2"],"java","1.1"]'),
    # noam-io/lemma-java, lemma-lib/src/test/java/lemma/library/MessageBuilderTest.java + TCPProtocol.java
    ("java event", b'000037["event","lemma_id","eventName",11.5]', Event("lemma_id", "eventName", 11.5),
     b'000037["event","lemma_id","eventName",11.5]'),
    # noam-io/lemma-arduino, LemmaLibTests/MessageBuilderTests.cpp (createRegistrationMessageBatch1) framed by
    # LemmaLib/TcpProtocol.cpp ("%06d%s", strlen): 8 items, the options {"heartbeat": 3.003} as aJson
    # prints a float.  Re-encoded, the number is written as Python writes it (3.003): the same value.
    ("arduino register",
     b'000114["register","spallaId",123,["event1","event2"],["event3","event4","event5"],"arduino","0.3",'
     b'{"heartbeat":3.00300}]',
     Register("spallaId", 123, ("event1", "event2"), ("event3", "event4", "event5"), "arduino", "0.3",
              heartbeat=3.003, options={"heartbeat": 3.003}),
     b'000112["register","spallaId",123,["event1","event2"],["event3","event4","event5"],"arduino","0.3",'
     b'{"heartbeat":3.003}]'),
    # noam-io/lemma-arduino, LemmaLibTests/MessageBuilderTests.cpp (createsIntMessageBatch1, createFloatMessage)
    ("arduino event", b'000031["event","spallaId","speed",65]', Event("spallaId", "speed", 65),
     b'000031["event","spallaId","speed",65]'),
    ("arduino float event", b'000037["event","spallaId","speed",23.01000]', Event("spallaId", "speed", 23.01),
     b'000034["event","spallaId","speed",23.01]'),
    # noam-io/lemma-arduino, LemmaLib/MessageBuilder.cpp (buildHeartbeat) + LemmaLib/TcpProtocol.cpp
    ("arduino heartbeat", b'000024["heartbeat","spallaId"]', Heartbeat("spallaId"), b'000024["heartbeat","spallaId"]'),
    # noam-io/host, lib/noam/messages.rb (build_heartbeat_ack) framed by lib/noam_server/ear.rb
    # ("%06d%s" % [data.bytesize, data]): what a host sends a guest that asked for acknowledgements.
    ("host heartbeat_ack", b'000028["heartbeat_ack","spallaId"]', HeartbeatAck("spallaId"),
     b'000028["heartbeat_ack","spallaId"]'),
    # noam-io/host, lib/noam/messages.rb (build_event) + lib/noam_server/ear.rb
    ("host event", b'000032["event","host","event","value"]', Event("host", "event", "value"),
     b'000032["event","host","event","value"]'),
]

GOLDEN_DATAGRAMS: list[tuple[str, bytes, Marco | Polo, bytes]] = [
    # noam-io/lemma-javascript, spec/MessageBuilderSpec.js ("builds a marco message")
    ("js marco", b'["marco","lemma_id_1","Desired Room","node.js","1.1"]',
     Marco("lemma_id_1", "Desired Room", "node.js", "1.1"), b'["marco","lemma_id_1","Desired Room","node.js","1.1"]'),
    # noam-io/lemma-ruby, lib/noam_lemma/message/marco.rb (noam_encode) with lib/noam_lemma.rb's constants
    ("ruby marco", b'["marco","Test Lemma","test_room","ruby-script","0.2.1"]',
     Marco("Test Lemma", "test_room", "ruby-script", "0.2.1"),
     b'["marco","Test Lemma","test_room","ruby-script","0.2.1"]'),
    # noam-io/lemma-java, lemma-lib/src/test/java/lemma/library/MessageBuilderTest.java
    ("java marco", b'["marco","lemma_id","Room Name","java","1.1"]', Marco("lemma_id", "Room Name", "java", "1.1"),
     b'["marco","lemma_id","Room Name","java","1.1"]'),
    # noam-io/lemma-arduino, LemmaLib/HostLocater.cpp (snprintf "[\"marco\", \"%s\", \"%s\", \"ard_mega\", \"1.1\"]"):
    # spaces after the commas; huddle writes compact JSON.
    ("arduino marco", b'["marco", "spallaId", "myRoom", "ard_mega", "1.1"]',
     Marco("spallaId", "myRoom", "ard_mega", "1.1"), b'["marco","spallaId","myRoom","ard_mega","1.1"]'),
    # noam-io/host, lib/noam/messages.rb (build_polo): the port a number (the document's example has "7733")
    ("host polo", b'["polo","myRoom",7733]', Polo("myRoom", 7733), b'["polo","myRoom",7733]'),
    # the Noam document's own polo, port as a string: read, and written back as the host writes it
    ("document polo", b'["polo","myRoom","7733"]', Polo("myRoom", 7733), b'["polo","myRoom",7733]'),
]


@pytest.mark.parametrize(("sent", "read", "written"), [g[1:] for g in GOLDEN_FRAMES], ids=[g[0] for g in GOLDEN_FRAMES])
def test_each_lemmas_messages_decode_and_re_encode(sent: bytes, read: Message, written: bytes) -> None:
    reader = FrameReader()
    assert reader.feed(sent) == [read] and reader.pending == 0
    assert encode(read) == written
    assert FrameReader().feed(written) == [read]


@pytest.mark.parametrize(("sent", "read", "written"), [g[1:] for g in GOLDEN_DATAGRAMS],
                         ids=[g[0] for g in GOLDEN_DATAGRAMS])
def test_each_lemmas_marco_and_the_hosts_polo_decode_and_re_encode(sent: bytes, read: Marco | Polo,
                                                                    written: bytes) -> None:
    assert decode_datagram(sent) == read
    assert encode_datagram(read) == written
    assert decode_datagram(written) == read


def test_the_golden_lemma_messages_travel_as_one_stream_cut_anywhere() -> None:
    stream = b"".join(g[1] for g in GOLDEN_FRAMES)
    whole = FrameReader().feed(stream)
    assert whole == [g[2] for g in GOLDEN_FRAMES]
    for cut in range(1, len(stream), 7):
        reader = FrameReader()
        assert reader.feed(stream[:cut]) + reader.feed(stream[cut:]) == whole, cut


# --------------------------------------------------------------------------- octets or characters

TEXT = "Grüße, 😀 café"  # two-octet, four-octet (two UTF-16 units) and ASCII characters


def lemma_frame(message: list[Any], counts: str) -> bytes:
    """``message`` framed as a lemma frames it: JSON as the lemmas write it (compact, non-ASCII
    as is: JSON.stringify, Ruby's to_json, org.json), the length counted in ``counts``."""
    text = json.dumps(message, ensure_ascii=False, separators=(",", ":"))
    length = {"octets": len(text.encode()),  # noam-io/host lib/noam_server/ear.rb (bytesize), lemma-arduino strlen
              "utf16": len(text.encode("utf-16-le")) // 2,  # lemma-javascript EventSender.js, lemma-java TCPProtocol.java
              "chars": len(text)}[counts]  # lemma-ruby lib/noam_lemma/message/playable.rb (String#length)
    return b"%06d" % length + text.encode()


@pytest.mark.parametrize("counts", ["octets", "utf16", "chars"])
def test_non_ascii_payloads_are_read_whatever_the_length_counts(counts: str) -> None:
    register = lemma_frame(["register", "lémma", 0, ["score"], [], "web", "1.0"], counts)
    event = lemma_frame(["event", "lémma", "score", TEXT], counts)
    stream = register + event + lemma_frame(["heartbeat", "lémma"], counts) + event
    want = [Register("lémma", 0, ("score",), (), "web", "1.0"), Event("lémma", "score", TEXT), Heartbeat("lémma"),
            Event("lémma", "score", TEXT)]
    reader = FrameReader()
    assert reader.feed(stream) == want and reader.pending == 0
    assert reader.by_characters == (0 if counts == "octets" else 4)
    one_by_one = FrameReader()
    assert [m for b in stream for m in one_by_one.feed(bytes([b]))] == want


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(),
                    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(), kids, max_size=4), max_leaves=20),
       st.sampled_from(["octets", "utf16", "chars"]), st.integers(min_value=1, max_value=200))
def test_any_value_in_any_count_is_read_back_from_a_stream_cut_anywhere(value: object, counts: str, cut: int) -> None:
    try:
        event = lemma_frame(["event", "g", "t", value], counts)
    except UnicodeEncodeError:  # a lone surrogate: not text a lemma can send (refused elsewhere)
        return
    stream = event + lemma_frame(["heartbeat", "g"], counts) + event
    reader = FrameReader()
    got = reader.feed(stream[:cut]) + reader.feed(stream[cut:])
    assert got == [Event("g", "t", value), Heartbeat("g"), Event("g", "t", value)] and reader.pending == 0


def test_the_readings_are_told_apart_by_where_the_json_ends() -> None:
    text = json.dumps(["event", "g", "t", TEXT], ensure_ascii=False, separators=(",", ":"))
    data = text.encode()
    units, chars = len(text.encode("utf-16-le")) // 2, len(text)
    assert len(data) > units > chars  # the three readings differ for this text
    assert character_ends(data, units) == (len(data), None)  # units: the whole; as many characters: more than there is
    assert character_ends(data, chars) == (len(text[:-1].encode()), len(data))
    assert character_ends("a😀".encode(), 2) == (None, 5)  # two units end inside the emoji's surrogate pair


@pytest.mark.parametrize("data", [
    lemma_frame(["event", "g", "t", TEXT], "chars")[:6].replace(b"0000", b"0001", 1)
    + lemma_frame(["event", "g", "t", TEXT], "chars")[6:] + b"x" * 200,  # too long under every reading
    b"%06d" % (len(lemma_frame(["event", "g", "t", TEXT], "octets")) - 6 - 8)
    + lemma_frame(["event", "g", "t", TEXT], "octets")[6:] + b"0" * 200,  # too short under every reading
    b"000010[\"\xc3\xa9\xff\xfe\"]" + b"0" * 20,  # not UTF-8
    b"000005" + "[\"é\"".encode() + b"]" * 20,  # a character count that ends where the JSON does not
])
def test_a_length_wrong_under_every_reading_is_refused(data: bytes) -> None:
    with pytest.raises(FrameError):
        FrameReader(max_frame=120).feed(data)


def test_a_character_length_is_bounded_by_the_octet_limit() -> None:
    # 50 characters of four octets each: 200 octets, over a 120-octet limit; refused once that many are held.
    text = json.dumps(["event", "g", "t", "😀" * 50], ensure_ascii=False, separators=(",", ":"))
    reader = FrameReader(max_frame=120)
    data = b"%06d" % len(text) + text.encode()
    with pytest.raises(FrameError, match="nor when it counts characters"):
        for i in range(0, len(data), 16):
            reader.feed(data[i:i + 16])
    assert reader.pending <= 120 + 6 + 16


def test_what_goes_to_a_websocket_guest_counts_utf16_units_as_javascript_reads() -> None:
    data = encode(Event("host", "score", TEXT))
    sent = in_code_units(data)
    assert int(sent[:6]) == len(sent[6:].encode("utf-16-le")) // 2 < int(data[:6])
    assert js_tcp_reader([sent[:3], sent[3:20], sent[20:] + in_code_units(encode(Heartbeat("x")))]) == [
        ["event", "host", "score", TEXT], ["heartbeat", "x"]]
    assert in_code_units(encode(Heartbeat("x"))) == encode(Heartbeat("x")).decode()  # ASCII: the same


def js_tcp_reader(frames: list[str]) -> list[Any]:
    """What noam-io/lemma-javascript's src/TcpReader.js does with the WebSocket messages it gets:
    concatenates them as JavaScript strings and slices by the prefix, in UTF-16 code units."""
    buffer = ""
    out = []
    for frame in frames:
        buffer += frame
        units = buffer.encode("utf-16-le")
        while len(units) >= 12 and len(units) >= 12 + 2 * int(units[:12].decode("utf-16-le")):
            size = int(units[:12].decode("utf-16-le"))
            out.append(json.loads(units[12:12 + 2 * size].decode("utf-16-le")))
            units = units[12 + 2 * size:]
        buffer = units.decode("utf-16-le")
    return out


# --------------------------------------------------------------------------- the heartbeat option


def test_the_arduino_lemmas_heartbeat_is_honoured_and_a_silent_one_dropped() -> None:
    room = Room("myRoom")
    arduino = GOLDEN_FRAMES[6][1]
    (register,) = FrameReader().feed(arduino)
    assert isinstance(register, Register) and register.heartbeat == 3.003 and not register.heartbeat_ack
    room.received(1, register, 100.0)
    # As the Noam host: an acknowledgement only for a guest that asked ("heartbeat_ack": true,
    # noam-io/host lib/noam_server/player.rb send_heartbeat_acks?); the Arduino lemma does not ask.
    assert room.received(1, Heartbeat("spallaId"), 103.0) == []
    assert room.next_deadline() == pytest.approx(103.0 + 2 * 3.003)
    assert room.tick(109.0) == []
    fired = room.tick(109.1)
    assert fired[0] == Close(1, "silent for more than 2 x 3.003 s")
    assert fired[1] == Changed("spallaId", False, "fired: silent for more than 2 x 3.003 s")
    assert "spallaId" not in room.guests


def test_a_guest_that_asks_for_acknowledgements_gets_the_hosts_frame() -> None:
    room = Room("myRoom")
    (register,) = FrameReader().feed(lemma_frame(
        ["register", "spallaId", 0, [], [], "arduino", "0.3", {"heartbeat": 3.003, "heartbeat_ack": True}], "octets"))
    room.received(1, register, 0.0)
    (ack,) = room.received(1, Heartbeat("spallaId"), 1.0)
    assert isinstance(ack, SendTo) and encode(ack.message) == GOLDEN_FRAMES[10][1]  # noam-io/host's octets


# --------------------------------------------------------------------------- on the wire


def serve(said: list[tuple[str, str, Any]]) -> GuestServer:
    """A host alone in its group: what a guest says is recorded (``said``) and comes back to
    the room as the group's event, as a node does it."""
    server: GuestServer

    def on_event(guest: str, topic: str, value: Any) -> None:
        said.append((guest, topic, value))
        server.deliver(guest, topic, value, local_speaker=True)

    server = GuestServer(Room("myRoom"), GuestSettings(host="127.0.0.1", marco_port=0, tcp_port=0, ws_port=0),
                         on_event=on_event)
    return server


def run(server: GuestServer, body: Callable[[GuestServer], Awaitable[None]]) -> None:
    async def main() -> None:
        await server.start()
        try:
            await body(server)
        finally:
            await server.close()

    asyncio.run(main())


async def until(condition: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, what
        await asyncio.sleep(0.01)


def test_the_javascript_lemma_on_websocket_and_the_ruby_lemma_on_tcp_hear_each_other() -> None:
    """The JS lemma's own path (/websocket), its 7-item register and its UTF-16 counts; the Ruby
    lemma's character counts on TCP; both ways, with non-ASCII text."""
    import aiohttp

    said: list[tuple[str, str, Any]] = []

    async def body(server: GuestServer) -> None:
        # noam-io/lemma-javascript src/Lemma.js: new WebSocket('ws://' + host + ':' + port + '/websocket')
        async with aiohttp.ClientSession() as session, \
                session.ws_connect(f"ws://127.0.0.1:{server.ws_port}/websocket") as ws:
            await ws.send_str(lemma_frame(["register", "js", 0, ["score"], ["score"], "web", "1.0"], "utf16").decode())
            reader, writer = await asyncio.open_connection("127.0.0.1", server.tcp_port)
            writer.write(lemma_frame(["register", "rb", 0, ["score"], ["score"], "ruby-script", "0.2.1"], "chars"))
            await until(lambda: set(server.room.guests) == {"js", "rb"}, "both registered")
            await ws.send_str(lemma_frame(["event", "js", "score", TEXT], "utf16").decode())
            got = await asyncio.wait_for(reader.readexactly(6), 10)
            payload = await asyncio.wait_for(reader.readexactly(int(got)), 10)  # octets to a TCP guest
            assert json.loads(payload) == ["event", "js", "score", TEXT]
            writer.write(lemma_frame(["event", "rb", "score", TEXT + "!"], "chars"))
            frame = await ws.receive(timeout=10)
            assert js_tcp_reader([frame.data]) == [["event", "rb", "score", TEXT + "!"]]
            writer.close()
        assert said == [("js", "score", TEXT), ("rb", "score", TEXT + "!")]
        assert server.stats["lengths_in_characters"] == 2  # the two events (the registers are ASCII)
        assert server.stats["bad_frames"] == 0

    run(serve(said), body)


def test_a_length_and_its_message_as_two_websocket_messages_are_taken_as_one() -> None:
    """The Noam host writes the length and the JSON as two WebSocket messages
    (noam-io/host lib/noam_server/web_socket_ear.rb); a guest doing the same is understood."""
    import aiohttp

    said: list[tuple[str, str, Any]] = []

    async def body(server: GuestServer) -> None:
        async with aiohttp.ClientSession() as session, session.ws_connect(f"ws://127.0.0.1:{server.ws_port}/") as ws:
            for message in (["register", "two", 0, [], ["t"], "web", "1.0"], ["event", "two", "t", TEXT]):
                framed = lemma_frame(message, "octets").decode()
                await ws.send_str(framed[:6])
                await ws.send_str(framed[6:])
            await until(lambda: said == [("two", "t", TEXT)], "the event arrived")
            await ws.send_str("000010")
            await ws.send_str("000010")  # two lengths in a row: refused
            error = await ws.receive(timeout=10)
            assert "6 digits" in json.loads(error.data[6:])[1] or "prefix" in json.loads(error.data[6:])[1]
        assert server.stats["bad_frames"] == 1

    run(serve(said), body)


def test_wrong_lengths_malformed_registers_and_floods_leave_the_host_up_and_counted() -> None:
    said: list[tuple[str, str, Any]] = []
    marco_port = free_port(socket.SOCK_DGRAM)
    bad = [
        b'000005["register","x",0,[],[],"web","1.0"]',  # too short, ASCII: every reading agrees
        b"000040" + '["register","é",0,[],[],"w","1"]'.encode() + b"0" * 40,  # wrong under every reading
        lemma_frame(["register", "x", 0, [], [], "web"], "chars"),  # 6 items
        lemma_frame(["register", "x", 0, [], [], "web", "1.0", {"heartbeat": "often"}], "chars"),
        lemma_frame(["register", "x", "port", [], [], "web", "1.0"], "chars"),
        lemma_frame(["register", "x", 0, [], [], "web", "1.0", []], "chars"),
        b"999999[",  # over the limit below
    ]

    async def body(server: GuestServer) -> None:
        for data in bad:
            reader, writer = await asyncio.open_connection("127.0.0.1", server.tcp_port)
            writer.write(data)
            head = await asyncio.wait_for(reader.readexactly(6), 10)
            assert json.loads(await reader.readexactly(int(head)))[0] == "error"
            assert await asyncio.wait_for(reader.read(), 10) == b""  # closed
            writer.close()
        # A flood of marcos, as lemmas write them and otherwise: each lemma's gets one polo, a number port.
        loop = asyncio.get_running_loop()
        polos: list[bytes] = []

        class Catch(asyncio.DatagramProtocol):
            def datagram_received(self, data: bytes, addr: tuple[str | Any, int]) -> None:
                polos.append(data)

        transport, _ = await loop.create_datagram_endpoint(Catch, local_addr=("127.0.0.1", 0))
        marcos = [g[1] for g in GOLDEN_DATAGRAMS if g[0] == "arduino marco"] * 50 + [b"\xff" * 100, b"[1,2", b"{}"] * 300
        for i, data in enumerate(marcos, 1):
            transport.sendto(data, ("127.0.0.1", marco_port))
            if i % 50 == 0:  # in bursts the socket buffers hold: a datagram dropped would prove nothing here
                await until(lambda n=i: server.counters.marcos >= n, "every marco heard")
        await until(lambda: len(polos) == 50, "one polo per room marco")
        transport.close()
        assert set(polos) == {b'["polo","myRoom",%d]' % server.tcp_port}
        assert server.counters.bad_datagrams == 900
        assert server.stats["bad_frames"] == len(bad)
        assert not server.room.guests and not said
        # ... and the host still takes a lemma.
        reader, writer = await asyncio.open_connection("127.0.0.1", server.tcp_port)
        writer.write(GOLDEN_FRAMES[0][1])  # the JS lemma's register (port 0: no connection back)
        await until(lambda: "lemma_id_1" in server.room.guests, "a good lemma registered")
        writer.close()

    server = GuestServer(Room("myRoom"), GuestSettings(host="127.0.0.1", marco_port=marco_port, tcp_port=0,
                                                       ws_port=0, max_frame=4096),
                         on_event=lambda g, t, v: said.append((g, t, v)))
    run(server, body)


def test_an_arduino_lemma_that_stops_beating_is_dropped_and_its_connections_closed() -> None:
    """The Arduino lemma's own octets over TCP: its 8-item register (heartbeat 3.003 s) naming
    its own port, which the host connects back to; heartbeats get no answer (it asked for
    none); once it falls silent for 2 x 3.003 s on the host's clock it is fired."""
    said: list[tuple[str, str, Any]] = []
    now = [1000.0]

    async def body(server: GuestServer) -> None:
        backs: list[asyncio.StreamReader] = []

        async def accepted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            backs.append(reader)

        own = await asyncio.start_server(accepted, "127.0.0.1", 0)
        port = own.sockets[0].getsockname()[1]
        # noam-io/lemma-arduino MessageBuilder.cpp + TcpProtocol.cpp, with this lemma's port
        body = (b'["register","spallaId",%d,["event1","event2"],["event3","event4","event5"],"arduino","0.3",'
                b'{"heartbeat":3.00300}]' % port)
        reader, writer = await asyncio.open_connection("127.0.0.1", server.tcp_port)
        writer.write(b"%06d" % len(body) + body)
        await until(lambda: bool(backs), "the host connected back to the lemma's port")
        for _ in range(3):
            now[0] += 3.003
            writer.write(GOLDEN_FRAMES[9][1])  # its heartbeat, every 3.003 s
            await until(lambda: server.room.guests["spallaId"].last_heard == now[0], "the heartbeat heard")
        assert "spallaId" in server.room.guests
        now[0] += 2 * 3.003 + 0.01  # silent
        await until(lambda: "spallaId" not in server.room.guests, "the silent lemma fired")
        assert await asyncio.wait_for(backs[0].read(), 10) == b""  # nothing was sent it (no acks), then closed
        assert await asyncio.wait_for(reader.read(), 10) == b""  # and its own connection closed: it marcos again
        assert server.room.fired == 1
        writer.close()
        own.close()

    server = GuestServer(Room("myRoom"), GuestSettings(host="127.0.0.1", marco_port=0, tcp_port=0, ws_port=0),
                         on_event=lambda g, t, v: said.append((g, t, v)), clock=lambda: now[0])
    run(server, body)


def test_a_node_whose_websocket_port_is_not_8089_says_the_javascript_lemma_will_not_find_it(
        caplog: pytest.LogCaptureFixture) -> None:
    async def body(server: GuestServer) -> None:
        assert server.ws_port != 8089

    with caplog.at_level("INFO", logger="huddle.guests"):
        run(serve([]), body)
    notes = [r.getMessage() for r in caplog.records if "8089" in r.getMessage()]
    assert len(notes) == 1 and "JavaScript lemma connects to port 8089 only" in notes[0]
