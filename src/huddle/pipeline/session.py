"""The only place a SparkSession is made.  Everything else takes one.

Defaults suit a small machine (2 cores): few shuffle partitions, no web UI,
warnings only, the driver given a share of the RAM, the driver bound to
loopback for ``local`` masters, and nothing downloaded (no
``spark.jars.packages``: this pipeline needs no jar beyond Spark's own).
For ``local`` masters the Python workers run this interpreter (the replay
imports huddle in them) and the JVM logs warnings only (``log4j2.properties``
beside this file).

A JVM this module starts writes its stderr through :class:`_Relay`: the line
every start prints (``WARNING: Using incubator modules``) is dropped, Java
stacks too unless asked for, and a JVM that exits before it is up is told in
one line (:class:`SparkSetupError`), not by its stack.  A master is checked
before the JVM starts (:func:`check_master`).
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import IO

from py4j.protocol import Py4JError
from pyspark import SparkConf, SparkContext
from pyspark.errors import PySparkException
from pyspark.java_gateway import launch_gateway
from pyspark.sql import SparkSession

from .errors import SparkSetupError, first_line

__all__ = [
    "MIN_JAVA", "check_master", "default_conf", "java_version", "launched_by_spark_submit", "require_java",
    "start_session",
]

MIN_JAVA = 17  # Spark 4 runs on Java 17 and 21

# The masters Spark 4 takes (its SparkSubmit refuses any other, after the JVM started).
_MASTER = re.compile(r"local(\[(\*|[1-9]\d*)(,[1-9]\d*)?\])?|local-cluster\[\d+,\d+,\d+\]|yarn|spark://\S+|k8s://\S+")
MASTER_CONNECT_SECONDS = 3.0  # a spark:// master that does not accept a connection in this long is refused


def java_version(java: str | None = None) -> tuple[int, str]:
    """``(major, the 'java -version' line)`` of the Java Spark would use:
    ``$JAVA_HOME/bin/java`` if JAVA_HOME is set, else ``java`` on PATH."""
    if java is None:
        home = os.environ.get("JAVA_HOME")
        java = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if java is None or not Path(java).exists():
        where = f"JAVA_HOME={os.environ['JAVA_HOME']}" if os.environ.get("JAVA_HOME") else "PATH"
        raise SparkSetupError(
            f"the pipeline runs on Apache Spark, which needs Java {MIN_JAVA} or newer, and there is no java on {where}; "
            "install one (Debian/Ubuntu: apt install openjdk-17-jre-headless) or point JAVA_HOME at it")
    try:
        done = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SparkSetupError(f"cannot run {java} -version: {exc}") from None
    text = (done.stderr or done.stdout).strip()
    line = text.splitlines()[0] if text else ""
    match = re.search(r'version "(\d+)(?:\.(\d+))?', line)
    if match is None:
        raise SparkSetupError(f"cannot tell the version of {java} from {line!r}")
    major = int(match.group(1))
    if major == 1 and match.group(2):  # "1.8.0_392" is Java 8
        major = int(match.group(2))
    return major, line


def require_java(java: str | None = None) -> int:
    """Raise :class:`SparkSetupError` unless Java 17+ is there; returns its major version."""
    major, line = java_version(java)
    if major < MIN_JAVA:
        raise SparkSetupError(
            f"the pipeline runs on Apache Spark 4, which needs Java {MIN_JAVA} or newer; found Java {major} ({line}); "
            "install openjdk-17 (or 21) and set JAVA_HOME to it")
    return major


def launched_by_spark_submit() -> bool:
    """True in a driver that spark-submit started (its JVM is already up and told PySpark its port)."""
    return "PYSPARK_GATEWAY_PORT" in os.environ


def _driver_memory() -> str:
    """A quarter of the RAM, between 1 and 8 GiB (local mode: the driver does the work)."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return "1g"
    return f"{max(1, min(8, total // 4 // 2**30))}g"


