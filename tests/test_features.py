"""The feature unit (huddle/ports.py): a node runs the features it is given and nothing of
the ones it is not.

Two in-process nodes on loopback: one with the default features, one with all of them
removed (posts, the bout document, guests, trust, rotation) and a probe feature in their
place.  The second starts, serves and meshes (the first's document events reach its log);
the routes, commands and facts of posts and of the document are gone from it; the
probe's subscriber, event renderer, task, closer, routes, command and facts each do
their part.  And node.py names no feature package.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import contextlib
import json
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from huddle.cli.commands import handler_of
from huddle.cli.parse import build_parser
from huddle.config import NodeConfig
from huddle.features import default_features
from huddle.host.mesh import links_changed as _links_changed
from huddle.ids import NodeId
from huddle.node import Node
from huddle.ports import ApiHandler, ClientOptions, Feature, FeatureBase, FeatureHost, Renderer, Spawn, Subscriber
from huddle.protocol.events import ChatReceived
from huddle.security.features import RotationFeature, TrustFeature

SRC = Path(__file__).resolve().parent.parent / "src" / "huddle"
FEATURE_PACKAGES = ("huddle.posts", "huddle.doc", "huddle.guests", "huddle.guests_feature", "huddle.security.features")


@dataclass(frozen=True)
class Poked:
    """The probe's own event: no to_json, rendered by the probe alone."""

    peer: NodeId
    text: str
    time: float


class Probe(FeatureBase):
    """A feature made for this test: it hears chats first, and tells what it heard (the
    steps it has no part in are FeatureBase's)."""

    name = "probe"

    def __init__(self) -> None:
        self.event_renderers: Mapping[type, Renderer] = {Poked: self._render}
        self.host: FeatureHost | None = None
        self.chats = 0
        self.ran = asyncio.Event()
        self.cancelled = False
        self.closed = False

    @staticmethod
    def _render(event: Poked) -> dict[str, Any]:
        return {"type": "poked", "peer": str(event.peer), "text": event.text.upper(), "time": event.time}

    async def start(self, stack: contextlib.AsyncExitStack, spawn: Spawn, host: FeatureHost) -> None:
        assert host.uuid is not None  # the node's id is set before any feature starts
        self.host = host
        stack.callback(setattr, self, "closed", True)
        spawn(self._run())

    async def _run(self) -> None:
        self.ran.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled = True
            raise

    def subscriptions(self) -> Sequence[tuple[tuple[type, ...], Subscriber]]:
        return [((ChatReceived,), self._chat)]

    def _chat(self, event: ChatReceived) -> bool:
        assert self.host is not None
        self.chats += 1
        self.host.publish(Poked(event.peer, event.text, event.time))
        return event.text == "secret"  # consumed: the listeners after it never hear this one

    def routes(self, app: web.Application) -> None:
        async def facts(request: web.Request) -> web.Response:
            return web.json_response(self.facts())

        app.router.add_get("/api/v1/probe", facts)

    def commands(self, sub: Any, client_options: ClientOptions, epilog: str) -> dict[str, ApiHandler]:
        client_options(sub.add_parser("probe", help="what the probe heard", epilog=epilog))

        async def probe(api: Any, args: argparse.Namespace) -> tuple[Any, str]:
            return {}, ""

        return {"probe": probe}

    def facts(self) -> dict[str, object] | None:
        return {"chats": self.chats}


def test_the_probe_and_posts_satisfy_the_contract() -> None:
    features: list[Feature] = [Probe(), *default_features()]  # mypy checks each against the protocol
    assert [f.name for f in features] == ["probe", "posts", "doc", "statsbook", "guests", "trust", "rotation",
                                          "control", "apps", "apps-info", "pairing", "hydra", "zre", "crg"]


class _SecuredHost:
    """The part of a FeatureHost the trust and rotation features read."""

    def __init__(self, keys: int) -> None:
        self.allow_list = SimpleNamespace(listed=lambda: [{}] * keys)
        self.rotation = SimpleNamespace(describe=lambda: {"key_id": "ab12cd34", "keys": [{}, {}], "retired": []})


def test_trust_and_rotation_say_their_facts_only_in_their_mode() -> None:
    trust, rotation = TrustFeature(), RotationFeature()
    assert trust.facts() is None and rotation.facts() is None  # not started: nothing to say
    host: Any = _SecuredHost(keys=3)
    asyncio.run(trust.start(contextlib.AsyncExitStack(), lambda run: None, host))
    asyncio.run(rotation.start(contextlib.AsyncExitStack(), lambda run: None, host))
    assert trust.facts() == {"keys": 3}
    assert rotation.facts() == {"key_id": "ab12cd34", "held": 2}
    host.allow_list = host.rotation = None  # an open group: neither mode
    assert trust.facts() is None and rotation.facts() is None


class _Watcher:
    def __init__(self) -> None:
        self.seen: list[tuple[int, bool]] = []

    def changed(self, conn: int, up: bool) -> None:
        self.seen.append((conn, up))

    def forget(self, conn: int) -> None:
        pass


