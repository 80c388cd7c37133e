"""A hostile node among honest ones, in the deterministic simulator.

The hostile node joins like any other (so it is admitted), then, at random
times drawn from the scenario's seed, sends honest nodes what a broken or
malicious device on the same network would: undecodable frames, frames under
another member's identity, records that claim the receiver as their source
or sit at the top of the sequence range, messages naming thousands of made-up
sources, gossip that asks for everything, introductions of nodes that do not
exist, floods of HELOs from fresh identities announcing absurd timings,
oversized bodies, and system-picture reports in another member's name or of
nodes it made up.  The honest nodes go on originating events throughout.

What must hold at the end (:func:`run_hostile_scenario`):

- nothing raised out of any honest node's state machine (the run completes);
- the honest nodes converge: each holds every honest source's records, with
  no gap, and all hold the same ones;
- no honest node holds a record that claims an honest source and was not
  originated by it;
- no honest node excluded another honest node;
- what the hostile node made each honest node hold stays bounded: sessions
  (admitted or handshaking) and sources known;
- every honest node's system picture shows the honest members and the hostile
  one and no other, none of the honest cut off or forging, and holds no
  report of an honest member that it did not make.

Pure: no sockets, no clock; a failing seed replays exactly.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass, replace

from nacl.signing import SigningKey

from .gcutil import few_collections
from .ids import NodeId
from .limits import LogLimits
from .protocol import Timing
from .protocol.logchain import GENESIS, chain_hashes, sign_head
from .protocol.logstore import MemoryStore
from .security import NodeIdentity
from .sim import ScenarioResult, SimNetwork, SimNode
from .wire import MAX_BODY, MAX_SEQ, LogRecord, PeerStat, Raws, Xmsg, encode, sign_raws

__all__ = ["ATTACKS", "HostileBounds", "attack_frames", "run_forger_scenario", "run_hostile_scenario",
           "run_sources_scenario"]


@dataclass(frozen=True)
class HostileBounds:
    """What one honest node may be made to hold, whatever the hostile node sends
    (the defaults of :mod:`huddle.limits`, with room for the honest group)."""

    sessions: int = 300  # peer sessions, admitted or handshaking
    sources: int = 5000  # sources in the log's version vector


def _json(obj: object) -> bytes:
    return json.dumps(obj, separators=(",", ":")).encode()


def _helo(endpoint: str, rng: random.Random, *, beat: float = 1.0, lost: int = 4) -> bytes:
    return _json({"version": 1, "endpoint": endpoint, "name": "intruder", "incarnation": rng.randbytes(8).hex(),
                  "reply": False, "peers": 0, "type": "standard", "beat": beat, "lost": lost})


def _fake_uuid(rng: random.Random) -> bytes:
    raw = bytearray(rng.randbytes(16))
    raw[6] = (raw[6] & 0x0F) | 0x40  # version 4: a random (legacy) id, which may say HELO unsigned in open mode
    raw[8] = (raw[8] & 0x3F) | 0x80
    return bytes(raw)


# Each attack: (rng, hostile uuid, victim uuid, the other honest uuids) -> messages, each a list of
# frames as the victim's ROUTER would receive them (identity first).
Attack = Callable[[random.Random, bytes, bytes, list[bytes]], list[list[bytes]]]


def _garbage(rng: random.Random, me: bytes, victim: bytes, others: list[bytes]) -> list[list[bytes]]:
    kinds = [b"XMSG", b"GSIP", b"HELO", b"PEER", b"RAWS", b"DMSG", b"BULK", b"ZZZZ", b"CHAT"]
    return [[me, rng.choice(kinds), rng.randbytes(rng.randrange(0, 64))] for _ in range(rng.randrange(1, 20))]


def _impersonate(rng: random.Random, me: bytes, victim: bytes, others: list[bytes]) -> list[list[bytes]]:
    """Undecodable frames under an honest member's identity: must not get that member excluded."""
    if not others:
        return []
    honest = rng.choice(others)
    return [[honest, b"XMSG", b"{not json"] for _ in range(150)]


def _own_source(rng: random.Random, me: bytes, victim: bytes, others: list[bytes]) -> list[list[bytes]]:
    """Records claiming the receiver as their source, beyond its top and at the end of the range."""
    seqs = [rng.randrange(1, 1000), MAX_SEQ]
    rows = [[victim.hex(), q, 1.0, "forged", '"not yours"', 0] for q in seqs]
    return [[me, b"XMSG", _json({"records": rows})]]


