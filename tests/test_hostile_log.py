"""What a hostile peer can send the audit log, against real node processes: a raw peer
that completes the handshake (HELO, BOUT) and then sends hostile XMSGs and
GSIPs, and hostile events through the API.  Each case asserts the node is
still up within a stated footprint, nothing was recorded for a refused input,
the right counter moved, and the honest peers still exchange events."""

from __future__ import annotations

import json
import signal
import socket
import urllib.request
from typing import Any

import pytest
import zmq
from conftest import Cluster, free_port, get, http, room_key, wait_for
from hostile_kit import RawPeer, footprint, node_stats, still_serving

from huddle.procs import NodeProcess

pytestmark = pytest.mark.processes

MAX_SEQ = 2**63 - 1
RSS_MIB = 300  # a node that held what these cases send would be far past this
FDS = 200


class LogPeer(RawPeer):
    """A raw peer that sends log records."""

    def xmsg(self, rows: list[list[Any]]) -> None:
        self.send(b"XMSG", {"records": rows})

    def mark(self, api: str, source: str, seq: int) -> None:
        """Send a valid record and wait until the node holds it: what was sent before is handled."""
        self.xmsg([row(source, seq)])
        wait_for(lambda: summary(api)["version_vector"].get(source) == seq, 20, "the node to handle the raw peer's XMSGs")


def row(source: str, seq: int, body: str = "1", kind: str = "k") -> list[Any]:
    return [source, seq, 1.0, kind, body, 0]


def made_up(i: int) -> str:
    return (i + 1).to_bytes(16, "big").hex()


def summary(api: str) -> dict[str, Any]:
    result: dict[str, Any] = get(api, "/api/v1/log/summary")
    return result


def log_stats(api: str) -> dict[str, int]:
    result: dict[str, int] = summary(api)["stats"]
    return result


def emitted(node: NodeProcess, value: Any) -> dict[str, Any]:
    status, body = http(node.api, "/api/v1/events", {"kind": "honest", "body": value})
    assert status == 201, (status, body)
    result: dict[str, Any] = body
    return result


def replicates(cluster: Cluster, nodes: list[NodeProcess]) -> None:
    """The honest peers still exchange events (and chat)."""
    still_serving(cluster, nodes)
    rec = emitted(nodes[0], "after")
    for n in nodes[1:]:
        wait_for(lambda n=n: summary(n.api)["version_vector"].get(rec["source"], 0) >= rec["seq"], 20,
                 f"the event to reach {n.name}")


def healthy(node: NodeProcess) -> None:
    fp = footprint(node)
    assert fp.rss_mib < RSS_MIB and fp.fds < FDS, fp


@pytest.fixture(autouse=True)
def _open_for_raw_peers(cluster: Cluster, request: pytest.FixtureRequest) -> None:
    """A test with a raw ZeroMQ context joins a raw peer (LogPeer) that speaks NULL ZMTP to the
    mesh socket: its nodes run open (--open).  The others run secured."""
    if "ctx" in request.fixturenames:
        cluster.secure = False


@pytest.fixture
def pair(cluster: Cluster) -> list[NodeProcess]:
    nodes = [cluster.start(n) for n in ("alice", "bob")]
    wait_for(lambda: cluster.mesh_complete(nodes), 20, "mesh")
    return nodes


def admitted(ctx: zmq.Context[zmq.Socket[bytes]], node: NodeProcess) -> LogPeer:
    raw = LogPeer(ctx, get(node.api, "/api/v1/node")["endpoint"])
    raw.wait_admitted(node.api)
    return raw


# ------------------------------------------------------------------------ records valid only whole


@pytest.mark.parametrize("payload", [
    b'{"kind":"k\\ud800","body":1}',  # a lone surrogate in the kind
    b'{"kind":"k","body":"\\ud800"}',  # ... in the body
    b'{"kind":"k","body":NaN}',  # not JSON, though Python's parser takes it
    b'{"kind":"k","body":[' + b",".join([b'""'] * 300_000) + b"]}",  # 900 KB that doubles when escaped
], ids=["surrogate-kind", "surrogate-body", "nan", "empty-strings"])
def test_an_event_that_cannot_be_recorded_whole_is_refused_and_the_node_goes_on(
    cluster: Cluster, pair: list[NodeProcess], payload: bytes,
) -> None:
    alice = pair[0]
    status, body = http(alice.api, "/api/v1/events", raw=payload)
    assert status == 400, (status, body)
    assert summary(alice.api)["events"] == 0  # nothing recorded
    # Counted once, by whichever door refused it: the API's strict JSON (surrogates, NaN) or the log.
    assert log_stats(alice.api)["events_refused"] + node_stats(alice.api)["api"]["bad_input"] == 1
    assert emitted(alice, 1)["seq"] == 1  # the refused one took no sequence
    replicates(cluster, pair)
    driver = node_stats(alice.api)["driver"]
    assert (driver["action_failures"], driver["receive_failures"], driver["tick_failures"]) == (0, 0, 0), driver
    healthy(alice)


