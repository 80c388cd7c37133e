"""Hostile clients of the HTTP API: text that cannot be
encoded, loose JSON, idle and slow connections, subscribers that never read, other
web pages, and posts that would run script.  Each case is replayed against a real
node: it stays up, its memory and descriptors stay bounded, nothing is recorded for
a refused request, its honest peer still hears it, and the counter in
``GET /api/v1/node`` -> ``stats.api`` moved."""

from __future__ import annotations

import base64
import json
import os
import resource
import socket
import threading
import time
import urllib.parse
from http.client import HTTPConnection
from pathlib import Path

import pytest
from conftest import Cluster, get, http, wait_for
from hostile_kit import footprint, node_stats, still_serving

from huddle.procs import NodeProcess

pytestmark = pytest.mark.processes

MiB = 1024 * 1024


def api_stats(api: str) -> dict[str, int]:
    result: dict[str, int] = node_stats(api)["api"]
    return result


def api_stat(api: str, key: str) -> int:
    """One of ``stats.api``, or -1 while the API is full (503) or cuts the request off."""
    try:
        status, info = http(api, "/api/v1/node")
    except OSError:
        return -1
    return int(info["stats"]["api"][key]) if status == 200 else -1


def events(api: str) -> int:
    result: int = get(api, "/api/v1/log/summary")["events"]
    return result


def hostport(api: str) -> tuple[str, int]:
    u = urllib.parse.urlsplit(api)
    assert u.hostname is not None and u.port is not None
    return u.hostname, u.port


def raw(api: str, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None,
        host: str | None = None) -> tuple[int, dict[str, str], bytes]:
    """One request with exactly these headers (and ``Host``, the API's own unless given)."""
    h, p = hostport(api)
    conn = HTTPConnection(h, p, timeout=10)
    try:
        conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        conn.putheader("Host", host or f"{h}:{p}")
        for k, v in (headers or {}).items():
            conn.putheader(k, v)
        if body or method == "POST":
            conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body or None)
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def post_json(api: str, path: str, body: bytes, **headers: str) -> int:
    status, _, _ = raw(api, "POST", path, body, {"Content-Type": "application/json", **headers})
    return status


def pair(cluster: Cluster, *extra: str) -> tuple[NodeProcess, NodeProcess]:
    a = cluster.start("alice", *extra)
    b = cluster.start("bob")
    wait_for(lambda: cluster.mesh_complete([a, b]), 20, "the mesh")
    return a, b


def ws_handshake(api: str, origin: str | None = None, rcvbuf: int | None = None) -> tuple[socket.socket, int]:
    """A raw WebSocket client of /api/v1/events: the socket and the handshake's status."""
    h, p = hostport(api)
    s = socket.socket()
    if rcvbuf is not None:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.settimeout(10)
    s.connect((h, p))
    key = base64.b64encode(os.urandom(16)).decode()
    lines = ["GET /api/v1/events HTTP/1.1", f"Host: {h}:{p}", "Upgrade: websocket", "Connection: Upgrade",
             f"Sec-WebSocket-Key: {key}", "Sec-WebSocket-Version: 13"]
    if origin is not None:
        lines.append(f"Origin: {origin}")
    s.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = s.recv(1)
        if not chunk:
            break
        head += chunk
    return s, int(head.split(b" ", 2)[1])


# --------------------------------------------------------- text that cannot be encoded, loose JSON


