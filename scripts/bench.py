#!/usr/bin/env python3
"""Run named benchmarks and print their figures as one table, with ratios.

Usage: ``scripts/bench.sh`` lists them, ``scripts/bench.sh NAME [--repeat 5] [--scale 0.1]``
runs some (or ``all``). A benchmark is ``scripts/benchmarks/<name>.py`` with a docstring and
``run(ctx: BenchContext) -> list[Figure]``; how figures are compared: README, "Benchmarks".
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from benchmarks.common import BenchContext, Figure, LoadMonitor, format_table, summarize  # noqa: E402

BENCH_DIR = ROOT / "scripts" / "benchmarks"


def available() -> dict[str, str]:
    """Benchmark name -> the first line of its docstring."""
    names = sorted(p.stem for p in BENCH_DIR.glob("*.py") if p.stem not in {"__init__", "common"})
    return {
        n: (importlib.import_module(f"benchmarks.{n}").__doc__ or "").split("\n")[0] for n in names
    }


def main() -> int:
    parser = argparse.ArgumentParser(description="Run named benchmarks.")
    parser.add_argument("names", nargs="*", help="benchmark names, or 'all'")
    parser.add_argument("--scale", type=float, default=1.0, help="input size factor (0.1: quick)")
    parser.add_argument(
        "--repeat", type=int, default=3, help="runs, variants interleaved; the median and min-max"
    )
    parser.add_argument(
        "--storage", choices=("local", "s3"), default="local", help="tables on local disk or S3"
    )
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error("--repeat must be >= 1")
    logging.basicConfig(level=logging.WARNING)
    known = available()
    if not args.names:
        for name, doc in known.items():
            print(f"{name:24} {doc}")
        return 0
    names = list(known) if args.names == ["all"] else args.names
    unknown = [n for n in names if n not in known]
    if unknown:
        parser.error(f"unknown benchmark(s) {unknown}; known: {sorted(known)}")
    ctx = BenchContext(scale=args.scale, storage=args.storage)
    runs: list[list[Figure]] = [[] for _ in range(args.repeat)]
    with LoadMonitor() as load:
        print(load.verdict(), flush=True)
        for run in range(args.repeat):
            for name in names:
                module = importlib.import_module(f"benchmarks.{name}")
                print(f"== {name} (run {run + 1}/{args.repeat}): {known[name]}", flush=True)
                got = module.run(ctx)
                print(format_table(got), flush=True)
                runs[run].extend(got)
    print(f"== median of {args.repeat} runs, variants interleaved")
    print(format_table(summarize(runs)))
    print(load.verdict())
    return 0


if __name__ == "__main__":
    sys.exit(main())
