"""Driver start-up with and without the class-data archive (docs/design.md, "JVM start-up"):
a session plus its first job, each in a fresh process, alternating, medians of ``--runs``.

Usage: python scripts/benchmarks/session_start.py [--runs 3] (after scripts/class_archive.py)
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

ONE = """
import sys, time
from spark_ext.session import build_session
t = time.monotonic()
spark = build_session("test", spark={"class_archive": sys.argv[1] == "on"})
spark.range(100).selectExpr("id % 3 as k").groupBy("k").count().collect()
print(time.monotonic() - t)
spark.stop()
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    runs = parser.parse_args().runs
    seconds: dict[str, list[float]] = {"on": [], "off": []}
    for _ in range(runs):
        for mode in seconds:
            out = subprocess.run(
                [sys.executable, "-c", ONE, mode], cwd=ROOT, capture_output=True, text=True
            )
            seconds[mode].append(float(out.stdout.split()[-1]))
    on, off = (statistics.median(seconds[m]) for m in ("on", "off"))
    for mode, values in seconds.items():
        print(
            f"archive {mode:3}: median {statistics.median(values):.2f} s "
            f"(min {min(values):.2f}, max {max(values):.2f}, {runs} runs)"
        )
    print(f"ratio on/off: {on / off:.2f}")


if __name__ == "__main__":
    main()
