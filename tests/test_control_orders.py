"""Orders from any node, without a mesh (docs/control.md, "Orders from any node"; docs/protocol.md 17).

The messages (control/orders.py): a round trip, and every refusal of :func:`decode` by its
reason.  The desk (control/remote.py) driven by hand over a fake node: a good order runs and
is answered and recorded; a forged, another group's, oversized, malformed, misaddressed,
replayed, stale or non-member's order is refused and counted, and nothing is started; a node
order stops the node, a shutdown without a command is refused."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, cast

import pytest

from huddle.config import NodeConfig
from huddle.control import orders
from huddle.control.carrier import OrderPayload, OrdersPeer
from huddle.control.orders import MAX_PAYLOAD, PREFIX, Order, Refused, Result, decode, encode
from huddle.control.remote import LOGS_CHUNK, ORDER_KIND, RESULT_KIND, WINDOW, OrderDesk
from huddle.control.settings import ControlSection
from huddle.control.supervisor import _Output
from huddle.ids import NodeId
from huddle.protocol.service import MeshView, PeerFacts
from huddle.security import NodeIdentity

GROUP = "derby"


class _Mesh:
    """What the orders peer service reads of the mesh: who is excluded, who left."""

    def __init__(self) -> None:
        self.excluded: dict[NodeId, str] = {}
        self.left: dict[NodeId, str] = {}

    def departure(self, peer: NodeId) -> str | None:
        return self.left.get(peer)


class _Supervisor:
    def __init__(self) -> None:
        self.apps = {"scoreboard": None}
        self.orders: list[tuple[str, str]] = []
        self.log: _Output

    def order(self, name: str, what: str) -> dict[str, Any]:
        self.orders.append((name, what))
        return {"name": name, "state": "stopped" if what == "stop" else "starting"}

    def statuses(self) -> list[dict[str, Any]]:
        return [{"name": "scoreboard", "state": "running"}]

    def output(self, name: str, after: int | None, limit: int | None = None) -> dict[str, Any]:
        return self.log.read(after, limit)  # set by the test that reads it


class _Host:
    """The part of a FeatureHost the desk uses."""

    def __init__(self, identity: NodeIdentity, name: str) -> None:
        self.identity = identity
        self.uuid = identity.node_id
        self.config = NodeConfig(name=name, group=GROUP, open=True)
        self.now = 1000.0
        self.recorded: list[tuple[str, dict[str, Any]]] = []
        self.sent: list[tuple[NodeId, bytes]] = []
        self.stopped = False
        self.mesh = self

    def alive_peers(self) -> list[NodeId]:
        return []

    def mesh_time(self) -> float:
        return self.now

    def name_of(self, uuid: NodeId) -> str:
        return uuid.short

    def record_soon(self, kind: str, body: Any) -> None:
        self.recorded.append((kind, body))

    def send_to(self, peer: NodeId, payload: bytes) -> int:
        self.sent.append((peer, payload))
        return len(self.sent)

    async def send_to_wait(self, peer: NodeId, payload: bytes, timeout: float = 10.0) -> int:
        return self.send_to(peer, payload)

    def stop(self) -> None:
        self.stopped = True


class _Rig:
    """A target node's desk, with the asking node admitted."""

    def __init__(self, settings: ControlSection | None = None) -> None:
        self.asker, self.target = NodeIdentity.generate(), NodeIdentity.generate()
        self.host = _Host(self.target, "c")
        self.mesh = _Mesh()
        self.peer = OrdersPeer()
        self.peer.attach(cast(MeshView, self.mesh))
        self.peer.peer_up(self.asker.node_id, 1, 0.0, _facts())
        self.supervisor = _Supervisor()
        self.desk = OrderDesk(cast(Any, self.host), self.peer, lambda: cast(Any, self.supervisor),
                                settings or ControlSection())

    def order(self, action: str, app: str = "scoreboard", *, oid: str = "ab" * 16, group: str = GROUP,
              at: float | None = None, target: NodeId | None = None) -> bytes:
        o = Order(oid, group, target or self.target.node_id, action, app, self.host.now if at is None else at)
        return encode(self.asker, self.asker.node_id, o)

    def take(self, payload: bytes, sender: NodeId | None = None) -> None:
        self.desk.handle(OrderPayload(sender or self.asker.node_id, payload))

    def results(self) -> list[Result]:
        out = []
        for peer, payload in self.host.sent:
            message = decode(payload, self.target.node_id, GROUP)
            assert isinstance(message, Result) and peer == self.asker.node_id
            out.append(message)
        return out


