"""Pairing as a feature of the node (:class:`huddle.ports.Feature`): a member's door, its requests,
their answers (docs/security.md, "Pairing").

* ``start``: a node holding a group secret opens its door (:mod:`huddle.pairing.door`) on the
  mesh's interface; an open node has none;
* an acceptance is recorded in the group's log (``pair-accepted``: the newcomer's name, node
  id, fingerprint and key, recorded by the member that let it in); a member that sees another's
  drops its own pending request of that fingerprint (its subscription to the log);
* its routes (:mod:`huddle.pairing.http`), the ``huddle pair`` command, and its facts: the
  door's endpoint and how many requests wait.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from ..errors import NotRunning
from ..ports import ApiHandler, ClientOptions, FeatureBase, FeatureHost, Spawn, Subscriber
from ..protocol.events import LogAppended
from ..security import GroupSecret
from .requests import Request, Requests

if TYPE_CHECKING:  # aiohttp and the client load when a node serves or a command calls one
    from aiohttp import web

    from ..client import ApiClient

__all__ = ["PAIR_KIND", "PairingFeature"]

log = logging.getLogger("huddle.pairing")

PAIR_KIND: Final = "pair-accepted"


class PairingFeature(FeatureBase):
    """A member's side of pairing (the module docstring)."""

    name: Final = "pairing"

    def __init__(self) -> None:
        self._host: FeatureHost | None = None
        self._requests: Requests | None = None
        self._secret: GroupSecret | None = None
        self._door_endpoint: str | None = None
        self._door_stats: Any = None

    async def start(self, stack: contextlib.AsyncExitStack, spawn: Spawn, host: FeatureHost) -> None:
        from .door import Door  # noqa: PLC0415 - the door's sockets: only on a node that has a secret

        self._host = host
        config = host.config
        self._secret = config.group_secret
        if self._secret is None:
            return  # an open group has no door: anyone may join it already
        requests = self._requests = Requests(ttl=config.pairing.request_ttl)

        def changed(secret: GroupSecret) -> None:
            self._secret = secret

        host.watch_keys(changed)
        door = Door(config.group, requests, self._current, host.local_now)
        stack.callback(door.close)  # also if the node stops before the door's task ran
        port = door.bind(host.address, config.pairing.port)
        self._door_stats = door.stats
        self._door_endpoint = f"{host.address}:{port}"
        host.advertise_door(port)

        async def moved(address: str) -> None:
            """The door listens on the mesh's interface: it follows it."""
            moved_to = door.move(address)
            self._door_endpoint = f"{address}:{moved_to}"
            host.advertise_door(moved_to)
            log.info("the pairing door moved to %s", self._door_endpoint)

        host.follow_address(moved)
        log.info("pairing door on %s: devices without the secret ask to join here (huddle pair)", self._door_endpoint)
        spawn(door.run())

    def _current(self) -> GroupSecret:
        assert self._secret is not None  # the door exists only with a secret
        return self._secret

    # ------------------------------------------------------------------ what the routes call

    @property
    def requests(self) -> Requests:
        if self._requests is None or self._host is None:
            raise NotRunning("this node has no pairing door (an open group, or not running)")
        return self._requests

    def describe(self) -> dict[str, object]:
        """``GET /api/v1/pair``: the door, the requests pending, the counters."""
        if self._requests is None or self._host is None:
            return {"door": None, "pending": [], "stats": None}
        now = self._host.local_now()
        stats: dict[str, object] = dict(self._requests.stats.as_dict())
        if self._door_stats is not None:
            stats["door"] = self._door_stats.as_dict()
        return {"door": self._door_endpoint, "pending": [r.as_dict(now) for r in self._requests.pending(now)],
                "stats": stats}

    def accept(self, fp: str) -> Request | None:
        """Accept the device of ``fp``, recorded in the log; None if no such request is pending."""
        host = self._host
        requests = self.requests
        assert host is not None
        host.check_writable()  # recorded, or not accepted at all
        request = requests.accept(host.local_now(), fp)
        if request is not None:
            host.emit(PAIR_KIND, {"name": request.name, "node": request.node_id, "fingerprint": fp,
                                  "key": request.public_key.hex()})
            log.info("accepted %s (%s) at %s into the group: it gets the secret at its next request",
                     request.name, fp, request.address)
        return request

    def refuse(self, fp: str) -> Request | None:
        host = self._host
        request = self.requests.refuse(host.local_now() if host else 0.0, fp)
        if request is not None:
            log.info("refused %s (%s) at %s", request.name, fp, request.address)
        return request

    # ------------------------------------------------------------------ the node's steps

    def subscriptions(self) -> Sequence[tuple[tuple[type, ...], Subscriber]]:
        return [((LogAppended,), self._log_appended)]

    def _log_appended(self, event: LogAppended) -> bool:
        host, requests = self._host, self._requests
        if host is None or requests is None:
            return False
        for run, _ in event.runs:
            for record in run:
                if record.kind != PAIR_KIND or record.source == host.uuid:
                    continue
                with contextlib.suppress(ValueError, TypeError, AttributeError):
                    fp = json.loads(record.body).get("fingerprint")
                    if isinstance(fp, str):
                        requests.elsewhere(host.local_now(), fp)
        return False

    def routes(self, app: web.Application) -> None:
        from .http import add_pair_routes  # noqa: PLC0415 - aiohttp: when a node serves

        add_pair_routes(app, self)

    def commands(self, sub: Any, client_options: ClientOptions, epilog: str) -> dict[str, ApiHandler]:
        pair = sub.add_parser(
            "pair", help="devices asking to join the group: list them, accept or refuse one",
            description="A device started with the group's name but without its secret asks every member it finds "
            "to join, and shows its key fingerprint on its own screen. Compare it with the fingerprint listed here, "
            "then accept it (it receives the group secret over an encrypted session bound to its key) or refuse it. "
            "Give the WHOLE fingerprint: a prefix is refused, since anyone can make keys until one's fingerprint "
            "starts with the characters a member would type.",
            epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        pair.add_argument("action", nargs="?", choices=("list", "accept", "refuse"), default="list",
                          help="list (the default), accept or refuse")
        pair.add_argument("fingerprint", nargs="?", metavar="FINGERPRINT",
                          help="the device's whole key fingerprint, XXXX-XXXX-XXXX-XXXX (accept, refuse)")
        client_options(pair)
        return {"pair": _pair}

    def facts(self) -> dict[str, object] | None:
        if self._requests is None:
            return None
        return {"door": self._door_endpoint, "pending": self._requests.stats.pending}


async def _pair(api: ApiClient, args: argparse.Namespace) -> tuple[Any, str]:
    """``huddle pair [list] | accept FINGERPRINT | refuse FINGERPRINT``."""
    from ..errors import ConfigError  # noqa: PLC0415
    from .codec import BadFingerprint, normalise_fingerprint  # noqa: PLC0415

    if args.action != "list":
        if not args.fingerprint:
            raise ConfigError(f"huddle pair {args.action} needs the device's FINGERPRINT (huddle pair list)")
        try:
            fp = normalise_fingerprint(args.fingerprint)
        except BadFingerprint as exc:
            raise ConfigError(str(exc)) from None
        answered = await api.pair_answer(args.action, fp)
        done = "accepted: it receives the group secret at its next request" if args.action == "accept" else "refused"
        return answered, f"{answered['name']} ({answered['fingerprint']}) {done}"
    listed = await api.pairing()
    door = listed.get("door")
    if door is None:
        return listed, "this node has no pairing door (an open group: anyone can join it)"
    lines = [f"{r['fingerprint']}  {r['name']}  from {r['address']}  {r['age']:.0f} s ago" for r in listed["pending"]]
    head = f"{len(lines)} device(s) ask to join (door {door})" + (":" if lines else "")
    tail = ["accept one with: huddle pair accept FINGERPRINT"] if lines else []
    return listed, "\n".join([head, *lines, *tail])