def test_unencodable_text_and_loose_json_are_refused_before_the_node(cluster: Cluster) -> None:
    a, b = pair(cluster)
    before = footprint(a)
    b_uuid = get(b.api, "/api/v1/node")["uuid"]
    deep = b"[" * 50_000 + b"]" * 50_000
    json_cases: list[tuple[str, bytes]] = [
        ("/api/v1/events", b'{"kind": "\\ud800", "body": 1}'),
        ("/api/v1/events", b'{"kind": "k", "body": {"t": "a\\udc80b"}}'),
        ("/api/v1/events", b'{"kind": "k", "body": NaN}'),
        ("/api/v1/events", b'{"kind": "k", "body": -Infinity}'),
        ("/api/v1/events", b'{"kind": "k", "body": 1e999}'),
        ("/api/v1/events", b'{"kind": "k", "body": ' + deep + b"}"),
        ("/api/v1/chat", b'{"text": "\\ud800"}'),
        ("/api/v1/messages", b'{"to": "' + b_uuid.encode() + b'", "text": "\\ud800"}'),
        ("/api/v1/messages", b'{"to": "all", "texts": ["ok", "\\udfff"]}'),
        (f"/api/v1/peers/{b_uuid}/exclude", b'{"reason": "\\ud800"}'),
        ("/api/v1/doc/ops", deep),
        ("/api/v1/doc/ops", b'{"op": "set", "to": {"path": "venue"}, "text": "\\ud800"}'),
    ]
    for path, body in json_cases:
        assert post_json(a.api, path, body) == 400, (path, body[:60])
    n = 70_000  # under the 1 MiB body cap
    xml = b'<add period="1">' + b"<note>" * n + b"</note>" * n + b"</add>"
    status, _, answer = raw(a.api, "POST", "/api/v1/doc/ops", xml, {"Content-Type": "application/xml"})
    assert status == 400, answer[:200]
    # Nothing was recorded, nobody was excluded, and the node still serves its peer.
    assert events(a.api) == 0 and events(b.api) == 0
    assert get(a.api, "/api/v1/excluded") == []
    assert api_stats(a.api)["bad_input"] >= len(json_cases) - 1  # the text of an XML-less doc op is the doc's
    still_serving(cluster, [a, b])
    after = footprint(a)
    assert after.rss_mib < before.rss_mib + 60 and after.fds < before.fds + 20, (before, after)


# ----------------------------------------------------------------------- idle and slow connections


def test_idle_and_slow_connections_are_capped_and_timed_out(cluster: Cluster) -> None:
    a, b = pair(cluster, "--limit", "api.max-connections=64", "--limit", "api.idle-timeout=2",
                "--limit", "api.body-timeout=1",
                "--limit", "api.max-connections-per-address=1000")  # the total cap here; one address's: below
    before = footprint(a)
    log_before = a.log_path.stat().st_size
    h, p = hostport(a.api)
    flood: list[socket.socket] = []
    try:
        for i in range(300):
            s = socket.create_connection((h, p), timeout=5)
            if i % 3 == 1:  # a request head that never ends
                s.sendall(f"GET /api/v1/node HTTP/1.1\r\nHost: {h}:{p}\r\nX-Slow: ".encode())
            flood.append(s)
        # A slow loris: one octet of header every 0.3 s keeps coming, but the head never completes.
        loris = socket.create_connection((h, p), timeout=5)
        loris.sendall(b"GET /api/v1/node HTTP/1.1\r\nX-a: ")
        flood.append(loris)

        def closed_by_node(s: socket.socket) -> bool:
            s.setblocking(False)
            try:
                while True:
                    data = s.recv(65536)
                    if not data:
                        return True
            except BlockingIOError:
                return False
            except OSError:
                return True

        def loris_closed() -> bool:
            try:
                loris.send(b"a")
            except OSError:
                return True
            return closed_by_node(loris)

        wait_for(lambda: api_stat(a.api, "connections_refused") >= 200, 20, "connections past the cap refused")
        wait_for(loris_closed, 15, "the slow loris to be closed", interval=0.3)
        wait_for(lambda: all(closed_by_node(s) for s in flood[:300]), 20, "every flood connection to be closed")
        stats = api_stats(a.api)
        assert stats["idle_closed"] >= 60, stats
        # A body that stops half way: 408 after api.body-timeout, nothing recorded.
        body = socket.create_connection((h, p), timeout=5)
        flood.append(body)
        body.sendall(f"POST /api/v1/events HTTP/1.1\r\nHost: {h}:{p}\r\nContent-Type: application/json\r\n"
                     "Content-Length: 100\r\n\r\n{\"kind\": ".encode())
        answer = body.recv(200)
        assert answer.startswith(b"HTTP/1.1 408"), answer
        assert api_stats(a.api)["body_timeouts"] == 1
        assert events(a.api) == 0
    finally:
        for s in flood:
            s.close()
    still_serving(cluster, [a, b])
    wait_for(lambda: api_stats(a.api)["connections"] <= 2, 10, "the API's connections to go")
    after = footprint(a)
    assert after.rss_mib < before.rss_mib + 40 and after.fds < before.fds + 20, (before, after)
    # Refusals are logged once a minute per kind, not once per connection.
    assert a.log_path.stat().st_size - log_before < 20_000


