"""The simulated bout, played: each device's writes go to its own node's API, as an official's
laptop or phone would send them (``POST /api/v1/doc/ops?role=ROLE``), at the plan's times
divided by ``speed`` (docs/demo.md, "The simulated bout").

A write the node refuses (HTTP 422: it breaks the bout's rules) is counted with its reason
and the bout goes on, as an official would; any other failure ends the bout with an error.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from ..client import ApiError
from .plan import DEVICES, Write, plan_bout

__all__ = ["Played", "assign", "mesh_time", "play", "simulate", "summaries_agree"]

SETTLE_SECONDS = 20.0  # how long a settling write waits for every node to hold the same bout


@dataclass
class Played:
    """What a played bout did: writes and operations sent, the refused ones and why, the
    seconds it took, and per write the seconds from its send to the node's answer."""

    writes: int = 0
    ops: int = 0
    refused: list[tuple[Write, str]] = field(default_factory=list)
    seconds: float = 0.0
    answers: list[float] = field(default_factory=list)


def assign(apis: Sequence[str]) -> dict[str, str]:
    """Each device's node: the devices in turn over ``apis``, all but the last when there are
    two or more (the last node writes nothing: it shows what the others recorded)."""
    if not apis:
        raise ValueError("a bout needs at least one node")
    writers = list(apis[:-1]) if len(apis) >= 2 else list(apis)
    return {d.name: writers[i % len(writers)] for i, d in enumerate(DEVICES)}


async def _json(session: aiohttp.ClientSession, method: str, url: str, body: Any = None) -> tuple[int, Any]:
    try:
        async with session.request(method, url, json=body) as resp:
            text = await resp.text()
            try:
                return resp.status, json.loads(text) if text else None
            except ValueError:
                return resp.status, text
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise ApiError(f"{method} {url} failed: {exc or type(exc).__name__}") from None


async def mesh_time(session: aiohttp.ClientSession, api: str) -> float:
    """The node's mesh time now (``GET /api/v1/node``, its ``time``)."""
    status, info = await _json(session, "GET", f"{api}/api/v1/node")
    if status != 200 or not isinstance(info, dict):
        raise ApiError(f"{api}/api/v1/node answered {status}")
    return float(info["time"])


async def summaries_agree(session: aiohttp.ClientSession, apis: Sequence[str],
                          timeout: float = SETTLE_SECONDS) -> dict[str, Any]:
    """Wait until every node's ``GET /api/v1/bout/summary`` is the same; that summary
    (ApiError when they still differ after ``timeout`` seconds)."""
    deadline = time.monotonic() + timeout
    while True:
        seen = []
        for api in apis:
            status, summary = await _json(session, "GET", f"{api}/api/v1/bout/summary")
            if status != 200:
                raise ApiError(f"{api}/api/v1/bout/summary answered {status}: {summary}")
            seen.append(json.dumps(summary, sort_keys=True))
        if len(set(seen)) == 1:
            result: dict[str, Any] = json.loads(seen[0])
            return result
        if time.monotonic() > deadline:
            raise ApiError(f"the nodes' bout summaries still differ after {timeout:.0f} s")
        await asyncio.sleep(0.05)


async def play(plan: Sequence[Write], devices: Mapping[str, str], *, speed: float = 1.0,
               token: str | None = None, said: Callable[[Write], None] | None = None) -> Played:
    """Send ``plan``'s writes to the nodes (``devices``: device name -> its node's API URL),
    each at its time divided by ``speed``; after a settling write, wait until every node holds
    the same bout.  ``said``: told each write as it is sent (the demo prints some)."""
    if speed <= 0:
        raise ValueError(f"the speed must be positive, not {speed}")
    out = Played()
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    nodes = sorted(set(devices.values()))
    started = time.monotonic()
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30), headers=headers) as session:
        for w in plan:
            due = started + w.at / speed
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            if said is not None:
                said(w)
            api = devices[w.device]
            sent = time.perf_counter()
            status, answer = await _json(session, "POST", f"{api}/api/v1/doc/ops?role={w.role}", {"ops": list(w.ops)})
            out.answers.append(time.perf_counter() - sent)
            out.writes += 1
            out.ops += len(w.ops)
            if status == 422:
                out.refused.append((w, str(answer.get("error") if isinstance(answer, dict) else answer)))
            elif status != 201:
                raise ApiError(f"{w.device} ({w.role}) at {api}: {w.what}: {status} {answer}")
            if w.settle:
                await summaries_agree(session, nodes)
    out.seconds = time.monotonic() - started
    return out


async def simulate(apis: Sequence[str], *, seed: int = 1, jams: int | None = None, speed: float = 1.0,
                   token: str | None = None, said: Callable[[Write], None] | None = None) -> tuple[list[Write], Played]:
    """Plan a bout starting at the jam timer's node's mesh time now and play it on ``apis``
    (:func:`assign`): the plan and what playing it did."""
    devices = assign(apis)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10), headers=headers) as session:
        t0 = await mesh_time(session, devices[DEVICES[0].name])
    plan = plan_bout(seed, jams=jams, t0=round(t0, 3))
    return plan, await play(plan, devices, speed=speed, token=token, said=said)
