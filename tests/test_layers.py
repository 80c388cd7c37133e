"""huddle's layers, as a table this test enforces (docs/architecture.md shows the same).

Every ``import`` in every module under src/huddle counts: at the top, inside a
function, under ``if TYPE_CHECKING:``; relative ones resolved.  A module's
layer is found in LAYER_OF (longest prefix wins); an import between two layers
must be an arrow of ALLOWED.  On top of the table: no import cycle between
modules at all, nothing under huddle.log imports huddle.protocol, nothing under
huddle.posts or huddle.api imports huddle.node.  A new arrow is a decision:
make it here, in the table, and in docs/architecture.md.

A second test imports every module alone in a fresh interpreter, so a module
that imports only because another was imported first is found.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"
PACKAGE = SRC / "huddle"

# module (or package prefix) -> layer; the longest matching prefix wins.
LAYER_OF: dict[str, str] = {
    "huddle.errors": "base",
    "huddle.ids": "base",
    "huddle.limits": "base",
    "huddle.counters": "base",
    "huddle.ratelog": "base",
    "huddle.mdnstype": "base",
    "huddle.gcutil": "base",
    "huddle.gated": "base",  # an aiohttp site whose connections pass a gate (the API, the guests' WebSocket port)
    "huddle.deathguard": "base",  # a child process that dies with its parent (apps, handlers, the pipeline's server)
    "huddle.security": "security",
    "huddle.memtune": "base",
    "huddle.wire": "wire",
    "huddle.log": "log",
    "huddle.doc": "doc",
    "huddle.protocol": "protocol",
    "huddle.posts": "posts",
    "huddle.guests": "guests",
    "huddle.control": "control",  # apps: their section, their machine, their driver (docs/control.md)
    "huddle.transport": "transport",
    "huddle.discovery": "discovery",
    "huddle.config": "config",
    "huddle.driver": "driver",
    "huddle.finders": "finders",
    "huddle.host": "host",  # the node's parts that are not wiring: events, recording, renewal, keys, address
    "huddle.sim": "sim",
    "huddle.simlog": "sim",
    "huddle.simhostile": "sim",
    "huddle.api": "api",
    "huddle.node": "node",
    "huddle.client": "clients",
    "huddle.procs": "clients",
    "huddle.render": "render",
    "huddle.guest_client": "clients",
    "huddle.pipeline": "pipeline",
    "huddle.boutsim": "boutsim",  # the simulated bout: its plan (pure)
    "huddle.boutsim.play": "cli",  # ... played over nodes' APIs
    "huddle": "facade",
    "huddle.cli": "cli",
    "huddle.demo": "cli",
    "huddle.ports": "ports",  # the contracts between the node and its features
    "huddle.features": "features",  # the default list
    "huddle.posts.feature": "features",
    "huddle.posts.cli": "features",
    "huddle.doc.feature": "features",  # the bout document: its desk's driver, routes, command and facts
    "huddle.doc.cli": "features",
    "huddle.statsbook": "statsbook",  # the WFTDA statsbook: the document's cells, the xlsx read and written (openpyxl)
    "huddle.statsbook.feature": "features",  # its command, huddle bout
    "huddle.statsbook.cli": "features",
    "huddle.guests_feature": "features",  # beside the guests package: that loads only with --guests
    "huddle.security.features": "features",  # trust and rotation: their routes, command and facts
    "huddle.control.feature": "features",  # apps: the driver, routes, commands and facts
    "huddle.control.cli": "features",
    # orders from any node: the signed messages, their peer service and the desk (on the mesh, unlike the apps)
    "huddle.control.orders": "orders",
    "huddle.control.carrier": "orders",
    "huddle.control.remote": "orders",
    "huddle.control.settings": "sections",  # [control]: the shutdown and reboot commands
    "huddle.control.orders_feature": "features",
    "huddle.control.orders_cli": "features",
    "huddle.pairing": "pairing",  # the door's messages and requests, the door, the newcomer's side
    "huddle.pairing.feature": "features",  # a member's side: routes, command, facts
    "huddle.pairing.http": "features",
    "huddle.pairing.newcomer": "cli",  # huddle node's step before the node: load, pair for or found the secret
    "huddle.zre": "zre",  # ZRE as Zyre speaks it: codec and peer machine (pure), its driver (pyzmq, UDP)
    "huddle.zre.section": "sections",  # [zre]: read by the configuration, loaded by every node
    "huddle.zre.feature": "features",
    "huddle.hydra": "hydra",  # Hydra on its own wire: codec and session machine (pure), its ROUTER (pyzmq)
    "huddle.hydra.feature": "features",
    "huddle.crg": "crg",  # CRG ScoreBoard's game file and WebSocket state (pure: the document in, paths out)
    "huddle.crg.section": "sections",  # [crg]: read by the configuration, loaded by every node
    "huddle.crg.feature": "features",  # /WS, its pusher, `huddle bout --crg`
    "huddle.crg.ws_http": "features",
    "huddle.crg.cli": "features",
    "huddle.embed": "embed",  # huddle.Peer: a Zyre-style peer in-process, on its own node or on ZRE's driver
    "huddle.__main__": "entry",
    "huddle.pipeline.submit": "entry",
}

# layer -> the layers it may import (besides itself).  Read it bottom up: base knows
# nothing, wire knows base, storage (log) knows the wire format, the protocol knows
# storage's vocabulary, the services (posts, guests) sit on the protocol's events, the
# node wires everything, and the API sees the node only through api/ports.py.
ALLOWED: dict[str, set[str]] = {
    "base": set(),
    # Keys and secrets (docs/security.md): data and files only, known to everything that will sign,
    # verify or encrypt (transport, protocol, posts, discovery, guests, api) and to the node
    # and the CLI that load them.  It knows base alone.
    "security": {"base"},
    "wire": {"base"},
    "log": {"base", "wire"},
    "doc": {"base", "wire"},
    "statsbook": {"base", "doc"},  # pure apart from its files: the document and its summary in
    "protocol": {"base", "wire", "log", "security"},
    "guests": {"base", "security"},
    "control": {"base"},  # processes and files only: nothing of the mesh
    "orders": {"base", "wire", "protocol", "security", "control", "sections", "ports"},  # carried by addressed messages
    "posts": {"base", "wire", "protocol", "security"},  # wire: BULK, the message its peer service claims
    "transport": {"base", "wire", "security"},
    "discovery": {"base", "wire", "security"},
    # Pairing (docs/security.md): its own CurveZMQ socket (the transport's connection helpers),
    # and beacons the newcomer listens to (discovery).
    "pairing": {"base", "wire", "security", "transport", "discovery"},
    "zre": {"base", "discovery"},  # discovery: the interface it beacons on
    "hydra": {"base", "posts", "discovery", "zre"},  # posts: the store and client; zre: its peers; the interface
    "sections": {"base"},  # a feature's TOML section that lives in its package, beside nothing else of it
    # their sections: posts, guests, control, pairing, sections (zre)
    "config": {"base", "wire", "protocol", "posts", "guests", "discovery", "security", "control", "pairing",
               "sections"},
    # The mesh's I/O side (actions onto the transport) and the finders' start: parts of the
    # node that are not wiring, each below it.
    "driver": {"base", "wire", "protocol", "transport"},
    "finders": {"base", "config", "discovery", "transport"},
    "host": {"base", "wire", "log", "protocol", "security", "transport", "discovery", "config", "driver", "finders",
             "ports"},
    "sim": {"base", "wire", "log", "doc", "protocol", "posts", "security"},  # posts: the peer service it hosts
    # What a feature may use of the node and gives it (huddle/ports.py): the contract alone.
    "ports": {"base", "wire", "protocol", "config", "security", "clients"},
    "api": {"base", "wire", "log", "doc", "protocol", "posts", "guests", "config", "security", "ports", "control", "zre",
            "orders"},
    # Each feature (its package's feature.py and commands) and the default list: a feature plugs
    # its routes (api) and its commands (through the client, rendered) into the node.
    "features": {"base", "wire", "log", "doc", "protocol", "posts", "guests", "config", "security", "ports", "api",
                 "clients", "render", "control", "pairing", "zre", "hydra", "orders", "statsbook", "crg"},
    # The node names no feature package: it loops over the features it is given (the default list).
    "node": {"base", "wire", "log", "protocol", "transport", "discovery", "config", "api", "security",
             "driver", "finders", "host", "ports", "features"},
    # A Peer in-process (docs/peer-api.md): a node with its feature beside the default list, or ZRE's driver.
    "embed": {"base", "protocol", "config", "ports", "features", "node", "zre", "sections"},
    "facade": {"base", "wire", "protocol", "config", "node", "embed"},
    "clients": {"base", "guests", "facade"},
    "crg": {"base", "wire", "doc"},
    "pipeline": {"base", "wire", "doc", "statsbook"},  # reads exported logs; never the runtime; statsbook: --statsbook
    "render": set(),  # the API's answers as text: JSON in, text out
    "boutsim": {"base", "doc"},  # a bout's writes, planned from a seed: no I/O
    "cli": {"base", "wire", "log", "protocol", "transport", "config", "sim", "node", "facade", "clients",
            "pipeline", "security", "render", "ports", "features", "pairing", "boutsim", "statsbook"},
    "entry": {"cli"},
}

# Import cycles tolerated while a branch removes them: each must exist (the last test
# fails otherwise) and is listed only until that branch merges.  The set is empty:
# every cycle fails the test.
PENDING_CYCLES: set[frozenset[str]] = set()


@dataclass(frozen=True)
class Import:
    importer: str
    imported: str
    line: int


def _module_name(path: Path) -> tuple[str, bool]:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    is_package = parts[-1] == "__init__"
    if is_package:
        parts.pop()
    return ".".join(parts), is_package


def modules() -> dict[str, Path]:
    return {_module_name(p)[0]: p for p in sorted(PACKAGE.rglob("*.py"))}


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool, known: set[str]) -> Iterator[str]:
    """The huddle modules an import statement loads (``from pkg import mod`` loads pkg.mod)."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        if node.level:
            base = module.split(".") if is_package else module.split(".")[:-1]
            base = base[: len(base) - (node.level - 1)]
            source = ".".join([*base, node.module] if node.module else base)
        else:
            source = node.module or ""
        names = [f"{source}.{alias.name}" if f"{source}.{alias.name}" in known else source for alias in node.names]
    for name in names:
        # ``import huddle.a.b`` loads huddle.a.b; a name inside a module counts as the module
        target = name
        while target and target not in known:
            target = target.rpartition(".")[0]
        if target.startswith("huddle"):
            yield target


def imports(mods: dict[str, Path] | None = None) -> list[Import]:
    """Every import between huddle's modules, wherever it stands in the file."""
    mods = mods or modules()
    known = set(mods)
    out: list[Import] = []
    for module, path in mods.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import | ast.ImportFrom):
                out.extend(Import(module, target, node.lineno) for target in _targets(node, module, is_package, known)
                           if target != module)
    return out


def layer_of(module: str) -> str:
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        layer = LAYER_OF.get(".".join(parts[:n]))
        if layer is not None:
            return layer
    raise AssertionError(f"{module} is in no layer: add it to LAYER_OF in tests/test_layers.py")


def layer_violations(found: list[Import]) -> list[str]:
    bad = []
    for imp in found:
        a, b = layer_of(imp.importer), layer_of(imp.imported)
        if a != b and b not in ALLOWED[a]:
            bad.append(f"{imp.importer} (line {imp.line}) imports {imp.imported}: {a} -> {b} is not an arrow of ALLOWED")
    return bad


def rule_violations(found: list[Import]) -> list[str]:
    """The rules docs/architecture.md states beside the table (they hold whatever the table says)."""
    bad = []
    for imp in found:
        a, b = imp.importer, imp.imported
        if a.startswith("huddle.log") and b.startswith("huddle.protocol"):
            bad.append(f"{a} (line {imp.line}) imports {b}: storage knows no protocol")
        if (a.startswith(("huddle.posts", "huddle.api"))) and b == "huddle.node":
            bad.append(f"{a} (line {imp.line}) imports huddle.node: it gets a narrow interface (ports.py)")
    return bad