def _top_of_range(rng: random.Random, me: bytes, victim: bytes, others: list[bytes]) -> list[list[bytes]]:
    """A made-up source at the very end of the sequence range."""
    src = _fake_uuid(rng).hex()
    return [[me, b"XMSG", _json({"records": [[src, MAX_SEQ, 1.0, "x", "1", 0]]})]]


def _many_sources(rng: random.Random, me: bytes, victim: bytes, others: list[bytes]) -> list[list[bytes]]:
    """XMSGs naming thousands of made-up sources, as large as a body may be."""
    out = []
    for _ in range(2):
        rows, size = [], 20
        while True:
            row = [_fake_uuid(rng).hex(), 1, 1.0, "x", "1", 0]
            size += 60
            if size > MAX_BODY - 100:
                break
            rows.append(row)
        out.append([me, b"XMSG", _json({"records": rows})])
    return out


def _big_vv(rng: random.Random, me: bytes, victim: bytes, others: list[bytes]) -> list[list[bytes]]:
    """A GSIP claiming some 20 000 sources, each far ahead."""
    vv: dict[str, int] = {}
    size = 20
    while size < MAX_BODY - 100:
        vv[_fake_uuid(rng).hex()] = rng.randrange(1, MAX_SEQ)
        size += 55
    return [[me, b"GSIP", _json({"vv": vv})]]


def _amplify(rng: random.Random, me: bytes, victim: bytes, others: list[bytes]) -> list[list[bytes]]:
    """A small GSIP asking for everything of every honest source, many times over."""
    ask = {s.hex(): [[1, 0]] + [[1, 2000]] * 199 for s in [victim, *others]}
    return [[me, b"GSIP", _json({"vv": {}, "ask": ask})]]


def _introduce(rng: random.Random, me: bytes, victim: bytes, others: list[bytes]) -> list[list[bytes]]:
    """Introductions of nodes that do not exist, at endpoints where nobody listens."""
    return [[me, b"PEER", _json({"uuid": _fake_uuid(rng).hex(), "endpoint": f"tcp://10.66.{i // 250}.{i % 250}:1"})]
            for i in range(rng.randrange(100, 600))]


def _helo_flood(rng: random.Random, me: bytes, victim: bytes, others: list[bytes]) -> list[list[bytes]]:
    """HELO + BOUT from fresh identities announcing the longest timings a HELO may carry."""
    out = []
    for i in range(rng.randrange(100, 600)):
        ghost = _fake_uuid(rng)
        out.append([ghost, b"HELO", _helo(f"tcp://10.67.{i // 250}.{i % 250}:1", rng, beat=60.0, lost=100)])
        out.append([ghost, b"BOUT", b"sim"])
    return out


def _oversized(rng: random.Random, me: bytes, victim: bytes, others: list[bytes]) -> list[list[bytes]]:
    return [[me, b"CHAT", b"x" * (MAX_BODY + 1)], [me, b"XMSG", b"[" * 100_000]]


def _bad_records(rng: random.Random, me: bytes, victim: bytes, others: list[bytes]) -> list[list[bytes]]:
    """Records that are not valid: non-finite bodies, negative and zero sequences, lone surrogates."""
    src = _fake_uuid(rng).hex()
    bad = [[src, 1, 1.0, "x", "NaN", 0], [src, 0, 1.0, "x", "1", 0], [src, -5, 1.0, "x", "1", 0],
           [src, 1, 1.0, "x", '"\\ud800"', 0], [src, 2**64, 1.0, "x", "1", 0], [src, 1, 1.0, "", "1", 0]]
    return [[me, b"XMSG", _json({"records": [row]})] for row in bad]


def _forged_report(rng: random.Random, me: bytes, victim: bytes, others: list[bytes]) -> list[list[bytes]]:
    """System-picture reports in another member's name (cut off, forging, the highest ``seq``):
    unsigned, then signed with a key of its own and with a made-up signature; and reports of 40 nodes it made up,
    each signed with a key of its own (protocol.md 14, 14.1)."""
    sender = NodeId(me)
    out = []
    if others:
        honest = NodeId(rng.choice(others))
        lie = Raws(sender, honest, MAX_SEQ, "liar", "standard", 1.0, 4, True,
                   (PeerStat(NodeId(victim), None, None, "none"),), forged=((NodeId(victim), 9),))
        mine = NodeIdentity(_seeded_key(rng))
        out += [encode(lie), encode(sign_raws(lie, mine.public_key, mine.sign)),
                encode(sign_raws(lie, bytes(32), lambda _: bytes(64)))]
    for _ in range(40):
        ghost = NodeIdentity(_seeded_key(rng))
        made_up = Raws(ghost.node_id, ghost.node_id, MAX_SEQ, "ghost", "standard", 1.0, 4, False,
                       (PeerStat(sender, 0.1, 0.001, "alive"),))
        out.append(encode(replace(sign_raws(made_up, ghost.public_key, ghost.sign), sender=sender)))
    return out


