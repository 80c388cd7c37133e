"""A warm Spark: the jobs sent to a Spark Connect server (``huddle pipeline serve``).

``huddle pipeline run --remote sc://HOST:PORT`` (or ``[pipeline] remote`` in
``--config``) makes its session here instead of starting a JVM: the server has
already loaded Spark's classes and compiled the jobs' code for an earlier run,
so a run costs the work on the data, not Spark's start (docs/pipeline.md, "A
warm Spark").  The address is checked, and the server reached, before the
client is made: a bad or unreachable one is one line (:class:`SparkSetupError`,
exit status 6), not gRPC's retries and stack.

Connect's Python client needs more than PySpark (gRPC, protobuf, zstandard:
``pyspark[connect]``, in the ``pipeline`` extra); it is imported only here.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Mapping

from pyspark.errors import PySparkException
from pyspark.sql import SparkSession

from ..errors import ConfigError
from .errors import INSTALL, SparkSetupError, first_line

__all__ = ["CONNECT_SECONDS", "DEFAULT_PORT", "check_remote", "connect_session", "parse_remote"]

DEFAULT_PORT = 15002  # Spark Connect's own default
CONNECT_SECONDS = 3.0  # a server that does not accept a connection in this long is refused

# sc://HOST[:PORT][/;param=value;...]: Connect's own address form (Spark's ChannelBuilder reads the parameters).
_REMOTE = re.compile(r"sc://(?P<host>\[[0-9A-Fa-f:.]+\]|[^/:;\[\]]+)(?::(?P<port>\d{1,5}))?(?P<rest>/?(;[^;]*)*)")


def parse_remote(remote: str) -> tuple[str, int]:
    """``(host, port)`` of a Spark Connect address ``sc://HOST[:PORT]`` (PORT
    15002 when not given); :class:`SparkSetupError` naming it otherwise."""
    match = _REMOTE.fullmatch(remote.strip())
    if match is None:
        raise SparkSetupError(f"--remote {remote!r} is not a Spark Connect address: give sc://HOST:PORT "
                              f"(huddle pipeline serve prints it; e.g. sc://127.0.0.1:{DEFAULT_PORT})")
    port = int(match.group("port") or DEFAULT_PORT)
    if not 1 <= port <= 65535:
        raise SparkSetupError(f"--remote {remote!r}: port {port} is not 1..65535")
    return match.group("host").strip("[]"), port


def check_remote(remote: str) -> None:
    """Raise :class:`SparkSetupError` unless ``remote`` is an ``sc://`` address
    whose server accepts a TCP connection within :data:`CONNECT_SECONDS`."""
    host, port = parse_remote(remote)
    try:
        socket.create_connection((host, port), timeout=CONNECT_SECONDS).close()
    except OSError as exc:
        raise SparkSetupError(f"cannot reach the Spark Connect server {remote} ({exc.strerror or exc}); "
                              "is huddle pipeline serve running there?") from None


def _client_missing() -> str | None:
    """What the Connect client lacks here (None: nothing)."""
    try:
        from pyspark.sql.connect.utils import check_dependencies  # noqa: PLC0415 - its own imports are the check

        check_dependencies()
    except ImportError as exc:
        return str(exc)
    return None


def connect_session(remote: str, conf: Mapping[str, str] | None = None) -> SparkSession:
    """A Spark Connect session on the server at ``remote``, with ``conf`` set
    in it (runtime settings only: a setting the running server cannot change
    is a :class:`ConfigError` saying where to give it)."""
    check_remote(remote)
    missing = _client_missing()
    if missing is not None:
        raise SparkSetupError(f"--remote needs Spark Connect's Python client, not installed here ({missing}): {INSTALL}")
    if (conf or {}).get("spark.jars.packages"):
        raise SparkSetupError("spark.jars.packages would download jars; the pipeline needs none (see docs/pipeline.md)")
    try:
        spark = SparkSession.builder.remote(remote.strip()).getOrCreate()
    except PySparkException as exc:
        raise SparkSetupError(f"cannot open a session on the Spark Connect server {remote}: {first_line(exc)}") from None
    for key, value in (conf or {}).items():
        try:
            spark.conf.set(key, value)
        except PySparkException as exc:
            raise ConfigError(f"--conf {key}: the server at {remote} cannot change it now ({first_line(exc)}); "
                              "give it to huddle pipeline serve --conf") from None
    return spark