def cycles(found: list[Import]) -> dict[frozenset[str], list[str]]:
    """The import cycles between modules: each strongly connected set of modules
    (a knot), with a shortest cycle through it to show."""
    graph: dict[str, set[str]] = {}
    for imp in found:
        graph.setdefault(imp.importer, set()).add(imp.imported)
        graph.setdefault(imp.imported, set())
    # Tarjan's strongly connected components, iteratively.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    sccs: list[set[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    scc = set()
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        scc.add(w)
                        if w == v:
                            break
                    if len(scc) > 1:
                        sccs.append(scc)
    out: dict[frozenset[str], list[str]] = {}
    for scc in sccs:
        start = min(scc)
        # breadth first inside the component, back to start: a shortest cycle to show
        prev: dict[str, str] = {}
        frontier = [start]
        found_path: list[str] | None = None
        while frontier and found_path is None:
            nxt = []
            for v in frontier:
                for w in sorted(graph[v] & scc):
                    if w == start:
                        path = [v]
                        while path[-1] != start:
                            path.append(prev[path[-1]])
                        found_path = [start, *reversed(path[:-1]), start] if v != start else [start, start]
                        break
                    if w not in prev:
                        prev[w] = v
                        nxt.append(w)
                if found_path is not None:
                    break
            frontier = nxt
        out[frozenset(scc)] = found_path or sorted(scc)
    return out


def test_every_module_is_in_a_layer_and_every_layer_in_the_table() -> None:
    for module in modules():
        assert layer_of(module) in ALLOWED, f"{module}: layer {layer_of(module)} has no row in ALLOWED"
    for layer, targets in ALLOWED.items():
        assert targets <= set(ALLOWED), f"{layer} -> {targets - set(ALLOWED)}: no such layer"


