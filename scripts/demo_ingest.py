#!/usr/bin/env python3
"""The first pipeline demo: events into Kafka, the ingest job, the Delta tables' row counts."""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from connectors.demo_events import produce_events  # noqa: E402
from connectors.kafka import create_topic  # noqa: E402
from jobs import ingest_events  # noqa: E402
from spark_ext.config import load_profile  # noqa: E402


def main() -> int:
    profile = load_profile("local")
    bootstrap = profile.kafka.configure_clients()
    topic = f"demo-events-{int(time.time())}"
    out = profile.paths.resolved_data_root() / "demo"
    shutil.rmtree(out, ignore_errors=True)
    create_topic(bootstrap, topic, partitions=3)
    n = produce_events(bootstrap, topic, 10_000, malformed_every=100)
    print(f"demo: produced {n} events to {topic} (1 in 100 malformed)")
    return ingest_events.main(["--profile", "local", "--topic", topic, "--out", str(out)])


if __name__ == "__main__":
    sys.exit(main())
