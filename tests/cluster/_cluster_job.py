"""Run by tests/cluster/test_isolated_hosts.py on the isolated cluster, one driver for two
checks: the driver writes a file locally, tasks look for it and one reads it; then the
two-phase Delta sink writes the demo events to a table on the cluster's S3 store. Prints one
JSON line with what the tasks saw."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from connectors.sinks import Trigger, exactly_once_to_delta
from jobs.exactly_once_delta import events_stream
from spark_ext.config import load_profile
from spark_ext.session import build_session


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--profile", required=True)
    parser.add_argument("--file", required=True, type=Path)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--table", required=True)  # an s3a:// URI
    parser.add_argument("--checkpoint", required=True)
    args = parser.parse_args(argv)
    path = str(args.file)
    args.file.write_text("written by the driver")
    spark = build_session(args.profile)
    sc = spark.sparkContext
    seen = (
        sc.parallelize(range(8), 8)
        .map(lambda _: (os.environ.get("SPARK_LOCAL_IP"), os.path.exists(path)))
        .distinct()
        .collect()
    )
    try:
        read = sc.parallelize([0], 1).map(lambda _: Path(path).read_text()).collect()[0]
    except Exception as exc:  # the task's error, as Spark reports it on the driver
        read = f"failed: {'FileNotFoundError' if 'FileNotFoundError' in str(exc) else exc}"
    driver = args.file.read_text()
    print("PROBE " + json.dumps({"seen": sorted(seen), "read": read, "driver": driver}))
    bootstrap = load_profile(args.profile).kafka.bootstrap_servers
    query = exactly_once_to_delta(
        events_stream(spark, bootstrap, args.topic, None),
        args.table,
        sink_id="events",
        checkpoint=args.checkpoint,
        mode="two_phase",
        trigger=Trigger(available_now=True),
    )  # no storage=: the profile's [storage], the cluster's store
    query.awaitTermination()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