def _facts() -> PeerFacts:
    return PeerFacts()


# ------------------------------------------------------------------ the messages


def test_an_order_and_a_result_survive_the_round_trip() -> None:
    me, target = NodeIdentity.generate(), NodeIdentity.generate().node_id
    order = Order("0f" * 16, GROUP, target, "restart", "scoreboard", 12.5)
    payload = encode(me, me.node_id, order)
    assert payload.startswith(PREFIX) and decode(payload, me.node_id, GROUP) == order
    result = Result("0f" * 16, GROUP, 404, {"error": "no app"})
    assert decode(encode(me, me.node_id, result), me.node_id, GROUP) == result


@pytest.mark.parametrize(("mangle", "reason"), [
    (lambda p, me, other: p[:-1] + bytes([p[-1] ^ 1]), "forged"),  # a body changed after signing
    (lambda p, me, other: p[:40] + bytes([p[40] ^ 1]) + p[41:], "forged"),  # the signature changed
    (lambda p, me, other: encode(other, me.node_id, Order("0f" * 16, GROUP, me.node_id, "stop", "", 1.0)),
     "forged"),  # signed by another key than the sender's
    (lambda p, me, other: encode(me, me.node_id, Order("0f" * 16, "other", me.node_id, "stop", "", 1.0)),
     "other_group"),
    (lambda p, me, other: p + b" " * MAX_PAYLOAD, "oversized"),
    (lambda p, me, other: p[:50], "malformed"),  # cut short
    (lambda p, me, other: PREFIX + b"\x07" + p[3:], "malformed"),  # neither an order nor a result
])
def test_decode_refuses_each_bad_message_with_its_reason(mangle: Any, reason: str) -> None:
    me, other = NodeIdentity.generate(), NodeIdentity.generate()
    payload = encode(me, me.node_id, Order("0f" * 16, GROUP, me.node_id, "stop", "scoreboard", 1.0))
    with pytest.raises(Refused) as info:
        decode(mangle(payload, me, other), me.node_id, GROUP)
    assert info.value.reason == reason


def test_a_signed_body_with_bad_fields_is_malformed() -> None:
    me = NodeIdentity.generate()
    for body in ({"id": "x"}, {"id": "0f" * 16, "group": GROUP, "target": "zz", "action": "stop", "app": "", "at": 1},
                 {"id": "0f" * 16, "group": GROUP, "target": me.node_id.hex(), "action": "explode", "app": "", "at": 1},
                 {"id": "0f" * 16, "group": GROUP, "target": me.node_id.hex(), "action": "stop", "app": "Bad!",
                  "at": 1}, [1, 2]):
        raw = json.dumps(body).encode()
        signed = orders._DOMAIN + bytes([orders.KIND_ORDER]) + bytes(me.node_id) + raw
        payload = PREFIX + bytes([orders.KIND_ORDER]) + me.public_key + me.sign(signed) + raw
        with pytest.raises(Refused) as info:
            decode(payload, me.node_id, GROUP)
        assert info.value.reason in ("malformed", "other_group"), body


# ------------------------------------------------------------------ the desk


