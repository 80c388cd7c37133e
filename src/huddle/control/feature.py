"""Apps as a feature of the node (:class:`huddle.ports.Feature`): the programs it supervises.

* its driver (:class:`~huddle.control.supervisor.Supervisor`), made in ``start`` when the
  node runs apps (its type's ``[[types.NAME.apps]]`` and its own ``[[apps]]``): stale groups
  of an earlier run killed and the watchdog started at once, the apps started once the node
  serves (its spawned task runs then), stopped in reverse order as the node stops;
* its routes (:mod:`huddle.api.apps_http`), its commands (:mod:`huddle.control.cli`);
* its facts: each app's state (``{"scoreboard": "running"}``), so every node's picture shows
  every node's apps.  Never a pid or an uptime: those change without the state changing, and
  a changed fact makes a report go to every member (docs/protocol.md 14).
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, Final

from ..ports import ApiHandler, ClientOptions, FeatureBase, FeatureHost, Spawn
from .counters import AppsCounters
from .section import AppSpec

if TYPE_CHECKING:  # the driver and the routes load when a node runs apps and serves, not with `huddle --help`
    from aiohttp import web

    from .supervisor import Supervisor

__all__ = ["AppsFeature"]


class AppsFeature(FeatureBase):
    """The node's apps (the module docstring)."""

    name: Final = "apps"

    def __init__(self) -> None:
        self.supervisor: Supervisor | None = None  # None: the node runs no app
        self.counters = AppsCounters()  # what its routes refused

    async def start(self, stack: contextlib.AsyncExitStack, spawn: Spawn, host: FeatureHost) -> None:
        specs = host.config.node_apps()
        if not specs:
            return
        from .supervisor import Supervisor  # noqa: PLC0415 - only a node that runs apps loads the driver

        cfg = host.config

        def env(spec: AppSpec) -> dict[str, str]:
            return {"HUDDLE_API": host.api_url or "", "HUDDLE_NODE_ID": str(host.uuid or ""),
                    "HUDDLE_NODE_NAME": cfg.name, "HUDDLE_GROUP": cfg.group, "HUDDLE_NODE_TYPE": cfg.node_type,
                    "HUDDLE_APP": spec.name}

        supervisor = Supervisor(specs, cfg.data_dir / "apps", env, host.local_now)
        supervisor.open()
        self.supervisor = supervisor
        stack.push_async_callback(supervisor.close)
        spawn(supervisor.run())  # in the node's task group: once the node serves

    def routes(self, app: web.Application) -> None:
        from ..api.apps_http import add_app_routes  # noqa: PLC0415 - aiohttp: when a node serves

        add_app_routes(app, self)

    def commands(self, sub: Any, client_options: ClientOptions, epilog: str) -> dict[str, ApiHandler]:
        from .cli import add_parsers, run  # noqa: PLC0415 - small; its client loads when it runs

        add_parsers(sub, client_options, epilog)
        return {"apps": run, "app": run}

    def facts(self) -> dict[str, object] | None:
        supervisor = self.supervisor
        return None if supervisor is None else dict(supervisor.labels())
