"""Hypothesis strategies of every wire message type, one per class of ``huddle.wire.SPECS``.

``STRATEGIES`` maps each message class to a strategy of valid messages of it;
tests/test_wire_table.py fails when a type of the table has none, and round-trips
each (``decode(encode(m)) == m``).  ``messages`` draws from all of them.  A new type:
its strategy here (tests/ is on the path, as for hostile_kit).
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

from huddle import NodeId
from huddle.wire import (
    MAX_SEQ,
    PEER_STATES,
    Beat,
    Bulk,
    Chat,
    Dack,
    Dmsg,
    Gbye,
    Group,
    Gsip,
    Helo,
    LogHead,
    LogRecord,
    Members,
    Peer,
    PeerStat,
    Raws,
    Time,
    Xmsg,
    extension_problem,
    sign_raws,
)

node_ids = st.binary(min_size=16, max_size=16).map(NodeId)
hosts = st.sampled_from(["127.0.0.1", "10.99.0.3", "192.168.1.250", "laptop-7.local"])
endpoints = st.builds(lambda h, p: f"tcp://{h}:{p}", hosts, st.integers(1, 65535))
incarnations = st.binary(min_size=8, max_size=8).map(bytes.hex)
texts = st.text(max_size=300)
names = st.text(min_size=1, max_size=60)
finite = st.floats(allow_nan=False, allow_infinity=False, width=64)
seconds = st.none() | st.floats(0, 1e9, allow_nan=False)
counts = st.integers(0, MAX_SEQ)
node_types = st.sampled_from(["laptop", "pi-3", "relay_2"])
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=20),
    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=8), c, max_size=4),
    max_leaves=10,
)
records = st.builds(
    LogRecord, source=node_ids, seq=st.integers(1, 2**63 - 1), timestamp=finite,
    kind=st.text(min_size=1, max_size=30),
    body=json_values.map(lambda v: json.dumps(v, sort_keys=True, separators=(",", ":"), ensure_ascii=False)),
    hops=st.integers(0, 100),
)
ranges = st.lists(
    st.integers(1, 10**9).flatmap(lambda a: st.tuples(st.just(a), st.sampled_from([0, a]) | st.integers(a, a + 1000))),
    min_size=1, max_size=4,
).map(tuple)
# A node's tags (protocol.md 4.1, "Tags"): within their bounds, none often.
tag_maps = st.dictionaries(st.from_regex(r"[a-z0-9][a-z0-9._-]{0,31}", fullmatch=True),
                           st.text(max_size=16).filter(str.isprintable), max_size=16)
# Announced timing: a heartbeat interval and the beats that may be lost, both or neither.
timings = st.just((0.0, 0)) | st.tuples(st.floats(0.01, 60.0), st.integers(1, 100))


@st.composite
def helos(draw: st.DrawFn) -> Helo:
    beat, lost = draw(timings)
    signed = draw(st.booleans())
    return Helo(
        draw(node_ids), endpoint=draw(endpoints), name=draw(names), incarnation=draw(incarnations),
        reply=draw(st.booleans()), peers=draw(st.integers(0, 1000)), version=draw(st.integers(0, 5)),
        node_type=draw(st.just("") | node_types), beat=beat, lost=lost, rate=draw(st.integers(0, 2**40)),
        guests=draw(st.integers(0, 65535)), deltas=draw(st.booleans()), tags=draw(tag_maps),
        key=draw(st.binary(min_size=32, max_size=32)) if signed else b"",
        sig=draw(st.binary(min_size=64, max_size=64)) if signed else b"",
        at=draw(st.integers(0, 2**53 - 1)) if signed else 0,
        to=draw(st.none() | node_ids) if signed else None,
    )


@st.composite
def xmsgs(draw: st.DrawFn) -> Xmsg:
    rows = draw(st.lists(records, min_size=1, max_size=5).map(tuple))
    sources = sorted({r.source for r in rows})
    signed = draw(st.lists(st.sampled_from(sources), unique=True, max_size=len(sources)))
    heads = tuple(
        (draw(st.binary(min_size=32, max_size=32)),
         LogHead(source, draw(st.integers(1, MAX_SEQ)), draw(st.binary(min_size=32, max_size=32)),
                 draw(st.binary(min_size=64, max_size=64)), draw(st.binary(min_size=32, max_size=32))))
        for source in signed)
    return Xmsg(draw(node_ids), rows, heads)


peer_stats = st.builds(
    PeerStat, peer=node_ids, heard=seconds, rtt=seconds, state=st.sampled_from(PEER_STATES),
    msgs_in=counts, msgs_out=counts, bytes_in=counts, bytes_out=counts, sent=counts, retrans=counts, queued=counts,
)


# A report's extension map (protocol.md 14.1): features' flat facts, within the bounds.
fact_names = st.from_regex(r"[a-z][a-z0-9_-]{0,31}", fullmatch=True)
fact_values = (st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | finite | st.text(max_size=20)
               .filter(lambda t: extension_problem({"a": {"b": t}}) is None))
extensions = st.dictionaries(fact_names, st.dictionaries(fact_names, fact_values, max_size=4), max_size=4).filter(
    lambda ext: extension_problem(ext) is None)


@st.composite
def raws(draw: st.DrawFn) -> Raws:
    """A report, full or a delta (rows changed, peers gone), signed by its origin or not."""
    seq = draw(st.integers(1, MAX_SEQ))
    rows = tuple(draw(st.lists(peer_stats, max_size=6, unique_by=lambda p: p.peer)))
    delta = seq > 1 and draw(st.booleans())
    gone: tuple[NodeId, ...] = ()
    if delta:
        listed = {p.peer for p in rows}
        gone = tuple(draw(st.lists(node_ids.filter(lambda n: n not in listed), unique=True, max_size=4)))
    report = Raws(
        draw(node_ids), origin=draw(node_ids), seq=seq, name=draw(names), node_type=draw(node_types),
        beat=draw(st.floats(0.01, 60.0)), lost=draw(st.integers(1, 100)), cut_off=draw(st.booleans()), peers=rows,
        forged=tuple(draw(st.dictionaries(node_ids, st.integers(1, MAX_SEQ), max_size=3)).items()),
        base=draw(st.integers(1, seq - 1)) if delta else None, gone=gone, ext=draw(extensions), tags=draw(tag_maps),
    )
    if not draw(st.booleans()):
        return report
    signature = draw(st.binary(min_size=64, max_size=64))
    return sign_raws(report, draw(st.binary(min_size=32, max_size=32)), lambda _signed: signature)


@st.composite
def dmsgs(draw: st.DrawFn) -> Dmsg:
    count = draw(st.integers(1, 2**20))
    return Dmsg(draw(node_ids), draw(st.integers(1, MAX_SEQ)), draw(st.integers(1, MAX_SEQ)),
                draw(st.integers(0, count - 1)), count, draw(st.binary(max_size=200)))


STRATEGIES: dict[type[Any], st.SearchStrategy[Any]] = {
    Helo: helos(),
    Peer: st.builds(Peer, sender=node_ids, peer=node_ids, endpoint=endpoints),
    Members: st.builds(Members, sender=node_ids, reply=st.booleans(), members=st.lists(
        st.tuples(node_ids, endpoints, incarnations), max_size=5).map(tuple)),
    Group: st.builds(Group, sender=node_ids, group=st.text(max_size=80)),
    Gbye: st.builds(Gbye, sender=node_ids, reason=texts),
    Beat: st.builds(Beat, sender=node_ids),
    Time: st.builds(Time, sender=node_ids, t0=finite, t1=st.none() | finite),
    Raws: raws(),
    Gsip: st.builds(Gsip, sender=node_ids,
                    vv=st.dictionaries(node_ids, st.integers(0, 2**63 - 1), max_size=5).map(lambda d: tuple(d.items())),
                    ask=st.dictionaries(node_ids, ranges, max_size=3).map(lambda d: tuple(d.items()))),
    Xmsg: xmsgs(),
    Chat: st.builds(Chat, sender=node_ids, text=texts),
    Dmsg: dmsgs(),
    Dack: st.builds(Dack, sender=node_ids, upto=counts),
    Bulk: st.builds(Bulk, sender=node_ids, head=st.binary(min_size=1, max_size=255), data=st.binary(max_size=2000)),
}

messages = st.one_of(*STRATEGIES.values())
