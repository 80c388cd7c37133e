"""Fuzz the API's write endpoints with JSON-ish bodies against one real node: every
answer is a 2xx or a 4xx, never a 500 (a 500 means a bug), and the node stays up."""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from collections.abc import Iterator
from http.client import HTTPConnection
from pathlib import Path
from typing import Any

import pytest
from conftest import Cluster
from hostile_kit import footprint
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from huddle.procs import NodeProcess

pytestmark = pytest.mark.processes

PEER = "0" * 31 + "1"
ENDPOINTS = [
    "/api/v1/events", "/api/v1/chat", "/api/v1/messages", f"/api/v1/peers/{PEER}/exclude", "/api/v1/doc/ops",
    "/api/v1/bout/start", "/api/v1/bout/stop", "/api/v1/guests/x/grab", "/api/v1/posts?subject=fuzz",
]
KEYS = ["kind", "body", "text", "to", "texts", "base64", "wait", "reason", "op", "children", "attribute", "value",
        "xml", "ops", "eid", "period", "jam", "team", "person", "path"]
ODD_TEXT = ["\ud800", "a\udfffb", "", "all", PEER, "doc", "x" * 300, "<add/>", "\x00", "\U0001f600", "1e999"]

texts = st.text(max_size=12) | st.sampled_from(ODD_TEXT)
leaves = (st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=True, allow_infinity=True)
          | texts)
values = st.recursive(leaves, lambda c: st.lists(c, max_size=4) | st.dictionaries(st.sampled_from(KEYS) | texts, c,
                                                                                max_size=4), max_leaves=16)
bodies = (st.dictionaries(st.sampled_from(KEYS), values, max_size=4).map(lambda d: json.dumps(d).encode())
          | values.map(lambda v: json.dumps(v).encode())
          | st.binary(max_size=64)
          | st.integers(1, 3000).map(lambda n: b"[" * n + b"]" * n))
ctypes = st.sampled_from(["application/json", "application/json", "application/xml", "application/octet-stream",
                          "text/plain", ""])


@pytest.fixture(scope="module")
def node(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NodeProcess]:
    cluster = Cluster(Path(tmp_path_factory.mktemp("fuzz")))
    try:
        yield cluster.start("fuzz", beacon=False)
    finally:
        cluster.close()


def post(api: str, path: str, body: bytes, ctype: str) -> int:
    u = urllib.parse.urlsplit(api)
    conn = HTTPConnection(u.hostname or "", u.port, timeout=30)
    try:
        headers = {"Content-Type": ctype} if ctype else {}
        conn.request("POST", path, body=body, headers=headers)
        resp = conn.getresponse()
        resp.read()
        return resp.status
    finally:
        conn.close()


def test_any_body_to_any_write_endpoint_is_never_a_500(node: NodeProcess) -> None:
    seen: dict[int, int] = {}

    @settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(path=st.sampled_from(ENDPOINTS), body=bodies, ctype=ctypes)
    def one(path: str, body: bytes, ctype: str) -> None:
        status = post(node.api, path, body, ctype)
        seen[status] = seen.get(status, 0) + 1
        assert 200 <= status < 500, (path, body[:200], ctype, status)

    one()
    footprint(node)  # still up
    info: Any = json.loads(urllib.request.urlopen(node.api + "/api/v1/node", timeout=10).read())
    assert info["stats"]["api"]["bad_input"] > 0 and info["stats"]["api"]["bad_content_type"] > 0
    assert any(200 <= s < 300 for s in seen) and any(s == 400 for s in seen), seen
