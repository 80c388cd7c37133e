"""``huddle demo``: start nodes on loopback, chat, show each one's peers, record a simulated
roller-derby bout on them (five officials' devices), supervise apps on one of them (one
crashes and is restarted, one is stopped from another node), stop them, and audit their logs
with the pipeline on Spark ``local[*]``.

It drives real ``huddle node`` processes through their HTTP API exactly as a
user would, and uses only 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import json
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from .boutsim import Write
from .boutsim.play import assign, simulate, summaries_agree
from .client import ApiClient
from .errors import HuddleError
from .guest_client import Guest
from .log.export import export
from .procs import NodeProcess
from .render import event_text, peers_text, system_text

__all__ = ["run_demo"]

# The second node's apps (docs/control.md): ``flaky`` runs a moment, crashes once (exit 3) and is
# restarted by its policy; ``scoreboard`` runs until another node's operator stops it.
_FLAKY = ("import pathlib, sys, time\n"
          "print('flaky: up', flush=True)\n"
          "mark = pathlib.Path('crashed-once')\n"
          "if not mark.exists():\n"
          "    time.sleep(0.6)\n"
          "    mark.touch()\n"
          "    print('flaky: crashing on purpose (exit 3)', flush=True)\n"
          "    sys.exit(3)\n"
          "while True:\n"
          "    time.sleep(1)\n")
_SCOREBOARD = "import time\nprint('scoreboard: showing the score', flush=True)\nwhile True:\n    time.sleep(1)\n"


def _apps_config(folder: Path) -> Path:
    """The TOML of the second node's two apps, written into the demo's folder."""
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / "apps.toml"
    config.write_text(
        f'[[apps]]\nname = "flaky"\ncommand = {json.dumps([sys.executable, "-c", _FLAKY])}\n'
        f'cwd = {json.dumps(str(folder))}\nrestart = "on-failure"\nstartsecs = 0.2\nbackoff = 0.2\n\n'
        f'[[apps]]\nname = "scoreboard"\ncommand = {json.dumps([sys.executable, "-c", _SCOREBOARD])}\n'
        "startsecs = 0.2\n")
    return config


async def _wait_mesh(nodes: list[NodeProcess], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    want = len(nodes) - 1
    while True:
        counts = []
        for n in nodes:
            async with ApiClient(n.api) as api:
                counts.append(sum(1 for p in await api.peers() if p["state"] == "alive"))
        if all(c == want for c in counts):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"mesh did not form within {timeout} s: alive peers per node {counts}")
        await asyncio.sleep(0.1)


async def _demo(nodes: list[NodeProcess], bout: tuple[int, float]) -> None:
    print(f"waiting for {len(nodes)} nodes to find each other (UDP beacons on 127.255.255.255)...")
    await _wait_mesh(nodes, 20.0)
    async with ApiClient(nodes[0].api) as api:
        security = (await api.node())["security"]
    print("full mesh formed.")
    print(f"mesh security: {security['mode']} mode, group key {security.get('key_id')}, "
          f"{security.get('refused_handshakes', 0)} connections refused.\n")
    received: dict[str, list[dict[str, Any]]] = {n.name: [] for n in nodes}

    async def listen(n: NodeProcess) -> None:
        async with ApiClient(n.api) as api:
            async for event in api.events():
                if event.get("type") == "chat":
                    received[n.name].append(event)

    listeners = [asyncio.create_task(listen(n)) for n in nodes]
    await asyncio.sleep(0.3)  # let the WebSocket subscriptions open
    for n in nodes:
        async with ApiClient(n.api) as api:
            await api.chat(f"hello from {n.name}")
    deadline = time.monotonic() + 10
    while any(len(v) < len(nodes) - 1 for v in received.values()) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    for t in listeners:
        t.cancel()
    for n in nodes:
        print(f"== {n.name} ({n.api}) received:")
        for e in received[n.name]:
            print("   " + event_text(e))
        async with ApiClient(n.api) as api:
            peers = await api.peers()
        print("   peers:")
        print("\n".join("     " + line for line in peers_text(peers).splitlines()))
        print()
    await _demo_document(nodes)
    await _demo_bout(nodes, *bout)
    await _demo_posts(nodes)
    await _demo_guests(nodes)
    await _demo_system(nodes)
    await _demo_apps(nodes)


async def _demo_apps(nodes: list[NodeProcess]) -> None:
    """The second node's apps: one crashed and restarted, one stopped by an order from the
    first node, the change seen in the last node's picture."""
    first, host, last = nodes[0], nodes[1], nodes[-1]
    print(f"== apps (docs/control.md): {host.name} runs 'flaky' (it crashes once) and 'scoreboard'")
    deadline = time.monotonic() + 20
    async with ApiClient(host.api) as api:
        while True:
            apps = {a["name"]: a for a in (await api.apps())["apps"]}
            if apps["flaky"]["restarts"] >= 1 and all(a["state"] == "running" for a in apps.values()):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{host.name}'s apps did not both run within 20 s: {apps}")
            await asyncio.sleep(0.1)
    flaky = apps["flaky"]
    print(f"   flaky crashed (exit {flaky['last_exit']}) and its policy (restart = on-failure) restarted it: "
          f"{flaky['state']}, restarts {flaky['restarts']}")
    for command in (("apps", "--node", host.name), ("app", "logs", "flaky", "--node", host.name)):
        print(f"   $ huddle {' '.join(command)}   (at {first.name})")
        print("\n".join("   " + line for line in _huddle(*command, "--api", first.api).strip().splitlines()))
    print(f"   $ huddle app stop scoreboard --node {host.name}   (at {first.name}: the order travels to {host.name})")
    print("   " + _huddle("app", "stop", "scoreboard", "--node", host.name, "--api", first.api).strip())
    async with ApiClient(last.api) as api:
        while True:
            member = next(m for m in (await api.system())["members"] if m.get("name") == host.name)
            seen = ((member.get("ext") or {}).get("apps") or {}).get("scoreboard")
            if seen == "stopped":
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"{last.name} did not see {host.name}'s scoreboard stop: {seen}")
            await asyncio.sleep(0.1)
    print(f"   {last.name}'s system picture: {host.name}'s scoreboard is {seen}; the order and its result "
          "are in every node's log\n")


