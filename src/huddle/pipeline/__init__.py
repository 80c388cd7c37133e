"""The audit pipeline on Apache Spark: exported node logs in, Parquet tables out.

Pure transforms live in :mod:`.transforms`, schemas in :mod:`.schemas`,
reading and writing in :mod:`.io`; :mod:`.session` is the only place a
SparkSession is made, and :mod:`.jobs` strings them together (and gives each
job as a function of DataFrames, for a notebook).  :mod:`.errors` and
:mod:`.command` (``huddle pipeline``) import no PySpark: the extra is
optional, so the package loads its parts when first asked for them.  Nothing
here imports the node's runtime.  docs/pipeline.md describes the tables.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["JOBS", "SparkSetupError", "Summary", "run", "run_session", "start_session"]

_LAZY = {"JOBS": "jobs", "Summary": "jobs", "run": "jobs", "run_session": "jobs", "start_session": "session",
         "SparkSetupError": "errors"}


def __getattr__(name: str) -> Any:
    """``huddle.pipeline.run`` and the rest, imported (with PySpark) on first use."""
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
