"""Hostile control messages on a real mesh (docs/control.md, "Orders from any node"; docs/protocol.md 17).

Two in-process nodes of a secured group; the hostile one is a member that sends, on its own
addressed channel, control payloads an honest node never makes: a forged signature, another
group's order, an oversized one, malformed ones, one addressed to another node, a flood, and a
replay of a good order.  The target refuses and counts each, starts nothing (its app, which
does not start by itself, stays stopped) and still serves; a good order then starts it, once.
An excluded sender's orders: tests/test_control_orders.py (the desk refuses them; the mesh
drops its channel besides, docs/protocol.md 13.2)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from conftest import group_key, wait_for_async

from huddle.config import NodeConfig
from huddle.control.orders import MAX_PAYLOAD, PREFIX, Order, encode
from huddle.control.section import AppSpec
from huddle.node import Node
from huddle.security import NodeIdentity, load_group_file

TICKER = "import time\nwhile True:\n    time.sleep(1)\n"


def _config(name: str, tmp: Path, seeds: tuple[str, ...] = (), apps: tuple[AppSpec, ...] = ()) -> NodeConfig:
    secret = load_group_file(group_key())
    return NodeConfig(name=name, group=secret.group, group_secret=secret, data_dir=tmp / name, log_level="warning",
                      apps=apps).with_overrides(api="127.0.0.1:0", beacon=False, interface="lo", seeds=seeds)


_until = wait_for_async  # within the event loop: the nodes run between polls


@pytest.mark.timeout(120)
def test_hostile_control_messages_are_refused_counted_and_start_nothing(tmp_path: Path) -> None:
    async def main() -> None:
        app = AppSpec("ticker", (sys.executable, "-c", TICKER), autostart=False, startsecs=0.2, stop_timeout=2)
        target = Node(_config("target", tmp_path, apps=(app,)))
        runs = [asyncio.create_task(target.run())]
        await asyncio.wait_for(target.wait_ready(), 30)
        hostile = Node(_config("hostile", tmp_path, seeds=(target.mesh.endpoint.removeprefix("tcp://"),)))
        runs.append(asyncio.create_task(hostile.run()))
        try:
            await asyncio.wait_for(hostile.wait_ready(), 30)
            await _until(lambda: target.mesh.alive_peers() and hostile.mesh.alive_peers(), 30, "the nodes to mesh")
            assert target.uuid is not None and hostile.uuid is not None and hostile.identity is not None
            me, there = hostile.identity, target.uuid
            group = target.config.group

            def order(oid: str, *, action: str = "start", grp: str = group, to: Any = None) -> bytes:
                return encode(me, hostile.uuid, Order(oid, grp, to or there, action, "ticker", hostile.mesh_time()))

            good = order("11" * 16)
            forged = bytearray(order("12" * 16))
            forged[-5] ^= 1
            hostile_payloads = [
                bytes(forged),
                encode(NodeIdentity.generate(), hostile.uuid, Order("13" * 16, group, there, "start", "ticker", 0.0)),
                order("14" * 16, grp="another-group"),
                order("15" * 16) + b" " * MAX_PAYLOAD,  # oversized
                PREFIX + b"\x01" + b"\x00" * 20,  # cut short
                PREFIX + b"\x09" + bytes(200),  # neither an order nor a result
                order("16" * 16, to=NodeIdentity.generate().node_id),  # addressed to another node
                *(PREFIX + bytes([1]) + bytes(range(100)) for _ in range(200)),  # a flood: keys not the sender's
            ]
            for payload in hostile_payloads:
                await hostile.send_to_wait(there, payload, 10)

            async with aiohttp.ClientSession() as http:
                async def stats() -> dict[str, int]:
                    async with http.get(f"{target.api_url}/api/v1/control") as resp:
                        assert resp.status == 200
                        return (await resp.json())["stats"]  # type: ignore[no-any-return]

                async def ticker() -> str:
                    async with http.get(f"{target.api_url}/api/v1/apps") as resp:
                        return str((await resp.json())["apps"][0]["state"])

                async def all_refused() -> bool:
                    s = await stats()
                    return s["forged"] == 202 and s["other_group"] == 1 and s["oversized"] == 1 \
                        and s["malformed"] == 2 and s["wrong_target"] == 1

                await _until(all_refused, 20, "every hostile message refused and counted")
                assert (await stats())["ran"] == 0 and await ticker() == "stopped", "nothing started"

                await hostile.send_to_wait(there, good, 10)  # a good order runs ...

                async def started() -> bool:
                    return await ticker() in ("starting", "running")

                await _until(started, 20, "the good order to start the app")
                await hostile.send_to_wait(there, good, 10)  # ... once: its replay is refused

                async def replay_refused() -> bool:
                    return (await stats())["replayed"] == 1

                await _until(replay_refused, 20, "the replay refused")
                assert (await stats())["ran"] == 1
                async with http.get(f"{target.api_url}/api/v1/node") as resp:
                    assert resp.status == 200  # still serving
        finally:
            hostile.stop()
            target.stop()
            await asyncio.gather(*runs)

    asyncio.run(main())