async def _demo_system(nodes: list[NodeProcess]) -> None:
    """Every node computes the same system picture: wait for equal digests, show one."""
    print("== the system picture (huddle system; the same page at each node's / in a browser)")
    deadline = time.monotonic() + 20
    while True:
        pictures = []
        for n in nodes:
            async with ApiClient(n.api) as api:
                pictures.append(await api.system())
        agreed = len({p["digest"] for p in pictures}) == 1 and all(len(p["members"]) == len(nodes) for p in pictures)
        if agreed and all(m["health"] == "ok" for m in pictures[0]["members"]):
            break
        if time.monotonic() > deadline:
            if agreed:
                break  # agreed, on a picture that shows a problem: show it
            raise RuntimeError("the nodes' system pictures did not agree within 20 s")
        await asyncio.sleep(0.2)
    print("\n".join(("   " + line).rstrip() for line in system_text(pictures[0]).splitlines()))
    print(f"   the same digest on all {len(nodes)} nodes; the status page: {nodes[0].api}/\n")


async def _demo_document(nodes: list[NodeProcess]) -> None:
    """Two officials edit the bout document on different nodes; the last node shows it."""
    first, second, last = nodes[0], nodes[1 % len(nodes)], nodes[-1]
    print(f"== the bout document: {first.name} starts jam 1 and enters a lineup, {second.name} a penalty")
    async with ApiClient(first.api) as api:
        await api.doc_apply('<action><set period="1" jam="1"><attribute name="start">0</attribute></set>'
                            '<add period="1" jam="1"><lineup team="home" position="jammer" number="12"/></add>'
                            '</action>', "application/xml")
    async with ApiClient(second.api) as api:
        await api.doc_apply('{"op": "add", "to": {"period": 1, "jam": 1}, "children": [{"tag": "penalty", '
                            '"attrs": {"team": "away", "number": "7", "code": "B"}}]}', "application/json")
    async with ApiClient(last.api) as api:
        deadline = time.monotonic() + 10
        xml = await api.doc_xml()
        while "penalty" not in xml or "lineup" not in xml:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{last.name} did not get both edits: {xml}")
            await asyncio.sleep(0.05)
            xml = await api.doc_xml()
        jams = await api.jams()
    print(f"   {last.name} shows (huddle doc show):")
    print("   " + xml.strip().splitlines()[-1])
    active = jams["active"]
    print(f"   what jam are we on? active: period {active['period']} jam {active['jam']}\n")


