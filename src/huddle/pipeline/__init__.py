"""The audit pipeline on Apache Spark: exported node logs in, Parquet tables out.

Pure transforms live in :mod:`.transforms`, schemas in :mod:`.schemas`,
reading and writing in :mod:`.io`; :mod:`.session` is the only place a
SparkSession is made, and :mod:`.jobs` strings them together.  Nothing here
imports the node's runtime.  docs/pipeline.md describes the tables.
"""

from __future__ import annotations

from .jobs import JOBS, Summary, run, run_session
from .session import SparkSetupError, start_session

__all__ = ["JOBS", "SparkSetupError", "Summary", "run", "run_session", "start_session"]
