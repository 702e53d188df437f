"""Kafka -> Delta, exactly once: JSON events parsed and appended by an exactly-once Delta sink.

Guarantees: every record read ``read_committed`` becomes exactly one row (malformed JSON as
null fields, no quarantine), one Delta version per batch, across SIGKILLs and restarts from
``--checkpoint``; ``--mode two_phase`` (executors stage Parquet, delta-rs commits) or
``idempotent`` (``txnAppId``/``txnVersion``). Does not guarantee: row order; exactly-once if
``--sink-id`` or ``--checkpoint`` change between runs.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from connectors import kafka
from jobs.startup import job_parser, print_tables, start_job
from spark_ext.quarantine import EVENT_SCHEMA

if TYPE_CHECKING:
    from connectors.sinks import DeltaMode

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


def start(
    spark: SparkSession,
    bootstrap: str,
    topic: str,
    table: Path,
    checkpoint: Path,
    sink_id: str,
    mode: DeltaMode = "two_phase",
    max_offsets_per_trigger: int | None = None,
) -> StreamingQuery:
    """Start the query (``availableNow``: it stops when the topic is read to its end)."""
    from connectors.sinks import Trigger, exactly_once_to_delta

    return exactly_once_to_delta(
        events_stream(spark, bootstrap, topic, max_offsets_per_trigger),
        table,
        sink_id=sink_id,
        checkpoint=checkpoint,
        mode=mode,
        trigger=Trigger(available_now=True),
    )


def main(argv: list[str] | None = None) -> int:
    parser = job_parser(__doc__.splitlines()[0], topic="events", out=False)
    parser.add_argument("--table", type=Path, required=True)
    parser.add_argument("--checkpoint", type=Path, required=True)
    parser.add_argument("--sink-id", required=True)
    parser.add_argument("--mode", choices=["two_phase", "idempotent"], default="two_phase")
    args = parser.parse_args(argv)
    job = start_job(args, "eo")
    spark = job.spark
    start(
        spark,
        job.bootstrap,
        args.topic,
        args.table,
        args.checkpoint,
        args.sink_id,
        args.mode,
        args.max_offsets_per_trigger,
    ).awaitTermination()
    print_tables(spark, "exactly_once_delta", events=args.table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