ATTACKS: dict[str, Attack] = {
    "garbage": _garbage,
    "impersonate": _impersonate,
    "own-source": _own_source,
    "top-of-range": _top_of_range,
    "many-sources": _many_sources,
    "big-vv": _big_vv,
    "amplify": _amplify,
    "introduce": _introduce,
    "helo-flood": _helo_flood,
    "oversized": _oversized,
    "bad-records": _bad_records,
    "forged-report": _forged_report,
}


def attack_frames(name: str, rng: random.Random, me: bytes, victim: bytes, others: list[bytes]) -> list[list[bytes]]:
    return ATTACKS[name](rng, me, victim, others)


def run_hostile_scenario(
    *,
    seed: int,
    nodes: int = 5,
    events: int = 120,
    attacks: int = 40,
    settle: float = 60.0,
    bounds: HostileBounds | None = None,
) -> ScenarioResult:
    """``nodes`` honest nodes and one hostile one; ``events`` honest events and
    ``attacks`` hostile bursts at random times over a few seconds, then the
    honest nodes must settle (see the module's docstring for what is checked)."""
    with few_collections():
        return _run(seed=seed, nodes=nodes, events=events, attacks=attacks, settle=settle,
                    bounds=bounds or HostileBounds())


def _run(*, seed: int, nodes: int, events: int, attacks: int, settle: float, bounds: HostileBounds) -> ScenarioResult:
    rng = random.Random(seed)
    net = SimNetwork(seed=seed, latency=0.001 + rng.random() * 0.004)
    fast = Timing(heartbeat_interval=0.5, suspect_after=1.5, gone_after=3.0, handshake_timeout=2.0)
    honest = [net.add(f"n{i}", "sim", store=MemoryStore(), timing=fast) for i in range(nodes)]
    villain = net.add("villain", "sim", store=MemoryStore(), timing=fast)
    for i, node in enumerate([*honest[1:], villain], 1):
        other = honest[rng.randrange(min(i, nodes))]
        node.mesh.discovered(other.mesh.uuid, other.mesh.endpoint, net.now)
    net.run(3.0)
    villain_host = villain.mesh.endpoint.removeprefix("tcp://").rpartition(":")[0]
    duration = 5.0
    plan: list[tuple[float, str]] = [(rng.random() * duration, "event") for _ in range(events)]
    plan += [(rng.random() * duration, rng.choice(sorted(ATTACKS))) for _ in range(attacks)]
    plan.sort()
    start = net.now
    originated: dict[bytes, int] = {}
    used: dict[str, int] = {}
    for at, what in plan:
        net.run(max(0.0, start + at - net.now))
        if what == "event":
            node = rng.choice(honest)
            local = net.local(node)
            node.log.append(rng.choice(("score", "penalty")), json.dumps(rng.randrange(1000)), local,
                            node.mesh.mesh_time(local))
            originated[bytes(node.mesh.uuid)] = originated.get(bytes(node.mesh.uuid), 0) + 1
            continue
        victim = rng.choice(honest)
        others = [bytes(n.mesh.uuid) for n in honest if n is not victim]
        used[what] = used.get(what, 0) + 1
        for frames in attack_frames(what, rng, bytes(villain.mesh.uuid), bytes(victim.mesh.uuid), others):
            net.deliver_raw(victim.mesh.endpoint, frames, net.latency, villain_host)
    net.run(0.5)
    deadline = net.now + settle
    problems = ["not run"]
    while net.now < deadline:
        for node in honest:
            for other in honest:
                if other is not node:
                    node.mesh.discovered(other.mesh.uuid, other.mesh.endpoint, net.local(node))
        net.run(1.0)
        problems = _check(honest, originated, bounds)
        if not problems:
            break
    stats: dict[str, int] = {f"attacks_{k}": v for k, v in sorted(used.items())}
    for node in honest:
        for k, v in node.log.stats.as_dict().items():
            stats[k] = stats.get(k, 0) + v
        for k, v in node.mesh.stats.as_dict().items():
            stats[f"mesh_{k}"] = stats.get(f"mesh_{k}", 0) + v
        for k, v in node.reports.stats.as_dict().items():
            stats[k] = stats.get(k, 0) + v
    return ScenarioResult(
        seed=seed, converged=not problems, problems=problems, events=sum(originated.values()), nodes=nodes,
        sim_seconds=net.now - start, stats=stats,
        rerun=f"huddle simulate --hostile --nodes {nodes} --events {events} --attacks {attacks} --seed {seed}",
    )