async def _demo_bout(nodes: list[NodeProcess], jams: int, speed: float) -> None:
    """A simulated bout (docs/demo.md): five officials' devices write through the nodes but the
    last, which shows the result; the score as each jam ends, then the final from the last node."""
    by_api = {n.api: n.name for n in nodes}
    devices = assign([n.api for n in nodes])
    print(f"== a simulated bout (docs/demo.md): {jams} jams a period at {speed:g}x, five officials' devices: "
          + ", ".join(f"{device} on {by_api[api]}" for device, api in devices.items()))
    async with ApiClient(nodes[0].api) as api:  # a fresh bout: the document step above recorded a jam
        await api.doc_apply('{"op": "remove", "to": {"period": 1, "jam": 1}}', "application/json")
    trips: dict[str, tuple[str, int]] = {}

    def said(w: Write) -> None:
        for op in w.ops:
            for c in op.get("children", ()):
                if c["tag"] == "points":
                    trips[c["eid"]] = (c["attrs"]["team"], int(c["attrs"]["points"]))
            if op["op"] == "set" and op.get("attribute") == "points":
                trips[op["to"]["eid"]] = (trips[op["to"]["eid"]][0], int(op["value"]))
        if w.what.endswith(" ends") or w.settle:
            home = sum(p for team, p in trips.values() if team == "home")
            print(f"   {w.device:<16} {w.what}: home {home} - away {sum(p for _, p in trips.values()) - home}")

    _, played = await simulate([n.api for n in nodes], seed=random.randrange(1 << 30), jams=jams, speed=speed,
                               said=said)
    last = nodes[-1]
    async with aiohttp.ClientSession() as session:
        await summaries_agree(session, [n.api for n in nodes])
        summary = await summaries_agree(session, [last.api])  # the last node's own answer
        async with session.get(f"{last.api}/api/v1/bout/conflicts") as resp:  # each device wrote its own fields
            resp.raise_for_status()
            conflicts = (await resp.json())["conflicts"]
    teams = summary["teams"]
    penalties = sum(len(p) for by in summary["penalties"].values() for p in by.values())
    print(f"   {played.writes} writes ({played.ops} operations) in {played.seconds:.1f} s, "
          f"{len(played.refused)} refused by the bout's rules")
    print(f"   final score, from GET /api/v1/bout/summary at {last.name} (it recorded nothing): "
          f"{teams['home']['name']} {teams['home']['score']} - {teams['away']['score']} {teams['away']['name']}; "
          f"{len(summary['jams'])} jams, {penalties} penalties; {summary['status']}, signed by {summary['signed']}")
    print(f"   cross-role conflicts flagged to the head NSO (GET /api/v1/bout/conflicts): {len(conflicts)}")
    print(f"   the same summary on all {len(nodes)} nodes; the audit below writes the final document and "
          "summary (bout-GROUP.xml, .json)\n")
    if played.refused:
        raise RuntimeError(f"the nodes refused {len(played.refused)} of the bout's writes: {played.refused[0][1]}")


def _huddle(*args: str) -> str:
    """Run a ``huddle`` client command as a user would; its output, or an error with its stderr."""
    out = subprocess.run([sys.executable, "-m", "huddle", *args], check=False, capture_output=True, text=True,
                         timeout=60)
    if out.returncode != 0:
        raise RuntimeError(f"huddle {' '.join(args)} failed: {out.stderr.strip()}")
    return out.stdout


