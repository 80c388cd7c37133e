"""Shared helpers: real node and naming-broker processes on 127.0.0.1, waiting with deadlines,
a ZeroMQ context for raw sockets, and loading a bench module."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import inspect
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import zmq

from huddle.procs import NodeProcess, exit_description, free_port
from huddle.security import GroupSecret, load_group_file

BENCH = Path(__file__).resolve().parent.parent / "bench"


def load_bench(name: str, monkeypatch: pytest.MonkeyPatch | None = None) -> ModuleType:
    """bench/``name``.py as module ``bench_<name>``, for a test that runs a bench's core.  With
    ``monkeypatch``, bench/ is on sys.path for the test (a bench that imports benchlib)."""
    if monkeypatch is not None:
        monkeypatch.syspath_prepend(str(BENCH))
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[f"bench_{name}"] = module
    spec.loader.exec_module(module)
    return module


def needs_java() -> None:
    """Java 17+ for Spark, or the test fails saying so: ``make test`` installs a JRE
    (scripts/system-deps), so a missing one is a machine to fix, not a test to skip."""
    from huddle.pipeline.session import SparkSetupError, require_java  # the pipeline extra: installed by make test

    try:
        require_java()
    except SparkSetupError as exc:
        pytest.fail(f"{exc} (scripts/system-deps installs a JRE; make test runs it)")


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.02) -> Any:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        last = predicate()
        if last:
            return last
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what} (last: {last!r})")
        time.sleep(interval)


async def wait_for_async(predicate: Callable[[], Any], timeout: float, what: str, interval: float = 0.02) -> Any:
    """:func:`wait_for` inside an event loop: the loop runs between polls; ``predicate`` may be a
    coroutine function."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    last: Any = None
    while True:
        last = predicate()
        if inspect.isawaitable(last):
            last = await last
        if last:
            return last
        if loop.time() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what} (last: {last!r})")
        await asyncio.sleep(interval)


def http(api: str, path: str, body: Any = None, method: str | None = None, raw: bytes | None = None) -> tuple[int, Any]:
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    req = urllib.request.Request(api + path, data=data, method=method or ("POST" if data is not None else "GET"))
    req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read() or b"null")
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def get(api: str, path: str) -> Any:
    status, data = http(api, path)
    assert status == 200, (status, data)
    return data


def alive_names(api: str) -> set[str]:
    return {p["name"] for p in get(api, "/api/v1/peers") if p["state"] in ("alive", "suspect")}


# The test groups' secrets: one group file per group name, made once a session (group_key).
_KEYS: dict[str, Path] = {}
_SECRET_FLAGS = ("--group-key", "--join", "--open")


@pytest.fixture(scope="session", autouse=True)
def _group_keys(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Where this session's group files go (group_key makes them on first use)."""
    _KEYS["."] = tmp_path_factory.mktemp("group-keys")
    try:
        yield
    finally:
        _KEYS.clear()


def group_key(group: str = "test") -> Path:
    """The session's group file for ``group`` (GroupSecret.new, saved as 'huddle group new' saves
    it), made on first use: every secured node of a test group shares it."""
    if group not in _KEYS:
        path = _KEYS["."] / f"{group}.key"
        GroupSecret.new(group).save(path)
        _KEYS[group] = path
    return _KEYS[group]


def room_key(group: str = "test") -> str:
    """The guests' room key of ``group``'s session secret (a secured group's room is keyed)."""
    return load_group_file(group_key(group)).room_key_text()


def security_flags(group: str, extra: tuple[str, ...] | list[str], *, secure: bool = True) -> list[str]:
    """What a test's ``huddle node`` adds to be secured (``--group-key``, the group's session
    file) or, with ``secure=False``, to run open (``--open``); nothing if ``extra`` chose already."""
    if any(flag in extra for flag in _SECRET_FLAGS):
        return []
    return ["--group-key", str(group_key(group))] if secure else ["--open"]


class Cluster:
    """Starts node processes for one test; all are killed at the end.  Nodes are secured
    with the group's session secret (group_key) unless started with ``secure=False``."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.beacon_port = free_port(socket.SOCK_DGRAM)
        self.nodes: list[NodeProcess] = []
        self.secure = True  # False: its nodes run open unless started with secure=True (the test says why)

    def start(self, name: str, *extra: str, group: str = "test", beacon: bool = True,
              data_dir: Path | None = None, wait: bool = True, secure: bool | None = None) -> NodeProcess:
        """``secure=False`` runs the node open (--open): the call site says why; None: ``self.secure``."""
        args = [*extra, *security_flags(group, extra, secure=self.secure if secure is None else secure)]
        if beacon:
            args += ["--beacon-port", str(self.beacon_port), "--beacon-interval", "0.25"]
        else:
            args += ["--no-beacon"]
        node = NodeProcess(name, data_dir or self.tmp / name, *args, group=group)
        self.nodes.append(node)
        if wait:
            node.wait_api()
        return node

    def mesh_complete(self, nodes: list[NodeProcess]) -> bool:
        names = {n.name for n in nodes}
        return all(alive_names(n.api) == names - {n.name} for n in nodes)

    def close(self) -> None:
        aborted = [n for n in self.nodes if n.proc.poll() == -signal.SIGABRT]  # before our SIGKILLs
        for n in self.nodes:
            n.signal(signal.SIGKILL)
        for n in self.nodes:
            with contextlib.suppress(Exception):
                n.wait(10)
        assert not aborted, "; ".join(f"node {n.name} {exit_description(-signal.SIGABRT)}: {n.log_path}"
                                      for n in aborted)


class Broker:
    """A ``huddle broker`` process on fixed loopback ports (so it can be restarted on them)."""

    def __init__(self, tmp: Path, name: str) -> None:
        self.pub_port, self.sub_port = free_port(), free_port()
        self.log = tmp / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    @property
    def endpoint(self) -> str:
        return f"tcp://127.0.0.1:{self.pub_port}"

    def start(self) -> None:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "huddle", "broker", "--pub", f"tcp://127.0.0.1:{self.pub_port}",
                 "--sub", f"tcp://127.0.0.1:{self.sub_port}"], stdout=subprocess.PIPE, stderr=log)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode()
        assert line.startswith("broker pub=tcp://127.0.0.1:"), self.log.read_text()

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    """One ``huddle broker`` process for a test, stopped after it."""
    b = Broker(tmp_path, "broker")
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture
def ctx() -> Iterator[zmq.Context[zmq.Socket[bytes]]]:
    """A ZeroMQ context for a test's raw sockets, destroyed (linger 0) after it."""
    c: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    try:
        yield c
    finally:
        c.destroy(linger=0)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(tmp_path)
    try:
        yield c
    finally:
        c.close()


@pytest.fixture
def open_cluster(cluster: Cluster) -> Cluster:
    """``cluster`` whose nodes run open (--open): a module that uses it says why."""
    cluster.secure = False
    return cluster


# ------------------------------------------------------------ a real browser

CHROMIUM = "/usr/bin/chromium"
# As this machine needs them (env notes): no sandbox as root, no background traffic to the closed network.
FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]


@pytest.fixture
def browser() -> Iterator[Any]:
    if not os.access(CHROMIUM, os.X_OK):
        pytest.skip(f"{CHROMIUM} is not installed (make test installs Debian's chromium: scripts/system-deps)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is in the test extras: pip install -e '.[test]'")
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=FLAGS)
        try:
            yield b
        finally:
            b.close()
