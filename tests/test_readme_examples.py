"""Every example of README.md runs as written, on the README's own loopback set-up.

The test reads README.md's fenced blocks, takes every command line that runs ``huddle`` (alone or
as a stage of a pipe) and every ``python`` block, and either runs it or finds it in
:data:`EXCUSED`, a small table of what makes a line unable to run on one machine, each with the reason.
A new example is therefore run as soon as it is written; one that cannot run here must say why.

Lines run in the README's order, through ``bash`` as a user types them, with only the
substitutions of :meth:`Readme.substitute` (ports, ``/tmp/``, the join code, a post's id, an eid):
- ``huddle node`` lines with ``--api 127.0.0.1:81xx`` are the set-up (alice, bob, carol, dora):
  started and kept running; any other ``huddle node`` (and ``huddle broker``) line is started,
  must print its first line (``api ...``, ``broker ...``), and must stop cleanly on SIGTERM;
- ``huddle tail`` / ``huddle monitor`` (which never end) run beside the lines that follow them
  until the block ends, and must have printed what :data:`CHECKS` says;
- a ``python`` block runs as the body of an async function (its ``await`` at the top level); a
  ``huddle`` command its comment names (what it waits for) runs beside it until it ends;
- ``export NAME=VALUE`` sets the variable for the lines that follow;
- every other line must exit 0 within a deadline, printing what :data:`CHECKS` says;
- a line that works on a set-up node's data directory (``export``, ``repair``) runs after the
  set-up is stopped, as the README's repair needs (a running node locks its directory).

Network safety: everything stays on 127.0.0.0/8.  Every node gets ``--interface lo`` (its beacons
go to 127.255.255.255) when its line has no ``--interface``, a beacon port of its own run (not
5670, which other runs may use) and ``--api 127.0.0.1:0`` when its line gives none; a broker's
``tcp://*`` becomes ``tcp://127.0.0.1``; lines that need another machine or a LAN are excused.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from conftest import alive_names, get, wait_for

from huddle.config import load_config
from huddle.procs import free_port

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
BIN = Path(sys.executable).parent  # the environment's `huddle` command
DEADLINE = 300.0  # seconds a line that ends may take (the Spark audit: 20 s alone, 90 s on a busy machine)

# What makes a README line unable to run here (a regular expression searched in the line) -> why.
# Patterns, not whole lines: an example whose other flags change stays excused for the same reason.
EXCUSED: dict[str, str] = {
    r"--seed 192\.168\.": "a peer on another machine (192.168.1.20); seeds on loopback: tests/test_seed_connections.py",
    r"--mdns\b": "mDNS on a LAN (multicast to 224.0.0.251 leaves loopback); tests/test_discovery.py",
    r"--naming tcp://10\.": "a naming broker on another machine (10.0.0.5); on loopback: tests/test_naming_auth.py",
    r"--config (node|server|display)\.toml": "node.toml (above) is a venue machine's: eth0, /var/lib/huddle, a seed at "
                                            "192.168.1.20; server.toml and display.toml run the reader's stats.py and "
                                            "scoreboard.py (the files parse: test_the_worked_apps_example_parses; "
                                            "an app waiting on another node's: tests/test_control_across.py)",
    r"^huddle trust add KEY .*\| trust": "three commands on one line ('|' reads 'or'), for a node in allow-list mode: "
                                         "tests/test_trust.py",
    r"^huddle group (install|switch|retire) .*--node URL": "a live rotation: URL, NEW_ID and OLD_ID stand for the "
                                                           "members of a running group; tests/test_rotate.py",
    r"^huddle app (restart|logs) scoreboard": "the scoreboard app of the TOML above, on a display node with its "
                                              "scoreboard.py; apps under a node: tests/test_control_processes.py",
    r"^huddle pair accept XXXX-": "a device asking to join, whose fingerprint its own screen shows; pairing end to "
                                  "end: tests/test_pairing.py",
    r"--node scoreboard-1|^huddle control reboot --all": "orders to a display node named scoreboard-1 that runs the "
                                                        "scoreboard app, and a reboot of every node: "
                                                        "tests/test_control_orders_processes.py",
    r"--input a/ b/ c/": "a/ b/ c/ stand for three nodes' exports; the same flags on the simulator's: tests/test_pipeline.py",
}


def excused(example: Example) -> str | None:
    """Why ``example`` cannot run here, or None."""
    return next((why for pattern, why in EXCUSED.items() if re.search(pattern, example.text)), None)


def loopback_only(text: str) -> None:
    """Refuse (fail the test) to run a line that would reach past 127.0.0.0/8: an address of
    another network, every interface, multicast DNS.  Such a line belongs in EXCUSED."""
    far = [a for a in re.findall(r"(?<![\d.])(\d{1,3}(?:\.\d{1,3}){3})(?![\d.])", text) if not a.startswith("127.")]
    assert not far and "tcp://*" not in text and not re.search(r"--mdns\b", text), \
        f"this README line would leave loopback ({far or text}): make it run on 127.0.0.1 or excuse it\n{text}"


# README line (a regular expression matched at its start) -> what its output must contain
CHECKS: dict[str, tuple[str, ...]] = {
    r"huddle peers --api 127\.0\.0\.1:8101": ("bob", "carol", "alive"),
    r"huddle tail --api 127\.0\.0\.1:8102 & +# bob's events": ("<alice> jam 1 is starting",),
    r"huddle chat ": ("sent to",),
    r"huddle send ": ("queued",),
    r"huddle tail --api 127\.0\.0\.1:8102 & +# bob sees": ("lineup locked", "for you only", "and this after it"),
    r"huddle tail --api 127\.0\.0\.1:8102 & +# \+ post": ("'the cat at the bout'", "from alice ("),
    r"huddle post add cat\.jpg": ("added post",),
    r"huddle posts": ("the cat at the bout", "re: cat"),
    r"huddle node-types": ("console", "display", "device"),
    r"huddle system": ("alice", "bob", "carol", "digest"),
    r"huddle group new derby": ("join code",),
    r"huddle node --group derby --join": (),
    r"huddle limits": ("mesh.max-sessions",),
    r"huddle emit ": ("recorded",),
    r"huddle log --api": ("penalty",),
    r"huddle log --summary": ("events:",),
    r"huddle export ": ("exported",),
    r"huddle repair ": ("the log in",),
    r"huddle simulate ": ("converged",),
    r"echo '<set": ("recorded",),
    r"echo '\{\"op\": \"add\"": ("new eids",),
    r"huddle doc show": ("Ada",),
    r"huddle doc jams": ("active:",),
    r"huddle doc history": ("add",),
    r"huddle guests ": ("room 'derby'",),
    r"huddle pipeline run": ("converged",),
    r"python:": ("score", "{'home': 3}"),
}


# ------------------------------------------------------------------ reading the README

@dataclass(frozen=True)
class Example:
    """One example: a command line (continuations joined, its comment dropped) or a python block."""

    text: str
    comment: str = ""  # the line's own comment, as written (a check may name it)
    block: int = 0  # which fenced block of the README
    python: bool = False

    @property
    def key(self) -> str:
        return "python:" + self.text if self.python else self.text


def _split_comment(line: str) -> tuple[str, str]:
    """A shell line and its comment: a ``#`` after a space, outside quotes."""
    quote = ""
    for i, c in enumerate(line):
        if quote:
            quote = "" if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip(), line[i + 1:].strip()
    return line.rstrip(), ""