def test_a_good_order_runs_is_answered_and_recorded() -> None:
    async def main() -> None:
        rig = _Rig()
        rig.take(rig.order("stop"))
        assert rig.supervisor.orders == [("scoreboard", "stop")]
        [result] = rig.results()
        assert (result.id, result.status, result.answer["state"]) == ("ab" * 16, 200, "stopped")
        [(kind, body)] = rig.host.recorded
        assert kind == RESULT_KIND and body["by"] == str(rig.asker.node_id) and body["status"] == 200
        rig.take(rig.order("start", "nope", oid="cd" * 16))  # an app it does not run: 404, said and recorded
        assert rig.results()[-1].status == 404 and "no app 'nope'" in rig.results()[-1].answer["error"]
        assert rig.desk.counters.ran == 2

    asyncio.run(main())


def test_hostile_orders_are_refused_counted_and_start_nothing() -> None:
    async def main() -> None:
        rig = _Rig()
        stranger = NodeIdentity.generate()
        forged = bytearray(rig.order("start"))
        forged[-3] ^= 1
        rig.take(bytes(forged))
        rig.take(rig.order("start", group="other"))
        rig.take(rig.order("start") + b"x" * MAX_PAYLOAD)
        rig.take(PREFIX + b"\x01" + b"\x00" * 10)
        rig.take(rig.order("start", target=stranger.node_id))  # addressed to another node
        rig.take(encode(stranger, stranger.node_id, Order("ee" * 16, GROUP, rig.target.node_id, "start",
                                                          "scoreboard", rig.host.now)),
                 sender=stranger.node_id)  # well signed, from a node that is not admitted
        rig.mesh.excluded[rig.asker.node_id] = "by hand"
        rig.take(rig.order("start", oid="ef" * 16))  # from an excluded node
        del rig.mesh.excluded[rig.asker.node_id]
        c = rig.desk.counters
        assert (c.forged, c.other_group, c.oversized, c.malformed, c.wrong_target, c.not_member) == (1, 1, 1, 1, 1, 2)
        assert rig.supervisor.orders == [] and rig.host.recorded == [] and rig.host.sent == []

        good = rig.order("start")
        rig.take(good)
        rig.take(good)  # replayed: refused, not answered twice
        assert (c.replayed, c.ran, rig.supervisor.orders) == (1, 1, [("scoreboard", "start")])
        rig.take(rig.order("stop", oid="01" * 16, at=rig.host.now - WINDOW - 1))  # stale: refused, told why
        assert c.stale == 1 and rig.supervisor.orders == [("scoreboard", "start")]
        assert [r.status for r in rig.results()] == [200, 400] and "mesh time" in rig.results()[1].answer["error"]

    asyncio.run(main())


def test_a_logs_read_is_answered_in_chunks_that_fit_and_never_recorded(tmp_path: Path) -> None:
    async def main() -> None:
        rig = _Rig()
        rig.supervisor.log = _Output(tmp_path / "scoreboard.log", 1 << 20, 1)
        # Control characters escape to six octets each in JSON: a chunk of them must still fit a result.
        data = b"\x01" * 3000 + "é".encode() * 3000 + b"done\n"
        rig.supervisor.log.write(data)
        got, after, n = "", 0, 0
        while True:
            n += 1
            o = Order(f"{n:032x}", GROUP, rig.target.node_id, "logs", "scoreboard", rig.host.now, after)
            rig.take(encode(rig.asker, rig.asker.node_id, o))  # encode/decode of the result: it fits
            result = rig.results()[-1]
            assert result.status == 200, result
            got, after = got + result.answer["text"], result.answer["next"]
            if not result.answer["more"]:
                break
        assert got == data.decode() and after == len(data) and n > len(data) // LOGS_CHUNK
        assert rig.host.recorded == [] and rig.supervisor.orders == []  # a read: no audit record, nothing run
        rig.take(encode(rig.asker, rig.asker.node_id, Order("ee" * 16, GROUP, rig.target.node_id, "logs", "nope",
                                                            rig.host.now, 0)))
        assert rig.results()[-1].status == 404 and "no app 'nope'" in rig.results()[-1].answer["error"]

    asyncio.run(main())


