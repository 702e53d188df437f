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

from benchmarks.common import (  # noqa: E402
    BenchContext,
    Figure,
    LoadMonitor,
    format_summary,
    format_table,
    summarize,
)

BENCH_DIR = ROOT / "scripts" / "benchmarks"


def available() -> dict[str, str]:
    names = {}
    for path in sorted(BENCH_DIR.glob("*.py")):
        if path.stem in {"__init__", "common"}:
            continue
        module = importlib.import_module(f"benchmarks.{path.stem}")
        names[path.stem] = (module.__doc__ or "").strip().splitlines()[0]
    return names


def main() -> int:
    parser = argparse.ArgumentParser(description="Run named benchmarks.")
    parser.add_argument("names", nargs="*", help="benchmark names, or 'all'")
    parser.add_argument(
        "--scale",
        type=float,
        default=1.0,
        help="multiply every benchmark's input size (e.g. 0.1 for a quick look)",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=3,
        help="runs of every benchmark (each runs all its variants, so they are interleaved); "
        "the table gives the median with min-max",
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
    ctx = BenchContext.create(scale=args.scale)
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
    print(format_summary(summarize(runs)))
    print(load.verdict())
    return 0


if __name__ == "__main__":
    sys.exit(main())
