"""The only place a SparkSession is made.  Everything else takes one.

Defaults suit a small machine (2 cores): few shuffle partitions, no web UI,
warnings only, the driver given a share of the RAM, the driver bound to
loopback for ``local`` masters, and nothing downloaded (no
``spark.jars.packages``: this pipeline needs no jar beyond Spark's own).
For ``local`` masters the Python workers run this interpreter (the replay
imports huddle in them) and the JVM logs warnings only (``log4j2.properties``
beside this file).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from pyspark.sql import SparkSession

from ..errors import HuddleError

__all__ = [
    "MIN_JAVA", "SparkSetupError", "default_conf", "java_version", "launched_by_spark_submit", "require_java",
    "start_session",
]

MIN_JAVA = 17  # Spark 4 runs on Java 17 and 21


class SparkSetupError(HuddleError):
    """Spark cannot start here (no Java, too old a Java)."""


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


def start_session(master: str | None = "local[*]", extra: Mapping[str, str] | None = None) -> SparkSession:
    """Check Java, then get or create the session.  ``extra`` may override any
    default but may not ask for downloads (``spark.jars.packages``).

    ``master`` None: under spark-submit, the master (and driver settings) it
    was given; run any other way, ``local[*]``."""
    if master is None and not launched_by_spark_submit():
        master = "local[*]"
    conf = default_conf(master)
    conf.update(extra or {})
    if conf.get("spark.jars.packages"):
        raise SparkSetupError("spark.jars.packages would download jars; the pipeline needs none (see docs/pipeline.md)")
    if not launched_by_spark_submit():
        require_java()
    if master is not None and master.startswith("local"):
        # Spark otherwise looks up the host name and warns when it resolves to loopback.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        # The workers run Python too (the replay imports huddle): this interpreter, not PATH's python3.
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark
