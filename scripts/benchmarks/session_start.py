"""Driver start-up with and without the class-data archive: a session plus its first job, each in a fresh process.

docs/design.md, "JVM start-up". Run after ``scripts/class_archive.py``:
``scripts/bench.sh session_start --repeat 3`` (runs alternate, medians of them).
"""

from __future__ import annotations

import subprocess
import sys

from benchmarks.common import ROOT, BenchContext, Figure

ONE = """
import sys, time
from spark_ext.session import build_session
t = time.monotonic()
spark = build_session("test", spark={"class_archive": sys.argv[1] == "on"})
spark.range(100).selectExpr("id % 3 as k").groupBy("k").count().collect()
print(time.monotonic() - t)
spark.stop()
"""


def run(ctx: BenchContext) -> list[Figure]:
    figures = []
    for mode in ("off", "on"):
        out = subprocess.run(
            [sys.executable, "-c", ONE, mode], cwd=ROOT, capture_output=True, text=True, check=True
        )
        seconds = float(out.stdout.split()[-1])
        figures.append(Figure("session_start", f"archive {mode}", "session + first job", seconds,
                              "s", baseline=mode == "off"))  # fmt: skip
    return figures