def test_link_changes_reach_every_watcher_and_no_watcher_asks_for_no_monitor() -> None:
    assert _links_changed([]) is None  # the transport monitors links only when someone watches
    one, two = _Watcher(), _Watcher()
    assert _links_changed([one]) == one.changed
    changed = _links_changed([one, two])
    assert changed is not None
    changed(3, False)
    assert one.seen == two.seen == [(3, False)]


# ------------------------------------------------------------------ node.py names no feature


def _imported(path: Path) -> set[str]:
    """Every module node.py imports (at the top, in a function, under TYPE_CHECKING), absolute."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            base = "huddle." + (node.module or "") if node.level == 1 else (node.module or "")
            out |= {base.rstrip(".")} | {f"{base}.{a.name}".replace("..", ".") for a in node.names}
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
    return out


def test_node_py_imports_no_feature_package() -> None:
    imported = _imported(SRC / "node.py")
    assert "huddle.features" in imported  # the default list, its one way to the features
    named = sorted(m for m in imported if any(m == p or m.startswith(p + ".") for p in FEATURE_PACKAGES))
    assert named == [], f"node.py imports feature packages: {named}"


def test_node_py_stays_a_composition_root() -> None:
    """The node wires and orders; what it does lives with its package (huddle/host/, the
    features): node.py stays within 400 lines (docs/architecture.md, "The feature unit")."""
    lines = len((SRC / "node.py").read_text().splitlines())
    assert lines <= 400, f"node.py has {lines} lines: move the logic to host/ or a feature"


def test_the_ast_scan_sees_a_feature_import(tmp_path: Path) -> None:
    path = tmp_path / "node.py"
    path.write_text("def f():\n    from .posts.service import PostService\n")
    assert "huddle.posts.service" in _imported(path)


# ------------------------------------------------------------------ the CLI


def test_a_feature_removed_takes_its_commands_with_it() -> None:
    def commands(parser: argparse.ArgumentParser) -> set[str]:
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        return set(sub.choices)

    everything = commands(build_parser())
    assert {"post", "posts", "guests", "trust", "pair", "node", "peers", "doc", "group"} <= everything
    without = commands(build_parser(features=[]))
    assert everything - without == {"post", "posts", "doc", "bout", "guests", "trust", "control", "apps", "app",
                                     "pair", "zre"}
    probe = Probe()
    parser = build_parser(features=[probe])
    assert commands(parser) == without | {"probe"}
    args = parser.parse_args(["probe", "--api", "127.0.0.1:1"])
    assert args.api_handler.__name__ == "probe" and callable(handler_of(args))
    with pytest.raises(SystemExit):
        build_parser(features=[probe]).parse_args(["posts"])
    with pytest.raises(SystemExit):
        build_parser(features=[probe]).parse_args(["doc", "jams"])
    assert handler_of(build_parser().parse_args(["doc", "jams", "--api", "127.0.0.1:1"])) is not None
    assert handler_of(build_parser().parse_args(["posts", "--api", "127.0.0.1:1"])) is not None


def test_help_loads_no_aiohttp_and_no_feature_driver() -> None:
    code = ("import sys, contextlib, io\nfrom huddle.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n    main(['--help'])\n"
            "print(sorted(m for m in sys.modules if m.startswith(('aiohttp', 'huddle.posts.service', "
            "'huddle.posts.store', 'huddle.api'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True,
                         env={"PYTHONPATH": str(SRC.parent), "PATH": "/usr/bin:/bin"})
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


# ------------------------------------------------------------------ two nodes, one without posts


async def _until(predicate: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = asyncio.get_running_loop().time() + timeout
    while not (value := predicate()):
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        await asyncio.sleep(0.02)
    return value


def _config(name: str, tmp_path: Path, seeds: tuple[str, ...] = ()) -> NodeConfig:
    # Open (chosen): an open group's trust and rotation routes answer 409, which this test tells
    # from the 404 of a node without their feature.
    return NodeConfig(name=name, group="features", data_dir=tmp_path / name, log_level="warning",
                      open=True).with_overrides(
        api="127.0.0.1:0", beacon=False, interface="lo", seeds=seeds)


@pytest.mark.timeout(120)
def test_a_node_without_posts_or_the_document_starts_serves_and_meshes_and_has_nothing_of_them(
        tmp_path: Path) -> None:
    async def main() -> None:
        full = Node(_config("full", tmp_path))
        runs = [asyncio.create_task(full.run())]
        await asyncio.wait_for(full.wait_ready(), 30)
        probe = Probe()
        bare = Node(_config("bare", tmp_path, seeds=(full.mesh.endpoint.removeprefix("tcp://"),)), features=[probe])
        runs.append(asyncio.create_task(bare.run()))
        try:
            await asyncio.wait_for(bare.wait_ready(), 30)
            await _until(lambda: full.mesh.alive_peers() and bare.mesh.alive_peers(), 30, "the two nodes to mesh")
            await _until(probe.ran.is_set, 10, "the probe's task to run")
            assert full.api_url is not None and bare.api_url is not None
            async with aiohttp.ClientSession() as http:
                async def get(api: str, path: str) -> tuple[int, Any]:
                    async with http.get(api + path) as resp:
                        return resp.status, await resp.json()

                async def post(api: str, path: str, body: Any) -> tuple[int, Any]:
                    async with http.post(api + path, json=body) as resp:
                        return resp.status, await resp.json()

                status, answer = await get(bare.api_url, "/api/v1/posts")
                assert status == 404 and "no such endpoint" in answer["error"]
                assert (await get(full.api_url, "/api/v1/posts")) == (200, [])
                status, answer = await get(bare.api_url, "/api/v1/guests")
                assert status == 404 and "no such endpoint" in answer["error"]  # no guests feature: no route
                status, answer = await get(full.api_url, "/api/v1/guests")
                assert status == 409 and "--guests" in answer["error"]  # the feature, hosting no guests
                for path in ("/api/v1/trust", "/api/v1/group/keys"):  # trust, rotation: an open group
                    assert (await get(bare.api_url, path))[0] == 404
                    assert (await get(full.api_url, path))[0] == 409
                assert (await get(bare.api_url, "/api/v1/apps"))[0] == 404  # apps: a node that runs none lists none
                assert (await get(full.api_url, "/api/v1/apps"))[1]["apps"] == []
                assert (await get(bare.api_url, "/api/v1/control"))[0] == 404  # orders: the feature's route alone
                assert (await get(full.api_url, "/api/v1/control"))[1]["stats"]["asked"] == 0
                # The document: its routes, the bout page and its facts on the full node alone; its
                # events are the log's, and reach the bare node's log all the same.
                await full.until_recording(30)
                op = {"op": "set", "to": {"period": 1, "jam": 1}, "attribute": "start", "value": "1.5"}
                status, answer = await post(full.api_url, "/api/v1/doc/ops", [op])
                assert status == 201 and answer["ops"][0]["source"] == str(full.uuid)
                for path in ("/api/v1/doc", "/api/v1/doc/history?eid=x", "/api/v1/doc/dropped", "/api/v1/bout/jams",
                             "/bout"):
                    async with http.get(bare.api_url + path) as resp:
                        assert resp.status == 404 and "no such endpoint" in (await resp.json())["error"], path
                    async with http.get(full.api_url + path) as resp:  # an eid never seen: the route's own 404
                        assert resp.status == 200 or "no element with eid x" in (await resp.json())["error"], path
                for path in ("/api/v1/doc/ops", "/api/v1/bout/start", "/api/v1/bout/stop"):
                    status, answer = await post(bare.api_url, path, [])
                    assert status == 404 and "no such endpoint" in answer["error"], path
                assert (await get(full.api_url, "/api/v1/bout/jams"))[1]["active"] is not None  # the jam started
                await _until(lambda: any(bare.store.of_kind("doc")), 30,
                             "the document's event to reach the log of the node without the document")
                _, info = await get(bare.api_url, "/api/v1/node")
                assert info["features"] == {"probe": {"chats": 0}} and info["guests"] is None  # no posts, no doc facts
                _, info = await get(full.api_url, "/api/v1/node")
                doc_facts = info["features"]["doc"]
                assert info["features"] == {"posts": {"posts": 0, "octets": 0}, "doc": doc_facts}
                assert doc_facts["events"] == 1 and doc_facts["dropped"] == 0 and len(doc_facts["digest"]) >= 16
                async with http.ws_connect(bare.api_url + "/api/v1/events") as ws:
                    await full.send_chat("secret", bare.uuid)  # the probe consumes it
                    await full.send_chat("hello", bare.uuid)
                    seen = [json.loads((await asyncio.wait_for(ws.receive(), 10)).data) for _ in range(3)]
                assert [(e["type"], e.get("text")) for e in seen] == [
                    ("poked", "SECRET"), ("poked", "HELLO"), ("chat", "hello")]
                assert (await get(bare.api_url, "/api/v1/probe")) == (200, {"chats": 2})
                # Its facts reach the other node's system picture (protocol.md 14.1 ``ext``); posts,
                # absent, has no section there: the picture knows no feature but by its report.
                exts = lambda: {m["name"]: m["ext"] for m in full.system()["members"]}  # noqa: E731
                await _until(lambda: exts().get("bare") == {"probe": {"chats": 2}}, 10, "the probe's facts at full")
                full_ext = {"posts": {"posts": 0, "octets": 0}, "doc": doc_facts}  # the document's too, by its report
                await _until(lambda: exts()["full"] == full_ext, 10, "the full node's facts in its picture")
        finally:
            for node in (bare, full):
                node.stop()
            await asyncio.wait_for(asyncio.gather(*runs), 30)
        assert probe.cancelled and probe.closed  # its task was cancelled, its closer ran

    asyncio.run(main())
