#!/usr/bin/env python3
"""Run every huddle benchmark in sequence and summarise the TARGET lines.

Each benchmark runs as its own process (``python bench/NAME.py``, or the
script and arguments VARIANTS names for NAME) with the same interpreter;
its output is shown as it comes, and its TARGET, CHECK and RESULT (a figure
with no target) lines are repeated in the summary.
``--quick`` is passed on to each (fewer repetitions).  The exit status is 1
if a benchmark failed to run or a correctness CHECK failed (e.g. a lost
message); a performance target that is missed is reported but does not
change the exit status unless ``--strict`` is given.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
# The mesh benchmark runs last: its 32 processes leave the load average high for a minute.
BENCHMARKS = ["chat_throughput", "chat_throughput_secure", "round_trip", "round_trip_secure", "crash_detection",
              "log_throughput", "catch_up", "doc_rebuild", "addressed", "addressed_loss", "guest_events",
              "posts_transfer", "mesh_formation"]
# Entries that run another entry's script with arguments: issue 22's targets with a group secret.
VARIANTS: dict[str, tuple[str, list[str]]] = {
    "chat_throughput_secure": ("chat_throughput", ["--secure"]),
    "round_trip_secure": ("round_trip", ["--secure"]),
}


def command(name: str, quick: bool) -> list[str]:
    """The command line of benchmark ``name``."""
    script, extra = VARIANTS.get(name, (name, []))
    return [sys.executable, str(HERE / f"{script}.py"), *extra] + (["--quick"] if quick else [])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer repetitions in every benchmark")
    parser.add_argument("--only", action="append", choices=BENCHMARKS, metavar="NAME",
                        help=f"run only this benchmark (repeatable): {', '.join(BENCHMARKS)}")
    parser.add_argument("--strict", action="store_true", help="exit 1 if a target is missed too")
    args = parser.parse_args(argv)
    summary: list[str] = []
    failed: list[str] = []
    timings: list[tuple[str, float]] = []
    start = time.monotonic()
    for name in args.only or BENCHMARKS:
        cmd = command(name, args.quick)
        print(f"\n$ {' '.join(cmd)}", flush=True)
        t0 = time.monotonic()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, bufsize=1)
        assert proc.stdout is not None
        for line in proc.stdout:
            print(line, end="", flush=True)
            if line.startswith(("TARGET ", "CHECK ", "RESULT ")):
                summary.append(line.rstrip())
        code = proc.wait()
        timings.append((name, time.monotonic() - t0))
        if code != 0:
            failed.append(f"{name} (exit {code})")
    print("\n== summary")
    for line in summary:
        print(line)
    print("   time: " + ", ".join(f"{n} {t:.0f} s" for n, t in timings) + f"; total {time.monotonic() - start:.0f} s")
    if failed:
        print("FAILED: " + ", ".join(failed))
    missed = [s for s in summary if s.endswith(("MISS", "FAIL"))]
    if failed or any(s.endswith("FAIL") for s in summary):
        return 1
    return 1 if args.strict and missed else 0


if __name__ == "__main__":
    sys.exit(main())