def guest_frame(message: list[Any]) -> bytes:
    body = json.dumps(message, separators=(",", ":")).encode()  # a lone surrogate goes escaped
    return b"%06d" % len(body) + body


def test_a_guest_event_that_cannot_be_recorded_whole_is_refused(cluster: Cluster) -> None:
    alice = cluster.start("alice", "--guests", "--guest-port", "0", "--guest-ws-port", "0",
                          "--guest-marco-port", str(free_port(socket.SOCK_DGRAM)))
    bob = cluster.start("bob")
    wait_for(lambda: cluster.mesh_complete([alice, bob]), 20, "mesh")
    port = get(alice.api, "/api/v1/node")["guests"]["tcp_port"]
    with socket.create_server(("127.0.0.1", 0)) as server, \
            socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        server.settimeout(10)
        sock.sendall(guest_frame(["register", "g", server.getsockname()[1], [], [], "raw", "0.1",
                                  {"room_key": room_key()}]))
        back, _ = server.accept()  # the host connects back
        with back:
            sock.sendall(guest_frame(["event", "g", "k\ud800", 1]) + guest_frame(["event", "g", "k", "\udc00"]))
            # The guest codec refuses the first (the guest is told why and disconnected): the log never sees it.
            wait_for(lambda: get(alice.api, "/api/v1/guests")["stats"]["bad_text"] >= 1, 10,
                     "the guest's event to be refused")
    assert summary(alice.api)["events"] == 0
    replicates(cluster, [alice, bob])
    healthy(alice)


def test_records_a_peer_sends_that_are_not_valid_whole_are_malformed(
    cluster: Cluster, pair: list[NodeProcess], ctx: zmq.Context[zmq.Socket[bytes]],
) -> None:
    alice = pair[0]
    raw = admitted(ctx, alice)
    src = made_up(7)
    before = node_stats(alice.api)["decode_errors"]
    raw.send(b"XMSG", f'{{"records":[["{src}",1,1.0,"k","1",0],["{src}",2,1.0,"k\\ud800","1",0]]}}'.encode())
    raw.send(b"XMSG", f'{{"records":[["{src}",1,1.0,"k","NaN",0]]}}'.encode())
    raw.send(b"XMSG", f'{{"records":[["{src}",1,1.0,"k","[1,-Infinity]",0]]}}'.encode())
    raw.send(b"XMSG", f'{{"records":[["{src}",1,1.0,"k","\\"\\\\ud800\\"",0]]}}'.encode())
    wait_for(lambda: node_stats(alice.api)["decode_errors"] >= before + 4, 10, "the bad XMSGs to be counted")
    assert src not in summary(alice.api)["version_vector"]  # nothing of those XMSGs recorded
    with urllib.request.urlopen(alice.api + "/api/v1/log?limit=1000", timeout=10) as resp:
        status, text = resp.status, resp.read()
    json.loads(text, parse_constant=lambda c: pytest.fail(f"/api/v1/log has {c}"))
    assert status == 200
    raw.leave()
    replicates(cluster, pair)
    healthy(alice)


# -------------------------------------------------------------------------------------- our source


def test_records_in_the_receivers_name_are_dropped_and_its_sequence_stays_its_own(
    cluster: Cluster, pair: list[NodeProcess], ctx: zmq.Context[zmq.Socket[bytes]],
) -> None:
    alice, bob = pair
    me = get(alice.api, "/api/v1/node")["uuid"]
    assert emitted(alice, 0)["seq"] == 1
    raw = admitted(ctx, alice)
    raw.xmsg([row(me, 3, '"forged"')])
    raw.xmsg([row(me, MAX_SEQ, '"forged"')])
    raw.send(b"GSIP", {"vv": {me: MAX_SEQ}})
    raw.mark(alice.api, made_up(1), 1)
    assert summary(alice.api)["version_vector"][me] == 1 and summary(alice.api)["gaps"] == {}
    assert emitted(alice, 2)["seq"] == 2  # reaches bob (checked below) like any event
    assert log_stats(alice.api)["own_refused"] == 2 and log_stats(alice.api)["own_claims"] >= 1
    raw.leave()
    replicates(cluster, pair)
    wait_for(lambda: summary(bob.api)["version_vector"].get(me) == 3, 10, "alice's events to reach bob")
    # A restart on the same log: still its own sequence.
    alice.signal(signal.SIGTERM)
    alice.wait(20)
    alice = cluster.start("alice")
    assert emitted(alice, 4)["seq"] == 4
    replicates(cluster, [alice, bob])
    healthy(alice)