# --------------------------------------------------------------------- subscribers that never read


def test_subscribers_that_never_read_are_dropped_by_bytes(cluster: Cluster) -> None:
    a, b = pair(cluster)
    stuck = [ws_handshake(b.api, rcvbuf=4096) for _ in range(3)]
    assert [status for _, status in stuck] == [101, 101, 101]
    honest, status = ws_handshake(b.api)
    assert status == 101
    got = [0]
    stop = threading.Event()

    def read() -> None:
        honest.settimeout(0.5)
        while not stop.is_set():
            try:
                data = honest.recv(1 << 20)
            except TimeoutError:
                continue
            except OSError:
                return
            if not data:
                return
            got[0] += len(data)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    wait_for(lambda: api_stats(b.api)["subscribers"] == 4, 10, "four subscribers")
    before = footprint(b)
    chats = 200
    text = "x" * (MiB - 1024)
    try:
        for _ in range(chats):
            status, answer = http(a.api, "/api/v1/chat", {"text": text})
            assert status == 202, answer
        wait_for(lambda: api_stats(b.api)["subscribers_dropped"] == 3, 30, "the three stuck subscribers dropped")
        wait_for(lambda: got[0] >= chats * (MiB - 1024), 60, "the honest subscriber to get every chat")
        wait_for(lambda: api_stats(b.api)["subscribers"] == 1, 20, "the stuck subscribers' connections to close")
        after = footprint(b)
        # At most 3 x api.subscriber-buffer-bytes (16 MiB) was held, and malloc keeps some of it.
        # Old code: the stuck subscribers' queues held every chat (+200 MiB here).
        assert after.rss_mib < before.rss_mib + 100, (before, after)
        assert after.fds < before.fds, (before, after)  # the three stuck connections are gone
    finally:
        stop.set()
        for s, _ in stuck:
            s.close()
        honest.close()
    still_serving(cluster, [a, b])


# ------------------------------------------------------------------ other web pages, foreign hosts


def test_other_pages_and_foreign_hosts_are_refused(cluster: Cluster, tmp_path: Path) -> None:
    conf = tmp_path / "alice.toml"
    conf.write_text('[limits.api]\nallowed-hosts = ["huddle.test"]\n')
    a, b = pair(cluster, "--config", str(conf))
    api = a.api
    own = "http://{}:{}".format(*hostport(api))
    b_uuid = get(b.api, "/api/v1/node")["uuid"]
    event = b'{"kind": "k", "body": 1}'
    # DNS rebinding: a page at evil.example whose name now points at 127.0.0.1.
    assert raw(api, "GET", "/api/v1/node", host="evil.example:80")[0] == 403
    assert raw(api, "POST", "/api/v1/events", event, {"Content-Type": "application/json"},
               host="evil.example")[0] == 403
    assert raw(api, "GET", "/api/v1/node", host="huddle.test")[0] == 200  # a configured name
    assert raw(api, "GET", "/api/v1/node", host="localhost")[0] == 200
    # Another page's writes, however they are dressed.
    assert post_json(api, "/api/v1/events", event, Origin="http://evil.example") == 403
    assert post_json(api, "/api/v1/events", event, Origin="null") == 403
    for ctype in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x"):
        assert raw(api, "POST", "/api/v1/events", event, {"Content-Type": ctype})[0] == 415, ctype
        assert raw(api, "POST", "/api/v1/doc/ops", b'<remove team="home" person="1"/>', {"Content-Type": ctype})[0] == 415
        assert raw(api, "POST", "/api/v1/posts?subject=s&mime=text/html", b"<script>1</script>",
                   {"Content-Type": ctype})[0] == 415
        assert raw(api, "POST", f"/api/v1/peers/{b_uuid}/exclude", b"", {"Content-Type": ctype})[0] == 415
    assert raw(api, "POST", "/api/v1/events", event, {})[0] == 415  # no content type: not JSON
    assert raw(api, "POST", f"/api/v1/peers/{b_uuid}/exclude", b"", {"Origin": "http://evil.example"})[0] == 403
    assert events(api) == 0 and get(api, "/api/v1/posts") == [] and get(api, "/api/v1/excluded") == []
    # The event stream: another page's WebSocket is refused; the page's own, or a script's, is not.
    for origin, expected in (("http://evil.example", 403), (own, 101), (None, 101)):
        s, status = ws_handshake(api, origin)
        s.close()
        assert status == expected, origin
    # The API's own page writes as before.
    assert post_json(api, "/api/v1/events", event, Origin=own) == 201
    stats = api_stats(api)
    assert stats["bad_host"] == 2 and stats["cross_origin"] == 4 and stats["bad_content_type"] == 13, stats
    assert get(api, "/api/v1/node")["api"] == {"url": api, "exposed": False, "token_required": False, "warning": None}
    still_serving(cluster, [a, b])


