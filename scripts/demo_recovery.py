#!/usr/bin/env python3
"""The main demo: exactly-once Kafka -> Delta, one injected driver crash, the harness's verdict.

Produces demo events to a fresh topic, runs ``jobs/exactly_once_delta.py`` (two-phase Delta
sink) once clean, once killed with SIGKILL right after the sink's commit of batch 1 (before
Spark's commit log, so Spark replays that batch) and restarted from its checkpoint, then
compares the two tables and prints the recovery table -- ``precise`` -- and the path of the
HTML report with its plot.

    .venv/bin/python scripts/demo_recovery.py [--profile local] [--jobs exactly_once_delta ...]
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from connectors.kafka.local_broker import LocalKafkaBroker  # noqa: E402
from jobs import registry  # noqa: E402
from spark_ext.config import load_profile  # noqa: E402
from spark_ext.recovery import RecoveryHarness, format_table, write_report  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="local")
    parser.add_argument("--jobs", nargs="+", default=["exactly_once_delta"])
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    logging.getLogger("kafka").setLevel(logging.WARNING)

    profile = load_profile(args.profile)
    bootstrap = profile.kafka.bootstrap_servers
    if bootstrap == LocalKafkaBroker().config.bootstrap_servers:
        LocalKafkaBroker().ensure_running()
    root = profile.paths.resolved_data_root() / "demo_recovery"
    harness = RecoveryHarness(root / "runs", bootstrap, profile=args.profile)

    results = []
    for name in args.jobs:
        case = registry.get(name)
        print(f"\n== {name}: {case.description}")
        print(f"   clean run, then a run killed with SIGKILL at {case.crash.describe()},")
        print("   restarted from its checkpoint; the two outputs are compared\n")
        results.extend(harness.check(case))

    index = write_report(results, root / "report")
    print()
    print(format_table(results))
    print(f"\nreport: {index}")
    return 0 if all(r.as_expected for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