async def _demo_posts(nodes: list[NodeProcess]) -> None:
    """One node shares a file; the others fetch it on their own (Hydra sync, newest first)."""
    first, last = nodes[0], nodes[-1]
    size = 4 << 20
    print(f"== sharing a file: {first.name} posts a {size >> 20} MiB photo; the others fetch it by themselves")
    with tempfile.TemporaryDirectory(prefix="huddle-demo-post-") as tmp:
        photo = Path(tmp) / "jam1.jpg"
        photo.write_bytes(random.Random(7).randbytes(size))
        print("   $ huddle post add jam1.jpg --subject 'jam 1, the line-up'")
        print("   " + _huddle("post", "add", str(photo), "--subject", "jam 1, the line-up", "--api", first.api).strip())
        added = json.loads(_huddle("posts", "--json", "--api", first.api))[0]
        deadline = time.monotonic() + 30
        for n in nodes[1:]:
            while True:
                held = json.loads(_huddle("posts", "--json", "--api", n.api))
                if any(p["id"] == added["id"] for p in held):
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{n.name} did not fetch the post within 30 s")
                await asyncio.sleep(0.1)
        print(f"   $ huddle posts   (at {last.name})")
        print("\n".join("   " + line for line in _huddle("posts", "--api", last.api).strip().splitlines()))
        copy = Path(tmp) / "copy.jpg"
        _huddle("post", "get", added["id"], "-o", str(copy), "--api", last.api)
        same = copy.read_bytes() == photo.read_bytes()
        print(f"   {last.name}'s copy is {'byte for byte the same' if same else 'DIFFERENT'} (SHA1 {added['digest']})\n")
        if not same:
            raise RuntimeError("the fetched copy differs from the original")


async def _demo_guests(nodes: list[NodeProcess]) -> None:
    """A guest on the first node speaks; a guest on the last node hears it, over the mesh."""
    first, last = nodes[0], nodes[-1]
    ports = []
    for n in (first, last):
        async with ApiClient(n.api) as api:
            ports.append((await api.guests())["tcp_port"])
            join = await api.join()  # a secured group's room is keyed (docs/guests.md, "The room key")
    room_key = "" if join is None else str(join["room_key"])
    print(f"== guests (the Noam protocol): a scoreboard on {last.name} hears what a scorekeeper on {first.name} says")
    async with Guest("scoreboard", room="demo", hears=["score"], host=("127.0.0.1", ports[1]),
                     listen="127.0.0.1", room_key=room_key) as board, \
            Guest("scorekeeper", room="demo", speaks=["score"], host=("127.0.0.1", ports[0]),
                  listen="127.0.0.1", room_key=room_key) as keeper:
        started = time.monotonic()
        await keeper.speak("score", {"team": "home", "points": 4})
        event = await board.next_event(timeout=10)
    print(f"   scoreboard heard {event.guest} say {event.topic!r}: {json.dumps(event.value)} "
          f"after {time.monotonic() - started:.3f} s")
    print("   the same from a browser: <script src=\"/guest.js\"> (see docs/guests.md)\n")


