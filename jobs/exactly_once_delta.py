"""Kafka -> Delta, exactly once: JSON events parsed and appended by an exactly-once Delta sink.

Run (spark-submit template)::

    python -m jobs.exactly_once_delta --profile local --topic events \\
        --table var/data/eo/events --checkpoint var/data/eo/_chk/events \\
        --sink-id events --mode two_phase

Guarantees: every record of the topic read ``read_committed`` becomes exactly one row of the
table (malformed JSON included, with null fields: this template does not quarantine), across
any number of SIGKILLs of the job and restarts from ``--checkpoint``; each micro-batch appears
as one Delta version. ``--mode two_phase`` stages Parquet files on the executors and commits
them with delta-rs on the driver; ``--mode idempotent`` uses Spark's Delta writer in
``foreachBatch`` with ``txnAppId``/``txnVersion``.
Does not guarantee: row order in the table; exactly-once if ``--sink-id`` or ``--checkpoint``
change between runs.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from connectors import kafka
from spark_ext.quarantine import EVENT_SCHEMA

log = logging.getLogger(__name__)


def parse_events(raw: DataFrame) -> DataFrame:
    """Stamped Kafka rows -> event columns plus source coordinates (no clock, no randomness)."""
    parsed = F.from_json("value", EVENT_SCHEMA)
    return raw.select(
        parsed["event_id"].alias("event_id"),
        parsed["user_id"].alias("user_id"),
        parsed["amount"].alias("amount"),
        parsed["event_time"].alias("event_time"),
        "topic",
        "partition",
        "offset",
    )


def events_stream(
    spark: SparkSession, bootstrap: str, topic: str, max_offsets_per_trigger: int | None
) -> DataFrame:
    """The topic's events, parsed, with their source coordinates (deterministic per batch)."""
    raw = kafka.read_stream(
        spark, bootstrap, topic, max_offsets_per_trigger=max_offsets_per_trigger
    )
    return parse_events(raw)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="local")
    parser.add_argument("--bootstrap", default=None, help="overrides the profile's brokers")
    parser.add_argument("--topic", default="events")
    parser.add_argument("--table", type=Path, required=True)
    parser.add_argument("--checkpoint", type=Path, required=True)
    parser.add_argument("--sink-id", required=True)
    parser.add_argument("--mode", choices=["two_phase", "idempotent"], default="two_phase")
    parser.add_argument("--max-offsets-per-trigger", type=int, default=None)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")

    from connectors.sinks import Trigger, exactly_once_to_delta
    from spark_ext.config import load_profile
    from spark_ext.metrics import ProgressListener
    from spark_ext.session import build_session

    profile = load_profile(args.profile)
    spark = build_session(profile)
    ProgressListener.attach(spark)
    bootstrap = args.bootstrap or profile.kafka.bootstrap_servers
    events = events_stream(spark, bootstrap, args.topic, args.max_offsets_per_trigger)
    query = exactly_once_to_delta(
        events,
        args.table,
        sink_id=args.sink_id,
        checkpoint=args.checkpoint,
        mode=args.mode,
        trigger=Trigger(available_now=True),
    )
    query.awaitTermination()
    rows = spark.read.format("delta").load(str(args.table)).count()
    print(f"table {args.table}: {rows} rows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
