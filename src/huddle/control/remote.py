"""The order desk: orders to any node's apps and to the node itself, and their results
(docs/control.md, "Orders from any node"; the messages: control/orders.py, docs/protocol.md 17).

Asking (:meth:`OrderDesk.ask`): the order is recorded in the group's log (``control.order``:
who asked, what, of which node), sent to the target as a signed addressed message, and waited
for; the answer is the target's result, or 409 (the target is excluded), 410 (it is gone: the
mesh lists it left or failed), 504 (no result within the timeout).  The desk sends the order
once: the addressed channel re-sends its frames until they are acknowledged, across lost
frames, reconnections and the target's restart (docs/protocol.md 13), so the order arrives
unless the target is gone, which the desk watches for while it waits.

Running (:meth:`OrderDesk.handle`): an order is taken only if it decodes and its signature is
the sender's (control/orders.py), it names this node, its sender is an admitted member (not
excluded), its time is within :data:`WINDOW` of the mesh time, and its id was not seen before
(the ids of the last :data:`REMEMBERED` orders are kept: a replay inside the window is
refused; one older than it is refused by its time).  Each refusal is counted, none is
answered but a stale order's (the sender learns why).  The result is recorded
(``control.result``: what happened), then sent back.  A node order (``stop``, ``shutdown``,
``reboot``) is answered first, then the node stops (its apps, then itself) after
:data:`STOP_GRACE`, time for the result and its record to leave; shutdown and reboot then
run the configured command (:meth:`OrderDesk.after_stop`).

Two asks only read, and are not recorded (reads are no operator's action, not audit data):
``apps`` (the target's app list) and ``logs`` (a chunk of an app's output after an offset, at
most :data:`LOGS_CHUNK` octets, fewer when its JSON would not fit a result's
:data:`~huddle.control.orders.MAX_PAYLOAD`; ``huddle app logs NAME --node N --follow`` asks
again from ``next``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from ..counters import Counters
from ..errors import HuddleError
from ..ids import NodeId
from .carrier import OrderPayload, OrdersPeer
from .orders import LIST, LOGS, MAX_PAYLOAD, NODE_ACTIONS, Order, Refused, Result, decode, encode
from .settings import ControlSection

if TYPE_CHECKING:
    from ..ports import FeatureHost
    from .supervisor import Supervisor

__all__ = ["LOGS_CHUNK", "ORDER_KIND", "REMEMBERED", "RESULT_KIND", "STOP_GRACE", "WINDOW", "OrderDesk", "OrdersCounters"]

log = logging.getLogger("huddle.control")

ORDER_KIND: Final = "control.order"  # recorded by the asking node
RESULT_KIND: Final = "control.result"  # recorded by the target
WINDOW: Final = 60.0  # seconds an order's time may be off the target's mesh time
REMEMBERED: Final = 4096  # order ids kept against replays
STOP_GRACE: Final = 0.5  # seconds between answering a node order and stopping
_POLL: Final = 0.1  # seconds between two looks at whether a target went, while waiting
_COMMAND_TIMEOUT: Final = 60.0  # seconds a shutdown or reboot command may take
LOGS_CHUNK: Final = 4096  # octets of an app's output one logs read answers at most (halved until the result fits)
_ANSWER_ROOM: Final = MAX_PAYLOAD - 512  # octets of a result's answer, leaving room for its head, id and group


@dataclass(slots=True)
class OrdersCounters(Counters):
    asked: int = 0  # orders this node sent
    answered: int = 0  # results it received for them
    ran: int = 0  # orders it ran for other nodes
    malformed: int = 0  # a control message cut short, not JSON, with wrong fields
    oversized: int = 0  # over MAX_PAYLOAD octets
    forged: int = 0  # a signature that is not the sender's key's, or a key that does not give its id
    other_group: int = 0  # signed for another group
    not_member: int = 0  # from a node that is not an admitted member (excluded, or not admitted)
    wrong_target: int = 0  # an order naming another node
    stale: int = 0  # its time outside the window
    replayed: int = 0  # an order id seen before
    unexpected: int = 0  # a result no order of ours waits for


class OrderDesk:
    """Orders out and in (the module docstring)."""

    def __init__(self, host: FeatureHost, peer: OrdersPeer, supervisor: Callable[[], Supervisor | None],
                 settings: ControlSection) -> None:
        self._host, self._peer, self._supervisor, self._settings = host, peer, supervisor, settings
        self.counters = OrdersCounters()
        self._waiting: dict[str, tuple[NodeId, asyncio.Future[Result]]] = {}
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._then: tuple[str, ...] = ()  # the command to run once the node stopped (shutdown, reboot)
        self._stopping: asyncio.Task[None] | None = None

    @property
    def me(self) -> NodeId:
        """This node's id."""
        uuid = self._host.uuid
        assert uuid is not None, "a feature starts after the node has its id"
        return uuid

    # ------------------------------------------------------------------ asking

    def members(self) -> list[NodeId]:
        """The admitted peers: the members an order to all goes to (besides this node)."""
        return self._host.mesh.alive_peers()

    async def ask(self, target: NodeId, action: str, app: str = "", timeout: float = 10.0,
                  after: int | None = None) -> tuple[int, dict[str, Any]]:
        """Order ``action`` (of ``app``, or of the node) on ``target``: the HTTP status and answer
        (``after``: where a ``logs`` read starts)."""
        host = self._host
        order = Order(secrets.token_hex(16), host.config.group, target, action, app, host.mesh_time(), after)
        label = host.name_of(target)
        recorded = action not in (LIST, LOGS)  # reading the list or the output is no order: not audit data
        if target == self.me:  # this node: run here, recorded alike
            if recorded:
                self._record(ORDER_KIND, order, self.me)
            status, answer = self._run(order, self.me)
            return status, {"order": order.id, "node": str(target), "node_name": label, **answer}
        if self._peer.excluded(target):
            return 409, {"error": f"{label} is excluded: not a member, it takes no order"}
        gone = self._peer.gone(target)
        if gone is not None or not self._peer.admitted(target):
            return 410, {"error": f"{label} is gone ({gone or 'not connected'}): the order was not sent"}
        if recorded:
            self._record(ORDER_KIND, order, self.me)
        future: asyncio.Future[Result] = asyncio.get_running_loop().create_future()
        self._waiting[order.id] = (target, future)
        deadline = time.monotonic() + timeout
        try:
            await host.send_to_wait(target, encode(self._identity(), self.me, order), timeout)
            self.counters.asked += 1
            while (left := deadline - time.monotonic()) > 0:
                done, _ = await asyncio.wait([future], timeout=min(_POLL, left))
                if done:
                    result = future.result()
                    return result.status, {"order": order.id, "node": str(target), "node_name": label, **result.answer}
                gone = self._peer.gone(target)
                if gone is not None:
                    return 410, {"order": order.id, "error": f"{label} left ({gone}) before it answered"}
            return 504, {"order": order.id, "error": f"{label} did not answer within {timeout:g} s (the order may "
                                                     "still arrive: it stays in the channel until acknowledged)"}
        except HuddleError as exc:  # a full channel past the timeout, or one the mesh refused
            return 503, {"order": order.id, "error": f"the order could not be queued to {label}: {exc}"}
        finally:
            self._waiting.pop(order.id, None)

    def _identity(self) -> Any:
        identity = self._host.identity
        assert identity is not None, "a node has its key before any feature starts"
        return identity

    # ------------------------------------------------------------------ taking

    def handle(self, event: OrderPayload) -> bool:
        """An order or a result from ``event.peer``: checked, run or matched, counted."""
        try:
            message = decode(event.payload, event.peer, self._host.config.group)
        except Refused as exc:
            setattr(self.counters, exc.reason, getattr(self.counters, exc.reason) + 1)
            log.debug("control message from %s refused: %s", event.peer.short, exc)
            return True
        if not self._peer.admitted(event.peer) or self._peer.excluded(event.peer):
            self.counters.not_member += 1
            return True
        if isinstance(message, Result):
            waiting = self._waiting.get(message.id)
            if waiting is None or waiting[0] != event.peer or waiting[1].done():
                self.counters.unexpected += 1
            else:
                self.counters.answered += 1
                waiting[1].set_result(message)
            return True
        refusal = self._refusal(message)
        if refusal is not None and refusal != "stale":
            return True
        if refusal is None:
            self.counters.ran += 1
            status, answer = self._run(message, event.peer)
        else:  # the sender learns why: its clock, or a channel held past the window
            status, answer = 400, {"error": f"the order's time is more than {WINDOW:g} s off this node's mesh time"}
        try:
            self._host.send_to(event.peer, encode(self._identity(), self.me, Result(message.id, message.group, status,
                                                                                   answer)))
        except (HuddleError, Refused) as exc:
            log.warning("the result of order %s could not be sent to %s: %s", message.id, event.peer.short, exc)
        return True

    def _refusal(self, order: Order) -> str | None:
        """Why an order is not run (counted), or None."""
        if order.target != self.me:
            self.counters.wrong_target += 1
            return "wrong_target"
        if order.id in self._seen:
            self.counters.replayed += 1
            return "replayed"
        self._seen[order.id] = None
        while len(self._seen) > REMEMBERED:
            self._seen.popitem(last=False)
        if abs(self._host.mesh_time() - order.at) > WINDOW:
            self.counters.stale += 1
            return "stale"
        return None

    def _run(self, order: Order, sender: NodeId) -> tuple[int, dict[str, Any]]:
        """Carry out an order checked already; recorded unless it only reads."""
        supervisor = self._supervisor()
        if order.action == LIST:
            return 200, {"apps": [] if supervisor is None else supervisor.statuses()}
        if order.action == LOGS:
            return self._output(order, supervisor)
        status, answer = self._carry_out(order, supervisor)
        self._record(RESULT_KIND, order, sender, status, answer)
        return status, answer

    def _output(self, order: Order, supervisor: Supervisor | None) -> tuple[int, dict[str, Any]]:
        """A chunk of an app's output: at most :data:`LOGS_CHUNK` octets, fewer when its JSON
        (escapes and all) would not fit a result; ``more`` when some is left for the next read."""
        if supervisor is None or order.app not in supervisor.apps:
            return self._unknown(order, supervisor)
        limit = LOGS_CHUNK
        while True:
            answer = {"name": order.app} | supervisor.output(order.app, order.after, limit)
            if limit <= 64 or len(json.dumps(answer, ensure_ascii=False).encode()) <= _ANSWER_ROOM:
                return 200, answer
            limit //= 2

    def _unknown(self, order: Order, supervisor: Supervisor | None) -> tuple[int, dict[str, Any]]:
        known = ", ".join(supervisor.apps) if supervisor is not None else ""
        return 404, {"error": f"no app {order.app!r} on {self._host.config.name} (apps: {known or 'none'})"}

    def _carry_out(self, order: Order, supervisor: Supervisor | None) -> tuple[int, dict[str, Any]]:
        if order.app:
            if supervisor is None or order.app not in supervisor.apps:
                return self._unknown(order, supervisor)
            return 200, supervisor.order(order.app, order.action)
        assert order.action in NODE_ACTIONS
        command: tuple[str, ...] = ()
        if order.action != "stop":
            command = self._settings.shutdown_command if order.action == "shutdown" else self._settings.reboot_command
            if not command:
                return 409, {"error": f"{self._host.config.name} has no [control] {order.action}-command configured: "
                                      f"it refuses to {order.action}"}
        if self._stopping is None:
            self._then = command
            self._stopping = asyncio.get_running_loop().create_task(self._stop_soon())
        return 200, {"stopping": True, "action": order.action, "then": list(command)}

    async def _stop_soon(self) -> None:
        await asyncio.sleep(STOP_GRACE)  # the result and its record leave first
        self._host.stop()

    async def after_stop(self) -> None:
        """Once the node stopped (its apps too): run the shutdown or reboot command ordered, if any."""
        if not self._then:
            return
        log.warning("running the ordered command: %s", " ".join(self._then))
        try:
            proc = await asyncio.create_subprocess_exec(*self._then, start_new_session=True)
            await asyncio.wait_for(proc.wait(), _COMMAND_TIMEOUT)
        except (OSError, TimeoutError) as exc:
            log.error("the ordered command %s failed: %s", self._then[0], exc)

    def _record(self, kind: str, order: Order, sender: NodeId, status: int | None = None,
                answer: dict[str, Any] | None = None) -> None:
        """The order (or its result) as an event of the group's log: the audit trail."""
        body: dict[str, Any] = {"order": order.id, "by": str(sender), "by_name": self._host.name_of(sender),
                                "node": str(order.target), "node_name": self._host.name_of(order.target),
                                "action": order.action, "app": order.app or None}
        if status is not None and answer is not None:
            body |= {"status": status, "state": answer.get("state"), "error": answer.get("error")}
        try:
            self._host.record_soon(kind, body)  # as the node starts: once its start-up window ends
        except HuddleError as exc:  # a read-only node cut off records nothing
            log.warning("%s %s not recorded: %s", kind, order.id, exc)

    def stats(self) -> dict[str, int]:
        return self.counters.as_dict()
