"""The group's security as two features of the node (:class:`huddle.ports.Feature`): what of
allow-list mode and of the group secret's rotation plugs into a node, in one place each.

The mesh's security itself (transport/zap.py ``MeshSecurity``, with its ``AllowList``; the
``KeyRotation`` of transport/rotation.py) is the node's core: the transport needs it before
anything connects.  The features are the rest: their routes (:mod:`huddle.api.trust_http`,
:mod:`huddle.api.group_http`: 409 when the node is not in that mode), the ``huddle trust``
command, and their facts.  ``huddle group`` stays one command of the CLI's own: it makes and
shows group files locally, and steps a rotation on several nodes in turn.
"""

from __future__ import annotations

import argparse
import contextlib
from typing import TYPE_CHECKING, Any, Final

from ..ports import (
    ApiHandler,
    ClientOptions,
    FeatureBase,
    FeatureHost,
    RotationPort,
    Spawn,
    TrustPort,
)

if TYPE_CHECKING:  # aiohttp and the client load when a node serves or a command calls one
    from aiohttp import web

    from ..client import ApiClient

__all__ = ["RotationFeature", "TrustFeature"]


class _Plain(FeatureBase):
    """What both features have: the host, kept at start (their state is the mesh's security)."""


    def __init__(self) -> None:
        self._host: FeatureHost | None = None

    async def start(self, stack: contextlib.AsyncExitStack, spawn: Spawn, host: FeatureHost) -> None:
        self._host = host



async def _trust(api: ApiClient, args: argparse.Namespace) -> tuple[Any, str]:
    """``huddle trust list|add|remove``."""
    if args.trust_command == "add":
        added = await api.trust(args.key, args.name or "")
        return added, f"trusted {added['fingerprint']} {added['name']}".rstrip() + " (admitted at its next handshake)"
    if args.trust_command == "remove":
        removed = await api.distrust(args.key)
        return removed, f"removed {removed['fingerprint']} {removed['name']}".rstrip() + ": cut off now"
    listed = await api.trusted()
    lines = [f"{k['fingerprint']}  {k['public_key']}  {k['name']}".rstrip() for k in listed["keys"]]
    return listed, "\n".join([f"{len(lines)} trusted keys (and this node's own):", *lines])


class TrustFeature(_Plain):
    """Allow-list mode (docs/security.md, "Allow-list mode"): the node keys a node admits."""

    name: Final = "trust"

    @property
    def allow_list(self) -> TrustPort | None:
        """The trusted keys (None: the node is not in allow-list mode, or not running)."""
        return None if self._host is None else self._host.allow_list

    def routes(self, app: web.Application) -> None:
        from ..api.trust_http import add_trust_routes  # noqa: PLC0415 - aiohttp: when a node serves

        add_trust_routes(app, self)

    def commands(self, sub: Any, client_options: ClientOptions, epilog: str) -> dict[str, ApiHandler]:
        trust = sub.add_parser(
            "trust", help="allow-list mode: list, add or remove the node keys a node admits",
            description="A node started with --allow-list admits to its mesh only the node keys it trusts (kept in "
            "its data directory, trusted-keys) and its own. A change takes effect at once on the running node: a "
            "removed key's connections are cut off and its next handshake refused.",
            epilog=epilog, formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        trust_sub = trust.add_subparsers(dest="trust_command", metavar="ACTION", required=True)
        t_list = trust_sub.add_parser("list", help="the trusted keys")
        client_options(t_list)
        t_add = trust_sub.add_parser("add", help="trust a node key")
        t_add.add_argument("key", metavar="KEY", help="the node's public key, 64 hex digits ('public_key' of its "
                           "'huddle info --json')")
        t_add.add_argument("--name", help="a name for people, kept beside the key")
        client_options(t_add)
        t_remove = trust_sub.add_parser("remove", help="stop trusting a node key: it is cut off at once")
        t_remove.add_argument("key", metavar="KEY", help="the key in hex, or its fingerprint XXXX-XXXX-XXXX-XXXX")
        client_options(t_remove)
        return {"trust": _trust}

    def facts(self) -> dict[str, object] | None:
        allow = self.allow_list
        return None if allow is None else {"keys": len(allow.listed())}


class RotationFeature(_Plain):
    """The group secret's rotation (docs/security.md, "Rotating the group secret"), stepped by
    ``huddle group install|switch|retire`` through these routes."""

    name: Final = "rotation"

    @property
    def rotation(self) -> RotationPort | None:
        """The rotation (None: an open group, or the node is not running)."""
        return None if self._host is None else self._host.rotation

    def routes(self, app: web.Application) -> None:
        from ..api.group_http import add_group_routes  # noqa: PLC0415 - aiohttp: when a node serves

        add_group_routes(app, self)

    def facts(self) -> dict[str, object] | None:
        rotation = self.rotation
        if rotation is None:
            return None
        keys = rotation.describe()
        held = keys["keys"]
        return {"key_id": keys["key_id"], "held": len(held) if isinstance(held, list) else 0}