def _audit(nodes: list[NodeProcess], exports: Path, report_dir: Path | None) -> bool:
    """Export each stopped node's log and run every job of the audit pipeline over them on
    Spark local[*]; print the findings and where report.html is.  False if the nodes did not
    converge; True, with a note, when there is no Java to run Spark on."""
    print("== the audit: each node's log exported (huddle export), then the audit pipeline "
          "(huddle pipeline run) on Apache Spark, local[*]")
    from .pipeline.errors import INSTALL, SparkSetupError, missing_modules  # noqa: PLC0415 - no PySpark in it

    missing = missing_modules()
    if missing:
        print(f"   skipped: the pipeline needs the 'pipeline' extra (no {', '.join(missing)}): {INSTALL}\n")
        return True
    from .pipeline.jobs import run_session  # noqa: PLC0415 - deferred on purpose: PySpark, only for this last part
    from .pipeline.session import require_java  # noqa: PLC0415 - as above
    try:
        require_java()
    except SparkSetupError as exc:
        print(f"   skipped: {exc}.")
        print("   To see it: apt-get install openjdk-17-jre-headless (or run scripts/system-deps as root), "
              "then make demo again.\n")
        return True
    for n in nodes:
        export(n.data_dir, exports / n.name, "parquet")
    out = report_dir or Path(tempfile.mkdtemp(prefix="huddle-demo-audit-"))
    print("   starting Spark (some seconds)...", flush=True)
    bouts: list[tuple[str, Any, dict[str, Any]]] = []
    summary = run_session([str(exports)], str(out), master="local[*]",
                          bout_writer=lambda group, root, bout: bouts.append((group, root, bout)))
    for line in summary.lines():
        print("   " + line)
    print(f"   report: {out.resolve() / 'report.html'} (open it in a browser; the tables are beside it)")
    for path in summary.bout_files:
        print(f"   the bout's final {'document' if path.endswith('.xml') else 'summary'}: {path}")
    for group, root, bout in bouts:  # the WFTDA statsbook, from the logs as the audit replayed them
        from .statsbook.workbook import write_statsbook  # noqa: PLC0415 - openpyxl: only here

        book = out.resolve() / (f"statsbook-{group}.xlsx" if len(bouts) > 1 else "statsbook.xlsx")
        write_statsbook(root, bout, book)
        print(f"   the statsbook: {book} (the WFTDA sheets; docs/statsbook.md)")
    print()
    return summary.converged is not False


def _group_secret(tmp: Path) -> Path:
    """The demo group's secret, made as a user makes one (``huddle group new``)."""
    key = tmp / "demo.key"
    _huddle("group", "new", "demo", "--out", str(key))
    print(f"$ huddle group new demo --out {key.name}\n   the nodes run with this group secret (--group-key "
          f"{key.name}): every mesh connection is encrypted and authenticated (CurveZMQ); a node without "
          "the secret is refused\n")
    return key


def run_demo(count: int = 3, report_dir: Path | None = None, bout: tuple[int, float] = (3, 300.0)) -> int:
    """The demo on ``count`` nodes; ``bout``: the simulated bout's jams a period and speed."""
    names = ["alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi"]
    count = max(2, min(count, len(names)))
    bout = (max(1, bout[0]), bout[1])
    port = random.randint(20000, 40000)
    with tempfile.TemporaryDirectory(prefix="huddle-demo-") as tmp:
        key = _group_secret(Path(tmp))
        nodes = [
            NodeProcess(names[i], Path(tmp) / names[i], "--group-key", str(key), "--beacon-port", str(port),
                        "--beacon-interval", "0.2", "--guests", "--guest-marco-port", str(port + 1), "--guest-port",
                        "0", "--guest-ws-port", "0",
                        *(("--config", str(_apps_config(Path(tmp) / "apps"))) if i == 1 else ()))
            for i in range(count)
        ]
        ok = False
        try:
            for n in nodes:
                n.wait_api()
            asyncio.run(_demo(nodes, bout))
            ok = True
        except Exception as exc:
            print(f"demo failed: {exc}", file=sys.stderr)
        finally:
            print("stopping the nodes (SIGTERM: each says GBYE to the others)...")
            for n in nodes:
                n.signal(signal.SIGTERM)
            codes = [n.wait() for n in nodes]
            print(f"all stopped, exit codes {codes}\n")
            if not ok:
                for n in nodes:
                    print(f"--- log of {n.name}:\n{n.log_path.read_text()[-2000:]}", file=sys.stderr)
        ok = ok and all(c == 0 for c in codes)
        if ok:
            try:
                ok = _audit(nodes, Path(tmp) / "export", report_dir)
            except HuddleError as exc:  # bad input, a Spark that cannot start: said, and the demo fails
                print(f"the audit failed: {exc}", file=sys.stderr)
                ok = False
        return 0 if ok else 1
