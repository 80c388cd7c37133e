"""A ``huddle node`` child process: start it, wait until it serves, stop it.

The demo and the tests drive real nodes this way, on 127.0.0.1 (``--interface
lo``), exactly as a user would: the node's first line on standard output is
``api http://HOST:PORT``; its log goes to ``DATA_DIR.log``.
"""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

__all__ = ["NodeProcess", "exit_description", "free_port"]

_EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")
_handed_out: set[int] = set()


def _ephemeral_range() -> tuple[int, int]:
    try:
        lo, hi = (int(x) for x in _EPHEMERAL.read_text().split())
    except (OSError, ValueError):
        return (32768, 60999)  # Linux's default
    return (lo, hi)


def free_port(kind: int = socket.SOCK_STREAM) -> int:
    """A port on 127.0.0.1 that is free now (TCP, or UDP for beacons), for a node to bind later.

    It is drawn *below* the kernel's ephemeral range: a port the kernel hands out itself (bind to
    0) is in that range, where any outgoing connection -- one node dialling another -- can take it
    before the node that was meant to bind it starts ("Address already in use").  A port is not
    handed out twice by one process."""
    lo, _hi = _ephemeral_range()
    first = 20000 if lo > 21000 else 1024
    if lo - first < 1000:  # no room below the range: fall back to the kernel's choice
        with socket.socket(socket.AF_INET, kind) as s:
            s.bind(("127.0.0.1", 0))
            return int(s.getsockname()[1])
    for _ in range(1000):
        port = random.randrange(first, lo)
        if port in _handed_out:
            continue
        try:
            with socket.socket(socket.AF_INET, kind) as s:
                s.bind(("127.0.0.1", port))
        except OSError:
            continue
        _handed_out.add(port)
        return port
    raise RuntimeError(f"no free port on 127.0.0.1 in {first}-{lo - 1}")


def exit_description(returncode: int) -> str:
    """How a child process ended, said plainly.  A native abort (SIGABRT: a failed
    assertion inside libzmq, say) cannot be caught in Python and leaves nothing but
    the message the library printed on standard error, which is in the node's log."""
    if returncode == -signal.SIGABRT:
        return "aborted (SIGABRT) -- see its log"
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exited with status {returncode}"


class NodeProcess:
    """A ``huddle node`` child process; ``api`` is known once it serves."""

    def __init__(self, name: str, data_dir: Path, *extra: str, group: str = "demo") -> None:
        self.name = name
        self.data_dir = data_dir
        cmd = [
            sys.executable, "-m", "huddle", "node", "--name", name, "--group", group,
            "--data-dir", str(data_dir), "--interface", "lo", "--api", "127.0.0.1:0", *extra,
        ]
        self.log_path = data_dir.with_suffix(".log")
        data_dir.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in wait()
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self._log)
        self.api = ""

    def wait_api(self, timeout: float = 20.0) -> str:
        """The API's URL, once the node prints it; an error if it exits or stays silent ``timeout`` s."""
        assert self.proc.stdout is not None
        deadline = time.monotonic() + timeout
        os.set_blocking(self.proc.stdout.fileno(), False)
        buf = b""
        while time.monotonic() < deadline:
            chunk = self.proc.stdout.readline()
            if chunk:
                buf += chunk
                if buf.endswith(b"\n"):
                    line = buf.decode().strip()
                    if line.startswith("api "):
                        self.api = line[4:]
                        return self.api
                    buf = b""
            elif self.proc.poll() is not None:
                raise RuntimeError(f"node {self.name} {exit_description(self.proc.returncode)}: {self.log_path}")
            else:
                time.sleep(0.02)
        raise TimeoutError(f"node {self.name} did not print its API address within {timeout} s")

    def signal(self, sig: int) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)

    def wait(self, timeout: float = 10.0) -> int:
        try:
            return self.proc.wait(timeout)
        finally:
            self._log.close()