def default_conf(master: str | None, cores: int | None = None) -> dict[str, str]:
    """The configuration :func:`start_session` uses before ``extra`` overrides
    (``master`` None: the one spark-submit was given, so none is set here)."""
    cores = cores or os.cpu_count() or 1
    conf = {
        "spark.app.name": "huddle-pipeline",
        "spark.sql.shuffle.partitions": str(max(1, 2 * cores)),
        "spark.default.parallelism": str(max(1, cores)),
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.log.level": "WARN",
        "spark.driver.memory": _driver_memory(),
        "spark.sql.session.timeZone": "UTC",
        "spark.sql.adaptive.enabled": "true",
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        # One run generates about 170 classes; Spark's default cache of 100 evicts them
        # all before a later run (or a repeated query) can reuse one, so every run paid
        # Janino's compile and the JIT's again.
        "spark.sql.codegen.cache.maxEntries": "2000",
    }
    if master is not None:
        conf["spark.master"] = master
    if master is not None and master.startswith("local"):
        # Split input files into about 4 tasks a core: each node's export is one file, and
        # 3 files on 2 cores left one core idle for half of every scan.
        conf["spark.sql.files.minPartitionNum"] = str(4 * cores)
        conf["spark.sql.files.openCostInBytes"] = str(1 << 20)
        conf["spark.driver.host"] = "127.0.0.1"
        conf["spark.driver.bindAddress"] = "127.0.0.1"
        log4j = Path(__file__).with_name("log4j2.properties")
        # The parallel collector: this is batch work, where throughput counts and pauses
        # do not (measured: about 20 % less CPU than G1 for the same run).
        conf["spark.driver.extraJavaOptions"] = f"-Dlog4j.configurationFile=file:{log4j} -XX:+UseParallelGC"
    return conf


def check_master(master: str | None) -> None:
    """Raise :class:`SparkSetupError` unless ``master`` is one Spark takes and,
    for ``spark://HOST:PORT[,HOST:PORT]``, one of its masters accepts a TCP
    connection: said in one line before a JVM starts, not by the JVM's stack
    (or, for a master that is not there, a minute of retries)."""
    if master is None:
        return
    if not _MASTER.fullmatch(master):
        raise SparkSetupError(f"--master {master!r} is not a Spark master: give local[*], local[N], yarn, "
                              "spark://HOST:PORT or k8s://URL")
    if not master.startswith("spark://"):
        return
    tried: list[str] = []
    for where in master.removeprefix("spark://").split(","):
        host, _, port = where.rpartition(":")
        if not host or not port.isdigit():
            raise SparkSetupError(f"--master {master!r}: each master is HOST:PORT, got {where!r}")
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=MASTER_CONNECT_SECONDS).close()
            return
        except OSError as exc:
            tried.append(f"{where}: {exc.strerror or exc}")
    raise SparkSetupError(f"cannot reach the Spark master {master} ({'; '.join(tried)})")