def test_a_post_is_served_as_a_sandboxed_download(cluster: Cluster) -> None:
    a, b = pair(cluster)
    page = b"<html><script>fetch('/api/v1/events', {method: 'POST'})</script></html>"
    status, _, answer = raw(a.api, "POST", "/api/v1/posts?subject=page&mime=text/html", page,
                            {"Content-Type": "application/octet-stream"})
    assert status == 201, answer
    post = json.loads(answer)
    assert post["mime_type"] == "text/html"
    wait_for(lambda: http(b.api, f"/api/v1/posts/{post['id']}")[0] == 200, 30, "the post to reach bob")
    for node in (a, b):
        status, headers, content = raw(node.api, "GET", f"/api/v1/posts/{post['id']}/content")
        assert (status, content) == (200, page)
        assert headers["content-type"].startswith("text/html")
        assert headers["content-disposition"] == "attachment"
        assert headers["x-content-type-options"] == "nosniff"
        assert headers["content-security-policy"].startswith("sandbox")
    still_serving(cluster, [a, b])


def test_refusals_do_not_reach_the_log_even_in_bulk(cluster: Cluster) -> None:
    """A bounded burst of refused writes: counted, nothing recorded, the node's log quiet."""
    a, b = pair(cluster)
    log_before = a.log_path.stat().st_size
    t0 = time.monotonic()
    for _ in range(200):
        assert post_json(a.api, "/api/v1/events", b'{"kind": "k", "body": NaN}', Origin="http://evil.example") == 403
    assert time.monotonic() - t0 < 60
    assert api_stats(a.api)["cross_origin"] == 200 and events(a.api) == 0
    assert a.log_path.stat().st_size - log_before < 2_000
    still_serving(cluster, [a, b])



# --------------------------------------------------------- Range headers


def test_a_bad_range_gets_416_and_no_traceback(cluster: Cluster) -> None:
    """A malformed Range, several ranges, or one past the end: 416 with ``Content-Range:
    bytes */SIZE``, counted, nothing in the log; a good range still gets its 206."""
    a = cluster.start("alice", beacon=False)
    _, _, whole = raw(a.api, "GET", "/guest.js")
    bad = ["bytes=abc", "bytes=5-3", "bytes=0-1,2-3", "bytes=99999999-", "bytes=", "items=0-1", "bytes=1e3-",
           "bytes=\u0663-\u0664".encode().decode("latin-1"), "bytes=+1-2"]
    for rng in bad:
        for path in ("/guest.js", "/", "/bout"):
            status, headers, _ = raw(a.api, "GET", path, headers={"Range": rng})
            assert status == 416 and headers["content-range"].startswith("bytes */"), (rng, path, status)
    status, headers, body = raw(a.api, "GET", "/guest.js", headers={"Range": "bytes=2-5"})
    assert (status, body, headers["content-range"]) == (206, whole[2:6], f"bytes 2-5/{len(whole)}")
    status, _, body = raw(a.api, "GET", "/guest.js", headers={"Range": "bytes=-3"})
    assert (status, body) == (206, whole[-3:])
    log = a.log_path.read_text(errors="replace")
    assert "Traceback" not in log and "Unhandled exception" not in log, log[-3000:]
    assert api_stats(a.api)["bad_range"] == 3 * len(bad)


# --------------------------------------------------------- one address's share


