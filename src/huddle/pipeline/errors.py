"""What goes wrong in a pipeline run, by kind, each kind with its exit status.

Importable without PySpark (so is the package: ``huddle.pipeline`` loads its
parts when first asked), so ``huddle pipeline`` can tell a node without the
``pipeline`` extra how to install it.  The statuses (docs/pipeline.md, "Errors
and exit statuses"):

======  =====================================================================
0       done, and the nodes converged (or convergence was not asked for)
1       something else failed (a bug: one line; ``--debug`` for the stack)
2       bad usage: a flag or setting (``--jobs``, ``--window``, ``--conf``)
3       done, and the nodes did NOT converge
4       bad input: none found, not Parquet or JSON Lines, corrupt, wrong schema
5       bad output: ``--output`` is a file, or cannot be written
6       Spark cannot start or be reached: no ``pipeline`` extra, no Java, a bad
        ``--master``
======  =====================================================================
"""

from __future__ import annotations

import importlib
import re
from typing import ClassVar

from ..errors import HuddleError

__all__ = [
    "EXIT_FAILED", "EXIT_NOT_CONVERGED", "EXIT_USAGE", "EXTRA_MODULES", "INSTALL", "InputError", "OutputError",
    "PipelineError", "SparkSetupError", "first_line", "missing_modules",
]

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_NOT_CONVERGED = 3

# The optional extra the pipeline needs (pyproject: huddle[pipeline]); a node runs without it.
EXTRA_MODULES = ("pyspark", "pandas", "pyarrow")
INSTALL = "pip install 'huddle[pipeline]' (PySpark, pandas, pyarrow; Spark also needs Java 17+)"


class PipelineError(HuddleError):
    """A run cannot go on; ``exit_status`` says whose side it is on."""

    exit_status: ClassVar[int] = EXIT_FAILED


class InputError(PipelineError):
    """An input path is missing, holds no exported table, or a table is corrupt or breaks its schema."""

    exit_status: ClassVar[int] = 4


class OutputError(PipelineError):
    """The output path cannot hold the tables: it is a file, or cannot be written."""

    exit_status: ClassVar[int] = 5


class SparkSetupError(PipelineError):
    """Spark cannot start here (no PySpark, no Java, too old a Java) or cannot be reached (a bad master)."""

    exit_status: ClassVar[int] = 6


def missing_modules() -> list[str]:
    """The modules of the ``pipeline`` extra this interpreter cannot import (none: all there)."""
    missing = []
    for name in EXTRA_MODULES:
        try:  # imported, not only found: an install that cannot load is as good as none
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    return missing


def first_line(exc: BaseException) -> str:
    """The root cause of a Spark error in one line (the JVM's last 'Caused by:'), not its stack."""
    text = str(exc).strip()
    causes = [line.split("Caused by:", 1)[1].strip() for line in text.splitlines() if "Caused by:" in line]
    line = causes[-1] if causes else (text.splitlines()[0] if text else type(exc).__name__)
    return re.sub(r"^[\w.$]+(Exception|Error): ", "", line)[:400]
