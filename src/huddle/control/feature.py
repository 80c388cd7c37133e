"""Apps as a feature of the node (:class:`huddle.ports.Feature`): the programs it supervises.

* its driver (:class:`~huddle.control.supervisor.Supervisor`), made in ``start`` when the
  node runs apps (its type's ``[[types.NAME.apps]]`` and its own ``[[apps]]``): stale groups
  of an earlier run killed and the watchdog started at once, the apps started once the node
  serves (its spawned task runs then), stopped in reverse order as the node stops;
* its routes (:mod:`huddle.api.apps_http`), its commands (:mod:`huddle.control.cli`);
* its handlers (:class:`~huddle.control.handler_runner.HandlerRunner`, its type's
  ``[[types.NAME.handlers]]`` and its own ``[[handlers]]``): the
  programs run on a peer up, suspect or gone, a record in the log, an app's change of state,
  fired from its event subscriptions and the supervisor's watch;
* its facts: each app's state (``{"scoreboard": "running"}``), so every node's picture shows
  every node's apps; and, as the facts of its companion :class:`AppInfoFeature` (``apps-info``),
  each app's pid, restarts, start time and last exit (:mod:`huddle.control.details`).  Never an
  uptime: it changes without the state changing, and a changed fact makes a report go to every
  member (docs/protocol.md 14); the start time (mesh time) does not.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final

from ..errors import NotRunning
from ..ports import ApiHandler, ClientOptions, FeatureBase, FeatureHost, Spawn, Subscriber
from ..protocol.events import LogAppended, PeerJoined, PeerLeft, PeerStateChanged
from ..protocol.picture_compute import PictureTiming
from .counters import AppsCounters
from .details import Row, details_facts
from .handlers import triggers
from .section import AppSpec

if TYPE_CHECKING:  # the driver and the routes load when a node runs apps and serves, not with `huddle --help`
    from aiohttp import web

    from .handler_runner import HandlerRunner
    from .supervisor import Supervisor

__all__ = ["AppInfoFeature", "AppsFeature"]


class AppsFeature(FeatureBase):
    """The node's apps (the module docstring)."""

    name: Final = "apps"

    def __init__(self) -> None:
        self.supervisor: Supervisor | None = None  # None: the node runs no app
        self.handlers: HandlerRunner | None = None  # None: the node has no handler
        self._host: FeatureHost | None = None
        self.counters = AppsCounters()  # what its routes refused
        self._since: dict[tuple[str, int], float] = {}  # (app, pid) -> the mesh time it started

    async def start(self, stack: contextlib.AsyncExitStack, spawn: Spawn, host: FeatureHost) -> None:
        specs = host.config.node_apps()
        cfg = host.config
        self._host = host

        def node_env() -> dict[str, str]:
            return {"HUDDLE_API": host.api_url or "", "HUDDLE_NODE_ID": str(host.uuid or ""),
                    "HUDDLE_NODE_NAME": cfg.name, "HUDDLE_GROUP": cfg.group, "HUDDLE_NODE_TYPE": cfg.node_type}

        handlers = cfg.node_handlers()
        if handlers:
            from .handler_runner import HandlerRunner  # noqa: PLC0415 - only a node with handlers loads it

            self.handlers = HandlerRunner(handlers, cfg.data_dir / "apps", node_env,
                                          running=cfg.limits.handlers.running, queued=cfg.limits.handlers.queued)
        if not specs:
            self._close_handlers_first(stack)
            return
        from .supervisor import Picture, Supervisor  # noqa: PLC0415 - only a node that runs apps loads the driver

        def env(spec: AppSpec) -> dict[str, str]:
            return node_env() | {"HUDDLE_APP": spec.name}

        def members() -> list[dict[str, Any]]:
            try:
                return list(host.system()["members"])
            except NotRunning:  # the node stops: no picture, so nothing starts
                return []

        # A one-of-type app waits two report intervals before its first start (Picture's settle).
        picture = Picture(members, str(host.uuid or ""), cfg.node_type, cfg.mesh_timing().heartbeat_interval,
                          settle=2 * PictureTiming().interval)
        supervisor = Supervisor(specs, cfg.data_dir / "apps", env, host.local_now, picture=picture)
        supervisor.open()
        self.supervisor = supervisor
        stack.push_async_callback(supervisor.close)
        if self.handlers is not None:
            supervisor.watch = self._app_changed
        self._close_handlers_first(stack)
        spawn(supervisor.run())  # in the node's task group: once the node serves

    def _close_handlers_first(self, stack: contextlib.AsyncExitStack) -> None:
        """The handlers stop before the apps do (the exit stack runs backwards): a node that
        stops runs no handler on its apps stopping."""
        if self.handlers is not None:
            stack.push_async_callback(self.handlers.close)

    # ------------------------------------------------------------------ handlers' occurrences

    def subscriptions(self) -> Sequence[tuple[tuple[type, ...], Subscriber]]:
        if self.handlers is None:
            return []
        return [((PeerJoined, PeerStateChanged, PeerLeft), self._peer), ((LogAppended,), self._records)]

    def _peer(self, event: PeerJoined | PeerStateChanged | PeerLeft) -> bool:
        runner = self.handlers
        if isinstance(event, PeerJoined):
            on = "peer-up"
        elif isinstance(event, PeerLeft):
            on = "peer-gone"
        elif event.state == "suspect":
            on = "peer-suspect"
        else:
            return False
        if runner is not None and runner.wants(on):
            runner.fire((on,), {"HUDDLE_EVENT": on, "HUDDLE_PEER_NAME": event.name, "HUDDLE_PEER_ID": str(event.peer)},
                        event.to_json())
        return False

    def _records(self, event: LogAppended) -> bool:
        runner, host = self.handlers, self._host
        if runner is None or host is None:
            return False
        for record, _ in event.records:
            ons = triggers("event", record.kind)
            if runner.wants(*ons):
                source = record.source
                runner.fire(ons, {"HUDDLE_EVENT": "event", "HUDDLE_EVENT_KIND": record.kind,
                                  "HUDDLE_PEER_ID": str(source), "HUDDLE_PEER_NAME": host.name_of(source)},
                            {"type": "event", "source": str(source), "seq": record.seq, "kind": record.kind,
                             "body": json.loads(record.body), "time": record.timestamp})
        return False

    def _app_changed(self, name: str, state: str, label: str) -> None:
        runner, host = self.handlers, self._host
        ons = triggers("app", name, state)
        if runner is not None and host is not None and runner.wants(*ons):
            runner.fire(ons, {"HUDDLE_EVENT": "app", "HUDDLE_APP": name, "HUDDLE_APP_STATE": state},
                        {"type": "app", "app": name, "state": label, "node": str(host.uuid or ""),
                         "time": host.mesh_time()})

    def routes(self, app: web.Application) -> None:
        from ..api.apps_http import add_app_routes  # noqa: PLC0415 - aiohttp: when a node serves
        from ..api.handlers_http import add_handler_routes  # noqa: PLC0415 - likewise

        add_app_routes(app, self)
        add_handler_routes(app, self)

    def commands(self, sub: Any, client_options: ClientOptions, epilog: str) -> dict[str, ApiHandler]:
        from .cli import add_parsers, run  # noqa: PLC0415 - small; its client loads when it runs

        add_parsers(sub, client_options, epilog)
        return {"apps": run, "app": run}

    def facts(self) -> dict[str, object] | None:
        supervisor = self.supervisor
        return None if supervisor is None else dict(supervisor.labels())

    def details(self) -> dict[str, object] | None:
        """The ``apps-info`` facts (:mod:`huddle.control.details`): None when the node runs no app."""
        supervisor, host = self.supervisor, self._host
        if supervisor is None or host is None:
            return None
        rows: list[Row] = []
        since_of: dict[tuple[str, int], float] = {}
        for status in supervisor.statuses():
            name, pid, uptime = status["name"], status["pid"], status["uptime"]
            since = None
            if pid is not None and uptime is not None:
                # Read once per process: the mesh time it started, which then never changes (a
                # fresh subtraction each time would drift with the clock's corrections).
                since = self._since.get((name, pid))
                if since is None:
                    since = round(host.mesh_time() - uptime, 1)
                since_of[(name, pid)] = since
            rows.append((name, pid, status["restarts"], since, status["last_exit"],
                         supervisor.apps[name].spec.placement == "one-of-type"))
        self._since = since_of  # only the processes alive now
        return details_facts(rows)


class AppInfoFeature(FeatureBase):
    """The apps' details in the picture (``apps-info`` facts), beside their states (``apps``):
    a feature of its own because a feature's facts are one flat object, and placement reads the
    states alone (docs/control.md, "In the system picture")."""

    name: Final = "apps-info"

    def __init__(self, apps: AppsFeature) -> None:
        self._apps = apps

    def facts(self) -> dict[str, object] | None:
        return self._apps.details()