def examples(readme: str) -> list[Example]:
    """The README's examples, in order: every line of a shell or plain block that runs
    ``huddle`` (first, or after a ``|``), every ``python`` block whole."""
    found: list[Example] = []
    for n, m in enumerate(re.finditer(r"^```(\w*)\n(.*?)^```", readme, re.MULTILINE | re.DOTALL)):
        lang, body = m[1], m[2]
        if lang == "python":
            found.append(Example(body, block=n, python=True))
            continue
        if lang not in ("", "sh", "shell", "bash", "console"):
            continue
        for line in re.sub(r"\\\n\s*", "", body).splitlines():
            command, comment = _split_comment(line)
            if re.match(r"\s*(huddle |export [A-Z_]+=)", command) or re.search(r"\|\s*huddle ", command):
                found.append(Example(" ".join(command.split()) if "'" not in command else command.strip(),
                                     comment, n))
            if m := re.match(r"or: (huddle [^#]*?)\s*(?:#|$)", comment):  # an alternative, in the comment
                found.append(Example(" ".join(m[1].split()), "", n))
    return found


def check_of(example: Example) -> tuple[str, ...]:
    for pattern, wanted in CHECKS.items():
        if re.match(pattern, example.key if not example.comment else f"{example.key}  # {example.comment}"):
            return wanted
    return ()


# ------------------------------------------------------------------ running them