class _Relay:
    """The stderr of the JVM this process starts, relayed to ours line by line.

    Until :meth:`up` the lines are kept, so a JVM that exits before its
    gateway is up can be told in one line (:meth:`cause`); after, they go
    through as they come.  The incubator warning every Spark 4 start prints
    (it asks for ``jdk.incubator.vector``) is always dropped; with ``stacks``
    false, so are the lines of Java stacks."""

    NOISE = re.compile(r"WARNING: Using incubator modules")
    STACK = re.compile(r"\s+at |\s*Caused by: |\s*Suppressed: |\s+\.\.\. \d+ more")
    BOILERPLATE = re.compile(r"Error: (Could not create the Java Virtual Machine|A fatal exception has occurred)")

    def __init__(self, *, stacks: bool) -> None:
        self.stacks = stacks
        read, self.write = os.pipe()  # the JVM's end is ``write``; closed here once the JVM has its own
        self.stream: IO[bytes] = os.fdopen(read, "rb")
        self.kept: list[str] = []
        self.relaying = False
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._pump, name="spark-stderr", daemon=True)
        self.thread.start()

    def _pump(self) -> None:
        with self.stream:
            for raw in iter(self.stream.readline, b""):
                line = raw.decode("utf-8", "replace").rstrip("\n")
                if self.NOISE.match(line) or (not self.stacks and self.STACK.match(line)):
                    continue
                with self.lock:
                    if not self.relaying:
                        self.kept.append(line)
                        continue
                print(line, file=sys.stderr, flush=True)

    def up(self) -> None:
        """The gateway is up: what was kept, then every line, goes through."""
        os.close(self.write)
        with self.lock:
            for line in self.kept:
                print(line, file=sys.stderr, flush=True)
            self.kept, self.relaying = [], True

    def cause(self) -> str:
        """Why the JVM exited, in one line: its last exception's message, else its
        last line (with ``stacks``, all it said is printed first)."""
        os.close(self.write)
        self.thread.join(timeout=10)  # the JVM has exited: its stderr ends with our end closed
        with self.lock:
            lines = [line.strip() for line in self.kept
                     if line.strip() and not self.STACK.match(line) and not self.BOILERPLATE.match(line.strip())]
            if self.stacks:
                print("\n".join(self.kept), file=sys.stderr, flush=True)
        for line in reversed(lines):
            match = re.search(r"[\w.$]+(?:Exception|Error): (.+)$", line)
            if match:
                return match.group(1)
        return lines[-1] if lines else "the JVM exited before Spark was up (--debug shows its output)"


def _launch(conf: Mapping[str, str], *, stacks: bool) -> None:
    """Start the JVM (spark-submit, as PySpark does) with its stderr through a
    :class:`_Relay`, and the SparkContext on it."""
    spark_conf = SparkConf().setAll(list(conf.items()))
    relay = _Relay(stacks=stacks)
    try:
        gateway = launch_gateway(spark_conf, popen_kwargs={"stderr": relay.write})  # type: ignore[no-untyped-call]
    except PySparkException:  # JAVA_GATEWAY_EXITED: the JVM said why on its stderr
        raise SparkSetupError(f"Spark did not start: {relay.cause()}") from None
    relay.up()
    try:
        SparkContext(conf=spark_conf, gateway=gateway)
    except (PySparkException, Py4JError) as exc:
        raise SparkSetupError(f"Spark did not start: {first_line(exc)}") from None


def start_session(master: str | None = "local[*]", extra: Mapping[str, str] | None = None, *,
                  log_level: str = "WARN", stacks: bool = True) -> SparkSession:
    """Check Java, then get or create the session.  ``extra`` may override any
    default but may not ask for downloads (``spark.jars.packages``).

    ``master`` None: under spark-submit, the master (and driver settings) it
    was given; run any other way, ``local[*]``.  ``log_level``: the JVM's
    log4j level once it is up (``OFF``: nothing; errors reach Python anyway);
    ``stacks`` false: a JVM this call starts prints no Java stack."""
    if master is None and not launched_by_spark_submit():
        master = "local[*]"
    conf = default_conf(master)
    conf["spark.log.level"] = log_level
    conf.update(extra or {})
    if conf.get("spark.jars.packages"):
        raise SparkSetupError("spark.jars.packages would download jars; the pipeline needs none (see docs/pipeline.md)")
    check_master(master)
    if not launched_by_spark_submit():
        require_java()
    if master is not None and master.startswith("local"):
        # Spark otherwise looks up the host name and warns when it resolves to loopback.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        # The workers run Python too (the replay imports huddle): this interpreter, not PATH's python3.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if SparkContext._gateway is None and not launched_by_spark_submit():  # no JVM yet: this call starts it
        _launch(conf, stacks=stacks)
    builder = SparkSession.builder
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level)
    return spark
