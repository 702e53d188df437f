#!/usr/bin/env python3
"""The main demo: exactly-once Kafka -> Delta, one injected driver crash, the harness's verdict.

``spark-ext check`` on ``exactly_once_delta``: clean, killed after the sink's commit of batch 1
and restarted; prints ``precise`` and the HTML report's path.

    .venv/bin/python scripts/demo_recovery.py [--profile local] [--jobs exactly_once_delta ...]
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from jobs import cli, registry  # noqa: E402
from spark_ext.config import load_profile  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="local")
    parser.add_argument("--jobs", nargs="+", default=["exactly_once_delta"])
    args = parser.parse_args(argv)
    logging.getLogger("kafka").setLevel(logging.WARNING)
    for name in args.jobs:
        case = registry.get(name)
        print(f"\n== {name}: {case.description}")
        print(f"   clean run, then a run killed with SIGKILL at {case.crash.describe()},")
        print("   restarted from its checkpoint; the two outputs are compared\n")
    root = load_profile(args.profile).paths.resolved_data_root() / "demo_recovery"
    return cli.main(
        [
            *("check", *args.jobs, "--profile", args.profile),
            *("--workdir", str(root / "runs"), "--report", str(root / "report")),
        ]
    )


if __name__ == "__main__":
    sys.exit(main())