SETUP = {"8101": "alice", "8102": "bob", "8103": "carol", "8104": "dora"}  # the README's ports -> nodes
LONG = re.compile(r"huddle (node|broker|tail|monitor)(?: |$)")


@dataclass
class Background:
    """A process that does not end by itself (a node, a broker, ``tail``), its output read as it comes."""

    example: Example
    proc: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    @property
    def out(self) -> str:
        return "".join(self.lines)

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            return self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            raise AssertionError(f"{self.example.text!r} did not stop within 10 s of SIGTERM") from None


class Readme:
    """The README's loopback set-up in ``tmp``, and the substitutions its lines need there."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.cwd = tmp / "cwd"
        self.cwd.mkdir()
        (self.cwd / "cat.jpg").write_bytes(bytes(range(256)) * 190)  # the files the examples name
        (self.cwd / "note.txt").write_text("re: the cat\n")
        self.ports = {p: str(free_port()) for p in SETUP}
        self.beacon_port = str(free_port(socket.SOCK_DGRAM))
        self.found: dict[str, str] = {}  # placeholder -> what an earlier line printed (CODE, a post id, EID)
        self.setup: dict[str, Background] = {}
        self.meshed: set[str] = set()
        self.background: list[Background] = []
        self.log = open(tmp / "stderr.log", "a")  # noqa: SIM115 - every process's standard error; closed by close()
        self.env = {k: v for k, v in os.environ.items() if k != "HUDDLE_API"} | {
            "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            "XDG_DATA_HOME": str(tmp / "xdg"),  # a node's default data directory, in tmp
        }

    def substitute(self, text: str) -> str:
        """The placeholders, as one mapping: README values -> this run's."""
        for readme_port, port in self.ports.items():
            text = text.replace(f"127.0.0.1:{readme_port}", f"127.0.0.1:{port}")
        text = re.sub(r"tcp://\*:(\d+)", lambda m: f"tcp://127.0.0.1:{self.broker_port(m[1])}", text)
        text = text.replace("/tmp/", f"{self.tmp}/")
        for placeholder, value in self.found.items():
            text = re.sub(rf"(?<![\w-]){re.escape(placeholder)}(?![\w-])", value, text)
        if re.match(r"huddle node(?: |$)", text):
            if "--interface" not in text:
                text += " --interface lo"
            if "--api" not in text:
                text += " --api 127.0.0.1:0"
            text += f" --beacon-port {self.beacon_port} --beacon-interval 0.25"
            if "--guests" in text:  # the guests' doors on ports of this run, not 1030 and 8089
                text += f" --guest-marco-port {free_port(socket.SOCK_DGRAM)} --guest-ws-port 0"
        return text

    def broker_port(self, readme_port: str) -> str:
        return self.found.setdefault(f"broker:{readme_port}", str(free_port()))

    def learn(self, example: Example, out: str) -> None:
        """What a line printed that later lines name by a placeholder."""
        if m := re.search(r"^join code.*:\n\s+(\S+)", out, re.MULTILINE):
            self.found["CODE"] = m[1]
        if (m := re.search(r"added post ([0-9a-f]{40})", out)) and "POST" not in self.found:
            self.found["POST"] = m[1]
            self.found["3d2202849b78c149e3de1d48f2a0e2e7921b1cdf"] = m[1]  # the README's post id
            self.found["3d2202849b78"] = m[1][:12]  # and its prefix
        if m := re.search(r"new eids (\S+?)(?:,|$)", out, re.MULTILINE):
            self.found["EID"] = m[1]

    def wait_meshed(self) -> None:
        """Before a client line: the set-up's running nodes see each other alive."""
        names = set(self.setup)
        if names == self.meshed:
            return
        apis = {n: f"http://127.0.0.1:{self.ports[p]}" for p, n in SETUP.items() if n in names}
        wait_for(lambda: all(names - {n} <= alive_names(api) for n, api in apis.items()), 30,
                 f"the README's set-up ({', '.join(sorted(names))}) to mesh")
        self.meshed = names

    def popen(self, text: str) -> subprocess.Popen[str]:
        return subprocess.Popen(["bash", "-c", "exec " + text], cwd=self.cwd, env=self.env, text=True,
                                stdout=subprocess.PIPE, stderr=self.log)

    def start(self, example: Example, text: str) -> None:
        first = "api " if text.startswith("huddle node ") else "broker " if text.startswith("huddle broker ") else ""
        api = self.api_of(text)
        subscribers = 0 if first else self.subscribers(api)
        bg = Background(example, self.popen(text))
        if not first:  # a tail: it streams once its node counts it, before the next line runs
            wait_for(lambda: bg.proc.poll() is not None or self.subscribers(api) > subscribers, 15,
                     f"{example.text!r} to subscribe")
            assert bg.proc.poll() is None, (example.text, bg.out, self.stderr())
            self.background.append(bg)
            return
        wait_for(lambda: bg.lines or bg.proc.poll() is not None, 30, f"{example.text!r} to start")
        assert bg.lines and bg.lines[0].startswith(first), (example.text, bg.out, self.stderr())
        port = re.search(r"--api 127\.0\.0\.1:(8\d{3})\b", example.text)
        if first == "api " and port and port[1] in SETUP:
            self.setup[SETUP[port[1]]] = bg  # the set-up: kept running
        else:
            assert bg.stop() == 0, (example.text, bg.out, self.stderr())

    def api_of(self, text: str) -> str:
        m = re.search(r"--api (\S+)", text)
        url = m[1] if m else self.env.get("HUDDLE_API", "127.0.0.1:8090")
        return url if "://" in url else "http://" + url

    @staticmethod
    def subscribers(api: str) -> int:
        return int(get(api, "/api/v1/node")["stats"]["api"]["subscribers"])

    def run(self, example: Example) -> None:
        text = self.substitute(re.sub(r"\s*&$", "", example.text))  # in the background: see start()
        loopback_only(text)
        if example.python:
            self.run_python(example, text)
            return
        if m := re.fullmatch(r"export ([A-Z_]+)=(\S+)", text):  # the README sets a variable for what follows
            self.env[m[1]] = m[2]
            return
        if LONG.match(example.text):
            if not re.match(r"huddle (node|broker) ", example.text):
                self.wait_meshed()
            self.start(example, text)
            return
        if not re.search(r"huddle (group new|node-types|limits|simulate|pipeline|export|repair)\b", example.text):
            self.wait_meshed()
        done = subprocess.run(["bash", "-c", text], cwd=self.cwd, env=self.env, text=True, capture_output=True,
                              timeout=DEADLINE, check=False)
        assert done.returncode == 0, (example.text, text, done.stdout, done.stderr)
        for wanted in check_of(example):
            assert wanted in done.stdout, (example.text, wanted, done.stdout)
        if m := re.search(r" (?:-o|--out) (\S+)", text):  # what it writes is there
            assert _written(self.cwd / m[1]), (example.text, done.stdout)
        self.learn(example, done.stdout)

    def run_python(self, example: Example, text: str) -> None:
        """A python block, as the body of an async function (its ``await`` at the top level); the
        ``huddle`` command its comment names (what it waits for) is run until the block ends."""
        program = "import asyncio\n\nasync def main() -> None:\n" + "".join(
            f"    {line}\n" for line in text.splitlines()) + "    print(event)\n\nasyncio.run(main())\n"
        self.wait_meshed()
        proc = subprocess.Popen([sys.executable, "-c", program], cwd=self.cwd, env=self.env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        helper = re.search(r"# .*?: (huddle .*)$", text, re.MULTILINE)
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline:
            if helper:
                subprocess.run(["bash", "-c", helper[1]], cwd=self.cwd, env=self.env, capture_output=True,
                               timeout=DEADLINE, check=True)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(0.5)
        if proc.poll() is None:
            proc.kill()
        out, err = proc.communicate(timeout=10)
        assert proc.returncode == 0, (example.text, out, err)
        for wanted in check_of(example):
            assert wanted in out, (example.text, wanted, out)

    def end_block(self) -> None:
        """The block's ``tail``s: each printed what its check wants, then is stopped."""
        for bg in self.background:
            for wanted in check_of(bg.example):
                wait_for(lambda w=wanted, b=bg: w in b.out, 15,
                         f"{bg.example.text!r} to print {wanted!r}: it printed {bg.out!r}")
            bg.stop()
        self.background.clear()

    def stderr(self) -> str:
        return (self.tmp / "stderr.log").read_text()[-3000:]

    def stop(self) -> None:
        for bg in [*self.background, *self.setup.values()]:
            with contextlib.suppress(Exception):
                bg.stop()
        self.background.clear()
        self.setup.clear()

    def close(self) -> None:
        self.stop()
        self.log.close()


@pytest.fixture
def readme(tmp_path: Path) -> Iterator[Readme]:
    with contextlib.closing(Readme(tmp_path)) as r:
        yield r


def _written(path: Path) -> bool:
    """A file with something in it, or a directory with something in it."""
    return any(path.iterdir()) if path.is_dir() else path.is_file() and path.stat().st_size > 0


def on_setup_data_dir(example: Example) -> bool:
    """A local command on a set-up node's data directory (which that node locks while it runs)."""
    m = re.search(r"--data-dir /tmp/(\w+)", example.text)
    return not example.text.startswith("huddle node ") and m is not None and m[1] in SETUP.values()


@pytest.mark.processes
@pytest.mark.timeout(600)  # some 50 lines, a Spark audit among them, on a busy machine
def test_every_readme_example_runs_or_says_why_not(readme: Readme) -> None:
    found = examples(README.read_text())
    later = [e for e in found if on_setup_data_dir(e)]
    block = -1
    for example in found:
        if example.block != block:
            readme.end_block()
            block = example.block
        if excused(example) or example in later:
            continue
        readme.run(example)
    readme.end_block()
    readme.stop()
    for example in later:
        readme.run(example)


# ------------------------------------------------------------------ the table and the parser

def test_every_excuse_matches_a_readme_line_and_says_why() -> None:
    found = examples(README.read_text())
    stale = [p for p in EXCUSED if not any(re.search(p, e.text) for e in found)]
    assert not stale, f"EXCUSED names lines README.md no longer has: {stale}"
    assert all(len(why) > 20 for why in EXCUSED.values())
    assert len(EXCUSED) <= 10, "the excused lines are a small table: make the new example run"
    assert sum(bool(excused(e)) for e in found) <= 18


def test_a_line_that_would_leave_loopback_is_refused_before_it_runs() -> None:
    loopback_only("huddle node --interface lo --api 127.0.0.1:0 --seed 127.0.0.1:5")
    for far in ("huddle node --seed 192.168.1.20:50123", "huddle broker --pub tcp://*:5680",
                "huddle node --no-beacon --mdns", "huddle node --api 0.0.0.0:8080"):
        with pytest.raises(AssertionError, match="would leave loopback"):
            loopback_only(far)


def test_every_check_matches_an_example() -> None:
    found = examples(README.read_text())
    keys = [e.key if not e.comment else f"{e.key}  # {e.comment}" for e in found]
    unused = [p for p in CHECKS if not any(re.match(p, k) for k in keys)]
    assert not unused, f"CHECKS names lines README.md no longer has: {unused}"


def test_the_parser_takes_huddle_lines_and_python_blocks_only() -> None:
    text = ("intro `huddle inline` is prose\n\n```sh\nmake demo   # not huddle\nhuddle node --name a \\\n"
            "    --api 127.0.0.1:8101 &   # the set-up\n  | huddle x\necho '{\"a\": \"# not a comment\"}' | huddle doc apply -\n"
            "# huddle in a comment\n```\n\n```toml\nhuddle = 1\n```\n\n```python\nprint(1)\n```\n\n"
            "```\nsrc/huddle/\n  cli/  the huddle command\nhuddle group new derby   # writes\n"
            "huddle node --group-key derby.key   # or: huddle node --group derby --join CODE\n```\n")
    found = examples(text)
    assert [(e.text, e.comment, e.python) for e in found] == [
        ("huddle node --name a --api 127.0.0.1:8101 &", "the set-up", False),
        ("| huddle x", "", False),
        ("echo '{\"a\": \"# not a comment\"}' | huddle doc apply -", "", False),
        ("print(1)\n", "", True),
        ("huddle group new derby", "writes", False),
        ("huddle node --group-key derby.key", "or: huddle node --group derby --join CODE", False),
        ("huddle node --group derby --join CODE", "", False),
    ]


def test_the_worked_apps_example_parses(tmp_path: Path) -> None:
    """The README's server.toml and display.toml load as written: the server type runs stats, the
    display type the scoreboard, held back on the server's stats (a dependency on another node)."""
    blocks = {m[1]: m[0] for m in re.finditer(r"```toml\n# (\w+\.toml):.*?\n```", README.read_text(), re.S)}
    for name in ("server.toml", "display.toml"):
        (tmp_path / name).write_text(blocks[name].removeprefix("```toml\n").removesuffix("```"))
    server, display = load_config(tmp_path / "server.toml"), load_config(tmp_path / "display.toml")
    assert server.node_type == "server" and [a.name for a in server.node_apps()] == ["stats"]
    assert display.node_type == "display" and [a.name for a in display.node_apps()] == ["scoreboard"]
    assert list(display.node_apps()[0].depends_on) == ["stats@server"]