def test_a_logs_read_with_a_bad_offset_is_malformed() -> None:
    me = NodeIdentity.generate()
    base = {"id": "0f" * 16, "group": GROUP, "target": me.node_id.hex(), "app": "scoreboard", "at": 1}
    for body in (base | {"action": "logs", "after": -1}, base | {"action": "logs", "after": "7"},
                 base | {"action": "logs", "after": True}, base | {"action": "logs", "after": 1 << 70},
                 base | {"action": "stop", "after": 0}):  # an offset only with a logs read
        raw = json.dumps(body).encode()
        signed = orders._DOMAIN + bytes([orders.KIND_ORDER]) + bytes(me.node_id) + raw
        payload = PREFIX + bytes([orders.KIND_ORDER]) + me.public_key + me.sign(signed) + raw
        with pytest.raises(Refused) as info:
            decode(payload, me.node_id, GROUP)
        assert info.value.reason == "malformed", body


def test_a_node_order_stops_the_node_and_a_shutdown_needs_its_command() -> None:
    async def main() -> None:
        rig = _Rig()
        rig.take(rig.order("shutdown", ""))
        assert rig.results()[-1].status == 409 and "shutdown-command" in rig.results()[-1].answer["error"]
        rig.take(rig.order("stop", "", oid="02" * 16))
        assert rig.results()[-1].status == 200 and rig.results()[-1].answer["stopping"] is True
        assert not rig.host.stopped  # answered first: the node stops a moment later
        deadline = asyncio.get_running_loop().time() + 5
        while not rig.host.stopped:
            assert asyncio.get_running_loop().time() < deadline, "the node was not stopped"
            await asyncio.sleep(0.02)
        await rig.desk.after_stop()  # a stop runs no command

        ran = _Rig(ControlSection(reboot_command=("true",)))
        ran.take(ran.order("reboot", ""))
        assert ran.results()[-1].answer["then"] == ["true"]
        await ran.desk.after_stop()

    asyncio.run(main())


def test_the_asking_side_answers_gone_excluded_and_matches_its_result() -> None:
    async def main() -> None:
        rig = _Rig()  # seen from the asker this time: its desk, the target its peer
        host = _Host(rig.asker, "a")
        peer = OrdersPeer()
        mesh = _Mesh()
        peer.attach(cast(MeshView, mesh))
        desk = OrderDesk(cast(Any, host), peer, lambda: None, ControlSection())
        target = rig.target.node_id
        mesh.left[target] = "left"
        assert (await desk.ask(target, "stop", "scoreboard"))[0] == 410
        mesh.excluded[target] = "by hand"
        assert (await desk.ask(target, "stop", "scoreboard"))[0] == 409
        del mesh.excluded[target], mesh.left[target]
        peer.peer_up(target, 2, 0.0, _facts())
        asking = asyncio.create_task(desk.ask(target, "stop", "scoreboard", timeout=5))
        deadline = asyncio.get_running_loop().time() + 5
        while not host.sent:
            assert asyncio.get_running_loop().time() < deadline, "the order was not sent"
            await asyncio.sleep(0.01)
        sent = decode(host.sent[0][1], rig.asker.node_id, GROUP)
        assert isinstance(sent, Order) and host.recorded[0][0] == ORDER_KIND
        answer = encode(rig.target, target, Result(sent.id, GROUP, 200, {"state": "stopped"}))
        desk.handle(OrderPayload(target, answer))
        status, out = await asking
        assert status == 200 and out["state"] == "stopped" and out["order"] == sent.id
        desk.handle(OrderPayload(target, answer))  # nothing waits for it any more
        assert desk.counters.unexpected == 1
        assert (await desk.ask(target, "stop", "scoreboard", timeout=0.2))[0] == 504
        recorded = len(host.recorded)
        assert (await desk.ask(target, "apps", timeout=0.2))[0] == 504
        assert len(host.recorded) == recorded, "reading the list is no order: not recorded"

    asyncio.run(main())
