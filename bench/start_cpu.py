"""A node's start-up: CPU and wall time of one ``huddle node`` to its ``api`` line, and of
``huddle --help``, for one or more source trees, interleaved run by run.

Each run starts a node on a fresh data directory (API and ROUTER on 127.0.0.1, no beacon,
one seed that answers nothing) and reads its CPU (``/proc/PID/stat`` utime + stime) the
moment its ``api`` line is read; then it runs ``huddle --help`` (CPU of the child from
``getrusage``).  The trees are taken in turn within each run, so a change of load falls on
all of them.  Whether a tree's bytecode exists is the tree's business (this script compiles
nothing): compare like with like, or say which.

    python bench/start_cpu.py --runs 7 /tmp/before/src src
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import benchlib

TICK = os.sysconf("SC_CLK_TCK")


def node_start(tree: Path, data_dir: Path) -> tuple[float, float]:
    """(wall s, CPU s) of one node, from launch to its api line."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    cmd = [sys.executable, "-m", "huddle", "node", "--name", data_dir.name, "--group", "bench",
           "--data-dir", str(data_dir), "--interface", "lo", "--api", "127.0.0.1:0", "--log-level", "warning",
           "--no-beacon", "--seed", "127.0.0.1:9", "--open"]  # open, as measured before: no secret to derive
    started = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, env=env)
    assert proc.stdout is not None
    try:
        line = proc.stdout.readline()
        wall = time.monotonic() - started
        fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        cpu = (int(fields[11]) + int(fields[12])) / TICK
    finally:
        proc.kill()
        proc.wait()
    if not line.startswith(b"api "):
        raise RuntimeError(f"{tree}: the node printed {line!r}, not its api line")
    return wall, cpu


def help_run(tree: Path) -> tuple[float, float]:
    """(wall s, CPU s) of ``huddle --help``."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.monotonic()
    subprocess.run([sys.executable, "-m", "huddle", "--help"], stdout=subprocess.DEVNULL, check=True, env=env)
    wall = time.monotonic() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("trees", nargs="+", type=Path, help="directories that hold a huddle package (src/)")
    parser.add_argument("--runs", type=int, default=5, help="runs per tree (default 5)")
    args = parser.parse_args(argv)
    benchlib.header("A node's start-up: CPU to its api line, and `huddle --help`", runs=args.runs)
    figures: dict[Path, list[list[float]]] = {t: [[], [], [], []] for t in args.trees}
    with tempfile.TemporaryDirectory(prefix="huddle-bench-") as tmp:
        for run in range(args.runs):
            for k, tree in enumerate(args.trees):
                for column, value in enumerate((*node_start(tree, Path(tmp) / f"n{k}-{run}"), *help_run(tree))):
                    figures[tree][column].append(value * 1000)
    rows = [[str(t), *(benchlib.median(f) for f in figures[t])] for t in args.trees]
    benchlib.print_table(["tree", "node wall ms", "node CPU ms", "--help wall ms", "--help CPU ms"], rows)
    print(f"   medians of {args.runs} runs; node CPU per run: " + "; ".join(
        f"{t.name if t.name != 'src' else t.parent.name}: {' '.join(f'{x:.0f}' for x in figures[t][1])}"
        for t in args.trees))
    benchlib.footer()
    return 0


if __name__ == "__main__":
    sys.exit(main())