def _check(honest: list[SimNode], originated: dict[bytes, int], bounds: HostileBounds, hostile: int = 1) -> list[str]:
    """``hostile``: how many hostile members the scenario runs (their own reports are in every picture)."""
    problems: list[str] = []
    uuids = {bytes(n.mesh.uuid): n.mesh.name for n in honest}
    reference: dict[tuple[bytes, int], tuple[str, str]] | None = None
    for node in honest:
        name = node.mesh.name
        for other in honest:
            if other.mesh.uuid in node.mesh.excluded:
                problems.append(f"{name} excluded honest {other.mesh.name}: {node.mesh.excluded[other.mesh.uuid]}")
            if other is not node and node.mesh._refused.get(other.mesh.uuid) == other.mesh.incarnation:
                problems.append(f"{name} refuses honest {other.mesh.name}")
        sessions = len(node.mesh._sessions)
        if sessions > bounds.sessions:
            problems.append(f"{name} holds {sessions} sessions (bound {bounds.sessions})")
        sources = len(node.log.sources)
        if sources > bounds.sources:
            problems.append(f"{name} knows {sources} sources (bound {bounds.sources})")
        store = node.store
        assert isinstance(store, MemoryStore)
        held: dict[tuple[bytes, int], tuple[str, str]] = {}
        for r in store.all_records():
            src = bytes(r.source)
            if src in uuids:
                if r.seq > originated.get(src, 0) or r.kind not in ("score", "penalty"):
                    problems.append(f"{name} holds {uuids[src]}#{r.seq} ({r.kind}), which {uuids[src]} never wrote")
                held[(src, r.seq)] = (r.kind, r.body)
        for src, top in originated.items():
            have = sum(1 for (s, _) in held if s == src)
            if have != top:
                problems.append(f"{name} holds {have} of {uuids[src]}'s {top} records")
        if reference is None:
            reference = held
        elif held != reference:
            problems.append(f"{name}'s honest records differ from {honest[0].mesh.name}'s")
        problems += _picture_problems(node, honest, hostile)
    return problems[:20]


def _picture_problems(node: SimNode, honest: list[SimNode], hostile: int = 1) -> list[str]:
    """What is wrong with ``node``'s system picture: members no node made up (the honest and the
    ``hostile`` members), no honest member cut off or forging, no report of an honest member it did not make."""
    problems = []
    made = {n.mesh.uuid: n.pictures.next_seq for n in honest}
    reports = node.pictures.reports()
    if len(set(reports) - set(made)) > hostile:
        problems.append(f"{node.mesh.name}'s picture shows {len(set(reports) - set(made))} members that are not honest")
    for origin, report in reports.items():
        if origin in made and report.seq >= made[origin]:
            problems.append(f"{node.mesh.name} holds a report of {origin.short} (seq {report.seq}) it did not make")
    for m in node.pictures.picture().members:
        if NodeId.from_hex(m["uuid"]) in made and m["health"] in ("cut-off", "forging"):
            problems.append(f"{node.mesh.name}'s picture shows honest {m['name']} {m['health']}")
    return problems


# ------------------------------------------------------------- a member that forges log records


def run_forger_scenario(*, seed: int, nodes: int = 4, events: int = 30, settle: float = 30.0) -> ScenarioResult:
    """``nodes`` honest members and one hostile member, all with keys (signed log,
    protocol.md 12.5).  Once the honest events have spread, the hostile member sends
    every honest node, for a record of another honest source: a forged one (unsigned,
    then signed with its own key) and an altered copy of the real one with its real
    head.  What must hold: every honest node kept the true record and nothing forged,
    counted the forgeries against the hostile member, and ended its incarnation at
    ``log.max-forgeries`` (3); the honest nodes still converge."""
    with few_collections():
        return _run_forger(seed=seed, nodes=nodes, events=events, settle=settle)


