#!/usr/bin/env python3
"""Run named benchmarks and print their figures as one table, with ratios.

Usage::

    scripts/bench.sh                 # list the benchmarks
    scripts/bench.sh ingest          # run one (or several) by name
    scripts/bench.sh all

A benchmark is a module ``scripts/benchmarks/<name>.py`` with a docstring and
``run(ctx: BenchContext) -> list[Figure]``. Figures of one benchmark that share a ``metric`` are
compared against the one marked ``baseline=True`` (Spark's own operator, measured in the same
run). A benchmark prints figures; it is never a timed test.
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

from benchmarks.common import BenchContext, Figure, format_table  # noqa: E402

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
    args = parser.parse_args()
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
    figures: list[Figure] = []
    for name in names:
        module = importlib.import_module(f"benchmarks.{name}")
        print(f"== {name}: {known[name]}", flush=True)
        got = module.run(ctx)
        print(format_table(got), flush=True)
        figures.extend(got)
    if len(names) > 1:
        print("== all")
        print(format_table(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