def idle_api_connections(api: str, count: int, sources: list[str]) -> list[socket.socket]:
    """``count`` connections to the API from each of ``sources`` that never send a request."""
    h, p = hostport(api)
    return [socket.create_connection((h, p), 10, (src, 0)) for src in sources for _ in range(count)]


def api_stats_from(api: str, source: str, token: str | None = None) -> dict[str, int] | None:
    """``stats.api`` asked on a connection from ``source`` (None: not answered 200)."""
    h, p = hostport(api)
    conn = HTTPConnection(h, p, timeout=10, source_address=(source, 0))
    try:
        conn.request("GET", "/api/v1/node", headers={"Authorization": f"Bearer {token}"} if token else {})
        resp = conn.getresponse()
        result: dict[str, int] = json.loads(resp.read())["stats"]["api"]
        return result if resp.status == 200 else None
    except (OSError, ValueError, KeyError):
        return None
    finally:
        conn.close()


def test_idle_connections_from_one_address_leave_the_others_their_share(cluster: Cluster) -> None:
    """300 idle connections from 127.0.0.1 (without a per-address cap, 256 made the API answer everyone 503): at
    most api.max-connections-per-address (64) are taken; a client at 127.0.0.2 is answered."""
    a = cluster.start("alice", beacon=False)
    before = footprint(a)
    idle = idle_api_connections(a.api, 300, ["127.0.0.1"])
    try:
        counted = wait_for(lambda: api_stats_from(a.api, "127.0.0.2"), 10, "an answer at 127.0.0.2")
        wait_for(lambda: (api_stats_from(a.api, "127.0.0.2") or {}).get("address_refused", 0) >= 300 - 64, 10,
                 "the connections past 64 refused")
        assert counted["connections_refused"] == 0, counted
        assert footprint(a).fds <= before.fds + 64 + 10
    finally:
        for s in idle:
            s.close()


def test_off_loopback_connections_that_never_show_the_token_hold_no_one_elses_share(cluster: Cluster) -> None:
    """The API requires its token (bound to 127.0.0.2, forced): five addresses open 64 idle
    connections each, more than api.max-connections (256).  Those that never showed the token
    make room: the oldest is closed for each newcomer, and a client with the token is answered."""
    a = cluster.start("alice", "--api", "127.0.0.2:0", "--api-require-token", beacon=False)
    token = (a.data_dir / "api-token").read_text().strip()
    idle = idle_api_connections(a.api, 64, [f"127.0.0.{i}" for i in range(3, 8)])
    try:
        counted = wait_for(lambda: api_stats_from(a.api, "127.0.0.1", token), 10, "an answer to the honest client")
        assert counted["unproven_closed"] >= 320 - 256 and counted["connections_refused"] == 0, counted
    finally:
        for s in idle:
            s.close()


def test_out_of_descriptors_the_node_counts_refused_accepts_and_prints_no_traceback(cluster: Cluster) -> None:
    """With its descriptor limit lowered to what it has open plus 4, 100 connections to the API
    find the node unable to accept them (EMFILE).  asyncio used to log a traceback for each try, on
    every port; the node counts them (stats.accept_failures), says them in one line a minute, and
    serves again once descriptors are free."""
    a = cluster.start("alice", beacon=False)
    before = footprint(a)
    log_before = a.log_path.stat().st_size
    _, hard = resource.prlimit(a.proc.pid, resource.RLIMIT_NOFILE)
    resource.prlimit(a.proc.pid, resource.RLIMIT_NOFILE, (before.fds + 4, hard))
    idle: list[socket.socket] = []
    try:
        idle = idle_api_connections(a.api, 20, [f"127.0.0.{i}" for i in range(3, 8)])
        wait_for(lambda: b"could not be accepted" in a.log_path.read_bytes()[log_before:], 10, "the line about it")
    finally:
        for s in idle:
            s.close()
        resource.prlimit(a.proc.pid, resource.RLIMIT_NOFILE, (65536 if hard == resource.RLIM_INFINITY else hard, hard))
    stats = wait_for(lambda: api_stats_from(a.api, "127.0.0.2") and node_stats(a.api), 10, "the API to answer again")
    assert stats["accept_failures"] >= 1, stats
    log = a.log_path.read_bytes()[log_before:]
    assert b"Traceback" not in log and log.count(b"could not be accepted") == 1, log[-3000:]
    footprint(a)
