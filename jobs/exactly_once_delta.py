"""Kafka -> Delta, exactly once: JSON events parsed and appended by an exactly-once Delta sink.

Guarantees: every record read ``read_committed`` becomes exactly one row (malformed JSON as
null fields, no quarantine), one Delta version per batch, across SIGKILLs and restarts from
``--checkpoint``; ``--mode two_phase`` (executors stage Parquet, delta-rs commits) or
``idempotent`` (``txnAppId``/``txnVersion``). Does not guarantee: row order; exactly-once if
``--sink-id`` or ``--checkpoint`` change between runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming import StreamingQuery

from connectors import kafka
from jobs.startup import job_parser, location, start_job
from spark_ext.quarantine import EVENT_SCHEMA

if TYPE_CHECKING:
    from connectors.sinks import DeltaMode


def parse_events(raw: DataFrame) -> DataFrame:
    """Stamped Kafka rows -> event columns plus source coordinates (no clock, no randomness)."""
    parsed = F.from_json("value", EVENT_SCHEMA)
    fields = [parsed[c].alias(c) for c in ("event_id", "user_id", "amount", "event_time")]
    return raw.select(*fields, "topic", "partition", "offset")


def events_stream(
    spark: SparkSession, bootstrap: str, topic: str, max_offsets_per_trigger: int | None
) -> DataFrame:
    """The topic's events, parsed, with their source coordinates (deterministic per batch)."""
    return parse_events(kafka.read_stream(spark, bootstrap, topic, max_offsets_per_trigger))


def start(
    events: DataFrame, table: str, checkpoint: str, sink_id: str, mode: DeltaMode = "two_phase"
) -> StreamingQuery:
    """Append ``events`` (:func:`events_stream`) to ``table`` exactly once (``availableNow``)."""
    from connectors.sinks import Trigger, exactly_once_to_delta

    return exactly_once_to_delta(
        events,
        table,
        sink_id=sink_id,
        checkpoint=checkpoint,
        mode=mode,
        trigger=Trigger(available_now=True),
    )


def main(argv: list[str] | None = None) -> int:
    parser = job_parser(__doc__.splitlines()[0], topic="events", out=False)
    parser.add_argument("--table", type=location, required=True)
    parser.add_argument("--checkpoint", type=location, required=True)
    parser.add_argument("--sink-id", required=True)
    parser.add_argument("--mode", choices=["two_phase", "idempotent"], default="two_phase")
    args = parser.parse_args(argv)
    job = start_job(args, "eo")
    events = parse_events(job.source())
    start(events, args.table, args.checkpoint, args.sink_id, args.mode).awaitTermination()
    job.print_tables("exactly_once_delta", events=args.table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