def _run_forger(*, seed: int, nodes: int, events: int, settle: float) -> ScenarioResult:
    rng = random.Random(seed)
    net = SimNetwork(seed=seed, latency=0.001 + rng.random() * 0.004)
    fast = Timing(heartbeat_interval=0.5, suspect_after=1.5, gone_after=3.0, handshake_timeout=2.0)
    keys = [NodeIdentity(_seeded_key(rng)) for _ in range(nodes + 1)]
    honest = [net.add(f"n{i}", "sim", uuid=k.node_id, store=MemoryStore(), timing=fast, log_signer=k)
              for i, k in enumerate(keys[:nodes])]
    villain_key = keys[nodes]
    villain = net.add("villain", "sim", uuid=villain_key.node_id, store=MemoryStore(), timing=fast,
                      log_signer=villain_key)
    for i, node in enumerate([*honest[1:], villain], 1):
        other = honest[rng.randrange(min(i, nodes))]
        node.mesh.discovered(other.mesh.uuid, other.mesh.endpoint, net.now)
    net.run(3.0)
    originated: dict[bytes, int] = {}
    for _ in range(events):
        node = rng.choice(honest)
        local = net.local(node)
        node.log.append("score", json.dumps(rng.randrange(1000)), local, node.mesh.mesh_time(local))
        originated[bytes(node.mesh.uuid)] = originated.get(bytes(node.mesh.uuid), 0) + 1
        net.run(rng.random() * 0.2)
    net.run(5.0)
    host = villain.mesh.endpoint.removeprefix("tcp://").rpartition(":")[0]
    me = villain.mesh.uuid
    vstore = villain.store
    assert isinstance(vstore, MemoryStore)
    problems: list[str] = []
    targets: list[tuple[SimNode, NodeId, int]] = []
    for victim in honest:
        others = [n for n in honest if n is not victim and originated.get(bytes(n.mesh.uuid))]
        if not others:
            continue
        source = rng.choice(others).mesh.uuid
        heads = vstore.heads_in(source, 1, originated[bytes(source)])
        if not heads:
            problems.append(f"the villain holds no head of {source.short}")
            continue
        head = rng.choice(heads)
        real = vstore.read(source, 0, head.seq)
        k = rng.randrange(len(real))
        fake = LogRecord(source, real[k].seq, real[k].timestamp, "score", json.dumps(1000 + rng.randrange(1000)))
        altered = tuple(fake if i == k else r for i, r in enumerate(real))
        forged = (fake,)  # a record claiming the source, alone
        prev = GENESIS if fake.seq == 1 else bytes(32)
        own_head = sign_head(villain_key, source, fake.seq, chain_hashes(prev, forged)[-1])
        targets.append((victim, source, fake.seq))
        for msg in (Xmsg(me, forged), Xmsg(me, altered, ((GENESIS, head),)), Xmsg(me, forged, ((prev, own_head),))):
            net.deliver_raw(victim.mesh.endpoint, encode(msg), net.latency, host)
    net.run(1.0)
    for victim in honest:
        name = victim.mesh.name
        count = victim.log.forgeries.get(me, 0)
        if count < 3:
            problems.append(f"{name} counted {count} forgeries from the villain, not 3")
        if victim.mesh._refused.get(me) != villain.mesh.incarnation:
            problems.append(f"{name} did not exclude the villain")
    deadline = net.now + settle
    check = ["not run"]
    while net.now < deadline:
        net.run(1.0)
        check = _check(honest, originated, HostileBounds())
        if not check:
            break
    problems += check
    by_id = {n.mesh.uuid: n for n in honest}
    for victim, source, seq in targets:
        true = by_id[source].log.store.read(source, seq - 1, 1)
        kept = victim.log.store.read(source, seq - 1, 1)
        if list(kept) != [replace(r, hops=kept[0].hops) for r in true] if kept else True:
            problems.append(f"{victim.mesh.name} does not hold {source.short}#{seq} as it was recorded")
    stats: dict[str, int] = {}
    for node in honest:
        for key, v in node.log.stats.as_dict().items():
            stats[key] = stats.get(key, 0) + v
    return ScenarioResult(
        seed=seed, converged=not problems, problems=problems[:20], events=sum(originated.values()), nodes=nodes,
        sim_seconds=net.now, stats=stats, rerun=f"run_forger_scenario(seed={seed}, nodes={nodes}, events={events})",
    )


def _seeded_key(rng: random.Random) -> SigningKey:
    return SigningKey(rng.randbytes(32))


# ------------------------------------------------------------- members that fill the sources limit


