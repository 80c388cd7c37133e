"""``huddle pipeline run`` and ``serve``: flags in, findings out, and every failure in one line.

Imports no PySpark until the flags are checked and the ``pipeline`` extra is
known to be there (a node without it still has the command, which says how to
install it).  A failure is one line on stderr, ``huddle pipeline: …``, and an
exit status by kind (:mod:`.errors`); ``--debug`` adds the Python and Java
stacks and keeps the JVM's warnings.  Progress (a line per job as it starts and
ends) goes to stderr, unless ``--quiet``; the findings go to stdout, as text or
(``--json``) as one JSON document.  ``--remote`` (or ``[pipeline] remote`` in
``--config``) sends the jobs to the server ``huddle pipeline serve`` runs.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tomllib
import traceback
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .errors import (
    EXIT_FAILED,
    EXIT_NOT_CONVERGED,
    INSTALL,
    OutputError,
    PipelineError,
    SparkSetupError,
    first_line,
    missing_modules,
)

__all__ = ["CONFIG_KEYS", "pipeline_config", "run_command"]

# The keys of the [pipeline] table a --config file may hold (docs/pipeline.md, "A warm Spark").
CONFIG_KEYS = {"remote": str, "master": str, "port": int}


def pipeline_config(path: Path | None) -> dict[str, Any]:
    """The ``[pipeline]`` table of a TOML file (other tables are the node's), checked:
    a :class:`ConfigError` naming the file and the key."""
    if path is None:
        return {}
    try:
        with open(path, "rb") as fh:
            table = tomllib.load(fh).get("pipeline", {})
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    if not isinstance(table, dict):
        raise ConfigError(f'in {path}: pipeline is a table: [pipeline] with remote = "sc://HOST:PORT" below it')
    out = {}
    for key, value in table.items():
        kind = CONFIG_KEYS.get(key.replace("_", "-"))
        if kind is None:
            raise ConfigError(f"in {path}: unknown key {key!r} in [pipeline]; known: {', '.join(CONFIG_KEYS)}")
        if not isinstance(value, kind) or isinstance(value, bool):
            raise ConfigError(f"in {path}: [pipeline] {key} must be {'a string' if kind is str else 'an integer'}, "
                              f"got {value!r}")
        out[key.replace("_", "-")] = value
    return out


def run_command(args: argparse.Namespace) -> int:
    """The exit status of ``huddle pipeline run`` (or ``serve``) with ``args`` (its one line printed)."""
    try:
        return _serve(args) if getattr(args, "pipeline_command", "run") == "serve" else _run(args)
    except PipelineError as exc:
        if args.debug:
            traceback.print_exc()
        print(f"huddle pipeline: {exc}", file=sys.stderr)
        return exc.exit_status
    except ConfigError:
        raise  # bad usage: the CLI's own line and status 2
    except Exception as exc:  # a Spark job failed in a way no check foresaw: its cause, not its stack
        if args.debug:
            raise
        print(f"huddle pipeline: the run failed: {first_line(exc)} (--debug shows the stacks)", file=sys.stderr)
        return EXIT_FAILED


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _conf(items: list[str]) -> dict[str, str]:
    conf: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"--conf wants KEY=VALUE, got {item!r}")
        conf[key.strip()] = value.strip()
    return conf


def _require_extra() -> None:
    missing = missing_modules()
    if missing:
        raise SparkSetupError(f"the pipeline needs the 'pipeline' extra, not installed here (no {', '.join(missing)}): "
                              f"{INSTALL}")


def _serve(args: argparse.Namespace) -> int:
    conf, settings = _conf(args.conf), pipeline_config(args.config)
    _require_extra()
    from .serve import serve  # noqa: PLC0415 - deferred: PySpark

    def say(line: str) -> None:
        print(line, flush=True)

    return serve(host=args.host, port=settings.get("port", 15002) if args.port is None else args.port,
                 master=args.master or settings.get("master", "local[*]"), conf=conf, stacks=args.debug, say=say)


def _run(args: argparse.Namespace) -> int:
    conf, settings = _conf(args.conf), pipeline_config(args.config)
    if args.window <= 0:
        raise ConfigError(f"--window must be positive, got {args.window}")
    if args.remote and args.master:
        raise ConfigError("--remote sends the jobs to a running server, --master starts Spark here: give one")
    # A flag over the config file: --master runs here even when the file names a server.
    remote = args.remote or (None if args.master else settings.get("remote"))
    master = args.master or (None if remote else settings.get("master"))
    _require_extra()
    from . import jobs  # noqa: PLC0415 - deferred: PySpark, pandas, pyarrow

    chosen = list(jobs.JOBS) if args.jobs is None else jobs.parse_jobs(args.jobs, flag="--jobs")
    if not args.debug:  # Py4J logs a lost JVM at length; the failure is told in one line anyway
        logging.getLogger("py4j").setLevel(logging.CRITICAL)
    # The bout job gives each group's final bout (document and summary, as Python values) to bout_writer;
    # with --statsbook they are kept, and each group's statsbook written once the run is done.
    bouts: list[tuple[str, Any, dict[str, Any]]] = []
    bout_writer = None
    if args.statsbook is not None:
        if "bout" not in chosen:
            raise ConfigError("--statsbook needs the bout job (--jobs bout, or every job)")
        _statsbook_place(args.statsbook)  # refused before Spark starts

        def bout_writer(group: str, root: Any, bout: dict[str, Any]) -> None:
            bouts.append((group, root, bout))
    summary = jobs.run_session(args.input, args.output, jobs=chosen, master=master, remote=remote, conf=conf,
                               window_seconds=args.window, progress=None if args.quiet else _progress,
                               log_level="WARN" if args.debug else "OFF", stacks=args.debug, bout_writer=bout_writer)
    books = _write_statsbooks(args.statsbook, bouts) if args.statsbook is not None else []
    if args.json:  # the findings whole: headline numbers, the lines, the rows behind them (None: job not run)
        found = asdict(summary) | {"converged": summary.converged, "findings": summary.lines(), "output": args.output,
                                   "statsbooks": books}
        print(json.dumps(found, indent=2, default=str))
    else:
        for line in summary.lines():
            print(line)
        print(f"tables and report.html in {args.output}: {', '.join(summary.tables)}")
        if summary.bout_files:
            print(f"the final bout (document, summary): {', '.join(summary.bout_files)}")
        if args.statsbook is not None:
            print(f"the statsbook: {', '.join(books)}" if books else "the statsbook: not written (no bout in the logs)")
    return 0 if summary.converged is not False else EXIT_NOT_CONVERGED


def _statsbook_place(path: Path) -> None:
    """``--statsbook``'s file can be written (else an output error, before Spark starts)."""
    from ..statsbook.workbook import StatsbookOutputError, check_output  # noqa: PLC0415 - openpyxl: when asked

    try:
        check_output(path)
    except StatsbookOutputError as exc:
        raise OutputError(str(exc)) from None


def _write_statsbooks(path: Path, bouts: list[tuple[str, Any, dict[str, Any]]]) -> list[str]:
    """Each group's statsbook (docs/statsbook.md): ``path`` for one group; with several,
    ``STEM-GROUP.xlsx`` beside it for each.  The files written."""
    from ..statsbook.workbook import StatsbookOutputError, write_statsbook  # noqa: PLC0415 - openpyxl: when asked

    written = []
    for group, root, bout in bouts:
        target = path if len(bouts) == 1 else path.with_name(f"{path.stem}-{group}{path.suffix or '.xlsx'}")
        try:
            write_statsbook(root, bout, target)
        except StatsbookOutputError as exc:
            raise OutputError(str(exc)) from None
        written.append(str(target))
    return written
