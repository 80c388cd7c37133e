"""Guests as a feature of the node (:class:`huddle.ports.Feature`): everything of the Noam
guests that plugs into a node, in one place.

With ``--guests`` (the ``guest_*`` settings, read in :meth:`GuestsFeature.links` and
:meth:`GuestsFeature.start` alone): the bridge between the room and the log
(:mod:`huddle.guests.bridge`), told of the mesh connections' links (one host per guest),
its guest servers opened on the node's address, moved when the address moves, keyed with
the room key of the group secret in use; every event new in the log goes to its guests.
On every node: its routes (:mod:`huddle.api.guests_http`: 409 without ``--guests``), its
command (``huddle guests``) and its facts (the guest ports, when it hosts guests).

This module lives beside the ``guests`` package, not in it: a node started without
``--guests`` loads nothing of that package (tests/test_startup.py).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from .config import NodeConfig
from .ports import ApiHandler, ClientOptions, FeatureBase, FeatureHost, LinkWatcher, Spawn, Subscriber
from .protocol.events import LogAppended
from .security import GroupSecret

if TYPE_CHECKING:  # the guests' side loads only with --guests, aiohttp and the client when they are used
    from aiohttp import web

    from .client import ApiClient
    from .guests.bridge import GuestBridge
    from .guests.server import GuestServer

__all__ = ["GuestsFeature"]

log = logging.getLogger("huddle.node")

_GUESTS_HELP = ("Guests are programs that join a node's room with the Noam protocol (UDP marco / polo on port 1030, "
                "length-prefixed JSON over TCP or WebSocket) instead of running a node: browser pages, scripts, small "
                "devices. Start the node with --guests. A free guest (one that asks for no room) joins only when "
                "grabbed.")


async def _command(api: ApiClient, args: argparse.Namespace) -> tuple[Any, str]:
    """``huddle guests [--grab NAME | --fire NAME]``."""
    from .render import guests_text  # noqa: PLC0415 - the command's text, when it runs

    if args.grab or args.fire:
        name = args.grab or args.fire
        result = await api.guest_action(name, "grab" if args.grab else "fire")
        return result, f"{'grabbed' if args.grab else 'fired'} {name}"
    info = await api.guests()
    return info, guests_text(info)


class GuestsFeature(FeatureBase):
    """The Noam guests (the module docstring)."""

    name: Final = "guests"

    def __init__(self) -> None:
        self._bridge: GuestBridge | None = None  # with --guests
        self._host: FeatureHost | None = None

    @property
    def server(self) -> GuestServer | None:
        """The guest servers (None: the node does not host guests), what the routes read."""
        return None if self._bridge is None else self._bridge.server

    def links(self, config: NodeConfig) -> LinkWatcher | None:
        if not config.guests.enabled:
            return None
        from .guests.bridge import GuestBridge  # noqa: PLC0415 - the guests' side loads only with --guests

        self._bridge = GuestBridge()
        return self._bridge.links  # a host whose connection drops stops answering its guests' marcos at once

    async def start(self, stack: contextlib.AsyncExitStack, spawn: Spawn, host: FeatureHost) -> None:
        bridge = self._bridge
        if bridge is None:
            return
        from .guests.bridge import BridgeSettings, room_key_of  # noqa: PLC0415 - with --guests (links() loaded it)

        cfg, me = host.config, host.uuid
        assert me is not None  # the node's id is set before its features start
        self._host = host
        stack.push_async_callback(bridge.close)
        await bridge.start(
            BridgeSettings(group=cfg.group, me=me, marco_port=cfg.guests.marco_port, tcp_port=cfg.guests.port,
                           ws_port=cfg.guests.ws_port, max_frame=cfg.guests.max_message,
                           limits=cfg.limits.guests, room_key=room_key_of(cfg.group_secret),
                           keyless=cfg.guests.keyless),
            host.address, host.mesh, emit=host.record_soon, clock=host.local_now)
        if bridge.server is not None and bridge.server.room.is_keyless:
            log.warning("the guests' room is KEYLESS (--guest-keyless): a guest that gives no room key joins "
                        "too, and anyone on this network can speak in the group's log; its events are marked "
                        "keyless (docs/guests.md, \"Keyless guests\")")
        elif cfg.guests.keyless:
            log.warning("--guest-keyless does nothing in an open group: its room takes any guest")
        host.follow_address(self._moved)
        host.watch_keys(self._keys_changed)

    async def _moved(self, address: str) -> None:
        """The guest servers listen on the interface's address (docs/guests.md, "Address changes")."""
        guests = self.server
        if guests is not None and guests.host != address:
            await guests.move(address)
            log.warning("the guest servers moved to %s: TCP %d, WebSocket %d", address, guests.tcp_port,
                        guests.ws_port)

    def _keys_changed(self, secret: GroupSecret) -> None:
        """A rotation step: a guest registers with the room key of the secret in use."""
        guests = self.server
        if guests is not None:
            from .guests.bridge import room_key_of  # noqa: PLC0415 - with --guests (links() loaded it)

            guests.room.room_key = room_key_of(secret)

    def subscriptions(self) -> Sequence[tuple[tuple[type, ...], Subscriber]]:
        return [] if self._bridge is None else [((LogAppended,), self._log_appended)]

    def _log_appended(self, event: LogAppended) -> bool:
        """Every event new in the log that the room hears is spoken to the guests."""
        bridge, host = self._bridge, self._host
        if bridge is not None and host is not None and host.uuid is not None:
            for run, _ in event.runs:
                bridge.speak(run, host.uuid, host.name_of)
        return False

    def routes(self, app: web.Application) -> None:
        from .api.guests_http import add_guest_routes  # noqa: PLC0415 - aiohttp: when a node serves

        add_guest_routes(app, self)

    def commands(self, sub: Any, client_options: ClientOptions, epilog: str) -> dict[str, ApiHandler]:
        guests = sub.add_parser(
            "guests", help="the guests of a node's room (Noam): registered, free, others; grab or fire one",
            description=_GUESTS_HELP, epilog=epilog)
        guests.add_argument("--grab", metavar="NAME", help="take a free guest into this room: its next marco gets a polo")
        guests.add_argument("--fire", metavar="NAME", help="remove a guest and close its connections")
        client_options(guests)
        return {"guests": _command}

    def facts(self) -> dict[str, object] | None:
        guests = self.server
        if guests is None:
            return None
        facts: dict[str, object] = {**guests.ports(), "keyless": guests.room.is_keyless}  # docs/guests.md
        return facts