def run_sources_scenario(*, seed: int, nodes: int = 4, villains: int = 3, made_up: int = 40, events: int = 30,
                         settle: float = 30.0) -> ScenarioResult:
    """``nodes`` honest members and ``villains`` hostile ones, each on a host of its own, with
    ``log.max-sources`` 48 (``max-new-sources-per-peer`` 32).  Every hostile member sends every
    honest node records of ``made_up`` made-up sources of its own, validly signed (a key per
    source), until the honest nodes' tables are full; an honest newcomer joins then and
    records events.  What must hold (protocol.md 12.2, sources no one vouches for are
    reclaimable): the newcomer's events, and every honest event, reach every honest node; no
    node tracks more than 48 sources; made-up sources were evicted to make room."""
    with few_collections():
        return _run_sources(seed=seed, nodes=nodes, villains=villains, made_up=made_up, events=events,
                            settle=settle)


def _run_sources(*, seed: int, nodes: int, villains: int, made_up: int, events: int,
                 settle: float) -> ScenarioResult:
    rng = random.Random(seed)
    net = SimNetwork(seed=seed, latency=0.001 + rng.random() * 0.004)
    start = net.now
    fast = Timing(heartbeat_interval=0.5, suspect_after=1.5, gone_after=3.0, handshake_timeout=2.0)
    limits = LogLimits(max_sources=48, max_new_sources_per_peer=32, max_new_sources_per_message=64)
    honest = [net.add(f"n{i}", "sim", store=MemoryStore(), timing=fast, log_limits=limits) for i in range(nodes)]
    hostile = [net.add(f"villain{j}", "sim", store=MemoryStore(), timing=fast) for j in range(villains)]
    for i, node in enumerate([*honest[1:], *hostile], 1):
        other = honest[rng.randrange(min(i, nodes))]
        node.mesh.discovered(other.mesh.uuid, other.mesh.endpoint, net.now)
    net.run(3.0)
    originated: dict[bytes, int] = {}

    def record(node: SimNode) -> None:
        local = net.local(node)
        node.log.append("score", json.dumps(rng.randrange(1000)), local, node.mesh.mesh_time(local))
        originated[bytes(node.mesh.uuid)] = originated.get(bytes(node.mesh.uuid), 0) + 1

    for _ in range(events // 2):
        record(rng.choice(honest))
        net.run(rng.random() * 0.1)
    for villain in hostile:  # each member's made-up sources, signed, to every honest node
        host = villain.mesh.endpoint.removeprefix("tcp://").rpartition(":")[0]
        records: list[LogRecord] = []
        heads = []
        for _ in range(made_up):
            key = NodeIdentity(_seeded_key(rng))
            run = tuple(LogRecord(key.node_id, q, 1.0, "x", "1") for q in range(1, rng.randrange(2, 4)))
            records += run
            heads.append((GENESIS, sign_head(key, key.node_id, len(run), chain_hashes(GENESIS, run)[-1])))
        msg = Xmsg(villain.mesh.uuid, tuple(records), tuple(heads))
        for victim in honest:
            net.deliver_raw(victim.mesh.endpoint, encode(msg), net.latency, host)
        net.run(0.5)
    net.run(3.0)
    problems = [f"{n.mesh.name} tracks {len(n.log.sources)} sources, not the 48 of a full table"
                for n in honest if len(n.log.sources) < limits.max_sources]
    newcomer = net.add("newcomer", "sim", store=MemoryStore(), timing=fast, log_limits=limits)
    newcomer.mesh.discovered(honest[0].mesh.uuid, honest[0].mesh.endpoint, net.now)
    net.run(3.0)
    everyone = [*honest, newcomer]
    for _ in range(events - events // 2):
        record(rng.choice(everyone))
        net.run(rng.random() * 0.1)
    deadline = net.now + settle
    check = ["not run"]
    while net.now < deadline:
        net.run(1.0)
        check = _check(everyone, originated, HostileBounds(sources=limits.max_sources), hostile=villains)
        if not check:
            break
    problems += check
    stats: dict[str, int] = {}
    for node in everyone:
        for k, v in node.log.stats.as_dict().items():
            stats[k] = stats.get(k, 0) + v
    return ScenarioResult(
        seed=seed, converged=not problems, problems=problems[:20], events=sum(originated.values()),
        nodes=len(everyone), sim_seconds=net.now - start, stats=stats,
        rerun=f"run_sources_scenario(seed={seed}, nodes={nodes}, villains={villains}, made_up={made_up})",
    )
