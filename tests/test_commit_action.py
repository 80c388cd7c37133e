"""The log's commit is an action the driver carries out (protocol/events.py ``Commit``): the
replicator stages and never commits itself; the driver commits before any send that follows,
so this node's own records leave only once durable (log/store.py: synchronous=FULL)."""

from __future__ import annotations

import time
from collections.abc import Sequence

from test_own_sequence import View

from huddle import NodeId
from huddle.driver import MeshDriver
from huddle.protocol import Action, Commit, Notify, Send
from huddle.protocol.logstore import MemoryStore, canonical_json
from huddle.protocol.replication import Replicator
from huddle.security import NodeIdentity
from huddle.sim import SimNetwork
from huddle.wire import LogHead, LogRecord, Xmsg, decode

ALICE = NodeIdentity.generate()
A, B = ALICE.node_id, NodeId(bytes(range(16)))
Call = tuple[str, object]  # ("stage", first seq) | ("commit", None) | ("send", XMSG's last seq)


class RecordingStore(MemoryStore):
    """A store that writes into ``calls`` what it stages and when it commits."""

    def __init__(self, calls: list[Call]) -> None:
        super().__init__()
        self.calls = calls

    def stage(self, records: Sequence[LogRecord], received_from: NodeId | None, received_at: float,
              chain: Sequence[bytes] | None = None) -> None:
        self.calls.append(("stage", records[0].seq))
        super().stage(records, received_from, received_at, chain)

    def commit(self) -> None:
        self.calls.append(("commit", None))
        super().commit()


class FailingStore(RecordingStore):
    def commit(self) -> None:
        raise OSError("disk full")


class OneService:
    """The mesh as the driver sees it, hosting the replicator alone."""

    def __init__(self, replicator: Replicator) -> None:
        self.replicator = replicator

    def take_actions(self) -> list[Action]:
        return list(self.replicator.take_actions())

    def next_deadline(self, now: float) -> float:
        return self.replicator.next_deadline(now)


class Transport:
    """Writes each XMSG it sends into the same ``calls`` as the store."""

    def __init__(self, calls: list[Call]) -> None:
        self.calls = calls

    def send(self, conn: int, frames: list[bytes]) -> bool:
        if frames[0] == b"XMSG":
            msg = decode([bytes(A), *frames])
            assert isinstance(msg, Xmsg)
            self.calls.append(("send", msg.records[-1].seq))
        return True


def origin(store: MemoryStore) -> Replicator:
    """Alice's replicator with Bob admitted (so her new records are pushed to him live)."""
    r = Replicator(A, store, now=0.0, signer=ALICE)
    r.attach(View())  # type: ignore[arg-type]
    r.peer_up(B, 1, 0.0)
    return r


def driven(replicator: Replicator, calls: list[Call], driver: MeshDriver | None = None) -> MeshDriver:
    driver = driver or MeshDriver(time.monotonic, lambda event: None)
    driver.mesh = OneService(replicator)  # type: ignore[assignment]
    driver.transport = Transport(calls)  # type: ignore[assignment]
    driver.execute()  # Bob's welcome GSIP
    calls.clear()
    return driver


def sent_before_durable(calls: list[Call]) -> list[int]:
    """The sequences of own records sent before a commit that followed their staging."""
    staged: list[int] = []  # staged, not committed yet
    early = []
    for what, arg in calls:
        if what == "stage":
            staged.append(int(arg))  # type: ignore[call-overload]
        elif what == "commit":
            staged.clear()
        elif what == "send" and any(first <= int(arg) for first in staged):  # type: ignore[call-overload]
            early.append(int(arg))  # type: ignore[call-overload]
    return early


def append(r: Replicator, n: int) -> None:
    r.append_many([("k", canonical_json({"i": i})) for i in range(n)], 1.0, 1.0, canonical=True)


def test_the_replicator_hands_out_its_commit_first_and_commits_nothing_itself() -> None:
    calls: list[Call] = []
    r = origin(RecordingStore(calls))
    r.take_actions()
    calls.clear()
    append(r, 3)
    actions = r.take_actions()
    assert ("commit", None) not in calls  # the core staged the records and their head, and did no I/O
    assert actions[0] == Commit(r.store)
    assert [type(a) for a in actions[1:]] == [Notify, Send]  # LogAppended, then the live XMSG to Bob
    assert r.take_actions() == []  # nothing staged since: no commit


def test_the_driver_commits_own_records_before_it_sends_them() -> None:
    calls: list[Call] = []
    r = origin(RecordingStore(calls))
    driver = driven(r, calls)
    for n in (3, 3, 600):
        append(r, n)
        driver.execute()
    assert [c for c in calls if c[0] != "stage"] == [
        ("commit", None), ("send", 3), ("commit", None), ("send", 6),
        ("commit", None), ("send", 506), ("send", 606)]  # 600 records in two signed batches
    assert sent_before_durable(calls) == []


class SendsFirst(MeshDriver):
    """A driver that would carry out its sends before the commits among its actions."""

    def _carry_out(self, actions: list[Action], transport: object) -> None:
        sends = [a for a in actions if isinstance(a, Send)]
        super()._carry_out([*sends, *(a for a in actions if not isinstance(a, Send))], transport)  # type: ignore[arg-type]


def test_the_order_check_catches_a_driver_that_sends_first() -> None:
    calls: list[Call] = []
    r = origin(RecordingStore(calls))
    driver = driven(r, calls, SendsFirst(time.monotonic, lambda event: None))
    append(r, 3)
    driver.execute()
    assert sent_before_durable(calls) == [3]


def test_a_commit_that_fails_stops_the_sends_after_it() -> None:
    calls: list[Call] = []
    r = origin(FailingStore(calls))
    driver = driven(r, calls)  # Bob vouched for: a commit that failed already
    before = driver.stats.action_failures
    append(r, 3)
    driver.execute()
    assert not [c for c in calls if c[0] == "send"]  # not durable: not sent
    assert driver.stats.action_failures == before + 1


def test_records_taken_in_are_committed_before_the_sends_after_them() -> None:
    """Received records and the GSIP that acknowledges them: the commit comes first too."""
    calls: list[Call] = []
    bob = NodeIdentity.generate()
    r = Replicator(bob.node_id, RecordingStore(calls), now=0.0, signer=bob)
    r.attach(View())  # type: ignore[arg-type]
    r.peer_up(A, 1, 0.0)
    r.take_actions()
    alice = origin(MemoryStore())
    append(alice, 3)
    (live,) = [a.message for a in alice.take_actions() if isinstance(a, Send)]
    assert isinstance(live, Xmsg) and all(isinstance(h, LogHead) for _, h in live.heads)
    r.receive(A, live, 1.0)
    actions = r.take_actions()
    assert actions[0] == Commit(r.store) and ("commit", None) not in calls


def test_the_simulator_carries_out_the_commit() -> None:
    net = SimNetwork()
    a, b = net.add("a", "g", log=True), net.add("b", "g", log=True)
    b.mesh.discovered(a.mesh.uuid, a.mesh.endpoint, net.now)
    assert net.settle(2.0, lambda: len(a.mesh.alive_peers()) == 1)
    now = net.local(a)
    a.log.append_many([("k", canonical_json(i)) for i in range(5)], now, a.mesh.mesh_time(now))
    net.run(0.5)
    assert isinstance(a.store, MemoryStore) and isinstance(b.store, MemoryStore)
    assert a.store.committed == 5 and b.store.committed == 5
