"""The file to give spark-submit: ``huddle pipeline run`` with the same flags.

    spark-submit --master yarn --archives huddle-env.tar.gz#env \\
        "$(python -c 'import huddle.pipeline.submit as m; print(m.__file__)')" \\
        --input hdfs:///logs/day1 --output hdfs:///audit/day1

Without ``--master`` the session takes the master and driver settings that
spark-submit was given (README, "The audit pipeline").
"""

from __future__ import annotations

import sys

from huddle.cli import main

if __name__ == "__main__":
    sys.exit(main(["pipeline", "run", *sys.argv[1:]]))