def test_imports_follow_the_table() -> None:
    bad = layer_violations(imports())
    assert not bad, "imports against the layer table:\n" + "\n".join(bad)


def test_storage_knows_no_protocol_and_services_no_node() -> None:
    bad = rule_violations(imports())
    assert not bad, "\n".join(bad)


def test_no_module_imports_itself_through_others() -> None:
    found = [(knot, cycle) for knot, cycle in cycles(imports()).items() if knot not in PENDING_CYCLES]
    assert not found, "import cycles:\n" + "\n".join(
        " -> ".join(cycle) + (f"  (the knot also holds {', '.join(sorted(knot - set(cycle)))})"
                              if knot - set(cycle) else "")
        for knot, cycle in found)


def test_pending_cycles_are_still_there() -> None:
    """PENDING_CYCLES lists only cycles that exist (so it is emptied when they go)."""
    existing = set(cycles(imports()))
    gone = PENDING_CYCLES - existing
    assert not gone, f"no longer a cycle, remove from PENDING_CYCLES: {sorted(map(sorted, gone))}"


# ---------------------------------------------------------------- the checks themselves


def _fake_tree(tmp_path: Path, files: dict[str, str]) -> dict[str, Path]:
    out = {}
    for rel, text in files.items():
        path = tmp_path / "src" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    for path in sorted((tmp_path / "src" / "huddle").rglob("*.py")):
        parts = list(path.relative_to(tmp_path / "src").with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def test_a_function_level_or_type_checking_import_is_seen(tmp_path: Path) -> None:
    mods = _fake_tree(tmp_path, {
        "huddle/__init__.py": "",
        "huddle/node.py": "",
        "huddle/log/__init__.py": "",
        "huddle/log/store.py": "def f():\n    from ..protocol import replication\n",
        "huddle/protocol/__init__.py": "",
        "huddle/protocol/replication.py": "",
        "huddle/posts/__init__.py": "",
        "huddle/posts/service.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..node import Node\n",
    })
    found = imports(mods)
    assert {(i.importer, i.imported) for i in found} == {
        ("huddle.log.store", "huddle.protocol.replication"), ("huddle.posts.service", "huddle.node")}
    assert len(rule_violations(found)) == 2
    assert any("log -> protocol" in v for v in layer_violations(found))
    assert any("posts -> node" in v for v in layer_violations(found))


def test_a_cycle_is_found_and_shown() -> None:
    found = [Import("huddle.a", "huddle.b", 1), Import("huddle.b", "huddle.c", 1), Import("huddle.c", "huddle.a", 1),
             Import("huddle.c", "huddle.d", 1)]
    assert cycles(found) == {frozenset({"huddle.a", "huddle.b", "huddle.c"}):
                             ["huddle.a", "huddle.b", "huddle.c", "huddle.a"]}


# ---------------------------------------------------------------- each module alone


# Run in one fresh interpreter: each module is imported with no huddle module loaded
# (third-party ones stay, so that this takes seconds, not a minute of interpreters).
_IMPORT_EACH = """
import importlib, sys, traceback
failed = []
for name in sys.argv[1:]:
    for loaded in [m for m in sys.modules if m == "huddle" or m.startswith("huddle.")]:
        del sys.modules[loaded]
    try:
        importlib.import_module(name)
    except BaseException:
        failed.append(name + ":\\n" + traceback.format_exc(limit=4))
print("\\n\\n".join(failed))
sys.exit(1 if failed else 0)
"""


def _import_each(names: list[str]) -> tuple[int, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", _IMPORT_EACH, *names], capture_output=True, text=True, env=env,
                          timeout=240)
    return proc.returncode, proc.stdout + proc.stderr[-2000:]


@pytest.mark.timeout(300)
def test_every_module_imports_alone() -> None:
    """A module that works only when another was imported first (an import cycle
    entered from the wrong end, a name someone else sets) fails here."""
    names = [m for m in modules() if not m.endswith("__main__")]  # importing __main__ runs the CLI
    rc, out = _import_each(names)
    assert rc == 0, out


def test_a_module_that_needs_another_first_is_caught(tmp_path: Path) -> None:
    pkg = tmp_path / "huddle"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("X = 1\n")
    (pkg / "b.py").write_text("import huddle\nY = huddle.a.X\n")  # works only when huddle.a came first
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-c", _IMPORT_EACH, "huddle.a", "huddle.b"], capture_output=True,
                          text=True, env=env, timeout=60)
    assert proc.returncode == 1
    assert "huddle.b:" in proc.stdout and "huddle.a:" not in proc.stdout
