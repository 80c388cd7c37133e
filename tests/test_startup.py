"""What a node loads before it serves (63 nodes must start at once on 2 CPUs).

A ``huddle node`` is started for real (fresh data directory, API and ROUTER on
127.0.0.1, no beacon, no seeds) in a fresh interpreter; the moment it would print
its ``api`` line it prints the modules it has loaded instead.  The simulator, the
pipeline, the exporter, the guest servers, the naming client, mDNS, the QR encoder
and the XML parser are for other commands or other options: importing them is
start-up CPU every node paid for nothing.  No timing is asserted: the list is the
guard.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import free_port, group_key

SRC = Path(__file__).resolve().parent.parent / "src"

# Runs `huddle node ARGS...` through the CLI's own main(); the node's ready callback
# prints sys.modules as JSON and leaves at once (os._exit: nothing else to stop).
_START = """
import json, os, sys
import huddle.cli
import huddle.node

real_run_node = huddle.node.run_node

def run_node(config, on_ready=None):
    def ready(node):
        print(json.dumps(sorted(sys.modules)), flush=True)
        os._exit(0)
    real_run_node(config, ready)

huddle.node.run_node = run_node
sys.exit(huddle.cli.main(sys.argv[1:]))
"""

# Modules (and packages: a prefix followed by ".") a node without --guests, --zre, --mdns
# and --naming must not load before it serves.
NOT_ON_A_NODES_START = (
    "huddle.sim", "huddle.simhostile", "huddle.simlog", "huddle.demo", "huddle.pipeline", "pyspark", "pyarrow",
    "huddle.log.export", "huddle.client", "huddle.guest_client", "huddle.guests", "huddle.discovery.mdns",
    "zeroconf", "huddle.transport.naming", "zmq.asyncio", "segno", "defusedxml",
    "huddle.zre.driver", "huddle.zre.codec", "huddle.zre.peer",  # ZRE's side: with --zre alone
)


def _loaded(*argv: str) -> list[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", _START, *argv], capture_output=True, text=True, env=env,
                          timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr[-3000:]
    loaded: list[str] = json.loads(proc.stdout.strip().splitlines()[-1])
    return loaded


# ...but for the guests' settings, which every node's configuration reads (the package
# itself imports none of the rest).
LIGHT = ("huddle.guests", "huddle.guests.section")


def _heavy(loaded: list[str], names: tuple[str, ...]) -> list[str]:
    return [m for m in loaded if any(m == n or m.startswith(n + ".") for n in names) and m not in LIGHT]


@pytest.mark.timeout(180)
def test_a_node_serves_without_loading_what_other_commands_and_options_need(tmp_path: Path) -> None:
    loaded = _loaded("node", "--name", "s", "--group-key", str(group_key("startup")), "--data-dir", str(tmp_path / "s"),
                     "--interface", "lo", "--api", "127.0.0.1:0", "--no-beacon", "--log-level", "warning")
    assert "huddle.node" in loaded and "huddle.api.http" in loaded  # it did start and serve
    assert _heavy(loaded, NOT_ON_A_NODES_START) == []


@pytest.mark.timeout(180)
def test_an_option_still_loads_what_it_needs(tmp_path: Path) -> None:
    """The deferred imports are made when the option asks: --guests loads the guests' side."""
    loaded = _loaded("node", "--name", "g", "--group-key", str(group_key("startup")), "--data-dir", str(tmp_path / "g"),
                     "--interface", "lo", "--api", "127.0.0.1:0", "--no-beacon", "--log-level", "warning",
                     "--guests", "--guest-marco-port", str(free_port(socket.SOCK_DGRAM)))
    assert {"huddle.guests.bridge", "huddle.guests.server"} <= set(loaded)
    assert _heavy(loaded, NOT_ON_A_NODES_START) == _heavy(loaded, ("huddle.guests",))
