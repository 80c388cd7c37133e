#!/usr/bin/env python3
"""An order's effect seen on another node, against an addressed message's round trip.

Three ``huddle node`` processes on 127.0.0.1 in one secured group (a, b, c); c runs one app,
``ticker`` (a Python loop).  From a, alternately, ``POST /api/v1/apps/ticker/stop?node=c`` and
``.../start?node=c``; the time runs from the order's POST on a until b's system picture
(``GET /api/v1/system`` on b, polled every 5 ms) shows the ticker's new state (``stopped``,
then ``starting`` or ``running``): the order's round trip a -> c -> a is not waited for, only
its effect on a third node.  The baseline, in the same run and the same HTTP path, is the
round trip of an addressed message: ``GET /api/v1/apps?node=c`` on a (an order of the list,
carried to c, and c's result carried back: two addressed messages and their DACKs).

Target (the issue's): the effect visible on every node within one round trip plus one report
interval.  A changed fact goes in the node's next regular report (docs/protocol.md 14): the
interval (2 s) times 0.9 .. 1.1 after the previous one, put off to the next heartbeat moment
(1 s), so one report interval is at most 3.2 s.  Between orders the script pauses a random
0 .. 2 s, so that the orders fall anywhere in the reports' phase.  Printed: each order, the
medians, their ratio, and the target.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import benchlib

TICKER = "import time\nwhile True:\n    time.sleep(1)\n"
REPORT_INTERVAL = 2.0  # the picture's report interval (docs/protocol.md 14)
HEARTBEAT = 1.0  # a regular report is put off to the next heartbeat moment (docs/protocol.md 14)
# The latest a changed fact waits for its report: an interval times at most 1.1, then a heartbeat.
REPORT_BOUND = REPORT_INTERVAL * 1.1 + HEARTBEAT


def _post(api: str, path: str) -> tuple[int, Any]:
    req = urllib.request.Request(api + path, data=b"{}", method="POST", headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=15) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def _seen(api: str) -> str | None:
    for m in benchlib.http_get(api, "/api/v1/system")["members"]:
        if m.get("name") == "c":
            return (m.get("ext") or {}).get("apps", {}).get("ticker")  # type: ignore[no-any-return]
    return None


def _until(predicate: Any, timeout: float, what: str, every: float = 0.005) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} within {timeout} s")
        time.sleep(every)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--orders", type=int, default=20, help="orders sent (half stop, half start; default 20)")
    parser.add_argument("--quick", action="store_true", help="6 orders")
    args = parser.parse_args()
    orders = 6 if args.quick else max(2, args.orders)
    benchlib.header("control orders: effect seen on another node vs an addressed round trip", orders=orders)
    with tempfile.TemporaryDirectory() as tmp_text:
        tmp = Path(tmp_text)
        key = benchlib.group_key_file(tmp)
        config = tmp / "c.toml"
        config.write_text(f'[[apps]]\nname = "ticker"\ncommand = {json.dumps([sys.executable, "-c", TICKER])}\n'
                          "startsecs = 0.1\nstop-timeout = 2\nstart-limit = 1000\n")  # no rate limit: one start per order
        a = benchlib.NodeProc("a", tmp, "--group-key", key, "--no-beacon")
        nodes = [a]
        try:
            benchlib.read_api_lines(nodes)
            seed = benchlib.http_get(a.api, "/api/v1/node")["endpoint"].removeprefix("tcp://")
            b = benchlib.NodeProc("b", tmp, "--group-key", key, "--no-beacon", "--seed", seed)
            c = benchlib.NodeProc("c", tmp, "--group-key", key, "--no-beacon", "--seed", seed, "--config", str(config))
            nodes += [b, c]
            benchlib.read_api_lines(nodes)
            _until(lambda: _seen(b.api) == "running", 60, "ticker running in b's picture", 0.05)
            for _ in range(3):  # warm: the channels a <-> c, the picture
                assert benchlib.http_get(a.api, "/api/v1/apps?node=c", 15)["apps"]
            effects: list[float] = []
            trips: list[float] = []
            for i in range(orders):
                t0 = time.perf_counter()
                assert benchlib.http_get(a.api, "/api/v1/apps?node=c", 15)["apps"]
                trips.append(time.perf_counter() - t0)
                order, wanted = ("stop", ("stopped",)) if i % 2 == 0 else ("start", ("starting", "running"))
                t0 = time.perf_counter()
                status, out = _post(a.api, f"/api/v1/apps/ticker/{order}?node=c")
                assert status == 200, out
                _until(lambda wanted=wanted: _seen(b.api) in wanted, 20, f"{order} seen on b")
                effects.append(time.perf_counter() - t0)
                print(f"   {order}: seen on b after {effects[-1] * 1000:.0f} ms "
                      f"(round trip {trips[-1] * 1000:.1f} ms)", flush=True)
                _until(lambda: _seen(b.api) in ("stopped", "running"), 20, "the ticker to settle")
                # Right after b saw c's report, the next is a whole interval away: a random pause
                # spreads the orders over the reports' phase instead of always starting at its worst.
                time.sleep(random.uniform(0, REPORT_INTERVAL))
        finally:
            benchlib.kill_all(nodes)
    rt, seen = benchlib.median(trips), benchlib.median(effects)
    benchlib.print_table(["measure", "median ms", "max ms"],
                         [["addressed round trip (apps?node=c on a)", f"{rt * 1000:.1f}", f"{max(trips) * 1000:.1f}"],
                          ["order on a -> state seen on b", f"{seen * 1000:.1f}", f"{max(effects) * 1000:.1f}"]])
    print(f"RESULT control order effect on b / addressed round trip: {seen / rt:.1f}x "
          f"({seen * 1000:.0f} ms / {rt * 1000:.1f} ms)")
    benchlib.target(f"control order seen on another node <= round trip + one report interval (at most "
                    f"{REPORT_BOUND:g} s: {REPORT_INTERVAL:g} s x 1.1, put off to the next {HEARTBEAT:g} s heartbeat)",
                    f"worst {max(effects) * 1000:.0f} ms, median {seen * 1000:.0f} ms", max(effects) <= rt + REPORT_BOUND)
    benchlib.footer()
    return 0


if __name__ == "__main__":
    sys.exit(main())