# ----------------------------------------------------------------------------- sources and vectors


def test_made_up_sources_are_bounded_and_the_node_survives_restarts(
    cluster: Cluster, pair: list[NodeProcess], ctx: zmq.Context[zmq.Socket[bytes]],
) -> None:
    alice, bob = pair
    raw = admitted(ctx, alice)
    raw.mark(alice.api, made_up(999_999), 1)
    for part in range(2):  # 15 000 made-up sources in two XMSGs
        raw.xmsg([row(made_up(part * 7_500 + i), 1) for i in range(7_500)])
    for part in range(2):  # then GSIPs claiming 20 000 more
        raw.send(b"GSIP", {"vv": {made_up(100_000 + part * 10_000 + i): 1000 for i in range(10_000)}})
    raw.mark(alice.api, made_up(999_999), 2)
    limit = 1024  # log.max-new-sources-per-peer
    assert len(summary(alice.api)["version_vector"]) <= limit + 2
    assert log_stats(alice.api)["sources_refused"] == 15_000 + 20_000 - (limit - 1)
    raw.leave()
    replicates(cluster, pair)
    healthy(alice)
    # It restarts on that log and meets its peers again, as often as it likes.
    for _ in range(2):
        alice.signal(signal.SIGTERM)
        alice.wait(20)
        alice = cluster.start("alice")
        replicates(cluster, [alice, bob])
    healthy(alice)


# ----------------------------------------------------------------------------------- amplification


def test_one_small_gsip_is_answered_with_one_window(
    cluster: Cluster, pair: list[NodeProcess], ctx: zmq.Context[zmq.Socket[bytes]],
) -> None:
    alice = pair[0]
    raw = admitted(ctx, alice)
    src = made_up(42)
    held = 40_000
    for first in range(1, held + 1, 4_000):  # alice holds 40 000 records of a source of ours
        raw.xmsg([row(src, q) for q in range(first, first + 4_000)])
    wait_for(lambda: summary(alice.api)["version_vector"].get(src) == held, 30, "alice to hold the records")
    raw.drain()
    gsip = {"vv": {}, "ask": {src: [[q, q + 1999] for q in range(1, 400_000, 2_000)]}}
    assert len(json.dumps(gsip, separators=(",", ":"))) < 10_000
    raw.send(b"GSIP", gsip)
    got = 0
    for _, kind, body in raw.drain(1000):
        if kind == b"XMSG":
            got += len(json.loads(body)["records"])
    assert got == 20_000  # log.serve-records, not the 40 000 asked for and held
    assert log_stats(alice.api)["serve_trimmed"] == 1
    raw.leave()
    replicates(cluster, pair)
    healthy(alice)


def test_made_up_sources_filling_the_limit_do_not_keep_a_newcomer_out_before_or_after_a_restart(
    cluster: Cluster, ctx: zmq.Context[zmq.Socket[bytes]],
) -> None:
    """Reclaimable sources (protocol.md 12.2): made-up sources fill log.max-sources (here 40); a newcomer's events are
    still stored, in the place of made-up ones, and again after alice restarts on that log."""
    limit = ("--limit", "log.max-sources=40")
    alice = cluster.start("alice", *limit)
    raw = admitted(ctx, alice)
    raw.xmsg([row(made_up(i), 1) for i in range(100)])
    wait_for(lambda: len(summary(alice.api)["version_vector"]) == 39, 20, "the made-up sources to fill the table")
    assert log_stats(alice.api)["sources_refused"] == 100 - 39
    raw.leave()
    for name in ("carol", "dave"):  # a newcomer; then alice restarts on the full log and meets another
        newcomer = cluster.start(name)
        pair = [alice, newcomer]
        wait_for(lambda pair=pair: cluster.mesh_complete(pair), 20, "mesh")
        rec = emitted(newcomer, name)
        wait_for(lambda api=alice.api, rec=rec: summary(api)["version_vector"].get(rec["source"]) == rec["seq"], 20,
                 f"{name}'s event to reach alice")
        assert len(summary(alice.api)["version_vector"]) <= 40 and log_stats(alice.api)["sources_evicted"] >= 1
        newcomer.signal(signal.SIGTERM)
        newcomer.wait(20)
        alice.signal(signal.SIGTERM)
        alice.wait(20)
        alice = cluster.start("alice", *limit)
    healthy(alice)
