"""The ``huddle`` command's commands: one handler per command, in :data:`COMMANDS`, and the
features' commands, whose parsers carry their handlers (:func:`handler_of`).

A handler takes the parsed arguments and returns the exit status.  The commands
that talk to a node go through :class:`~huddle.client.ApiClient`: each returns what
the API answered and the text for a person, and :func:`_on_api` prints one or the
other (``--json``).  Rendering is :mod:`huddle.render`'s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from .. import render
from ..config import BUILTIN_TYPES, DEFAULT_API, NodeConfig, load_config
from ..errors import ConfigError, HuddleError
from ..limits import describe
from ..log.datadir import DataDir
from ..memtune import tune_malloc
from ..ports import ApiHandler, Shown
from ..security import GroupSecret, load_group_file, renew_identity

# Each command imports what only it needs inside its handler (deferred on purpose): `huddle node`
# and `huddle --help` do not load the simulator, the exporter, the repair or the features' handlers
# (tests/test_startup.py lists what a node's start must not import).
if TYPE_CHECKING:  # the client imports aiohttp: loaded by the commands that call a node, not by `huddle --help`
    from ..client import ApiClient

__all__ = ["COMMANDS", "Handler", "handler_of"]

Handler = Callable[[argparse.Namespace], int]


# ------------------------------------------------------------------ local commands

def _node_config(args: argparse.Namespace) -> NodeConfig:
    """The TOML file, then the flags over it (a dest per setting: huddle.config.SETTINGS)."""
    return load_config(args.config).with_flags(vars(args))


def _node(args: argparse.Namespace) -> int:
    from ..node import Node, run_node  # deferred on purpose: the node loads pyzmq, aiohttp and zeroconf  # noqa: PLC0415

    config = _node_config(args)
    tune_malloc()  # this process is a node's own: it moves large posts in 1 MiB blocks
    logging.basicConfig(
        level=config.log_level.upper(), stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )

    if config.group_secret is None and not config.open:
        from ..pairing.newcomer import prepare  # noqa: PLC0415 - only a node without a secret pairs

        config = prepare(config)

    def ready(node: Node) -> None:
        print(f"api {node.api_url}", flush=True)

    run_node(config, ready)
    return 0


def _simulate(args: argparse.Namespace) -> int:
    from ..sim import run_scenario  # noqa: PLC0415 - deferred: the simulator, not a node's
    from ..simhostile import run_hostile_scenario  # noqa: PLC0415 - deferred: the simulator, not a node's

    if args.nodes < 1 or args.events < 0 or args.runs < 1 or not 0.0 <= args.loss < 1.0:
        raise ConfigError("need --nodes >= 1, --events >= 0, --runs >= 1 and 0 <= --loss < 1")
    if args.appends is not None and not 1 <= args.appends <= max(1, args.events):
        raise ConfigError("--appends must be between 1 and --events")
    if args.partitions < 0 or args.crashes < 0 or args.jitter < 0 or not 0.0 <= args.duplicate < 1.0:
        raise ConfigError("need --partitions, --crashes, --jitter >= 0 and 0 <= --duplicate < 1")
    if args.attacks < 0:
        raise ConfigError("need --attacks >= 0")
    started = time.monotonic()

    def progress(text: str) -> None:
        if args.runs == 1 and not args.json:
            print(f"  [{time.monotonic() - started:6.1f} s] {text}", flush=True)

    failed = 0
    runs: list[dict[str, Any]] = []
    for seed in range(args.seed, args.seed + args.runs):
        if args.hostile:
            result = run_hostile_scenario(seed=seed, nodes=args.nodes, events=args.events, attacks=args.attacks)
        else:
            result = run_scenario(
                seed=seed, nodes=args.nodes, events=args.events, appends=args.appends, loss=args.loss,
                duplicate=args.duplicate, jitter=args.jitter,
                partitions=args.partitions, crashes=args.crashes,
                export=args.export if args.runs == 1 else None, export_format=args.format, wire=args.codec,
                progress=progress,
            )
        run = asdict(result) | {"wall_seconds": round(time.monotonic() - started, 3)}
        started = time.monotonic()
        failed += not result.converged
        if args.json:
            runs.append(run)
            continue
        print(render.simulate_text(run, run["wall_seconds"], counters=args.runs == 1))
        if not result.converged:
            for problem in result.problems[:10]:
                print(f"  {problem}")
            print(f"  rerun: {result.rerun}")
    if args.json:  # every run, its problems all and its counters, as the simulator gave them
        print(json.dumps({"runs": runs, "failed": failed, "export": args.export if args.runs == 1 else None},
                         indent=2))
    elif args.export and args.runs == 1:
        print(f"exported every node's log to {args.export}")
    return 1 if failed else 0


def _limits(args: argparse.Namespace) -> int:
    rows = describe(load_config(args.config).limits)
    if args.json:
        print(json.dumps([{"limit": k, "value": v, "about": about} for k, v, about in rows], indent=2))
    else:
        print(render.limits_text(rows))
    return 0


def _node_types(args: argparse.Namespace) -> int:
    custom = load_config(args.config).types if args.config else ()
    merged = {**BUILTIN_TYPES, **{t.name: t for t in custom}}
    types = [asdict(t) | {"gone_after": round(t.gone_after, 3)} for t in merged.values()]
    print(json.dumps(types, indent=2) if args.json else render.types_text(types))
    return 0


def _demo(args: argparse.Namespace) -> int:
    from ..demo import run_demo  # deferred on purpose: the demo loads aiohttp (the client)  # noqa: PLC0415

    return run_demo(args.nodes, args.report_dir, (args.bout_jams, args.bout_speed))


def _broker(args: argparse.Namespace) -> int:
    from ..transport.naming import run_broker  # deferred on purpose: the broker loads pyzmq  # noqa: PLC0415

    for what, endpoint in (("--pub", args.pub), ("--sub", args.sub)):
        if not endpoint.startswith("tcp://"):
            raise ConfigError(f"{what} must be tcp://HOST:PORT (e.g. tcp://*:5680), got {endpoint!r}")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    run_broker(args.pub, args.sub, lambda p, s: print(f"broker pub={p} sub={s}", flush=True))
    return 0


def _pipeline(args: argparse.Namespace) -> int:
    if args.pipeline_command == "live":
        from ..pipeline.live import live_command  # noqa: PLC0415 - deferred: the pipeline (PySpark once it runs)

        return live_command(args)
    from ..pipeline.command import run_command  # noqa: PLC0415 - deferred: the pipeline (PySpark once it runs)

    return run_command(args)


def _repair(args: argparse.Namespace) -> int:
    from ..log.integrity import repair  # noqa: PLC0415 - deferred: only this command repairs

    if not (args.data_dir / "node-id").exists() and not (args.data_dir / "log.sqlite").exists():
        raise ConfigError(f"{args.data_dir} is not a huddle data directory (no node-id, no log.sqlite)")
    data_dir = DataDir(args.data_dir)
    data_dir.lock()
    try:
        done = repair(args.data_dir, new_id=lambda: renew_identity(args.data_dir).node_id, always=args.new_identity)
    finally:
        data_dir.unlock()
    if args.json:  # what the repair did, as its parts say it
        print(json.dumps({"data_dir": str(args.data_dir), "repaired": done.new_id is not None,
                          "problems": list(done.problems), "kept": done.kept, "dropped": done.dropped,
                          "unreadable": done.unreadable, "aside": None if done.aside is None else str(done.aside),
                          "new_id": None if done.new_id is None else str(done.new_id),
                          "old_id": None if done.old_id is None else str(done.old_id)}, indent=2))
        return 0
    if done.new_id is None:
        print(f"the log in {args.data_dir} verifies: nothing to repair")
        return 0
    if not done.problems:
        print(f"the log in {args.data_dir} verifies")
    for problem in done.problems:
        print(f"damaged: {problem}")
    if done.problems:
        print(f"kept {done.kept} records that verify; {done.dropped} did not verify and {done.unreadable} stretches "
              f"could not be read (they stay in {done.aside or 'nothing: there was no file'})")
    print(f"new identity {done.new_id} (previous {done.old_id or 'none'}, listed in previous-ids), "
          "with a new key (the old one kept as node.key.previous-*)")
    return 0


def _group(args: argparse.Namespace) -> int:
    if args.group_command in ("keys", "install", "switch", "retire"):
        return _group_on_nodes(args)
    if args.group_command == "new":
        secret = GroupSecret.new(args.name)
        out = args.out or Path("".join(c if c.isalnum() or c in "._-" else "_" for c in args.name) + ".key")
        secret.save(out)
        if args.json:
            print(json.dumps({"group": secret.group, "file": str(out), "key_id": secret.key_id, "code": secret.code},
                             indent=2, ensure_ascii=False))
            return 0
        print(f"group {secret.group!r}: secret written to {out} (mode 0600), key id {secret.key_id}")
        print(f"join code (give it to members only; with the group's name it gives the secret):\n  {secret.code}")
        print(f"members join with: huddle node --group-key {out}   or   huddle node --group {secret.group} "
              f"--join {secret.code}")
        print("nodes given it encrypt and authenticate every mesh connection (CurveZMQ); add --allow-list to "
              "admit only the node keys each trusts (huddle trust add)")
        return 0
    secret = load_group_file(args.file)
    if args.json:
        print(json.dumps({"group": secret.group, "file": str(args.file), "key_id": secret.key_id,
                          "code": secret.code, "room_key": secret.room_key_text()}, indent=2, ensure_ascii=False))
        return 0
    print(f"group: {secret.group}\nkey id: {secret.key_id}\njoin code: {secret.code}")
    print(f"room key (guests give it in register's options: docs/guests.md): {secret.room_key_text()}")
    return 0


def _group_on_nodes(args: argparse.Namespace) -> int:
    """A rotation step (or the keys listed) on each --node in turn; 1 if any node refused it."""
    from ..client import ApiClient, ApiError  # deferred on purpose: aiohttp, only for commands that call a node  # noqa: PLC0415

    text = load_group_file(args.file).file_text() if args.group_command == "install" else ""  # checked here first
    urls = [api_url(argparse.Namespace(api=url)) for url in args.node] if args.node else [api_url(args)]
    token = args.token or os.environ.get("HUDDLE_TOKEN") or None

    async def step(api: ApiClient) -> dict[str, Any]:
        if args.group_command == "install":
            return await api.group_install(text)
        if args.group_command == "switch":
            return await api.group_switch(args.key_id)
        if args.group_command == "retire":
            return await api.group_retire(args.key_id)
        return await api.group_keys()

    async def each() -> int:
        failed = 0
        for url in urls:
            try:
                async with ApiClient(url, token=token) as api:
                    keys = await step(api)
            except ApiError as exc:
                print(f"huddle group {args.group_command}: {url}: {exc}", file=sys.stderr)
                failed += 1
                continue
            held = ", ".join(f"{k['key_id']} ({k['state']}, port {k['port']})" for k in keys["keys"])
            print(json.dumps(keys, ensure_ascii=False) if args.json else f"{url}: group {keys['group']!r}: {held}")
        return 1 if failed else 0

    return asyncio.run(each())


def _export(args: argparse.Namespace) -> int:
    from ..log.export import export  # noqa: PLC0415 - deferred: only this command exports

    if args.follow:
        return _follow(args)
    count = export(args.data_dir, args.out, args.format)
    if args.json:
        print(json.dumps({"events": count, "out": str(args.out), "format": args.format}))
    else:
        print(f"exported {count} events to {args.out}")
    return 0


def _follow(args: argparse.Namespace) -> int:
    """``huddle export --follow``: a part per poll with new rows, until Ctrl-C or SIGTERM."""
    import signal  # noqa: PLC0415 - deferred: only this command waits for a signal
    import threading  # noqa: PLC0415 - as above

    from ..log.follow import Part, follow  # noqa: PLC0415 - deferred: only this command follows

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())

    def told(part: Part) -> None:
        if args.json:
            print(json.dumps({"part": part.number, "events": part.events, "stats": part.stats}), flush=True)
        else:
            print(f"part {part.number:06d}: {part.events} events, {part.stats} statistics rows", flush=True)

    done = follow(args.data_dir, args.out, args.format, interval=args.interval, stop=stop, on_part=told)
    if args.json:
        print(json.dumps({"events": done.events(), "stats": done.stats, "out": str(args.out), "format": args.format}))
    else:
        print(f"stopped: {done.events()} events and {done.stats} statistics rows in {args.out}")
    return 0


# ------------------------------------------------------------------ commands that call a node's API

def api_url(args: argparse.Namespace) -> str:
    """--api, else $HUDDLE_API, else the default; http:// added when no scheme is given."""
    given: str = args.api or os.environ.get("HUDDLE_API") or f"http://{DEFAULT_API}"
    url = given if "://" in given else "http://" + given
    where = "--api" if args.api else "$HUDDLE_API"
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:  # not a number, or past 65535
        raise ConfigError(f"{where} {given!r}: the port must be a number from 1 to 65535, as in "
                          f"http://{DEFAULT_API}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname or port == 0:
        raise ConfigError(f"{where} {given!r} is not a node's API: give HOST:PORT or http://HOST:PORT, as in "
                          f"http://{DEFAULT_API} (the node prints its own as 'api http://...' when it starts)")
    return url.rstrip("/")


def _on_api(handler: ApiHandler) -> Handler:
    """A handler that runs ``handler`` with a client of the node's API and prints what it shows."""

    def run_command(args: argparse.Namespace) -> int:
        from ..client import ApiClient, ApiError  # deferred on purpose: aiohttp, only for commands that call a node  # noqa: PLC0415

        async def call() -> Shown:
            async with ApiClient(api_url(args), token=args.token or os.environ.get("HUDDLE_TOKEN") or None) as api:
                return await handler(api, args)

        try:
            shown = asyncio.run(call())
        except ApiError as exc:
            print(f"huddle {args.command}: {exc}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            return 130
        if shown is not None:
            data, text = shown
            print(json.dumps(data, indent=2, ensure_ascii=False) if args.json else text)
        return 0

    return run_command


async def _peers(api: ApiClient, args: argparse.Namespace) -> Shown:
    peers = await api.peers(args.tag or ())
    return peers, render.peers_text(peers, await api.node())


async def _system(api: ApiClient, args: argparse.Namespace) -> Shown:
    picture = await api.system()
    return picture, render.system_text(picture)


async def _info(api: ApiClient, args: argparse.Namespace) -> Shown:
    info = await api.node()
    return info, render.info_text(info)


async def _chat(api: ApiClient, args: argparse.Namespace) -> Shown:
    result = await api.chat(args.text, args.to)
    return result, f"sent to {result['sent_to']} peer(s)"


async def _emit(api: ApiClient, args: argparse.Namespace) -> Shown:
    try:
        body = json.loads(args.body)
    except ValueError as exc:
        raise HuddleError(f"the body is not JSON ({exc}); quote text as '\"text\"'") from None
    result = await api.emit(args.kind, body)
    return result, f"recorded {result['source'][:8]}#{result['seq']}"


async def _log(api: ApiClient, args: argparse.Namespace) -> Shown:
    names = {} if args.json else await api.names()  # --json: the answer as it is
    if args.summary:
        summary = await api.log_summary()
        return summary, render.log_summary_text(summary, names)
    events = await api.log(args.source, args.after, args.limit)
    return events, render.log_text(events, names)


async def _exclude(api: ApiClient, args: argparse.Namespace) -> Shown:
    result = await api.exclude(args.uuid, args.reason)
    return result, f"excluded {result['excluded'][:8]}: {result['reason']}"


async def _join(api: ApiClient, args: argparse.Namespace) -> Shown:
    peer = await api.join_peer(args.address, args.timeout)
    return peer, f"joined {peer['name']} ({peer['uuid'][:8]}) at {peer['endpoint']}"


async def _forget(api: ApiClient, args: argparse.Namespace) -> Shown:
    result = await api.forget(args.node)
    who = f"{result['name']} ({result['forgotten'][:8]})" if result["name"] else result["forgotten"][:8]
    return result, f"forgot {who} ({result['state']}): every node stops listing it, until it returns"


async def _send(api: ApiClient, args: argparse.Namespace) -> Shown:
    result = await api.send(args.to, args.texts, args.wait)
    return result, f"queued {len(result['sent'])} message(s)"


async def _tail(api: ApiClient, args: argparse.Namespace) -> Shown:
    names = await api.names()  # --json: beside the ids, as render.with_names adds them
    async for event in api.events(args.count):
        if isinstance(event.get("peer"), str) and event.get("name"):  # a peer met since: its name too
            names[event["peer"]] = str(event["name"])
        print(json.dumps(render.with_names(event, names), ensure_ascii=False) if args.json
              else render.tail_text(event, names, time.time()), flush=True)
    return None


async def _monitor(api: ApiClient, args: argparse.Namespace) -> Shown:
    async for line in api.monitor(args.level):
        print(json.dumps({"line": line}, ensure_ascii=False) if args.json else line, flush=True)
    return None


COMMANDS: Mapping[str, Handler] = {
    # local
    "node": _node, "demo": _demo, "node-types": _node_types, "limits": _limits, "simulate": _simulate,
    "broker": _broker, "pipeline": _pipeline, "repair": _repair, "export": _export, "group": _group,
    # through a node's API
    "peers": _on_api(_peers), "system": _on_api(_system), "info": _on_api(_info),
    "chat": _on_api(_chat), "emit": _on_api(_emit), "log": _on_api(_log), "exclude": _on_api(_exclude),
    "forget": _on_api(_forget),
    "send": _on_api(_send), "tail": _on_api(_tail), "monitor": _on_api(_monitor), "join": _on_api(_join),
}


def handler_of(args: argparse.Namespace) -> Handler:
    """The parsed command's handler: the core's, or a feature's (its parser set ``api_handler``)."""
    handler = COMMANDS.get(args.command)
    return handler if handler is not None else _on_api(args.api_handler)
