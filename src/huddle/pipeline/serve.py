"""``huddle pipeline serve``: a long-lived Spark Connect server for ``run --remote``.

The server is Spark's own (``org.apache.spark.sql.connect.service.SparkConnectServer``,
the class Spark's ``sbin/start-connect-server.sh`` starts), run by the
``spark-submit`` PySpark ships with, in the foreground: no daemon, no pid file,
nothing downloaded (its jar is among PySpark's).  It gets the settings a local
run gets (:func:`~huddle.pipeline.session.default_conf`), so the jobs run on it
as they do on ``local[*]``; its Python workers run this interpreter (the
replay imports huddle in them).

It prints ``serving sc://HOST:PORT`` once the server accepts connections, and
stops cleanly on SIGTERM or Ctrl-C (the JVM is sent SIGTERM, which stops its
SparkContext; SIGKILL after :data:`STOP_SECONDS`).  A server that cannot start
(port taken, bad ``--master``, a JVM that exits) is one line and exit status 6,
as ``run``'s are.  docs/pipeline.md, "A warm Spark".
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from types import FrameType

from ..deathguard import death_guard
from .errors import SparkSetupError
from .remote import DEFAULT_PORT
from .session import _Relay, check_master, default_conf, require_java

__all__ = ["CONNECT_SERVER", "START_SECONDS", "STOP_SECONDS", "serve", "server_command", "spark_submit"]

CONNECT_SERVER = "org.apache.spark.sql.connect.service.SparkConnectServer"
START_SECONDS = 180.0  # a server not accepting connections after this long is given up on
STOP_SECONDS = 30.0  # after SIGTERM, the JVM's shutdown (the SparkContext's stop) gets this long before SIGKILL


def spark_submit() -> Path:
    """The ``spark-submit`` of the PySpark installed here."""
    from pyspark.find_spark_home import _find_spark_home  # noqa: PLC0415 - PySpark's own way to its home

    return Path(_find_spark_home()) / "bin" / "spark-submit"


def server_command(host: str, port: int, master: str, extra: Mapping[str, str] | None = None) -> list[str]:
    """The ``spark-submit`` command line of a Connect server on ``host:port``."""
    conf = default_conf(master)
    conf["spark.app.name"] = "huddle-pipeline-serve"
    conf["spark.connect.grpc.binding.address"] = host
    conf["spark.connect.grpc.binding.port"] = str(port)
    conf.update(extra or {})
    argv = [str(spark_submit()), "--class", CONNECT_SERVER, "--master", conf.pop("spark.master", master)]
    for key, value in conf.items():
        argv += ["--conf", f"{key}={value}"]
    return argv


def _accepts(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=1.0).close()
    except OSError:
        return False
    return True


def _check_port(host: str, port: int) -> None:
    """Raise :class:`SparkSetupError` unless this machine can listen on ``host:port`` now."""
    if not 1 <= port <= 65535:
        raise SparkSetupError(f"--port {port} is not 1..65535")
    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as s:
            s.bind((host, port))
    except OSError as exc:
        raise SparkSetupError(f"cannot serve on {host}:{port}: {exc.strerror or exc}") from None


def serve(*, host: str = "127.0.0.1", port: int = DEFAULT_PORT, master: str = "local[*]",
          conf: Mapping[str, str] | None = None, stacks: bool = False,
          say: Callable[[str], None] = print) -> int:
    """Run the server until SIGTERM or Ctrl-C (exit status 0) or until it dies
    (:class:`SparkSetupError`).  ``say`` is told ``serving sc://HOST:PORT``
    once it accepts connections; ``stacks``: the JVM's Java stacks kept."""
    extra = dict(conf or {})
    if extra.get("spark.jars.packages"):
        raise SparkSetupError("spark.jars.packages would download jars; the pipeline needs none (see docs/pipeline.md)")
    check_master(master)
    _check_port(host, port)
    require_java()
    env = {**os.environ, "PYSPARK_PYTHON": os.environ.get("PYSPARK_PYTHON", sys.executable)}
    if master.startswith("local") and host in ("127.0.0.1", "localhost", "::1"):
        env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    before = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    relay = _Relay(stacks=stacks)
    try:
        proc = subprocess.Popen(server_command(host, port, master, extra), env=env, stdin=subprocess.DEVNULL,
                                stdout=relay.write, stderr=relay.write,
                                preexec_fn=death_guard(signal.SIGTERM))  # noqa: PLW1509 - the parent-death guard
    except OSError as exc:
        relay.cause()
        raise SparkSetupError(f"cannot start spark-submit: {exc.strerror or exc}") from None
    try:
        return _watch(proc, relay, (host, port), stop, say)
    finally:
        if proc.poll() is None:
            proc.terminate()  # SIGTERM: the JVM's shutdown hooks stop the SparkContext
            try:
                proc.wait(STOP_SECONDS)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for s, handler in before.items():
            signal.signal(s, handler)


def _watch(proc: subprocess.Popen[bytes], relay: _Relay, where: tuple[str, int], stop: threading.Event,
           say: Callable[[str], None]) -> int:
    """Wait for the server to accept connections (say so), then for a stop or its death."""
    host, port = where
    deadline = time.monotonic() + START_SECONDS
    while not _accepts(host, port):
        if proc.poll() is not None:
            raise SparkSetupError(f"the Spark Connect server did not start: {relay.cause()}")
        if stop.is_set():
            relay.up()
            return 0
        if time.monotonic() > deadline:
            raise SparkSetupError(f"the Spark Connect server did not accept connections on {host}:{port} "
                                  f"within {START_SECONDS:.0f} s")
        stop.wait(0.1)
    relay.up()
    shown = f"[{host}]" if ":" in host else host
    say(f"serving sc://{shown}:{port}")
    while not stop.wait(0.5):
        if proc.poll() is not None:
            raise SparkSetupError(f"the Spark Connect server exited (status {proc.returncode})")
    return 0
